//! Which experiments `sagd reproduce` runs at each scale, how long they should take, and how each
//! is run and summarised for the report.

use std::path::Path;

use anyhow::{Context, Result};
use indicatif::ProgressBar;
use sagd::cpu::Capability;
use sagd::run::{fnv1a, FNV_OFFSET};
use sagd_apps::debias::{Case, E2Settings, Method, RunOptions};
use sagd_apps::e1::{E1Data, E1Options, E1Settings};
use sagd_apps::mnist::experiment::{E3Options, E3Result, E3Settings};
use sagd_apps::mnist::model::Chains;
use sagd_nn::Device;
use serde_json::json;

use super::calibrate::Speed;
use super::{Record, Table};
use crate::debias::{write_table, TableJob};
use crate::em::{write, E1Output};
use crate::mnist::MnistOutput;

mod records;

use records::{e1_record, e2_record, e3_record};

/// The paper's experiments, as `--only` names them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Part {
    /// Automated EM (Figure 1).
    E1,
    /// The debiased VAE (Table 1, Figure 2).
    E2,
    /// MNIST (Figure 3).
    E3,
}

impl Part {
    /// All, in the paper's order.
    pub const ALL: [Part; 3] = [Part::E1, Part::E2, Part::E3];
}

impl std::fmt::Display for Part {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Part::E1 => "e1",
            Part::E2 => "e2",
            Part::E3 => "e3",
        })
    }
}

impl std::str::FromStr for Part {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Part::ALL
            .into_iter()
            .find(|p| p.to_string() == s.trim().to_ascii_lowercase())
            .ok_or_else(|| format!("unknown experiment `{s}`: use e1, e2 or e3"))
    }
}

/// The scale of a reproduction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// The default: a reduced plan that fits 2 cores in minutes ([`quick_minutes`]).
    Quick,
    /// The paper's settings.
    Full,
    /// Seconds, for tests.
    Tiny,
}

impl Mode {
    /// As the report names it.
    pub fn name(self) -> &'static str {
        match self {
            Mode::Quick => "quick",
            Mode::Full => "full",
            Mode::Tiny => "tiny",
        }
    }
}

/// What an experiment runs.
#[derive(Clone, Debug, PartialEq)]
pub enum Kind {
    /// E1 with these settings.
    E1(Box<E1Settings>),
    /// One case of Table 1.
    E2 {
        /// The case.
        case: Case,
        /// Its settings.
        settings: Box<E2Settings>,
        /// Whether these are the paper's settings for the case.
        paper: bool,
        /// The replications' seeds.
        seeds: Vec<u64>,
    },
    /// E3 with these settings (on the shipped MNIST files).
    E3 {
        /// Its settings.
        settings: Box<E3Settings>,
        /// Whether these are the paper's.
        paper: bool,
    },
    /// Not in this version.
    Unavailable,
}

/// One experiment of the plan.
#[derive(Clone, Debug)]
pub struct Experiment {
    /// Short name and folder.
    pub name: String,
    /// The paper's name for it.
    pub title: String,
    /// What is run relative to the paper (or why nothing is).
    pub scale: String,
    /// What it runs.
    pub kind: Kind,
    mode: Mode,
}

