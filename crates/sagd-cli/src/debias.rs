//! `sagd debias`: the debiased VAE (the paper's E2): Table 1 and Figure 2 for the one-dimensional
//! cases, and deconvolution of a user's data.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Instant;

use anyhow::{anyhow, bail, Context, Result};
use clap::Args;
use rayon::prelude::*;
use sagd::langevin::{Momentum, Scheme};
use sagd::metrics::Law;
use sagd_nn::experiment::{fit, replicate, E2Settings, Replication, RunOptions, TracePoint};
use sagd_nn::train::{Method, MethodSettings};
use serde::Serialize;
use serde_json::json;

use crate::input::{read_column, Column, Domain};
use crate::output::{progress_bar, Staging};
use crate::plot::{save, DensityGrid, DensityPanel, TraceFigure};

/// The paper's Table 1: (case, metric) → mean and standard error for VAE, IWAE, HMC, SAGD.
/// (case, metric, [(mean, se) for VAE, IWAE, HMC, SAGD]).
type PaperRow = (&'static str, &'static str, [(f64, f64); 4]);

const PAPER: &[PaperRow] = &[
    (
        "normal",
        "D",
        [
            (0.033, 0.0024),
            (0.043, 0.0035),
            (0.032, 0.0019),
            (0.033, 0.0020),
        ],
    ),
    (
        "normal",
        "W",
        [
            (0.052, 0.0040),
            (0.066, 0.0047),
            (0.050, 0.0032),
            (0.052, 0.0035),
        ],
    ),
    (
        "exp",
        "D",
        [
            (0.095, 0.0018),
            (0.059, 0.0039),
            (0.085, 0.0016),
            (0.064, 0.0029),
        ],
    ),
    (
        "exp",
        "W",
        [
            (0.226, 0.0079),
            (0.125, 0.0091),
            (0.161, 0.0051),
            (0.115, 0.0082),
        ],
    ),
    (
        "mixture",
        "D",
        [
            (0.127, 0.0027),
            (0.098, 0.0061),
            (0.104, 0.0015),
            (0.085, 0.0019),
        ],
    ),
    (
        "mixture",
        "W",
        [
            (0.320, 0.0025),
            (0.165, 0.0059),
            (0.276, 0.0021),
            (0.197, 0.0031),
        ],
    ),
    (
        "highdim",
        "D",
        [
            (0.093, 0.0010),
            (0.080, 0.0012),
            (0.092, 0.0008),
            (0.065, 0.0005),
        ],
    ),
    (
        "highdim",
        "W",
        [
            (0.222, 0.0027),
            (0.158, 0.0029),
            (0.212, 0.0030),
            (0.093, 0.0015),
        ],
    ),
];

/// SAGD's learning rate in the high-dimensional case with the paper's 20000 minibatch updates: the
/// likelihood there rewards drifting towards the data points, and a smaller step keeps the fit near
/// its best (README, "High-dimensional case").
const HIGHDIM_PAPER_SAGD_LR: f64 = 1e-4;

