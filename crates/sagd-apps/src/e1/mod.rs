//! Experiment E1, the paper's first application (Figure 1): automated EM on the Gamma-sigmoid
//! model beside exact gradient ascent (∇Q by quadrature), the maximum-likelihood estimate, the
//! true log-likelihood along both paths, and the surface under them. [`E1Settings::default`] is
//! the paper's experiment; [`run`] returns everything a report needs.

mod gamma_sigmoid;
mod stages;
pub use gamma_sigmoid::GammaSigmoid;
pub use stages::{fit, run};

use std::path::PathBuf;

use sagd::em::information::{Information, Polished};
use sagd::em::{EmSettings, EmTrace, StopRule};
use sagd::error::{Result, SagdError};
use sagd::langevin::{LangevinSettings, Momentum};
use sagd::schedule::{LengthSchedule, Schedule};
use serde::{Deserialize, Serialize};

/// Where E1's observations come from.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "source", rename_all = "lowercase")]
pub enum E1Data {
    /// n points simulated at the true θ = (a, b) from the run's seed.
    Simulated {
        /// Observations.
        n: usize,
        /// The true (a, b).
        true_theta: [f64; 2],
    },
    /// A user's positive observations.
    Observed {
        /// The observations.
        x: Vec<f64>,
    },
}

/// Settings of E1. The default is the paper's experiment: n = 100 simulated points at
/// θ = (2, 0.5), θ₀ = (0, 1), three M-steps of T = 100 updates with α = 0.2, δ_t = 0.1/√t,
/// K_t = t + 20, 100 burn-in steps per M-step, γ = 1, the Euler scheme, chains from z = 0 with
/// ρ = 0, seed 1.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct E1Settings {
    /// The observations.
    pub data: E1Data,
    /// θ₀ = (a₀, b₀).
    pub theta0: [f64; 2],
    /// M-steps to run when the stopping rule is off.
    pub msteps: usize,
    /// Run M-steps until the stopping rule holds (at most `max_msteps`).
    pub until_converged: bool,
    /// The most M-steps with the stopping rule.
    pub max_msteps: usize,
    /// The stopping rule.
    pub stop_rule: StopRule,
    /// T: updates per M-step.
    pub updates_per_mstep: usize,
    /// The constant learning rate α.
    pub alpha: f64,
    /// δ_t = delta0/√t.
    pub delta0: f64,
    /// K_t = t + k0.
    pub k0: usize,
    /// Burn-in steps at the start of every M-step.
    pub burn_in: usize,
    /// The integrator and friction γ.
    pub langevin: LangevinSettings,
    /// How momenta start.
    pub initial_momentum: Momentum,
    /// Chains per data point.
    pub chains_per_point: usize,
    /// Seed of the simulated data and of the chains (separate streams). Seed 0's data have their
    /// MLE at b = 0, where EM converges sublinearly; seed 1's MLE is interior.
    pub seed: u64,
    /// Gauss-Hermite nodes per point for exact GD, ℓ and the MLE.
    pub quad_nodes: usize,
    /// Grid points per axis of the log-likelihood surface.
    pub surface: usize,
    /// After EM, [`polish`](sagd::em::polish) the estimate: Newton steps on ℓ until
    /// its estimated gap to the maximum is below 0.01 beyond Monte Carlo noise (the check EM's
    /// own rule cannot make when EM is slow); the standard errors then come from there.
    #[serde(default)]
    pub polish: bool,
}

impl Default for E1Settings {
    fn default() -> Self {
        let em = EmSettings::paper_e1();
        E1Settings {
            data: E1Data::Simulated {
                n: 100,
                true_theta: [2.0, 0.5],
            },
            theta0: [0.0, 1.0],
            msteps: em.max_msteps,
            until_converged: false,
            max_msteps: 50,
            stop_rule: StopRule::default(),
            updates_per_mstep: em.updates_per_mstep,
            alpha: 0.2,
            delta0: 0.1,
            k0: 20,
            burn_in: em.sagd.burn_in,
            langevin: em.sagd.langevin,
            initial_momentum: em.sagd.initial_momentum,
            chains_per_point: em.chains_per_point,
            seed: 1,
            quad_nodes: 100,
            surface: 60,
            polish: false,
        }
    }
}

impl E1Settings {
    /// The automated-EM settings these describe.
    pub fn em(&self) -> EmSettings {
        let mut s = EmSettings::paper_e1();
        s.sagd.langevin = self.langevin;
        s.sagd.initial_momentum = self.initial_momentum;
        s.sagd.schedules.step_size = Schedule::power(self.delta0, 0.5);
        s.sagd.schedules.chain_length = LengthSchedule::power(1.0, 1.0, self.k0);
        s.sagd.schedules.learning_rate = Schedule::constant(self.alpha);
        s.sagd.burn_in = self.burn_in;
        s.updates_per_mstep = self.updates_per_mstep;
        s.chains_per_point = self.chains_per_point;
        if self.until_converged {
            s.max_msteps = self.max_msteps;
            s.stopping = Some(self.stop_rule);
        } else {
            s.max_msteps = self.msteps;
            s.stopping = None;
        }
        s
    }

