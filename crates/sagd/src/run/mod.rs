//! The one loop of the project. Every iterative job — Algorithm 1 on a [`Problem`], automated EM,
//! the training of a network by a gradient estimator — is a [`Solver`]: an `init` of its own, then
//! [`Solver::next_iter`] until [`Solver::terminate`]. The [`Runner`] owns the loop: it calls the
//! observers after every iteration (progress, history, traces, early stop) and writes and reads
//! checkpoints, so that a run stopped and resumed ends bit for bit where an uninterrupted one does.
//!
//! A checkpoint holds the job's identity (its settings and data, as bytes), the state, whatever
//! the solver keeps outside the state (a gradient estimator's chains) and each observer's snapshot,
//! followed by a checksum of all of it. It is written to a temporary file named for the process
//! and renamed into place, so a reader sees the old checkpoint or the new one, never half of one.

use std::marker::PhantomData;
use std::path::{Path, PathBuf};

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::error::{Result, SagdError};
use crate::model::Problem;
use crate::real::Real;
use crate::solver::{IterInfo, Sagd, SagdState};

mod framed;
#[doc(hidden)]
pub use framed::{
    decode, encode, fnv1a, process_alive, read_framed, remove_temporaries, write_framed, FNV_OFFSET,
};

/// An observer's answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Control {
    /// Go on.
    Continue,
    /// Stop after this iteration (a checkpoint is written first, if there is one).
    Stop,
}

/// An iterative job (argmin's `Solver`): the [`Runner`] calls `next_iter` until `terminate`.
pub trait Solver {
    /// Everything the job needs to continue; saved in checkpoints.
    type State: Serialize + DeserializeOwned;
    /// What one iteration did, for the observers.
    type Info;

    /// What identifies the job (its settings, seed, data, the program's version): a checkpoint is
    /// resumed only by a job with the same identity, and a refusal names the parts that differ.
    fn identity(&self) -> Result<Identity>;
    /// One iteration.
    fn next_iter(&mut self, state: &mut Self::State) -> Result<Self::Info>;
    /// Whether the job is done.
    fn terminate(&self, state: &Self::State) -> bool;
    /// Iterations done so far (counts checkpoints).
    fn iterations(&self, state: &Self::State) -> usize;
    /// Whether the state is at a natural boundary (the end of an M-step) where a checkpoint is
    /// written whatever the cadence.
    fn at_boundary(&self, _state: &Self::State) -> bool {
        false
    }
    /// What the solver itself keeps between iterations outside the state (a gradient estimator's
    /// chains and streams), for checkpoints.
    fn snapshot(&self) -> Result<Vec<u8>> {
        Ok(Vec::new())
    }
    /// Restores [`Solver::snapshot`].
    fn restore(&mut self, _bytes: &[u8]) -> Result<()> {
        Ok(())
    }
    /// Brings `state` up to date where the solver keeps its working copy elsewhere (a GPU's
    /// memory): called by [`Runner::run`] before each checkpoint, before an observer that
    /// [reads the state](Observer::reads_state) sees it, and before it returns. Other observers
    /// may see the state as of the last synchronisation (their `Info` is current).
    fn sync(&mut self, _state: &mut Self::State) -> Result<()> {
        Ok(())
    }
}

/// The identity of a job: named parts, each encoded, compared part by part on resume.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Identity(Vec<(String, Vec<u8>)>);

impl Identity {
    /// An identity that starts with the program's version.
    pub fn new() -> Self {
        Identity(vec![(
            "program version".into(),
            env!("CARGO_PKG_VERSION").as_bytes().to_vec(),
        )])
    }

    /// Adds the part `name` with value `v`.
    pub fn with<V: Serialize + ?Sized>(mut self, name: &str, v: &V) -> Result<Self> {
        let bytes = postcard::to_allocvec(v).map_err(|e| SagdError::InvalidSetting {
            name: "checkpoint identity",
            value: name.to_string(),
            fix: format!("it cannot be encoded ({e}); custom schedules cannot be checkpointed"),
        })?;
        self.0.push((name.to_string(), bytes));
        Ok(self)
    }

    /// The names of the parts in which `other` differs from `self`.
    pub fn differences(&self, other: &Identity) -> Vec<String> {
        let mut names: Vec<String> = Vec::new();
        for (n, v) in &self.0 {
            if other.0.iter().find(|(m, _)| m == n).map(|(_, w)| w) != Some(v) {
                names.push(n.clone());
            }
        }
        for (n, _) in &other.0 {
            if !self.0.iter().any(|(m, _)| m == n) {
                names.push(n.clone());
            }
        }
        names
    }
}