/// The experiments of `parts` at `mode`, in the paper's order.
pub fn plan(mode: Mode, parts: &[Part]) -> Vec<Experiment> {
    let mut out = Vec::new();
    let ex = |name: &str, title: &str, scale: String, kind| Experiment {
        name: name.into(),
        title: title.into(),
        scale,
        kind,
        mode,
    };
    if parts.contains(&Part::E1) {
        let mut s = E1Settings::default();
        let scale = if mode == Mode::Tiny {
            s.surface = 6;
            s.msteps = 1;
            "a toy scale: one M-step of T = 100 updates".into()
        } else {
            "the paper's settings: n = 100, three M-steps of T = 100 updates, seed 1".into()
        };
        out.push(ex(
            "e1",
            "E1 — automated EM on the Gamma-sigmoid model (Figure 1)",
            scale,
            Kind::E1(Box::new(s)),
        ));
    }
    if parts.contains(&Part::E2) {
        for case in Case::ALL {
            let paper = mode == Mode::Full;
            let mut s = case.settings(paper);
            let reps = match (case, mode) {
                (Case::Highdim, _) => 1,
                (_, Mode::Full) => 30,
                (_, Mode::Quick) => 5,
                (_, Mode::Tiny) => 2,
            };
            // SAGD as the paper ran it, beside ours where the two differ.
            if !s.method.sagd_is_papers() && !s.methods.contains(&Method::SagdPaper) {
                s.methods.push(Method::SagdPaper);
            }
            if mode == Mode::Tiny {
                s.n = if case == Case::Highdim { 120 } else { 150 };
                s.batch_size = if case == Case::Highdim { 40 } else { 150 };
                s.p = if case == Case::Highdim { 3 } else { 1 };
                s.hidden = 16;
                s.pretrain_epochs = 30;
                s.finetune_epochs = 4;
                s.m = 2000;
            }
            let scale = match (case, mode) {
                (Case::Highdim, Mode::Full) => "the paper's settings: 10000 + 1000 epochs, one replication (standard errors over the 100 coordinates, as the paper's)".to_string(),
                (Case::Highdim, _) => format!("{} + {} of the paper's 10000 + 1000 epochs, one replication (standard errors over the {} coordinates)", s.pretrain_epochs, s.finetune_epochs, s.p),
                (_, Mode::Tiny) => format!("a toy scale: n = {}, {} + {} updates, {reps} replications", s.n, s.pretrain_epochs, s.finetune_epochs),
                _ => format!("the paper's data, networks and epochs (where our default SAGD differs from the paper's, the methods say so), {reps} of the paper's 30 replications (seeds 0..{})", reps - 1),
            };
            let title = format!("E2 — debiased VAE, {case} (Table 1, Figure 2)");
            let kind = Kind::E2 {
                case,
                settings: Box::new(s),
                paper,
                seeds: (0..reps).collect(),
            };
            out.push(ex(&format!("e2-{case}"), &title, scale, kind));
        }
    }
    if parts.contains(&Part::E3) {
        let (s, scale) = e3_settings(mode);
        out.push(ex(
            "e3",
            "E3 — refining an MNIST generator (Figure 3)",
            scale,
            Kind::E3 {
                settings: Box::new(s),
                paper: mode == Mode::Full,
            },
        ));
    }
    out
}

/// The estimated minutes of the whole quick plan on `threads` threads on the kernels' `path`:
/// what `--quick`'s help quotes (for AVX-512) and what the run prints before it starts, from one
/// formula.
pub fn quick_minutes(threads: usize, path: Capability) -> f64 {
    plan(Mode::Quick, &Part::ALL)
        .iter()
        .map(|e| e.estimate_on(threads, path))
        .sum::<f64>()
        / 60.0
}

/// How much longer E2's work takes on the AVX2 path than on the AVX-512 one: one replication on
/// one thread, both paths in one sitting on one machine (docs/results/speed.md).
const AVX2_E2: f64 = 1.95;
/// The same for E3's minibatches on 2 threads (the VAE's and SAGD's, averaged).
const AVX2_E3: f64 = 1.4;

