//! One update of the GPU chains: the noise of its transitions, each transition's program, the
//! chains' steps and the θ-gradient over their accepted states, and the update's bookkeeping.

use super::*;
use crate::program::{carry_out, ChainBuffers, Parts};

/// The batch's nb chains on a transition's two states, as the program's interpreter reads them.
struct TwoStates<'e, 'a, 'b> {
    e: &'e GpuChainEstimator<'a>,
    b: &'b mut Buffers,
    all: bool,
    nb: usize,
}

impl ChainBuffers<Gpu> for TwoStates<'_, '_, '_> {
    fn parts(&mut self) -> Parts<'_, CudaSlice<f32>> {
        let b = &mut *self.b;
        Parts {
            start: Some((&b.xa, &b.ga)),
            x: &mut b.xb,
            g: &b.gb,
            rho: &mut b.rho,
            noise: &b.noise,
        }
    }

    fn evaluate(&mut self) -> GpuResult<()> {
        self.e.evaluate(self.b, self.all, true, self.nb)
    }

    fn refresh(&mut self, at: std::ops::Range<usize>) -> GpuResult<()> {
        let (gpu, b) = (&self.e.gpu, &mut *self.b);
        let eta = b.noise.slice(at);
        let (ni, di) = (self.nb as i32, self.e.vae.d as i32);
        // SAFETY: rho and the draws hold nb × d values, la and h0 nb.
        unsafe {
            launch!(gpu, "chain_refresh", grid(self.nb);
                &mut b.rho, &eta, &b.la, &mut b.h0, &ni, &di)
        }?;
        Ok(())
    }
}

impl<'a> GpuChainEstimator<'a> {
    /// Draws the noise of `transitions` transitions of nb chains into `noise` and `uni`.
    fn draw(&mut self, b: &mut Buffers, transitions: usize, nb: usize) -> GpuResult<()> {
        let len = nb * self.vae.d;
        let normals = transitions * self.normals_per_coord * len;
        self.rng.fill(&self.gpu, &mut b.noise, normals, false)?;
        if self.metropolis {
            self.rng
                .fill(&self.gpu, &mut b.uni, transitions * nb, true)?;
        }
        Ok(())
    }

    /// Transition `t` of the batch's nb chains (state a → b, copied back to a), its noise from
    /// [`GpuChainEstimator::draw`], its statistics added into `sums`. Launches only, so that an
    /// update's transitions can be captured in a graph.
    fn transition(&self, b: &mut Buffers, all: bool, nb: usize, t: usize) -> GpuResult<()> {
        let fresh_rho = self.run_program(b, all, nb, t)?;
        self.finish(b, nb, t, fresh_rho)
    }

    /// The kernel's program for transition `t` from state a into state b, as the core's
    /// [`Kernel::instructions`](sagd::langevin::Kernel::instructions) place it (the program's
    /// one interpreter, `program::carry_out`); the noise's range for the fresh momenta of the
    /// rows that diverge.
    fn run_program(
        &self,
        b: &mut Buffers,
        all: bool,
        nb: usize,
        t: usize,
    ) -> GpuResult<std::ops::Range<usize>> {
        let len = nb * self.vae.d;
        // Draw block k of transition t (after its normals_per_step blocks, the fresh momenta).
        let block = |k: usize| {
            let at = (t * self.normals_per_coord + k) * len;
            at..at + len
        };
        let mut chains = TwoStates {
            e: self,
            b,
            all,
            nb,
        };
        carry_out(&self.gpu, &mut chains, &self.program, len, block)?;
        Ok(block(self.normals_per_coord - 1))
    }

    /// The end of transition `t`, per row: divergence, the Metropolis test where the kernel has
    /// one, a refused or diverged row back to state a (a diverged one with fresh momenta from
    /// the noise's `fresh_rho`); the statistics added into `sums`, the new state copied into a.
    fn finish(
        &self,
        b: &mut Buffers,
        nb: usize,
        t: usize,
        fresh_rho: std::ops::Range<usize>,
    ) -> GpuResult<()> {
        let (gpu, d) = (&self.gpu, self.vae.d);
        let len = nb * d;
        let fresh_rho = b.noise.slice(fresh_rho);
        let uni = b.uni.slice(if self.metropolis {
            t * nb..(t + 1) * nb
        } else {
            0..nb
        });
        let (ni, di, mi) = (nb as i32, d as i32, self.metropolis as i32);
        // SAFETY: as above.
        unsafe {
            launch!(gpu, "chain_finish", grid(nb);
                &mut b.xb, &mut b.gb, &mut b.lb, &b.xa, &b.ga, &b.la, &mut b.rho, &fresh_rho, &uni,
                &b.h0, &mi, &mut b.stats, &ni, &di)
        }?;
        let (cols, rows) = (STATS as i32, nb as i32);
        let one_block = cudarc::driver::LaunchConfig {
            grid_dim: (1, 1, 1),
            block_dim: (256, 1, 1),
            shared_mem_bytes: 0,
        };
        // SAFETY: stats holds nb rows of STATS columns; one block of 256 threads, as written.
        unsafe { launch!(gpu, "column_sums", one_block; &b.stats, &mut b.sums, &rows, &cols) }?;
        // The new state back into a: the same buffers at every transition, as a graph needs.
        gpu.copy(&b.xb, &mut b.xa, len)?;
        gpu.copy(&b.gb, &mut b.ga, len)?;
        gpu.copy(&b.lb, &mut b.la, nb)?;
        Ok(())
    }