/// Called after every iteration with the state and what the iteration did.
pub trait Observer<S, I> {
    /// Sees the state after the iteration.
    fn observe(&mut self, state: &S, info: &I) -> Control;
    /// Whether this observer reads the state after the iteration `info` describes (a learning
    /// curve at its points): the runner then brings the state up to date first
    /// ([`Solver::sync`]). `false` (the default): it may see the state of the last
    /// synchronisation where the solver keeps its working copy elsewhere (its `info` is current).
    fn reads_state(&self, _info: &I) -> bool {
        false
    }
    /// What the observer has gathered (a trace, a history), saved in checkpoints.
    fn snapshot(&self) -> Result<Vec<u8>> {
        Ok(Vec::new())
    }
    /// Restores [`Observer::snapshot`] on resume.
    fn restore(&mut self, _bytes: &[u8]) -> Result<()> {
        Ok(())
    }
}

impl<S, I, F: FnMut(&S, &I) -> Control> Observer<S, I> for F {
    fn observe(&mut self, state: &S, info: &I) -> Control {
        self(state, info)
    }
}

/// Where and how often to checkpoint.
#[derive(Clone, Debug, PartialEq)]
pub struct Checkpointing {
    /// The checkpoint file.
    pub path: PathBuf,
    /// Checkpoint after every `every` iterations (0: only at the end, at boundaries and on stop).
    pub every: usize,
}

/// How a run ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// The solver terminated.
    Finished,
    /// An observer stopped it.
    Stopped,
}

/// Drives a [`Solver`]: observers after each iteration, checkpoints.
pub struct Runner<'a, S: Solver> {
    /// The job.
    pub solver: S,
    observers: Vec<&'a mut dyn Observer<S::State, S::Info>>,
    checkpoint: Option<Checkpointing>,
}

impl<'a, S: Solver> Runner<'a, S> {
    /// A runner with no observers or checkpoints.
    pub fn new(solver: S) -> Self {
        Runner {
            solver,
            observers: Vec::new(),
            checkpoint: None,
        }
    }

    /// Adds an observer (called in the order added).
    pub fn observe(mut self, o: &'a mut dyn Observer<S::State, S::Info>) -> Self {
        self.observers.push(o);
        self
    }

    /// Checkpoints to `path` every `every` iterations, at the solver's boundaries, on a stop and
    /// at the end.
    pub fn checkpoint(mut self, path: impl Into<PathBuf>, every: usize) -> Self {
        self.checkpoint = Some(Checkpointing {
            path: path.into(),
            every,
        });
        self
    }

    /// Iterates until the solver terminates or an observer stops the run.
    pub fn run(&mut self, state: &mut S::State) -> Result<Outcome> {
        while !self.solver.terminate(state) {
            let info = self.solver.next_iter(state)?;
            if self.observers.iter().any(|o| o.reads_state(&info)) {
                self.solver.sync(state)?;
            }
            let mut stop = false;
            for o in self.observers.iter_mut() {
                stop |= o.observe(state, &info) == Control::Stop;
            }
            if let Some(c) = &self.checkpoint {
                let it = self.solver.iterations(state);
                let due = (c.every > 0 && it.is_multiple_of(c.every))
                    || self.solver.at_boundary(state)
                    || self.solver.terminate(state)
                    || stop;
                if due {
                    self.solver.sync(state)?;
                    self.save(&c.path, state)?;
                }
            }
            if stop {
                self.solver.sync(state)?;
                return Ok(Outcome::Stopped);
            }
        }
        self.solver.sync(state)?;
        Ok(Outcome::Finished)
    }

    /// Writes a checkpoint of `state` (and of the solver's and observers' own data) to `path`.
    pub fn save(&self, path: &Path, state: &S::State) -> Result<()> {
        let observers = self
            .observers
            .iter()
            .map(|o| o.snapshot())
            .collect::<Result<Vec<_>>>()?;
        let body = Body {
            identity: self.solver.identity()?,
            state,
            solver: self.solver.snapshot()?,
            observers,
        };
        let bytes = postcard::to_allocvec(&body).map_err(|e| SagdError::Checkpoint {
            path: path.display().to_string(),
            problem: format!("cannot be encoded ({e})"),
        })?;
        write_framed(path, &bytes)
    }

    /// Reads the checkpoint at `path` written by the same job: restores the solver's and the
    /// observers' data and returns the state to continue from.
    pub fn resume(&mut self, path: &Path) -> Result<S::State> {
        let bytes = read_framed(path)?;
        let bad = |problem: String| SagdError::Checkpoint {
            path: path.display().to_string(),
            problem,
        };
        let body: Body<S::State> = postcard::from_bytes(&bytes).map_err(|e| {
            bad(format!(
                "written by another kind of run ({e}): start afresh"
            ))
        })?;
        let differ = self.solver.identity()?.differences(&body.identity);
        if !differ.is_empty() {
            return Err(bad(format!(
                "it belongs to a run with other settings or data (differing: {}): resume with the same settings and data, or start afresh",
                differ.join(", ")
            )));
        }
        if body.observers.len() != self.observers.len() {
            return Err(bad(format!(
                "it has {} observers' data, this run {}: resume the same command",
                body.observers.len(),
                self.observers.len()
            )));
        }
        self.solver.restore(&body.solver)?;
        for (o, b) in self.observers.iter_mut().zip(&body.observers) {
            o.restore(b)?;
        }
        Ok(body.state)
    }
}

