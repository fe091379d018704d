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
use sagd::run::{Control, Identity};
use serde::{Deserialize, Serialize};

use crate::output::Checkpointing;
use crate::progress::progress_bar;

/// One draw's outcome as the results keep it: the refit's values (the summary's estimates, or
/// the test's statistic), or why its refit failed.
pub(super) type Outcome = std::result::Result<Vec<f64>, String>;

/// The outcomes of the draws of a part, `None` where a stop left a draw not begun.
pub(super) type Part = Vec<Option<Outcome>>;

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

/// What a bootstrap's checkpoint holds: the run it belongs to, and each draw's outcome so far.
#[derive(Serialize, Deserialize)]
struct Saved {
    identity: Identity,
    done: Part,
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
        let identity = identity.with("draws", &draws)?;
        let path = self.dir.as_ref().map(|d| d.join(format!("{name}.ckpt")));
        if path.is_some() {
            self.watch_ctrl_c();
        }
        let mut done = match &path {
            Some(p) if self.resume && p.exists() => read(p, &identity, draws)?,
            _ => vec![None; draws],
        };
        let kept = done.iter().filter(|o| o.is_some()).count();
        let bar = progress_bar(self.quiet, draws as u64);
        bar.set_message(what.to_string());
        bar.set_position(kept as u64);
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
        let size = match (&path, self.every) {
            (Some(_), every) if every > 0 => every,
            _ => draws,
        };
        for range in parts(&done, size) {
            let start = range.start;
            let outcomes = part(range, &on_refit)?;
            let stopped = outcomes.iter().any(Option::is_none);
            for (slot, o) in done[start..].iter_mut().zip(outcomes) {
                *slot = o;
            }
            if let Some(p) = &path {
                let saved = Saved {
                    identity: identity.clone(),
                    done: done.clone(),
                };
                sagd::run::write_framed(p, &sagd::run::encode(&saved)?)?;
            }
            if stopped {
                bar.abandon();
                let kept = done.iter().filter(|o| o.is_some()).count();
                let at = path
                    .as_ref()
                    .map_or(String::new(), |p| format!(", kept in {}", p.display()));
                bail!(
                    "interrupted: {what}: {kept} of {draws} done{at}: rerun the same command with --resume to go on"
                );
            }
        }
        bar.finish_and_clear();
        Ok(Refitted {
            outcomes: done.into_iter().flatten().collect(),
            resumed: kept,
        })
    }
}

/// The ranges of the draws not yet done, each at most `size` draws.
fn parts(done: &[Option<Outcome>], size: usize) -> Vec<Range<usize>> {
    let mut out: Vec<Range<usize>> = Vec::new();
    for d in (0..done.len()).filter(|&d| done[d].is_none()) {
        match out.last_mut() {
            Some(r) if r.end == d && r.len() < size => r.end += 1,
            _ => out.push(d..d + 1),
        }
    }
    out
}

/// The outcomes kept at `path`, refused where another run (another `identity`) wrote them.
fn read(path: &std::path::Path, identity: &Identity, draws: usize) -> Result<Part> {
    let bytes = sagd::run::read_framed(path).context("--resume")?;
    let saved: Saved =
        sagd::run::decode(&bytes).with_context(|| format!("--resume: {}", path.display()))?;
    let mut differ = saved.identity.differences(identity);
    if differ.is_empty() && saved.done.len() != draws {
        differ.push("draws".into());
    }
    if !differ.is_empty() {
        bail!(
            "--resume: {} holds the refits of a run that differs in {}: rerun with that run's flags, or leave out --resume to start afresh",
            path.display(),
            differ.join(", ")
        );
    }
    Ok(saved.done)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::output::write_atomic;

    #[test]
    fn parts_cover_the_draws_not_done_in_order() {
        let mut done: Vec<Option<Outcome>> = vec![None; 10];
        assert_eq!(parts(&done, 4), vec![0..4, 4..8, 8..10]);
        for d in [0, 1, 5] {
            done[d] = Some(Ok(vec![1.0]));
        }
        done[6] = Some(Err("failed".into()));
        assert_eq!(parts(&done, 4), vec![2..5, 7..10]);
        assert_eq!(parts(&done, 100), vec![2..5, 7..10]);
        assert!(parts(&vec![Some(Ok(vec![])); 3], 2).is_empty());
    }

    #[test]
    fn a_checkpoint_of_another_run_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("bootstrap.ckpt");
        let id = |seed: u64| Identity::new().with("seed", &seed).unwrap();
        let saved = Saved {
            identity: id(1),
            done: vec![Some(Ok(vec![0.5])), None],
        };
        sagd::run::write_framed(&path, &sagd::run::encode(&saved).unwrap()).unwrap();
        assert_eq!(read(&path, &id(1), 2).unwrap(), saved.done);
        let err = format!("{:#}", read(&path, &id(2), 2).unwrap_err());
        assert!(err.contains("differs in seed"), "{err}");
        let err = format!("{:#}", read(&path, &id(1), 3).unwrap_err());
        assert!(err.contains("--resume"), "{err}");
        write_atomic(&path, "not a checkpoint").unwrap();
        let err = format!("{:#}", read(&path, &id(1), 2).unwrap_err());
        assert!(err.contains("not a sagd checkpoint"), "{err}");
    }
}
