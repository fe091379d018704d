//! `sagd mnist`: experiment E3 — a convolutional VAE pre-trained on MNIST, its generator refined by
//! SAGD, a control trained further by its own ELBO, the held-out log-likelihood of all three, and
//! Figure 3. This file maps flags onto the library's settings and writes the results.

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context, Result};
use clap::Args;
use sagd_apps::mnist::experiment::{figure_digits, run as run_e3, E3Options, E3Result, E3Settings};
use serde::Serialize;

use crate::output::{Checkpointing, Staging};
use crate::plot::{self, CurvesFigure, DigitsFigure};
use crate::progress::progress_bar;
use indicatif::ProgressBar;

/// Core-seconds of E3's work on the 2-core machine of docs/results/speed.md (Intel Xeon,
/// 2026-11-27): a VAE minibatch of 200 images 0.19 (0.095 s on 2 cores), a SAGD minibatch of 200
/// images × 20 chains × (5 + 1) passes 5.3 (2.65 s), an importance draw of the evaluation 1.5e-4.
const VAE_UPDATE: f64 = 0.19;
const SAGD_UPDATE: f64 = 5.3;
const EVAL_DRAW: f64 = 1.5e-4;

/// E3's phases in run order — pre-training, SAGD, the control — each with its updates and the
/// core-seconds of one update, then the evaluation's core-seconds: what the plan's estimate sums
/// and what the progress bar weighs each phase's updates by.
pub fn phase_costs(s: &E3Settings) -> (Vec<(&'static str, usize, f64)>, f64) {
    let per = s.batch_size as f64 / 200.0;
    let passes = (s.chains.per_image * (s.chains.steps + 1)) as f64 / 120.0;
    let per_epoch = s.train_n.div_ceil(s.batch_size.min(s.train_n).max(1));
    (
        vec![
            ("pretrain", s.vae_epochs * per_epoch, VAE_UPDATE * per),
            ("sagd", s.sagd_updates, SAGD_UPDATE * per * passes),
            ("control", s.sagd_updates, VAE_UPDATE * per),
        ],
        3.0 * (s.eval_n * s.eval_k) as f64 * EVAL_DRAW,
    )
}

fn milli_core_s(c: f64) -> u64 {
    (1000.0 * c).round() as u64
}

/// Where E3's bar stands (milli-core-seconds) after `done` updates of `phase`: the phases before
/// it whole, and this one's updates weighed by their cost; `None` for a phase not in `phases`.
fn bar_position(phases: &[(&str, usize, f64)], phase: &str, done: usize) -> Option<u64> {
    let mut before = 0.0;
    for (name, n, c) in phases {
        if *name == phase {
            return Some(milli_core_s(before + done.min(*n) as f64 * c));
        }
        before += *n as f64 * c;
    }
    None
}

/// The core-seconds of E3 at `s` ([`phase_costs`] summed).
pub fn core_seconds(s: &E3Settings) -> f64 {
    let (phases, eval) = phase_costs(s);
    phases.iter().map(|(_, n, c)| *n as f64 * c).sum::<f64>() + eval
}

fn spec() -> E3Settings {
    E3Settings::default()
}

/// Flags of `sagd mnist`. The defaults fit a 2-core machine in about half an hour; the paper's
/// epochs are `--paper-settings`.
#[derive(Args, Debug, Clone, Serialize)]
pub struct MnistArgs {
    /// The paper's 500 VAE epochs and 100 SAGD epochs (a GPU's job; hours on a CPU).
    #[arg(long)]
    paper_settings: bool,
    /// VAE pre-training epochs (default 20; paper 500).
    #[arg(long)]
    vae_epochs: Option<usize>,
    /// SAGD generator updates (default 240, 0.8 epoch of 300 minibatches; paper 30000). The
    /// control takes as many.
    #[arg(long)]
    sagd_updates: Option<usize>,
    /// Training images used (the first ones).
    #[arg(long, default_value_t = spec().train_n)]
    train_n: usize,
    /// Minibatch size.
    #[arg(long, default_value_t = spec().batch_size)]
    batch_size: usize,
    /// Latent dimension.
    #[arg(long, default_value_t = spec().latent)]
    latent: usize,
    /// Adam learning rate of the VAE and the control.
    #[arg(long, default_value_t = spec().vae_lr)]
    vae_lr: f64,
    /// Adam learning rate of SAGD.
    #[arg(long, default_value_t = spec().sagd_lr)]
    sagd_lr: f64,
    /// SAGD chains per image.
    #[arg(long, visible_alias = "sagd-chains-per-point", default_value_t = spec().chains.per_image)]
    chains: usize,
    /// SAGD Langevin steps per chain (the paper's burn-in; the gradient is at the last state).
    #[arg(long, visible_alias = "sagd-k", default_value_t = spec().chains.steps)]
    steps: usize,
    /// SAGD's integrator: euler (the paper's), obabo, baoab (exact in position on Gaussian
    /// posteriors) or ubu, on either device. Each takes one gradient per step.
    #[arg(long, visible_alias = "sagd-scheme", default_value_t = spec().chains.scheme)]
    scheme: sagd::langevin::Scheme,
    /// SAGD friction γ.
    #[arg(long, visible_alias = "sagd-gamma", default_value_t = spec().chains.gamma)]
    gamma: f64,
    /// SAGD Langevin step δ.
    #[arg(long, visible_alias = "sagd-delta", default_value_t = spec().chains.delta)]
    delta: f64,
    /// δ_t = δ (1 + t)^−this over the refinement's updates (Theorems 3-4: ½); 0: δ fixed.
    #[arg(long, visible_alias = "sagd-delta-decay", default_value_t = 0.0)]
    delta_decay: f64,
    /// K_t ∝ (1 + t)^this (Theorem 3: 1), scaled so that the refinement takes as many Langevin
    /// steps in all as K fixed; 0: K fixed.
    #[arg(long, visible_alias = "sagd-k-growth", default_value_t = 0.0)]
    k_growth: f64,
    /// SAGD chains that persist between an image's visits (one per epoch): each visit continues
    /// the image's chains where the last left them, and every R-th visit starts them afresh from
    /// the encoder (with --chains 2, E2's refresh2 preset). Each visit then takes one more
    /// gradient per chain. Default: fresh chains at every visit, as the paper's. On a GPU, in a
    /// run of one process.
    #[arg(long, visible_alias = "sagd-refresh-every", value_name = "R")]
    refresh_every: Option<usize>,
    /// Test images evaluated (the first ones, binarised once).
    #[arg(long, default_value_t = spec().eval_n)]
    eval_n: usize,
    /// Importance-sampling draws per test image.
    #[arg(long, default_value_t = spec().eval_k)]
    eval_k: usize,
    /// Seed.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// A folder with the four MNIST IDX files (gzipped or not; Fashion-MNIST works too). Default:
    /// the files that ship with sagd.
    #[arg(long)]
    data: Option<PathBuf>,
    /// Keep the pre-trained VAE in this folder and reuse it: a second run with the same
    /// pre-training settings starts at the refinement (same results). Default: OUT/../cache.
    #[arg(long)]
    pretrained_cache: Option<PathBuf>,
    #[command(flatten)]
    #[serde(flatten)]
    checkpoints: Checkpointing,
    /// Print the settings these flags resolve to (JSON) and exit.
    #[arg(long)]
    print_settings: bool,
    /// Output folder.
    #[arg(long, default_value = "out/mnist")]
    out: PathBuf,
    /// No progress bar.
    #[arg(long)]
    quiet: bool,
    /// Where the networks train: cpu, or cuda (cuda:N for GPU N) for an NVIDIA GPU with CUDA 13's
    /// driver, NVRTC and cuBLAS on the loader's path. The held-out evaluation stays on the CPU.
    /// Under mpirun, the processes on a machine take GPU N, N + 1, … in turn, each running its
    /// share of every minibatch's images (results then agree across numbers of processes to
    /// rounding, not to the bit as on the CPU). SAGD_GPU_TF32=1 in the environment lets the
    /// GPU's products use TF32 tensor cores.
    #[arg(long, default_value_t = sagd_nn::Device::Cpu)]
    device: sagd_nn::Device,
}

/// The library's settings for these flags.
fn settings(a: &MnistArgs) -> E3Settings {
    let base = if a.paper_settings {
        E3Settings::paper()
    } else {
        E3Settings::default()
    };
    E3Settings {
        latent: a.latent,
        train_n: a.train_n,
        batch_size: a.batch_size,
        vae_epochs: a.vae_epochs.unwrap_or(base.vae_epochs),
        vae_lr: a.vae_lr,
        sagd_updates: a.sagd_updates.unwrap_or(base.sagd_updates),
        sagd_lr: a.sagd_lr,
        chains: sagd_apps::mnist::model::Chains {
            scheme: a.scheme,
            per_image: a.chains,
            steps: a.steps,
            gamma: a.gamma,
            delta: a.delta,
            schedule: sagd_apps::debias::schedule(a.delta_decay, a.k_growth),
            refresh_every: a.refresh_every,
        },
        eval_n: a.eval_n,
        eval_k: a.eval_k,
        seed: a.seed,
    }
}

/// What this run did against the paper's settings, in words.
fn against_paper(s: &E3Settings) -> String {
    let p = E3Settings::paper();
    let per_epoch = s.train_n.div_ceil(s.batch_size.max(1)).max(1);
    if s.vae_epochs == p.vae_epochs && s.sagd_updates == p.sagd_updates && s.train_n == p.train_n {
        return "the paper's settings (500 VAE epochs, 100 SAGD epochs)".into();
    }
    format!(
        "{} VAE epochs (paper 500) and {} SAGD updates = {:.2} epochs (paper 100) of {} images in minibatches of {}; --paper-settings runs the paper's",
        s.vae_epochs,
        s.sagd_updates,
        s.sagd_updates as f64 / per_epoch as f64,
        s.train_n,
        s.batch_size
    )
}

/// Runs `sagd mnist`.
pub fn run(a: MnistArgs) -> Result<()> {
    let s = settings(&a);
    if a.print_settings {
        say!("{}", serde_json::to_string_pretty(&s)?);
        return Ok(());
    }
    let dir = a.data.clone().unwrap_or_else(sagd_apps::mnist::shipped_dir);
    let data = sagd_apps::mnist::load(&dir).with_context(|| {
        format!(
            "--data {}: reading the MNIST files (train-images-idx3-ubyte[.gz] and its three companions)",
            dir.display()
        )
    })?;
    s.validate(data.train.len(), data.test.len())?;
    s.chains.runs_on(a.device)?;
    // Before any work: a missing GPU or library is a flag's error.
    a.device
        .ready()
        .with_context(|| format!("--device {}", a.device))?;
    let c = &a.checkpoints;
    let checkpoints = c.folder(&a.out, "mnist")?;
    let cache = a
        .pretrained_cache
        .clone()
        .unwrap_or_else(|| a.out.parent().unwrap_or(Path::new(".")).join("cache"));
    crate::output::writable_folder(&cache, "--pretrained-cache")?;
    let opts = E3Options {
        checkpoint_dir: checkpoints,
        checkpoint_every: c.checkpoint_every.max(1),
        resume: c.resume,
        pretrained_cache: Some(cache),
        interrupt_after: c.interrupt_after,
        device: a.device,
    };
    say!("E3 (MNIST): {}", against_paper(&s));
    let bar = progress_bar(a.quiet, 0);
    let out = MnistOutput {
        out: &a.out,
        bar: &bar,
        flags: serde_json::to_value(&a)?,
        command: "mnist",
    };
    let (r, files) = write(&s, &data, &opts, out)?;
    print_summary(&r);
    say!("wrote {}: {}", a.out.display(), files.join(", "));
    Ok(())
}

/// Where and how E3 writes its outputs.
pub struct MnistOutput<'a> {
    /// The output folder.
    pub out: &'a Path,
    /// Progress over each phase's updates.
    pub bar: &'a ProgressBar,
    /// The command line, recorded in `result.json`.
    pub flags: serde_json::Value,
    /// The command whose result the folder holds (`mnist`, `reproduce`).
    pub command: &'static str,
}