    /// An update's K transitions, each accepted state kept in `store`, then the estimate
    /// −Σ ∇θ log p / (K nb) over all of them into `g_theta`: launches only (see
    /// [`GpuChainEstimator::transition`]; the scale is fixed by the replay's key).
    fn steps_and_gradient(&self, b: &mut Buffers, all: bool, nb: usize) -> GpuResult<()> {
        let (gpu, d) = (&self.gpu, self.vae.d);
        let len = nb * d;
        for t in 0..self.course.steps {
            self.transition(b, all, nb, t)?;
            gpu.stream.memcpy_dtod(
                &b.xa.slice(..len),
                &mut b.store.slice_mut(t * len..(t + 1) * len),
            )?;
        }
        // ∇θ Σ log p over the K accepted states of every chain, in one pass.
        let rows = self.course.steps * nb;
        let data = if all { &b.x_all } else { &b.x_batch };
        let decoder = DeviceDecoder {
            net: &self.vae.dec,
            params: placed(&self.state.dec)?,
            law: self.law,
            data,
            shape: LikelihoodRows {
                rows,
                n: nb,
                per: 1,
                px: self.px,
            },
        };
        // f = −log p: the estimate's scale on ∂ log p/∂h.
        let g = (&mut b.g_theta, None, -1.0 / rows as f32);
        decoder.theta_gradient(gpu, &b.store, g, &mut b.resid, &mut b.ws_theta)
    }

    /// Reads and clears the summed statistics (zero when allocated; only transitions add to them).
    fn take_sums(&self, b: &mut Buffers) -> GpuResult<[f64; STATS]> {
        let mut s = [0.0f64; STATS];
        self.gpu.stream.memcpy_dtoh(&b.sums, &mut s[..])?;
        self.gpu.stream.memset_zeros(&mut b.sums)?;
        Ok(s)
    }

    /// Starts every chain from an encoder draw and burns it in under the current decoder.
    fn start(&mut self, b: &mut Buffers) -> GpuResult<()> {
        let (n, d) = (self.chains(), self.vae.d);
        self.encoder_draw(b, true, n)?;
        let gpu = &self.gpu;
        match self.course.momentum {
            Momentum::Normal => self.rng.fill(gpu, &mut b.rho, n * d, false)?,
            Momentum::Zero => gpu.zero(&mut b.rho)?,
        }
        self.evaluate(b, true, false, n)?;
        for _ in 0..self.course.burn_in {
            self.draw(b, 1, n)?;
            self.transition(b, true, n, 0)?;
        }
        self.divergences += self.take_sums(b)?[0] as usize;
        let gpu = &self.gpu;
        gpu.copy(&b.xa, &mut b.pos, n * d)?;
        gpu.copy(&b.rho, &mut b.rho_all, n * d)?;
        self.course.started = true;
        Ok(())
    }

    /// An update on `batch`: at the host's parameters `p` (its estimate added into `g_dec`), or,
    /// with `None`, at those the device holds (its estimate left in `g_theta`). Returns the
    /// loss.
    pub(crate) fn run(
        &mut self,
        p: Option<&VaeParams>,
        batch: &[usize],
        g_dec: Option<&mut [f32]>,
    ) -> GpuResult<f64> {
        // Without `p`, at the state held: `DeviceParams::gradient` checked that it is loaded.
        if let Some(p) = p {
            self.state.put_params(&self.gpu, p)?;
        }
        let mut b = match self.b.take() {
            Some(b) => b,
            None => self.alloc()?,
        };
        if let Some((pos, rho)) = self.pending.take() {
            self.gpu.upload_into(&pos, &mut b.pos)?;
            self.gpu.upload_into(&rho, &mut b.rho_all)?;
        }
        // Every copy of the batch's points, copy by copy, as the CPU's.
        let mut rows = std::mem::take(&mut self.rows);
        let batch = self.course.batch_rows(batch, self.chains(), &mut rows);
        let out = self.update(&mut b, batch, g_dec);
        self.rows = rows;
        self.b = Some(b);
        out
    }

