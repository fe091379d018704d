//! The SAGD solver: Algorithm 1 of the paper as a `next_iter` step over a [`SagdState`].
//!
//! One iteration t (1-based): run K_t Langevin steps of size δ_t on the chains, average ∇θ f(θ_t; ξ)
//! over the chains and over the K_t states after each step, take the transform's direction, step by
//! α_t, project onto Θ, and update the averaged iterate θ̂_t = (1/t) Σ_{s≤t} θ_s.
//!
//! Two departures from the letter of Algorithm 1, both the paper's own advice (section 4): chains are
//! persistent across iterations by default (`persistent: false` restarts them from (ξ₀, ρ₀) every
//! iteration, as the algorithm is written), and the first iteration of a stage starts with `burn_in`
//! discarded steps at δ₁.

use serde::{Deserialize, Serialize};

use crate::error::{check_len, LogpError, Result, SagdError};
use crate::langevin::{ChainSet, LangevinSettings, Momentum, StepInfo};
use crate::model::{AnchoredTarget, Problem};
use crate::optim::{UpdateRule, UpdateState};
use crate::real::Real;
use crate::schedule::Schedules;

/// Where the chains' target π is taken.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Anchor {
    /// π follows the current θ (debiased VAE: p(u | x; θ_t)).
    #[default]
    Current,
    /// π stays at the state's `anchor` parameter (EM: p(z | x; θ_k) during an M-step).
    Fixed,
}

/// Settings of the solver. Plain data with defaults; written into every result file.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SagdSettings {
    /// The Langevin scheme and friction γ.
    pub langevin: LangevinSettings,
    /// δ_t, K_t and α_t.
    pub schedules: Schedules,
    /// Discarded Langevin steps (at δ₁) at the start of a stage.
    pub burn_in: usize,
    /// Keep the chains across iterations (the paper's advice) instead of restarting from (ξ₀, ρ₀).
    pub persistent: bool,
    /// How momenta start.
    pub initial_momentum: Momentum,
    /// The update: transform, projection onto Θ, averaging (α_t comes from `schedules`).
    pub update: UpdateRule,
    /// Where the chains' target is taken.
    pub anchor: Anchor,
}

impl Default for SagdSettings {
    fn default() -> Self {
        SagdSettings {
            langevin: LangevinSettings::default(),
            schedules: Schedules::theorem3(0.1, 1.0, 0.1),
            burn_in: 0,
            persistent: true,
            initial_momentum: Momentum::Normal,
            update: UpdateRule::sgd(),
            anchor: Anchor::Current,
        }
    }
}

impl SagdSettings {
    /// Checks every setting against a problem with `theta_dim` parameters.
    pub fn validate(&self, theta_dim: usize) -> Result<()> {
        self.schedules.validate()?;
        self.langevin.validate(self.schedules.step_size.at(1))?;
        self.update.validate(theta_dim)
    }
}

/// Everything a run needs to continue: parameters, chains with their random streams, optimiser
/// state. Serialisable, so that a checkpoint resumes a run bit for bit.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(bound = "T: Real")]
pub struct SagdState<T> {
    /// Updates taken in the current stage (t of the schedules).
    pub t: usize,
    /// Updates taken since the start, over all stages.
    pub total_updates: usize,
    /// The last iterate θ_t.
    pub theta: Vec<T>,
    /// The parameter at which a [`Anchor::Fixed`] target is taken.
    pub anchor: Vec<T>,
    /// The chains.
    pub chains: ChainSet<T>,
    /// The update rule's state (transform moments, the averaged iterate of the stage).
    pub update: UpdateState,
    /// The last gradient estimate.
    pub grad: Vec<f64>,
    /// Burn-in steps still to run before the next update.
    pub pending_burn_in: usize,
    /// Start of non-persistent chains: positions and momenta.
    start: (Vec<T>, Vec<T>),
}

impl<T: Real> SagdState<T> {
    /// The averaged iterate θ̂ of the current stage (θ₀ before the first update).
    pub fn theta_avg(&self) -> Vec<f64> {
        if self.update.averaged > 0 {
            self.update.avg.clone()
        } else {
            self.theta.iter().map(|v| v.f64()).collect()
        }
    }
}

/// What one iteration did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct IterInfo {
    /// The 1-based update count within the stage.
    pub t: usize,
    /// δ_t.
    pub step_size: f64,
    /// K_t.
    pub chain_length: usize,
    /// α_t.
    pub learning_rate: f64,
    /// ‖gradient estimate‖.
    pub grad_norm: f64,
    /// Divergent chain-steps in this iteration (burn-in included).
    pub divergences: usize,
    /// Mean kinetic temperature over the K_t steps (≈ 1 at equilibrium).
    pub kinetic_temperature: f64,
    /// Mean log π over chains after the last step.
    pub mean_log_density: f64,
}

