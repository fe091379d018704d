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

pub mod gamma_sigmoid;

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::diagnostics::mean_sd;
use crate::error::{Result, SagdError};
use crate::langevin::{LangevinSettings, Momentum, Scheme};
use crate::model::{LatentModel, MaximumLikelihood};
use crate::optim::bfgs::{self, BfgsResult};
use crate::optim::{Optimizer, Projection};
use crate::quadrature::{expected_grad, posterior_rule, GaussHermite};
use crate::run::{load_checkpoint, save_checkpoint, Control, History};
use crate::schedule::Schedules;
use crate::solver::{Anchor, IterInfo, Sagd, SagdSettings, SagdState};

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
    /// Chains per data point.
    pub chains_per_point: usize,
}

impl EmSettings {
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
                optimizer: Optimizer::Sgd,
                projection: Projection::None,
                anchor: Anchor::Fixed,
            },
            updates_per_mstep: 100,
            max_msteps: 3,
            stopping: None,
            chains_per_point: 1,
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
        self.sagd.validate(theta_dim)
    }
}

/// What one M-step did.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MStep {
    /// θ_k, where the M-step's target was anchored.
    pub theta_start: Vec<f64>,
    /// The last iterate, θ_{k+1}.
    pub theta_end: Vec<f64>,
    /// Mean of the iterates over the second half of the updates.
    pub tail_mean: Vec<f64>,
    /// Their standard deviation (the jitter of the last iterate).
    pub tail_sd: Vec<f64>,
    /// Divergent chain-steps in the M-step.
    pub divergences: usize,
}

/// The record of an automated EM run.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct EmTrace {
    /// θ₀ and then θ after every update, over all M-steps.
    pub path: Vec<Vec<f64>>,
    /// One entry per finished M-step.
    pub msteps: Vec<MStep>,
    /// Whether the stopping rule was met.
    pub converged: bool,
    /// The estimate: the window's average tail mean when converged, else the last iterate.
    pub estimate: Vec<f64>,
    /// Its Monte Carlo standard error (empty when not converged).
    pub estimate_se: Vec<f64>,
    /// Langevin steps taken by all chains together (chain-steps ÷ chains).
    pub langevin_steps: u64,
    /// Whether the run was stopped by the caller before it finished (resume it from its checkpoint).
    pub interrupted: bool,
    /// Whether the last M-step in the trace is still running (checkpoints only).
    in_mstep: bool,
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
}

/// What EM adds to the solver's checkpoint: its settings (as bytes, compared on resume) and the trace.
#[derive(Serialize, Deserialize)]
struct EmCheckpoint {
    settings: Vec<u8>,
    trace: EmTrace,
}

fn settings_bytes(s: &EmSettings) -> Result<Vec<u8>> {
    postcard::to_allocvec(s).map_err(|e| SagdError::InvalidSetting {
        name: "EM settings",
        value: "not serialisable".into(),
        fix: format!("custom schedules cannot be checkpointed ({e})"),
    })
}

/// Automated EM for a [`LatentModel`].
pub struct AutomatedEm<'a, M> {
    /// The model.
    pub model: &'a M,
    /// The settings.
    pub settings: EmSettings,
    /// Checkpoint file and how often (in updates) to write it; also written after every M-step.
    pub checkpoint: Option<(PathBuf, usize)>,
}

/// Mean and sample standard deviation of column `j`.
fn column_mean_sd(rows: &[Vec<f64>], j: usize) -> (f64, f64) {
    mean_sd(&rows.iter().map(|r| r[j]).collect::<Vec<_>>())
}

impl<'a, M: LatentModel<f64>> AutomatedEm<'a, M> {
    /// Automated EM with these settings.
    pub fn new(model: &'a M, settings: EmSettings) -> Self {
        AutomatedEm {
            model,
            settings,
            checkpoint: None,
        }
    }

