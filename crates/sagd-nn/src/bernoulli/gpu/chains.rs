//! SAGD's pass on the device: the chains of every image in one pass over all their rows, as the
//! CPU's `sagd_batch` steps them: started from the encoder's draws (or, for chains that persist,
//! where the image's last visit left them, as `sagd_batch_continued`), stepped by the core's
//! Langevin program (one launch per operation), and the generator's gradient at their last states.

use super::*;
use crate::cuda::{launch, DeviceDecoder};
use crate::program::{carry_out, ChainBuffers, Parts};

/// The pass's chains, one state stepped in place, as the program's interpreter reads them.
struct InPlace<'a> {
    gpu: &'a Gpu,
    b: &'a mut Buffers,
    m: &'a BernoulliVae,
    s: Shape,
}

impl ChainBuffers<Gpu> for InPlace<'_> {
    fn parts(&mut self) -> Parts<'_, CudaSlice<f32>> {
        let Buffers {
            u: Some(u),
            gu: Some(gu),
            rho: Some(rho),
            noise: Some(noise),
            ..
        } = &mut *self.b
        else {
            unreachable!("made by the pass");
        };
        Parts {
            start: None,
            x: u,
            g: gu,
            rho,
            noise,
        }
    }

    fn evaluate(&mut self) -> GpuResult<()> {
        GpuPasses::posterior_gradient(self.gpu, self.b, self.m, self.s)
    }

    fn refresh(&mut self, _: std::ops::Range<usize>) -> GpuResult<()> {
        Err(GpuError::Settings(
            "SAGD's chains on a GPU run drifts, kicks, exact flows and evaluations, not a \
             refresh of the momenta: run this scheme with --device cpu"
                .into(),
        ))
    }
}

/// The sizes of one SAGD pass: its images, its chains (rows: C per image) and the values of one
/// block of the chains' state or draws (rows × d).
#[derive(Clone, Copy, Debug)]
struct Shape {
    images: usize,
    rows: usize,
    len: usize,
}

impl Shape {
    /// The values of the noise's draw block `k` (after ε and ρ₀).
    fn block(self, k: usize) -> std::ops::Range<usize> {
        (2 + k) * self.len..(3 + k) * self.len
    }
}

impl GpuPasses {
    pub(crate) fn sagd_pass(
        &mut self,
        m: &BernoulliVae,
        x: &[f32],
        chains: &Chains,
        noise: &[f32],
        carried: Option<&mut Carried>,
    ) -> GpuResult<BatchInfo> {
        let kernel = chains.kernel()?;
        // Chains that persist run every transition whole, their momenta where they continue.
        let program = match carried {
            Some(_) => kernel.unrolled_whole(chains.steps),
            None => kernel.unrolled(chains.steps),
        };
        let (gpu, b, d) = (&self.gpu, &mut self.b, m.d);
        let images = x.len() / m.pixels();
        let rows = chains.per_image * images;
        let s = Shape {
            images,
            rows,
            len: rows * d,
        };
        Self::encode_inputs(gpu, b, m, x, noise)?;
        for (slot, size) in [
            (&mut b.u, s.len),
            (&mut b.u0, s.len),
            (&mut b.rho, s.len),
            (&mut b.gu, s.len),
            (&mut b.dl, rows * m.pixels()),
            (&mut b.ll, rows),
            (&mut b.dist, rows),
            (&mut b.g_gen, m.gen.n_params()),
        ] {
            ensure(gpu, slot, size)?;
        }
        Self::chain_starts(gpu, b, s, d)?;
        if let Some(c) = carried.as_deref() {
            c.check(rows, d)?;
            Self::continue_carried(gpu, b, c, s, d)?;
        }
        Self::run_program(gpu, b, m, s, &program)?;
        Self::gradient_at_last_states(gpu, b, m, s)?;
        b.vae_last = false;
        if let Some(c) = carried {
            let (Some(u), Some(rho)) = (&b.u, &b.rho) else {
                unreachable!("made by the pass");
            };
            c.u.resize(s.len, 0.0);
            c.rho.resize(s.len, 0.0);
            gpu.download_into(u, &mut c.u)?;
            gpu.download_into(rho, &mut c.rho)?;
            c.from = vec![true; rows];
        }
        let ll = sum(self.get(|b| &b.ll, rows)?);
        let dist = sum(self.get(|b| &b.dist, rows)?);
        Ok(BatchInfo {
            loss: -ll / rows as f64,
            displacement: dist / rows as f64,
        })
    }

    /// u = u₀ = μ + σ ε for every chain (from the encoder's output in `ws_enc` and the noise's
    /// first block), and ρ = ρ₀ (its second).
    fn chain_starts(gpu: &Gpu, b: &mut Buffers, s: Shape, d: usize) -> GpuResult<()> {
        let Buffers {
            noise: Some(nz),
            u: Some(u),
            u0: Some(u0),
            rho: Some(rho),
            ws_enc,
            ..
        } = b
        else {
            unreachable!("made by the pass");
        };
        let enc_out = ws_enc.output().expect("forward ran");
        let (ri, bi, di) = (s.rows as i32, s.images as i32, d as i32);
        let eps = nz.slice(..s.len);
        // SAFETY: enc_out holds images × 2d values, the others rows × d.
        unsafe {
            launch!(gpu, "encoder_chain_starts", grid(s.len);
                enc_out, &eps, &mut *u, &mut *u0, &ri, &bi, &di)
        }?;
        gpu.stream
            .memcpy_dtod(&nz.slice(s.len..2 * s.len), &mut rho.slice_mut(..s.len))?;
        Ok(())
    }

