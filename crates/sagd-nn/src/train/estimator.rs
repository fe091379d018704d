//! What a gradient estimator is to the training job ([`GradientEstimator`]), the helpers its
//! implementations share, and the estimators by what they estimate, each built on a device
//! chosen once, here: the training job and everything above it run the same on either device, so
//! a network of the engine's layers trains on a GPU with no GPU code of its own
//! (`examples/own_decoder.rs`).

use std::any::type_name;

use sagd::error::{Result, SagdError};
use sagd::rng::NormalStream;

use super::{
    AdamStep, BoundEstimator, ChainEstimator, GpuBoundEstimator, GpuChainEstimator, HmcChains,
    LangevinChains, TrainState,
};
use crate::cuda::Gpu;
use crate::likelihood::{DeviceLaw, Likelihood, UnitGaussian};
use crate::net::WorkspacePool;
use crate::vae::{Vae, VaeParams};
use crate::Device;

/// A gradient estimate of the training loss at the current parameters.
pub trait GradientEstimator {
    /// Whether the encoder is trained too.
    fn trains_encoder(&self) -> bool;
    /// Adds the gradient of the loss on the data points `batch` into `g_dec` (and `g_enc`), and
    /// returns the loss estimate.
    fn estimate(
        &mut self,
        p: &VaeParams,
        batch: &[usize],
        g_dec: &mut [f32],
        g_enc: &mut [f32],
    ) -> Result<f64>;
    /// The estimator's own state (random streams, chains), for checkpoints.
    fn save_state(&self) -> Result<Vec<u8>>;
    /// Restores [`GradientEstimator::save_state`].
    fn load_state(&mut self, bytes: &[u8]) -> Result<()>;
    /// Method diagnostics (acceptance rates, chain states), as JSON.
    fn diagnostics(&self) -> serde_json::Value {
        serde_json::Value::Null
    }
    /// The device that keeps the training state between updates, where the estimator's
    /// updates are taken there ([`DeviceParams`]: the training job loads it, asks for the
    /// gradient and takes the update rule's step on the device); `None` (the default): the
    /// host takes each step from [`GradientEstimator::estimate`]'s gradient.
    fn device_params(&mut self) -> Option<&mut dyn DeviceParams> {
        None
    }
    /// Takes the whole update on the estimator's device where it can: the gradient on `batch`
    /// and Adam's `step` on parameters and moments kept there between updates, returning the
    /// loss; `None` (the default) leaves the step to the host. `st` is the state before the
    /// update: a device whose copy is not of `st.updates` loads it first (after a resume).
    /// Asked only where [`GradientEstimator::device_params`] is `None`.
    #[deprecated(
        since = "0.1.0",
        note = "implement GradientEstimator::device_params: the training job then takes the \
                update rule's step on the device itself"
    )]
    fn device_update(
        &mut self,
        _st: &TrainState,
        _batch: &[usize],
        _step: AdamStep,
    ) -> Option<Result<f64>> {
        None
    }
    /// Writes the device's parameters and Adam moments into `st` (before a checkpoint, at the
    /// end of a run); nothing where the host keeps them. Asked only where
    /// [`GradientEstimator::device_params`] is `None`.
    #[deprecated(
        since = "0.1.0",
        note = "implement GradientEstimator::device_params, whose DeviceParams::sync the \
                training job calls"
    )]
    fn device_sync(&mut self, _st: &mut TrainState) -> Result<()> {
        Ok(())
    }
}

/// The networks' parameters and Adam's moments kept on an estimator's device between updates,
/// and the device's operations on them. The training job ([`super::Training`]) drives them: it
/// loads the state where the device's copy is not of the update it is at (the first update, a
/// resume), asks for a minibatch's gradient, which stays on the device, and takes the update
/// rule's step there (the backend's Adam, rounded as the host's rule) when every value of it is
/// finite; before a checkpoint, before an observer that reads the parameters (a learning curve:
/// [`Observer::reads_state`](sagd::run::Observer::reads_state)) and at the end it brings the
/// host's state up to date. Other observers see the parameters of the last synchronisation.
pub trait DeviceParams {
    /// The update count of the state the device holds for the networks `encoder` says (the
    /// encoder too, or the decoder alone); `None`: none.
    fn held(&self, encoder: bool) -> Option<usize>;
    /// Puts `st`'s parameters and moments on the device (the encoder's too with `encoder`);
    /// the device then holds the state of `st.updates`.
    fn load(&mut self, st: &TrainState, encoder: bool) -> Result<()>;
    /// The loss on the data points `batch` at the parameters the device holds, its gradient
    /// kept there.
    fn gradient(&mut self, batch: &[usize]) -> Result<f64>;
    /// Whether every value of the kept gradient is finite.
    fn finite(&mut self) -> Result<bool>;
    /// The update rule's `step` from the kept gradient, on the device, which then holds the
    /// state of the next update.
    fn step(&mut self, step: AdamStep) -> Result<()>;
    /// Writes the device's parameters and moments into `st` where they are of its update count
    /// (else there is nothing newer on the device).
    fn sync(&mut self, st: &mut TrainState) -> Result<()>;
}

/// The rows `batch` of a row-major matrix with `d` columns, into `out`.
pub fn gather_rows(x: &[f32], d: usize, batch: &[usize], out: &mut Vec<f32>) {
    out.clear();
    for &i in batch {
        out.extend_from_slice(&x[i * d..(i + 1) * d]);
    }
}

