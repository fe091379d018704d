//! `sagd bench ...`: benchmarks that print JSON tables.

use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::{Args, Subcommand};
use sagd::bench::{time_naive_euler, time_noise, time_scheme, KernelTiming};
use sagd::langevin::Scheme;
use serde::Serialize;

/// Which benchmark.
#[derive(Subcommand, Debug)]
pub enum BenchCommand {
    /// Chain steps on a standard Gaussian target, one chain, one thread: ns per chain-step per
    /// dimension for each integrator, the normal generator alone, and a naive baseline.
    Kernel(KernelArgs),
    /// One replication of the debiased VAE (E2) with the spec's settings: all four methods as
    /// `sagd debias` runs them, then pre-training and each method alone; with `--peer`, the PyTorch
    /// peer on the same settings in the same run, and the ratios.
    Debias(DebiasBenchArgs),
    /// The CUDA backend against the CPU engine: every network of the experiments forward and
    /// backward on fresh random inputs (relative error of each output, which must stay under
    /// 1e-4), then the time of a forward + backward pass on each. Needs an NVIDIA GPU and the
    /// CUDA 13 driver, NVRTC and cuBLAS libraries on the loader's path.
    Gpu(GpuBenchArgs),
    /// E3 (MNIST) training speed: seconds per VAE minibatch and per SAGD minibatch (200 images,
    /// 20 chains × 5 steps) through the runner, Adam included, and the epochs they make; on the
    /// CPU engine (with the global --threads) or a GPU.
    Mnist(MnistBenchArgs),
}

/// Flags of `sagd bench mnist`.
#[derive(Args, Debug)]
pub struct MnistBenchArgs {
    /// VAE minibatches timed (after one that warms up).
    #[arg(long, default_value_t = 20)]
    vae_batches: usize,
    /// SAGD minibatches timed (after one that warms up).
    #[arg(long, default_value_t = 3)]
    sagd_batches: usize,
    /// SAGD's integrator: euler (the paper's) or baoab.
    #[arg(long, default_value_t = sagd::langevin::Scheme::Euler)]
    scheme: sagd::langevin::Scheme,
    /// A folder with the four MNIST IDX files. Default: the files that ship with sagd.
    #[arg(long)]
    data: Option<PathBuf>,
    /// Where the networks train: cpu or cuda (cuda:N).
    #[arg(long, default_value_t = sagd_nn::Device::Cpu)]
    device: sagd_nn::Device,
    /// Also write the JSON here.
    #[arg(long)]
    out: Option<PathBuf>,
}

/// Flags of `sagd bench gpu`.
#[derive(Args, Debug)]
pub struct GpuBenchArgs {
    /// Which GPU.
    #[arg(long, default_value_t = 0)]
    ordinal: usize,
    /// Seed of the random inputs of the check.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Timed repeats of each pass (the table gives the median).
    #[arg(long, default_value_t = 50)]
    repeats: usize,
    /// Also write the JSON here.
    #[arg(long)]
    out: Option<PathBuf>,
}

/// Flags of `sagd bench debias`.
#[derive(Args, Debug)]
pub struct DebiasBenchArgs {
    /// normal, exp or mixture.
    #[arg(long, default_value_t = sagd_nn::debias::Case::Exp)]
    dist: sagd_nn::debias::Case,
    /// The replication's seed.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Timed repeats of each phase (the table gives the fastest).
    #[arg(long, default_value_t = 1)]
    repeats: usize,
    /// The PyTorch reference implementation's script (`sagd_peer.py`), run with the same thread
    /// count.
    #[arg(long)]
    peer: Option<PathBuf>,
    /// The Python that has the peer's packages (torch, numpy, scipy).
    #[arg(long, default_value = "python3")]
    python: PathBuf,
    /// Also write the JSON here.
    #[arg(long)]
    out: Option<PathBuf>,
    /// Where the networks train: cpu or cuda (cuda:N).
    #[arg(long, default_value_t = sagd_nn::Device::Cpu)]
    device: sagd_nn::Device,
}