/// Runs E3 on `data` and writes Figure 3, the learning curves and `result.json` into `o.out`
/// (whole or not at all); returns the result and the files written. `sagd mnist` and `sagd
/// reproduce` both write through it.
pub fn write(
    s: &E3Settings,
    data: &sagd_apps::mnist::Mnist,
    opts: &E3Options,
    o: MnistOutput<'_>,
) -> Result<(E3Result, Vec<String>)> {
    let mut staging = Staging::new(o.out, o.command)?;
    let names = [
        "result.json",
        "figure3.png",
        "figure3.svg",
        "curves.png",
        "curves.svg",
    ];
    staging.owns(&names);
    let bar = o.bar;
    // One bar over the whole experiment, in milli-core-seconds: each phase's updates weighed by
    // their cost, so that the bar never runs back when a phase ends and the next begins.
    let (phases, _) = phase_costs(s);
    let total = milli_core_s(core_seconds(s)).max(1);
    let progress = |phase: &str, done: usize, _: usize| {
        if let Some(at) = bar_position(&phases, phase, done) {
            bar.set_length(total);
            bar.set_position(at);
            bar.set_message(phase.to_string());
        }
    };
    let t0 = Instant::now();
    let r = run_e3(s, data, opts, &progress)?;
    bar.finish_and_clear();
    let model = sagd_apps::mnist::e3(s.latent);
    let top = figure_digits(&model, &r.pretrained.dec, s.seed);
    let bottom = figure_digits(&model, &r.sagd.dec, s.seed);
    plot::save(
        &DigitsFigure {
            panels: &[("VAE", &top), ("SAGD-refined", &bottom)],
        },
        &staging.path("figure3.png"),
        &staging.path("figure3.svg"),
        (640, 1320),
    )?;
    let curves = CurvesFigure { curves: &r.curves };
    plot::save(
        &curves,
        &staging.path("curves.png"),
        &staging.path("curves.svg"),
        curves.size(),
    )?;
    let result = result_json(o.flags, s, &r, opts, t0.elapsed().as_secs_f64());
    std::fs::write(
        staging.path("result.json"),
        serde_json::to_string_pretty(&result)?,
    )
    .context("writing result.json")?;
    let files = staging.commit("result.json")?;
    Ok((r, files))
}

