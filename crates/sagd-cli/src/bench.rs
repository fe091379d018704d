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
    }
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
    eprintln!("| dim | scheme | precision | ns/step/dim (best) | median |");
    eprintln!("|---|---|---|---|---|");
    for r in &rows {
        eprintln!(
            "| {} | {} | {} | {:.3} | {:.3} |",
            r.dim, r.scheme, r.precision, r.ns_per_step_dim, r.ns_per_step_dim_median
        );
    }
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