/// One reparameterised draw u = μ + σ ε per data point (n × d; the points n × [`Vae::data_dim`]),
/// from the current encoder: the noise drawn in one stream, the encoder run on pieces of rows in
/// parallel.
pub fn encoder_draw(
    vae: &Vae,
    p: &VaeParams,
    x: &[f32],
    stream: &mut NormalStream,
    pool: &mut WorkspacePool,
) -> Vec<f32> {
    use rayon::prelude::*;
    let (d, px) = (vae.d, vae.data_dim());
    let n = x.len() / px.max(1);
    let mut u = vec![0.0f32; n * d];
    stream.fill(&mut u);
    pool.ensure(rayon::current_num_threads());
    let rows = vae.enc.piece_rows(n);
    let pool = &*pool;
    x.par_chunks(rows * px)
        .zip(u.par_chunks_mut(rows * d))
        .for_each(|(xp, up)| {
            pool.with(|ws| {
                vae.enc.forward(&p.enc, xp, xp.len() / px, ws);
                let out = ws.output();
                for (i, ui) in up.chunks_exact_mut(d).enumerate() {
                    for (j, v) in ui.iter_mut().enumerate() {
                        let (mu, lv) = (out[i * 2 * d + j], out[i * 2 * d + d + j]);
                        *v = mu + (0.5 * lv).exp() * *v;
                    }
                }
            })
        });
    u
}

/// A gradient estimator by what it estimates: a bound through both networks (the ELBO, or the
/// importance-weighted bound), or chains on the decoder's posterior for the decoder alone (HMC
/// from an encoder draw at every update, or SAGD's persistent Langevin chains).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Estimator {
    /// The ELBO (k = 1) or the IWAE bound (k > 1), reparameterised.
    Bound {
        /// Samples per data point.
        k: usize,
    },
    /// HMC's chains.
    Hmc(HmcChains),
    /// SAGD's chains.
    Sagd(LangevinChains),
}

impl Estimator {
    /// The estimator of `vae` on the data `x` (n points of `vae.d` values, row-major), its
    /// draws from `seed`, on `device`: the CPU engine, or the CUDA backend (opened here, with an
    /// error that names what is missing where there is no GPU). Either takes the same settings
    /// and the same encoder draws; the settings are checked before any work. The data's
    /// likelihood is the paper's, N(x; h, I) ([`Estimator::on_with`] for another).
    pub fn on<'a>(
        &self,
        device: Device,
        vae: &'a Vae,
        x: &'a [f32],
        seed: u64,
    ) -> Result<Box<dyn GradientEstimator + 'a>> {
        self.on_with(device, vae, UnitGaussian, x, seed)
    }

    /// [`Estimator::on`] under the likelihood `lik` of the decoder's output (binary data:
    /// [`crate::likelihood::Bernoulli`], counts: [`crate::likelihood::Poisson`], or a user's own),
    /// the data `x` points of [`Vae::data_dim`] values. Refused, by name and before any work,
    /// where the networks do not fit each other ([`Vae::check`]) or `x` is not whole points. The
    /// CUDA backend computes every law of [`crate::likelihood`] (those with a
    /// [`Likelihood::device_law`]) for data of any dimension, and refuses a law of one's own by
    /// name.
    pub fn on_with<'a, L: Likelihood + 'static>(
        &self,
        device: Device,
        vae: &'a Vae,
        lik: L,
        x: &'a [f32],
        seed: u64,
    ) -> Result<Box<dyn GradientEstimator + 'a>> {
        vae.check()?;
        let px = vae.data_dim();
        if !x.len().is_multiple_of(px) {
            return Err(SagdError::InvalidSetting {
                name: "x",
                value: format!("{} values", x.len()),
                fix: format!("give whole data points of {px} values (the decoder's outputs)"),
            });
        }
        let law = match (device, lik.device_law()) {
            (Device::Cuda(_), None) => {
                return Err(SagdError::InvalidSetting {
                    name: "device",
                    value: format!("{device} for {}", type_name::<L>()),
                    fix: "the CUDA backend computes the likelihoods of sagd_nn::likelihood \
                          (UnitGaussian, Gaussian, Bernoulli, Poisson), not a law of one's own: \
                          run this model on the CPU, or give a law the backend knows"
                        .into(),
                });
            }
            (_, law) => law.unwrap_or(DeviceLaw::Gaussian { precision: 1.0 }),
        };
        Ok(match (*self, device) {
            (Estimator::Bound { k }, Device::Cpu) => {
                Box::new(BoundEstimator::with_likelihood(vae, lik, x, k, seed))
            }
            (Estimator::Bound { k }, Device::Cuda(i)) => Box::new(GpuBoundEstimator::with_law(
                Gpu::open(i)?,
                vae,
                law,
                x,
                k,
                seed,
            )),
            (Estimator::Hmc(s), Device::Cpu) => {
                Box::new(ChainEstimator::hmc_with(vae, lik, x, &s, seed)?)
            }
            (Estimator::Hmc(s), Device::Cuda(i)) => Box::new(GpuChainEstimator::hmc_with(
                Gpu::open(i)?,
                vae,
                law,
                x,
                &s,
                seed,
            )?),
            (Estimator::Sagd(s), Device::Cpu) => {
                Box::new(ChainEstimator::sagd_with(vae, lik, x, &s, seed)?)
            }
            (Estimator::Sagd(s), Device::Cuda(i)) => Box::new(GpuChainEstimator::sagd_with(
                Gpu::open(i)?,
                vae,
                law,
                x,
                &s,
                seed,
            )?),
        })
    }
}