fn result_json(
    flags: serde_json::Value,
    s: &E3Settings,
    r: &E3Result,
    opts: &E3Options,
    total_s: f64,
) -> serde_json::Value {
    let evaluations: Vec<_> = r
        .evaluations
        .iter()
        .map(|e| {
            serde_json::json!({
                "model": e.model, "log_px": e.log_px, "log_px_se": e.log_px_se, "elbo": e.elbo,
                "ess": e.ess, "per_image_log_px": e.per_image.iter().map(|h| h.log_px).collect::<Vec<_>>(),
            })
        })
        .collect();
    let mut v = serde_json::json!({
        "experiment": "E3 MNIST: VAE, SAGD refinement of the generator, control",
        "sagd_version": env!("CARGO_PKG_VERSION"),
        "flags": flags,
        "device": opts.device.to_string(),
        "gpu_products": match opts.device {
            sagd_nn::Device::Cpu => serde_json::Value::Null,
            _ if sagd_nn::cuda::tf32_enabled() => "tf32".into(),
            _ => "f32".into(),
        },
        "settings": s,
        "against_paper": against_paper(s),
        "likelihood": "Bernoulli on dynamically binarised pixels (a fresh binarisation per minibatch; the test images binarised once)",
        "evaluation": format!("importance sampling from each model's encoder, k = {} draws per image, the same draws per image for every model (paired)", s.eval_k),
        "evaluations": evaluations,
        "differences": r.differences,
        "curves": r.curves,
        "pretrained_cached": r.pretrained_cached,
        "timing_s": r.timing_s,
        "total_s": total_s,
    });
    if !r.exchanged.is_empty() {
        // A run split over processes: what the first process exchanged in each phase.
        v["processes"] = sagd::share::size().into();
        v["exchanged"] = serde_json::json!(r.exchanged);
    }
    v
}

