//! Experiment E3: a VAE pre-trained on MNIST, its generator refined by SAGD (encoder frozen), and a
//! control — the same VAE trained further by its own ELBO for as many generator updates — all three
//! measured by the held-out log-likelihood of test images, with paired differences.
//!
//! Every phase is a [`Training`] job of the project's runner (checkpoints, resume with the same
//! result); the phases differ in their [`E3Estimator`].

use std::path::PathBuf;

use rand::SeedableRng;
use rand_xoshiro::Xoshiro256PlusPlus;
use sagd::error::{Result, SagdError};
use sagd::langevin::Scheme;
use sagd::optim::Averaging;
use sagd::rng::{stream_seed, NormalStream};
use sagd::run::{decode, encode, fnv1a, Control, Identity, Runner, FNV_OFFSET};
use serde::{Deserialize, Serialize};

use super::model::{
    binarise, binarise_with, held_out, sagd_batch, sagd_noise_len, uniforms, vae_batch, Chains,
    HeldOut, Scratch, E3,
};
use super::{Mnist, PIXELS};
use crate::cuda::{E3Pass, Gpu, GpuE3};
use crate::debias::cache::PretrainedCache;
use crate::train::{
    drive_phase, AdamStep, GradientEstimator, PhaseCheckpoint, TrainInfo, TrainSettings,
    TrainState, Training,
};
use crate::vae::VaeParams;
use crate::Device;

/// What a training phase of E3 optimises.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum Objective {
    /// The negative ELBO, both networks.
    Vae,
    /// SAGD's generator gradient from Langevin chains; the encoder frozen (it only starts them).
    Sagd(Chains),
}

/// The gradient of an E3 phase on minibatches of training images, freshly binarised each time.
pub struct E3Estimator<'a> {
    model: &'a E3,
    images: &'a [u8],
    objective: Objective,
    streams: Streams,
    engine: Engine,
    x: Vec<f32>,
    noise: Vec<f32>,
    /// The next update's draws, made while the GPU works on this one.
    ahead: Option<Ahead>,
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
    Gpu(Box<GpuE3>),
}

/// The estimator's random streams (its checkpointed state).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
struct Streams {
    binarise: Xoshiro256PlusPlus,
    normals: NormalStream,
}

impl<'a> E3Estimator<'a> {
    /// The estimator of `objective` on `images` (n × 784 grey levels), its streams from `seed`,
    /// on the CPU engine.
    pub fn new(model: &'a E3, images: &'a [u8], objective: Objective, seed: u64) -> Self {
        E3Estimator {
            model,
            images,
            objective,
            streams: Streams {
                binarise: Xoshiro256PlusPlus::seed_from_u64(stream_seed(seed, 1)),
                normals: NormalStream::new(stream_seed(seed, 2)),
            },
            engine: Engine::Cpu(Scratch::default()),
            x: Vec::new(),
            noise: Vec::new(),
            ahead: None,
        }
    }

    /// The same estimator on `device` (the same draws: a GPU computes the CPU's gradients to
    /// float rounding).
    pub fn on(
        device: Device,
        model: &'a E3,
        images: &'a [u8],
        objective: Objective,
        seed: u64,
    ) -> Result<Self> {
        let mut est = Self::new(model, images, objective, seed);
        if let Device::Cuda(i) = device {
            est.engine = Engine::Gpu(Box::new(GpuE3::new(Gpu::open(i)?)));
        }
        Ok(est)
    }
}

impl E3Estimator<'_> {
    /// The minibatch's fresh binarisation into `x` and the pass's noise into `noise`, from the
    /// estimator's streams (the same draws for either engine).
    fn draw(&mut self, batch: &[usize]) {
        let mut pixels = Vec::with_capacity(batch.len() * PIXELS);
        for &i in batch {
            pixels.extend_from_slice(&self.images[i * PIXELS..(i + 1) * PIXELS]);
        }
        let len = self.noise_len(batch.len());
        let draws = match self.ahead.take() {
            Some(a) if a.uniforms.len() == pixels.len() && a.normals.len() == len => a,
            _ => Ahead::draw(&self.streams, batch.len(), len),
        };
        self.streams = draws.after;
        self.x = binarise_with(&pixels, &draws.uniforms);
        self.noise = draws.normals;
    }

    /// Normals per pass over `images` images.
    fn noise_len(&self, images: usize) -> usize {
        match &self.objective {
            Objective::Vae => images * self.model.d,
            Objective::Sagd(chains) => sagd_noise_len(self.model, chains, images),
        }
    }
}

