//! SAGD's pass on the device: the chains of every image in one pass over all their rows, as the
//! CPU's `sagd_batch` steps them: started from the encoder's draws (or, for chains that persist,
//! where the image's last visit left them, as `sagd_batch_continued`), stepped by the core's
//! Langevin program (one launch per operation), and the generator's gradient at their last states.

use super::*;
use crate::cuda::{launch, uploaded, DeviceDecoder};
use crate::program::{carry_out, ChainBuffers, Parts};

/// SAGD's pass's device buffers, kept between minibatches: the images and noise it uploads, the
/// chains (made anew when a pass outgrows them), the rows that continue, and the networks'
/// workspaces.
#[derive(Default)]
pub(super) struct SagdPass {
    x: Option<CudaSlice<f32>>,
    noise: Option<CudaSlice<f32>>,
    chains: Option<ChainRows>,
    /// The rows of a pass's chains that continue (numbers), and where (positions, momenta).
    carried_rows: Option<CudaSlice<i32>>,
    carried_u: Option<CudaSlice<f32>>,
    carried_rho: Option<CudaSlice<f32>>,
    ws_enc: GpuWorkspace,
    ws_gen: GpuWorkspace,
    host: Vec<f32>,
}

/// The chains of a pass: positions u, their starts u₀ and momenta ρ (rows × d each), ∇u log
/// p(u | x) at u, the law's rows' derivatives (rows × pixels), each row's log-likelihood and
/// distance from its start, and the generator's gradient.
struct ChainRows {
    u: CudaSlice<f32>,
    u0: CudaSlice<f32>,
    rho: CudaSlice<f32>,
    gu: CudaSlice<f32>,
    dl: CudaSlice<f32>,
    ll: CudaSlice<f32>,
    dist: CudaSlice<f32>,
    g_gen: CudaSlice<f32>,
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

/// `v` summed in f64.
fn sum(v: &[f32]) -> f64 {
    v.iter().map(|x| *x as f64).sum()
}

impl ChainRows {
    /// The chains in `slot` if they hold the pass `s` of the model `m`, else new ones.
    fn fit<'a>(
        gpu: &Gpu,
        slot: &'a mut Option<ChainRows>,
        m: &BernoulliVae,
        s: Shape,
    ) -> GpuResult<&'a mut ChainRows> {
        let dl = s.rows * m.pixels();
        let params = m.gen.n_params();
        let holds = |c: &ChainRows| {
            c.u.len() >= s.len
                && c.dl.len() >= dl
                && c.ll.len() >= s.rows
                && c.g_gen.len() >= params
        };
        if !slot.as_ref().is_some_and(holds) {
            let z = |n: usize| gpu.zeros(n);
            *slot = Some(ChainRows {
                u: z(s.len)?,
                u0: z(s.len)?,
                rho: z(s.len)?,
                gu: z(s.len)?,
                dl: z(dl)?,
                ll: z(s.rows)?,
                dist: z(s.rows)?,
                g_gen: z(params)?,
            });
        }
        Ok(slot.as_mut().expect("kept or made above"))
    }

    /// gu = ∇u log p(x | u) − u, the posterior's gradient at the chains' states (no Metropolis
    /// test reads its log density).
    fn posterior_gradient(
        &mut self,
        gpu: &Gpu,
        gen: &DeviceDecoder<'_>,
        ws: &mut GpuWorkspace,
    ) -> GpuResult<()> {
        gen.posterior(gpu, &self.u, (&mut self.gu, None), &mut self.dl, ws)
    }
}

/// The pass's chains, one state stepped in place, as the program's interpreter reads them.
struct InPlace<'p, 'g> {
    gpu: &'p Gpu,
    c: &'p mut ChainRows,
    noise: &'p CudaSlice<f32>,
    gen: &'p DeviceDecoder<'g>,
    ws: &'p mut GpuWorkspace,
}

impl ChainBuffers<Gpu> for InPlace<'_, '_> {
    fn parts(&mut self) -> Parts<'_, CudaSlice<f32>> {
        Parts {
            start: None,
            x: &mut self.c.u,
            g: &self.c.gu,
            rho: &mut self.c.rho,
            noise: self.noise,
        }
    }

    fn evaluate(&mut self) -> GpuResult<()> {
        self.c.posterior_gradient(self.gpu, self.gen, self.ws)
    }

    fn refresh(&mut self, _: std::ops::Range<usize>) -> GpuResult<()> {
        Err(GpuError::Settings(
            "SAGD's chains on a GPU run drifts, kicks, exact flows and evaluations, not a \
             refresh of the momenta: run this scheme with --device cpu"
                .into(),
        ))
    }
}

impl SagdPass {
    /// The generator's gradient of the last pass (`None` before any).
    pub(super) fn gradient(&self) -> Option<&CudaSlice<f32>> {
        self.chains.as_ref().map(|c| &c.g_gen)
    }

