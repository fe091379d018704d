//! `sagd em`: automated EM on the Gamma-sigmoid model (the paper's E1, Figure 1), on simulated data
//! or on a column of positive numbers from a CSV file. Flags map onto the library's
//! `E1Settings` (defaults shown by `--help` are its `Default`); `render` writes the result.

mod render;

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{bail, Context, Result};
use clap::Args;
use indicatif::ProgressBar;
use sagd::em::{EmEvent, StopRule};
use sagd::langevin::{LangevinSettings, Momentum, Scheme};
use sagd::run::Control;
use sagd_apps::e1::{self, E1Data, E1Options, E1Result, E1Settings};
use serde::Serialize;

use crate::input::{read_column, Column, Domain};
use crate::output::Staging;
use crate::plot::{save, LoglikFigure, PathsFigure};
use crate::progress::progress_bar;

fn spec() -> E1Settings {
    E1Settings::default()
}

fn simulated() -> (usize, [f64; 2]) {
    match spec().data {
        E1Data::Simulated { n, true_theta } => (n, true_theta),
        E1Data::Observed { .. } => (0, [0.0; 2]),
    }
}

/// Flags of `sagd em`. Defaults are experiment E1 of the paper.
#[derive(Args, Debug, Clone, Serialize)]
#[command(allow_negative_numbers = true)]
pub struct EmArgs {
    /// Fit E1's Gamma-sigmoid model (the only model `sagd em` fits) to this CSV file's column of
    /// positive numbers instead of simulated data. Mixed models: `sagd glmm`; your own model: the
    /// library (docs/your-own-model.md) or Python's `sagd.fit`.
    #[arg(long)]
    data: Option<PathBuf>,
    /// The column to read: a header name or a 1-based number (default: the first).
    #[arg(long)]
    column: Option<String>,
    /// The fit alone: automated EM, its polish and standard errors, and the MLE by quadrature
    /// that checks them, without the paper's comparisons (exact gradient ascent, the
    /// log-likelihood along both paths, the surface) or Figure 1, which shows them.
    #[arg(long)]
    fit_only: bool,
    /// Simulated data: number of observations.
    #[arg(long, default_value_t = simulated().0)]
    n: usize,
    /// Simulated data: true a.
    #[arg(long, default_value_t = simulated().1[0])]
    a_true: f64,
    /// Simulated data: true b.
    #[arg(long, default_value_t = simulated().1[1])]
    b_true: f64,
    /// Starting a.
    #[arg(long, default_value_t = spec().theta0[0])]
    a0: f64,
    /// Starting b.
    #[arg(long, default_value_t = spec().theta0[1])]
    b0: f64,
    /// M-steps to run (default 3, the paper's figure; with --data the default is --until-converged).
    #[arg(long)]
    msteps: Option<usize>,
    /// Run M-steps until the Monte Carlo-aware stopping rule is met (at most --max-msteps), then
    /// polish the estimate (as --polish).
    #[arg(long)]
    until_converged: bool,
    /// After EM, Newton steps on the log-likelihood with the score and Louis' observed
    /// information from chains at the estimate, until the estimated gap to the maximum is below
    /// 0.01 beyond Monte Carlo noise: the check that EM's own stopping rule cannot make when EM is
    /// slow. The standard errors then come from there.
    #[arg(long)]
    polish: bool,
    /// The most M-steps with --until-converged.
    #[arg(long, default_value_t = spec().max_msteps)]
    max_msteps: usize,
    /// Stopping rule: M-steps in the window.
    #[arg(long, default_value_t = spec().stop_rule.window)]
    window: usize,
    /// Stopping rule: threshold in noise standard deviations.
    #[arg(long, default_value_t = spec().stop_rule.threshold)]
    threshold: f64,
    /// T: gradient updates per M-step.
    #[arg(long = "T", default_value_t = spec().updates_per_mstep)]
    t: usize,
    /// Learning rate α (constant).
    #[arg(long, default_value_t = spec().alpha)]
    alpha: f64,
    /// δ_t = delta0 / √t.
    #[arg(long, default_value_t = spec().delta0)]
    delta0: f64,
    /// K_t = t + k0.
    #[arg(long, default_value_t = spec().k0)]
    k0: usize,
    /// Burn-in Langevin steps at the start of every M-step.
    #[arg(long, default_value_t = spec().burn_in)]
    burn_in: usize,
    /// Friction γ.
    #[arg(long, default_value_t = spec().langevin.gamma)]
    gamma: f64,
    /// Langevin scheme: euler (the paper's), obabo, baoab, ubu.
    #[arg(long, default_value_t = spec().langevin.scheme)]
    scheme: Scheme,
    /// Initial momentum: zero or normal.
    #[arg(long, default_value_t = spec().initial_momentum)]
    rho0: Momentum,
    /// Chains per data point.
    #[arg(long, default_value_t = spec().chains_per_point)]
    chains_per_point: usize,
    /// Seed of the simulated data and of the chains. (Seed 0's data have their MLE at b = 0, where
    /// EM converges sublinearly; seed 1's MLE is interior.)
    #[arg(long, default_value_t = spec().seed)]
    seed: u64,
    /// Gauss-Hermite nodes per data point for exact GD, ℓ and the MLE.
    #[arg(long, default_value_t = spec().quad_nodes)]
    quad_nodes: usize,
    /// Grid points per axis of the log-likelihood surface of Figure 1a.
    #[arg(long, default_value_t = spec().surface)]
    surface: usize,
    /// Output folder.
    #[arg(long, default_value = "out/em")]
    out: PathBuf,
    /// Checkpoint into OUT/em.ckpt every this many updates (and after every M-step); 0: off.
    #[arg(long, default_value_t = 0)]
    checkpoint_every: usize,
    /// Resume from OUT/em.ckpt (same flags as the interrupted run).
    #[arg(long)]
    resume: bool,
    /// No progress bar.
    #[arg(long)]
    quiet: bool,
}

