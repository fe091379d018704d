//! Automated EM (the paper's first application): every M-step is an SAGD run on
//! −Q(θ; θ_k)/n, with one persistent Langevin chain per data point targeting p(z | x_i; θ_k), burn-in at
//! the start of each M-step, and an outer loop with a stopping rule that accounts for Monte Carlo
//! noise. For one-dimensional latents, [`exact_gd`] runs the same updates with ∇Q by quadrature and
//! [`maximum_likelihood`] maximises ℓ(θ) directly.
//!
//! # The stopping rule
//!
//! Let m_k be the mean of M-step k's iterates over the second half of its updates. Successive m_k
//! move for two reasons: EM's drift towards its fixed point, and Monte Carlo noise (which carries
//! over from one M-step to the next through θ_k). Over the last `window` M-steps, the noise level is
//! estimated from successive differences, σ̂² = mean (m_i − m_{i−1})²/2, which a slow drift hardly
//! inflates, and EM stops when in every coordinate the net change |m_k − m_{k−window+1}| is below
//! `threshold`·√2·σ̂: no larger than the difference between two independent noisy estimates. A
//! steady drift d gives a net change of (window − 1)·d against √2·σ̂ ≈ d, so it keeps EM going.
//! The estimate is then the window's average of m_k, with standard error σ̂/√window.

mod exact;
#[doc(hidden)]
pub mod information;
#[doc(hidden)]
pub mod mstep;
mod solver;
mod trace;

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::diagnostics::mean_sd;
use crate::error::{LogpError, Result, SagdError};
use crate::langevin::{LangevinSettings, Momentum, Scheme};
use crate::metric::Preconditioner;
use crate::model::{AnchoredTarget, LatentModel, MaximumLikelihood};
use crate::optim::bfgs::{self, BfgsResult};
use crate::optim::UpdateRule;
use crate::quadrature::{expected_grad, posterior_rule, GaussHermite};
use crate::run::{Control, Identity, Outcome, Runner, Solver};
use crate::schedule::{Schedule, Schedules};
use crate::solver::{Anchor, IterInfo, Sagd, SagdSettings, SagdState};
pub use exact::{exact_gd, maximum_likelihood};
pub use information::{
    attempt_seed, louis_information, polish, polish_retrying, step_fraction, Information,
    InformationMethod, LouisSettings, PolishSettings, Polished, CHAIN_RHAT_LIMIT, SE_DOUBLINGS,
    SE_PRECISION, STEP_NOISE,
};
pub use mstep::{ChainStep, MStepUpdate};
pub use solver::{EmInfo, EmSolver, EmState};
pub use trace::{BackOff, EmTrace, EstimateStatus, FinalEstimate, MStep};

/// Polishing attempts before the run reports EM's estimate as unpolished.
#[doc(hidden)]
pub const POLISH_ATTEMPTS: usize = 3;

/// The stream under the run's seed from which polishing draws ([`polish_seed`]).
const POLISH_STREAM: u64 = 0x5EED_9011_5400_0001;

/// The seed [`AutomatedEm`] hands to [`polish_retrying`] for a run with `seed`: a stream of its
/// own, so that no two runs, attempts, steps or chains share draws (the EM chains of a run draw
/// from `stream_seed(seed, chain)`).
#[doc(hidden)]
pub fn polish_seed(seed: u64) -> u64 {
    crate::rng::stream_seed(seed, POLISH_STREAM)
}

/// The seed of the polish that starts from EM's estimate after EM took it back
/// ([`EmTrace::em_resumed`]): a stream apart from the first polish's.
#[doc(hidden)]
pub fn second_polish_seed(seed: u64) -> u64 {
    crate::rng::stream_seed(polish_seed(seed), POLISH_STREAM)
}

/// Back-offs a run may take before a non-finite update is an error.
#[doc(hidden)]
pub const MAX_BACKOFFS: usize = 20;