    /// Runs EM from θ₀ (chains start at z = 0), or resumes from the checkpoint at `resume`.
    /// `on_event` sees every update and M-step; returning [`Control::Stop`] ends the run early with
    /// `interrupted` set, after writing the checkpoint if there is one.
    pub fn run(
        &self,
        theta0: &[f64],
        seed: u64,
        resume: Option<&Path>,
        on_event: &mut dyn FnMut(EmEvent) -> Control,
    ) -> Result<EmTrace> {
        let mut sagd_settings = self.settings.sagd.clone();
        sagd_settings.anchor = Anchor::Fixed;
        let solver = Sagd::new(sagd_settings);
        let p = self.model.theta_dim();
        self.settings.validate(p)?;
        let problem = MaximumLikelihood::new(self.model, self.settings.chains_per_point);
        let z0 = vec![0.0; self.model.latent_dim()];
        let (mut state, mut trace): (SagdState<f64>, EmTrace) = match resume {
            Some(path) => {
                let (state, _, ck): (SagdState<f64>, History, EmCheckpoint) =
                    load_checkpoint(path, &solver.settings)?;
                if ck.settings != settings_bytes(&self.settings)? {
                    return Err(SagdError::Checkpoint {
                        path: path.display().to_string(),
                        problem: "it was written with different EM settings: resume with the same settings".into(),
                    });
                }
                let mut trace = ck.trace;
                trace.interrupted = false;
                (state, trace)
            }
            None => {
                let state = solver.init(&problem, theta0, &z0, seed)?;
                (
                    state,
                    EmTrace {
                        path: vec![theta0.to_vec()],
                        ..Default::default()
                    },
                )
            }
        };
        let t_max = self.settings.updates_per_mstep;
        let save = |state: &SagdState<f64>, trace: &EmTrace| -> Result<()> {
            match &self.checkpoint {
                Some((path, _)) => save_checkpoint(
                    path,
                    &solver.settings,
                    state,
                    &History::default(),
                    &EmCheckpoint {
                        settings: settings_bytes(&self.settings)?,
                        trace: trace.clone(),
                    },
                ),
                None => Ok(()),
            }
        };
        while !trace.converged && trace.msteps.len() < self.settings.max_msteps {
            let k = trace.msteps.len();
            if !trace.in_mstep {
                let anchor = state.theta.clone();
                solver.begin_stage(
                    &problem,
                    &mut state,
                    Some(&anchor),
                    self.settings.sagd.burn_in,
                )?;
                trace.in_mstep = true;
            }
            let start = trace.path.len() - state.t;
            while state.t < t_max {
                let steps_before = state.chains.steps;
                let info = solver.next_iter(&problem, &mut state)?;
                trace.langevin_steps += state.chains.steps - steps_before;
                trace.path.push(state.theta.clone());
                if on_event(EmEvent::Update {
                    mstep: k,
                    info: &info,
                    theta: &state.theta,
                }) == Control::Stop
                {
                    trace.interrupted = true;
                    save(&state, &trace)?;
                    return Ok(trace);
                }
                if let Some((_, every)) = &self.checkpoint {
                    if *every > 0 && state.t.is_multiple_of(*every) && state.t < t_max {
                        save(&state, &trace)?;
                    }
                }
            }
            let iterates = &trace.path[start..];
            let tail = &iterates[t_max / 2..];
            let (tail_mean, tail_sd): (Vec<f64>, Vec<f64>) =
                (0..p).map(|j| column_mean_sd(tail, j)).unzip();
            let divergences = state.chains.divergences as usize
                - trace.msteps.iter().map(|m| m.divergences).sum::<usize>();
            let m = MStep {
                theta_start: trace.path[start - 1].clone(),
                theta_end: state.theta.clone(),
                tail_mean,
                tail_sd,
                divergences,
            };
            trace.msteps.push(m);
            trace.in_mstep = false;
            if let Some(rule) = self.settings.stopping {
                let means: Vec<Vec<f64>> =
                    trace.msteps.iter().map(|m| m.tail_mean.clone()).collect();
                if let Some((est, se)) = rule.check(&means) {
                    trace.converged = true;
                    trace.estimate = est;
                    trace.estimate_se = se;
                }
            }
            let stop = on_event(EmEvent::MStepDone(
                trace.msteps.last().expect("pushed above"),
            )) == Control::Stop;
            save(&state, &trace)?;
            if stop && (trace.msteps.len() < self.settings.max_msteps && !trace.converged) {
                trace.interrupted = true;
                return Ok(trace);
            }
        }
        if !trace.converged {
            trace.estimate = state.theta.clone();
            trace.estimate_se = Vec::new();
        }
        Ok(trace)
    }
}

/// Exact gradient ascent: the same M-steps as automated EM (T updates of step α from θ_k), with
/// ∇Q(θ; θ_k)/n by posterior-centred Gauss-Hermite quadrature. Returns θ₀ and θ after every update.
/// One-dimensional latents only.
pub fn exact_gd<M: LatentModel<f64>>(
    model: &M,
    theta0: &[f64],
    msteps: usize,
    updates_per_mstep: usize,
    alpha: f64,
    gh: &GaussHermite,
) -> Result<Vec<Vec<f64>>> {
    let n = model.n_data() as f64;
    let mut theta = theta0.to_vec();
    let mut path = vec![theta.clone()];
    for _ in 0..msteps {
        let rule = posterior_rule(model, &theta, gh)?;
        for _ in 0..updates_per_mstep {
            let g = expected_grad(model, &theta, &rule, n)?;
            for (t, gi) in theta.iter_mut().zip(&g) {
                *t += alpha * gi;
            }
            path.push(theta.clone());
        }
    }
    Ok(path)
}

/// The maximum-likelihood estimate by BFGS on ℓ(θ) (quadrature value, Fisher-identity gradient),
/// from `start`. The result's `f` is −ℓ at the optimum.
pub fn maximum_likelihood<M: LatentModel<f64>>(
    model: &M,
    start: &[f64],
    gh: &GaussHermite,
) -> Result<BfgsResult> {
    let n = model.n_data() as f64;
    let mut r = bfgs::minimize(
        |th| {
            let rule = posterior_rule(model, th, gh)?;
            let g = expected_grad(model, th, &rule, n)?;
            Ok((-rule.log_likelihood() / n, g.iter().map(|v| -v).collect()))
        },
        start,
        1e-10,
        500,
    )?;
    r.f *= n;
    r.grad_max *= n;
    Ok(r)
}