impl Ahead {
    /// The draws of an update over `images` images with `normals` normals, from a copy of
    /// `streams` (which do not move).
    fn draw(streams: &Streams, images: usize, normals: usize) -> Self {
        let mut after = streams.clone();
        let uniforms = uniforms(&mut after.binarise, images * PIXELS);
        let mut z = vec![0.0f32; normals];
        after.normals.fill(&mut z);
        Ahead {
            uniforms,
            normals: z,
            after,
        }
    }
}

/// A pass's loss, or the error that stops a run whose networks overflowed.
fn finite_loss(loss: f64) -> Result<f64> {
    if loss.is_finite() {
        Ok(loss)
    } else {
        Err(SagdError::NonFiniteUpdate { iteration: 0 })
    }
}

impl GradientEstimator for E3Estimator<'_> {
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
        self.draw(batch);
        let (m, x, noise) = (self.model, &self.x, &self.noise);
        let info = match (self.objective, &mut self.engine) {
            (Objective::Vae, Engine::Cpu(scratch)) => {
                vae_batch(m, p, x, noise, g_dec, g_enc, scratch)
            }
            (Objective::Vae, Engine::Gpu(gpu)) => gpu.vae_batch(m, p, x, noise, g_dec, g_enc)?,
            (Objective::Sagd(chains), Engine::Cpu(scratch)) => {
                sagd_batch(m, p, x, &chains, noise, g_dec, scratch)
            }
            (Objective::Sagd(chains), Engine::Gpu(gpu)) => {
                gpu.sagd_batch(m, p, x, &chains, noise, g_dec)?
            }
        };
        finite_loss(info.loss)
    }

    fn device_update(
        &mut self,
        st: &TrainState,
        batch: &[usize],
        step: AdamStep,
    ) -> Option<Result<f64>> {
        if let Engine::Cpu(_) = self.engine {
            return None;
        }
        self.draw(batch);
        let what = match &self.objective {
            Objective::Vae => E3Pass::Vae,
            Objective::Sagd(chains) => E3Pass::Sagd(chains),
        };
        // A second thread draws the next update's binarisation and noise while the GPU runs
        // this one from this thread (where its context is current).
        let len = self.noise_len(batch.len());
        let (result, ahead) = {
            let Engine::Gpu(gpu) = &mut self.engine else {
                return None;
            };
            let (model, x, noise) = (self.model, &self.x, &self.noise);
            let streams = &self.streams;
            std::thread::scope(|s| {
                let ahead = s.spawn(|| Ahead::draw(streams, batch.len(), len));
                let result = gpu.train_step(model, st, x, noise, what, step);
                (result, ahead.join())
            })
        };
        // A draw that failed to finish is simply made again in turn.
        self.ahead = ahead.ok();
        Some(match result {
            Err(e) => Err(e.into()),
            Ok((info, _)) if !info.loss.is_finite() => finite_loss(info.loss),
            Ok((_, false)) => Err(SagdError::NonFiniteUpdate {
                iteration: st.updates + 1,
            }),
            Ok((info, true)) => Ok(info.loss),
        })
    }

    fn device_sync(&mut self, st: &mut TrainState) -> Result<()> {
        match &mut self.engine {
            Engine::Cpu(_) => Ok(()),
            Engine::Gpu(gpu) => Ok(gpu.sync(st)?),
        }
    }

    fn save_state(&self) -> Result<Vec<u8>> {
        encode(&self.streams)
    }

    fn load_state(&mut self, bytes: &[u8]) -> Result<()> {
        self.streams = decode(bytes)?;
        self.ahead = None;
        Ok(())
    }
}

