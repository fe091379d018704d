//! The gradient estimator of a VAE of binary images (E3's): the VAE's or SAGD's minibatch pass on
//! either engine, with each update's binarised images and noise drawn from per-purpose streams
//! (ahead, on a second thread, when a GPU runs the pass), and the whole update on the device
//! where the rule allows it. In a run split over processes the CPU's passes split by their own
//! pieces (the same bits as one process); GPUs, one per process, each run their share of the
//! minibatch's images whole ([`by_shares`]).

use rand_xoshiro::Xoshiro256PlusPlus;
use sagd::error::{Result, SagdError};
use sagd::rng::{NormalStream, Seed};
use sagd::run::{decode, encode};
use serde::{Deserialize, Serialize};

use super::carry::ChainStore;
use super::gpu::{GpuPasses, Pass};
use super::shares::by_shares;
use super::{
    binarise_with, sagd_batch, sagd_batch_continued, sagd_noise_blocks, sagd_noise_len, uniforms,
    vae_batch, BernoulliVae, Chains, Scratch,
};
use crate::cuda::Gpu;
use crate::train::{on_host, DeviceParams, DeviceState, GradientEstimator, Grads, OnDevice};
use crate::vae::VaeParams;
use crate::Device;

/// What a training phase of a VAE of binary images optimises.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum Objective {
    /// The negative ELBO, both networks.
    Vae,
    /// SAGD's generator gradient from Langevin chains; the encoder frozen (it only starts them).
    Sagd(Chains),
}

/// The gradient of a training phase on minibatches of grey-level images, freshly binarised each
/// time (E3's phases are its instances).
pub struct BernoulliEstimator<'a> {
    model: &'a BernoulliVae,
    images: &'a [u8],
    objective: Objective,
    streams: Streams,
    engine: Engine,
    x: Vec<f32>,
    noise: Vec<f32>,
    /// The next update's draws, made while the GPU works on this one.
    ahead: Option<Ahead>,
    /// Updates done (a chain schedule's t), and K_t's scale.
    update: usize,
    k_scale: f64,
    /// Persistent chains between the images' visits.
    carry: ChainStore,
}

/// The estimator's checkpointed state.
#[derive(Serialize, Deserialize)]
struct EstimatorRecord {
    streams: Streams,
    update: usize,
    carry: ChainStore,
}

/// [`EstimatorRecord`] as checkpoints held it before chains could persist.
#[derive(Deserialize)]
struct CountedStreams {
    streams: Streams,
    update: usize,
}

/// An update's draws: a binarisation's uniforms and the pass's normals, with the streams after
/// them. Made ahead for the next update on the GPU, and taken when it asks for as many; otherwise
/// dropped and drawn afresh from the estimator's streams, which stay those after the draws used
/// (the checkpointed state): the same draws, in the same order, as drawing in turn.
struct Ahead {
    uniforms: Vec<f32>,
    normals: Vec<f32>,
    after: Streams,
}

/// Where an estimator's passes run. Both draw the same binarisations and noise on the host.
enum Engine {
    /// The CPU engine, its buffers.
    Cpu(Scratch),
    /// A GPU.
    Gpu(Box<GpuPasses>),
}

/// The estimator's random streams (its checkpointed state).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
struct Streams {
    binarise: Xoshiro256PlusPlus,
    normals: NormalStream,
}

impl<'a> BernoulliEstimator<'a> {
    /// The estimator of `objective` on `images` (n images of `model.pixels()` grey levels,
    /// 0-255, row by row), its streams from `seed`, on the CPU engine. [`Self::on`] also checks
    /// the images and the chains; a minibatch beyond the images is refused when it comes.
    pub fn new(model: &'a BernoulliVae, images: &'a [u8], objective: Objective, seed: u64) -> Self {
        BernoulliEstimator {
            model,
            images,
            objective,
            streams: Streams {
                binarise: Seed::new(seed).stream("binarise").rng(),
                normals: Seed::new(seed).stream("noise").normals(),
            },
            engine: Engine::Cpu(Scratch::default()),
            x: Vec::new(),
            noise: Vec::new(),
            ahead: None,
            update: 0,
            k_scale: match objective {
                Objective::Sagd(chains) => chains.k_scale(),
                Objective::Vae => 1.0,
            },
            carry: ChainStore::default(),
        }
    }

