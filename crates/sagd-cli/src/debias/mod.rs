//! `sagd debias`: the debiased VAE (the paper's E2): Table 1 and Figure 2, or the deconvolution
//! of a user's data. This file maps flags onto the library's settings; `render` writes the
//! results. Defaults shown by `--help` come from the library's `Default`s.

mod deconvolve;
mod render;

pub use render::{write_table, TableJob};

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use clap::Args;
use sagd::langevin::{Momentum, Scheme};
use sagd_apps::debias::{Case, E2Settings, Method, MethodSettings, RunOptions, SagdPreset};
use sagd_nn::train::LangevinChains;
use serde::Serialize;

use crate::output::Checkpointing;

/// The library's defaults, for `--help`.
fn spec() -> E2Settings {
    E2Settings::default()
}

fn chains() -> LangevinChains {
    LangevinChains::default()
}

/// Flags of `sagd debias`. Defaults are experiment E2 of the paper; flags marked "preset" take
/// the case's value unless given (`--print-settings` shows them).
#[derive(Args, Debug, Clone, Serialize)]
#[command(allow_negative_numbers = true)]
pub struct DebiasArgs {
    /// The true latent distribution: normal, exp, mixture, or highdim (100 independent exp
    /// coordinates).
    #[arg(long, default_value_t = Case::default(), conflicts_with = "data")]
    dist: Case,
    /// highdim only: the paper's settings (10000 pre-training and 1000 fine-tuning epochs of
    /// minibatches), instead of the small default that finishes in minutes on 2 cores.
    #[arg(long, conflicts_with = "data")]
    paper_settings: bool,
    /// Methods to fine-tune with, comma-separated.
    #[arg(long, value_delimiter = ',', default_values_t = spec().methods)]
    methods: Vec<Method>,
    /// Replications, with seeds seed..seed+reps−1, run in parallel.
    #[arg(long, default_value_t = 1, conflicts_with = "data")]
    reps: usize,
    /// The first seed.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Data points (preset; with --data, the file's).
    #[arg(long, conflicts_with = "data")]
    n: Option<usize>,
    /// Dimension of Z (preset; with --data, 1).
    #[arg(long, conflicts_with = "data")]
    p: Option<usize>,
    /// Hidden width of both networks (preset).
    #[arg(long)]
    hidden: Option<usize>,
    /// Minibatch size (preset; with --data, the full batch).
    #[arg(long)]
    batch_size: Option<usize>,
    /// VAE pre-training epochs; full batch: updates (preset).
    #[arg(long, alias = "pretrain-iters")]
    pretrain_epochs: Option<usize>,
    /// Fine-tuning epochs per method (preset).
    #[arg(long, alias = "finetune-iters")]
    finetune_epochs: Option<usize>,
    /// Adam learning rate of pre-training.
    #[arg(long, default_value_t = spec().lr)]
    lr: f64,
    /// Adam learning rate of fine-tuning.
    #[arg(long, default_value_t = spec().finetune_lr)]
    finetune_lr: f64,
    /// Adam learning rate of SAGD's fine-tuning (preset: --finetune-lr; 1e-4 for highdim with
    /// --paper-settings, see docs/guide.md; 5e-3 with --sagd-preset decay).
    #[arg(long)]
    sagd_lr: Option<f64>,
    /// Draws of U for the evaluation.
    #[arg(long, default_value_t = spec().m)]
    m: usize,
    /// IWAE importance samples.
    #[arg(long, default_value_t = spec().method.iwae_k)]
    iwae_k: usize,
    /// SAGD friction γ.
    #[arg(long, default_value_t = chains().langevin.gamma)]
    sagd_gamma: f64,
    /// SAGD's named settings: default (δ = 0.02 and K = 10 fixed, a constant learning rate),
    /// theorem3 (Theorem 3's chains, cost-matched: δ_t = 0.1/√(1 + t), K_t ∝ 1 + t; best W on the
    /// mixture), decay (learning rate 5e-3/√(1 + t)) or refresh (the chains started again from
    /// the encoder every 20 updates, 24% more Langevin steps: no worse than the default in any
    /// case, lower W and D on the normal case, lower D on the mixture) or refresh2 (refresh with
    /// two chains per data point, 2.3 times the default's time: no worse in any case, lower W and
    /// D on the normal case and the mixture); the flags below override it. See
    /// docs/results/table1.md.
    #[arg(long, value_enum, default_value_t = PresetArg(SagdPreset::Default))]
    sagd_preset: PresetArg,
    /// SAGD Langevin step δ (at the start of the run, with a schedule) [preset: 0.02; theorem3
    /// 0.1].
    #[arg(long)]
    sagd_delta: Option<f64>,
    /// SAGD Langevin steps per update K.
    #[arg(long, default_value_t = chains().steps)]
    sagd_k: usize,
    /// SAGD burn-in steps.
    #[arg(long, default_value_t = chains().burn_in)]
    sagd_burn_in: usize,
    /// SAGD's Langevin step along the run, δ_t = δ (1 + t)^−a (Theorems 3-4; 0: δ fixed)
    /// [preset: 0; theorem3 ½].
    #[arg(long)]
    sagd_delta_decay: Option<f64>,
    /// SAGD's chain length along the run, K_t ∝ (1 + t)^b with as many steps in all as K fixed
    /// (Theorems 3-4, cost-matched; 0: K fixed) [preset: 0; theorem3 1].
    #[arg(long)]
    sagd_k_growth: Option<f64>,
    /// SAGD: start every chain again from an encoder draw (and burn in) every R updates [preset:
    /// never, as the paper; refresh and refresh2 20].
    #[arg(long, value_name = "R")]
    sagd_refresh_every: Option<usize>,
    /// SAGD: chains per data point M, averaged in the gradient (M times the Langevin steps)
    /// [preset: 1, as the paper; refresh2 2].
    #[arg(long, value_name = "M")]
    sagd_chains_per_point: Option<usize>,
    /// SAGD's learning rate along the run, lr_t = lr (1 + t)^−c (0: constant; ½: Theorem 3)
    /// [preset: 0; decay ½ with lr 5e-3].
    #[arg(long)]
    sagd_lr_decay: Option<f64>,
    /// SAGD integrator: euler (the paper's), obabo, baoab (less bias at the same cost), ubu.
    #[arg(long, default_value_t = chains().langevin.scheme)]
    sagd_scheme: Scheme,
    /// SAGD initial momentum: normal or zero.
    #[arg(long, default_value_t = chains().initial_momentum)]
    sagd_rho0: Momentum,
    /// SAGD: return the average of the iterates over this final fraction of the updates (0: the
    /// last iterate, as the spec).
    #[arg(long, default_value_t = spec().method.sagd_average)]
    sagd_average: f64,
    /// HMC leapfrog steps per proposal.
    #[arg(long, default_value_t = spec().method.hmc_leapfrog)]
    hmc_l: usize,
    /// HMC leapfrog step (default: --sagd-delta).
    #[arg(long)]
    hmc_eps: Option<f64>,
    /// HMC transitions per update (default: --sagd-k).
    #[arg(long)]
    hmc_k: Option<usize>,
    /// Deconvolve this CSV column of observations X = Z + noise instead of simulating.
    #[arg(long)]
    data: Option<PathBuf>,
    /// The column of --data: a header name or a 1-based number.
    #[arg(long)]
    column: Option<String>,
    /// Standard deviation of the noise in --data (required with it: the one modelling
    /// assumption of a deconvolution, which the data cannot tell).
    #[arg(long, requires = "data")]
    noise_sd: Option<f64>,
    /// The fraction of --data held out of the fit to compare the fitted models on (0: none).
    #[arg(long, default_value_t = 0.2)]
    holdout: f64,
    /// Keep pre-trained networks in this folder and reuse them: a run with the same data, seed and
    /// pre-training settings reads them instead of pre-training again (same results).
    #[arg(long)]
    pretrained_cache: Option<PathBuf>,
    /// Every this many fine-tuning epochs, evaluate each method's current iterate (D, W,
    /// log-likelihood in 1-D) into result.json, trace.csv and trace.png/.svg (0: never).
    #[arg(long, default_value_t = 0)]
    trace_every: usize,
    #[command(flatten)]
    #[serde(flatten)]
    checkpoints: Checkpointing,
    /// Print the settings these flags resolve to (JSON) and exit.
    #[arg(long)]
    print_settings: bool,
    /// Output folder (default out/debias-DIST, or out/deconvolution with --data).
    #[arg(long)]
    out: Option<PathBuf>,
    /// No progress bar.
    #[arg(long)]
    quiet: bool,
    /// Where the networks train: cpu, or cuda (cuda:N for GPU N) for an NVIDIA GPU with CUDA 13's
    /// driver, NVRTC and cuBLAS on the loader's path. Evaluation stays on the CPU. Under mpirun,
    /// the processes on a machine take GPU N, N + 1, … in turn.
    #[arg(long, default_value_t = sagd_nn::Device::Cpu)]
    device: sagd_nn::Device,
}

