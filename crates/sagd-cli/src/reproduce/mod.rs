//! `sagd reproduce`: the paper's experiments from one command, through the library's applications
//! and the same writers as `sagd em` and `sagd debias`, into one report (`report.html`,
//! `report.md`, `results.json`). Each experiment runs on its own: one that fails is reported and
//! the others still run. A rerun with the same flags skips what is finished and resumes what was
//! interrupted (E2's phases are checkpointed, pre-trained networks cached).

mod calibrate;
mod plan;
mod progress;
mod report;

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{bail, Context, Result};
use clap::Args;
use serde::{Deserialize, Serialize};

use calibrate::Speed;
use plan::{Experiment, Kind, Mode};

/// `--quick`'s help, with the plan's own estimate for 2 cores.
fn quick_help() -> String {
    format!(
        "The default: the paper's E1, 5 of the 30 replications per 1-D case of Table 1, the small high-dimensional default and a short E3 demonstration, each table saying so (estimated {:.0} min on 2 cores with AVX-512, {:.0} min with AVX2 only; the estimate for this machine is printed before it starts)",
        plan::quick_minutes(2, sagd::cpu::Capability::Avx512),
        plan::quick_minutes(2, sagd::cpu::Capability::Avx2)
    )
}

/// Flags of `sagd reproduce`.
#[derive(Args, Debug, Clone, Serialize)]
pub struct ReproduceArgs {
    /// The default: the paper's E1, 5 of the 30 replications per 1-D case of Table 1, the small
    /// high-dimensional default and a short E3 demonstration, each table saying so.
    #[arg(long, conflicts_with = "full", help = quick_help())]
    quick: bool,
    /// The paper's settings: 30 replications per 1-D case and the high-dimensional case's
    /// 10000 + 1000 epochs (hours on a CPU; the estimate is printed before it starts).
    #[arg(long)]
    full: bool,
    /// Seconds instead of minutes, for tests: every experiment at a toy scale.
    #[arg(long, hide = true, conflicts_with_all = ["quick", "full"])]
    tiny: bool,
    /// Output folder: the report, and each experiment's own folder.
    #[arg(long, default_value = "out/reproduce")]
    out: PathBuf,
    /// Experiments to run, comma-separated: e1 (Figure 1), e2 (Table 1 and Figure 2), e3 (MNIST).
    #[arg(long, value_delimiter = ',', default_values_t = plan::Part::ALL)]
    only: Vec<plan::Part>,
    /// Keep pre-trained networks here and reuse them (default: OUT/cache).
    #[arg(long)]
    pretrained_cache: Option<PathBuf>,
    /// No progress output.
    #[arg(long)]
    quiet: bool,
    /// Make the named experiment fail (to check that the others still run).
    #[arg(long, hide = true)]
    fail: Option<String>,
    /// Stop each training phase after this many updates of this run (tests of resume).
    #[arg(long, hide = true)]
    interrupt_after: Option<usize>,
    /// Where the networks of E2 and E3 train: cpu, or cuda (cuda:N) for an NVIDIA GPU with
    /// CUDA 13's libraries on the loader's path. Evaluation stays on the CPU.
    #[arg(long, default_value_t = sagd_nn::Device::Cpu)]
    device: sagd_nn::Device,
}

/// How one experiment ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    /// It ran (or was finished by an earlier run with the same flags).
    Done,
    /// It failed; the others still ran.
    Failed,
    /// Not available in this version.
    Unavailable,
}

