//! One replication of E2: data, VAE pre-training, then each fine-tuning method from the same
//! pre-trained weights, every phase a [`Training`] job on the project's runner.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

use sagd::error::Result;
use sagd::metrics::Law;
use sagd::optim::Averaging;
use sagd::rng::Seed;
use sagd::run::{decode, encode, fnv1a, Control, Identity, Observer, Runner, FNV_OFFSET};
use serde::{Deserialize, Serialize};

use super::cache::PretrainedCache;
use super::eval::{evaluate, generate, log_likelihood_1d, simulate, Evaluation};
use super::{E2Settings, Method};
use crate::SEED_STREAMS;
use sagd_nn::train::{
    Estimator, GradientEstimator, TrainInfo, TrainSettings, TrainState, Training,
};
use sagd_nn::vae::{Vae, VaeParams};
use sagd_nn::Device;

/// One method's outcome in a replication.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MethodResult {
    /// The evaluation after fine-tuning.
    #[serde(flatten)]
    pub eval: Evaluation,
    /// Wall seconds of the fine-tuning.
    pub time_s: f64,
    /// The loss estimate at the last update.
    pub final_loss: f64,
    /// Method diagnostics.
    pub diagnostics: serde_json::Value,
    /// D and W of the current iterate during fine-tuning (when asked: [`RunOptions::trace_every`]).
    #[serde(skip_serializing_if = "Vec::is_empty", default)]
    pub trace: Vec<TracePoint>,
}

/// The fit at one epoch of fine-tuning.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TracePoint {
    /// Epochs done.
    pub epoch: usize,
    /// Kolmogorov-Smirnov distance of the current iterate (mean over coordinates).
    #[serde(rename = "D")]
    pub ks: f64,
    /// 1-Wasserstein distance of the current iterate (mean over coordinates).
    #[serde(rename = "W")]
    pub w1: f64,
    /// Mean log-likelihood of the data (1-D).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub loglik: Option<f64>,
    /// Mean of Z.
    pub z_mean: f64,
    /// Standard deviation of Z.
    pub z_sd: f64,
    /// The method's loss estimate at the epoch's last update.
    pub loss: f64,
}

/// How a replication runs, beside its settings; none of these changes its results.
#[derive(Clone, Debug, Default)]
pub struct RunOptions {
    /// Keep the draws of Z of each fitted model (for figures).
    pub keep_samples: bool,
    /// A folder of pre-trained networks: pre-training is read from it when an identical one
    /// (same data, seed and pre-training settings) was saved there, else run and saved.
    pub pretrained_cache: Option<PathBuf>,
    /// Evaluate D and W (against a known π) and the log-likelihood (1-D) of each method's current
    /// iterate every this many fine-tuning epochs (0: never).
    pub trace_every: usize,
    /// Checkpoint every training phase into this folder (one file per replication and phase).
    pub checkpoint_dir: Option<PathBuf>,
    /// Checkpoint every this many updates of a phase (and at its end).
    pub checkpoint_every: usize,
    /// Continue each phase from its checkpoint in `checkpoint_dir` where there is one.
    pub resume: bool,
    /// Stop every fine-tuning phase after this many updates of this process, checkpointed, and
    /// return [`SagdError::Interrupted`](sagd::error::SagdError::Interrupted) (to test and demonstrate resuming).
    pub interrupt_after: Option<usize>,
    /// Where the networks train (evaluation stays on the CPU).
    pub device: Device,
    /// Raised by a host (Python's Ctrl-C), it stops the phase in progress after its current
    /// update: the run returns [`SagdError::Interrupted`](sagd::error::SagdError::Interrupted).
    pub stop: Option<Arc<AtomicBool>>,
}

/// A training phase of a replication as the runner sees it: its name, settings and identity.
struct Phase<'a> {
    name: &'a str,
    settings: TrainSettings,
    /// The run's settings, seed and data, which with the name make the checkpoint's identity.
    key: &'a serde_json::Value,
    seed: u64,
}