    /// The rows `carried` marks start where it holds them: their positions (and u₀, the start
    /// their displacement is measured from) and momenta scattered over the encoder's starts.
    fn continue_carried(
        gpu: &Gpu,
        b: &mut Buffers,
        carried: &Carried,
        s: Shape,
        d: usize,
    ) -> GpuResult<()> {
        let rows: Vec<usize> = (0..s.rows).filter(|&r| carried.from[r]).collect();
        if rows.is_empty() {
            return Ok(());
        }
        let pick = |v: &[f32]| -> Vec<f32> {
            rows.iter()
                .flat_map(|&r| &v[r * d..(r + 1) * d])
                .copied()
                .collect()
        };
        let idx: Vec<i32> = rows.iter().map(|&r| r as i32).collect();
        put(gpu, &mut b.carried_rows, &idx)?;
        put(gpu, &mut b.carried_u, &pick(&carried.u))?;
        put(gpu, &mut b.carried_rho, &pick(&carried.rho))?;
        let Buffers {
            u: Some(u),
            u0: Some(u0),
            rho: Some(rho),
            carried_rows: Some(idx),
            carried_u: Some(cu),
            carried_rho: Some(crho),
            ..
        } = b
        else {
            unreachable!("made by the pass and above");
        };
        let shape = (rows.len(), d);
        gpu.rows_copy(u, cu, idx, shape, true)?;
        gpu.rows_copy(u0, cu, idx, shape, true)?;
        gpu.rows_copy(rho, crho, idx, shape, true)
    }

    /// The core's program of the chains' steps ([`Kernel::unrolled`](sagd::langevin::Kernel)),
    /// as the CPU's pass runs it (`Kernel::run_with_noise`): the posterior's gradient once, then
    /// the program's one interpreter (`program::carry_out`) on (u, ρ) in place, its draws from
    /// the noise's blocks.
    fn run_program(
        gpu: &Gpu,
        b: &mut Buffers,
        m: &BernoulliVae,
        s: Shape,
        program: &[Instruction<f32>],
    ) -> GpuResult<()> {
        if !program.is_empty() {
            Self::posterior_gradient(gpu, b, m, s)?;
        }
        let mut chains = InPlace { gpu, b, m, s };
        carry_out(gpu, &mut chains, program, s.len, |k| s.block(k))
    }

    /// The generator under the Bernoulli law, on the pass's images (chain r of image r mod b).
    fn generator<'a>(
        m: &'a BernoulliVae,
        gen: &'a CudaSlice<f32>,
        x: &'a CudaSlice<f32>,
        s: Shape,
    ) -> DeviceDecoder<'a> {
        DeviceDecoder {
            net: &m.gen,
            params: gen,
            law: DeviceLaw::Bernoulli,
            data: x,
            shape: LikelihoodRows {
                rows: s.rows,
                n: s.images,
                per: 1,
                px: m.pixels(),
            },
        }
    }

    /// gu = ∇u log p(x | u) − u, the posterior's gradient at the chains' states (no Metropolis
    /// test reads its log density).
    fn posterior_gradient(gpu: &Gpu, b: &mut Buffers, m: &BernoulliVae, s: Shape) -> GpuResult<()> {
        let Buffers {
            state: DeviceState { dec: Some(gen), .. },
            x: Some(x),
            u: Some(u),
            gu: Some(gu),
            dl: Some(dl),
            ws_gen,
            ..
        } = b
        else {
            unreachable!("made by the pass");
        };
        Self::generator(m, gen, x, s).posterior(gpu, u, (gu, None), dl, ws_gen)
    }

    /// The generator's gradient of the mean of −log p(x | u) at the chains' last states into
    /// `g_gen`, each row's log-likelihood into `ll` and its distance from its start into `dist`.
    fn gradient_at_last_states(
        gpu: &Gpu,
        b: &mut Buffers,
        m: &BernoulliVae,
        s: Shape,
    ) -> GpuResult<()> {
        let Buffers {
            state: DeviceState { dec: Some(gen), .. },
            x: Some(x),
            u: Some(u),
            u0: Some(u0),
            dl: Some(dl),
            ll: Some(ll),
            dist: Some(dist),
            g_gen: Some(gg),
            ws_gen,
            ..
        } = b
        else {
            unreachable!("made by the pass");
        };
        let g = (&mut *gg, Some(&mut *ll), -1.0 / s.rows as f32);
        Self::generator(m, gen, x, s).theta_gradient(gpu, u, g, dl, ws_gen)?;
        let (ri, di) = (s.rows as i32, m.d as i32);
        // SAFETY: u and u0 hold rows × d values, dist rows.
        unsafe { launch!(gpu, "row_distance", grid(s.rows); &*u, &*u0, &mut *dist, &ri, &di) }?;
        Ok(())
    }
}