    /// Checks every setting.
    pub fn validate(&self) -> Result<()> {
        let bad = |name: &'static str, value: String, fix: &str| {
            Err(SagdError::InvalidSetting {
                name,
                value,
                fix: fix.into(),
            })
        };
        if self.quad_nodes < 8 {
            return bad(
                "quad_nodes",
                self.quad_nodes.to_string(),
                "use at least 8 (100 is accurate to 1e-9 here)",
            );
        }
        if self.surface < 2 {
            return bad(
                "surface",
                self.surface.to_string(),
                "use at least 2 grid points per axis",
            );
        }
        if let E1Data::Simulated { n: 0, .. } = self.data {
            return bad("n", "0".into(), "simulate at least 1 observation");
        }
        // Named by the setting the user gave: fixed M-steps or the stopping rule's cap.
        if !self.until_converged && self.msteps == 0 {
            return bad("msteps", "0".into(), "run at least 1 M-step (the paper: 3)");
        }
        if self.until_converged && self.max_msteps == 0 {
            return bad(
                "max_msteps",
                "0".into(),
                "allow at least 1 M-step (default 50)",
            );
        }
        self.em().validate(2)
    }

    /// The model: simulated from the seed, or the user's observations.
    pub fn model(&self) -> Result<GammaSigmoid> {
        match &self.data {
            E1Data::Simulated { n, true_theta } => {
                Ok(GammaSigmoid::simulate(*n, true_theta[0], true_theta[1], self.seed)?.0)
            }
            E1Data::Observed { x } => GammaSigmoid::new(x.clone()),
        }
    }
}

/// How E1 runs, beside what it computes.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct E1Options {
    /// Checkpoint file and cadence (updates within an M-step; also after every M-step).
    pub checkpoint: Option<(PathBuf, usize)>,
    /// Resume from the checkpoint file.
    pub resume: bool,
}

/// The maximum-likelihood estimate by BFGS on the quadrature log-likelihood.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Mle {
    /// θ̂.
    pub theta: Vec<f64>,
    /// ℓ(θ̂).
    pub loglik: f64,
    /// max |∂ℓ/∂θ_j| there.
    pub grad_max: f64,
    /// Whether BFGS met its gradient tolerance.
    pub converged: bool,
    /// BFGS iterations.
    pub iterations: usize,
    /// ℓ has no maximum at a finite θ: `loglik` is not above ℓ's limit as a → +∞
    /// ([`GammaSigmoid::loglik_at_shape_bound`]) by more than a thousandth of a nat, so `theta`
    /// is where the search stopped on the ridge toward it, not an estimate.
    #[serde(default)]
    pub unbounded: bool,
}

impl Mle {
    /// Its row's name in a table: `MLE`, or `no MLE` where the search ended on the ridge
    /// toward a → +∞ ([`Mle::unbounded`]; the run's warning says why).
    pub fn label(&self) -> &'static str {
        if self.unbounded {
            "no MLE"
        } else {
            "MLE"
        }
    }
}

/// The true log-likelihood on a grid: `loglik[i][j]` at `(a[i], b[j])`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Surface {
    /// Grid in a.
    pub a: Vec<f64>,
    /// Grid in b.
    pub b: Vec<f64>,
    /// Values.
    pub loglik: Vec<Vec<f64>>,
    /// Gauss-Hermite nodes per point.
    pub nodes: usize,
}

/// Everything E1 computed.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct E1Result {
    /// The observations.
    pub x: Vec<f64>,
    /// Automated EM's record (path, M-steps, estimate).
    pub em: EmTrace,
    /// ℓ at every point of the SAGD path.
    pub loglik_sagd: Vec<f64>,
    /// ℓ at the stopping rule's estimate (the last iterate when the rule is off).
    pub estimate_loglik: f64,
    /// Exact gradient ascent: θ₀ and θ after every update.
    pub exact_path: Vec<Vec<f64>>,
    /// ℓ along it.
    pub loglik_exact: Vec<f64>,
    /// The MLE.
    pub mle: Mle,
    /// Largest |ℓ by the rule − ℓ by a 28001-point trapezoid rule| at θ₀, both endpoints and the MLE.
    pub quadrature_error: f64,
    /// The surface under Figure 1a.
    pub surface: Surface,
    /// Wall seconds of `sagd`, `exact_gd`, `loglik_paths`, `mle`, `surface`.
    pub timing_s: std::collections::BTreeMap<String, f64>,
    /// In a run split over processes: what this process exchanged in each of those phases.
    #[serde(skip_serializing_if = "std::collections::BTreeMap::is_empty", default)]
    pub exchanged: std::collections::BTreeMap<String, sagd::share::Exchanged>,
    /// What the run found wrong with itself: a maximisation that did not converge, an EM that
    /// ended far from the maximum, paths beyond any sensible range.
    pub warnings: Vec<String>,
    /// The observed information at the estimate by Louis' identity: standard errors and Wald
    /// intervals (statistical uncertainty of the MLE, which the estimate approaches; not the Monte
    /// Carlo error of the estimate, `em.estimate_se`).
    pub information: Option<Information>,
    /// The polished estimate and its log-likelihood, with `polish` on.
    pub polished: Option<(Polished, f64)>,
}

impl E1Result {
    /// SAGD's last iterate.
    pub fn sagd_end(&self) -> &[f64] {
        self.em.path.last().map(|v| &v[..]).unwrap_or(&[])
    }

    /// Exact GD's last iterate.
    pub fn exact_end(&self) -> &[f64] {
        self.exact_path.last().map(|v| &v[..]).unwrap_or(&[])
    }
}

/// Values that a figure or a starting point can use: finite and below 1e6 in magnitude.
pub fn sane(v: &[f64]) -> bool {
    v.iter().all(|x| x.is_finite() && x.abs() < 1e6)
}

/// How far below the maximum ℓ may end before EM is flagged as "far from the MLE": half the 99%
/// quantile of χ² with `p` degrees of freedom, the edge of the MLE's 99% likelihood-ratio
/// confidence region (4.61 nats for p = 2). The paper's three M-steps end 0.7 below it.
pub fn far_from_mle(p: usize) -> f64 {
    use statrs::distribution::{ChiSquared, ContinuousCDF};
    ChiSquared::new(p.max(1) as f64).map_or(4.61, |c| 0.5 * c.inverse_cdf(0.99))
}