    /// The same estimator on `device` (the same draws: a GPU computes the CPU's gradients to
    /// float rounding); images that are not whole rows of the model's pixels, invalid chains
    /// ([`Chains::validate`]) and chains the device cannot run are refused by name before any
    /// work.
    pub fn on(
        device: Device,
        model: &'a BernoulliVae,
        images: &'a [u8],
        objective: Objective,
        seed: u64,
    ) -> Result<Self> {
        if !images.len().is_multiple_of(model.pixels()) {
            return Err(SagdError::InvalidSetting {
                name: "images",
                value: format!("{} grey levels", images.len()),
                fix: format!(
                    "give whole images of the generator's {} pixels each",
                    model.pixels()
                ),
            });
        }
        if let Objective::Sagd(c) = &objective {
            c.validate()?;
            c.runs_on(device)?;
        }
        let mut est = Self::new(model, images, objective, seed);
        if let Device::Cuda(i) = device {
            est.engine = Engine::Gpu(Box::new(GpuPasses::new(Gpu::open(i)?)));
        }
        Ok(est)
    }
}

impl BernoulliEstimator<'_> {
    /// The minibatch's fresh binarisation into `x` and the pass's noise into `noise`, from the
    /// estimator's streams (the same draws for either engine); a minibatch that names an image
    /// beyond the estimator's is refused by name (a training job told of more points than there
    /// are images), the streams untouched.
    fn draw(&mut self, batch: &[usize]) -> Result<()> {
        let px = self.model.pixels();
        let images = self.images.len() / px;
        if let Some(&i) = batch.iter().find(|&&i| i >= images) {
            return Err(SagdError::InvalidSetting {
                name: "minibatch",
                value: format!("image {i}"),
                fix: format!(
                    "the estimator holds {images} images: build the training job on that many \
                     points"
                ),
            });
        }
        let mut pixels = Vec::with_capacity(batch.len() * px);
        for &i in batch {
            pixels.extend_from_slice(&self.images[i * px..(i + 1) * px]);
        }
        let len = self.noise_len(batch.len(), self.update);
        let draws = match self.ahead.take() {
            Some(a) if a.uniforms.len() == pixels.len() && a.normals.len() == len => a,
            _ => Ahead::draw(&self.streams, pixels.len(), len),
        };
        self.streams = draws.after;
        self.x = binarise_with(&pixels, &draws.uniforms);
        self.noise = draws.normals;
        Ok(())
    }

    /// The next update's draws (see [`Self::draw`]) and what it computes; the update counted.
    fn next_update(&mut self, batch: &[usize]) -> Result<Objective> {
        self.draw(batch)?;
        let objective = self.objective_at(self.update);
        self.update += 1;
        Ok(objective)
    }

    /// Normals per pass of update `t` over `images` images.
    fn noise_len(&self, images: usize, t: usize) -> usize {
        match self.objective_at(t) {
            Objective::Vae => images * self.model.d,
            Objective::Sagd(chains) => sagd_noise_len(self.model, &chains, images),
        }
    }

    /// What update `t` computes: SAGD's chains at their δ_t and K_t.
    fn objective_at(&self, t: usize) -> Objective {
        match self.objective {
            Objective::Sagd(chains) => Objective::Sagd(chains.at_scaled(t, self.k_scale)),
            vae => vae,
        }
    }
}

impl Ahead {
    /// The draws of an update over images of `pixels` pixels in all with `normals` normals,
    /// from a copy of `streams` (which do not move).
    fn draw(streams: &Streams, pixels: usize, normals: usize) -> Self {
        let mut after = streams.clone();
        let uniforms = uniforms(&mut after.binarise, pixels);
        let mut z = vec![0.0f32; normals];
        after.normals.fill(&mut z);
        Ahead {
            uniforms,
            normals: z,
            after,
        }
    }
}

/// A pass's loss, or the error that stops a run whose networks overflowed at its `iteration`
/// (1-based).
fn finite_loss(loss: f64, iteration: usize) -> Result<f64> {
    if loss.is_finite() {
        Ok(loss)
    } else {
        Err(SagdError::NonFiniteUpdate { iteration })
    }
}

