//! The training state on a GPU: the networks' parameters, and Adam's moments of those trained,
//! kept there between updates, with the update rule's step as the backend's operation
//! ([`adam`]), for every estimator that takes its updates on the device: each says where its
//! state and its last pass's gradients are ([`OnDevice`]), and the training job's
//! [`DeviceParams`] are written once, here.

use cudarc::driver::{CudaSlice, PushKernelArg};
use sagd::error::{Result, SagdError};

use crate::cuda::{adam, ensure, grid, launch, put, AdamStep, Gpu, GpuError, GpuResult};
use crate::train::{DeviceParams, TrainState};
use crate::vae::VaeParams;

/// A pass's gradients on the device: the decoder's (or generator's), and the encoder's where
/// the pass made one.
pub(crate) type Grads<'a> = (&'a CudaSlice<f32>, Option<&'a CudaSlice<f32>>);

/// An estimator whose passes run on a GPU and keep their gradients there: where its training
/// state is, and its pass at the parameters held. Its [`DeviceParams`] follow.
pub(crate) trait OnDevice {
    /// The training state on the device; `None` where the passes run on the host.
    fn state(&self) -> Option<&DeviceState>;
    /// The GPU, its training state, and the last pass's gradients (`None` before any pass);
    /// `None` where the passes run on the host.
    fn on_device(&mut self) -> Option<(&Gpu, &mut DeviceState, Option<Grads<'_>>)>;
    /// The loss of a pass on the data points `batch` at the parameters held, its gradients kept.
    fn pass_at_held(&mut self, batch: &[usize]) -> Result<f64>;
}

/// The error of a device operation asked of an estimator whose passes run on the host.
pub(crate) fn on_host() -> SagdError {
    SagdError::Device("the training state is on the host: this estimator runs on the CPU".into())
}

/// The last pass's gradients, or the error of a training step asked before any pass.
pub(crate) fn last_pass(grads: Option<Grads<'_>>) -> GpuResult<Grads<'_>> {
    grads.ok_or_else(|| GpuError::Settings("a training step before any pass".into()))
}

/// A network's parameters on the device, or the error of a pass asked before any were put there.
pub(crate) fn placed(params: &Option<CudaSlice<f32>>) -> GpuResult<&CudaSlice<f32>> {
    params.as_ref().ok_or_else(|| {
        GpuError::Settings("a pass on the device's parameters before any were put there".into())
    })
}

/// The error of a pass or training step on the device's training state before it was loaded.
fn not_loaded() -> GpuError {
    GpuError::Settings(
        "a pass or training step on the device's training state before it was loaded: load it \
         first (DeviceParams::load)"
            .into(),
    )
}

/// The GPU, the state and the last pass's gradients of `e`, or the error of a step asked
/// before any pass.
fn kept<T: OnDevice + ?Sized>(e: &mut T) -> Result<(&Gpu, &mut DeviceState, Grads<'_>)> {
    let (gpu, state, grads) = e.on_device().ok_or_else(on_host)?;
    Ok((gpu, state, last_pass(grads)?))
}

impl<T: OnDevice> DeviceParams for T {
    fn held(&self, encoder: bool) -> Option<usize> {
        self.state()?.held(encoder)
    }

    fn load(&mut self, st: &TrainState, encoder: bool) -> Result<()> {
        let (gpu, state, _) = self.on_device().ok_or_else(on_host)?;
        Ok(state.load(gpu, st, encoder)?)
    }

    fn gradient(&mut self, batch: &[usize]) -> Result<f64> {
        if let Some(state) = self.state() {
            state.holding()?;
        }
        self.pass_at_held(batch)
    }

    fn finite(&mut self) -> Result<bool> {
        let (gpu, state, grads) = kept(self)?;
        Ok(state.finite(gpu, grads)?)
    }

    fn step(&mut self, step: AdamStep) -> Result<()> {
        let (gpu, state, grads) = kept(self)?;
        Ok(state.step(gpu, grads, step)?)
    }

    fn sync(&mut self, st: &mut TrainState) -> Result<()> {
        match self.on_device() {
            Some((gpu, state, _)) => Ok(state.sync(gpu, st)?),
            None => Ok(()),
        }
    }
}

/// Which training state a device holds: of which update count, whether the encoder is trained
/// (its moments there too), and the networks' sizes.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Held {
    updates: usize,
    encoder: bool,
    sizes: (usize, usize),
}

/// The parameters of a decoder (or generator) and an encoder on a GPU, and, while training on
/// the device, Adam's moments of the networks trained.
#[derive(Default)]
pub(crate) struct DeviceState {
    /// The decoder's parameters.
    pub(crate) dec: Option<CudaSlice<f32>>,
    /// The encoder's parameters.
    pub(crate) enc: Option<CudaSlice<f32>>,
    /// Adam's m and v of the decoder, then of the encoder.
    moments: [Option<CudaSlice<f64>>; 4],
    flag: Option<CudaSlice<f32>>,
    held: Option<Held>,
}

impl DeviceState {
    /// Puts the parameters `p` on the device for a pass whose update the host takes: any
    /// training state held is gone.
    pub(crate) fn put_params(&mut self, gpu: &Gpu, p: &VaeParams) -> GpuResult<()> {
        self.held = None;
        put(gpu, &mut self.dec, &p.dec)?;
        put(gpu, &mut self.enc, &p.enc)
    }