/// D and W of the current iterate every `every` epochs: an observer whose points travel with
/// checkpoints.
struct Tracer<'a> {
    every: usize,
    assess: &'a dyn Fn(&VaeParams) -> Evaluation,
    points: Vec<TracePoint>,
}

impl Tracer<'_> {
    /// The epoch `info` completed, if the curve has a point there.
    fn point_at(&self, info: &TrainInfo) -> Option<usize> {
        info.epoch_done
            .filter(|e| self.every > 0 && e % self.every == 0)
    }
}

impl Observer<TrainState, TrainInfo> for Tracer<'_> {
    fn observe(&mut self, st: &TrainState, info: &TrainInfo) -> Control {
        if let Some(epoch) = self.point_at(info) {
            let e = (self.assess)(&st.params);
            self.points.push(TracePoint {
                epoch,
                ks: e.ks,
                w1: e.w1,
                loglik: e.loglik,
                z_mean: e.z_mean,
                z_sd: e.z_sd,
                loss: info.loss,
            });
        }
        Control::Continue
    }
    /// Its points read the parameters: a GPU that keeps them brings the host's copy up to date.
    fn reads_state(&self, info: &TrainInfo) -> bool {
        self.point_at(info).is_some()
    }
    fn snapshot(&self) -> Result<Vec<u8>> {
        encode(&self.points)
    }
    fn restore(&mut self, bytes: &[u8]) -> Result<()> {
        self.points = decode(bytes)?;
        Ok(())
    }
}

/// What a finished phase returns.
struct PhaseResult {
    params: VaeParams,
    final_loss: f64,
    diagnostics: serde_json::Value,
    trace: Vec<TracePoint>,
}

/// Runs one training phase through the project's runner: progress after every update, the trace,
/// checkpoints and resume as `opts` asks.
fn run_phase(
    fit: &Fit,
    est: &mut dyn GradientEstimator,
    phase: &Phase,
    params: VaeParams,
    tracer: &mut Tracer,
) -> Result<PhaseResult> {
    let Fit {
        vae,
        n,
        opts,
        progress,
        ..
    } = *fit;
    // The phase, then each part of the run's key (settings, seed, data, version), by name.
    let mut identity = Identity::new().with("phase", phase.name)?;
    if let Some(parts) = phase.key.as_object() {
        for (k, v) in parts {
            identity = identity.with(k, &v.to_string())?;
        }
    }
    let job = Training::new(vae, est, &phase.settings, n, identity)?;
    let total = phase.settings.epochs * job.per_epoch();
    let mut done_here = 0usize;
    let mut report = |_: &TrainState, info: &TrainInfo| {
        progress(phase.name, info.update, total);
        done_here += 1;
        let asked = opts
            .stop
            .as_ref()
            .is_some_and(|s| s.load(Ordering::Relaxed));
        match opts.interrupt_after {
            _ if asked => Control::Stop,
            Some(k) if done_here >= k => Control::Stop,
            _ => Control::Continue,
        }
    };
    let runner = Runner::new(job).observe(tracer).observe(&mut report);
    let ck = sagd_nn::train::PhaseCheckpoint {
        path: opts.checkpoint_dir.as_ref().map(|dir| {
            dir.join(format!(
                "rep{}-{}.ckpt",
                phase.key["seed"].as_u64().unwrap_or(0),
                phase.name
            ))
        }),
        every: opts.checkpoint_every,
        resume: opts.resume,
    };
    let what = || match phase.name {
        "pretrain" => "VAE pre-training".to_string(),
        m => format!("fine-tuning by {}", m.to_uppercase()),
    };
    let (runner, state) = sagd_nn::train::drive_phase(
        runner,
        &ck,
        phase.name,
        what,
        |job| job.init(params, phase.seed),
        |st| (1..=st.updates).for_each(|i| progress(phase.name, i, total)),
    )?;
    let params = runner.solver.finish(&state);
    let diagnostics = runner.solver.diagnostics();
    drop(runner);
    Ok(PhaseResult {
        params,
        final_loss: state.loss,
        diagnostics,
        trace: std::mem::take(&mut tracer.points),
    })
}

