//! The parametric bootstraps' refits (`--bootstrap`, `--compare-bootstrap`) run in parts, each
//! part's outcomes kept in OUT/checkpoints (`--checkpoint-every N` refits): a bootstrap stopped
//! by Ctrl-C or `--interrupt-after` goes on with `--resume` where it stopped, and ends with the
//! same replicates as an uninterrupted run (each draw's response and refit come from a stream of
//! its own, whatever the part).

use std::ops::Range;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use anyhow::{bail, Context, Result};
use sagd::glmm::refits::{in_parts, Keeping};
use sagd::run::{Control, Identity};

use crate::output::Checkpointing;
use crate::progress::progress_bar;

pub(super) use sagd::glmm::refits::{Outcome, Part};

/// A bootstrap's outcomes, one per draw, and how many of them a resumed run took from the
/// checkpoint of the run it resumed (the same outcomes as an uninterrupted run's).
pub(super) struct Refitted {
    pub(super) outcomes: Vec<Outcome>,
    pub(super) resumed: usize,
}

impl Refitted {
    /// The words a summary adds about the refits an interrupted run kept (none if none).
    pub(super) fn note(resumed: usize) -> String {
        match resumed {
            0 => String::new(),
            k => format!("; {k} draws taken from an interrupted run's checkpoint"),
        }
    }
}

/// How the bootstraps of a run keep their refits: where, how often, when to stop.
pub(super) struct Refits {
    /// OUT/checkpoints, where the run checkpoints.
    dir: Option<PathBuf>,
    every: usize,
    resume: bool,
    interrupt_after: Option<usize>,
    /// Set by Ctrl-C while refits are kept.
    stop: Arc<AtomicBool>,
    quiet: bool,
}

impl Refits {
    /// The keeping that the flags `c` ask for, into the checkpoints folder `dir` (where they ask
    /// for one).
    pub(super) fn new(c: &Checkpointing, dir: Option<PathBuf>, quiet: bool) -> Refits {
        Refits {
            dir,
            every: c.checkpoint_every,
            resume: c.resume,
            interrupt_after: c.interrupt_after,
            stop: Arc::new(AtomicBool::new(false)),
            quiet,
        }
    }

    /// From the first bootstrap on, where refits are kept: Ctrl-C stops a bootstrap after the
    /// refits under way, keeps them and says how to go on; a second Ctrl-C ends the run at once.
    /// Before (in the fits) Ctrl-C keeps its default, ending the run at once.
    fn watch_ctrl_c(&self) {
        let flag = Arc::clone(&self.stop);
        // A second call finds the handler set (on the same flag) and leaves it.
        let _ = ctrlc::set_handler(move || {
            if flag.swap(true, Ordering::Relaxed) {
                std::process::exit(130);
            }
            eprintln!("\nstopping: the refits under way finish and are kept (Ctrl-C again ends the run now)");
        });
    }

    /// Every outcome of `draws` draws, `what` on the progress bar: those a resumed run's
    /// checkpoint `name`.ckpt (of the run `identity`) holds, the others from `part(range,
    /// on_refit)`, run in parts of --checkpoint-every draws, each part kept. A stop (Ctrl-C,
    /// --interrupt-after) keeps what was refitted and ends the run with how to go on.
    pub(super) fn run(
        &self,
        (name, what): (&str, &str),
        identity: Identity,
        draws: usize,
        part: impl Fn(Range<usize>, &(dyn Fn() -> Control + Sync)) -> sagd::error::Result<Part>,
    ) -> Result<Refitted> {
        let path = self.dir.as_ref().map(|d| d.join(format!("{name}.ckpt")));
        if path.is_some() {
            self.watch_ctrl_c();
        }
        let keeping = path.as_deref().map(|path| Keeping {
            path,
            every: self.every,
            resume: self.resume,
        });
        let bar = progress_bar(self.quiet, draws as u64);
        bar.set_message(what.to_string());
        let refitted = AtomicUsize::new(0);
        let on_refit = || {
            bar.inc(1);
            let n = refitted.fetch_add(1, Ordering::Relaxed) + 1;
            let asked = self.stop.load(Ordering::Relaxed);
            match self.interrupt_after {
                _ if asked => Control::Stop,
                Some(k) if n >= k => Control::Stop,
                _ => Control::Continue,
            }
        };
        let resumed = |kept: usize| bar.set_position(kept as u64);
        let (done, kept) = in_parts(keeping, &identity, draws, resumed, |range| {
            part(range, &on_refit)
        })
        .context("--resume")?;
        if done.iter().any(Option::is_none) {
            bar.abandon();
            let finished = done.iter().filter(|o| o.is_some()).count();
            let at = path
                .as_ref()
                .map_or(String::new(), |p| format!(", kept in {}", p.display()));
            bail!(
                "interrupted: {what}: {finished} of {draws} done{at}: rerun the same command with --resume to go on"
            );
        }
        bar.finish_and_clear();
        Ok(Refitted {
            outcomes: done.into_iter().flatten().collect(),
            resumed: kept,
        })
    }
}