/// One experiment's part of the report: what was run, how it went, its tables and figures.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Record {
    /// Short name, also its folder under OUT.
    pub name: String,
    /// What the paper calls it.
    pub title: String,
    /// How it ended.
    pub status: Status,
    /// Why it failed or is unavailable.
    pub error: Option<String>,
    /// What was run relative to the paper.
    pub scale: String,
    /// The settings and seeds (as the experiment's `result.json` records them).
    pub settings: serde_json::Value,
    /// Fingerprint of the settings: a rerun reuses a finished record only when it matches.
    pub key: String,
    /// Wall seconds.
    pub time_s: f64,
    /// Tables: a header and rows of cells, already formatted.
    pub tables: Vec<Table>,
    /// Figures, relative to OUT.
    pub figures: Vec<String>,
    /// Sentences that say how to read the tables.
    pub notes: Vec<String>,
    /// The numbers behind the tables.
    pub summary: serde_json::Value,
    /// Whether this run reused the record of an earlier run with the same flags.
    #[serde(default)]
    pub reused: bool,
    /// The FNV-1a hash of each file the report embeds (`result.json` and the figures, relative
    /// to OUT) when the experiment finished: a rerun reuses the record only while every one is
    /// unchanged. Empty in records from before the hashes (those are reused as they were).
    #[serde(default)]
    pub hashes: std::collections::BTreeMap<String, String>,
}

/// The FNV-1a hash of the file at `path`, in hexadecimal; `None` if it cannot be read.
fn file_hash(path: &Path) -> Option<String> {
    let bytes = std::fs::read(path).ok()?;
    Some(format!(
        "{:016x}",
        sagd::run::fnv1a(sagd::run::FNV_OFFSET, bytes)
    ))
}

/// The files of experiment `name` that the report embeds, relative to OUT.
fn embedded(rec: &Record) -> Vec<String> {
    let mut files = rec.figures.clone();
    files.push(format!("{}/result.json", rec.name));
    files
}

/// A table of the report.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Table {
    /// Its caption.
    pub caption: String,
    /// Column headers.
    pub header: Vec<String>,
    /// Rows of cells.
    pub rows: Vec<Vec<String>>,
}

/// Runs `sagd reproduce`.
pub fn run(a: ReproduceArgs) -> Result<()> {
    let t_all = Instant::now();
    let mode = match (a.full, a.tiny) {
        (true, _) => Mode::Full,
        (_, true) => Mode::Tiny,
        _ => Mode::Quick,
    };
    let plan = plan::plan(mode, &a.only);
    if plan.iter().all(|e| e.kind == Kind::Unavailable) {
        bail!("--only: nothing to run; use e1, e2 or e3");
    }
    // Before any work: a missing GPU or library is a flag's error.
    a.device
        .ready()
        .with_context(|| format!("--device {}", a.device))?;
    std::fs::create_dir_all(&a.out)
        .with_context(|| format!("cannot create the output folder {}", a.out.display()))?;
    // Ctrl-C ends the run at once, as it would anyway, but says how to pick it up again.
    let again: Vec<String> = std::env::args().collect();
    let again = again.join(" ");
    ctrlc::set_handler(move || {
        say_err!(
            "\ninterrupted: run the same command again to resume (`{again}`): finished experiments are reused, E2 and E3 go on from their last checkpoint (every 100 updates), pre-trained networks come from the cache"
        );
        std::process::exit(130);
    })
    .ok();
    let threads = rayon::current_num_threads();
    // What an earlier run finished is reused, and costs nothing.
    let mut earlier: Vec<Option<Record>> = plan.iter().map(|e| finished(e, &a)).collect();
    let reused_now: Vec<bool> = earlier.iter().map(Option::is_some).collect();
    let reused = reused_now.iter().filter(|r| **r).count();
    let cache = a
        .pretrained_cache
        .clone()
        .unwrap_or_else(|| a.out.join("cache"));
    crate::output::writable_folder(&cache, "--pretrained-cache")?;
    // The plan's unit costs scaled to this machine by a measurement of a few seconds (cached);
    // a toy plan is not worth it, and without one they are scaled by the kernels' path.
    let speed = match mode {
        Mode::Tiny => None,
        _ => Some(Speed::here(&cache)),
    };
    let estimates: Vec<f64> = plan
        .iter()
        .zip(&reused_now)
        .map(|(e, reused)| match (reused, &speed) {
            (true, _) => 0.0,
            (false, Some(Ok((s, _)))) => e.estimate_measured(threads, s),
            (false, _) => e.estimate_s(threads),
        })
        .collect();
    let estimate: f64 = estimates.iter().sum();
    let resuming = resuming(&plan, &reused_now, &a.out);
    if !a.quiet {
        let estimate = Estimate {
            seconds: estimate,
            reused,
            resuming,
            speed: &speed,
        };
        announce(&a, mode, plan.len(), threads, &estimate);
    }
    let ticker = progress::Ticker::new(a.quiet, &plan, &estimates);
    let mut records = Vec::new();
    for (i, e) in plan.iter().enumerate() {
        let bar = ticker.start(i);
        let r = run_one(e, earlier[i].take(), &a, &cache, &bar);
        ticker.finish(i);
        records.push(r);
    }
    drop(ticker);
    let machine = report::Machine::here(threads);
    let failed = records
        .iter()
        .filter(|r| r.status == Status::Failed)
        .count();
    let files = report::write(
        &a.out,
        mode,
        &machine,
        &records,
        t_all.elapsed().as_secs_f64(),
    )?;
    print_outcomes(&records);
    say!("wrote {}: {}", a.out.display(), files.join(", "));
    if failed > 0 {
        bail!(
            "{failed} experiment(s) failed; the report says why: {}",
            a.out.join("report.html").display()
        );
    }
    Ok(())
}