/// A fine-tuned method: its result, its draws of Z and its decoder's weights.
type Tuned = (Method, MethodResult, Vec<f64>, Vec<f32>);

/// One replication.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Replication {
    /// The seed of everything in it.
    pub seed: u64,
    /// The pre-trained VAE's evaluation.
    pub pretrained: Evaluation,
    /// Wall seconds of pre-training (of the run that did it, when read from a cache).
    pub pretrain_time_s: f64,
    /// The pre-trained networks were read from this file instead of trained.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub pretrained_from: Option<PathBuf>,
    /// Per method.
    pub methods: BTreeMap<String, MethodResult>,
    /// Draws of Z per fitted model (pretrained and each method), kept only when asked (figures).
    #[serde(skip)]
    pub samples: BTreeMap<String, Vec<f64>>,
    /// The observations.
    #[serde(skip)]
    pub x: Vec<f64>,
    /// Per fitted model (pretrained and each method): the decoder's weights, kept with the draws
    /// (to score held-out data).
    #[serde(skip)]
    pub decoders: BTreeMap<String, Vec<f32>>,
}

/// One replication: data from `seed`, VAE pre-training, then each method from the same pre-trained
/// weights, each evaluated on the same U. `progress(phase, done, total)` reports updates.
pub fn replicate(
    s: &E2Settings,
    law: &Law,
    seed: u64,
    opts: &RunOptions,
    progress: &(dyn Fn(&str, usize, usize) + Sync),
) -> Result<Replication> {
    let (_, x64) = simulate(law, s.n, s.p, seed);
    fit(s, Some(law), x64, seed, opts, progress)
}

/// What every phase of one replication's fit shares: its settings, data, model and options.
struct Fit<'a> {
    s: &'a E2Settings,
    law: Option<&'a Law>,
    vae: &'a Vae,
    x64: &'a [f64],
    x: &'a [f32],
    /// Observations used, and updates per epoch.
    n: usize,
    per_epoch: usize,
    /// The run's settings, seed and data: with a phase's name, its checkpoint's identity.
    key: serde_json::Value,
    seed: u64,
    opts: &'a RunOptions,
    progress: &'a (dyn Fn(&str, usize, usize) + Sync),
}