#[derive(Serialize, Deserialize)]
struct Body<S> {
    identity: Identity,
    state: S,
    solver: Vec<u8>,
    observers: Vec<Vec<u8>>,
}

/// Algorithm 1 on a [`Problem`] as a [`Solver`]: [`Sagd::next_iter`] until the stage has
/// `until` updates. Build it with [`Sagd::on`].
pub struct Algorithm1<'a, T, P: ?Sized> {
    /// The solver.
    pub sagd: &'a Sagd,
    /// The problem.
    pub problem: &'a P,
    /// Updates in the stage.
    pub until: usize,
    _t: PhantomData<T>,
}

impl Sagd {
    /// This solver on `problem` for `until` updates, for a [`Runner`].
    pub fn on<'a, T: Real, P: Problem<T> + ?Sized>(
        &'a self,
        problem: &'a P,
        until: usize,
    ) -> Algorithm1<'a, T, P> {
        Algorithm1 {
            sagd: self,
            problem,
            until,
            _t: PhantomData,
        }
    }
}

impl<T: Real, P: Problem<T> + ?Sized> Solver for Algorithm1<'_, T, P> {
    type State = SagdState<T>;
    type Info = IterInfo;

    fn identity(&self) -> Result<Identity> {
        let dims = [
            self.problem.theta_dim(),
            self.problem.n_chains(),
            self.problem.chain_dim(),
        ];
        Identity::new()
            .with("solver settings", &self.sagd.settings)?
            .with("problem sizes", &dims)
    }
    fn next_iter(&mut self, state: &mut SagdState<T>) -> Result<IterInfo> {
        self.sagd.next_iter(self.problem, state)
    }
    fn sync(&mut self, state: &mut SagdState<T>) -> Result<()> {
        state.chains.sync_streams()
    }

    fn terminate(&self, state: &SagdState<T>) -> bool {
        state.t >= self.until
    }
    fn iterations(&self, state: &SagdState<T>) -> usize {
        state.t
    }
}

/// The parameter path: θ_t, θ̂_t and the iteration info, one entry per update. An observer whose
/// record travels with checkpoints.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct History {
    /// θ_t after each update.
    pub theta: Vec<Vec<f64>>,
    /// The averaged iterate after each update.
    pub theta_avg: Vec<Vec<f64>>,
    /// What each update did.
    pub info: Vec<IterInfo>,
}

impl<T: Real> Observer<SagdState<T>, IterInfo> for History {
    fn observe(&mut self, state: &SagdState<T>, info: &IterInfo) -> Control {
        self.theta
            .push(state.theta.iter().map(|v| v.f64()).collect());
        self.theta_avg.push(state.theta_avg());
        self.info.push(*info);
        Control::Continue
    }
    fn snapshot(&self) -> Result<Vec<u8>> {
        encode(self)
    }
    fn restore(&mut self, bytes: &[u8]) -> Result<()> {
        *self = decode(bytes)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::framed::{write_file, FORMAT, MAGIC};
    use super::*;
    use proptest::prelude::*;
    use std::fs;

    /// A dead run's temporary goes; a live process's (another process of a split run writing the
    /// same file) stays, so that its rename still finds it.
    #[test]
    #[cfg(target_os = "linux")]
    fn only_dead_runs_temporaries_are_removed() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("mark");
        let parent = std::os::unix::process::parent_id();
        let live = dir.path().join(format!("mark.tmp-{parent}"));
        let dead = dir.path().join(format!("mark.tmp-{}", u32::MAX));
        let odd = dir.path().join("mark.tmp-x");
        for f in [&live, &dead, &odd] {
            fs::write(f, b"").unwrap();
        }
        write_file(&path, b"body").unwrap();
        assert!(live.exists());
        assert!(!dead.exists() && !odd.exists());
        assert!(read_framed(&path).is_ok());
    }

    /// Caches (E2's and E3's pre-trained networks) and `sagd reproduce`'s records hold their
    /// numbers as JSON text: each must read back with the bits it was written with, or a run
    /// reading a cache would drift by an ulp from one that trained. 246.25754200101917 came back
    /// one ulp low from serde_json's default parser. (Checkpoints are postcard, bit for bit.)
    #[test]
    fn numbers_read_back_from_json_with_their_bits() {
        let check = |x: f64| {
            let text = serde_json::to_string(&x).unwrap();
            let back: f64 = serde_json::from_str(&text).unwrap();
            assert_eq!(back.to_bits(), x.to_bits(), "{x:e} written as {text}");
        };
        check(246.257_542_001_019_17);
        proptest!(|(x in proptest::num::f64::NORMAL | proptest::num::f64::SUBNORMAL)| check(x));
    }