/// When to stop the outer EM loop (see the module docs).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct StopRule {
    /// M-steps in the window (at least 3).
    pub window: usize,
    /// The net change over the window must be below this many noise standard deviations (× √2).
    pub threshold: f64,
}

impl Default for StopRule {
    fn default() -> Self {
        StopRule {
            window: 5,
            threshold: 2.0,
        }
    }
}

impl StopRule {
    /// Applies the rule to the tail means of the M-steps so far: `Some((estimate, se))` when met.
    pub fn check(&self, tail_means: &[Vec<f64>]) -> Option<(Vec<f64>, Vec<f64>)> {
        let w = self.window;
        if tail_means.len() < w || w < 3 {
            return None;
        }
        let win = &tail_means[tail_means.len() - w..];
        let p = win[0].len();
        let mut est = vec![0.0; p];
        let mut se = vec![0.0; p];
        for j in 0..p {
            let var = win
                .windows(2)
                .map(|d| (d[1][j] - d[0][j]).powi(2) / 2.0)
                .sum::<f64>()
                / (w - 1) as f64;
            let sd = var.sqrt();
            if (win[w - 1][j] - win[0][j]).abs() >= self.threshold * std::f64::consts::SQRT_2 * sd {
                return None;
            }
            est[j] = win.iter().map(|m| m[j]).sum::<f64>() / w as f64;
            se[j] = sd / (w as f64).sqrt();
        }
        Some((est, se))
    }
}

/// EM's rate of convergence above which automated EM hands its estimate to the polish (when the
/// settings have one) before its stopping rule holds: each M-step then covers less than half of
/// the distance left, where a Newton step on ℓ covers it all.
#[doc(hidden)]
pub const HANDOVER_RATE: f64 = 0.5;

/// M-steps EM runs at least before it may hand over: the first moves from θ₀ say nothing of the
/// rate, and the rate needs two ratios of steps.
#[doc(hidden)]
pub const HANDOVER_AFTER: usize = 4;

/// EM's rate over the last M-steps, from their tail means m_k: with Δ_k = m_k − m_{k−1}, the
/// ratios r_k = Δ_k·Δ_{k−1} / |Δ_{k−1}|² (how much of the previous step the next one repeats;
/// EM's iterates near a maximum approach it as Δ_k ≈ R Δ_{k−1}). `Some(rate)`, the smaller of the
/// last two ratios, when there are [`HANDOVER_AFTER`] M-steps or more and both are at least
/// [`HANDOVER_RATE`]; otherwise `None` (EM is fast, or its steps are noise that cancels).
#[doc(hidden)]
pub fn slow_rate(tail_means: &[Vec<f64>]) -> Option<f64> {
    let k = tail_means.len();
    // Two ratios need four means.
    if k < HANDOVER_AFTER.max(4) {
        return None;
    }
    let step = |i: usize| -> Vec<f64> {
        tail_means[i]
            .iter()
            .zip(&tail_means[i - 1])
            .map(|(a, b)| a - b)
            .collect()
    };
    let ratio = |i: usize| -> f64 {
        let (now, before) = (step(i), step(i - 1));
        let along: f64 = now.iter().zip(&before).map(|(a, b)| a * b).sum();
        along / before.iter().map(|b| b * b).sum::<f64>()
    };
    let rate = ratio(k - 1).min(ratio(k - 2));
    (rate >= HANDOVER_RATE).then_some(rate)
}