/// The held-out table and the paired differences, on stdout.
pub fn print_summary(r: &E3Result) {
    say!(
        "held-out log p(x), first {} test images:",
        r.settings.eval_n
    );
    say!("  model          log p(x)   (se)      ELBO      ESS");
    for e in &r.evaluations {
        say!(
            "  {:<12} {:>9.2} ({:>5.2}) {:>9.2} {:>8.1}",
            e.model,
            e.log_px,
            e.log_px_se,
            e.elbo,
            e.ess
        );
    }
    for d in &r.differences {
        say!(
            "  {:<24} {:>+8.3} nats (paired se {:.3}, {:+.1} se)",
            d.what,
            d.mean,
            d.se,
            d.mean / d.se.max(1e-300)
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bar_never_runs_back_from_one_phase_to_the_next() {
        // Before, each phase set the bar to its own length: 100% at the end of pre-training,
        // then 0% again. Now the bar covers the experiment, phases weighed by their cost.
        let s = E3Settings {
            vae_epochs: 2,
            sagd_updates: 5,
            ..spec()
        };
        let (phases, eval) = phase_costs(&s);
        let mut last = 0;
        for (name, n, _) in &phases {
            for done in 0..=*n {
                let at = bar_position(&phases, name, done).unwrap();
                assert!(at >= last, "{name} {done}: {at} after {last}");
                last = at;
            }
        }
        let total = milli_core_s(core_seconds(&s));
        assert!((last + milli_core_s(eval)).abs_diff(total) <= 1);
        // SAGD's updates weigh 5.3 / 0.19 = 28 times a VAE update each, at the spec's settings.
        assert!((phases[1].2 / phases[0].2 - 5.3 / 0.19).abs() < 1e-9);
        assert_eq!(bar_position(&phases, "evaluation", 0), None);
    }
}