/// Flags of `sagd bench kernel`.
#[derive(Args, Debug)]
pub struct KernelArgs {
    /// Chain dimensions.
    #[arg(long, value_delimiter = ',', default_values_t = [10usize, 100, 1000, 10000])]
    dims: Vec<usize>,
    /// Integrators.
    #[arg(long, value_delimiter = ',', default_values_t = Scheme::ALL.map(|s| s.name().to_string()))]
    schemes: Vec<String>,
    /// Coordinates updated per timed repeat.
    #[arg(long, default_value_t = 20_000_000)]
    work: usize,
    /// Timed repeats (the table gives the best and the median).
    #[arg(long, default_value_t = 5)]
    repeats: usize,
    /// Also time single-precision chains.
    #[arg(long)]
    f32: bool,
    /// Also write the JSON here.
    #[arg(long)]
    out: Option<PathBuf>,
}

#[derive(Serialize)]
struct KernelReport {
    benchmark: &'static str,
    target: &'static str,
    gamma: f64,
    delta: f64,
    chains: usize,
    threads: usize,
    unit: &'static str,
    rows: Vec<KernelTiming>,
}

/// Runs a benchmark.
pub fn run(cmd: BenchCommand) -> Result<()> {
    match cmd {
        BenchCommand::Kernel(a) => kernel(a),
        BenchCommand::Debias(a) => debias(a),
        BenchCommand::Gpu(a) => gpu(a),
        BenchCommand::Mnist(a) => mnist(a),
    }
}

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

fn gpu(a: GpuBenchArgs) -> Result<()> {
    use sagd_nn::cuda::{check_networks, time_networks, Gpu};
    let t = std::time::Instant::now();
    let gpu = Gpu::open(a.ordinal).with_context(|| format!("opening GPU {}", a.ordinal))?;
    let device = gpu.describe()?;
    let open_s = t.elapsed().as_secs_f64();
    eprintln!("{device}: opened and kernels compiled in {open_s:.2} s");
    let checks = check_networks(&gpu, a.seed)?;
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
    let estimators = sagd_nn::cuda::check_estimators(a.seed, a.ordinal)?;
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
    let adam = sagd_nn::cuda::check_adam(&gpu, a.seed)?;
    eprintln!(
        "Adam on the device against the host's rule, {} parameters: largest differences θ {:.1e}, m {:.1e}, v {:.1e}",
        adam.params, adam.theta, adam.m, adam.v
    );
    let training = sagd_nn::cuda::check_training(a.seed, a.ordinal)?;
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
    let timings = time_networks(&gpu, a.repeats)?;
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
    println!("{json}");
    if !passed {
        anyhow::bail!("the GPU engine disagrees with the CPU engine beyond {GPU_TOLERANCE:.0e} (networks) or {ESTIMATOR_TOLERANCE:.0e} (estimators), Adam's step is not the host's to the bit, or training strays beyond {TRAINING_TOLERANCE}: see the tables above");
    }
    Ok(())
}

fn mnist(a: MnistBenchArgs) -> Result<()> {
    use sagd_nn::mnist::experiment::{time_phase, E3Settings, Objective};
    let dir = a.data.clone().unwrap_or_else(sagd_nn::mnist::shipped_dir);
    let data = sagd_nn::mnist::load(&dir)
        .with_context(|| format!("--data {}: reading the MNIST files", dir.display()))?;
    a.device
        .ready()
        .with_context(|| format!("--device {}", a.device))?;
    let mut s = E3Settings::default();
    s.chains.scheme = a.scheme;
    let mut rows = Vec::new();
    for (objective, n) in [
        (Objective::Vae, a.vae_batches),
        (Objective::Sagd(s.chains), a.sagd_batches),
    ] {
        if n > 0 {
            rows.push(time_phase(&s, &data, objective, n, a.device)?);
        }
    }
    eprint_table(
        &[
            "phase",
            "minibatches timed",
            "s per minibatch",
            "s per epoch (300 minibatches)",
        ],
        rows.iter().map(|r| {
            vec![
                r.phase.to_string(),
                r.updates.to_string(),
                format!("{:.4}", r.s_per_update),
                format!("{:.1}", r.s_per_epoch),
            ]
        }),
    );
    let json = serde_json::to_string_pretty(&serde_json::json!({
        "benchmark": "mnist",
        "device": a.device.to_string(),
        "gpu_tf32": a.device != sagd_nn::Device::Cpu && sagd_nn::cuda::tf32_enabled(),
        "threads": rayon::current_num_threads(),
        "settings": s,
        "rows": rows,
    }))?;
    if let Some(p) = &a.out {
        std::fs::write(p, &json).with_context(|| format!("writing {}", p.display()))?;
    }
    println!("{json}");
    Ok(())
}