/// Settings of E3. The default fits a 2-core machine in about half an hour (see
/// [`E3Settings::paper`] for the paper's).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct E3Settings {
    /// Latent dimension (paper: 20).
    pub latent: usize,
    /// Training images used (the first ones; MNIST has 60000).
    pub train_n: usize,
    /// Minibatch size (paper: 200).
    pub batch_size: usize,
    /// VAE pre-training epochs (paper: 500).
    pub vae_epochs: usize,
    /// Adam's learning rate for the VAE (and the control).
    pub vae_lr: f64,
    /// SAGD refinement: generator updates (paper: 100 epochs = 30000).
    pub sagd_updates: usize,
    /// Adam's learning rate for SAGD.
    pub sagd_lr: f64,
    /// SAGD's chains.
    pub chains: Chains,
    /// Test images evaluated (the first ones, binarised once).
    pub eval_n: usize,
    /// Importance-sampling draws per test image.
    pub eval_k: usize,
    /// Seed of everything (streams derived from it).
    pub seed: u64,
}

impl Default for E3Settings {
    /// 20 VAE epochs on all 60000 images (≈ 12 min on 2 cores), 240 SAGD updates (0.8 epoch,
    /// ≈ 15 min), the control's 240 VAE updates, 500 test images with 1000 draws each.
    fn default() -> Self {
        E3Settings {
            latent: 20,
            train_n: 60000,
            batch_size: 200,
            vae_epochs: 20,
            vae_lr: 1e-3,
            sagd_updates: 240,
            sagd_lr: 1e-4,
            chains: Chains::default(),
            eval_n: 500,
            eval_k: 1000,
            seed: 0,
        }
    }
}

impl E3Settings {
    /// The paper's: 500 VAE epochs and 100 SAGD epochs of 300 minibatches of 200.
    pub fn paper() -> Self {
        E3Settings {
            vae_epochs: 500,
            sagd_updates: 100 * 300,
            ..E3Settings::default()
        }
    }

    /// Checks the settings against the data (`train` and `test` images available).
    pub fn validate(&self, train: usize, test: usize) -> Result<()> {
        let bad = |name: &'static str, value: String, fix: String| {
            Err(SagdError::InvalidSetting { name, value, fix })
        };
        if self.latent == 0 {
            return bad(
                "latent",
                "0".into(),
                "use a latent dimension of at least 1 (paper: 20)".into(),
            );
        }
        if self.train_n == 0 || self.train_n > train {
            return bad(
                "train_n",
                self.train_n.to_string(),
                format!("use between 1 and the {train} training images"),
            );
        }
        if self.eval_n > test {
            return bad(
                "eval_n",
                self.eval_n.to_string(),
                format!("use at most the {test} test images"),
            );
        }
        if self.batch_size == 0 {
            return bad(
                "batch_size",
                "0".into(),
                "use a minibatch of at least 1 image".into(),
            );
        }
        if self.eval_k == 0 && self.eval_n > 0 {
            return bad(
                "eval_k",
                "0".into(),
                "use at least 1 importance-sampling draw (1000 or more for a useful estimate)"
                    .into(),
            );
        }
        if self.chains.per_image == 0 {
            return bad(
                "chains",
                "0".into(),
                "use at least 1 chain per image (paper: 20)".into(),
            );
        }
        sagd::error::positive(
            "delta",
            self.chains.delta,
            "use a Langevin step > 0, such as 0.01",
        )?;
        sagd::error::positive("gamma", self.chains.gamma, "use a friction > 0, such as 2")?;
        match self.chains.scheme {
            Scheme::Euler if self.chains.gamma * self.chains.delta >= 1.0 => {
                return bad(
                    "gamma * delta",
                    (self.chains.gamma * self.chains.delta).to_string(),
                    "the Euler scheme needs gamma * delta < 1: take a smaller delta".into(),
                )
            }
            Scheme::Euler | Scheme::Baoab => {}
            other => {
                return bad(
                    "scheme",
                    other.name().into(),
                    "E3's chains run euler (the paper's) or baoab".into(),
                )
            }
        }
        sagd::error::positive(
            "vae_lr",
            self.vae_lr,
            "use a learning rate > 0, such as 1e-3",
        )?;
        sagd::error::positive(
            "sagd_lr",
            self.sagd_lr,
            "use a learning rate > 0, such as 1e-4",
        )
    }
}

