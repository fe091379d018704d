//! Experiment E3: a VAE pre-trained on MNIST, its generator refined by SAGD (encoder frozen), and a
//! control — the same VAE trained further by its own ELBO for as many generator updates — all three
//! measured by the held-out log-likelihood of test images, with paired differences.
//!
//! Every phase is a [`Training`] job of the project's runner (checkpoints, resume with the same
//! result); the phases differ in their [`E3Estimator`].

use std::path::PathBuf;

use sagd::error::{Result, SagdError};
use sagd::optim::Averaging;
use sagd::rng::Seed;
use sagd::run::{decode, encode, fnv1a, Control, Identity, Observer, Runner, FNV_OFFSET};
use serde::{Deserialize, Serialize};

use super::model::{binarise, held_out, Chains, HeldOut, Scratch, E3};
use super::{Mnist, PIXELS};
use crate::debias::cache::PretrainedCache;
use crate::laps::Laps;
use sagd_nn::train::{
    drive_phase, PhaseCheckpoint, TrainInfo, TrainSettings, TrainState, Training,
};
use sagd_nn::vae::VaeParams;
use sagd_nn::Device;

mod result;
mod settings;

pub use sagd_nn::bernoulli::Objective;

/// E3's gradient estimator: that of a VAE of binary images, on MNIST's.
pub type E3Estimator<'a> = sagd_nn::bernoulli::BernoulliEstimator<'a>;
pub use result::{Curve, E3Result, Evaluation, Paired};
pub use settings::{E3Options, E3Settings};

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
    let seed = Seed::new(s.seed).stream(name);
    let mut est = E3Estimator::on(
        opts.device,
        model,
        images,
        objective,
        seed.stream("estimator").get(),
    )?;
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
    let mut observe = PhaseObserver {
        name,
        curve: Curve {
            phase: name.into(),
            loss: Vec::new(),
        },
        updates,
        done_here: 0,
        interrupt_after: opts.interrupt_after,
        progress,
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
        |job| job.init(start, seed.stream("minibatches").get()),
        |_| {},
    )?;
    let params = runner.solver.finish(&state);
    drop(runner);
    Ok((params, observe.curve))
}

/// A phase's observer: its learning curve, kept in the phase's checkpoints so that a resumed
/// phase's curve starts at its first update, as an uninterrupted one's; its progress; and the
/// interruption that tests of resume ask for.
struct PhaseObserver<'a> {
    name: &'a str,
    curve: Curve,
    updates: usize,
    done_here: usize,
    interrupt_after: Option<usize>,
    progress: Progress<'a>,
}

impl Observer<TrainState, TrainInfo> for PhaseObserver<'_> {
    fn observe(&mut self, _: &TrainState, info: &TrainInfo) -> Control {
        self.curve.loss.push(info.loss);
        (self.progress)(self.name, info.update, self.updates);
        self.done_here += 1;
        match self.interrupt_after {
            Some(k) if self.done_here >= k => Control::Stop,
            _ => Control::Continue,
        }
    }

    fn snapshot(&self) -> Result<Vec<u8>> {
        encode(&self.curve.loss)
    }

    fn restore(&mut self, bytes: &[u8]) -> Result<()> {
        self.curve.loss = decode(bytes)?;
        Ok(())
    }
}

