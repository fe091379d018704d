//! A bootstrap's refits run in parts, each part's outcomes kept in a checkpoint file: a run
//! stopped between parts goes on where it stopped and ends with the outcomes of an uninterrupted
//! run (draw d's response and refit come from a stream of its own, whatever the part:
//! [`Glmm::bootstrap_draws`](super::Glmm::bootstrap_draws)). The plumbing that `sagd glmm
//! --checkpoint-every` and Python's `sagd.glmm(..., checkpoint=)` share.

use std::ops::Range;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::error::{invalid, Result};
use crate::run::{decode, encode, read_framed, write_framed, Identity};

/// One draw's outcome as the results keep it: the refit's values (the summary's estimates, or
/// the test's statistic), or why its refit failed.
pub type Outcome = std::result::Result<Vec<f64>, String>;

/// The outcomes of a range of draws, `None` where a stop left a draw not begun.
pub type Part = Vec<Option<Outcome>>;

/// Where a bootstrap keeps its refits, and how.
#[derive(Clone, Copy, Debug)]
pub struct Keeping<'a> {
    /// The checkpoint file.
    pub path: &'a Path,
    /// Draws per part (each part's outcomes written when it ends); 0: the whole run as one.
    pub every: usize,
    /// Whether to go on from what `path` holds (if it exists).
    pub resume: bool,
}

/// What a checkpoint holds: the run it belongs to, and each draw's outcome so far.
#[derive(Serialize, Deserialize)]
struct Saved {
    identity: Identity,
    done: Part,
}

/// Every outcome of `draws` draws (those a resumed checkpoint holds, the others from
/// `part(range)`, run in parts of `keeping.every`, each part written to the checkpoint where
/// there is one), and how many came from the checkpoint (told to `resumed` before any part
/// runs). A part that returns a `None` (a stop)
/// ends the run after it is written: the outcomes then hold `None` for the draws not done.
/// The run's `identity` (its settings) is written with the outcomes, and a checkpoint of
/// another run is refused, naming what differs.
pub fn in_parts(
    keeping: Option<Keeping<'_>>,
    identity: &Identity,
    draws: usize,
    resumed: impl FnOnce(usize),
    mut part: impl FnMut(Range<usize>) -> Result<Part>,
) -> Result<(Part, usize)> {
    let identity = identity.clone().with("draws", &draws)?;
    let mut done = match keeping {
        Some(k) if k.resume && k.path.exists() => read(k.path, &identity, draws)?,
        _ => vec![None; draws],
    };
    let kept = done.iter().filter(|o| o.is_some()).count();
    resumed(kept);
    let size = match keeping {
        Some(k) if k.every > 0 => k.every,
        _ => draws,
    };
    for range in parts(&done, size) {
        let start = range.start;
        let outcomes = part(range)?;
        let stopped = outcomes.iter().any(Option::is_none);
        for (slot, o) in done[start..].iter_mut().zip(outcomes) {
            *slot = o;
        }
        if let Some(k) = keeping {
            let saved = Saved {
                identity: identity.clone(),
                done: done.clone(),
            };
            write_framed(k.path, &encode(&saved)?)?;
        }
        if stopped {
            break;
        }
    }
    Ok((done, kept))
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
fn read(path: &Path, identity: &Identity, draws: usize) -> Result<Part> {
    let saved: Saved = decode(&read_framed(path)?)?;
    let mut differ = saved.identity.differences(identity);
    if differ.is_empty() && saved.done.len() != draws {
        differ.push("draws".into());
    }
    if !differ.is_empty() {
        return Err(invalid(
            "checkpoint",
            format!(
                "{} holds the refits of a run that differs in {}",
                path.display(),
                differ.join(", ")
            ),
            "go on with that run's settings, or start afresh",
        ));
    }
    Ok(saved.done)
}

#[cfg(test)]
mod tests {
    use super::*;

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

    /// A run stopped in its second part keeps its first two parts' outcomes and the stopped
    /// part's; resumed, it asks only for the rest and ends with an uninterrupted run's outcomes.
    #[test]
    fn a_stopped_run_goes_on_from_its_checkpoint() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("bootstrap.ckpt");
        let keep = |resume| Keeping {
            path: &path,
            every: 3,
            resume,
        };
        let id = Identity::new().with("seed", &1u64).unwrap();
        let outcome = |d: usize| Some(Ok(vec![d as f64]));
        let whole = in_parts(None, &id, 8, |_| {}, |r| Ok(r.map(outcome).collect())).unwrap();
        let stop_at = 4;
        let (first, kept) = in_parts(
            Some(keep(false)),
            &id,
            8,
            |_| {},
            |r| {
                Ok(r.map(|d| if d < stop_at { outcome(d) } else { None })
                    .collect())
            },
        )
        .unwrap();
        assert_eq!(kept, 0);
        assert_eq!(first.iter().filter(|o| o.is_some()).count(), stop_at);
        let mut asked = Vec::new();
        let mut told = None;
        let (resumed, kept) = in_parts(
            Some(keep(true)),
            &id,
            8,
            |k| told = Some(k),
            |r| {
                asked.push(r.clone());
                Ok(r.map(outcome).collect())
            },
        )
        .unwrap();
        assert_eq!(
            (kept, told, asked),
            (stop_at, Some(stop_at), vec![4..7, 7..8])
        );
        assert_eq!(resumed, whole.0);
    }

    #[test]
    fn a_checkpoint_of_another_run_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("bootstrap.ckpt");
        let id = |seed: u64| Identity::new().with("seed", &seed).unwrap();
        let identity = id(1).with("draws", &2usize).unwrap();
        let saved = Saved {
            identity: identity.clone(),
            done: vec![Some(Ok(vec![0.5])), None],
        };
        write_framed(&path, &encode(&saved).unwrap()).unwrap();
        assert_eq!(read(&path, &identity, 2).unwrap(), saved.done);
        let other = id(2).with("draws", &2usize).unwrap();
        let err = read(&path, &other, 2).unwrap_err().to_string();
        assert!(err.contains("differs in seed"), "{err}");
        std::fs::write(&path, "not a checkpoint").unwrap();
        let err = read(&path, &identity, 2).unwrap_err().to_string();
        assert!(err.contains("not a sagd checkpoint"), "{err}");
    }
}
