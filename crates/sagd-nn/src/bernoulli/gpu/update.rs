//! A whole training update on the device (the pass, then Adam on the parameters and moments it
//! keeps there), and the host's state brought up to date from it.

use super::*;

impl GpuPasses {
    /// One whole training update on the device: the pass `what` on `x` and `noise` at the
    /// parameters it holds (loaded from `st` when it holds another state), then Adam's `step`
    /// on the generator (and the encoder for the VAE), parameters and moments staying there.
    /// Returns the pass and whether every gradient was finite (if not, nothing moved).
    pub fn train_step(
        &mut self,
        m: &BernoulliVae,
        st: &TrainState,
        x: &[f32],
        noise: &[f32],
        what: Pass<'_>,
        step: AdamStep,
    ) -> GpuResult<(BatchInfo, bool)> {
        self.train_step_from(m, st, (x, noise), what, None, step)
    }

    /// [`GpuPasses::train_step`] of SAGD's `chains` that persist between visits: they continue
    /// from `carried` and leave their last states there
    /// ([`GpuPasses::sagd_batch_continued`]).
    pub fn train_step_continued(
        &mut self,
        m: &BernoulliVae,
        st: &TrainState,
        (x, noise): (&[f32], &[f32]),
        (chains, carried): (&Chains, &mut Carried),
        step: AdamStep,
    ) -> GpuResult<(BatchInfo, bool)> {
        self.train_step_from(m, st, (x, noise), Pass::Sagd(chains), Some(carried), step)
    }

    fn train_step_from(
        &mut self,
        m: &BernoulliVae,
        st: &TrainState,
        (x, noise): (&[f32], &[f32]),
        what: Pass<'_>,
        carried: Option<&mut Carried>,
        step: AdamStep,
    ) -> GpuResult<(BatchInfo, bool)> {
        let encoder = matches!(what, Pass::Vae);
        let want = Held {
            updates: st.updates,
            encoder,
        };
        if self.held != Some(want) {
            self.load_params(&st.params)?;
            let gpu = &self.gpu;
            let [mg, vg, me, ve] = &mut self.b.moments;
            put(gpu, mg, &st.dec.opt.m)?;
            put(gpu, vg, &st.dec.opt.v)?;
            if encoder {
                put(gpu, me, &st.enc.opt.m)?;
                put(gpu, ve, &st.enc.opt.v)?;
            }
            self.held = Some(want);
        }
        let (n_gen, n_enc) = (st.params.dec.len(), st.params.enc.len());
        let info = self.pass(m, x, noise, what, carried, n_gen, n_enc)?;
        let gpu = &self.gpu;
        let b = &mut self.b;
        let flag = ensure(gpu, &mut b.flag, 1)?;
        gpu.zero(flag)?;
        let grads: Vec<(&CudaSlice<f32>, usize)> = match (&b.g_gen, &b.g_enc) {
            (Some(g), Some(e)) if encoder => vec![(g, n_gen), (e, n_enc)],
            (Some(g), _) => vec![(g, n_gen)],
            _ => unreachable!("made by the pass"),
        };
        for (g, n) in grads {
            let ni = n as i32;
            let mut l = gpu.stream.launch_builder(gpu.k("flag_nonfinite"));
            l.arg(g).arg(&ni).arg(&mut *flag);
            // SAFETY: g holds n values, flag one.
            unsafe { l.launch(grid(n)) }?;
        }
        let mut f = [0.0f32];
        gpu.download_into(flag, &mut f)?;
        if f[0] != 0.0 {
            return Ok((info, false));
        }
        let Buffers {
            gen: Some(gen),
            enc: Some(enc),
            g_gen: Some(gg),
            g_enc,
            moments: [Some(mg), Some(vg), me, ve],
            ..
        } = b
        else {
            unreachable!("loaded above");
        };
        adam(gpu, gen, gg, mg, vg, n_gen, step, step.t.0)?;
        if encoder {
            let (Some(ge), Some(me), Some(ve)) = (g_enc, me, ve) else {
                unreachable!("loaded above");
            };
            adam(gpu, enc, ge, me, ve, n_enc, step, step.t.1)?;
        }
        self.held = Some(Held {
            updates: st.updates + 1,
            encoder,
        });
        Ok((info, true))
    }

    /// Writes the parameters and moments the device holds into `st`, if they are of its update
    /// count (else there is nothing newer on the device).
    pub fn sync(&mut self, st: &mut TrainState) -> GpuResult<()> {
        let Some(held) = self.held else {
            return Ok(());
        };
        if held.updates != st.updates {
            return Ok(());
        }
        let (gpu, b) = (&self.gpu, &self.b);
        let (Some(gen), Some(enc)) = (&b.gen, &b.enc) else {
            return Ok(());
        };
        gpu.download_into(gen, &mut st.params.dec)?;
        gpu.download_into(enc, &mut st.params.enc)?;
        let [mg, vg, me, ve] = &b.moments;
        let mut pairs = vec![(mg, &mut st.dec.opt.m), (vg, &mut st.dec.opt.v)];
        if held.encoder {
            pairs.push((me, &mut st.enc.opt.m));
            pairs.push((ve, &mut st.enc.opt.v));
        }
        for (dev, host) in pairs {
            if let Some(dev) = dev {
                gpu.stream
                    .memcpy_dtoh(&dev.slice(..host.len()), &mut host[..])?;
            }
        }
        Ok(())
    }
}
