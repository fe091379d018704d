//! The loop that drives a solver: observers each iteration, a history that travels with checkpoints,
//! and checkpoint/resume that ends bit for bit where an uninterrupted run would.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::{Result, SagdError};
use crate::model::Problem;
use crate::real::Real;
use crate::solver::{IterInfo, Sagd, SagdSettings, SagdState};

/// An observer's answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Control {
    /// Go on.
    Continue,
    /// Stop after this iteration.
    Stop,
}

/// Called after every iteration.
pub trait Observer<T: Real> {
    /// Sees the state after the iteration and what it did.
    fn observe(&mut self, state: &SagdState<T>, info: &IterInfo) -> Control;
}

impl<T: Real, F: FnMut(&SagdState<T>, &IterInfo) -> Control> Observer<T> for F {
    fn observe(&mut self, state: &SagdState<T>, info: &IterInfo) -> Control {
        self(state, info)
    }
}

/// The parameter path: θ_t, θ̂_t and the iteration info, one entry per update. Saved in checkpoints.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct History {
    /// θ_t after each update.
    pub theta: Vec<Vec<f64>>,
    /// The averaged iterate after each update.
    pub theta_avg: Vec<Vec<f64>>,
    /// What each update did.
    pub info: Vec<IterInfo>,
}

impl<T: Real> Observer<T> for History {
    fn observe(&mut self, state: &SagdState<T>, info: &IterInfo) -> Control {
        self.theta
            .push(state.theta.iter().map(|v| v.f64()).collect());
        self.theta_avg.push(state.theta_avg.clone());
        self.info.push(*info);
        Control::Continue
    }
}

/// Where and how often to checkpoint.
#[derive(Clone, Debug, PartialEq)]
pub struct Checkpointing {
    /// The checkpoint file (written atomically: a temporary file, then a rename).
    pub path: PathBuf,
    /// Checkpoint after every `every` updates (0: only at the end).
    pub every: usize,
}

const MAGIC: &[u8; 8] = b"SAGDCKPT";
const FORMAT: u32 = 1;

#[derive(Serialize, Deserialize)]
#[serde(bound = "T: Real, A: Serialize + serde::de::DeserializeOwned")]
struct Checkpoint<T, A> {
    settings: Vec<u8>,
    state: SagdState<T>,
    history: History,
    app: A,
}

fn settings_bytes(settings: &SagdSettings, path: &Path) -> Result<Vec<u8>> {
    postcard::to_allocvec(settings).map_err(|e| SagdError::Checkpoint {
        path: path.display().to_string(),
        problem: format!(
            "the settings cannot be saved ({e}); custom schedules cannot be checkpointed"
        ),
    })
}

/// Writes a checkpoint: the solver's settings, the state, the history, and the application's own
/// data `app` (whatever it needs to resume, such as an outer loop's counters).
pub fn save_checkpoint<T: Real, A: Serialize>(
    path: &Path,
    settings: &SagdSettings,
    state: &SagdState<T>,
    history: &History,
    app: &A,
) -> Result<()> {
    #[derive(Serialize)]
    #[serde(bound = "T: Real, A: Serialize")]
    struct Out<'a, T, A> {
        settings: Vec<u8>,
        state: &'a SagdState<T>,
        history: &'a History,
        app: &'a A,
    }
    let body = postcard::to_allocvec(&Out {
        settings: settings_bytes(settings, path)?,
        state,
        history,
        app,
    })
    .map_err(|e| SagdError::Checkpoint {
        path: path.display().to_string(),
        problem: e.to_string(),
    })?;
    let io = |source| SagdError::Io {
        action: "writing checkpoint",
        path: path.display().to_string(),
        source,
    };
    let tmp = path.with_extension("tmp");
    {
        let mut f = fs::File::create(&tmp).map_err(io)?;
        f.write_all(MAGIC).map_err(io)?;
        f.write_all(&FORMAT.to_le_bytes()).map_err(io)?;
        f.write_all(&body).map_err(io)?;
        f.sync_all().map_err(io)?;
    }
    fs::rename(&tmp, path).map_err(io)
}

