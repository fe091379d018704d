//! Network training: one [`Training`] job for every method, driven by the project's runner; the
//! methods differ only in their [`GradientEstimator`] — the bounds ([`BoundEstimator`]: VAE, IWAE)
//! or chains on the decoder's posterior ([`ChainEstimator`]: HMC, SAGD), and their twins on the
//! CUDA backend ([`GpuBoundEstimator`], [`GpuChainEstimator`]), each built on the device chosen
//! once by [`Estimator::on`]. The update is the core crate's [`UpdateRule`] with Adam.

mod bound;
mod chain;
mod chain_settings;
mod estimator;
mod gpu;

pub use crate::cuda::AdamStep;
pub use bound::BoundEstimator;
pub use chain::ChainEstimator;
pub use chain_settings::{ChainSchedule, HmcChains, LangevinChains};
pub use estimator::{encoder_draw, gather_rows, DeviceParams, Estimator, GradientEstimator};
pub(crate) use gpu::{last_pass, on_host, placed, BoundPass, DeviceState, Grads, OnDevice};
pub use gpu::{GpuBoundEstimator, GpuChainEstimator};

use std::path::PathBuf;

use rand::seq::SliceRandom;
use rand::SeedableRng;
use rand_xoshiro::Xoshiro256PlusPlus;
use sagd::error::{Result, SagdError};
use sagd::optim::{Averaging, Optimizer, Projection, UpdateRule, UpdateState};
use sagd::run::{Identity, Outcome, Runner, Solver};
use serde::{Deserialize, Serialize};

use crate::vae::{Vae, VaeParams};

/// How a network is trained: epochs of minibatches, one update of the parameters per batch by
/// the project's [`UpdateRule`] (Adam here) at a constant learning rate.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TrainSettings {
    /// Passes over the data.
    pub epochs: usize,
    /// Minibatch size (n or more: the full batch in order, one update per epoch).
    pub batch_size: usize,
    /// Adam's learning rate.
    pub lr: f64,
    /// The learning rate's decay along the run: lr_t = lr (1 + t)^−`lr_decay` at the t-th update
    /// (0: constant; ½: the α_t ∝ 1/√t of the paper's Theorem 3).
    #[serde(default)]
    pub lr_decay: f64,
    /// The parameters returned: the last iterate, or an average of the final iterates.
    pub averaging: Averaging,
}

/// The state of a training run: parameters, both update rules' states, the shuffling stream.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TrainState {
    /// The current iterate (decoder θ and encoder φ).
    pub params: VaeParams,
    /// The decoder's update-rule state (Adam's moments and counts).
    pub dec: UpdateState,
    /// The encoder's update-rule state.
    pub enc: UpdateState,
    rng: Xoshiro256PlusPlus,
    order: Vec<usize>,
    /// Updates taken.
    pub updates: usize,
    /// The loss estimate at the last update.
    pub loss: f64,
}

/// What one training update did.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TrainInfo {
    /// Updates taken (1-based count of this one).
    pub update: usize,
    /// Epochs completed, when this update completed one.
    pub epoch_done: Option<usize>,
    /// The loss estimate.
    pub loss: f64,
}

/// Training of a VAE's networks by a [`GradientEstimator`] as a [`Solver`] for the project's
/// [`Runner`]: every method of Table 1, and pre-training, go through it; they differ only in the
/// estimator. The estimator's own state (chains, streams) is checkpointed with the run.
pub struct Training<'a> {
    est: &'a mut dyn GradientEstimator,
    rule: UpdateRule,
    lr: f64,
    lr_decay: f64,
    n: usize,
    batch: usize,
    total: usize,
    identity: Identity,
    g_dec: Vec<f32>,
    g_enc: Vec<f32>,
    /// Adam's (β₁, β₂, ε) where an estimator may take the whole step on its device: plain Adam,
    /// no projection, the last iterate returned.
    device_adam: Option<(f64, f64, f64)>,
}

impl<'a> Training<'a> {
    /// Training of `vae` on `n` data points by `est`; `identity` names the run for checkpoints
    /// (its settings, seed and data).
    pub fn new(
        vae: &'a Vae,
        est: &'a mut dyn GradientEstimator,
        s: &TrainSettings,
        n: usize,
        identity: Identity,
    ) -> Result<Self> {
        let sizes = (vae.dec.n_params(), vae.enc.n_params());
        Self::with_sizes(sizes, est, s, n, None, identity)
    }

