//! The training state on the device: the networks' parameters and Adam's moments kept there
//! between updates, loaded where stale, the pass's gradients checked finite and Adam's step taken
//! there (the pieces the training job drives, `train::DeviceParams`, and their composition, one
//! whole update), and the host's state brought up to date from it.

use super::*;

impl GpuPasses {
    /// One whole training update on the device: the pass `what` on `x` and `noise` at the
    /// parameters it holds (loaded from `st` when it holds another state), then Adam's `step`
    /// on the generator (and the encoder for the VAE), parameters and moments staying there.
    /// Returns the pass and whether every gradient was finite (if not, nothing moved).
    #[deprecated(
        since = "0.1.0",
        note = "the training job takes these steps itself: lend the passes through \
                train::DeviceParams (held, load, pass_on_held, finite, step)"
    )]
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
        self.b.state.held(encoder)
    }

    /// Puts `st`'s parameters and Adam's moments (the encoder's too with `encoder`) on the
    /// device, which then holds the state of `st.updates`.
    pub fn load(&mut self, st: &TrainState, encoder: bool) -> GpuResult<()> {
        self.b.state.load(&self.gpu, st, encoder)
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
        self.b.state.holding_for(matches!(what, Pass::Vae))?;
        self.pass(m, x, noise, what, carried)
    }

    /// Whether every value of the last pass's gradients (the generator's, and the encoder's
    /// where the device holds its state) is finite.
    pub fn finite(&mut self) -> GpuResult<bool> {
        self.on_grads(|gpu, state, grads| state.finite(gpu, grads))
    }

    /// Adam's `step` on the parameters and moments the device holds, from the last pass's
    /// gradients; it then holds the state of the next update.
    pub fn step(&mut self, step: AdamStep) -> GpuResult<()> {
        self.on_grads(|gpu, state, grads| state.step(gpu, grads, step))
    }

    /// `f` on the device's training state and the last pass's gradients.
    fn on_grads<R>(
        &mut self,
        f: impl FnOnce(&Gpu, &mut DeviceState, Grads<'_>) -> GpuResult<R>,
    ) -> GpuResult<R> {
        let (gpu, state, grads) = self.on_device();
        f(gpu, state, last_pass(grads)?)
    }

    /// The GPU, its training state and the last pass's gradients (`None` before any pass).
    pub(crate) fn on_device(&mut self) -> (&Gpu, &mut DeviceState, Option<Grads<'_>>) {
        let grads = match self.b.vae_last {
            true => self.b.bound.grads(),
            false => self.b.sagd.gradient().map(|g| (g, None)),
        };
        (&self.gpu, &mut self.b.state, grads)
    }

    /// The training state on the device.
    pub(crate) fn state(&self) -> &DeviceState {
        &self.b.state
    }

    /// Writes the parameters and moments the device holds into `st`, if they are of its update
    /// count (else there is nothing newer on the device).
    pub fn sync(&mut self, st: &mut TrainState) -> GpuResult<()> {
        self.b.state.sync(&self.gpu, st)
    }
}