impl GradientEstimator for BernoulliEstimator<'_> {
    fn trains_encoder(&self) -> bool {
        self.objective == Objective::Vae
    }

    fn estimate(
        &mut self,
        p: &VaeParams,
        batch: &[usize],
        g_dec: &mut [f32],
        g_enc: &mut [f32],
    ) -> Result<f64> {
        let objective = self.next_update(batch)?;
        let (m, x, noise) = (self.model, &self.x, &self.noise);
        let info = match (objective, &mut self.engine) {
            (Objective::Vae, Engine::Cpu(scratch)) => {
                vae_batch(m, p, x, noise, g_dec, g_enc, scratch)?
            }
            (Objective::Vae, Engine::Gpu(gpu)) => by_shares(
                (x, m.pixels()),
                noise,
                1,
                g_dec,
                g_enc,
                |x, noise, g_dec, g_enc| Ok(gpu.vae_batch(m, p, x, noise, g_dec, g_enc)?),
            )?,
            (Objective::Sagd(chains), Engine::Cpu(scratch)) if chains.persist() => {
                let images = self.images.len() / m.pixels();
                let mut chain = self.carry.carried(images, batch, &chains, m.d);
                let info =
                    sagd_batch_continued(m, p, x, &chains, noise, &mut chain, g_dec, scratch)?;
                self.carry.keep(batch, &chains, m.d, &chain);
                info
            }
            (Objective::Sagd(chains), Engine::Cpu(scratch)) => {
                sagd_batch(m, p, x, &chains, noise, g_dec, scratch)?
            }
            (Objective::Sagd(chains), Engine::Gpu(gpu)) if chains.persist() => {
                // One process's whole minibatch (`Chains::runs_on` refuses a split run).
                let images = self.images.len() / m.pixels();
                let mut chain = self.carry.carried(images, batch, &chains, m.d);
                let info = gpu.sagd_batch_continued(m, p, x, &chains, noise, &mut chain, g_dec)?;
                self.carry.keep(batch, &chains, m.d, &chain);
                info
            }
            (Objective::Sagd(chains), Engine::Gpu(gpu)) => {
                let groups = sagd_noise_blocks(&chains);
                by_shares(
                    (x, m.pixels()),
                    noise,
                    groups,
                    g_dec,
                    &mut [],
                    |x, noise, g_dec, _| Ok(gpu.sagd_batch(m, p, x, &chains, noise, g_dec)?),
                )?
            }
        };
        finite_loss(info.loss, self.update)
    }

    fn device_params(&mut self) -> Option<&mut dyn DeviceParams> {
        // Split over processes, the shares' gradients meet on the host, and so does the update.
        match self.engine {
            Engine::Gpu(_) if sagd::share::current().is_none() => Some(self),
            _ => None,
        }
    }

    fn save_state(&self) -> Result<Vec<u8>> {
        encode(&EstimatorRecord {
            streams: self.streams.clone(),
            update: self.update,
            carry: self.carry.clone(),
        })
    }

    fn load_state(&mut self, bytes: &[u8]) -> Result<()> {
        // Older checkpoints hold no persistent chains, or (before the update count) the streams
        // alone (no schedule ran).
        let r = decode::<EstimatorRecord>(bytes)
            .or_else(|_| {
                decode::<CountedStreams>(bytes).map(|r| EstimatorRecord {
                    streams: r.streams,
                    update: r.update,
                    carry: ChainStore::default(),
                })
            })
            .or_else(|_| {
                decode::<Streams>(bytes).map(|streams| EstimatorRecord {
                    streams,
                    update: 0,
                    carry: ChainStore::default(),
                })
            })?;
        self.streams = r.streams;
        self.update = r.update;
        self.carry = r.carry;
        self.ahead = None;
        Ok(())
    }
}

/// The training state on the GPU, for the training job to drive: `device_params` lends it only
/// where the passes run on one (and not split over processes).
impl OnDevice for BernoulliEstimator<'_> {
    fn state(&self) -> Option<&DeviceState> {
        match &self.engine {
            Engine::Gpu(gpu) => Some(gpu.state()),
            Engine::Cpu(_) => None,
        }
    }

    fn on_device(&mut self) -> Option<(&Gpu, &mut DeviceState, Option<Grads<'_>>)> {
        match &mut self.engine {
            Engine::Gpu(gpu) => Some(gpu.on_device()),
            Engine::Cpu(_) => None,
        }
    }

    fn pass_at_held(&mut self, batch: &[usize]) -> Result<f64> {
        let objective = self.next_update(batch)?;
        let what = match &objective {
            Objective::Vae => Pass::Vae,
            Objective::Sagd(chains) => Pass::Sagd(chains),
        };
        // A second thread draws the next update's binarisation and noise while the GPU runs
        // this one from this thread (where its context is current).
        let len = self.noise_len(batch.len(), self.update);
        let images = self.images.len() / self.model.pixels();
        let mut chain = match &objective {
            Objective::Sagd(chains) if chains.persist() => {
                Some(self.carry.carried(images, batch, chains, self.model.d))
            }
            _ => None,
        };
        let (result, ahead) = {
            let Engine::Gpu(gpu) = &mut self.engine else {
                return Err(on_host());
            };
            let (model, x, noise) = (self.model, &self.x, &self.noise);
            let streams = &self.streams;
            std::thread::scope(|s| {
                let ahead = s.spawn(|| Ahead::draw(streams, batch.len() * model.pixels(), len));
                let result = gpu.pass_on_held(model, (x, noise), what, chain.as_mut());
                (result, ahead.join())
            })
        };
        if let (Objective::Sagd(chains), Some(c), Ok(_)) = (&objective, &chain, &result) {
            self.carry.keep(batch, chains, self.model.d, c);
        }
        // A draw that failed to finish is simply made again in turn.
        self.ahead = ahead.ok();
        finite_loss(result?.loss, self.update)
    }
}

#[cfg(test)]
mod tests;
