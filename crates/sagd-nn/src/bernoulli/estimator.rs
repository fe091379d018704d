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
use crate::train::{AdamStep, DeviceParams, GradientEstimator, TrainState};
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
impl DeviceParams for BernoulliEstimator<'_> {
    fn held(&self, encoder: bool) -> Option<usize> {
        match &self.engine {
            Engine::Gpu(gpu) => gpu.held(encoder),
            Engine::Cpu(_) => None,
        }
    }

    fn load(&mut self, st: &TrainState, encoder: bool) -> Result<()> {
        Ok(self.gpu()?.load(st, encoder)?)
    }

    fn gradient(&mut self, batch: &[usize]) -> Result<f64> {
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
                return Err(no_gpu());
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

    fn finite(&mut self) -> Result<bool> {
        Ok(self.gpu()?.finite()?)
    }

    fn step(&mut self, step: AdamStep) -> Result<()> {
        Ok(self.gpu()?.step(step)?)
    }

    fn sync(&mut self, st: &mut TrainState) -> Result<()> {
        match &mut self.engine {
            Engine::Gpu(gpu) => Ok(gpu.sync(st)?),
            Engine::Cpu(_) => Ok(()),
        }
    }
}

/// The error of a device operation asked of an estimator on the CPU.
fn no_gpu() -> SagdError {
    SagdError::Device("the training state is on the host: this estimator runs on the CPU".into())
}