/// Settings of automated EM.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct EmSettings {
    /// The solver of each M-step (its anchor is always the M-step's θ_k).
    pub sagd: SagdSettings,
    /// T: updates per M-step.
    pub updates_per_mstep: usize,
    /// The most M-steps to run.
    pub max_msteps: usize,
    /// The stopping rule; `None` runs exactly `max_msteps`.
    pub stopping: Option<StopRule>,
    /// Chains per data point (at least; see `min_chains`).
    pub chains_per_point: usize,
    /// Chains in all, at least: with fewer points than this, each point gets ⌈min_chains / n⌉
    /// chains, so that one large point keeps every core busy and its estimates average
    /// independent chains (0: `chains_per_point` alone).
    #[serde(default)]
    pub min_chains: usize,
    /// The chains' mass matrix, adapted per point at the start of every M-step
    /// ([`crate::metric`]).
    #[serde(default)]
    pub preconditioner: Preconditioner,
    /// How an M-step moves θ: the paper's gradient steps of α_t, or Newton steps (no α).
    #[serde(default)]
    pub mstep_update: MStepUpdate,
    /// How the Langevin step and friction are set: the schedules', or from the posteriors.
    #[serde(default)]
    pub chain_step: ChainStep,
    /// After the M-steps, [`polish`] the estimate: Newton steps on ℓ itself,
    /// which converge where EM is slow (a high fraction of missing information), and give the
    /// standard errors.
    #[serde(default)]
    pub polish: Option<PolishSettings>,
}

impl Default for EmSettings {
    /// Settings for a model of one's own, with no step size to guess: Newton M-steps, the
    /// Langevin step and friction set from the posteriors' curvature at every M-step, BAOAB from
    /// momenta drawn at random, a mass matrix per point adapted at every M-step
    /// ([`Preconditioner::Auto`]), at least 4 chains in all, M-steps of T = 50 updates until the
    /// stopping rule holds (at most 20), then [`polish`] to the maximum. The paper's burn-in (100
    /// steps) and K_t = t + 20.
    fn default() -> Self {
        let mut s = EmSettings::paper_e1();
        s.sagd.langevin.scheme = Scheme::Baoab;
        s.sagd.initial_momentum = Momentum::Normal;
        s.mstep_update = MStepUpdate::Newton { max_halvings: 30 };
        s.chain_step = ChainStep::adaptive();
        s.updates_per_mstep = 50;
        s.max_msteps = 20;
        s.stopping = Some(StopRule::default());
        s.polish = Some(PolishSettings::default());
        s.min_chains = 4;
        s.preconditioner = Preconditioner::Auto;
        s
    }
}

impl EmSettings {
    /// The chains per point for `n` points: `chains_per_point`, or more to reach `min_chains`.
    pub fn chains_for(&self, n: usize) -> usize {
        self.chains_per_point
            .max(self.min_chains.div_ceil(n.max(1)))
            .max(1)
    }

    /// The paper's E1: three M-steps of T = 100 updates, α = 0.2, δ_t = 0.1/√t, K_t = t + 20, 100
    /// burn-in steps per M-step, γ = 1, the Euler scheme, chains from z = 0 with ρ = 0.
    pub fn paper_e1() -> Self {
        EmSettings {
            sagd: SagdSettings {
                langevin: LangevinSettings {
                    scheme: Scheme::Euler,
                    gamma: 1.0,
                },
                schedules: Schedules::paper_e1(),
                burn_in: 100,
                persistent: true,
                initial_momentum: Momentum::Zero,
                update: UpdateRule::sgd(),
                anchor: Anchor::Fixed,
            },
            updates_per_mstep: 100,
            max_msteps: 3,
            stopping: None,
            chains_per_point: 1,
            min_chains: 0,
            preconditioner: Preconditioner::Identity,
            mstep_update: MStepUpdate::Gradient,
            chain_step: ChainStep::Schedule,
            polish: None,
        }
    }

    /// Checks the settings for a model with `theta_dim` parameters.
    pub fn validate(&self, theta_dim: usize) -> Result<()> {
        let bad = |name: &'static str, fix: &str| {
            Err(SagdError::InvalidSetting {
                name,
                value: "0".into(),
                fix: fix.into(),
            })
        };
        if self.updates_per_mstep == 0 {
            return bad(
                "updates_per_mstep (T)",
                "use at least one update per M-step",
            );
        }
        if self.max_msteps == 0 {
            return bad("max_msteps", "run at least one M-step");
        }
        if self.chains_per_point == 0 {
            return bad("chains_per_point", "use at least one chain per data point");
        }
        if let Some(s) = &self.stopping {
            if s.window < 3 {
                return Err(SagdError::InvalidSetting {
                    name: "stopping window",
                    value: s.window.to_string(),
                    fix: "use a window of at least 3 M-steps".into(),
                });
            }
            crate::error::positive(
                "stopping threshold",
                s.threshold,
                "use a threshold > 0, such as 1",
            )?;
        }
        self.chain_step.validate()?;
        self.sagd.validate(theta_dim)
    }
}