/// How E3 runs, beside what it computes.
#[derive(Clone, Debug, Default)]
pub struct E3Options {
    /// Folder of the phases' checkpoints (written every `checkpoint_every` updates and at the end).
    pub checkpoint_dir: Option<PathBuf>,
    /// Updates between checkpoints.
    pub checkpoint_every: usize,
    /// Resume each phase from its checkpoint when there is one.
    pub resume: bool,
    /// The folder where pre-trained networks are kept: a second run with the same pre-training
    /// settings and data starts at the refinement.
    pub pretrained_cache: Option<PathBuf>,
    /// Stop (with an error naming the phase) after this many updates of this run: tests of resume.
    pub interrupt_after: Option<usize>,
    /// Where the training passes run (the held-out evaluation runs on the CPU engine).
    pub device: Device,
}

/// One phase's learning curve: the loss of every update.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Curve {
    /// The phase.
    pub phase: String,
    /// The loss at each update (negative ELBO, or −log p(x | u) at the chains' states).
    pub loss: Vec<f64>,
}

/// A model's held-out log-likelihood over the evaluated test images.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Evaluation {
    /// Which parameters.
    pub model: String,
    /// Mean log p̂(x) per image (nats).
    pub log_px: f64,
    /// Its standard error over images.
    pub log_px_se: f64,
    /// Mean ELBO per image.
    pub elbo: f64,
    /// Mean effective sample size of the importance weights (of k).
    pub ess: f64,
    /// Per image.
    pub per_image: Vec<HeldOut>,
}

/// A paired difference of held-out log-likelihoods over the same images and draws.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Paired {
    /// "a − b".
    pub what: String,
    /// Mean difference per image (nats).
    pub mean: f64,
    /// Its standard error.
    pub se: f64,
}

impl Paired {
    fn of(a: &Evaluation, b: &Evaluation) -> Paired {
        let d: Vec<f64> = a
            .per_image
            .iter()
            .zip(&b.per_image)
            .map(|(x, y)| x.log_px - y.log_px)
            .collect();
        let (mean, sd) = sagd::diagnostics::mean_sd(&d);
        Paired {
            what: format!("{} − {}", a.model, b.model),
            mean,
            se: sd / (d.len().max(1) as f64).sqrt(),
        }
    }
}

/// Everything E3 computed.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct E3Result {
    /// The settings.
    pub settings: E3Settings,
    /// The pre-trained VAE (loaded from the cache when it was there).
    pub pretrained: VaeParams,
    /// The SAGD-refined generator (with the frozen encoder).
    pub sagd: VaeParams,
    /// The control: the VAE trained further by its ELBO for as many updates.
    pub control: VaeParams,
    /// Learning curves of the phases run now.
    pub curves: Vec<Curve>,
    /// Held-out log-likelihoods: pre-trained, SAGD, control.
    pub evaluations: Vec<Evaluation>,
    /// SAGD − pre-trained, control − pre-trained, SAGD − control.
    pub differences: Vec<Paired>,
    /// Whether the pre-trained VAE came from the cache.
    pub pretrained_cached: bool,
    /// Wall seconds per phase.
    pub timing_s: std::collections::BTreeMap<String, f64>,
}

/// Progress of a phase: its name, updates done and to do.
pub type Progress<'a> = &'a (dyn Fn(&str, usize, usize) + Sync);