    /// Frames `body` as a checkpoint file would hold it.
    fn framed(body: &[u8]) -> Vec<u8> {
        let mut v = MAGIC.to_vec();
        v.extend(FORMAT.to_le_bytes());
        v.extend(body);
        v.extend(fnv1a(FNV_OFFSET, body.iter().copied()).to_le_bytes());
        v
    }

    fn read_bytes(bytes: &[u8]) -> Result<Body<SagdState<f64>>> {
        let dir = tempfile::tempdir().map_err(|source| SagdError::Io {
            action: "creating a folder",
            path: String::new(),
            source,
        })?;
        let path = dir.path().join("c");
        std::fs::write(&path, bytes).map_err(|source| SagdError::Io {
            action: "writing",
            path: String::new(),
            source,
        })?;
        let body = read_framed(&path)?;
        decode(&body)
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(10_000))]
        /// Whatever a checkpoint file holds — garbage, or a well-framed body of garbage — reading it
        /// gives a state or an error, never a panic; garbage never passes the checksum.
        #[test]
        fn any_bytes_give_a_state_or_an_error(body in proptest::collection::vec(any::<u8>(), 0..200)) {
            prop_assert!(read_bytes(&body).is_err());
            let _ = read_bytes(&framed(&body));
        }
    }

    #[test]
    fn a_flipped_bit_anywhere_is_refused() {
        let body = b"a body of some length, standing in for a state".to_vec();
        let good = framed(&body);
        assert_eq!(read_framed_bytes(&good), Some(body.clone()));
        for i in 0..good.len() {
            for bit in 0..8 {
                let mut bad = good.clone();
                bad[i] ^= 1 << bit;
                assert_eq!(read_framed_bytes(&bad), None, "byte {i}, bit {bit}");
            }
        }
    }

    /// A job whose working copy lives elsewhere (a device): `next_iter` counts there, `sync`
    /// brings the state up to it.
    struct Elsewhere<'c> {
        working: usize,
        syncs: &'c std::cell::Cell<usize>,
    }

    impl Solver for Elsewhere<'_> {
        type State = usize;
        type Info = usize;
        fn identity(&self) -> Result<Identity> {
            Ok(Identity::default())
        }
        fn next_iter(&mut self, _state: &mut usize) -> Result<usize> {
            self.working += 1;
            Ok(self.working)
        }
        fn terminate(&self, _state: &usize) -> bool {
            self.working >= 6
        }
        fn iterations(&self, _state: &usize) -> usize {
            self.working
        }
        fn sync(&mut self, state: &mut usize) -> Result<()> {
            self.syncs.set(self.syncs.get() + 1);
            *state = self.working;
            Ok(())
        }
    }

    /// A learning curve at every third iteration.
    struct EveryThird(Vec<(usize, usize)>);

    impl Observer<usize, usize> for EveryThird {
        fn observe(&mut self, state: &usize, info: &usize) -> Control {
            if info.is_multiple_of(3) {
                self.0.push((*info, *state));
            }
            Control::Continue
        }
        fn reads_state(&self, info: &usize) -> bool {
            info.is_multiple_of(3)
        }
    }

    /// An observer that reads the state sees it current at its points, synchronised only
    /// there (and at the end); one that does not sees the last synchronisation.
    #[test]
    fn observers_that_read_the_state_see_it_current() {
        let mut curve = EveryThird(Vec::new());
        let mut seen = Vec::new();
        let mut plain = |state: &usize, _: &usize| {
            seen.push(*state);
            Control::Continue
        };
        let syncs = std::cell::Cell::new(0);
        let job = Elsewhere {
            working: 0,
            syncs: &syncs,
        };
        let mut state = 0;
        let outcome = Runner::new(job)
            .observe(&mut curve)
            .observe(&mut plain)
            .run(&mut state)
            .unwrap();
        assert_eq!(outcome, Outcome::Finished);
        assert_eq!(curve.0, vec![(3, 3), (6, 6)]);
        assert_eq!(seen, vec![0, 0, 3, 3, 3, 6]);
        assert_eq!((state, syncs.get()), (6, 3));
    }

    fn read_framed_bytes(bytes: &[u8]) -> Option<Vec<u8>> {
        let dir = tempfile::tempdir().ok()?;
        let path = dir.path().join("c");
        std::fs::write(&path, bytes).ok()?;
        read_framed(&path).ok()
    }
}
