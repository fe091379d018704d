//! The passes of a VAE of binary images on the GPU: the CPU's [`vae_batch`](crate::bernoulli::vae_batch)
//! and [`sagd_batch`](crate::bernoulli::sagd_batch) step for step, from the same binarised
//! images and the same noise drawn on the host, so both engines compute the same gradients to
//! float rounding. A whole minibatch is one pass over all its rows (E3: 4000 chain states for SAGD's
//! 20 chains of 200 images). The VAE's pass is the device's one bound pass (E2's too) under
//! the Bernoulli law; SAGD's chains read the same law's rows.

use cudarc::driver::{CudaSlice, PushKernelArg};

use crate::bernoulli::{BatchInfo, BernoulliVae, Carried, Chains};
use crate::cuda::{grid, Gpu, GpuError, GpuResult, GpuWorkspace, LikelihoodRows};
use crate::likelihood::DeviceLaw;
use crate::train::{last_pass, placed, AdamStep, BoundPass, DeviceState, Grads, TrainState};
use crate::vae::VaeParams;

mod chains;
mod update;

use chains::SagdPass;

/// Device buffers of the passes, kept between minibatches.
#[derive(Default)]
struct Buffers {
    /// The generator's and the encoder's parameters (`dec`, `enc`), and, when the device takes
    /// the updates, Adam's moments.
    state: DeviceState,
    /// The VAE's pass, SAGD's, and whether the VAE's made the last pass's gradients.
    bound: BoundPass,
    sagd: SagdPass,
    vae_last: bool,
}

/// The passes of a [`BernoulliVae`] on one GPU.
pub struct GpuPasses {
    gpu: Gpu,
    b: Buffers,
}

/// What a minibatch pass computes: the VAE's ELBO, or SAGD's chains.
#[derive(Clone, Copy, Debug)]
pub enum Pass<'c> {
    /// The negative ELBO; both networks' gradients.
    Vae,
    /// SAGD's generator gradient from these chains.
    Sagd(&'c Chains),
}

impl GpuPasses {
    /// The passes on `gpu`.
    pub fn new(gpu: Gpu) -> Self {
        GpuPasses {
            gpu,
            b: Buffers::default(),
        }
    }

    /// Puts the networks' parameters `p` on the device (any training state it held is gone).
    fn load_params(&mut self, p: &VaeParams) -> GpuResult<()> {
        self.b.state.put_params(&self.gpu, p)
    }

    /// The VAE's mean negative ELBO over the binarised images `x` (b × pixels) with the noise `eps`
    /// (b × d), its gradients written into `g_dec` (the generator's) and `g_enc`: the CPU's
    /// [`vae_batch`](crate::bernoulli::vae_batch).
    pub fn vae_batch(
        &mut self,
        m: &BernoulliVae,
        p: &VaeParams,
        x: &[f32],
        eps: &[f32],
        g_dec: &mut [f32],
        g_enc: &mut [f32],
    ) -> GpuResult<BatchInfo> {
        self.load_params(p)?;
        let info = self.vae_pass(m, x, eps)?;
        self.b.bound.download(&self.gpu, (g_dec, g_enc), false)?;
        Ok(info)
    }

    /// A pass on the parameters on the device; its gradients stay there (`g_gen`, `g_enc`).
    /// SAGD's chains continue from `carried` where given, and leave their last states there.
    fn pass(
        &mut self,
        m: &BernoulliVae,
        x: &[f32],
        noise: &[f32],
        what: Pass<'_>,
        carried: Option<&mut Carried>,
    ) -> GpuResult<BatchInfo> {
        match what {
            Pass::Vae => self.vae_pass(m, x, noise),
            Pass::Sagd(chains) => self.sagd_pass(m, x, chains, noise, carried),
        }
    }

    /// The device's bound pass (k = 1) under the Bernoulli law: the CPU's `vae_batch`.
    fn vae_pass(&mut self, m: &BernoulliVae, x: &[f32], eps: &[f32]) -> GpuResult<BatchInfo> {
        let b = &mut self.b;
        let state = &b.state;
        let nets = ((&m.enc, &state.enc), (&m.gen, &state.dec));
        let loss = b
            .bound
            .run(&self.gpu, nets, (x, eps, DeviceLaw::Bernoulli), 1, None)?;
        b.vae_last = true;
        Ok(BatchInfo {
            loss,
            displacement: 0.0,
        })
    }

    /// SAGD's pass (k = 1) on the parameters the device holds: the CPU's `sagd_batch`.
    fn sagd_pass(
        &mut self,
        m: &BernoulliVae,
        x: &[f32],
        chains: &Chains,
        noise: &[f32],
        carried: Option<&mut Carried>,
    ) -> GpuResult<BatchInfo> {
        let b = &mut self.b;
        b.vae_last = false;
        let nets = (m, &b.state);
        b.sagd.run(&self.gpu, nets, (x, noise), chains, carried)
    }

    /// SAGD's generator gradient on the binarised images `x` (b × pixels), encoder frozen, from
    /// `noise` laid out as the CPU's [`sagd_batch`](crate::bernoulli::sagd_batch) reads it
    /// (ε, ρ₀, then each step's η); written into `g_dec`.
    pub fn sagd_batch(
        &mut self,
        m: &BernoulliVae,
        p: &VaeParams,
        x: &[f32],
        chains: &Chains,
        noise: &[f32],
        g_dec: &mut [f32],
    ) -> GpuResult<BatchInfo> {
        self.sagd_batch_from(m, p, x, chains, noise, None, g_dec)
    }

    /// [`GpuPasses::sagd_batch`] on chains that persist between visits, as the CPU's
    /// [`sagd_batch_continued`](crate::bernoulli::sagd_batch_continued): the rows `carried`
    /// marks start where it holds them, every transition runs whole, and every row's last
    /// position and momentum go back into `carried`.
    #[allow(clippy::too_many_arguments)]
    pub fn sagd_batch_continued(
        &mut self,
        m: &BernoulliVae,
        p: &VaeParams,
        x: &[f32],
        chains: &Chains,
        noise: &[f32],
        carried: &mut Carried,
        g_dec: &mut [f32],
    ) -> GpuResult<BatchInfo> {
        self.sagd_batch_from(m, p, x, chains, noise, Some(carried), g_dec)
    }

    #[allow(clippy::too_many_arguments)]
    fn sagd_batch_from(
        &mut self,
        m: &BernoulliVae,
        p: &VaeParams,
        x: &[f32],
        chains: &Chains,
        noise: &[f32],
        carried: Option<&mut Carried>,
        g_dec: &mut [f32],
    ) -> GpuResult<BatchInfo> {
        self.load_params(p)?;
        let info = self.sagd_pass(m, x, chains, noise, carried)?;
        if let Some(g) = self.b.sagd.gradient() {
            self.gpu.download_into(g, g_dec)?;
        }
        Ok(info)
    }
}