/// E3's settings at `mode`, and what they are against the paper's.
fn e3_settings(mode: Mode) -> (E3Settings, String) {
    match mode {
        Mode::Full => (
            E3Settings::paper(),
            "the paper's settings: 500 VAE epochs, 100 SAGD epochs (a GPU's job: --device cuda), 500 test images with 1000 draws each".into(),
        ),
        Mode::Quick => {
            let s = E3Settings {
                vae_epochs: 3,
                sagd_updates: 30,
                eval_n: 100,
                eval_k: 500,
                ..E3Settings::default()
            };
            let scale = format!(
                "a demonstration: {} VAE epochs (paper 500) and {} SAGD updates (paper 30000), {} test images with {} draws; `sagd mnist` (about 30 minutes on 2 cores) is the check, --full the paper's",
                s.vae_epochs, s.sagd_updates, s.eval_n, s.eval_k
            );
            (s, scale)
        }
        Mode::Tiny => {
            let s = E3Settings {
                latent: 4,
                train_n: 300,
                batch_size: 100,
                vae_epochs: 1,
                sagd_updates: 2,
                chains: Chains {
                    per_image: 2,
                    steps: 2,
                    ..Chains::default()
                },
                eval_n: 10,
                eval_k: 20,
                ..E3Settings::default()
            };
            (s, "a toy scale: 300 images, latent 4, 1 VAE epoch, 2 SAGD updates".into())
        }
    }
}

impl Experiment {
    /// Expected wall seconds on `threads` threads, from timings on a 2-core machine (Intel Xeon,
    /// 2026-11-27): each constant is core-seconds of one unit of work, so that the quick plan's
    /// experiments come out within 3% of that machine's quick run (docs/results/reproduce-quick:
    /// E1 1.6 s, E2's 1-D cases 107-117 s, high-dimensional 349 s, E3 179 s); E3's come from the
    /// minibatches `sagd bench mnist` timed ([`crate::mnist::phase_costs`]).
    pub fn estimate_s(&self, threads: usize) -> f64 {
        self.estimate_on(threads, sagd::cpu::capability())
    }

    /// [`Experiment::estimate_s`] for the kernels' instruction set `path`: the unit costs were
    /// timed on the AVX-512 path, and the AVX2 path's are that times the ratio measured between
    /// the two paths on one machine (docs/results/speed.md). The portable path (a CPU without
    /// AVX2) was not timed: its estimate is the AVX-512 one, and the run says so.
    pub fn estimate_on(&self, threads: usize, path: Capability) -> f64 {
        let path_factor = match (path, &self.kind) {
            (Capability::Avx2, Kind::E2 { .. }) => AVX2_E2,
            (Capability::Avx2, Kind::E3 { .. }) => AVX2_E3,
            _ => 1.0,
        };
        path_factor * self.reference_core_s() / threads.clamp(1, 64) as f64
    }

    /// [`Experiment::estimate_s`] scaled by this machine's measured `speed` instead of the
    /// kernels' path: E2's (and E1's) work by its E2 factor, E3's by its E3 factor.
    pub fn estimate_measured(&self, threads: usize, speed: &Speed) -> f64 {
        let factor = match &self.kind {
            Kind::E3 { .. } => speed.e3,
            _ => speed.e2,
        };
        factor * self.reference_core_s() / threads.clamp(1, 64) as f64
    }

    /// Core-seconds on the machine the unit costs were timed on (AVX-512).
    fn reference_core_s(&self) -> f64 {
        let core_s = match &self.kind {
            Kind::E1(_) => 3.2,
            Kind::E2 {
                settings: s, seeds, ..
            } => {
                let (pre, ft) = (s.pretrain_epochs as f64, s.finetune_epochs as f64);
                let rep = if s.p == 1 {
                    40.0 * (0.2 * pre / 5000.0 + 0.8 * ft / 1000.0) * s.n as f64 / 1000.0
                } else {
                    (0.33 * pre + 9.3 * ft) * (s.n * s.p) as f64 / 1e6
                };
                // Measured with the paper's four methods; others in proportion to their work.
                let four = E2Settings {
                    methods: Method::ALL[..4].to_vec(),
                    ..(**s).clone()
                };
                let share = s.replication_work(s.n) as f64 / four.replication_work(s.n) as f64;
                rep * share * seeds.len() as f64
            }
            Kind::E3 { settings: s, .. } => crate::mnist::core_seconds(s),
            Kind::Unavailable => 0.0,
        };
        let scale = if self.mode == Mode::Tiny { 0.02 } else { 1.0 };
        scale * core_s
    }