/// The library's settings for these flags, and the column of the user's file they read (as
/// [`crate::input::ColumnData::shown`]).
fn settings(a: &EmArgs) -> Result<(E1Settings, Option<String>)> {
    let (data, shown) = match &a.data {
        Some(path) => {
            let column: Option<Column> = a
                .column
                .as_deref()
                .map(|c| c.parse().map_err(|e| anyhow::anyhow!("--column: {e}")))
                .transpose()?;
            let d = read_column(path, column.as_ref(), Domain::Positive)?;
            (E1Data::Observed { x: d.values }, Some(d.shown))
        }
        None => (
            E1Data::Simulated {
                n: a.n,
                true_theta: [a.a_true, a.b_true],
            },
            None,
        ),
    };
    let s = E1Settings {
        data,
        theta0: [a.a0, a.b0],
        msteps: a.msteps.unwrap_or(spec().msteps),
        until_converged: a.until_converged || (a.data.is_some() && a.msteps.is_none()),
        polish: a.polish || a.until_converged || (a.data.is_some() && a.msteps.is_none()),
        max_msteps: a.max_msteps,
        stop_rule: StopRule {
            window: a.window,
            threshold: a.threshold,
        },
        updates_per_mstep: a.t,
        alpha: a.alpha,
        delta0: a.delta0,
        k0: a.k0,
        burn_in: a.burn_in,
        langevin: LangevinSettings {
            scheme: a.scheme,
            gamma: a.gamma,
        },
        initial_momentum: a.rho0,
        chains_per_point: a.chains_per_point,
        seed: a.seed,
        quad_nodes: a.quad_nodes,
        surface: a.surface,
    };
    Ok((s, shown))
}

/// Where E1's output goes and how it runs: everything beside the settings.
pub struct E1Output<'a> {
    /// The output folder.
    pub out: &'a Path,
    /// Progress over the updates of automated EM.
    pub bar: &'a ProgressBar,
    /// The command line, recorded in `result.json`.
    pub flags: serde_json::Value,
    /// The command whose result the folder holds (`em`, `reproduce`).
    pub command: &'static str,
    /// The data file and the column read from it, for user data.
    pub file: Option<(&'a Path, String)>,
    /// The paper's comparisons (exact GD, ℓ along the paths, the surface) and Figure 1; else the
    /// fit alone ([`e1::fit`]).
    pub compare: bool,
    /// Checkpoints.
    pub opts: E1Options,
}