/// Algorithm 1.
#[derive(Clone, Debug, PartialEq)]
pub struct Sagd {
    /// The settings.
    pub settings: SagdSettings,
}

impl Sagd {
    /// A solver with these settings.
    pub fn new(settings: SagdSettings) -> Self {
        Sagd { settings }
    }

    /// The initial state: parameters θ₀, chain positions ξ₀ (one row for all chains or one per
    /// chain), and the seed of the chains' random streams. The anchor starts at θ₀.
    pub fn init<T: Real, P: Problem<T> + ?Sized>(
        &self,
        problem: &P,
        theta0: &[T],
        xi0: &[T],
        seed: u64,
    ) -> Result<SagdState<T>> {
        let p = problem.theta_dim();
        check_len("theta0", p, theta0.len())?;
        self.settings.validate(p)?;
        let (n, d) = (problem.n_chains(), problem.chain_dim());
        crate::langevin::check_chains_fit(n, d, std::mem::size_of::<T>(), "the chains")?;
        let mut chains = ChainSet::new(n, d, seed);
        let target = AnchoredTarget {
            problem,
            anchor: theta0,
        };
        chains.init(&target, xi0, self.settings.initial_momentum)?;
        let start = (chains.positions().to_vec(), chains.momenta().to_vec());
        Ok(SagdState {
            t: 0,
            total_updates: 0,
            theta: theta0.to_vec(),
            anchor: theta0.to_vec(),
            chains,
            update: self.settings.update.init(p, None),
            grad: vec![0.0; p],
            pending_burn_in: self.settings.burn_in,
            start,
        })
    }

    /// Starts a new stage (an M-step of EM): the schedules restart at t = 1, the averaged iterate
    /// and the optimiser state are reset, the anchor moves to `anchor` (the current θ if `None`), and
    /// `burn_in` steps run before the next update. The chains keep their states.
    pub fn begin_stage<T: Real, P: Problem<T> + ?Sized>(
        &self,
        problem: &P,
        state: &mut SagdState<T>,
        anchor: Option<&[T]>,
        burn_in: usize,
    ) -> Result<()> {
        let a = anchor
            .map(|a| a.to_vec())
            .unwrap_or_else(|| state.theta.clone());
        check_len("anchor", problem.theta_dim(), a.len())?;
        state.anchor = a;
        state.t = 0;
        state.update = self.settings.update.init(problem.theta_dim(), None);
        state.pending_burn_in = burn_in;
        let target = AnchoredTarget {
            problem,
            anchor: &state.anchor[..],
        };
        state.chains.evaluate(&target)
    }

    /// One iteration of Algorithm 1: [`Sagd::estimate`], then the update rule's step of α_t.
    pub fn next_iter<T: Real, P: Problem<T> + ?Sized>(
        &self,
        problem: &P,
        state: &mut SagdState<T>,
    ) -> Result<IterInfo> {
        let info = self.estimate(problem, state)?;
        let mut dir: Vec<T> = state.grad.iter().map(|g| T::of(*g)).collect();
        self.settings
            .update
            .apply(
                &mut state.update,
                &mut state.theta,
                &mut dir,
                info.learning_rate,
            )
            .map_err(|e| match e {
                SagdError::NonFiniteUpdate { .. } => {
                    SagdError::NonFiniteUpdate { iteration: info.t }
                }
                e => e,
            })?;
        Self::count_update(state);
        Ok(info)
    }

    /// The first half of iteration t = `state.t + 1`: pending burn-in, the K_t Langevin steps, and
    /// the gradient estimate (into `state.grad`); θ does not move. Callers that take their own step
    /// (automated EM's Newton steps) finish with [`Sagd::count_update`].
    pub fn estimate<T: Real, P: Problem<T> + ?Sized>(
        &self,
        problem: &P,
        state: &mut SagdState<T>,
    ) -> Result<IterInfo> {
        let s = &self.settings;
        let t = state.t + 1;
        let delta = s.schedules.step_size.at(t);
        let k_t = s.schedules.chain_length.at(t);
        let alpha = s.schedules.learning_rate.at(t);
        let kernel = s.langevin.kernel::<T>(delta)?;
        let anchor: Vec<T> = match s.anchor {
            Anchor::Current => state.theta.clone(),
            Anchor::Fixed => state.anchor.clone(),
        };
        let target = AnchoredTarget {
            problem,
            anchor: &anchor[..],
        };
        let mut divergences = self.ready_chains(&target, state)?;
        let (mut grad, infos) = self.sum_grad_f(&target, &kernel, k_t, state)?;
        let (mut kinetic, mut last_logp) = (0.0, 0.0);
        for info in &infos {
            divergences += info.divergences;
            kinetic += info.kinetic_temperature;
            last_logp = info.mean_log_density;
        }
        let scale = 1.0 / (k_t as f64 * problem.n_chains().max(1) as f64);
        grad.iter_mut().for_each(|g| *g *= scale);
        let grad_norm = grad.iter().map(|g| g * g).sum::<f64>().sqrt();
        if !grad_norm.is_finite() {
            return Err(SagdError::NonFiniteUpdate { iteration: t });
        }
        state.grad.clone_from(&grad);
        Ok(IterInfo {
            t,
            step_size: delta,
            chain_length: k_t,
            learning_rate: alpha,
            grad_norm,
            divergences,
            kinetic_temperature: kinetic / k_t as f64,
            mean_log_density: last_logp,
        })
    }