    /// The chains restarted where due (the burn-in at the base δ) and this update's δ_t and
    /// K_t, as the CPU's `begin_update`; then the update counted.
    fn begin_update(&mut self, b: &mut Buffers) -> GpuResult<()> {
        if self.course.starts() {
            self.take_kernel()?;
            self.start(b)?;
        }
        if let Some(delta) = self.course.schedule()? {
            self.take_kernel()?;
            self.delta_bits = delta.to_bits();
            self.fit_steps(b)?;
        }
        Ok(())
    }

    /// Grows the buffers of an update's transitions (noise, uniforms, accepted states and their
    /// residuals) to K_t when a schedule lengthened the chains; a captured graph, which names
    /// the old buffers, is dropped.
    fn fit_steps(&mut self, b: &mut Buffers) -> GpuResult<()> {
        let (n, d) = (self.chains(), self.vae.d);
        let steps = self.course.steps.max(1);
        if b.store.len() >= steps * n * d {
            return Ok(());
        }
        let gpu = &self.gpu;
        b.noise = gpu.zeros(steps * self.normals_per_coord * n * d)?;
        b.uni = gpu.zeros(steps * n)?;
        b.store = gpu.zeros(steps * n * d)?;
        b.resid = gpu.zeros(steps * n * self.px)?;
        self.replay = Replay::default();
        Ok(())
    }

    fn update(
        &mut self,
        b: &mut Buffers,
        batch: &[usize],
        g_dec: Option<&mut [f32]>,
    ) -> GpuResult<f64> {
        let (d, n) = (self.vae.d, self.chains());
        let nb = batch.len();
        let len = nb * d;
        let all = nb == n && batch.iter().enumerate().all(|(k, &i)| k == i);
        self.begin_update(b)?;
        let gpu = &self.gpu;
        // The batch's chains into state a.
        if all {
            gpu.copy(&b.pos, &mut b.xa, len)?;
            gpu.copy(&b.rho_all, &mut b.rho, len)?;
        } else {
            gather_rows(&self.x, self.px, batch, &mut self.xb);
            gpu.upload_into(&self.xb, &mut b.x_batch)?;
            let idx: Vec<i32> = batch.iter().map(|&i| i as i32).collect();
            gpu.stream.memcpy_htod(&idx, &mut b.idx.slice_mut(..nb))?;
            for (dst, src) in [(&mut b.xa, &b.pos), (&mut b.rho, &b.rho_all)] {
                gpu.rows_copy(dst, src, &b.idx, (nb, d), false)?;
            }
        }
        if self.course.fresh_from_encoder {
            self.encoder_draw(b, all, nb)?;
        }
        // θ moved since the chains' gradients were computed (or the chains are new).
        self.evaluate(b, all, false, nb)?;
        self.draw(b, self.course.steps, nb)?;
        // The K transitions and the θ-gradient, replayed from a CUDA graph once captured.
        let mut replay = std::mem::take(&mut self.replay);
        let key = (nb, all, self.course.steps, self.delta_bits);
        let res = replay.run(&self.gpu, key, || self.steps_and_gradient(b, all, nb));
        self.replay = replay;
        res?;
        let sums = self.take_sums(b)?;
        let gpu = &self.gpu;
        let rows = self.course.steps * nb;
        if let Some(g_dec) = g_dec {
            self.host.resize(g_dec.len(), 0.0);
            gpu.download_into(&b.g_theta, &mut self.host)?;
            g_dec.iter_mut().zip(&self.host).for_each(|(g, v)| *g += v);
        }
        // The chains back in place.
        if all {
            gpu.copy(&b.xa, &mut b.pos, len)?;
            gpu.copy(&b.rho, &mut b.rho_all, len)?;
        } else {
            for (dst, src) in [(&mut b.pos, &b.xa), (&mut b.rho_all, &b.rho)] {
                gpu.rows_copy(dst, src, &b.idx, (nb, d), true)?;
            }
        }
        self.divergences += sums[0] as usize;
        if self.metropolis {
            self.acceptance.push(sums[1] / rows as f64);
        }
        Ok(-sums[2] / rows as f64)
    }
}