/// `--sagd-preset`: the library's [`SagdPreset`], named and described for the help.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(transparent)]
pub struct PresetArg(SagdPreset);

impl clap::ValueEnum for PresetArg {
    fn value_variants<'a>() -> &'a [Self] {
        const ALL: [PresetArg; 5] = [
            PresetArg(SagdPreset::ALL[0]),
            PresetArg(SagdPreset::ALL[1]),
            PresetArg(SagdPreset::ALL[2]),
            PresetArg(SagdPreset::ALL[3]),
            PresetArg(SagdPreset::ALL[4]),
        ];
        &ALL
    }

    fn to_possible_value(&self) -> Option<clap::builder::PossibleValue> {
        Some(clap::builder::PossibleValue::new(self.0.name()).help(self.0.describe()))
    }
}

/// The library's settings for these flags: the case's preset, then every flag given.
fn settings(a: &DebiasArgs) -> E2Settings {
    let preset = a.dist.settings(a.paper_settings);
    let or = |flag: Option<usize>, v: usize| flag.unwrap_or(v);
    let n = or(a.n, preset.n);
    // A full-batch preset stays full batch at another n.
    let full = preset.batch_size >= preset.n;
    let mut s = E2Settings {
        n,
        p: or(a.p, preset.p),
        hidden: or(a.hidden, preset.hidden),
        batch_size: or(a.batch_size, if full { n } else { preset.batch_size }),
        pretrain_epochs: or(a.pretrain_epochs, preset.pretrain_epochs),
        finetune_epochs: or(a.finetune_epochs, preset.finetune_epochs),
        lr: a.lr,
        finetune_lr: a.finetune_lr,
        // An explicit flag, then the case's preset (the high-dimensional paper settings' rate),
        // then SAGD's named settings (applied below).
        sagd_lr: a.sagd_lr.or(preset.sagd_lr),
        m: a.m,
        methods: a.methods.clone(),
        method: MethodSettings {
            iwae_k: a.iwae_k,
            sagd: LangevinChains {
                langevin: sagd::langevin::LangevinSettings {
                    scheme: a.sagd_scheme,
                    gamma: a.sagd_gamma,
                },
                steps: a.sagd_k,
                burn_in: a.sagd_burn_in,
                initial_momentum: a.sagd_rho0,
                ..chains()
            },
            sagd_average: a.sagd_average,
            hmc_leapfrog: a.hmc_l,
            hmc_transitions: a.hmc_k,
            ..MethodSettings::default()
        },
    };
    // SAGD's named settings, then each flag given over them.
    let preset = a.sagd_preset.0;
    preset.apply(&mut s);
    let (v, m) = (preset.values(), &mut s.method);
    if let Some(delta) = a.sagd_delta {
        m.sagd.step_size = delta;
        // HMC shares the δ a user sets for SAGD, as in the paper.
        m.hmc_step_size = None;
    }
    if a.sagd_delta_decay.is_some() || a.sagd_k_growth.is_some() {
        m.sagd.schedule = sagd_apps::debias::schedule(
            a.sagd_delta_decay.unwrap_or(v.delta_decay),
            a.sagd_k_growth.unwrap_or(v.k_growth),
        );
    }
    m.sagd.refresh_every = a.sagd_refresh_every.or(m.sagd.refresh_every);
    m.sagd.chains_per_point = a.sagd_chains_per_point.or(m.sagd.chains_per_point);
    m.sagd_lr_decay = a.sagd_lr_decay.unwrap_or(m.sagd_lr_decay);
    m.hmc_step_size = a.hmc_eps.or(m.hmc_step_size);
    s
}