/// Something that happened during a run, for progress displays.
#[derive(Debug)]
pub enum EmEvent<'a> {
    /// An update within M-step `mstep` (0-based).
    Update {
        /// The M-step.
        mstep: usize,
        /// The solver's report.
        info: &'a IterInfo,
        /// θ after the update.
        theta: &'a [f64],
    },
    /// An M-step finished.
    MStepDone(&'a MStep),
    /// A non-finite update was backed off.
    BackOff(&'a BackOff),
}

/// Automated EM for a [`LatentModel`].
pub struct AutomatedEm<'a, M> {
    /// The model.
    pub model: &'a M,
    /// The settings.
    pub settings: EmSettings,
    /// Checkpoint file and how often (in updates within an M-step) to write it; also written after
    /// every M-step.
    pub checkpoint: Option<(PathBuf, usize)>,
    /// A fingerprint of the data (the model does not expose them), part of a checkpoint's
    /// identity: a checkpoint of other data with as many points is refused.
    pub data_key: u64,
}

impl<'a, M: LatentModel<f64>> AutomatedEm<'a, M> {
    /// Automated EM with these settings.
    pub fn new(model: &'a M, settings: EmSettings) -> Self {
        AutomatedEm {
            model,
            settings,
            checkpoint: None,
            data_key: 0,
        }
    }

    /// Runs EM from θ₀ (chains start at z = 0), or resumes from the checkpoint at `resume`, through
    /// the [`Runner`]. `on_event` sees every update and M-step; returning [`Control::Stop`] ends
    /// the run early with `interrupted` set, after writing the checkpoint if there is one.
    pub fn run(
        &self,
        theta0: &[f64],
        seed: u64,
        resume: Option<&Path>,
        on_event: &mut dyn FnMut(EmEvent) -> Control,
    ) -> Result<EmTrace> {
        let job = EmSolver::new(self.model, &self.settings, theta0, seed, self.data_key)?;
        let mut observer = |st: &EmState, info: &EmInfo| {
            let mut c = on_event(EmEvent::Update {
                mstep: info.mstep,
                info: &info.iter,
                theta: &st.sagd.theta,
            });
            for b in &info.backoffs {
                if on_event(EmEvent::BackOff(b)) == Control::Stop {
                    c = Control::Stop;
                }
            }
            if let Some(m) = &info.finished {
                if on_event(EmEvent::MStepDone(m)) == Control::Stop {
                    c = Control::Stop;
                }
            }
            c
        };
        let mut runner = Runner::new(job).observe(&mut observer);
        if let Some((path, every)) = &self.checkpoint {
            runner = runner.checkpoint(path.clone(), *every);
        }
        let mut state = match resume {
            Some(path) => runner.resume(path)?,
            None => runner.solver.init(theta0, seed)?,
        };
        state.trace.interrupted = false;
        let outcome = runner.run(&mut state)?;
        if outcome == Outcome::Stopped && !runner.solver.terminate(&state) {
            state.trace.interrupted = true;
            return Ok(state.trace);
        }
        runner.solver.finish(&mut state);
        let Some(ps) = &self.settings.polish else {
            return Ok(state.trace);
        };
        // Once only: a run resumed after EM took its estimate back goes on from there.
        let may_resume = state.trace.handover_rate.is_some() && state.trace.em_resumed.is_none();
        if !self.polish_into(&mut state.trace, ps, seed) && may_resume {
            // EM stopped early for a polish that failed: its estimate is a few M-steps old, so
            // EM takes it back, runs on to its own rule, and the polish starts again from there.
            state.trace.em_resumed = state.trace.polish_error.take();
            let outcome = runner.run(&mut state)?;
            if outcome == Outcome::Stopped && !runner.solver.terminate(&state) {
                state.trace.interrupted = true;
                return Ok(state.trace);
            }
            runner.solver.finish(&mut state);
            self.polish_into(&mut state.trace, ps, seed);
        }
        Ok(state.trace)
    }