impl Fit<'_> {
    /// A fitted decoder's evaluation and its draws of Z: D and W against `law` when known,
    /// NaN otherwise (there is no true π to compare with).
    fn assess(&self, p: &VaeParams) -> (Evaluation, Vec<f64>) {
        let (s, vae, x64) = (self.s, self.vae, self.x64);
        let eval_seed = Seed::new(self.seed).stream("evaluation").get();
        match self.law {
            Some(l) => evaluate(vae, &p.dec, l, x64, s.m, eval_seed),
            None => {
                let z = generate(vae, &p.dec, s.m, eval_seed);
                let e = Evaluation {
                    ks: f64::NAN,
                    w1: f64::NAN,
                    ks_se: None,
                    w1_se: None,
                    loglik: (s.p == 1).then(|| log_likelihood_1d(vae, &p.dec, x64)),
                    z_mean: z.iter().sum::<f64>() / z.len().max(1) as f64,
                    z_sd: 0.0,
                    nonfinite: z.iter().filter(|v| !v.is_finite()).count(),
                };
                (e, z)
            }
        }
    }

    /// The pre-trained VAE, its wall seconds, and the cache file it was read from, if it was.
    fn pretrained(&self) -> Result<(VaeParams, f64, Option<PathBuf>)> {
        let (s, opts, seed) = (self.s, self.opts, self.seed);
        let pre_total = s.pretrain_epochs * self.per_epoch;
        let cache = opts
            .pretrained_cache
            .as_deref()
            .map(|dir| PretrainedCache::new(dir, s, self.x, seed, opts.device));
        match cache.as_ref().map(|c| c.load(self.vae)) {
            Some(Ok(Some((params, time_s)))) => {
                // Report the skipped updates as done, as training would have.
                (1..=pre_total).for_each(|i| (self.progress)("pretrain", i, pre_total));
                return Ok((params, time_s, cache.map(|c| c.path)));
            }
            Some(Err(e)) => return Err(e),
            _ => {}
        }
        let t0 = Instant::now();
        let seed = Seed::new(seed);
        let streams = seed.stream("pretrain");
        let pre_seed = streams.stream("estimator").get();
        let mut pre = Estimator::Bound { k: 1 }.on(opts.device, self.vae, self.x, pre_seed)?;
        let phase = Phase {
            name: "pretrain",
            settings: TrainSettings {
                epochs: s.pretrain_epochs,
                batch_size: s.batch_size,
                lr: s.lr,
                lr_decay: 0.0,
                averaging: Averaging::None,
            },
            key: &self.key,
            seed: streams.stream("minibatches").get(),
        };
        let assess = |p: &VaeParams| self.assess(p).0;
        let mut tracer = Tracer {
            every: 0,
            assess: &assess,
            points: Vec::new(),
        };
        // Pre-training is never interrupted on request: the fine-tuning phases are.
        let uninterrupted = RunOptions {
            interrupt_after: None,
            ..opts.clone()
        };
        let whole = Fit {
            opts: &uninterrupted,
            key: self.key.clone(),
            ..*self
        };
        let params = run_phase(
            &whole,
            pre.as_mut(),
            &phase,
            self.vae.init(seed.stream("init").get()),
            &mut tracer,
        )?
        .params;
        let time_s = t0.elapsed().as_secs_f64();
        if let Some(c) = &cache {
            c.save(self.vae, &params, time_s)?;
        }
        Ok((params, time_s, None))
    }

    /// Method `m`'s gradient estimator on the run's device, from its own seed.
    fn estimator(&self, m: Method, mseed: u64) -> Result<Box<dyn GradientEstimator + '_>> {
        let (s, vae, x, device) = (self.s, self.vae, self.x, self.opts.device);
        let estimator = match m {
            Method::Vae => Estimator::Bound { k: 1 },
            Method::Iwae => Estimator::Bound { k: s.method.iwae_k },
            Method::Hmc => Estimator::Hmc(s.method.hmc()),
            Method::Sagd | Method::SagdPaper => {
                let mut chains = match m {
                    Method::SagdPaper => s.method.sagd_paper(),
                    _ => s.method.sagd,
                };
                if let Some(plan) = chains.schedule.as_mut() {
                    plan.updates = s.finetune_epochs * self.per_epoch;
                }
                Estimator::Sagd(chains)
            }
        };
        estimator.on(device, vae, x, mseed)
    }

    /// Method `m`'s fine-tuning settings. SAGD has its own learning rate, its decay, and returns
    /// an average of its iterates; the paper's SAGD takes the last iterate at the fine-tuning rate.
    fn finetuning(&self, m: Method) -> TrainSettings {
        let s = self.s;
        let (lr, averaging) = match m {
            Method::Sagd if s.method.sagd_average > 0.0 => (
                s.sagd_lr(),
                Averaging::Tail {
                    fraction: s.method.sagd_average,
                },
            ),
            Method::Sagd => (s.sagd_lr(), Averaging::None),
            _ => (s.finetune_lr, Averaging::None),
        };
        TrainSettings {
            epochs: s.finetune_epochs,
            batch_size: s.batch_size,
            lr,
            lr_decay: if m == Method::Sagd {
                s.method.sagd_lr_decay
            } else {
                0.0
            },
            averaging,
        }
    }

    /// Method `m` fine-tuned from the pre-trained `params`, on its own streams (named after it),
    /// and evaluated.
    fn finetuned(&self, m: Method, params: &VaeParams) -> Result<Tuned> {
        let streams = Seed::new(self.seed).stream(m.name());
        let t0 = Instant::now();
        let mut est = self.estimator(m, streams.stream("estimator").get())?;
        let phase = Phase {
            name: m.name(),
            settings: self.finetuning(m),
            key: &self.key,
            seed: streams.stream("minibatches").get(),
        };
        let assess = |p: &VaeParams| self.assess(p).0;
        let mut tracer = Tracer {
            every: self.opts.trace_every,
            assess: &assess,
            points: Vec::new(),
        };
        let done = run_phase(self, est.as_mut(), &phase, params.clone(), &mut tracer)?;
        let time_s = t0.elapsed().as_secs_f64();
        let (eval, z) = self.assess(&done.params);
        let r = MethodResult {
            eval,
            time_s,
            final_loss: done.final_loss,
            diagnostics: done.diagnostics,
            trace: done.trace,
        };
        Ok((m, r, z, done.params.dec))
    }
}