    /// Training of networks with `sizes` = (decoder, encoder) parameters on `n` data points by
    /// `est`, for `updates` updates (all of `s.epochs` when `None`: a run may stop inside an
    /// epoch).
    pub fn with_sizes(
        sizes: (usize, usize),
        est: &'a mut dyn GradientEstimator,
        s: &TrainSettings,
        n: usize,
        updates: Option<usize>,
        identity: Identity,
    ) -> Result<Self> {
        let rule = UpdateRule::adam(s.averaging);
        rule.validate(0)?;
        let batch = s.batch_size.clamp(1, n.max(1));
        let device_adam = match (rule.transform, &rule.projection, rule.averaging) {
            (Optimizer::Adam { beta1, beta2, eps }, Projection::None, Averaging::None) => {
                Some((beta1, beta2, eps))
            }
            _ => None,
        };
        Ok(Training {
            device_adam,
            est,
            rule,
            lr: s.lr,
            lr_decay: s.lr_decay,
            n,
            batch,
            total: updates.unwrap_or(s.epochs * n.div_ceil(batch)),
            identity,
            g_dec: vec![0.0; sizes.0],
            g_enc: vec![0.0; sizes.1],
        })
    }

    /// The updates the run takes.
    pub fn total(&self) -> usize {
        self.total
    }

    /// Updates per epoch.
    pub fn per_epoch(&self) -> usize {
        self.n.div_ceil(self.batch).max(1)
    }

    /// The state at parameters `params`, shuffling from `seed`.
    pub fn init(&self, params: VaeParams, seed: u64) -> TrainState {
        TrainState {
            dec: self.rule.init(params.dec.len(), Some(self.total)),
            enc: self.rule.init(params.enc.len(), Some(self.total)),
            params,
            rng: Xoshiro256PlusPlus::seed_from_u64(seed),
            order: (0..self.n).collect(),
            updates: 0,
            loss: f64::NAN,
        }
    }

    /// The parameters the run returns: the averaged iterates where averaging applies (the
    /// encoder's only when it was trained).
    pub fn finish(&self, state: &TrainState) -> VaeParams {
        let mut p = state.params.clone();
        self.rule.finish(&state.dec, &mut p.dec);
        if self.est.trains_encoder() {
            self.rule.finish(&state.enc, &mut p.enc);
        }
        p
    }

    /// The estimator's diagnostics.
    pub fn diagnostics(&self) -> serde_json::Value {
        self.est.diagnostics()
    }

    /// The update on the estimator's device, where it takes it (plain Adam only): the loss, the
    /// host only counting the steps; `None` leaves the update to [`Training::host_step`].
    fn device_step(
        &mut self,
        st: &mut TrainState,
        batch: std::ops::Range<usize>,
    ) -> Option<Result<f64>> {
        let (beta1, beta2, eps) = self.device_adam?;
        let step = AdamStep {
            lr: self.lr_at(st.dec.opt.count),
            beta1,
            beta2,
            eps,
            t: (st.dec.opt.count + 1, st.enc.opt.count + 1),
        };
        let encoder = self.est.trains_encoder();
        let batch = &st.order[batch];
        let loss = match self.est.device_params() {
            Some(dev) => on_device(dev, st, batch, step, encoder),
            #[allow(deprecated)]
            None => self.est.device_update(st, batch, step)?,
        };
        if loss.is_ok() {
            // The counts the host's rule would keep; the device holds θ and the moments.
            for (u, trained) in [(&mut st.dec, true), (&mut st.enc, encoder)] {
                if trained {
                    u.count += 1;
                    u.opt.count += 1;
                }
            }
        }
        Some(loss)
    }

    /// The update on the host: the estimator's gradients, then the rule's step on each network
    /// it trains. Returns the loss.
    fn host_step(
        &mut self,
        st: &mut TrainState,
        batch: std::ops::Range<usize>,
        update: usize,
    ) -> Result<f64> {
        zero(&mut self.g_dec);
        zero(&mut self.g_enc);
        let loss = self.est.estimate(
            &st.params,
            &st.order[batch],
            &mut self.g_dec,
            &mut self.g_enc,
        )?;
        if !all_finite(&self.g_enc) {
            return Err(SagdError::NonFiniteUpdate { iteration: update });
        }
        let lr = self.lr_at(st.dec.opt.count);
        self.rule
            .apply(&mut st.dec, &mut st.params.dec, &mut self.g_dec, lr)?;
        if self.est.trains_encoder() {
            self.rule
                .apply(&mut st.enc, &mut st.params.enc, &mut self.g_enc, lr)?;
        }
        Ok(loss)
    }

    /// The learning rate after `done` decoder updates.
    fn lr_at(&self, done: u64) -> f64 {
        // The core's power law: lr · (1 + done)^−decay (exactly lr at decay 0).
        sagd::schedule::Schedule::power(self.lr, self.lr_decay).at(done as usize + 1)
    }
}