    /// The update count of the training state held for the networks `encoder` says (the
    /// encoder too, or the decoder alone); `None`: none.
    pub(crate) fn held(&self, encoder: bool) -> Option<usize> {
        self.held
            .filter(|h| h.encoder == encoder)
            .map(|h| h.updates)
    }

    /// Puts `st`'s parameters and the moments of the networks trained (the encoder's too with
    /// `encoder`) on the device, which then holds the state of `st.updates`.
    pub(crate) fn load(&mut self, gpu: &Gpu, st: &TrainState, encoder: bool) -> GpuResult<()> {
        self.put_params(gpu, &st.params)?;
        let [mg, vg, me, ve] = &mut self.moments;
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

    /// The state held, or the error of a pass or training step on it asked before any was
    /// loaded.
    fn holding(&self) -> GpuResult<Held> {
        self.held.ok_or_else(not_loaded)
    }

    /// Nothing, or the error of a pass at the state held for the networks `encoder` says (the
    /// encoder too, or the decoder alone) asked before such a state was loaded.
    pub(crate) fn holding_for(&self, encoder: bool) -> GpuResult<()> {
        self.held(encoder).map(|_| ()).ok_or_else(not_loaded)
    }

    /// Whether every value of the gradients `grads` (the decoder's, and the encoder's where it
    /// is trained) is finite.
    pub(crate) fn finite(
        &mut self,
        gpu: &Gpu,
        grads: (&CudaSlice<f32>, Option<&CudaSlice<f32>>),
    ) -> GpuResult<bool> {
        let held = self.holding()?;
        let (n_dec, n_enc) = held.sizes;
        let flag = ensure(gpu, &mut self.flag, 1)?;
        gpu.zero(flag)?;
        let enc = grads.1.filter(|_| held.encoder).map(|g| (g, n_enc));
        for (g, n) in std::iter::once((grads.0, n_dec)).chain(enc) {
            let ni = n as i32;
            // SAFETY: g holds n values, flag one.
            unsafe { launch!(gpu, "flag_nonfinite", grid(n); g, &ni, &mut *flag) }?;
        }
        let mut f = [0.0f32];
        gpu.download_into(flag, &mut f)?;
        Ok(f[0] == 0.0)
    }

    /// Adam's `step` on the parameters and moments held, from the gradients `grads` (as
    /// [`DeviceState::finite`]); the device then holds the state of the next update.
    pub(crate) fn step(
        &mut self,
        gpu: &Gpu,
        (g_dec, g_enc): (&CudaSlice<f32>, Option<&CudaSlice<f32>>),
        step: AdamStep,
    ) -> GpuResult<()> {
        let held = self.holding()?;
        let (n_dec, n_enc) = held.sizes;
        let (Some(dec), Some(enc), [Some(mg), Some(vg), me, ve]) =
            (&mut self.dec, &mut self.enc, &mut self.moments)
        else {
            unreachable!("loaded with the state");
        };
        adam(gpu, dec, g_dec, mg, vg, n_dec, step, step.t.0)?;
        if held.encoder {
            let (Some(ge), Some(me), Some(ve)) = (g_enc, me, ve) else {
                return Err(GpuError::Settings(
                    "the encoder is trained, but its gradient is not on the device".into(),
                ));
            };
            adam(gpu, enc, ge, me, ve, n_enc, step, step.t.1)?;
        }
        self.held = Some(Held {
            updates: held.updates + 1,
            ..held
        });
        Ok(())
    }

    /// Writes the parameters and moments held into `st`, if they are of its update count (else
    /// there is nothing newer on the device).
    pub(crate) fn sync(&self, gpu: &Gpu, st: &mut TrainState) -> GpuResult<()> {
        let Some(held) = self.held.filter(|h| h.updates == st.updates) else {
            return Ok(());
        };
        let (Some(dec), Some(enc)) = (&self.dec, &self.enc) else {
            return Ok(());
        };
        gpu.download_into(dec, &mut st.params.dec)?;
        gpu.download_into(enc, &mut st.params.enc)?;
        let [mg, vg, me, ve] = &self.moments;
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