/// Flags of `sagd debias`. Defaults are experiment E2 of the paper .
#[derive(Args, Debug, Clone, Serialize)]
pub struct DebiasArgs {
    /// The true latent distribution: normal, exp, mixture, or highdim (100 independent exp coordinates).
    #[arg(long, default_value = "exp")]
    dist: String,
    /// highdim only: the paper's settings (10000 pre-training and 1000 fine-tuning epochs of
    /// minibatches), instead of the small default that finishes in minutes on 2 cores.
    #[arg(long)]
    paper_settings: bool,
    /// Methods to fine-tune with, comma-separated.
    #[arg(long, default_value = "vae,iwae,hmc,sagd")]
    methods: String,
    /// Replications, with seeds seed..seed+reps−1, run in parallel.
    #[arg(long, default_value_t = 1)]
    reps: usize,
    /// The first seed.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Data points (default 1000; highdim 10000).
    #[arg(long)]
    n: Option<usize>,
    /// Dimension of Z (default 1; highdim 100).
    #[arg(long)]
    p: Option<usize>,
    /// Hidden width of both networks (default 64; highdim 256).
    #[arg(long)]
    hidden: Option<usize>,
    /// Minibatch size (default: the full batch; highdim 500).
    #[arg(long)]
    batch_size: Option<usize>,
    /// VAE pre-training epochs (full batch: updates) (default 5000; highdim 10000 with
    /// --paper-settings, else 500).
    #[arg(long, alias = "pretrain-iters")]
    pretrain_epochs: Option<usize>,
    /// Fine-tuning epochs per method (default 1000; highdim 1000 with --paper-settings, else 50).
    #[arg(long, alias = "finetune-iters")]
    finetune_epochs: Option<usize>,
    /// Adam learning rate of pre-training.
    #[arg(long, default_value_t = 1e-3)]
    lr: f64,
    /// Adam learning rate of fine-tuning.
    #[arg(long, default_value_t = 1e-3)]
    finetune_lr: f64,
    /// Adam learning rate of SAGD's fine-tuning (default: --finetune-lr; highdim with
    /// --paper-settings 1e-4, see the README).
    #[arg(long)]
    sagd_lr: Option<f64>,
    /// Draws of U for the evaluation.
    #[arg(long, default_value_t = 100_000)]
    m: usize,
    /// IWAE importance samples.
    #[arg(long, default_value_t = 50)]
    iwae_k: usize,
    /// SAGD friction γ.
    #[arg(long, default_value_t = 2.0)]
    sagd_gamma: f64,
    /// SAGD Langevin step δ.
    #[arg(long, default_value_t = 0.02)]
    sagd_delta: f64,
    /// SAGD Langevin steps per update K.
    #[arg(long, default_value_t = 10)]
    sagd_k: usize,
    /// SAGD burn-in steps.
    #[arg(long, default_value_t = 50)]
    sagd_burn_in: usize,
    /// SAGD integrator: baoab (default: less bias at the same cost), euler (the paper's), obabo, ubu.
    #[arg(long, default_value = "baoab")]
    sagd_scheme: String,
    /// SAGD initial momentum: normal or zero.
    #[arg(long, default_value = "normal")]
    sagd_rho0: String,
    /// SAGD: return the average of the iterates over this final fraction of the updates (default
    /// 0.5; 0: the last iterate, as the spec).
    #[arg(long, default_value_t = 0.5)]
    sagd_average: f64,
    /// HMC leapfrog steps per proposal.
    #[arg(long, default_value_t = 5)]
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
    /// Standard deviation of the noise in --data.
    #[arg(long, default_value_t = 1.0)]
    noise_sd: f64,
    /// Keep pre-trained networks in this folder and reuse them: a run with the same data, seed and
    /// pre-training settings reads them instead of pre-training again (same results).
    #[arg(long)]
    pretrained_cache: Option<PathBuf>,
    /// Every this many fine-tuning epochs, evaluate each method's current iterate (D, W,
    /// log-likelihood in 1-D) into result.json, trace.csv and trace.png/.svg (0: never).
    #[arg(long, default_value_t = 0)]
    trace_every: usize,
    /// Checkpoint every training phase into OUT/checkpoints every this many updates (and at the
    /// end of each phase); 0: off.
    #[arg(long, default_value_t = 0)]
    checkpoint_every: usize,
    /// Continue an interrupted run from OUT/checkpoints (same flags as the interrupted run).
    #[arg(long)]
    resume: bool,
    /// Stop every fine-tuning phase after this many updates, checkpointed (to try --resume).
    #[arg(long, hide = true)]
    interrupt_after: Option<usize>,
    /// Output folder (default out/debias-DIST, or out/deconvolution with --data).
    #[arg(long)]
    out: Option<PathBuf>,
    /// No progress bar.
    #[arg(long)]
    quiet: bool,
}

