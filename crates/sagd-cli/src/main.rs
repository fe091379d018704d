//! The `sagd` command-line tool: fills the library's settings from flags and runs its applications.

/// `println!` for what a command tells its reader on stdout, which a reader that stops early
/// (`sagd glmm … | head`) may have closed: then the line is dropped and the command goes on to
/// write its results, where `println!` would panic.
macro_rules! say {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stdout(), $($arg)*);
    }};
}

/// `eprintln!` as [`say!`]: notes, warnings and errors on stderr, which `2>&1 | head` closes
/// ([`sagd_mpi::say`]: each line in one write, which processes sharing stderr do not split).
macro_rules! say_err {
    ($($arg:tt)*) => {
        sagd_mpi::say(&format!($($arg)*))
    };
}

/// `print!` as [`say!`] (no newline added).
macro_rules! say_part {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = write!(std::io::stdout(), $($arg)*);
    }};
}

mod bench;
mod debias;
mod em;
mod glmm;
mod input;
mod mnist;
mod output;
mod plot;
mod progress;
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
    /// Let this run replace a result (or interrupted run's checkpoints) that another command left
    /// in its output folder: that command's files are removed, the folder's other files kept.
    /// Without it such a folder is refused.
    #[arg(long, global = true)]
    replace: bool,
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
    /// A generalised linear mixed model from a CSV file and an lme4 formula: the exact
    /// likelihood where it can be computed, else Langevin chains (the polish from Laplace's
    /// maximum, automated EM where it fails); lme4's summary, OUT/result.json and each level's
    /// random effects given the data (ranef.csv: the conditional modes, and the conditional
    /// means: integrated up to 3 effects per block, sampled by HMC beyond).
    Glmm(glmm::GlmmArgs),
    /// MNIST (the paper's E3, Figure 3): a convolutional VAE, its generator refined by SAGD, a
    /// control, and the held-out log-likelihood of each.
    Mnist(mnist::MnistArgs),
    /// Benchmarks.
    #[command(subcommand)]
    Bench(bench::BenchCommand),
}

fn main() {
    let cli = Cli::parse();
    let processes = match sagd_mpi::start() {
        Ok(p) => p,
        Err(e) => {
            say_err!("error: {e}");
            std::process::exit(1);
        }
    };
    let result = run(cli, &processes);
    if processes.size() > 1 && result.is_ok() {
        let x = sagd::share::exchanged();
        sagd_mpi::say(&format!(
            "process {} of {}: {} exchanges, {:.1} MB sent, {:.1} MB received, {:.2} s in them",
            processes.rank(),
            processes.size(),
            x.calls,
            x.sent as f64 / 1e6,
            x.received as f64 / 1e6,
            x.seconds
        ));
    }
    if let Err(e) = result {
        // An error that only relays another process's is that process's to print.
        let relayed = e.chain().any(|c| {
            matches!(
                c.downcast_ref::<sagd::error::SagdError>(),
                Some(sagd::error::SagdError::Process { .. })
            )
        });
        processes.fail(&message(&e), relayed);
    }
}

/// The error and its causes as `{:#}` joins them, without a cause whose text its error's message
/// already ends with (an error that shows its source in its own message, as most of ours do).
fn message(e: &anyhow::Error) -> String {
    let mut out = String::new();
    for cause in e.chain() {
        let text = cause.to_string();
        if out.ends_with(&text) {
            continue;
        }
        if !out.is_empty() {
            out.push_str(": ");
        }
        out.push_str(&text);
    }
    out
}

fn run(cli: Cli, processes: &sagd_mpi::Processes) -> Result<()> {
    if processes.size() > 1
        && !matches!(
            cli.command,
            Command::Em(_) | Command::Debias(_) | Command::Mnist(_)
        )
    {
        anyhow::bail!(
            "this command runs as one process; of the commands, `sagd em`, `sagd debias` and `sagd mnist` split over processes (mpirun -np N)"
        );
    }
    if cli.replace {
        output::allow_replace();
    }
    if let Some(t) = cli.threads {
        if t == 0 {
            anyhow::bail!("--threads must be at least 1");
        }
        sagd::parallel::check_threads(t).map_err(|e| anyhow::anyhow!("--threads: {e}"))?;
        rayon::ThreadPoolBuilder::new()
            .num_threads(t)
            .build_global()?;
    }
    match cli.command {
        Command::Bench(b) => bench::run(b),
        Command::Em(a) => em::run(a),
        Command::Glmm(a) => glmm::run(a),
        Command::Mnist(a) => mnist::run(a),
        Command::Debias(a) => debias::run(*a),
        Command::Reproduce(a) => reproduce::run(a),
    }
}