    /// The polish alone from `theta0`, without an M-step (for a start already near the maximum,
    /// as Laplace's is for a GLMM): a trace whose estimate is `theta0` and whose answer is the
    /// polished one, or, when every attempt fails, `theta0` with `polish_error` saying why. The
    /// polish draws from [`polish_seed`]`(seed)`, as after EM.
    pub(crate) fn polish_from(&self, theta0: &[f64], seed: u64) -> EmTrace {
        let mut trace = EmTrace {
            path: vec![theta0.to_vec()],
            estimate: theta0.to_vec(),
            ..EmTrace::default()
        };
        if let Some(ps) = &self.settings.polish {
            self.polish_into(&mut trace, ps, seed);
        }
        trace
    }

    /// Polishes the trace's estimate (from [`polish_seed`], or [`second_polish_seed`] once EM
    /// took its estimate back), recording the polished answer or why every attempt failed;
    /// whether it succeeded.
    fn polish_into(&self, trace: &mut EmTrace, ps: &PolishSettings, seed: u64) -> bool {
        let seed = if trace.em_resumed.is_some() {
            second_polish_seed(seed)
        } else {
            polish_seed(seed)
        };
        match polish_retrying(self.model, &trace.estimate, ps, seed, POLISH_ATTEMPTS) {
            Ok((p, attempts)) => {
                trace.polished = Some(p);
                trace.polish_attempts = attempts;
                true
            }
            Err(failures) => {
                trace.polish_attempts = failures.len();
                trace.polish_error = Some(format!(
                    "polish failed {} times ({}); the estimate is EM's, not polished",
                    failures.len(),
                    failures.join("; ")
                ));
                false
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Tail means approaching (1, −2) as Δ_k = R Δ_{k−1}, with R the given rates along each axis.
    fn approach(rates: [f64; 2], k: usize) -> Vec<Vec<f64>> {
        (0..k)
            .map(|i| {
                vec![
                    1.0 + 0.5 * rates[0].powi(i as i32),
                    -2.0 - 0.3 * rates[1].powi(i as i32),
                ]
            })
            .collect()
    }

    #[test]
    fn slow_rate_reads_em_s_rate_once_there_are_enough_m_steps() {
        let slow = approach([0.7, 0.7], 6);
        assert_eq!(slow_rate(&slow[..HANDOVER_AFTER - 1]), None);
        let rate = slow_rate(&slow[..HANDOVER_AFTER]).expect("slow");
        assert!((rate - 0.7).abs() < 1e-12, "{rate}");
        // Fast EM keeps going to its stopping rule.
        assert_eq!(slow_rate(&approach([0.3, 0.3], 6)), None);
        // Along the slowest direction the rate is read once the faster one has died out.
        let mixed = approach([0.2, 0.8], 8);
        assert_eq!(slow_rate(&mixed[..4]), None);
        let rate = slow_rate(&mixed).expect("the slow direction remains");
        assert!((rate - 0.8).abs() < 0.01, "{rate}");
    }

    #[test]
    fn steps_that_are_noise_do_not_hand_over() {
        // Iterates that jitter about a point: each step undoes the last (rate about −1/2).
        let jitter: Vec<Vec<f64>> = [0.1, -0.05, 0.08, -0.1, 0.02, -0.07]
            .iter()
            .map(|&e| vec![1.0 + e, 2.0 - e])
            .collect();
        assert_eq!(slow_rate(&jitter), None);
    }
}