/// Runs one phase through the runner; returns the parameters and the learning curve.
#[allow(clippy::too_many_arguments)]
fn phase(
    name: &str,
    model: &E3,
    images: &[u8],
    objective: Objective,
    train: &TrainSettings,
    updates: usize,
    start: VaeParams,
    s: &E3Settings,
    key: &Identity,
    opts: &E3Options,
    progress: Progress<'_>,
) -> Result<(VaeParams, Curve)> {
    let seed = stream_seed(s.seed, name.bytes().map(u64::from).sum());
    let mut est = E3Estimator::on(opts.device, model, images, objective, seed)?;
    let mut identity = key.clone().with("phase", name)?;
    // The start's fingerprint: the parameters themselves would make a 70 MB identity.
    let start_key = fnv1a(
        FNV_OFFSET,
        start
            .dec
            .iter()
            .chain(&start.enc)
            .flat_map(|v| v.to_bits().to_le_bytes()),
    );
    identity = identity.with("start", &start_key)?;
    let sizes = (model.gen.n_params(), model.enc.n_params());
    let n = images.len() / PIXELS;
    let job = Training::with_sizes(sizes, &mut est, train, n, Some(updates), identity)?;
    let mut curve = Curve {
        phase: name.into(),
        loss: Vec::new(),
    };
    let mut done_here = 0usize;
    let mut observe = |_: &TrainState, info: &TrainInfo| {
        curve.loss.push(info.loss);
        progress(name, info.update, updates);
        done_here += 1;
        match opts.interrupt_after {
            Some(k) if done_here >= k => Control::Stop,
            _ => Control::Continue,
        }
    };
    let runner = Runner::new(job).observe(&mut observe);
    let ck = PhaseCheckpoint {
        path: opts
            .checkpoint_dir
            .as_ref()
            .map(|d| d.join(format!("e3-{name}.ckpt"))),
        every: opts.checkpoint_every,
        resume: opts.resume,
    };
    let (runner, state) = drive_phase(
        runner,
        &ck,
        name,
        || format!("E3, {name}"),
        |job| job.init(start, seed),
        |_| {},
    )?;
    let params = runner.solver.finish(&state);
    drop(runner);
    Ok((params, curve))
}

/// What [`time_phase`] measured.
#[derive(Clone, Debug, Serialize)]
pub struct PhaseTiming {
    /// The phase timed: `vae` or `sagd`.
    pub phase: String,
    /// Updates timed (after one that warms up and is not counted).
    pub updates: usize,
    /// Seconds per update (minibatch), Adam and binarisation included.
    pub s_per_update: f64,
    /// Seconds per epoch of `train_n` images at this rate.
    pub s_per_epoch: f64,
}

/// Times `updates` updates of an E3 phase through the runner, as `sagd mnist` runs them (fresh
/// binarisations, the estimator's pass, Adam), after one update that warms up (allocations,
/// a GPU's first launches): `Objective::Vae` is pre-training, `Objective::Sagd` the refinement.
pub fn time_phase(
    s: &E3Settings,
    data: &Mnist,
    objective: Objective,
    updates: usize,
    device: Device,
) -> Result<PhaseTiming> {
    s.validate(data.train.len(), data.test.len())?;
    let images = &data.train.images[..s.train_n * PIXELS];
    let first = std::sync::Mutex::new(None);
    let progress = |_: &str, done: usize, _: usize| {
        if done == 1 {
            if let Ok(mut f) = first.lock() {
                *f = Some(std::time::Instant::now());
            }
        }
    };
    train_phase(s, images, objective, updates + 1, device, &progress)?;
    let elapsed = first
        .lock()
        .ok()
        .and_then(|f| f.map(|t| t.elapsed().as_secs_f64()))
        .unwrap_or(f64::NAN);
    let s_per_update = elapsed / updates.max(1) as f64;
    Ok(PhaseTiming {
        phase: phase_name(objective).into(),
        updates,
        s_per_update,
        s_per_epoch: s_per_update * s.train_n.div_ceil(s.batch_size) as f64,
    })
}

fn phase_name(objective: Objective) -> &'static str {
    match objective {
        Objective::Vae => "vae",
        Objective::Sagd(_) => "sagd",
    }
}

/// `updates` updates of an E3 phase on `images` (n × 784 grey levels) from the initial
/// networks of `s.seed`, on `device`, without checkpoints: the parameters it ends with.
pub fn train_phase(
    s: &E3Settings,
    images: &[u8],
    objective: Objective,
    updates: usize,
    device: Device,
    progress: Progress<'_>,
) -> Result<VaeParams> {
    let start = E3::new(s.latent).init(stream_seed(s.seed, 3));
    train_phase_from(s, images, objective, updates, start, device, progress)
}