fn settings(a: &DebiasArgs) -> Result<E2Settings> {
    let methods: Vec<Method> = a
        .methods
        .split(',')
        .filter(|s| !s.trim().is_empty())
        .map(|s| s.parse().map_err(|e: String| anyhow!("--methods: {e}")))
        .collect::<Result<_>>()?;
    if methods.is_empty() {
        bail!("--methods: name at least one of vae, iwae, hmc, sagd");
    }
    let scheme: Scheme = a
        .sagd_scheme
        .parse()
        .map_err(|e| anyhow!("--sagd-scheme: {e}"))?;
    let rho0 = match a.sagd_rho0.as_str() {
        "normal" => Momentum::Normal,
        "zero" => Momentum::Zero,
        o => bail!("--sagd-rho0 `{o}`: use normal or zero"),
    };
    let hd = a.dist == "highdim";
    let n = a.n.unwrap_or(if hd { 10_000 } else { 1000 });
    let p = a.p.unwrap_or(if hd { 100 } else { 1 });
    let hidden = a.hidden.unwrap_or(if hd { 256 } else { 64 });
    let batch_size = a.batch_size.unwrap_or(if hd { 500 } else { n });
    let (pre, ft) = match (hd, a.paper_settings) {
        (true, true) => (10_000, 1000),
        (true, false) => (500, 50),
        (false, _) => (5000, 1000),
    };
    for (name, v) in [
        ("--n", n),
        ("--p", p),
        ("--hidden", hidden),
        ("--batch-size", batch_size),
        ("--m", a.m),
        ("--iwae-k", a.iwae_k),
        ("--sagd-k", a.sagd_k),
        ("--hmc-l", a.hmc_l),
        ("--reps", a.reps),
    ] {
        if v == 0 {
            bail!("{name} must be at least 1");
        }
    }
    for (name, v) in [
        ("--lr", a.lr),
        ("--finetune-lr", a.finetune_lr),
        ("--sagd-lr", a.sagd_lr.unwrap_or(1.0)),
        ("--noise-sd", a.noise_sd),
    ] {
        if !(v.is_finite() && v > 0.0) {
            bail!("{name} must be a finite number > 0");
        }
    }
    let method = MethodSettings {
        iwae_k: a.iwae_k,
        sagd_gamma: a.sagd_gamma,
        sagd_delta: a.sagd_delta,
        sagd_k: a.sagd_k,
        sagd_burn_in: a.sagd_burn_in,
        sagd_scheme: scheme,
        sagd_rho0: rho0,
        hmc_l: a.hmc_l,
        hmc_eps: a.hmc_eps.unwrap_or(a.sagd_delta),
        hmc_k: a.hmc_k.unwrap_or(a.sagd_k),
        sagd_average: a.sagd_average,
    };
    if !(0.0..=1.0).contains(&a.sagd_average) {
        bail!("--sagd-average must be a fraction in [0, 1]");
    }
    sagd::langevin::LangevinSettings {
        scheme,
        gamma: a.sagd_gamma,
    }
    .validate(a.sagd_delta)
    .map_err(|e| anyhow!("--sagd-*: {e}"))?;
    sagd::hmc::HmcSettings {
        step_size: method.hmc_eps,
        n_leapfrog: a.hmc_l,
    }
    .kernel::<f32>()
    .map_err(|e| anyhow!("--hmc-*: {e}"))?;
    Ok(E2Settings {
        n,
        p,
        hidden,
        batch_size,
        pretrain_epochs: a.pretrain_epochs.unwrap_or(pre),
        finetune_epochs: a.finetune_epochs.unwrap_or(ft),
        lr: a.lr,
        finetune_lr: a.finetune_lr,
        sagd_lr: a
            .sagd_lr
            .or((hd && a.paper_settings).then_some(HIGHDIM_PAPER_SAGD_LR)),
        m: a.m,
        methods,
        method,
    })
}

/// The spec's settings for `dist` (what `sagd debias --dist DIST` runs), for the benchmark.
pub fn spec_settings(dist: &str) -> Result<(E2Settings, Law)> {
    #[derive(clap::Parser)]
    struct Defaults {
        #[command(flatten)]
        a: DebiasArgs,
    }
    let a = <Defaults as clap::Parser>::try_parse_from(["debias", "--dist", dist])?.a;
    let law = Law::by_name(dist)
        .ok_or_else(|| anyhow!("--dist `{dist}`: use normal, exp, mixture or highdim"))?;
    Ok((settings(&a)?, law))
}

/// Mean and standard error (none for a single value).
fn mean_se(v: &[f64]) -> (f64, Option<f64>) {
    let (m, sd) = sagd::diagnostics::mean_sd(v);
    (m, (v.len() > 1).then(|| sd / (v.len() as f64).sqrt()))
}

