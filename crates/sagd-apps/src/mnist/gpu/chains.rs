//! SAGD's pass on the device: the chains of every image in one pass over all their rows, as the
//! CPU's `sagd_batch` steps them.

use super::*;

impl GpuE3 {
    pub(crate) fn sagd_pass(
        &mut self,
        m: &E3,
        x: &[f32],
        chains: &Chains,
        noise: &[f32],
        n_gen: usize,
    ) -> GpuResult<BatchInfo> {
        let (gpu, b, d) = (&self.gpu, &mut self.b, m.d);
        let n = x.len() / PIXELS;
        let rows = chains.per_image * n;
        let len = rows * d;
        let scale = 1.0 / rows as f32;
        Self::encode_inputs(gpu, b, m, x, noise)?;
        for (slot, size) in [
            (&mut b.u, len),
            (&mut b.u0, len),
            (&mut b.rho, len),
            (&mut b.gu, len),
            (&mut b.dl, rows * PIXELS),
            (&mut b.ll, rows),
            (&mut b.dist, rows),
            (&mut b.g_gen, n_gen),
        ] {
            ensure(gpu, slot, size)?;
        }
        {
            let Buffers {
                noise: Some(nz),
                u: Some(u),
                u0: Some(u0),
                rho: Some(rho),
                ws_enc,
                ..
            } = b
            else {
                unreachable!("made above");
            };
            let enc_out = ws_enc.output().expect("forward ran");
            let (ri, bi, di) = (rows as i32, n as i32, d as i32);
            let eps = nz.slice(..len);
            let mut l = gpu.stream.launch_builder(gpu.k("encoder_chain_starts"));
            l.arg(enc_out)
                .arg(&eps)
                .arg(&mut *u)
                .arg(&mut *u0)
                .arg(&ri)
                .arg(&bi)
                .arg(&di);
            // SAFETY: enc_out holds n × 2d values, the others rows × d.
            unsafe { l.launch(grid(len)) }?;
            gpu.stream
                .memcpy_dtod(&nz.slice(len..2 * len), &mut rho.slice_mut(..len))?;
        }
        let li = len as i32;
        // ρ = decay ρ + grad g + noise η, η the noise's block `block` (none: noise is 0).
        let kick = |b: &mut Buffers,
                    (decay, grad, noise): (f32, f32, f32),
                    block: Option<usize>|
         -> GpuResult<()> {
            let (Some(rho), Some(g), Some(nz)) = (&mut b.rho, &b.gu, &b.noise) else {
                unreachable!("made above");
            };
            // A block of draws to read times 0 when the kick draws none (any len values do).
            let at = block.map_or(0..len, |k| (2 + k) * len..(3 + k) * len);
            let eta = nz.slice(at);
            let mut l = gpu.stream.launch_builder(gpu.k("chain_kick"));
            l.arg(rho)
                .arg(g)
                .arg(&eta)
                .arg(&decay)
                .arg(&grad)
                .arg(&noise)
                .arg(&li);
            // SAFETY: every buffer holds at least len values.
            unsafe { l.launch(grid(len)) }?;
            Ok(())
        };
        // The exact Ornstein-Uhlenbeck flow on (u, ρ), ζ1 and ζ2 the noise's blocks `block` and
        // the next.
        let ou = |b: &mut Buffers,
                  [decay, drift, v1, x1, x2]: [f32; 5],
                  block: usize|
         -> GpuResult<()> {
            let (Some(u), Some(rho), Some(nz)) = (&mut b.u, &mut b.rho, &b.noise) else {
                unreachable!("made above");
            };
            let (z1, z2) = (
                nz.slice((2 + block) * len..(3 + block) * len),
                nz.slice((3 + block) * len..(4 + block) * len),
            );
            let mut l = gpu.stream.launch_builder(gpu.k("chain_ou"));
            l.arg(u)
                .arg(rho)
                .arg(&z1)
                .arg(&z2)
                .arg(&decay)
                .arg(&drift)
                .arg(&v1)
                .arg(&x1)
                .arg(&x2)
                .arg(&li);
            // SAFETY: every buffer holds at least len values.
            unsafe { l.launch(grid(len)) }?;
            Ok(())
        };
        // u += h ρ.
        let drift = |b: &mut Buffers, h: f32| -> GpuResult<()> {
            let (Some(u), Some(rho)) = (&mut b.u, &b.rho) else {
                unreachable!("made above");
            };
            let mut l = gpu.stream.launch_builder(gpu.k("chain_drift_add"));
            l.arg(u).arg(rho).arg(&h).arg(&li);
            // SAFETY: as above.
            unsafe { l.launch(grid(len)) }?;
            Ok(())
        };
        // gu = ∇u log p(x | u) − u at the chains' states.
        let grad = |b: &mut Buffers| -> GpuResult<()> {
            {
                let (Some(gen), Some(u)) = (&b.gen, &b.u) else {
                    unreachable!("made above");
                };
                m.gen.forward_gpu(gpu, gen, u, rows, &mut b.ws_gen)?;
            }
            Self::bernoulli(gpu, b, rows, n, 1.0)?;
            let (Some(gen), Some(u), Some(gu), Some(dl)) = (&b.gen, &b.u, &mut b.gu, &b.dl) else {
                unreachable!("made above");
            };
            m.gen
                .backward_gpu(gpu, gen, &mut b.ws_gen, dl, None, Some(&mut *gu))?;
            let mut l = gpu.stream.launch_builder(gpu.k("posterior_grad"));
            l.arg(gu).arg(u).arg(&li);
            // SAFETY: as above.
            unsafe { l.launch(grid(len)) }?;
            Ok(())
        };
        // The core's program of the chains' steps, as the CPU's pass runs it
        // (`Kernel::run_with_noise`): the target evaluated once, then each operation.
        let program = chains.kernel()?.unrolled(chains.steps);
        if !program.is_empty() {
            grad(b)?;
        }
        for (op, block) in program {
            match op {
                Op::Drift(h) => drift(b, h)?,
                Op::Kick { decay, grad, noise } => kick(b, (decay, grad, noise), block)?,
                Op::Ou {
                    decay,
                    drift,
                    v1,
                    x1,
                    x2,
                } => {
                    let block = block.ok_or_else(|| {
                        GpuError::Settings("an Ornstein-Uhlenbeck flow without draws".into())
                    })?;
                    ou(b, [decay, drift, v1, x1, x2], block)?
                }
                Op::Gradient => grad(b)?,
                other => {
                    return Err(GpuError::Settings(format!(
                        "E3's chains on a GPU run drifts, kicks, exact flows and evaluations, not \
                         {other:?}: run this scheme with --device cpu"
                    )))
                }
            }
        }
        // The generator's gradient of the mean of −log p(x | u) at the last states.
        {
            let (Some(gen), Some(u)) = (&b.gen, &b.u) else {
                unreachable!("made above");
            };
            m.gen.forward_gpu(gpu, gen, u, rows, &mut b.ws_gen)?;
        }
        Self::bernoulli(gpu, b, rows, n, -scale)?;
        let Buffers {
            gen: Some(gen),
            u: Some(u),
            u0: Some(u0),
            dl: Some(dl),
            dist: Some(dist),
            g_gen: Some(gg),
            ws_gen,
            ..
        } = b
        else {
            unreachable!("made above");
        };
        gpu.zero(gg)?;
        m.gen
            .backward_gpu(gpu, gen, ws_gen, dl, Some(&mut *gg), None)?;
        let (ri, di) = (rows as i32, d as i32);
        let mut l = gpu.stream.launch_builder(gpu.k("row_distance"));
        l.arg(&*u).arg(&*u0).arg(&mut *dist).arg(&ri).arg(&di);
        // SAFETY: u and u0 hold rows × d values, dist rows.
        unsafe { l.launch(grid(rows)) }?;
        let ll = sum(self.get(|b| &b.ll, rows)?);
        let dist = sum(self.get(|b| &b.dist, rows)?);
        Ok(BatchInfo {
            loss: -ll / rows as f64,
            displacement: dist / rows as f64,
        })
    }
}