/// [`train_phase`] from the networks `start`.
pub fn train_phase_from(
    s: &E3Settings,
    images: &[u8],
    objective: Objective,
    updates: usize,
    start: VaeParams,
    device: Device,
    progress: Progress<'_>,
) -> Result<VaeParams> {
    let model = E3::new(s.latent);
    let lr = match objective {
        Objective::Vae => s.vae_lr,
        Objective::Sagd(_) => s.sagd_lr,
    };
    let train = TrainSettings {
        epochs: 1,
        batch_size: s.batch_size,
        lr,
        averaging: Averaging::None,
    };
    let opts = E3Options {
        device,
        ..E3Options::default()
    };
    let (p, _) = phase(
        phase_name(objective),
        &model,
        images,
        objective,
        &train,
        updates,
        start,
        s,
        &Identity::new(),
        &opts,
        progress,
    )?;
    Ok(p)
}

/// Held-out evaluation of `p` on the binarised test images `x`.
fn evaluate(model: &E3, name: &str, p: &VaeParams, x: &[f32], s: &E3Settings) -> Evaluation {
    let per_image = held_out(
        model,
        &p.dec,
        &p.enc,
        x,
        s.eval_k,
        stream_seed(s.seed, 77),
        &mut Scratch::default(),
    );
    let lp: Vec<f64> = per_image.iter().map(|h| h.log_px).collect();
    let (log_px, sd) = sagd::diagnostics::mean_sd(&lp);
    let n = per_image.len().max(1) as f64;
    Evaluation {
        model: name.into(),
        log_px,
        log_px_se: sd / n.sqrt(),
        elbo: per_image.iter().map(|h| h.elbo).sum::<f64>() / n,
        ess: per_image.iter().map(|h| h.ess).sum::<f64>() / n,
        per_image,
    }
}

/// Figure 3's digits: the pixel probabilities of `gen` at 100 latents U ~ N(0, I) drawn from
/// `seed` (the same U for every generator), 100 × 784.
pub fn figure_digits(model: &E3, gen: &[f32], seed: u64) -> Vec<f32> {
    let mut u = vec![0.0f32; 100 * model.d];
    NormalStream::new(stream_seed(seed, 5)).fill(&mut u);
    super::model::generate(model, gen, &u)
}

