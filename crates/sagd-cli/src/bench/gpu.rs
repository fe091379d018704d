//! `sagd bench gpu`: the GPU engine against the CPU engine (networks, estimators, Adam, training)
//! with the tolerances each must meet, and the networks' timings.
// `sagd_apps::gpu_check` is deprecated as a library module; its checks move here next release.
#![allow(deprecated)]

use super::*;
use sagd_apps::gpu_check::{
    check_adam, check_estimators, check_networks, check_training, time_networks, EstimatorCheck,
    NetworkCheck, NetworkTiming, TrainingCheck,
};

/// Largest relative error between the engines that `sagd bench gpu` accepts for one pass of a
/// network: f32 arithmetic in another order lands near 1e-6.
const GPU_TOLERANCE: f64 = 1e-4;

/// The same for an estimator's gradient over three updates: the chains' 80 steps of dynamics and
/// IWAE's normalised weights carry the rounding further.
const ESTIMATOR_TOLERANCE: f64 = 1e-3;

/// How far E3's training on the GPU (three updates, Adam on the device) may stray from the CPU's:
/// ‖Δθ_gpu − Δθ_cpu‖/‖Δθ_cpu‖. Its parts are checked closely on their own (each pass's gradients
/// to 1e-3 above, Adam's step to the bit); what is left is the plumbing (batches, draws, counts,
/// moments), which fails by O(1). Rounding alone spreads the moves: a ReLU network's kinks and
/// Adam's step of about the rate whatever the gradient's size turn 1e-6 gradient differences into
/// moves 2.6e-3 apart (VAE, measured), and on the CPU alone a one-ulp change of a third of the
/// initial parameters gave from 4e-5 to 7e-3 (`rounding_floor` reports it each time).
const TRAINING_TOLERANCE: f64 = 0.05;

/// `sagd bench gpu`: every check, its table, the JSON, and a non-zero exit if one fails.
pub(crate) fn gpu(a: GpuBenchArgs) -> Result<()> {
    use sagd_nn::cuda::Gpu;
    let t = std::time::Instant::now();
    let gpu = Gpu::open(a.ordinal).with_context(|| format!("opening GPU {}", a.ordinal))?;
    let device = gpu.describe()?;
    let open_s = t.elapsed().as_secs_f64();
    say_err!("{device}: opened and kernels compiled in {open_s:.2} s");
    let checks = check_networks(&gpu, a.seed)?;
    print_network_checks(&checks);
    let estimators = check_estimators(a.seed, a.ordinal)?;
    print_estimator_checks(&estimators);
    let adam = check_adam(&gpu, a.seed)?;
    say_err!(
        "Adam on the device against the host's rule, {} parameters: largest differences θ {:.1e}, m {:.1e}, v {:.1e}",
        adam.params, adam.theta, adam.m, adam.v
    );
    let training = check_training(a.seed, a.ordinal)?;
    print_training_checks(&training);
    let timings = time_networks(&gpu, a.repeats)?;
    print_timings(&timings);
    let passed = checks
        .iter()
        .all(|c| c.all_finite && c.output.max(c.dparams).max(c.dx) < GPU_TOLERANCE)
        && estimators
            .iter()
            .all(|c| c.g_dec.max(c.g_enc).max(c.loss) < ESTIMATOR_TOLERANCE)
        && adam.theta == 0.0
        && adam.m == 0.0
        && adam.v == 0.0
        && training.iter().all(|c| c.rel_err < TRAINING_TOLERANCE);
    let json = serde_json::to_string_pretty(&serde_json::json!({
        "benchmark": "gpu",
        "device": device,
        "open_s": open_s,
        "tolerance": GPU_TOLERANCE,
        "passed": passed,
        "checks": checks,
        "estimator_tolerance": ESTIMATOR_TOLERANCE,
        "estimators": estimators,
        "adam": adam,
        "training_tolerance": TRAINING_TOLERANCE,
        "training": training,
        "timings": timings,
    }))?;
    if let Some(p) = &a.out {
        std::fs::write(p, &json).with_context(|| format!("writing {}", p.display()))?;
    }
    say!("{json}");
    if !passed {
        anyhow::bail!("the GPU engine disagrees with the CPU engine beyond {GPU_TOLERANCE:.0e} (networks) or {ESTIMATOR_TOLERANCE:.0e} (estimators), Adam's step is not the host's to the bit, or training strays beyond {TRAINING_TOLERANCE}: see the tables above");
    }
    Ok(())
}

/// The networks' agreement, one row per network.
fn print_network_checks(checks: &[NetworkCheck]) {
    eprint_table(
        &["network", "rows", "output", "dparams", "dx", "finite"],
        checks.iter().map(|c| {
            vec![
                c.network.to_string(),
                c.rows.to_string(),
                format!("{:.1e}", c.output),
                format!("{:.1e}", c.dparams),
                format!("{:.1e}", c.dx),
                c.all_finite.to_string(),
            ]
        }),
    );
}

/// The estimators' agreement, one row per estimator.
fn print_estimator_checks(estimators: &[EstimatorCheck]) {
    eprint_table(
        &["estimator", "updates", "g_dec", "g_enc", "loss"],
        estimators.iter().map(|c| {
            vec![
                c.estimator.to_string(),
                c.updates.to_string(),
                format!("{:.1e}", c.g_dec),
                format!("{:.1e}", c.g_enc),
                format!("{:.1e}", c.loss),
            ]
        }),
    );
}

/// E3's training on the device against the CPU's, one row per phase.
fn print_training_checks(training: &[TrainingCheck]) {
    eprint_table(
        &[
            "training, update on the device",
            "updates",
            "parameters",
            "moves: GPU vs CPU",
            "CPU vs CPU nudged one ulp",
        ],
        training.iter().map(|c| {
            vec![
                c.phase.to_string(),
                c.updates.to_string(),
                c.params.to_string(),
                format!("{:.1e}", c.rel_err),
                format!("{:.1e}", c.rounding_floor),
            ]
        }),
    );
}

/// The networks' forward and backward times on both engines.
fn print_timings(timings: &[NetworkTiming]) {
    eprint_table(
        &[
            "network",
            "rows",
            "GPU ms",
            "CPU ms (1 thread)",
            "CPU / GPU",
        ],
        timings.iter().map(|t| {
            vec![
                t.network.to_string(),
                t.rows.to_string(),
                format!("{:.3}", t.gpu_ms),
                format!("{:.3}", t.cpu_one_thread_ms),
                format!("{:.1}", t.cpu_one_thread_ms / t.gpu_ms),
            ]
        }),
    );
}
