//! `sagd em`: automated EM on the Gamma-sigmoid model (the paper's E1, Figure 1), on simulated data or
//! on a column of positive numbers from a CSV file.

use std::path::PathBuf;
use std::time::Instant;

use anyhow::{Context, Result};
use clap::Args;
use rayon::prelude::*;
use sagd::em::gamma_sigmoid::GammaSigmoid;
use sagd::em::{exact_gd, maximum_likelihood, AutomatedEm, EmEvent, EmSettings, EmTrace, StopRule};
use sagd::langevin::{Momentum, Scheme};
use sagd::quadrature::{log_likelihood, log_likelihood_trapezoid, GaussHermite};
use sagd::run::Control;
use sagd::schedule::{LengthSchedule, Schedule};
use serde::Serialize;
use serde_json::json;

use crate::input::{read_column, Column, Domain};
use crate::output::{progress_bar, Staging};
use crate::plot::{save, LoglikFigure, PathsFigure, Surface};

/// Flags of `sagd em`. Defaults are experiment E1 of the paper .
#[derive(Args, Debug, Clone, Serialize)]
pub struct EmArgs {
    /// Fit the model to this CSV file's column of positive numbers instead of simulated data.
    #[arg(long)]
    data: Option<PathBuf>,
    /// The column to read: a header name or a 1-based number (default: the first).
    #[arg(long)]
    column: Option<String>,
    /// Simulated data: number of observations.
    #[arg(long, default_value_t = 100)]
    n: usize,
    /// Simulated data: true a.
    #[arg(long, default_value_t = 2.0, allow_negative_numbers = true)]
    a_true: f64,
    /// Simulated data: true b.
    #[arg(long, default_value_t = 0.5, allow_negative_numbers = true)]
    b_true: f64,
    /// Starting a.
    #[arg(long, default_value_t = 0.0, allow_negative_numbers = true)]
    a0: f64,
    /// Starting b.
    #[arg(long, default_value_t = 1.0, allow_negative_numbers = true)]
    b0: f64,
    /// M-steps to run (default 3, the paper's figure; with --data the default is --until-converged).
    #[arg(long)]
    msteps: Option<usize>,
    /// Run M-steps until the Monte Carlo-aware stopping rule is met (at most --max-msteps).
    #[arg(long)]
    until_converged: bool,
    /// The most M-steps with --until-converged.
    #[arg(long, default_value_t = 50)]
    max_msteps: usize,
    /// Stopping rule: M-steps in the window.
    #[arg(long, default_value_t = 5)]
    window: usize,
    /// Stopping rule: threshold in noise standard deviations.
    #[arg(long, default_value_t = 2.0)]
    threshold: f64,
    /// T: gradient updates per M-step.
    #[arg(long = "T", default_value_t = 100)]
    t: usize,
    /// Learning rate α (constant).
    #[arg(long, default_value_t = 0.2)]
    alpha: f64,
    /// δ_t = delta0 / √t.
    #[arg(long, default_value_t = 0.1)]
    delta0: f64,
    /// K_t = t + k0.
    #[arg(long, default_value_t = 20)]
    k0: usize,
    /// Burn-in Langevin steps at the start of every M-step.
    #[arg(long, default_value_t = 100)]
    burn_in: usize,
    /// Friction γ.
    #[arg(long, default_value_t = 1.0)]
    gamma: f64,
    /// Langevin scheme: euler (the paper's), obabo, baoab, ubu.
    #[arg(long, default_value = "euler")]
    scheme: String,
    /// Initial momentum: zero or normal.
    #[arg(long, default_value = "zero")]
    rho0: String,
    /// Chains per data point.
    #[arg(long, default_value_t = 1)]
    chains_per_point: usize,
    /// Seed of the simulated data and of the chains. (Seed 0's data have their MLE at b = 0, where
    /// EM converges sublinearly; seed 1's MLE is interior.)
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Gauss-Hermite nodes per data point for exact GD, ℓ and the MLE.
    #[arg(long, default_value_t = 100)]
    quad_nodes: usize,
    /// Grid points per axis of the log-likelihood surface of Figure 1a.
    #[arg(long, default_value_t = 60)]
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

fn settings(a: &EmArgs) -> Result<EmSettings> {
    let mut s = EmSettings::paper_e1();
    s.sagd.langevin.scheme = a
        .scheme
        .parse::<Scheme>()
        .map_err(|e| anyhow::anyhow!("--scheme: {e}"))?;
    s.sagd.langevin.gamma = a.gamma;
    s.sagd.initial_momentum = match a.rho0.as_str() {
        "zero" => Momentum::Zero,
        "normal" => Momentum::Normal,
        other => anyhow::bail!("--rho0 `{other}`: use zero or normal"),
    };
    s.sagd.schedules.step_size = Schedule::power(a.delta0, 0.5);
    s.sagd.schedules.chain_length = LengthSchedule::power(1.0, 1.0, a.k0);
    s.sagd.schedules.learning_rate = Schedule::constant(a.alpha);
    s.sagd.burn_in = a.burn_in;
    s.updates_per_mstep = a.t;
    s.chains_per_point = a.chains_per_point;
    let until = a.until_converged || (a.data.is_some() && a.msteps.is_none());
    if until {
        s.max_msteps = a.max_msteps;
        s.stopping = Some(StopRule {
            window: a.window,
            threshold: a.threshold,
        });
    } else {
        s.max_msteps = a.msteps.unwrap_or(3);
        s.stopping = None;
    }
    s.validate(2)?;
    Ok(s)
}

fn grid(lo: f64, hi: f64, n: usize) -> Vec<f64> {
    (0..n)
        .map(|k| lo + (hi - lo) * k as f64 / (n - 1).max(1) as f64)
        .collect()
}

/// Runs `sagd em`.
pub fn run(a: EmArgs) -> Result<()> {
    let t_all = Instant::now();
    let settings = settings(&a)?;
    if a.quad_nodes < 8 {
        anyhow::bail!("--quad-nodes must be at least 8 (100 is accurate to 1e-9 here)");
    }
    if a.surface < 2 {
        anyhow::bail!("--surface must be at least 2 grid points per axis");
    }
    let column: Option<Column> = a
        .column
        .as_deref()
        .map(|c| c.parse().map_err(|e| anyhow::anyhow!("--column: {e}")))
        .transpose()?;
    let (model, source) = match &a.data {
        Some(path) => {
            let x = read_column(path, column.as_ref(), Domain::Positive)?;
            let m = GammaSigmoid::new(x)?;
            (
                m,
                json!({"source": "file", "file": path.display().to_string(), "column": a.column}),
            )
        }
        None => {
            if a.n == 0 {
                anyhow::bail!("--n must be at least 1");
            }
            let (m, _) = GammaSigmoid::simulate(a.n, a.a_true, a.b_true, a.seed)?;
            (
                m,
                json!({"source": "simulated", "true_theta": [a.a_true, a.b_true]}),
            )
        }
    };
    let theta0 = [a.a0, a.b0];
    let mut staging = Staging::new(&a.out)?;
    staging.clear(&[
        "result.json",
        "figure1a.png",
        "figure1a.svg",
        "figure1b.png",
        "figure1b.svg",
    ]);
    let ckpt = a.out.join("em.ckpt");

    // Automated EM.
    let total = (settings.max_msteps * settings.updates_per_mstep) as u64;
    let bar = progress_bar(a.quiet, total);
    let mut em = AutomatedEm::new(&model, settings.clone());
    if a.checkpoint_every > 0 || a.resume {
        em.checkpoint = Some((ckpt.clone(), a.checkpoint_every));
    }
    let t0 = Instant::now();
    let resume = if a.resume {
        if !ckpt.exists() {
            anyhow::bail!(
                "--resume: no checkpoint at {}: run with --checkpoint-every first",
                ckpt.display()
            );
        }
        Some(ckpt.as_path())
    } else {
        None
    };
    let trace: EmTrace = em.run(&theta0, a.seed, resume, &mut |ev| match ev {
        EmEvent::Update { mstep, theta, .. } => {
            bar.inc(1);
            bar.set_message(format!(
                "M-step {} θ = ({:.3}, {:.3})",
                mstep + 1,
                theta[0],
                theta[1]
            ));
            Control::Continue
        }
        EmEvent::MStepDone(_) => Control::Continue,
    })?;
    bar.finish_and_clear();
    let t_sagd = t0.elapsed().as_secs_f64();
    let msteps = trace.msteps.len();

    // Exact GD, ℓ along both paths, the MLE.
    let gh = GaussHermite::new(a.quad_nodes);
    let t0 = Instant::now();
    let exact = exact_gd(
        &model,
        &theta0,
        msteps,
        settings.updates_per_mstep,
        a.alpha,
        &gh,
    )?;
    let t_exact = t0.elapsed().as_secs_f64();
    let t0 = Instant::now();
    let ll = |path: &[Vec<f64>]| -> Result<Vec<f64>> {
        path.par_iter()
            .map(|t| Ok(log_likelihood(&model, t, &gh)?))
            .collect()
    };
    let ll_sagd = ll(&trace.path)?;
    let ll_exact = ll(&exact)?;
    let t_ll = t0.elapsed().as_secs_f64();
    let t0 = Instant::now();
    let ex_end = exact.last().context("exact GD produced no path")?.clone();
    let mle = maximum_likelihood(&model, &ex_end, &gh)?;
    let ll_max = -mle.f;
    let t_mle = t0.elapsed().as_secs_f64();

    // Quadrature against brute force at the points that matter.
    let check_pts = [
        theta0.to_vec(),
        ex_end.clone(),
        trace.estimate.clone(),
        mle.x.clone(),
    ];
    let quad_err = check_pts
        .par_iter()
        .map(|t| -> Result<f64> {
            let q = log_likelihood(&model, t, &gh)?;
            let r = log_likelihood_trapezoid(&model, t, -14.0, 14.0, 28_001)?;
            Ok((q - r).abs())
        })
        .collect::<Result<Vec<f64>>>()?
        .into_iter()
        .fold(0.0, f64::max);

    // The surface under Figure 1a (48-node rule: plenty for a picture).
    let t0 = Instant::now();
    let mut pts: Vec<&[f64]> = trace
        .path
        .iter()
        .chain(&exact)
        .map(|v| v.as_slice())
        .collect();
    pts.push(&mle.x);
    let truth = [a.a_true, a.b_true];
    if a.data.is_none() {
        pts.push(&truth);
    }
    let (amin, amax) = pts
        .iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(l, h), p| {
            (l.min(p[0]), h.max(p[0]))
        });
    let (bmin, bmax) = pts
        .iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(l, h), p| {
            (l.min(p[1]), h.max(p[1]))
        });
    let (pa, pb) = (0.15 * (amax - amin).max(0.5), 0.15 * (bmax - bmin).max(0.5));
    let ag = grid(amin - pa, amax + pa, a.surface);
    let bg = grid(bmin - pb, bmax + pb, a.surface);
    let gh_s = GaussHermite::new(48);
    let values: Vec<Vec<f64>> = ag
        .par_iter()
        .map(|av| {
            bg.iter()
                .map(|bv| log_likelihood(&model, &[*av, *bv], &gh_s).unwrap_or(f64::NEG_INFINITY))
                .collect()
        })
        .collect();
    let surface = Surface {
        a: ag,
        b: bg,
        loglik: values,
    };
    let t_surface = t0.elapsed().as_secs_f64();

    // Figures, then the result file.
    let t0 = Instant::now();
    let truth_opt = a.data.is_none().then_some(&truth[..]);
    let fig_a = PathsFigure {
        surface: &surface,
        sagd: &trace.path,
        exact: &exact,
        mle: &mle.x,
        truth: truth_opt,
    };
    let (p, s) = (staging.path("figure1a.png"), staging.path("figure1a.svg"));
    save(&fig_a, &p, &s, (900, 720))?;
    let fig_b = LoglikFigure {
        sagd: &ll_sagd,
        exact: &ll_exact,
        max: ll_max,
    };
    let (p, s) = (staging.path("figure1b.png"), staging.path("figure1b.svg"));
    save(&fig_b, &p, &s, (900, 600))?;
    let t_plots = t0.elapsed().as_secs_f64();

    let sagd_end = trace.path.last().context("empty path")?.clone();
    let dist = ((sagd_end[0] - ex_end[0]).powi(2) + (sagd_end[1] - ex_end[1]).powi(2)).sqrt();
    let ll_estimate = log_likelihood(&model, &trace.estimate, &gh)?;
    let result = json!({
        "experiment": "E1 automated EM, Gamma-sigmoid model",
        "sagd_version": env!("CARGO_PKG_VERSION"),
        "seed": a.seed,
        "flags": a,
        "settings": settings,
        "data": {"n": model.data().len(), "x": model.data(), "origin": source},
        "theta0": theta0,
        "sagd": {
            "path": trace.path,
            "loglik": ll_sagd,
            "final": sagd_end,
            "final_loglik": ll_sagd.last(),
            "estimate": trace.estimate,
            "estimate_se": trace.estimate_se,
            "estimate_loglik": ll_estimate,
            "converged": trace.converged,
            "msteps": trace.msteps,
            "langevin_steps": trace.langevin_steps,
        },
        "exact_gd": {"path": exact, "loglik": ll_exact, "final": ex_end, "final_loglik": ll_exact.last()},
        "mle": {"theta": mle.x, "loglik": ll_max, "grad_max": mle.grad_max, "converged": mle.converged, "iterations": mle.iterations},
        "comparison": {
            "distance_sagd_exact_final": dist,
            "loglik_exact_minus_sagd_final": ll_exact.last().copied().unwrap_or(f64::NAN) - ll_sagd.last().copied().unwrap_or(f64::NAN),
            "loglik_max_minus_sagd_estimate": ll_max - ll_estimate,
        },
        "quadrature_check": {"nodes": a.quad_nodes, "reference": "trapezoid, 28001 points on [-14, 14]", "max_abs_err_loglik": quad_err},
        "surface": {"a": surface.a, "b": surface.b, "loglik": surface.loglik, "nodes": 48},
        "timing_s": {
            "sagd": t_sagd, "exact_gd": t_exact, "loglik_paths": t_ll, "mle": t_mle,
            "surface": t_surface, "plots": t_plots, "total": t_all.elapsed().as_secs_f64(),
        },
    });
    let rp = staging.path("result.json");
    std::fs::write(&rp, serde_json::to_string_pretty(&result)?)
        .with_context(|| format!("writing {}", rp.display()))?;
    let files = staging.commit("result.json")?;

    println!(
        "E1 automated EM: n = {}, seed = {}, {} M-steps of T = {}{}",
        model.data().len(),
        a.seed,
        msteps,
        settings.updates_per_mstep,
        if settings.stopping.is_some() {
            if trace.converged {
                " (stopping rule met)"
            } else {
                " (stopping rule NOT met: raise --max-msteps)"
            }
        } else {
            ""
        }
    );
    println!("{:12} {:>10} {:>10} {:>12}", "", "a", "b", "loglik");
    println!(
        "{:12} {:>10.5} {:>10.5} {:>12.5}",
        "exact GD",
        ex_end[0],
        ex_end[1],
        ll_exact.last().copied().unwrap_or(f64::NAN)
    );
    println!(
        "{:12} {:>10.5} {:>10.5} {:>12.5}",
        "SAGD",
        sagd_end[0],
        sagd_end[1],
        ll_sagd.last().copied().unwrap_or(f64::NAN)
    );
    if trace.converged {
        println!(
            "{:12} {:>10.5} {:>10.5}   (± {:.4}, {:.4})",
            "SAGD est.",
            trace.estimate[0],
            trace.estimate[1],
            trace.estimate_se[0],
            trace.estimate_se[1]
        );
    }
    println!(
        "{:12} {:>10.5} {:>10.5} {:>12.5}",
        "MLE", mle.x[0], mle.x[1], ll_max
    );
    println!("quadrature max abs error vs brute force: {quad_err:.1e}");
    println!(
        "time: SAGD {t_sagd:.3} s, total {:.3} s",
        t_all.elapsed().as_secs_f64()
    );
    println!("wrote {}: {}", a.out.display(), files.join(", "));
    Ok(())
}
