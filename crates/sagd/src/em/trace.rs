//! What an automated EM run records — its M-steps, back-offs, polish and handover — and the
//! answer it gives ([`EmTrace::final_estimate`]).

use serde::{Deserialize, Serialize};

use super::Polished;
use crate::metric::Metric;

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
    /// The Langevin step δ the chains took, when it was set from the posteriors.
    #[serde(default)]
    pub step_size: Option<f64>,
}

/// A non-finite update that was backed off: the M-step restarted from its θ_k with the step
/// halved.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BackOff {
    /// The M-step (0-based).
    pub mstep: usize,
    /// The update within it that failed.
    pub update: usize,
    /// What failed.
    pub reason: String,
    /// The factor on α_t (or on the first Newton trial) from now on.
    pub step_factor: f64,
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
    /// Non-finite updates that were backed off.
    #[serde(default)]
    pub backoffs: Vec<BackOff>,
    /// The polished estimate, with its Monte Carlo and statistical standard errors, when the
    /// settings ask for it.
    #[serde(default)]
    pub polished: Option<Polished>,
    /// Why polishing failed, if it did (the estimate is then EM's).
    #[serde(default)]
    pub polish_error: Option<String>,
    /// Polishing attempts made (each after a failure with fresh streams and twice the draws).
    #[serde(default)]
    pub polish_attempts: usize,
    /// EM's rate per M-step ([`super::slow_rate`]) when EM handed its estimate to the polish before its
    /// stopping rule held, because it was slow; `None` when it ran until its rule or its cap.
    #[serde(default)]
    pub handover_rate: Option<f64>,
    /// Why EM took its estimate back after handing it over: every attempt of the polish failed
    /// (why). EM then ran on to its stopping rule or its cap, and the polish started again from
    /// there ([`super::second_polish_seed`]); `None` when the first polish served, or EM did not hand
    /// over. A GLMM fitted from Laplace's start says here why EM ran on after that start's
    /// polish failed ([`crate::glmm::Glmm::fit`]).
    #[serde(default)]
    pub em_resumed: Option<String>,
    /// Whether the last M-step in the trace is still running (checkpoints only).
    pub(super) in_mstep: bool,
    /// σ̂ of the current M-step's chains, with [`super::ChainStep::Adaptive`] (checkpoints only).
    #[serde(default)]
    pub(super) posterior_scale: Option<f64>,
    /// The chains' metric in the current M-step (checkpoints only).
    #[serde(default)]
    pub(super) metric: Option<Metric>,
}

impl EmTrace {
    /// The run's answer, its Monte Carlo standard errors and where they come from: the polished
    /// estimate when there is one, else EM's — and then the status says whether polishing was
    /// not asked for or failed (with why), so that EM's estimate is never taken for a polished one.
    pub fn final_estimate(&self) -> FinalEstimate<'_> {
        match (&self.polished, &self.polish_error) {
            (Some(p), _) => FinalEstimate {
                estimate: &p.estimate,
                se: &p.mc_se,
                status: EstimateStatus::Polished,
            },
            (None, Some(e)) => FinalEstimate {
                estimate: &self.estimate,
                se: &self.estimate_se,
                status: EstimateStatus::PolishFailed(e),
            },
            (None, None) => FinalEstimate {
                estimate: &self.estimate,
                se: &self.estimate_se,
                status: EstimateStatus::Em,
            },
        }
    }
}

/// A run's answer ([`EmTrace::final_estimate`]).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct FinalEstimate<'a> {
    /// The estimate of θ.
    pub estimate: &'a [f64],
    /// Its Monte Carlo standard errors.
    pub se: &'a [f64],
    /// Where it comes from.
    pub status: EstimateStatus<'a>,
}

/// Where a run's answer comes from.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum EstimateStatus<'a> {
    /// `polish` brought it to the maximum (its gaps say how close).
    Polished,
    /// EM's own estimate: polishing was not asked for.
    Em,
    /// EM's own estimate, because every polishing attempt failed: why the last one did.
    PolishFailed(&'a str),
}

impl EstimateStatus<'_> {
    /// Its name in results: `"polished"`, `"em"` or `"polish failed"`.
    pub fn name(&self) -> &'static str {
        match self {
            EstimateStatus::Polished => "polished",
            EstimateStatus::Em => "em",
            EstimateStatus::PolishFailed(_) => "polish failed",
        }
    }
}