impl Solver for Training<'_> {
    type State = TrainState;
    type Info = TrainInfo;

    fn identity(&self) -> Result<Identity> {
        Ok(self.identity.clone())
    }

    fn next_iter(&mut self, st: &mut TrainState) -> Result<TrainInfo> {
        let per_epoch = self.per_epoch();
        let b = st.updates % per_epoch;
        if b == 0 && self.batch < self.n {
            st.order.shuffle(&mut st.rng);
        }
        let batch = b * self.batch..((b + 1) * self.batch).min(self.n);
        let update = st.updates + 1;
        st.loss = match self.device_step(st, batch.clone()) {
            Some(loss) => loss?,
            None => self.host_step(st, batch, update)?,
        };
        st.updates = update;
        Ok(TrainInfo {
            update,
            epoch_done: update.is_multiple_of(per_epoch).then(|| update / per_epoch),
            loss: st.loss,
        })
    }

    fn terminate(&self, st: &TrainState) -> bool {
        st.updates >= self.total
    }

    fn iterations(&self, st: &TrainState) -> usize {
        st.updates
    }

    fn snapshot(&self) -> Result<Vec<u8>> {
        self.est.save_state()
    }

    fn restore(&mut self, bytes: &[u8]) -> Result<()> {
        self.est.load_state(bytes)
    }

    fn sync(&mut self, st: &mut TrainState) -> Result<()> {
        match self.est.device_params() {
            Some(dev) => dev.sync(st),
            #[allow(deprecated)]
            None => self.est.device_sync(st),
        }
    }
}

/// One update on the device that keeps the training state: the state loaded where the device's
/// copy is not of `st` (the first update, a resume), the gradient on `batch`, and the update
/// rule's `step` there when every value of it is finite. Returns the loss.
fn on_device(
    dev: &mut dyn DeviceParams,
    st: &TrainState,
    batch: &[usize],
    step: AdamStep,
    encoder: bool,
) -> Result<f64> {
    if dev.held(encoder) != Some(st.updates) {
        dev.load(st, encoder)?;
    }
    let loss = dev.gradient(batch)?;
    if !dev.finite()? {
        return Err(SagdError::NonFiniteUpdate {
            iteration: st.updates + 1,
        });
    }
    dev.step(step)?;
    Ok(loss)
}

/// Elements per task of the elementwise passes over a gradient (MNIST's networks have millions).
const SPLIT: usize = 1 << 16;

/// v = 0, in parallel for long vectors.
fn zero(v: &mut [f32]) {
    use rayon::prelude::*;
    v.par_chunks_mut(SPLIT).for_each(|c| c.fill(0.0));
}

/// Whether every element of `v` is finite, in parallel for long vectors.
fn all_finite(v: &[f32]) -> bool {
    use rayon::prelude::*;
    v.par_chunks(SPLIT).all(|c| c.iter().all(|x| x.is_finite()))
}

/// Where a training phase checkpoints (a file, every so many updates), and whether it resumes.
#[derive(Clone, Debug, Default)]
pub struct PhaseCheckpoint {
    /// The checkpoint file, or none.
    pub path: Option<PathBuf>,
    /// Updates between checkpoints.
    pub every: usize,
    /// Resume from the file when it exists.
    pub resume: bool,
}

/// Runs the training phase `name` through `runner` (its observers attached): checkpointed as `ck`
/// says, resumed from the checkpoint when asked and there (then `on_resume` sees the state) or
/// started by `start`. A run that an observer stopped before its end is
/// [`SagdError::Interrupted`] naming the phase; other errors get the context `what`. Returns the
/// runner (for the job's `finish`) and the final state.
pub fn drive_phase<'a, 'b>(
    mut runner: Runner<'a, Training<'b>>,
    ck: &PhaseCheckpoint,
    name: &str,
    what: impl FnOnce() -> String,
    start: impl FnOnce(&Training<'b>) -> TrainState,
    on_resume: impl FnOnce(&TrainState),
) -> Result<(Runner<'a, Training<'b>>, TrainState)> {
    if let Some(path) = &ck.path {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(|source| SagdError::Io {
                action: "creating the checkpoint folder",
                path: dir.display().to_string(),
                source,
            })?;
        }
        runner = runner.checkpoint(path.clone(), ck.every.max(1));
    }
    let mut state = match &ck.path {
        Some(path) if ck.resume && path.exists() => {
            let st = runner.resume(path)?;
            on_resume(&st);
            st
        }
        _ => start(&runner.solver),
    };
    let outcome = runner.run(&mut state).map_err(|e| SagdError::Context {
        what: what(),
        cause: Box::new(e),
    })?;
    if outcome == Outcome::Stopped && !runner.solver.terminate(&state) {
        return Err(SagdError::Interrupted {
            phase: name.to_string(),
            updates: state.updates,
            dir: ck
                .path
                .as_deref()
                .and_then(|p| p.parent())
                .map(|d| d.display().to_string())
                .unwrap_or_default(),
        });
    }
    Ok((runner, state))
}

#[cfg(test)]
mod tests;