/// Pre-training and fine-tuning on observations `x` (n × p); evaluation against `law` when known
/// (otherwise D and W are NaN: there is no true π to compare with).
pub fn fit(
    s: &E2Settings,
    law: Option<&Law>,
    x64: Vec<f64>,
    seed: u64,
    opts: &RunOptions,
    progress: &(dyn Fn(&str, usize, usize) + Sync),
) -> Result<Replication> {
    let vae = Vae::new(s.p, s.hidden);
    let x: Vec<f32> = x64.iter().map(|v| *v as f32).collect();
    let n = s.n.min(x.len() / s.p.max(1));
    let data_hash = fnv1a(FNV_OFFSET, x.iter().flat_map(|v| v.to_bits().to_le_bytes()));
    let mut key = serde_json::json!({
        "settings": s, "seed": seed, "data_fnv1a": format!("{data_hash:016x}"),
        "version": env!("CARGO_PKG_VERSION"), "seed_streams": SEED_STREAMS,
    });
    // A GPU's estimators keep other state, and give other draws: its checkpoints are its own.
    if opts.device != Device::Cpu {
        key["device"] = serde_json::json!(opts.device.to_string());
    }
    let job = Fit {
        s,
        law,
        vae: &vae,
        x64: &x64,
        x: &x,
        n,
        per_epoch: n.div_ceil(s.batch_size.clamp(1, n.max(1))),
        key,
        seed,
        opts,
        progress,
    };
    let (params, pretrain_time_s, pretrained_from) = job.pretrained()?;
    let (pretrained, z0) = job.assess(&params);
    let (mut samples, mut decoders) = (BTreeMap::new(), BTreeMap::new());
    if opts.keep_samples {
        samples.insert("pretrained".to_string(), z0);
        decoders.insert("pretrained".to_string(), params.dec.clone());
    }
    // The methods start from the same pre-trained weights and have their own streams: they run in
    // parallel, with the same results as one after another.
    let chosen: Vec<Method> = Method::ALL
        .iter()
        .copied()
        .filter(|m| s.methods.contains(m))
        .collect();
    // Split over the processes of a split run (each method runs whole on one).
    let outcomes: Vec<Tuned> =
        sagd::share::map(chosen.len(), |k| job.finetuned(chosen[k], &params))?;
    let mut methods = BTreeMap::new();
    for (m, r, z, dec) in outcomes {
        if opts.keep_samples {
            samples.insert(m.name().to_string(), z);
            decoders.insert(m.name().to_string(), dec);
        }
        methods.insert(m.name().to_string(), r);
    }
    drop(job);
    Ok(Replication {
        seed,
        pretrained,
        pretrain_time_s,
        pretrained_from,
        methods,
        samples,
        x: x64,
        decoders,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The learning curve asks for the current parameters at its points and only there (a GPU
    /// that keeps them then syncs once per point, not at every update).
    #[test]
    fn the_learning_curve_reads_the_state_at_its_points() {
        let assess = |_: &VaeParams| -> Evaluation { unreachable!("not observed here") };
        let at = |every, epoch_done| {
            let tracer = Tracer {
                every,
                assess: &assess,
                points: Vec::new(),
            };
            let info = TrainInfo {
                update: 7,
                epoch_done,
                loss: 0.0,
            };
            tracer.reads_state(&info)
        };
        assert!(at(2, Some(2)) && at(2, Some(4)) && at(1, Some(3)));
        assert!(!at(2, Some(3)) && !at(2, None) && !at(0, Some(2)));
    }
}