/// How many experiments not finished earlier go on from their checkpoints. The plan does not know
/// how far they got, so their whole estimate counts (the eta during the run counts only what is
/// left).
fn resuming(plan: &[Experiment], reused: &[bool], out: &Path) -> usize {
    plan.iter()
        .zip(reused)
        .filter(|(e, reused)| {
            !**reused && out.join(&e.name).join(crate::output::CHECKPOINTS).is_dir()
        })
        .count()
}

/// The plan's estimated time, and what it rests on.
struct Estimate<'a> {
    seconds: f64,
    /// Experiments finished earlier, reused.
    reused: usize,
    /// Experiments that go on from their checkpoints (their whole estimate counts).
    resuming: usize,
    /// The plan's unit costs measured on this machine (cached or not), or why not; `None` for a
    /// toy plan.
    speed: &'a Option<Result<(Speed, bool)>>,
}

/// The run's first line: what runs, where, and how long it should take, on what basis.
fn announce(a: &ReproduceArgs, mode: Mode, experiments: usize, threads: usize, e: &Estimate) {
    let reuse = match e.reused {
        0 => String::new(),
        k => format!(" ({k} finished earlier, reused)"),
    };
    let bound = if e.resuming > 0 { "at most " } else { "" };
    let resumed = match e.resuming {
        0 => String::new(),
        k => {
            format!("; {k} resume from checkpoints, whose finished part this estimate still counts")
        }
    };
    let path = sagd::cpu::capability();
    let basis = match e.speed {
        Some(Ok((s, cached))) => format!(
            "measured on this CPU's {} kernels{}: {:.2}× the timed machine's time on E2's work, {:.2}× on E3's",
            path.name(),
            if *cached { ", cached" } else { "" },
            s.e2,
            s.e3
        ),
        Some(Err(e)) => format!("the measurement failed ({e:#}): from timings on a 2-core machine with AVX-512"),
        None => match path {
            sagd::cpu::Capability::Avx512 => "from timings on a 2-core machine with AVX-512, as this CPU".to_string(),
            sagd::cpu::Capability::Avx2 => "from timings on a 2-core machine, scaled to this CPU's AVX2 kernels".to_string(),
            sagd::cpu::Capability::Portable => "from timings on a 2-core machine with AVX-512; this CPU runs the portable kernels, several times slower, not timed".to_string(),
        },
    };
    say_err!(
        "sagd reproduce ({}): {} experiment(s){reuse} into {}; estimated {bound}{} on {threads} threads ({basis}{resumed})",
        mode.name(),
        experiments,
        a.out.display(),
        progress::duration(e.seconds),
    );
}

