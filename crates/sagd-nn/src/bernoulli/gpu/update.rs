//! The training state on the device: the networks' parameters and Adam's moments kept there
//! between updates, loaded where stale, the pass's gradients checked finite and Adam's step taken
//! there (the pieces the training job drives, `train::DeviceParams`, and their composition, one
//! whole update), and the host's state brought up to date from it.

use super::*;

impl GpuPasses {
    /// One whole training update on the device: the pass `what` on `x` and `noise` at the
    /// parameters it holds (loaded from `st` when it holds another state), then Adam's `step`
    /// on the generator (and the encoder for the VAE), parameters and moments staying there.
    /// Returns the pass and whether every gradient was finite (if not, nothing moved). The
    /// training job takes the same steps through `train::DeviceParams`.
    pub fn train_step(
        &mut self,
        m: &BernoulliVae,
        st: &TrainState,
        x: &[f32],
        noise: &[f32],
        what: Pass<'_>,
        step: AdamStep,
    ) -> GpuResult<(BatchInfo, bool)> {
        let encoder = matches!(what, Pass::Vae);
        if self.held(encoder) != Some(st.updates) {
            self.load(st, encoder)?;
        }
        let info = self.pass_on_held(m, (x, noise), what, None)?;
        if !self.finite()? {
            return Ok((info, false));
        }
        self.step(step)?;
        Ok((info, true))
    }

    /// The update count of the training state the device holds for the networks `encoder`
    /// says (the encoder too, or the generator alone); `None`: none.
    pub fn held(&self, encoder: bool) -> Option<usize> {
        self.held
            .filter(|h| h.encoder == encoder)
            .map(|h| h.updates)
    }

    /// Puts `st`'s parameters and Adam's moments (the encoder's too with `encoder`) on the
    /// device, which then holds the state of `st.updates`.
    pub fn load(&mut self, st: &TrainState, encoder: bool) -> GpuResult<()> {
        self.load_params(&st.params)?;
        let gpu = &self.gpu;
        let [mg, vg, me, ve] = &mut self.b.moments;
        put(gpu, mg, &st.dec.opt.m)?;
        put(gpu, vg, &st.dec.opt.v)?;
        if encoder {
            put(gpu, me, &st.enc.opt.m)?;
            put(gpu, ve, &st.enc.opt.v)?;
        }
        self.held = Some(Held {
            updates: st.updates,
            encoder,
            sizes: (st.params.dec.len(), st.params.enc.len()),
        });
        Ok(())
    }

    /// The pass `what` at the parameters the device holds ([`GpuPasses::load`]), its gradients
    /// kept there for [`GpuPasses::finite`] and [`GpuPasses::step`]; SAGD's chains continue
    /// from `carried` where given.
    pub fn pass_on_held(
        &mut self,
        m: &BernoulliVae,
        (x, noise): (&[f32], &[f32]),
        what: Pass<'_>,
        carried: Option<&mut Carried>,
    ) -> GpuResult<BatchInfo> {
        let Some(held) = self.held else {
            return Err(GpuError::Settings(
                "a pass on the held parameters before any were loaded".into(),
            ));
        };
        let (n_gen, n_enc) = held.sizes;
        self.pass(m, x, noise, what, carried, n_gen, n_enc)
    }

    /// Whether every value of the last pass's gradients (the generator's, and the encoder's
    /// where the device holds its state) is finite.
    pub fn finite(&mut self) -> GpuResult<bool> {
        let Some(held) = self.held else {
            return Ok(true);
        };
        let (n_gen, n_enc) = held.sizes;
        let gpu = &self.gpu;
        let b = &mut self.b;
        let flag = ensure(gpu, &mut b.flag, 1)?;
        gpu.zero(flag)?;
        let grads: Vec<(&CudaSlice<f32>, usize)> = match (&b.g_gen, &b.g_enc) {
            (Some(g), Some(e)) if held.encoder => vec![(g, n_gen), (e, n_enc)],
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
        Ok(f[0] == 0.0)
    }

    /// Adam's `step` on the parameters and moments the device holds, from the last pass's
    /// gradients; it then holds the state of the next update.
    pub fn step(&mut self, step: AdamStep) -> GpuResult<()> {
        let Some(held) = self.held else {
            return Err(GpuError::Settings(
                "an update on the device before its state was loaded".into(),
            ));
        };
        let (n_gen, n_enc) = held.sizes;
        let gpu = &self.gpu;
        let Buffers {
            gen: Some(gen),
            enc: Some(enc),
            g_gen: Some(gg),
            g_enc,
            moments: [Some(mg), Some(vg), me, ve],
            ..
        } = &mut self.b
        else {
            unreachable!("loaded, and made by the pass");
        };
        adam(gpu, gen, gg, mg, vg, n_gen, step, step.t.0)?;
        if held.encoder {
            let (Some(ge), Some(me), Some(ve)) = (g_enc, me, ve) else {
                unreachable!("loaded, and made by the pass");
            };
            adam(gpu, enc, ge, me, ve, n_enc, step, step.t.1)?;
        }
        self.held = Some(Held {
            updates: held.updates + 1,
            ..held
        });
        Ok(())
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