    /// The settings as JSON, for the report.
    pub fn settings_json(&self) -> serde_json::Value {
        match &self.kind {
            Kind::E1(s) => json!(s),
            Kind::E2 {
                settings,
                seeds,
                paper,
                ..
            } => json!({"settings": settings, "seeds": seeds, "paper_settings": paper}),
            Kind::E3 { settings, paper } => json!({"settings": settings, "paper_settings": paper}),
            Kind::Unavailable => serde_json::Value::Null,
        }
    }

    /// A fingerprint of what the experiment computes (settings, seeds, version).
    pub fn key(&self) -> String {
        let text = json!({"name": self.name, "settings": self.settings_json(), "version": env!("CARGO_PKG_VERSION")}).to_string();
        format!("{:016x}", fnv1a(FNV_OFFSET, text.bytes()))
    }
}

/// Runs `e` into `dir` and fills the report's part of `rec`.
pub fn execute(
    e: &Experiment,
    dir: &Path,
    cache: &Path,
    device: Device,
    interrupt_after: Option<usize>,
    bar: &ProgressBar,
    rec: &mut Record,
) -> Result<()> {
    // A folder that another command's result or interrupted run took over is not reproduce's.
    crate::output::claim(dir, "reproduce")?;
    // Checkpoints left by an interrupted run of other settings cannot be resumed: start afresh.
    let key_file = dir.join("reproduce.key");
    if std::fs::read_to_string(&key_file).ok().as_deref() != Some(rec.key.as_str()) {
        std::fs::remove_dir_all(dir.join(crate::output::CHECKPOINTS)).ok();
    }
    std::fs::create_dir_all(dir)?;
    let checkpoints = crate::output::checkpoints(dir, "reproduce", false, true)?;
    std::fs::write(&key_file, &rec.key)?;
    let flags = json!({"command": "sagd reproduce", "experiment": e.name, "mode": e.mode.name()});
    match &e.kind {
        Kind::E1(s) => {
            let out = E1Output {
                out: dir,
                bar,
                flags,
                command: "reproduce",
                file: None,
                compare: true,
                opts: E1Options::default(),
            };
            let (r, _) = write(s, out)?;
            e1_record(s, &r, rec);
        }
        Kind::E2 {
            case,
            settings,
            paper,
            seeds,
        } => {
            let opts = RunOptions {
                pretrained_cache: Some(cache.to_path_buf()),
                checkpoint_dir: checkpoints.clone(),
                checkpoint_every: 100,
                resume: true,
                interrupt_after,
                device,
                ..RunOptions::default()
            };
            let job = TableJob {
                case: *case,
                paper_settings: *paper,
                seeds: seeds.clone(),
                opts,
                out: dir,
                bar,
                flags,
                command: "reproduce",
            };
            let (t, _, _) = write_table(settings, job)?;
            e2_record(&t, rec);
        }
        Kind::E3 { settings, .. } => {
            let data_dir = sagd_apps::mnist::shipped_dir();
            let data = sagd_apps::mnist::load(&data_dir).with_context(|| {
                format!(
                    "reading the MNIST files that ship with sagd ({})",
                    data_dir.display()
                )
            })?;
            let opts = E3Options {
                checkpoint_dir: checkpoints,
                checkpoint_every: 100,
                resume: true,
                pretrained_cache: Some(cache.to_path_buf()),
                interrupt_after,
                device,
            };
            let out = MnistOutput {
                out: dir,
                bar,
                flags,
                command: "reproduce",
            };
            let (r, _) = crate::mnist::write(settings, &data, &opts, out)?;
            e3_record(&r, rec);
        }
        Kind::Unavailable => {}
    }
    Ok(())
}