/// Runs E1 and writes its figures and `result.json` into `o.out` (whole or not at all); returns
/// the result and the files written.
pub fn write(s: &E1Settings, o: E1Output) -> Result<(E1Result, Vec<String>)> {
    let t_all = Instant::now();
    s.validate()?;
    let mut staging = Staging::new(o.out, o.command)?;
    staging.owns(&[
        "result.json",
        "figure1a.png",
        "figure1a.svg",
        "figure1b.png",
        "figure1b.svg",
    ]);
    let em = s.em();
    o.bar
        .set_length((em.max_msteps * em.updates_per_mstep) as u64);
    let bar = o.bar;
    let run = if o.compare { e1::run } else { e1::fit };
    let r = run(s, &o.opts, &mut |ev| {
        match ev {
            EmEvent::Update { mstep, theta, .. } => {
                bar.inc(1);
                bar.set_message(format!(
                    "M-step {} θ = ({:.3}, {:.3})",
                    mstep + 1,
                    theta[0],
                    theta[1]
                ));
            }
            EmEvent::BackOff(b) => bar.println(format!(
                "backed off at M-step {}, update {} ({}): the M-step restarts with the learning rate ×{}",
                b.mstep + 1,
                b.update,
                b.reason,
                b.step_factor
            )),
            EmEvent::MStepDone(_) => {}
        }
        Control::Continue
    })?
    .context("automated EM was interrupted")?;
    bar.finish_and_clear();

    let t0 = Instant::now();
    // Figures only of values a plot can hold; a diverged run says so in its warnings.
    let drawable = o.compare
        && r.em.path.iter().chain(&r.exact_path).all(|v| e1::sane(v))
        && r.loglik_sagd
            .iter()
            .chain(&r.loglik_exact)
            .all(|v| v.is_finite());
    if drawable {
        draw(&mut staging, s, &r)?;
    }
    let t_plots = t0.elapsed().as_secs_f64();

    let result = render::result_json(&o, s, &r, t_plots, t_all.elapsed().as_secs_f64());
    let rp = staging.path("result.json");
    std::fs::write(&rp, serde_json::to_string_pretty(&result)?)
        .with_context(|| format!("writing {}", rp.display()))?;
    let files = staging.commit("result.json")?;
    Ok((r, files))
}

/// Figure 1a and 1b into the staging folder.
fn draw(staging: &mut Staging, s: &E1Settings, r: &E1Result) -> Result<()> {
    let truth = match &s.data {
        E1Data::Simulated { true_theta, .. } => Some(&true_theta[..]),
        E1Data::Observed { .. } => None,
    };
    let fig_a = PathsFigure {
        surface: &r.surface,
        sagd: &r.em.path,
        exact: &r.exact_path,
        mle: &r.mle.theta,
        truth,
    };
    let (p, sv) = (staging.path("figure1a.png"), staging.path("figure1a.svg"));
    save(&fig_a, &p, &sv, (900, 720))?;
    let fig_b = LoglikFigure {
        sagd: &r.loglik_sagd,
        exact: &r.loglik_exact,
        max: r.mle.loglik,
    };
    let (p, sv) = (staging.path("figure1b.png"), staging.path("figure1b.svg"));
    save(&fig_b, &p, &sv, (900, 600))
}

/// Runs `sagd em`.
pub fn run(a: EmArgs) -> Result<()> {
    let t_all = Instant::now();
    let (s, column) = settings(&a)?;
    let source = a.data.as_deref().zip(column.clone());
    s.validate()?;
    let ckpt = a.out.join("em.ckpt");
    if a.resume && !ckpt.exists() {
        bail!(
            "--resume: no checkpoint at {}: run with --checkpoint-every first",
            ckpt.display()
        );
    }
    let bar = progress_bar(a.quiet, 0);
    let (r, files) = write(
        &s,
        E1Output {
            out: &a.out,
            bar: &bar,
            flags: serde_json::to_value(&a)?,
            command: "em",
            file: source.clone(),
            compare: !a.fit_only,
            opts: E1Options {
                checkpoint: (a.checkpoint_every > 0 || a.resume)
                    .then_some((ckpt, a.checkpoint_every)),
                resume: a.resume,
            },
        },
    )?;
    render::summary(&s, &r, source, t_all.elapsed().as_secs_f64());
    say!("wrote {}: {}", a.out.display(), files.join(", "));
    Ok(())
}
