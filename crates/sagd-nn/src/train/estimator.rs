//! The estimators by what they estimate, each built on a device chosen once, here: the training
//! job and everything above it run the same on either device, so a network of the engine's
//! layers trains on a GPU with no GPU code of its own (`examples/own_decoder.rs`).

use sagd::error::Result;

use super::{
    BoundEstimator, ChainEstimator, GpuBoundEstimator, GpuChainEstimator, GradientEstimator,
    HmcChains, LangevinChains,
};
use crate::cuda::Gpu;
use crate::vae::Vae;
use crate::Device;

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
    /// and the same encoder draws; the settings are checked before any work.
    pub fn on<'a>(
        &self,
        device: Device,
        vae: &'a Vae,
        x: &'a [f32],
        seed: u64,
    ) -> Result<Box<dyn GradientEstimator + 'a>> {
        Ok(match (*self, device) {
            (Estimator::Bound { k }, Device::Cpu) => Box::new(BoundEstimator::new(vae, x, k, seed)),
            (Estimator::Bound { k }, Device::Cuda(i)) => {
                Box::new(GpuBoundEstimator::new(Gpu::open(i)?, vae, x, k, seed))
            }
            (Estimator::Hmc(s), Device::Cpu) => Box::new(ChainEstimator::hmc(vae, x, &s, seed)?),
            (Estimator::Hmc(s), Device::Cuda(i)) => {
                Box::new(GpuChainEstimator::hmc(Gpu::open(i)?, vae, x, &s, seed)?)
            }
            (Estimator::Sagd(s), Device::Cpu) => Box::new(ChainEstimator::sagd(vae, x, &s, seed)?),
            (Estimator::Sagd(s), Device::Cuda(i)) => {
                Box::new(GpuChainEstimator::sagd(Gpu::open(i)?, vae, x, &s, seed)?)
            }
        })
    }
}