/// Runs E3 on `data`: pre-training (or its cache), SAGD refinement, the control, the evaluation.
pub fn run(
    s: &E3Settings,
    data: &Mnist,
    opts: &E3Options,
    progress: Progress<'_>,
) -> Result<E3Result> {
    s.validate(data.train.len(), data.test.len())?;
    let model = E3::new(s.latent);
    let images = &data.train.images[..s.train_n * PIXELS];
    let data_hash = fnv1a(FNV_OFFSET, images.iter().copied());
    let mut key = Identity::new()
        .with("settings", s)?
        .with("data", &data_hash)?;
    // A GPU rounds otherwise: its checkpoints and cached networks are its own (the CPU's keys
    // stay as they were).
    let device = (opts.device != Device::Cpu).then(|| opts.device.to_string());
    if let Some(d) = &device {
        key = key.with("device", d)?;
    }
    let mut timing = std::collections::BTreeMap::new();
    let mut curves = Vec::new();
    let mut lap = |name: &str, t: std::time::Instant| {
        timing.insert(name.to_string(), t.elapsed().as_secs_f64());
    };

    // Pre-training, keyed by what decides it.
    let vae = TrainSettings {
        epochs: s.vae_epochs,
        batch_size: s.batch_size,
        lr: s.vae_lr,
        averaging: Averaging::None,
    };
    let mut pre_json = serde_json::json!({
        "experiment": "E3", "latent": s.latent, "train_n": s.train_n, "train": vae,
        "seed": s.seed, "sagd_nn_version": env!("CARGO_PKG_VERSION"),
    });
    if let Some(d) = &device {
        pre_json["device"] = serde_json::json!(d);
    }
    let pre_key = Identity::new()
        .with("pre-training", &pre_json)?
        .with("data", &data_hash)?;
    let cache = opts.pretrained_cache.as_ref().map(|dir| {
        PretrainedCache::keyed(
            dir,
            &format!("e3-pretrained-s{}", s.seed),
            pre_json.clone(),
            data_hash,
        )
    });
    let t = std::time::Instant::now();
    let cached = match &cache {
        Some(c) => c.load_nets(&model.gen, &model.enc)?.map(|(p, _)| p),
        None => None,
    };
    let pretrained_cached = cached.is_some();
    let pretrained = match cached {
        Some(p) => p,
        None => {
            let per_epoch = s.train_n.div_ceil(s.batch_size.min(s.train_n));
            let (p, c) = phase(
                "pretrain",
                &model,
                images,
                Objective::Vae,
                &vae,
                s.vae_epochs * per_epoch,
                model.init(stream_seed(s.seed, 3)),
                s,
                &pre_key,
                opts,
                progress,
            )?;
            curves.push(c);
            if let Some(c) = &cache {
                c.save_nets(&model.gen, &model.enc, &p, t.elapsed().as_secs_f64())?;
            }
            p
        }
    };
    lap("pretrain", t);

    // SAGD and the control, from the same start, as many generator updates.
    let refine = TrainSettings {
        lr: s.sagd_lr,
        ..vae.clone()
    };
    let mut refined = Vec::new();
    for (name, objective, train) in [
        ("sagd", Objective::Sagd(s.chains), &refine),
        ("control", Objective::Vae, &vae),
    ] {
        let t = std::time::Instant::now();
        let (p, c) = phase(
            name,
            &model,
            images,
            objective,
            train,
            s.sagd_updates,
            pretrained.clone(),
            s,
            &key,
            opts,
            progress,
        )?;
        curves.push(c);
        lap(name, t);
        refined.push(p);
    }
    let (sagd, control) = (refined.remove(0), refined.remove(0));

    // The first eval_n test images, binarised once.
    let t = std::time::Instant::now();
    let mut rng = Xoshiro256PlusPlus::seed_from_u64(stream_seed(s.seed, 4));
    let x = binarise(&data.test.images[..s.eval_n * PIXELS], &mut rng);
    let evaluations: Vec<Evaluation> = [
        ("pre-trained", &pretrained),
        ("SAGD", &sagd),
        ("control", &control),
    ]
    .iter()
    .map(|(n, p)| evaluate(&model, n, p, &x, s))
    .collect();
    let differences = vec![
        Paired::of(&evaluations[1], &evaluations[0]),
        Paired::of(&evaluations[2], &evaluations[0]),
        Paired::of(&evaluations[1], &evaluations[2]),
    ];
    lap("evaluation", t);
    Ok(E3Result {
        settings: s.clone(),
        pretrained,
        sagd,
        control,
        curves,
        evaluations,
        differences,
        pretrained_cached,
        timing_s: timing,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn draws_made_ahead_are_the_draws_in_turn() {
        let model = E3::new(20);
        let images: Vec<u8> = (0..4 * PIXELS).map(|i| (i * 37 % 256) as u8).collect();
        let objective = Objective::Sagd(Chains::default());
        let batches: [&[usize]; 4] = [&[0, 1], &[2, 3], &[1], &[3]];
        // In turn.
        let mut a = E3Estimator::new(&model, &images, objective, 7);
        let turn: Vec<_> = batches
            .iter()
            .map(|b| {
                a.draw(b);
                (a.x.clone(), a.noise.clone(), a.streams.clone())
            })
            .collect();
        // Each update's draws made ahead for the next update's size: taken where the sizes
        // agree (the second and fourth), dropped where they do not (the third).
        let mut b = E3Estimator::new(&model, &images, objective, 7);
        for (k, batch) in batches.iter().enumerate() {
            b.draw(batch);
            assert_eq!(
                (&b.x, &b.noise, &b.streams),
                (&turn[k].0, &turn[k].1, &turn[k].2)
            );
            let len = b.noise_len(batch.len());
            b.ahead = Some(Ahead::draw(&b.streams, batch.len(), len));
            // Its streams stay those of the draws used: what a checkpoint saves.
            assert_eq!(b.streams, turn[k].2);
        }
    }
}