    /// The chains readied for an update: put back at their starts (chains that do not
    /// persist), evaluated again where θ moved under them, and burned in where a burn-in is
    /// due; the burn-in's divergences.
    fn ready_chains<T: Real, P: Problem<T> + ?Sized>(
        &self,
        target: &AnchoredTarget<'_, T, P>,
        state: &mut SagdState<T>,
    ) -> Result<usize> {
        let s = &self.settings;
        if !s.persistent && state.total_updates > 0 {
            let (x0, r0) = state.start.clone();
            state.chains.set_positions(target, &x0)?;
            state.chains.set_momenta(&r0)?;
        } else if s.anchor == Anchor::Current && state.total_updates > 0 {
            // θ moved since the chains' gradients were computed.
            state.chains.evaluate(target)?;
        }
        let mut divergences = 0;
        if state.pending_burn_in > 0 {
            let burn = s.langevin.kernel::<T>(s.schedules.step_size.at(1))?;
            divergences += state.chains.burn_in(target, &burn, state.pending_burn_in)?;
            state.pending_burn_in = 0;
        }
        Ok(divergences)
    }

    /// The K_t steps of `kernel` on the chains, and Σ over the steps and the chains of ∇θ f at
    /// their states (summed in block order), with each step's diagnostics.
    fn sum_grad_f<T: Real, P: Problem<T> + ?Sized>(
        &self,
        target: &AnchoredTarget<'_, T, P>,
        kernel: &crate::langevin::Kernel<T>,
        k_t: usize,
        state: &mut SagdState<T>,
    ) -> Result<(Vec<f64>, Vec<StepInfo>)> {
        let (s, problem) = (&self.settings, target.problem);
        let p = problem.theta_dim();
        // Each block of chains takes the K_t steps in one task; after each, Σ ∇θ f at its new
        // states: fused into the step's evaluation when the target is at θ and computes it, else
        // a pass of its own.
        let theta = &state.theta[..];
        let fuse = s.anchor == Anchor::Current && problem.fuses_grad_f();
        // A model whose calls are costly (Python) gets each block's K_t states in one call at
        // the end, instead of one call per step.
        let stack = !fuse && problem.calls_are_costly();
        type Acc<T> = std::result::Result<(Vec<f64>, Vec<T>, usize), LogpError>;
        let (infos, parts) = state.chains.run_steps_fold(
            target,
            kernel,
            k_t,
            fuse,
            |_| Ok((vec![0.0f64; p], Vec::new(), 0)),
            |acc: &mut Acc<T>, b| {
                let Ok((sum, stacked, first)) = acc else {
                    return;
                };
                if let Some(a) = b.aux {
                    sum.iter_mut().zip(a).for_each(|(s, v)| *s += v.f64());
                    return;
                }
                if stack {
                    stacked.extend_from_slice(b.positions);
                    *first = b.first_row;
                    return;
                }
                let mut g = vec![T::zero(); p];
                match problem.add_grad_f(theta, b.first_row, b.positions, &mut g) {
                    Ok(()) => sum.iter_mut().zip(g).for_each(|(s, v)| *s += v.f64()),
                    Err(e) => *acc = Err(e),
                }
            },
        )?;
        let parts = parts
            .into_iter()
            .map(|acc| {
                let (mut sum, stacked, first) = acc.map_err(SagdError::Model)?;
                if !stacked.is_empty() {
                    let mut g = vec![T::zero(); p];
                    problem
                        .add_grad_f_copies(theta, first, k_t, &stacked, &mut g)
                        .map_err(SagdError::Model)?;
                    sum.iter_mut().zip(g).for_each(|(s, v)| *s += v.f64());
                }
                Ok(sum)
            })
            .collect::<Result<Vec<_>>>()?;
        let mut grad = vec![0.0f64; p];
        crate::parallel::add_parts(&parts, &mut grad);
        Ok((grad, infos))
    }

    /// Counts a finished update: t and the total move on.
    pub fn count_update<T: Real>(state: &mut SagdState<T>) {
        state.t += 1;
        state.total_updates += 1;
    }
}