fn kernel(a: KernelArgs) -> Result<()> {
    let schemes: Vec<Scheme> = a
        .schemes
        .iter()
        .map(|s| s.parse().map_err(anyhow::Error::msg))
        .collect::<Result<_>>()?;
    if a.dims.contains(&0) {
        anyhow::bail!("--dims: dimensions must be at least 1");
    }
    // One thread, whatever --threads says: the table is per core.
    let pool = rayon::ThreadPoolBuilder::new().num_threads(1).build()?;
    let rows = pool.install(|| -> Result<Vec<KernelTiming>> {
        let mut rows = Vec::new();
        for &d in &a.dims {
            rows.push(time_naive_euler(d, a.work, a.repeats));
            rows.push(time_noise(d, a.work, a.repeats));
            for &s in &schemes {
                rows.push(time_scheme::<f64>(s, d, a.work, a.repeats)?);
                if a.f32 {
                    rows.push(time_scheme::<f32>(s, d, a.work, a.repeats)?);
                }
            }
            eprintln!("dim {d} done");
        }
        Ok(rows)
    })?;
    eprint_table(
        &["dim", "scheme", "precision", "ns/step/dim (best)", "median"],
        rows.iter().map(|r| {
            vec![
                r.dim.to_string(),
                r.scheme.to_string(),
                r.precision.to_string(),
                format!("{:.3}", r.ns_per_step_dim),
                format!("{:.3}", r.ns_per_step_dim_median),
            ]
        }),
    );
    let report = KernelReport {
        benchmark: "kernel",
        target: "N(0, I), one chain",
        gamma: 1.0,
        delta: 0.1,
        chains: 1,
        threads: 1,
        unit: "ns per chain-step per dimension",
        rows,
    };
    let json = serde_json::to_string_pretty(&report)?;
    if let Some(p) = &a.out {
        std::fs::write(p, &json).with_context(|| format!("writing {}", p.display()))?;
    }
    println!("{json}");
    Ok(())
}