/// How the run is carried out (checkpoints, cache, trace), beside what it computes; `command`
/// names the result the folder will hold.
fn run_options(a: &DebiasArgs, out: &Path, command: &str) -> Result<RunOptions> {
    let c = &a.checkpoints;
    let checkpoints = c.folder(out, command)?;
    if let Some(cache) = &a.pretrained_cache {
        crate::output::writable_folder(cache, "--pretrained-cache")?;
    }
    Ok(RunOptions {
        keep_samples: false,
        pretrained_cache: a.pretrained_cache.clone(),
        trace_every: a.trace_every,
        checkpoint_dir: checkpoints,
        checkpoint_every: c.checkpoint_every,
        resume: c.resume,
        interrupt_after: c.interrupt_after,
        device: a.device,
        stop: None,
    })
}

/// Runs `sagd debias`.
pub fn run(a: DebiasArgs) -> Result<()> {
    let s = settings(&a);
    if a.print_settings {
        say!("{}", serde_json::to_string_pretty(&s)?);
        return Ok(());
    }
    if a.reps == 0 {
        bail!("--reps must be at least 1");
    }
    s.validate()?;
    // Before any work: a missing GPU or library is a flag's error, not a replication's.
    a.device
        .ready()
        .with_context(|| format!("--device {}", a.device))?;
    match &a.data {
        Some(path) => deconvolve::deconvolve(&a, &s, path),
        None => render::table(&a, &s),
    }
}