impl BernoulliEstimator<'_> {
    /// The passes' GPU.
    fn gpu(&mut self) -> Result<&mut GpuPasses> {
        match &mut self.engine {
            Engine::Gpu(gpu) => Ok(gpu),
            Engine::Cpu(_) => Err(no_gpu()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::{small_vae, PX};
    use super::*;

    #[test]
    fn a_schedule_sets_each_update_s_chains_and_its_count_is_checkpointed() {
        let model = small_vae(4);
        let images: Vec<u8> = (0..2 * PX).map(|i| (i * 37 % 256) as u8).collect();
        let chains = Chains {
            schedule: Some(crate::train::ChainSchedule {
                decay: 0.5,
                growth: 1.0,
                updates: 0,
            }),
            ..Chains::default()
        }
        .over(100);
        // δ_t = δ/√(1 + t); K_t grows to about twice K, 500 steps in all as K = 5 fixed.
        let at: Vec<Chains> = (0..100).map(|t| chains.at(t)).collect();
        assert_eq!((at[0].delta, at[3].delta), (0.01, 0.005));
        let total: usize = at.iter().map(|c| c.steps).sum();
        assert!((total as i64 - 500).abs() <= 50, "{total}");
        assert!(at.windows(2).all(|w| w[1].steps >= w[0].steps) && at[99].steps == 10);
        assert_eq!(Chains::default().at(7), Chains::default());
        let mut est = BernoulliEstimator::new(&model, &images, Objective::Sagd(chains), 3);
        est.update = 7;
        let saved = est.save_state().unwrap();
        let mut again = BernoulliEstimator::new(&model, &images, Objective::Sagd(chains), 3);
        again.load_state(&saved).unwrap();
        assert_eq!((again.update, &again.streams), (7, &est.streams));
        // A checkpoint from before the count: the streams alone, at update 0.
        again.load_state(&encode(&est.streams).unwrap()).unwrap();
        assert_eq!((again.update, &again.streams), (0, &est.streams));
        assert!(again.load_state(&[1, 2, 3]).is_err());
    }

    /// A pass whose loss overflows stops the run with the error naming its update (1-based).
    #[test]
    fn a_non_finite_loss_names_its_update() {
        let model = small_vae(2);
        let images: Vec<u8> = (0..4 * PX).map(|i| (i * 37 % 256) as u8).collect();
        let mut p = model.init(1);
        let mut est = BernoulliEstimator::new(&model, &images, Objective::Vae, 3);
        let (mut gd, mut ge) = (vec![0.0; p.dec.len()], vec![0.0; p.enc.len()]);
        est.estimate(&p, &[0, 1], &mut gd, &mut ge).expect("finite");
        p.dec.iter_mut().for_each(|w| *w = f32::INFINITY);
        match est.estimate(&p, &[2, 3], &mut gd, &mut ge) {
            Err(SagdError::NonFiniteUpdate { iteration }) => assert_eq!(iteration, 2),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn draws_made_ahead_are_the_draws_in_turn() {
        let model = small_vae(20);
        let images: Vec<u8> = (0..4 * PX).map(|i| (i * 37 % 256) as u8).collect();
        let objective = Objective::Sagd(Chains::default());
        let batches: [&[usize]; 4] = [&[0, 1], &[2, 3], &[1], &[3]];
        // In turn.
        let mut a = BernoulliEstimator::new(&model, &images, objective, 7);
        let turn: Vec<_> = batches
            .iter()
            .map(|b| {
                a.draw(b).unwrap();
                (a.x.clone(), a.noise.clone(), a.streams.clone())
            })
            .collect();
        // Each update's draws made ahead for the next update's size: taken where the sizes
        // agree (the second and fourth), dropped where they do not (the third).
        let mut b = BernoulliEstimator::new(&model, &images, objective, 7);
        for (k, batch) in batches.iter().enumerate() {
            b.draw(batch).unwrap();
            assert_eq!(
                (&b.x, &b.noise, &b.streams),
                (&turn[k].0, &turn[k].1, &turn[k].2)
            );
            let len = b.noise_len(batch.len(), b.update);
            b.ahead = Some(Ahead::draw(&b.streams, batch.len() * PX, len));
            // Its streams stay those of the draws used: what a checkpoint saves.
            assert_eq!(b.streams, turn[k].2);
        }
    }

    /// Each update's generator gradient at the same parameters `p`, on the minibatch of every
    /// image, for `chains`; the estimator after them.
    fn gradients<'a>(
        model: &'a BernoulliVae,
        images: &'a [u8],
        p: &VaeParams,
        chains: Chains,
        updates: usize,
    ) -> (Vec<Vec<f32>>, BernoulliEstimator<'a>) {
        let mut est = BernoulliEstimator::new(model, images, Objective::Sagd(chains), 5);
        let batch: Vec<usize> = (0..images.len() / model.pixels()).collect();
        let grads = (0..updates)
            .map(|_| {
                let mut g = vec![0.0f32; p.dec.len()];
                est.estimate(p, &batch, &mut g, &mut []).unwrap();
                g
            })
            .collect();
        (grads, est)
    }

    #[test]
    fn persistent_chains_continue_between_visits_and_restart_every_r_th() {
        let model = small_vae(3);
        let images: Vec<u8> = (0..3 * PX).map(|i| (i * 53 % 256) as u8).collect();
        let p = model.init(2);
        let fresh = Chains {
            per_image: 2,
            steps: 3,
            ..Chains::default()
        };
        let persistent = Chains {
            refresh_every: Some(2),
            ..fresh
        };
        let (a, _) = gradients(&model, &images, &p, fresh, 3);
        let (b, est) = gradients(&model, &images, &p, persistent, 3);
        // Visits 1 and 3 start from the encoder on the same draws: the same gradient (whole
        // transitions leave the positions as cut ones). Visit 2 continues the chains of visit 1.
        assert_eq!(a[0], b[0]);
        assert_ne!(a[1], b[1]);
        assert_eq!(a[2], b[2]);
        // The kept chains resume: a checkpoint's estimator takes the same fourth update.
        let saved = est.save_state().unwrap();
        let mut again = BernoulliEstimator::new(&model, &images, Objective::Sagd(persistent), 9);
        again.load_state(&saved).unwrap();
        let (mut est, batch) = (est, [0, 1, 2]);
        let (mut g1, mut g2) = (vec![0.0f32; p.dec.len()], vec![0.0f32; p.dec.len()]);
        est.estimate(&p, &batch, &mut g1, &mut []).unwrap();
        again.estimate(&p, &batch, &mut g2, &mut []).unwrap();
        assert_eq!(g1, g2);
        // A GPU takes them in a run of one process (where none opens, it fails to open, not
        // on the chains), and refuses them by name, before it looks for a device, in a split run.
        let on_gpu = || {
            let est = BernoulliEstimator::on(
                Device::Cuda(0),
                &model,
                &images,
                Objective::Sagd(persistent),
                5,
            );
            est.err().map(|e| e.to_string()).unwrap_or_default()
        };
        let alone = on_gpu();
        assert!(!alone.contains("refresh-every"), "{alone}");
        for err in sagd::share::threads_as_processes(2, on_gpu) {
            assert!(
                err.contains("refresh-every") && err.contains("one GPU's process"),
                "{err}"
            );
        }
        // Images that are not whole rows of the model's pixels, on either device.
        for device in [Device::Cpu, Device::Cuda(0)] {
            let cut = BernoulliEstimator::on(device, &model, &images[1..], Objective::Vae, 5);
            let err = cut.err().map(|e| e.to_string()).unwrap_or_default();
            assert!(
                err.contains("whole images of the generator's 6 pixels"),
                "{err}"
            );
        }
        // A minibatch beyond the images (a job told of more points than there are) is refused
        // by name, and the estimator's streams do not move.
        let mut est = BernoulliEstimator::new(&model, &images, Objective::Vae, 5);
        let before = est.streams.clone();
        let mut g = (vec![0.0f32; p.dec.len()], vec![0.0f32; p.enc.len()]);
        let err = est.estimate(&p, &[0, 3], &mut g.0, &mut g.1).unwrap_err();
        assert!(err.to_string().contains("holds 3 images"), "{err}");
        assert_eq!((est.streams, est.update), (before, 0));
    }

    /// Chains that no pass could run are refused by `on`, by name, on either device (a GPU's
    /// before it looks for a device), where the CPU's first pass used to find them.
    #[test]
    fn invalid_chains_are_refused_before_any_work() {
        let model = small_vae(3);
        let images: Vec<u8> = (0..3 * PX).map(|i| (i * 37 % 256) as u8).collect();
        let base = Chains::default();
        let schedule = crate::train::ChainSchedule {
            decay: -1.0,
            growth: 0.0,
            updates: 10,
        };
        for (bad, name) in [
            (Chains { delta: 0.5, ..base }, "delta"), // Euler at γδ = 1
            (
                Chains {
                    gamma: f64::NAN,
                    ..base
                },
                "gamma",
            ),
            (Chains { steps: 0, ..base }, "steps"),
            (
                Chains {
                    per_image: 0,
                    ..base
                },
                "chains",
            ),
            (
                Chains {
                    refresh_every: Some(0),
                    ..base
                },
                "refresh-every",
            ),
            (
                Chains {
                    schedule: Some(schedule),
                    ..base
                },
                "sagd schedule",
            ),
        ] {
            assert!(bad.validate().is_err(), "{name}");
            for device in [Device::Cpu, Device::Cuda(0)] {
                let r = BernoulliEstimator::on(device, &model, &images, Objective::Sagd(bad), 5);
                match r.err() {
                    Some(SagdError::InvalidSetting { name: got, .. }) => assert_eq!(got, name),
                    other => panic!("{name} on {device:?}: {other:?}"),
                }
            }
        }
        assert!(base.validate().is_ok());
        let step = base.step().expect("valid");
        assert_eq!((step.gamma(), step.delta()), (base.gamma, base.delta));
    }
}