/// Wall seconds per phase of one E2 replication (the fastest repeat), by phase name.
#[derive(Serialize, Default, Clone)]
struct PhaseTimes(std::collections::BTreeMap<&'static str, f64>);

const PHASES: [&str; 6] = ["whole", "pretrain", "vae", "iwae", "hmc", "sagd"];

impl PhaseTimes {
    fn get(&self, phase: &str) -> Option<f64> {
        self.0.get(phase).copied()
    }

    /// Keeps the faster of the two times of `phase`.
    fn keep_min(&mut self, phase: &'static str, t: f64) {
        let v = self.0.entry(phase).or_insert(t);
        *v = v.min(t);
    }
}

#[derive(Serialize)]
struct DebiasReport {
    benchmark: &'static str,
    dist: String,
    seed: u64,
    threads: usize,
    repeats: usize,
    unit: &'static str,
    sagd: PhaseTimes,
    peer: Option<PhaseTimes>,
    ratio: Option<PhaseTimes>,
}

fn debias(a: DebiasBenchArgs) -> Result<()> {
    use sagd_nn::debias::{replicate, Case, Method, RunOptions};
    if a.dist == Case::Highdim {
        anyhow::bail!("--dist: the benchmark runs the 1-D cases (normal, exp, mixture)");
    }
    let (spec, law) = (a.dist.settings(false), a.dist.law());
    let threads = rayon::current_num_threads();
    let mut ours = PhaseTimes::default();
    let quiet = |_: &str, _: usize, _: usize| {};
    a.device
        .ready()
        .with_context(|| format!("--device {}", a.device))?;
    let opts = RunOptions {
        device: a.device,
        ..RunOptions::default()
    };
    for rep in 0..a.repeats.max(1) {
        // All four methods at once, as `sagd debias` runs a replication.
        let t = std::time::Instant::now();
        replicate(&spec, &law, a.seed, &opts, &quiet)?;
        ours.keep_min("whole", t.elapsed().as_secs_f64());
        // Each method alone, after its own pre-training.
        for m in Method::ALL {
            let mut s = spec.clone();
            s.methods = vec![m];
            let r = replicate(&s, &law, a.seed, &opts, &quiet)?;
            ours.keep_min("pretrain", r.pretrain_time_s);
            if let Some(mr) = r.methods.get(m.name()) {
                ours.keep_min(m.name(), mr.time_s);
            }
        }
        eprintln!("repeat {} of {} done", rep + 1, a.repeats.max(1));
    }
    let peer = match &a.peer {
        Some(script) => Some(run_peer(&a, script, threads)?),
        None => None,
    };
    let ratio = peer.as_ref().map(|p| {
        let mut r = PhaseTimes::default();
        for ph in PHASES {
            if let (Some(a), Some(b)) = (ours.get(ph), p.get(ph)) {
                r.keep_min(ph, b / a);
            }
        }
        r
    });
    let cell = |v: Option<f64>, unit: &str| v.map_or("—".into(), |v| format!("{v:.2}{unit}"));
    eprint_table(
        &["phase", "sagd (s)", "peer (s)", "peer / sagd"],
        PHASES.iter().map(|&ph| {
            vec![
                ph.to_string(),
                cell(ours.get(ph), ""),
                cell(peer.as_ref().and_then(|p| p.get(ph)), ""),
                cell(ratio.as_ref().and_then(|r| r.get(ph)), "×"),
            ]
        }),
    );
    let report = DebiasReport {
        benchmark: "debias",
        dist: a.dist.to_string(),
        seed: a.seed,
        threads,
        repeats: a.repeats.max(1),
        unit: "wall seconds (fastest repeat); whole: all four methods concurrently",
        sagd: ours,
        peer,
        ratio,
    };
    let json = serde_json::to_string_pretty(&report)?;
    if let Some(p) = &a.out {
        std::fs::write(p, &json).with_context(|| format!("writing {}", p.display()))?;
    }
    println!("{json}");
    Ok(())
}

/// Runs the peer's E2 replication and reads its phase times from its JSON (whole: our clock
/// around the process, as for ours).
fn run_peer(a: &DebiasBenchArgs, script: &std::path::Path, threads: usize) -> Result<PhaseTimes> {
    let dir = tempfile::tempdir()?;
    let json = dir.path().join("peer.json");
    let mut best = PhaseTimes::default();
    for _ in 0..a.repeats.max(1) {
        let t = std::time::Instant::now();
        let status = std::process::Command::new(&a.python)
            .arg(script)
            .args(["e2", "--dist", a.dist.name(), "--reps", "1"])
            .args(["--seed-offset", &a.seed.to_string()])
            .args(["--threads", &threads.to_string()])
            .arg("--out")
            .arg(&json)
            .stdout(std::process::Stdio::null())
            .status()
            .with_context(|| format!("--python {}: could not start it", a.python.display()))?;
        if !status.success() {
            anyhow::bail!(
                "--peer {}: the peer failed ({status}); does --python {} have torch, numpy and scipy?",
                script.display(),
                a.python.display()
            );
        }
        best.keep_min("whole", t.elapsed().as_secs_f64());
        let text = std::fs::read_to_string(&json)
            .with_context(|| format!("reading the peer's result {}", json.display()))?;
        let v: serde_json::Value = serde_json::from_str(&text)
            .with_context(|| format!("the peer's result {} is not JSON", json.display()))?;
        for (ph, key) in [
            ("pretrain", "pretrained"),
            ("vae", "vae"),
            ("iwae", "iwae"),
            ("hmc", "hmc"),
            ("sagd", "sagd"),
        ] {
            if let Some(t) = v["summary"][key]["time_mean_s"].as_f64() {
                best.keep_min(ph, t);
            }
        }
    }
    Ok(best)
}

/// A Markdown table on standard error: the header, its rule, then one line per row.
fn eprint_table(header: &[&str], rows: impl IntoIterator<Item = Vec<String>>) {
    eprintln!("| {} |", header.join(" | "));
    eprintln!("|{}", "---|".repeat(header.len()));
    for r in rows {
        eprintln!("| {} |", r.join(" | "));
    }
}