/// Reads a checkpoint written with the same `settings`; returns the state, history and app data.
pub fn load_checkpoint<T: Real, A: Serialize + serde::de::DeserializeOwned>(
    path: &Path,
    settings: &SagdSettings,
) -> Result<(SagdState<T>, History, A)> {
    let p = path.display().to_string();
    let bytes = fs::read(path).map_err(|source| SagdError::Io {
        action: "reading checkpoint",
        path: p.clone(),
        source,
    })?;
    let bad = |problem: String| SagdError::Checkpoint {
        path: p.clone(),
        problem,
    };
    if bytes.len() < 12 || &bytes[..8] != MAGIC {
        return Err(bad(
            "not a sagd checkpoint (wrong header): give the file that --checkpoint wrote".into(),
        ));
    }
    let format = u32::from_le_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]);
    if format != FORMAT {
        return Err(bad(format!(
            "format {format}, this version reads {FORMAT}: rerun from the start"
        )));
    }
    let ck: Checkpoint<T, A> = postcard::from_bytes(&bytes[12..]).map_err(|e| {
        bad(format!(
            "damaged or of another number type ({e}): rerun from the start"
        ))
    })?;
    if ck.settings != settings_bytes(settings, path)? {
        return Err(bad(
            "it was written with different settings: resume with the same settings, or start a new run".into(),
        ));
    }
    Ok((ck.state, ck.history, ck.app))
}

/// Drives a solver: calls the observers after each iteration, records the history, checkpoints.
pub struct Runner<'a, T: Real> {
    /// The solver.
    pub solver: &'a Sagd,
    /// Called after each iteration; any of them may stop the run.
    pub observers: Vec<&'a mut dyn Observer<T>>,
    /// Checkpointing, if any.
    pub checkpoint: Option<Checkpointing>,
    /// The parameter path so far (restored from a checkpoint on resume).
    pub history: History,
}

/// How a run ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// The state reached the requested number of updates.
    Finished,
    /// An observer stopped it.
    Stopped,
}

impl<'a, T: Real> Runner<'a, T> {
    /// A runner with no observers or checkpoints.
    pub fn new(solver: &'a Sagd) -> Self {
        Runner {
            solver,
            observers: Vec::new(),
            checkpoint: None,
            history: History::default(),
        }
    }

    /// Adds an observer.
    pub fn observe(mut self, o: &'a mut dyn Observer<T>) -> Self {
        self.observers.push(o);
        self
    }

    /// Checkpoints to `path` every `every` updates and at the end.
    pub fn checkpoint(mut self, path: impl Into<PathBuf>, every: usize) -> Self {
        self.checkpoint = Some(Checkpointing {
            path: path.into(),
            every,
        });
        self
    }

    /// Runs until the stage has `until` updates (state.t == until).
    pub fn run<P: Problem<T> + ?Sized>(
        &mut self,
        problem: &P,
        state: &mut SagdState<T>,
        until: usize,
    ) -> Result<Outcome> {
        while state.t < until {
            let info = self.solver.next_iter(problem, state)?;
            self.history.observe(state, &info);
            let mut stop = false;
            for o in self.observers.iter_mut() {
                stop |= o.observe(state, &info) == Control::Stop;
            }
            if let Some(c) = &self.checkpoint {
                if (c.every > 0 && state.t.is_multiple_of(c.every)) || state.t == until || stop {
                    save_checkpoint(&c.path, &self.solver.settings, state, &self.history, &())?;
                }
            }
            if stop {
                return Ok(Outcome::Stopped);
            }
        }
        Ok(Outcome::Finished)
    }

    /// Resumes from a checkpoint written by [`Runner::run`] with the same settings: returns the
    /// state, and restores the history into this runner.
    pub fn resume(&mut self, path: &Path) -> Result<SagdState<T>> {
        let (state, history, ()) = load_checkpoint(path, &self.solver.settings)?;
        self.history = history;
        Ok(state)
    }
}
