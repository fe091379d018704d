//! The `sagd` command-line tool: fills the library's settings from flags and runs its applications.

mod bench;
mod debias;
mod em;
mod input;
mod mnist;
mod output;
mod plot;
mod reproduce;

use anyhow::Result;
use clap::{Parser, Subcommand};

/// Stochastic Approximate Gradient Descent: gradients from short underdamped Langevin chains.
#[derive(Parser, Debug)]
#[command(name = "sagd", version, about)]
struct Cli {
    /// Worker threads (default: all cores). Results do not depend on it.
    #[arg(long, global = true)]
    threads: Option<usize>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// The whole paper (E1, E2 and E3) from one command, into one report: OUT/report.html,
    /// report.md and results.json.
    Reproduce(reproduce::ReproduceArgs),
    /// The debiased VAE (the paper's E2, Table 1 and Figure 2), or deconvolution of your own data.
    Debias(Box<debias::DebiasArgs>),
    /// Automated EM on the Gamma-sigmoid model (the paper's E1, Figure 1), or on your own data.
    Em(em::EmArgs),
    /// MNIST (the paper's E3, Figure 3): a convolutional VAE, its generator refined by SAGD, a
    /// control, and the held-out log-likelihood of each.
    Mnist(mnist::MnistArgs),
    /// Benchmarks.
    #[command(subcommand)]
    Bench(bench::BenchCommand),
}

fn main() {
    let cli = Cli::parse();
    if let Err(e) = run(cli) {
        eprintln!("error: {e:#}");
        std::process::exit(1);
    }
}

fn run(cli: Cli) -> Result<()> {
    if let Some(t) = cli.threads {
        if t == 0 {
            anyhow::bail!("--threads must be at least 1");
        }
        // More threads than this only wait on each other, and spawning 100000 of them hangs.
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let most = (4 * cores).max(64);
        if t > most {
            anyhow::bail!("--threads {t}: use at most {most} (this machine has {cores} cores; results do not depend on the thread count)");
        }
        rayon::ThreadPoolBuilder::new()
            .num_threads(t)
            .build_global()?;
    }
    match cli.command {
        Command::Bench(b) => bench::run(b),
        Command::Em(a) => em::run(a),
        Command::Mnist(a) => mnist::run(a),
        Command::Debias(a) => debias::run(*a),
        Command::Reproduce(a) => reproduce::run(a),
    }
}