/// Each experiment's outcome, a line each.
fn print_outcomes(records: &[Record]) {
    for r in records {
        let how = match (r.status, r.reused) {
            (Status::Done, true) => "done (finished earlier, reused)".to_string(),
            (Status::Done, false) => format!("done in {}", progress::duration(r.time_s)),
            (Status::Failed, _) => format!("FAILED: {}", r.error.as_deref().unwrap_or("")),
            (Status::Unavailable, _) => "not available".to_string(),
        };
        say!("{:12} {how}", r.name);
    }
}

/// The key under which an experiment's finished record is reused: its settings, and the device
/// (a GPU rounds otherwise, so its results are not the CPU's to reuse).
fn run_key(e: &Experiment, a: &ReproduceArgs) -> String {
    match a.device {
        sagd_nn::Device::Cpu => e.key(),
        d => format!("{}-{d}", e.key()),
    }
}

/// The file, in each experiment's folder, recording that it finished and what it found.
const RECORD: &str = "reproduce.record";

/// The record of an earlier run of `e` with the same key, if it finished.
fn finished(e: &Experiment, a: &ReproduceArgs) -> Option<Record> {
    let dir = a.out.join(&e.name);
    let key = run_key(e, a);
    let path = dir.join(RECORD);
    if !path.exists() {
        return None;
    }
    // In the checksummed frame of checkpoints and caches: a damaged record is not trusted, and
    // the experiment runs again.
    let record = sagd::run::read_framed(&path)
        .map_err(|err| say_err!("warning: {err}; {} runs again", e.name))
        .ok()?;
    // Every embedded file as it was when the experiment finished: one that another run wrote
    // over (or a hand edit) makes the experiment run again.
    serde_json::from_slice::<Record>(&record)
        .ok()
        .filter(|r| r.key == key && r.status == Status::Done && dir.join("result.json").exists())
        .filter(|r| {
            r.hashes
                .iter()
                .all(|(f, h)| file_hash(&a.out.join(f)).as_ref() == Some(h))
        })
}

/// One experiment, isolated: its failure becomes its record; `earlier`, the record of an
/// earlier run that finished it, is reused.
fn run_one(
    e: &Experiment,
    earlier: Option<Record>,
    a: &ReproduceArgs,
    cache: &Path,
    bar: &indicatif::ProgressBar,
) -> Record {
    let dir = a.out.join(&e.name);
    let key = run_key(e, a);
    let mut rec = Record {
        name: e.name.clone(),
        title: e.title.clone(),
        status: Status::Unavailable,
        error: None,
        scale: e.scale.clone(),
        settings: e.settings_json(),
        key: key.clone(),
        time_s: 0.0,
        tables: Vec::new(),
        figures: Vec::new(),
        notes: Vec::new(),
        summary: serde_json::Value::Null,
        reused: false,
        hashes: Default::default(),
    };
    if e.kind == Kind::Unavailable {
        rec.error = Some(e.scale.clone());
        return rec;
    }
    let state = dir.join(RECORD);
    if let Some(done) = earlier {
        // What a dead run left beside the finished result goes, as any run's start removes it.
        crate::output::clean_dead(&dir);
        bar.finish_and_clear();
        return Record {
            reused: true,
            ..done
        };
    }
    let t0 = Instant::now();
    let outcome = if a.fail.as_deref() == Some(e.name.as_str()) {
        Err(anyhow::anyhow!("forced failure (--fail {})", e.name))
    } else {
        plan::execute(e, &dir, cache, a.device, a.interrupt_after, bar, &mut rec)
    };
    rec.time_s = t0.elapsed().as_secs_f64();
    match outcome {
        Ok(()) => {
            rec.status = Status::Done;
            rec.hashes = embedded(&rec)
                .into_iter()
                .filter_map(|f| file_hash(&a.out.join(&f)).map(|h| (f, h)))
                .collect();
            // Only a whole record marks the experiment finished.
            if let Ok(text) = serde_json::to_vec_pretty(&rec) {
                sagd::run::write_framed(&state, &text).ok();
            }
        }
        Err(err) => {
            rec.status = Status::Failed;
            rec.error = Some(format!("{err:#}"));
        }
    }
    rec
}