/// What [`time_phase`] measured.
#[derive(Clone, Debug, Serialize)]
pub struct PhaseTiming {
    /// The phase timed: `vae` or `sagd`.
    pub phase: String,
    /// Updates timed (after one that warms up and is not counted).
    pub updates: usize,
    /// Seconds per update (minibatch), Adam and binarisation included: the mean over the
    /// timed updates.
    pub s_per_update: f64,
    /// The fastest timed update's seconds (what a peer that reports its fastest minibatch
    /// compares with).
    pub fastest_s: f64,
    /// Seconds per epoch of `train_n` images at the mean rate.
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
    // When each update ended, from the warm-up's end on.
    let ends = std::sync::Mutex::new(Vec::with_capacity(updates + 1));
    let progress = |_: &str, _: usize, _: usize| {
        if let Ok(mut e) = ends.lock() {
            e.push(std::time::Instant::now());
        }
    };
    train_phase(s, images, objective, updates + 1, device, &progress)?;
    let ends = ends.into_inner().unwrap_or_default();
    let each: Vec<f64> = ends
        .windows(2)
        .map(|w| (w[1] - w[0]).as_secs_f64())
        .collect();
    let (s_per_update, fastest_s) = if each.is_empty() {
        (f64::NAN, f64::NAN)
    } else {
        let mean = each.iter().sum::<f64>() / each.len() as f64;
        (mean, each.iter().copied().fold(f64::INFINITY, f64::min))
    };
    Ok(PhaseTiming {
        phase: phase_name(objective).into(),
        updates,
        s_per_update,
        fastest_s,
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
    let start = crate::mnist::e3(s.latent).init(Seed::new(s.seed).stream("init").get());
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
    let model = crate::mnist::e3(s.latent);
    let lr = match objective {
        Objective::Vae => s.vae_lr,
        Objective::Sagd(_) => s.sagd_lr,
    };
    let train = TrainSettings {
        epochs: 1,
        batch_size: s.batch_size,
        lr,
        lr_decay: 0.0,
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
fn evaluate(
    model: &E3,
    name: &str,
    p: &VaeParams,
    x: &[f32],
    s: &E3Settings,
) -> Result<Evaluation> {
    let per_image = held_out(
        model,
        &p.dec,
        &p.enc,
        x,
        s.eval_k,
        Seed::new(s.seed).stream("evaluation").get(),
        &mut Scratch::default(),
    )?;
    let lp: Vec<f64> = per_image.iter().map(|h| h.log_px).collect();
    let (log_px, sd) = sagd::diagnostics::mean_sd(&lp);
    let n = per_image.len().max(1) as f64;
    Ok(Evaluation {
        model: name.into(),
        log_px,
        log_px_se: sd / n.sqrt(),
        elbo: per_image.iter().map(|h| h.elbo).sum::<f64>() / n,
        ess: per_image.iter().map(|h| h.ess).sum::<f64>() / n,
        per_image,
    })
}

/// Figure 3's digits: the pixel probabilities of `gen` at 100 latents U ~ N(0, I) drawn from
/// `seed` (the same U for every generator), 100 × 784.
pub fn figure_digits(model: &E3, gen: &[f32], seed: u64) -> Vec<f32> {
    let mut u = vec![0.0f32; 100 * model.d];
    Seed::new(seed).stream("figure").normals().fill(&mut u);
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
    s.chains.runs_on(opts.device)?;
    let model = crate::mnist::e3(s.latent);
    let images = &data.train.images[..s.train_n * PIXELS];
    let data_hash = fnv1a(FNV_OFFSET, images.iter().copied());
    let mut key = Identity::new()
        .with("settings", s)?
        .with("data", &data_hash)?
        .with("seed_streams", &crate::SEED_STREAMS)?;
    // A GPU rounds otherwise: its checkpoints and cached networks are its own (the CPU's keys
    // stay as they were).
    let device = (opts.device != Device::Cpu).then(|| opts.device.to_string());
    if let Some(d) = &device {
        key = key.with("device", d)?;
    }
    let mut curves = Vec::new();
    let mut laps = Laps::start();
    let vae = TrainSettings {
        epochs: s.vae_epochs,
        batch_size: s.batch_size,
        lr: s.vae_lr,
        lr_decay: 0.0,
        averaging: Averaging::None,
    };
    let (pretrained, pretrained_cached, curve) = pretrain(
        &model,
        images,
        &vae,
        data_hash,
        device.as_deref(),
        s,
        opts,
        progress,
    )?;
    curves.push(curve);
    laps.lap("pretrain");

    // SAGD and the control, from the same start, as many generator updates.
    let refine = TrainSettings {
        lr: s.sagd_lr,
        lr_decay: 0.0,
        ..vae.clone()
    };
    let mut refined = Vec::new();
    for (name, objective, train) in [
        (
            "sagd",
            Objective::Sagd(s.chains.over(s.sagd_updates)),
            &refine,
        ),
        ("control", Objective::Vae, &vae),
    ] {
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
        laps.lap(name);
        refined.push(p);
    }
    let (sagd, control) = (refined.remove(0), refined.remove(0));

    let (evaluations, differences) = evaluated(&model, data, s, [&pretrained, &sagd, &control])?;
    laps.lap("evaluation");
    Ok(E3Result {
        settings: s.clone(),
        pretrained,
        sagd,
        control,
        curves,
        evaluations,
        differences,
        pretrained_cached,
        timing_s: laps.timing,
        exchanged: laps.exchanged,
    })
}

/// The pre-trained, SAGD's and the control's networks on the first `eval_n` test images (binarised
/// once), and their paired differences: SAGD and the control against the pre-trained, SAGD against
/// the control.
fn evaluated(
    model: &E3,
    data: &Mnist,
    s: &E3Settings,
    [pretrained, sagd, control]: [&VaeParams; 3],
) -> Result<(Vec<Evaluation>, Vec<Paired>)> {
    let mut rng = Seed::new(s.seed).stream("test-images").rng();
    let x = binarise(&data.test.images[..s.eval_n * PIXELS], &mut rng);
    let evaluations: Vec<Evaluation> = [
        ("pre-trained", pretrained),
        ("SAGD", sagd),
        ("control", control),
    ]
    .iter()
    .map(|(n, p)| evaluate(model, n, p, &x, s))
    .collect::<Result<_>>()?;
    let differences = vec![
        Paired::of(&evaluations[1], &evaluations[0]),
        Paired::of(&evaluations[2], &evaluations[0]),
        Paired::of(&evaluations[1], &evaluations[2]),
    ];
    Ok((evaluations, differences))
}

/// The pre-trained networks, read from the cache when an identical pre-training (same settings,
/// seed, data and device) was saved there, else trained (and saved): the networks, whether they
/// were read, and the learning curve.
#[allow(clippy::too_many_arguments)]
fn pretrain(
    model: &E3,
    images: &[u8],
    vae: &TrainSettings,
    data_hash: u64,
    device: Option<&str>,
    s: &E3Settings,
    opts: &E3Options,
    progress: Progress<'_>,
) -> Result<(VaeParams, bool, Curve)> {
    let mut pre_json = serde_json::json!({
        "experiment": "E3", "latent": s.latent, "train_n": s.train_n, "train": vae,
        "seed": s.seed, "sagd_nn_version": env!("CARGO_PKG_VERSION"),
        "seed_streams": crate::SEED_STREAMS,
    });
    if let Some(d) = device {
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
        Some(c) => c.load_nets(&model.gen, &model.enc)?,
        None => None,
    };
    if let Some((p, _, loss)) = cached {
        let curve = Curve {
            phase: "pretrain".into(),
            loss,
        };
        return Ok((p, true, curve));
    }
    let per_epoch = s.train_n.div_ceil(s.batch_size.min(s.train_n));
    let (p, c) = phase(
        "pretrain",
        model,
        images,
        Objective::Vae,
        vae,
        s.vae_epochs * per_epoch,
        model.init(Seed::new(s.seed).stream("init").get()),
        s,
        &pre_key,
        opts,
        progress,
    )?;
    if let Some(cache) = &cache {
        let time_s = t.elapsed().as_secs_f64();
        cache.save_nets(&model.gen, &model.enc, &p, time_s, &c.loss)?;
    }
    Ok((p, false, c))
}
