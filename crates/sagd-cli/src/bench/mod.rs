//! `sagd bench ...`: benchmarks that print JSON tables.

use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::{Args, Subcommand};
use sagd::bench::{time_naive_euler, time_noise, time_scheme, KernelTiming};
use sagd::langevin::Scheme;
use serde::Serialize;

mod debias;
mod gpu;

use debias::debias;
use gpu::gpu;

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
    /// SAGD's integrator: euler (the paper's), obabo, baoab or ubu (on either device).
    #[arg(long, visible_alias = "sagd-scheme", default_value_t = sagd::langevin::Scheme::Euler)]
    scheme: sagd::langevin::Scheme,
    /// SAGD chains that persist between an image's visits, restarted every R-th (as `sagd mnist
    /// --refresh-every`): each pass then finishes its chains' last transition and keeps them.
    #[arg(long, visible_alias = "sagd-refresh-every", value_name = "R")]
    refresh_every: Option<usize>,
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
    #[arg(long, default_value_t = sagd_apps::debias::Case::Exp)]
    dist: sagd_apps::debias::Case,
    /// The replication's seed.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Timed repeats of each phase (the table gives the fastest).
    #[arg(long, default_value_t = 1)]
    repeats: usize,
    /// The PyTorch peer's script (`peers/torch_peer.py`), run with the same thread
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

fn mnist(a: MnistBenchArgs) -> Result<()> {
    use sagd_apps::mnist::experiment::{time_phase, E3Settings, Objective};
    let dir = a.data.clone().unwrap_or_else(sagd_apps::mnist::shipped_dir);
    let data = sagd_apps::mnist::load(&dir)
        .with_context(|| format!("--data {}: reading the MNIST files", dir.display()))?;
    let mut s = E3Settings::default();
    s.chains.scheme = a.scheme;
    s.chains.refresh_every = a.refresh_every;
    s.chains.runs_on(a.device)?;
    a.device
        .ready()
        .with_context(|| format!("--device {}", a.device))?;
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
            "s per minibatch (mean)",
            "fastest",
            "s per epoch (300 minibatches)",
        ],
        rows.iter().map(|r| {
            vec![
                r.phase.to_string(),
                r.updates.to_string(),
                format!("{:.4}", r.s_per_update),
                format!("{:.4}", r.fastest_s),
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
    say!("{json}");
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
    // One chain of each dimension in f64: refused here, not by the allocator, if it cannot fit.
    for &d in &a.dims {
        sagd::langevin::check_chains_fit(1, d, 8, "--dims")?;
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
            say_err!("dim {d} done");
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
    say!("{json}");
    Ok(())
}

/// A Markdown table on standard error: the header, its rule, then one line per row.
fn eprint_table(header: &[&str], rows: impl IntoIterator<Item = Vec<String>>) {
    say_err!("| {} |", header.join(" | "));
    say_err!("|{}", "---|".repeat(header.len()));
    for r in rows {
        say_err!("| {} |", r.join(" | "));
    }
}