    /// SAGD's pass on the images `x` with `noise` (ε, ρ₀, then each step's η) at the
    /// parameters `state` holds, its gradient left in [`SagdPass::gradient`]; chains that
    /// persist continue from `carried` and leave their last states there.
    pub(super) fn run(
        &mut self,
        gpu: &Gpu,
        (m, state): (&BernoulliVae, &DeviceState),
        (x, noise): (&[f32], &[f32]),
        chains: &Chains,
        carried: Option<&mut Carried>,
    ) -> GpuResult<BatchInfo> {
        let kernel = chains.kernel()?;
        // Chains that persist run every transition whole, their momenta where they continue.
        let program = match carried {
            Some(_) => kernel.unrolled_whole(chains.steps),
            None => kernel.unrolled(chains.steps),
        };
        let (enc, params) = (placed(&state.enc)?, placed(&state.dec)?);
        let d = m.d;
        let images = x.len() / m.pixels();
        let rows = chains.per_image * images;
        let s = Shape {
            images,
            rows,
            len: rows * d,
        };
        let xd = &*uploaded(gpu, &mut self.x, x)?;
        let nz = &*uploaded(gpu, &mut self.noise, noise)?;
        m.enc.forward_gpu(gpu, enc, xd, images, &mut self.ws_enc)?;
        let c = ChainRows::fit(gpu, &mut self.chains, m, s)?;
        let enc_out = self.ws_enc.output().expect("forward ran");
        c.start(gpu, (enc_out, nz), s, d)?;
        if let Some(carried) = carried.as_deref() {
            carried.check(rows, d)?;
            let slots = (
                &mut self.carried_rows,
                &mut self.carried_u,
                &mut self.carried_rho,
            );
            c.continue_carried(gpu, slots, carried, s, d)?;
        }
        // The generator under the Bernoulli law, on the pass's images (chain r of image r mod b).
        let gen = DeviceDecoder {
            net: &m.gen,
            params,
            law: DeviceLaw::Bernoulli,
            data: xd,
            shape: LikelihoodRows {
                rows: s.rows,
                n: s.images,
                per: 1,
                px: m.pixels(),
            },
        };
        let ws = &mut self.ws_gen;
        // The core's program of the chains' steps (`Kernel::unrolled`), as the CPU's pass runs it
        // (`Kernel::run_with_noise`): the posterior's gradient once, then the program's one
        // interpreter on (u, ρ) in place, its draws from the noise's blocks.
        if !program.is_empty() {
            c.posterior_gradient(gpu, &gen, ws)?;
        }
        let mut in_place = InPlace {
            gpu,
            c: &mut *c,
            noise: nz,
            gen: &gen,
            ws: &mut *ws,
        };
        carry_out(gpu, &mut in_place, &program, s.len, |k| s.block(k))?;
        // The generator's gradient of the mean of −log p(x | u) at the chains' last states.
        let g = (&mut c.g_gen, Some(&mut c.ll), -1.0 / s.rows as f32);
        gen.theta_gradient(gpu, &c.u, g, &mut c.dl, ws)?;
        let (ri, di) = (s.rows as i32, d as i32);
        // SAFETY: u and u0 hold rows × d values, dist rows.
        unsafe { launch!(gpu, "row_distance", grid(s.rows); &c.u, &c.u0, &mut c.dist, &ri, &di) }?;
        if let Some(carried) = carried {
            carried.u.resize(s.len, 0.0);
            carried.rho.resize(s.len, 0.0);
            gpu.download_into(&c.u, &mut carried.u)?;
            gpu.download_into(&c.rho, &mut carried.rho)?;
            carried.from = vec![true; rows];
        }
        self.host.resize(rows, 0.0);
        gpu.download_into(&c.ll, &mut self.host)?;
        let ll = sum(&self.host);
        gpu.download_into(&c.dist, &mut self.host)?;
        let dist = sum(&self.host);
        Ok(BatchInfo {
            loss: -ll / rows as f64,
            displacement: dist / rows as f64,
        })
    }
}

impl ChainRows {
    /// u = u₀ = μ + σ ε for every chain (from the encoder's output `enc_out` and the noise's
    /// first block), and ρ = ρ₀ (its second).
    fn start(
        &mut self,
        gpu: &Gpu,
        (enc_out, nz): (&CudaSlice<f32>, &CudaSlice<f32>),
        s: Shape,
        d: usize,
    ) -> GpuResult<()> {
        let (ri, bi, di) = (s.rows as i32, s.images as i32, d as i32);
        let eps = nz.slice(..s.len);
        // SAFETY: enc_out holds images × 2d values, the others rows × d.
        unsafe {
            launch!(gpu, "encoder_chain_starts", grid(s.len);
                enc_out, &eps, &mut self.u, &mut self.u0, &ri, &bi, &di)
        }?;
        gpu.stream.memcpy_dtod(
            &nz.slice(s.len..2 * s.len),
            &mut self.rho.slice_mut(..s.len),
        )?;
        Ok(())
    }

    /// The rows `carried` marks start where it holds them: their positions (and u₀, the start
    /// their displacement is measured from) and momenta scattered over the encoder's starts,
    /// through the device buffers `slots` (row numbers, positions, momenta).
    fn continue_carried(
        &mut self,
        gpu: &Gpu,
        slots: CarriedSlots<'_>,
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
        let idx = &*uploaded(gpu, slots.0, &idx)?;
        let cu = &*uploaded(gpu, slots.1, &pick(&carried.u))?;
        let crho = &*uploaded(gpu, slots.2, &pick(&carried.rho))?;
        let shape = (rows.len(), d);
        gpu.rows_copy(&mut self.u, cu, idx, shape, true)?;
        gpu.rows_copy(&mut self.u0, cu, idx, shape, true)?;
        gpu.rows_copy(&mut self.rho, crho, idx, shape, true)
    }
}

/// The device buffers that carry continuing rows onto the chains: their numbers, positions and
/// momenta.
type CarriedSlots<'a> = (
    &'a mut Option<CudaSlice<i32>>,
    &'a mut Option<CudaSlice<f32>>,
    &'a mut Option<CudaSlice<f32>>,
);