fn fmt(ms: (f64, Option<f64>)) -> String {
    match ms.1 {
        Some(se) => format!("{:.3} ({:.4})", ms.0, se),
        None => format!("{:.3}", ms.0),
    }
}

/// The flags that say how replications run (not what they compute).
fn run_options(a: &DebiasArgs, out: &std::path::Path) -> Result<RunOptions> {
    let checkpoints = out.join("checkpoints");
    if a.resume && !checkpoints.is_dir() {
        bail!(
            "--resume: no checkpoints at {}: run with --checkpoint-every first",
            checkpoints.display()
        );
    }
    let on = a.checkpoint_every > 0 || a.resume || a.interrupt_after.is_some();
    Ok(RunOptions {
        keep_samples: false,
        pretrained_cache: a.pretrained_cache.clone(),
        trace_every: a.trace_every,
        checkpoint_dir: on.then_some(checkpoints),
        checkpoint_every: a.checkpoint_every,
        resume: a.resume,
        interrupt_after: a.interrupt_after,
    })
}

/// Writes `trace.csv` (one row per replication, method and traced epoch) and `trace.png/.svg`
/// (the first replication's curves: W against π where it is known, else the log-likelihood) when
/// there is a trace.
fn write_trace(staging: &mut Staging, reps: &[Replication]) -> Result<()> {
    let mut csv = String::from("seed,method,epoch,D,W,loglik,z_mean,z_sd,loss\n");
    let opt = |v: Option<f64>| v.map(|v| v.to_string()).unwrap_or_default();
    for r in reps {
        for (m, mr) in &r.methods {
            for t in &mr.trace {
                csv += &format!(
                    "{},{m},{},{},{},{},{},{},{}\n",
                    r.seed,
                    t.epoch,
                    t.ks,
                    t.w1,
                    opt(t.loglik),
                    t.z_mean,
                    t.z_sd,
                    t.loss
                );
            }
        }
    }
    let Some(first) = reps
        .first()
        .filter(|r| r.methods.values().any(|m| !m.trace.is_empty()))
    else {
        return Ok(());
    };
    std::fs::write(staging.path("trace.csv"), csv).context("writing trace.csv")?;
    let against_pi = first.pretrained.w1.is_finite();
    let (metric, pick): (&str, fn(&TracePoint) -> Option<f64>) = if against_pi {
        ("1-Wasserstein distance W to π", |t| Some(t.w1))
    } else {
        ("mean log-likelihood (scaled data)", |t| t.loglik)
    };
    let fig = TraceFigure {
        title: format!(
            "Fine-tuning, seed {}: the current iterate every traced epoch",
            first.seed
        ),
        metric,
        curves: first
            .methods
            .iter()
            .map(|(m, mr)| {
                let c = mr
                    .trace
                    .iter()
                    .filter_map(|t| Some((t.epoch as f64, pick(t)?)));
                (m.to_uppercase(), c.collect())
            })
            .collect(),
        reference: if against_pi {
            Some(first.pretrained.w1)
        } else {
            first.pretrained.loglik
        }
        .map(|v| ("pre-trained VAE".to_string(), v)),
    };
    let (png, svg) = (staging.path("trace.png"), staging.path("trace.svg"));
    save(&fig, &png, &svg, (760, 460))
}

/// Runs `sagd debias`.
pub fn run(a: DebiasArgs) -> Result<()> {
    let s = settings(&a)?;
    match &a.data {
        Some(path) => deconvolve(&a, &s, path.clone()),
        None => table(&a, &s),
    }
}

fn table(a: &DebiasArgs, s: &E2Settings) -> Result<()> {
    let t_all = Instant::now();
    let law = Law::by_name(&a.dist)
        .ok_or_else(|| anyhow!("--dist `{}`: use normal, exp, mixture or highdim", a.dist))?;
    let profile = if a.dist != "highdim" {
        "the spec's settings"
    } else if a.paper_settings {
        "the paper's settings (--paper-settings)"
    } else {
        "the small default for 2 cores (--paper-settings runs the paper's 10000 + 1000 epochs)"
    };
    let out = a
        .out
        .clone()
        .unwrap_or_else(|| PathBuf::from(format!("out/debias-{}", a.dist)));
    let mut staging = Staging::new(&out)?;
    staging.clear(&[
        "result.json",
        "table1.md",
        "figure2.png",
        "figure2.svg",
        "trace.csv",
        "trace.png",
        "trace.svg",
    ]);
    let per_epoch = s.n.div_ceil(s.batch_size.clamp(1, s.n)) as u64;
    let per_rep = (s.pretrain_epochs + s.finetune_epochs * s.methods.len()) as u64 * per_epoch;
    let bar = progress_bar(a.quiet, per_rep * a.reps as u64);
    bar.set_message(format!("{} × {} reps", a.dist, a.reps));
    let seeds: Vec<u64> = (a.seed..a.seed + a.reps as u64).collect();
    let base = run_options(a, &out)?;
    let reps: Vec<Replication> = seeds
        .par_iter()
        .map(|&seed| {
            let opts = RunOptions {
                keep_samples: seed == a.seed,
                ..base.clone()
            };
            replicate(s, &law, seed, &opts, &|_, _, _| bar.inc(1))
                .with_context(|| format!("replication {seed}"))
        })
        .collect::<Result<_>>()?;
    bar.finish_and_clear();

    // Table 1: mean and standard error over replications, beside the paper.
    let mut md = format!(
        "# Table 1 — {} (n = {}, p = {}, {} replication(s), seeds {}..{})\n\nSettings: {profile}. Mean (standard error) over replications (for one replication of several\ncoordinates: over coordinates); the paper's numbers below each row.\n\n| metric | method | pretrained VAE | {} |\n|---|---|---|{}\n",
        a.dist,
        s.n,
        s.p,
        a.reps,
        a.seed,
        a.seed + a.reps as u64 - 1,
        s.methods.iter().map(|m| m.name().to_uppercase()).collect::<Vec<_>>().join(" | "),
        s.methods.iter().map(|_| "---|").collect::<String>()
    );
    let mut summary = BTreeMap::new();
    for metric in ["D", "W"] {
        let pick = |e: &sagd_nn::experiment::Evaluation| if metric == "D" { e.ks } else { e.w1 };
        let coord_se =
            |e: &sagd_nn::experiment::Evaluation| if metric == "D" { e.ks_se } else { e.w1_se };
        // One replication of several coordinates: the standard error is over coordinates.
        let summarise = |evals: Vec<&sagd_nn::experiment::Evaluation>| {
            let (m, se) = mean_se(&evals.iter().map(|e| pick(e)).collect::<Vec<_>>());
            (
                m,
                se.or_else(|| (evals.len() == 1).then(|| coord_se(evals[0])).flatten()),
            )
        };
        let pre = summarise(reps.iter().map(|r| &r.pretrained).collect());
        let mut row = format!("| {metric} | this run | {} |", fmt(pre));
        summary.insert(
            format!("pretrained_{metric}"),
            json!({"mean": pre.0, "se": pre.1}),
        );
        for m in &s.methods {
            let v = summarise(reps.iter().map(|r| &r.methods[m.name()].eval).collect());
            summary.insert(
                format!("{}_{metric}", m.name()),
                json!({"mean": v.0, "se": v.1}),
            );
            row += &format!(" {} |", fmt(v));
        }
        md += &(row + "\n");
        if let Some((_, _, p)) = PAPER
            .iter()
            .find(|(c, mt, _)| *c == a.dist && *mt == metric)
        {
            let mut row = format!("| {metric} | paper | — |");
            for m in &s.methods {
                let i = Method::ALL.iter().position(|x| x == m).unwrap_or(0);
                row += &format!(" {} |", fmt((p[i].0, Some(p[i].1))));
            }
            md += &(row + "\n");
        }
    }
    let times: BTreeMap<String, f64> = std::iter::once((
        "pretrain".to_string(),
        mean_se(&reps.iter().map(|r| r.pretrain_time_s).collect::<Vec<_>>()).0,
    ))
    .chain(s.methods.iter().map(|m| {
        (
            m.name().to_string(),
            mean_se(
                &reps
                    .iter()
                    .map(|r| r.methods[m.name()].time_s)
                    .collect::<Vec<_>>(),
            )
            .0,
        )
    }))
    .collect();
    md += &format!(
        "\nMean wall seconds per replication and phase (replications run in parallel): {}\n",
        times
            .iter()
            .map(|(k, v)| format!("{k} {v:.2}"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    std::fs::write(staging.path("table1.md"), &md).context("writing table1.md")?;

    // Figure 2 from the first replication (first coordinate).
    let first = &reps[0];
    let col = |v: &[f64]| -> Vec<f64> { v.iter().step_by(s.p).copied().collect() };
    let first_x = col(&first.x);
    let first_samples: BTreeMap<String, Vec<f64>> = first
        .samples
        .iter()
        .map(|(k, v)| (k.clone(), col(v)))
        .collect();
    let mut panels = vec![DensityPanel {
        title: "pretrained VAE".into(),
        sample: &first_samples["pretrained"],
        d: first.pretrained.ks,
        w: first.pretrained.w1,
    }];
    for m in &s.methods {
        let r = &first.methods[m.name()];
        panels.push(DensityPanel {
            title: m.name().to_uppercase(),
            sample: &first_samples[m.name()],
            d: r.eval.ks,
            w: r.eval.w1,
        });
    }
    let caption = format!(
        "{} (seed {}{}): data density (dashed), true π (solid), estimated π (histogram)",
        a.dist,
        first.seed,
        if s.p > 1 { ", first coordinate" } else { "" }
    );
    let grid = DensityGrid {
        law: Some(&law),
        x: &first_x,
        panels,
        caption,
    };
    let (p, sv) = (staging.path("figure2.png"), staging.path("figure2.svg"));
    save(&grid, &p, &sv, (300 * grid.panels.len() as u32 + 40, 340))?;

    let result = json!({
        "experiment": "E2 debiased VAE",
        "sagd_version": env!("CARGO_PKG_VERSION"),
        "flags": a,
        "settings": s,
        "settings_profile": profile,
        "law": law,
        "seeds": seeds,
        "summary": summary,
        "mean_time_s": times,
        "replications": reps,
        "total_time_s": t_all.elapsed().as_secs_f64(),
    });
    write_trace(&mut staging, &reps)?;
    std::fs::write(
        staging.path("result.json"),
        serde_json::to_string_pretty(&result)?,
    )
    .context("writing result.json")?;
    let files = staging.commit("result.json")?;
    println!("settings: {profile}");
    print!("{md}");
    println!("wrote {}: {}", out.display(), files.join(", "));
    Ok(())
}

fn deconvolve(a: &DebiasArgs, s: &E2Settings, path: PathBuf) -> Result<()> {
    let t_all = Instant::now();
    let column: Option<Column> = a
        .column
        .as_deref()
        .map(|c| c.parse().map_err(|e| anyhow!("--column: {e}")))
        .transpose()?;
    if s.p != 1 {
        bail!("--data: deconvolution reads one column (p = 1); drop --p");
    }
    let x = read_column(&path, column.as_ref(), Domain::Finite)?;
    if x.len() < 2 {
        bail!(
            "{}: deconvolution needs at least 2 observations",
            path.display()
        );
    }
    let out = a
        .out
        .clone()
        .unwrap_or_else(|| PathBuf::from("out/deconvolution"));
    let mut staging = Staging::new(&out)?;
    staging.clear(&[
        "result.json",
        "latent_samples.csv",
        "density.png",
        "density.svg",
        "trace.csv",
        "trace.png",
        "trace.svg",
    ]);
    // X = Z + σ e: fit the unit-noise model to X/σ, then scale the latent draws back.
    let sd = a.noise_sd;
    let scaled: Vec<f64> = x.iter().map(|v| v / sd).collect();
    let bs = a.batch_size.unwrap_or(x.len()).min(x.len());
    let s = E2Settings {
        n: x.len(),
        batch_size: bs,
        methods: s.methods.clone(),
        ..s.clone()
    };
    let per_epoch = s.n.div_ceil(s.batch_size.max(1)) as u64;
    let bar = progress_bar(
        a.quiet,
        (s.pretrain_epochs + s.finetune_epochs * s.methods.len()) as u64 * per_epoch,
    );
    bar.set_message("deconvolution");
    let opts = RunOptions {
        keep_samples: true,
        ..run_options(a, &out)?
    };
    let rep = fit(&s, None, scaled, a.seed, &opts, &|_, _, _| bar.inc(1))?;
    bar.finish_and_clear();
    let probs = [0.01, 0.05, 0.1, 0.25, 0.5, 0.75, 0.9, 0.95, 0.99];
    let mut quantiles = BTreeMap::new();
    let mut scaled_samples: BTreeMap<String, Vec<f64>> = BTreeMap::new();
    for (k, v) in &rep.samples {
        let mut z: Vec<f64> = v.iter().map(|t| t * sd).collect();
        z.sort_by(f64::total_cmp);
        let q: Vec<f64> = probs
            .iter()
            .map(|p| z[((p * z.len() as f64) as usize).min(z.len() - 1)])
            .collect();
        quantiles.insert(k.clone(), json!({"p": probs, "q": q}));
        scaled_samples.insert(k.clone(), z);
    }
    // Samples: one column per fitted model, 10000 rows.
    let names: Vec<&String> = scaled_samples.keys().collect();
    let mut csv = names
        .iter()
        .map(|n| n.as_str())
        .collect::<Vec<_>>()
        .join(",")
        + "\n";
    let columns: Vec<&Vec<f64>> = names.iter().map(|n| &rep.samples[n.as_str()]).collect();
    for i in 0..10_000.min(s.m) {
        let row: Vec<String> = columns.iter().map(|c| (c[i] * sd).to_string()).collect();
        csv += &(row.join(",") + "\n");
    }
    std::fs::write(staging.path("latent_samples.csv"), csv)
        .context("writing latent_samples.csv")?;
    let mut panels = vec![DensityPanel {
        title: "pretrained VAE".into(),
        sample: &scaled_samples["pretrained"],
        d: f64::NAN,
        w: f64::NAN,
    }];
    for m in &s.methods {
        panels.push(DensityPanel {
            title: m.name().to_uppercase(),
            sample: &scaled_samples[m.name()],
            d: f64::NAN,
            w: f64::NAN,
        });
    }
    let grid = DensityGrid {
        law: None,
        x: &x,
        panels,
        caption: format!(
            "{}: data (dashed) and estimated latent distribution (histogram)",
            path.display()
        ),
    };
    let (p, sv) = (staging.path("density.png"), staging.path("density.svg"));
    save(&grid, &p, &sv, (300 * grid.panels.len() as u32 + 40, 340))?;
    let note = "no true latent distribution: D and W are not defined; compare the fitted models by their log-likelihood";
    let result = json!({
        "experiment": "deconvolution with the debiased VAE",
        "sagd_version": env!("CARGO_PKG_VERSION"),
        "flags": a,
        "settings": s,
        "data": {"file": path.display().to_string(), "column": a.column, "n": x.len(), "noise_sd": sd},
        "note": note,
        "quantiles": quantiles,
        "loglik_per_point_scaled_data": rep.methods.iter().map(|(k, v)| (k.clone(), v.eval.loglik)).chain(std::iter::once(("pretrained".to_string(), rep.pretrained.loglik))).collect::<BTreeMap<_, _>>(),
        "time_s": {"pretrain": rep.pretrain_time_s, "methods": rep.methods.iter().map(|(k, v)| (k.clone(), v.time_s)).collect::<BTreeMap<_, _>>(), "total": t_all.elapsed().as_secs_f64()},
    });
    write_trace(&mut staging, std::slice::from_ref(&rep))?;
    std::fs::write(
        staging.path("result.json"),
        serde_json::to_string_pretty(&result)?,
    )
    .context("writing result.json")?;
    let files = staging.commit("result.json")?;
    println!(
        "deconvolution of {} ({} observations, noise sd {sd}): {note}",
        path.display(),
        x.len()
    );
    for (k, q) in &quantiles {
        println!(
            "{k:14} quantiles 5/50/95%: {:.3} {:.3} {:.3}",
            q["q"][1], q["q"][4], q["q"][7]
        );
    }
    println!("wrote {}: {}", out.display(), files.join(", "));
    Ok(())
}
