//! Standard errors of a maximum-likelihood estimate by Louis' identity: the observed information is
//!
//! I(θ) = Σ_i ( −E[∇²θ log p(x_i, Z_i; θ)] − Var[∇θ log p(x_i, Z_i; θ)] ),  Z_i ~ p(z | x_i; θ),
//!
//! estimated from Langevin chains on each point's posterior at θ̂ (one chain per point, as EM's),
//! with the Hessian of the complete-data log-likelihood by central differences of its gradient.
//! The standard errors are the square roots of the diagonal of I⁻¹.

use serde::{Deserialize, Serialize};

use crate::error::Result;
use crate::langevin::{LangevinSettings, Scheme};
use crate::linalg::spd_inverse;
use crate::metric::Preconditioner;
use crate::model::LatentModel;
use crate::rng::stream_seed;

use super::mstep::ChainStep;

mod answer;
mod at_estimate;
mod chains;
mod control;
mod parts;
mod steps;
mod walk;

pub use at_estimate::{SE_STEP, SLOPE_REACH};
pub use parts::CHAIN_RHAT_LIMIT;
use parts::{continued_parts, louis_parts, Continued};
pub use steps::{step_fraction, REACH_DOUBLINGS};
pub use walk::polish;

/// How the posterior expectations of Louis' identity are estimated.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct LouisSettings {
    /// The integrator (BAOAB: exact positions on Gaussian targets) and friction.
    pub langevin: LangevinSettings,
    /// The Langevin step δ.
    pub step_size: f64,
    /// Steps discarded first.
    pub burn_in: usize,
    /// Draws per chain.
    pub draws: usize,
    /// Steps between draws.
    pub thin: usize,
    /// The step of the central differences of ∇θ (relative to 1 + |θ_j|).
    pub fd_step: f64,
    /// [`ChainStep::Adaptive`]: chains from the posterior modes with δ and γ from the posteriors'
    /// curvature (`step_size` and the friction are then not used); [`ChainStep::Schedule`]: these.
    #[serde(default)]
    pub chain_step: ChainStep,
    /// Chains in all, at least (each point gets ⌈min_chains / n⌉; 0 or 1: one per point).
    #[serde(default)]
    pub min_chains: usize,
    /// The chains' mass matrix, adapted at θ ([`crate::metric`]).
    #[serde(default)]
    pub preconditioner: Preconditioner,
    /// How the information is estimated.
    #[serde(default)]
    pub method: InformationMethod,
    /// The step h of [`InformationMethod::CoupledScore`] (relative to 1 + |θ_j|): 1e-5 by
    /// default (1e-4 before the coupled runs took their own controls; the one-sided
    /// differences' bias, in proportion to h, was then below the noise).
    #[serde(default = "default_coupled_step")]
    pub coupled_step: f64,
}

fn default_coupled_step() -> f64 {
    1e-5
}

/// How [`louis_information`] estimates the observed information.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum InformationMethod {
    /// Louis' identity from one set of chains at θ: complete minus missing information. Cheap
    /// (one run), but where most information is missing, the difference of two large noisy
    /// terms: its relative error, and the standard errors' bias, grow with the missing fraction.
    Louis,
    /// −∂ score/∂θ by differences of Fisher's score between chains at θ and at θ + h e_j, all
    /// driven by the same noise from the same settled state (common random numbers; Langevin
    /// without a Metropolis test is smooth in θ, so the paired chains stay within O(h)). p + 1
    /// runs instead of one, but no cancellation: on a 300-long latent series with two thirds of the
    /// information missing, 100 draws gave the information to 1-2%, where Louis' identity with
    /// 1000 draws was off by up to 30%. Each run's draws take the score's control variate of
    /// its own posterior, and where the information comes out precise enough for the one-sided
    /// differences' O(h) bias to show, p more runs at θ − h e_j make them central.
    #[default]
    #[serde(rename = "coupled-score")]
    CoupledScore,
}

impl Default for LouisSettings {
    fn default() -> Self {
        LouisSettings {
            langevin: LangevinSettings {
                scheme: Scheme::Baoab,
                gamma: 1.0,
            },
            step_size: 0.2,
            burn_in: 200,
            draws: 200,
            thin: 5,
            fd_step: 1e-5,
            chain_step: ChainStep::adaptive(),
            min_chains: 4,
            preconditioner: Preconditioner::Auto,
            method: InformationMethod::CoupledScore,
            coupled_step: default_coupled_step(),
        }
    }
}

/// The observed information at θ̂ and what follows from it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Information {
    /// θ̂, where it was taken.
    pub theta: Vec<f64>,
    /// I(θ̂), p × p.
    pub matrix: Vec<Vec<f64>>,
    /// Standard errors √diag(I⁻¹).
    pub se: Vec<f64>,
    /// The Monte Carlo standard error of each `se`, by the jackknife over batches of draws
    /// (empty with fewer than 20 draws).
    #[serde(default)]
    pub se_error: Vec<f64>,
    /// With several chains per point: the largest split R̂ of a point's score along its chains
    /// (near 1 when they agree; above [`CHAIN_RHAT_LIMIT`] they have not mixed).
    #[serde(default)]
    pub chain_rhat: Option<f64>,
    /// 95% Wald intervals θ̂ ± 1.96 se.
    pub wald95: Vec<[f64; 2]>,
    /// Posterior draws per data point behind the estimate.
    pub draws: usize,
    /// The score ∇ℓ(θ) = Σ_i E[∇θ log p(x_i, Z_i; θ)] (Fisher's identity), from the same draws.
    pub score: Vec<f64>,
    /// The Monte Carlo covariance of `score`, by batch means over the draws (20 batches), so
    /// that the chains' autocorrelation is counted.
    pub score_cov: Vec<Vec<f64>>,
    /// The Newton step I⁻¹ ∇ℓ: how far θ is from the maximum, to second order.
    pub newton_step: Vec<f64>,
    /// ½ ∇ℓᵀ I⁻¹ ∇ℓ: how far ℓ(θ) is below the maximum, to second order.
    pub gap: f64,
    /// ½ tr(I⁻¹ cov): what Monte Carlo noise alone adds to `gap` on average.
    pub gap_noise: f64,
    /// The complete-data information Σ_i −E[∇²θ log p(x_i, Z_i; θ)], the first term of I.
    #[serde(default)]
    pub complete: Vec<Vec<f64>>,
    /// I without each batch of draws (the jackknife's replicates behind `se_error`), which also
    /// give the error that I's own noise puts into a Newton step. Not saved.
    #[serde(skip)]
    pub leave_one_out: Vec<Vec<Vec<f64>>>,
}

/// Louis' observed information of `model` at `theta`, from chains seeded by `seed`.
pub fn louis_information<M: LatentModel<f64>>(
    model: &M,
    theta: &[f64],
    s: &LouisSettings,
    seed: u64,
) -> Result<Information> {
    louis_parts(model, theta, s, seed)?.into_information(theta)
}

#[cfg(test)]
mod tests {
    use super::parts::{score_parts, LouisParts};
    use super::*;
    use crate::model::{Derived, LogJoint, Scalar};

    /// x_i | z_i ~ N(z_i, 1), z_i ~ N(μ, 1), θ = (μ): ∇ℓ(μ) = Σ (x_i − μ)/2.
    struct NormalNormal(Vec<f64>);

    impl LogJoint for NormalNormal {
        fn n_data(&self) -> usize {
            self.0.len()
        }
        fn latent_dim(&self) -> usize {
            1
        }
        fn theta_dim(&self) -> usize {
            1
        }
        fn log_joint<S: Scalar>(&self, th: &[S], i: usize, z: &[S]) -> S {
            let (a, b) = (z[0] - th[0], z[0] - S::constant(self.0[i]));
            (a * a + b * b) * -0.5
        }
    }

    /// y_i | z_i ~ Poisson(e^{z_i}), z_i ~ N(μ, σ²), θ = (μ, log σ): a posterior the score's
    /// control leaves inexact, so the coupled differences stay one-sided.
    struct PoissonNormal(Vec<f64>);

    impl LogJoint for PoissonNormal {
        fn n_data(&self) -> usize {
            self.0.len()
        }
        fn latent_dim(&self) -> usize {
            1
        }
        fn theta_dim(&self) -> usize {
            2
        }
        fn log_joint<S: Scalar>(&self, th: &[S], i: usize, z: &[S]) -> S {
            let u = (z[0] - th[0]) / th[1].exp();
            z[0] * self.0[i] - z[0].exp() - u * u * 0.5 - th[1]
        }
    }

    /// An information's runs taken on to more draws give the bits of a run of that many draws
    /// from the start with the same seed, on one-sided and on central differences, with several
    /// chains per point (R̂'s series), a doubling after a doubling, and a call for no more.
    #[test]
    fn continued_runs_give_the_bits_of_a_longer_run() {
        let x: Vec<f64> = (0..30).map(|i| ((i * 7) % 11) as f64).collect();
        let poisson = Derived(PoissonNormal(x.clone()));
        let normal = Derived(NormalNormal(x.iter().map(|v| v / 4.0 - 1.0).collect()));
        let s = LouisSettings {
            draws: 40,
            min_chains: 60,
            ..LouisSettings::default()
        };
        let check = |model: &dyn Fn(u64) -> (LouisParts, Vec<LouisParts>, Vec<LouisParts>)| {
            let (first, continued, fresh) = model(5);
            assert_eq!(first.draws, 40);
            for (c, f) in continued.iter().zip(&fresh) {
                assert_eq!(c.draws, f.draws);
                assert_eq!(c.info, f.info);
                assert_eq!(c.complete, f.complete);
                assert_eq!(c.score, f.score);
                assert_eq!(c.score_cov, f.score_cov);
                assert_eq!(c.leave_one_out, f.leave_one_out);
                assert_eq!(c.chain_rhat, f.chain_rhat);
                assert!(c.chain_rhat.is_some());
            }
        };
        fn runs<M: LatentModel<f64>>(
            model: &M,
            theta: &[f64],
            s: &LouisSettings,
            seed: u64,
        ) -> (LouisParts, Vec<LouisParts>, Vec<LouisParts>) {
            let (first, mut runs) = continued_parts(model, theta, s, seed).unwrap();
            let (continued, fresh) = [61, 122, 122]
                .into_iter()
                .map(|to| {
                    let longer = LouisSettings { draws: to, ..*s };
                    let fresh = louis_parts(model, theta, &longer, seed).unwrap();
                    (runs.extend(to).unwrap(), fresh)
                })
                .unzip();
            (first, continued, fresh)
        }
        check(&|seed| runs(&poisson, &[1.2, -0.5], &s, seed));
        check(&|seed| runs(&normal, &[0.2], &s, seed));
        // Which differences each took: the Gaussian's central, the Poisson's one-sided.
        let error = |parts: &LouisParts| chains::relative_error(&parts.info, &parts.leave_one_out);
        let gaussian = louis_parts(&normal, &[0.2], &s, 5).unwrap();
        let counts = louis_parts(&poisson, &[1.2, -0.5], &s, 5).unwrap();
        assert!(
            error(&gaussian) < chains::CENTRAL_BELOW,
            "{}",
            error(&gaussian)
        );
        assert!(error(&counts) > chains::CENTRAL_BELOW, "{}", error(&counts));
    }

    /// The score of one run for the score alone agrees with the closed form within four of its
    /// own Monte Carlo errors, and rescoring an information recomputes its step from it.
    #[test]
    fn the_score_alone_is_the_closed_form_within_its_error() {
        let x: Vec<f64> = (0..40)
            .map(|i| ((i * 17) % 13) as f64 / 4.0 - 1.0)
            .collect();
        let mu = 0.2;
        let exact: f64 = x.iter().map(|x| (x - mu) / 2.0).sum();
        let model = Derived(NormalNormal(x));
        let s = LouisSettings {
            draws: 400,
            ..LouisSettings::default()
        };
        let parts = score_parts(&model, &[mu], &s, 3).unwrap();
        let se = parts.score_cov[0][0].sqrt();
        assert!(parts.info.is_empty() && parts.draws == 400);
        assert!(
            (parts.score[0] - exact).abs() < 4.0 * se,
            "{} vs {exact} ± {se}",
            parts.score[0]
        );
        let mut info = louis_information(&model, &[mu], &LouisSettings::default(), 4).unwrap();
        let score = parts.score[0];
        info.rescored(parts).unwrap();
        assert_eq!(info.score, vec![score]);
        let step = score / info.matrix[0][0];
        assert!((info.newton_step[0] - step).abs() < 1e-12 * step.abs());
        assert!((info.gap - 0.5 * score * step).abs() < 1e-12 * info.gap.abs());
        assert_eq!(info.draws, 400);
    }
}

/// Newton steps on ℓ after EM ([`polish`]): when to stop, and the chains behind each step.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct PolishSettings {
    /// The chains that estimate the score and the information at each step.
    pub louis: LouisSettings,
    /// Newton steps at most.
    pub max_steps: usize,
    /// Stop once the estimated log-likelihood gap, less what Monte Carlo noise alone gives, is
    /// below this, and so is the noise part itself (the gap the last step's own noise leaves, on
    /// average); while the noise part is larger, each step doubles the draws.
    pub gap_tol: f64,
    /// The draws may double up to this many times.
    pub max_doublings: usize,
}

impl Default for PolishSettings {
    fn default() -> Self {
        PolishSettings {
            louis: LouisSettings::default(),
            max_steps: 12,
            gap_tol: 0.01,
            max_doublings: 3,
        }
    }
}

/// What [`polish`] did.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Polished {
    /// The estimate: the last point plus its Newton step, shrunk by [`step_fraction`] so that
    /// the step's own noise does not, on average, leave it further from the maximum than the
    /// point was.
    pub estimate: Vec<f64>,
    /// The point the last Newton step was taken from.
    #[serde(default)]
    pub last_point: Vec<f64>,
    /// That step whole, I⁻¹∇ℓ there (`estimate` is `last_point` plus [`step_fraction`] of it).
    #[serde(default)]
    pub last_step: Vec<f64>,
    /// The whole last step's Monte Carlo standard errors, √diag(I⁻¹ C I⁻¹) with C the score's
    /// Monte Carlo covariance: how far the maximum may lie from the estimate on that account.
    pub mc_se: Vec<f64>,
    /// The information behind the estimate's standard errors: taken again at `estimate`, or the
    /// last point's where that lies within [`SE_STEP`] of it and near enough that the standard
    /// errors' drift stays within their own noise ([`Information::theta`] says which); its
    /// `newton_step`, where it was taken at `estimate`, is how far the maximum still lies. Its `wald95` intervals are centred on `estimate`, and its `se_error` also counts
    /// how far the estimate's own Monte Carlo error (`mc_se`) moves the standard errors. Where
    /// it is not positive definite at `estimate`, the last point's, and `se_warning` says so.
    pub information: Information,
    /// The estimated gap ½ ∇ℓᵀ I⁻¹ ∇ℓ, less its noise part, at each point visited (NaN where I
    /// was not positive definite and an EM-gradient step was taken instead).
    pub gaps: Vec<f64>,
    /// The noise part at the last point: about the gap that the estimate's own Monte Carlo error
    /// leaves (the last step's draws are doubled until it is below [`STEP_NOISE`] of the
    /// tolerance, or [`SE_DOUBLINGS`] times).
    pub gap_noise: f64,
    /// Whether the last gap was below the tolerance.
    pub converged: bool,
    /// Why the answer needs care, if it does: the polish ran out of Newton steps before its gap
    /// estimate fell below the tolerance (`converged` false), the standard errors are less
    /// precise than asked ([`SE_PRECISION`]), or a point's chains disagree
    /// ([`CHAIN_RHAT_LIMIT`]).
    #[serde(default)]
    pub se_warning: Option<String>,
}

/// The seed of polishing attempt `attempt` (0-based) under `seed`: its own streams, unrelated to
/// any other attempt's, run's or point's. Step k of an attempt draws from
/// [`stream_seed`]`(attempt_seed(seed, attempt), k)`, and chain c of that step from
/// `stream_seed(that, c)`.
#[doc(hidden)]
pub fn attempt_seed(seed: u64, attempt: usize) -> u64 {
    stream_seed(seed, 0xA77E_0000 + attempt as u64)
}

/// The most times [`polish`] doubles the draws at its last point so that the standard errors'
/// own Monte Carlo error falls below [`SE_PRECISION`] of them and the last Newton step's noise
/// below [`STEP_NOISE`] of the gap tolerance.
#[doc(hidden)]
pub const SE_DOUBLINGS: usize = 3;

/// The noise the last Newton step may carry, as a fraction of [`PolishSettings::gap_tol`]. The
/// step is taken whole, and its noise N (`gap_noise`) is what it leaves below the maximum on
/// average, whatever gap it removes: from an estimate already at the maximum, a step with the
/// tolerance's noise would leave it the whole tolerance below (EM 0.0001 nats below, the
/// polish 0.0106). Near the maximum the step's size is no guide (its gap estimate is noise
/// too), so the step is made precise instead.
#[doc(hidden)]
pub const STEP_NOISE: f64 = 0.25;

/// How near the maximum (in gap tolerances) a point must be for [`polish`] to keep its
/// information for the next point, estimating only the score there: a whole Newton step from
/// there moves θ by about √(2·gap) standard errors (0.2 at twice the default tolerance), where
/// the information, a few percent off at most, still gives the step; the standard errors are
/// the answer's own ([`SE_STEP`]).
pub const LAG_GAP: f64 = 2.0;

/// How near the maximum a point must be, in multiples of its gap's noise part, for [`polish`] to
/// double the draws of the points after it while that noise part exceeds the tolerance. Further
/// out the step's noise moves its landing by far less than the distance does (from 7 nats
/// below, a step with 0.02 nats of noise), and draws doubled there would be paid again at every
/// point after it; the last point's draws are set by its own rule ([`STEP_NOISE`]).
pub const NOISE_DOUBLING_GAP: f64 = 10.0;

/// The relative Monte Carlo error of the standard errors that [`polish`] aims for.
#[doc(hidden)]
pub const SE_PRECISION: f64 = 0.1;

/// The stream under a polishing attempt's seed that its [`pilot`] draws from (apart from its
/// steps' `0..`).
const PILOT_STREAM: u64 = 0x9170_7000;

/// At the polish's first point, the information from a pilot run of 4 draws per jackknife batch,
/// taken on to the draws its own precision says the points need ([`draws_needed`]; none more
/// where the pilot serves: a nearly Gaussian posterior, whose score the control variate makes
/// nearly exact); then `louis.draws` becomes what that information's precision asks for the
/// points after it. The information comes with its runs, which more draws continue. `None` where
/// an information is not positive definite, with `louis.draws` set to what the pilot says the
/// points need (unchanged where its own is not).
fn pilot<'a, M: LatentModel<f64>>(
    model: &'a M,
    at: &[f64],
    louis: &mut LouisSettings,
    gap_tol: f64,
    seed: u64,
) -> Result<Option<(Information, Continued<'a, M>)>> {
    let draws = 4 * parts::SE_BATCHES;
    if draws >= louis.draws {
        return Ok(None);
    }
    let settings = LouisSettings { draws, ..*louis };
    let (parts, mut runs) = continued_parts(model, at, &settings, seed)?;
    if spd_inverse(&parts.info).is_none() {
        return Ok(None);
    }
    let info = parts.into_information(at)?;
    let need = draws_needed(&info, louis.draws, gap_tol);
    if need <= draws {
        louis.draws = draws;
        return Ok(Some((info, runs)));
    }
    // The pilot's runs taken on to `need` draws: the same draws as a run of `need` from the
    // pilot's seed, for the cost of those added.
    let parts = runs.extend(need)?;
    louis.draws = need;
    if spd_inverse(&parts.info).is_none() {
        return Ok(None);
    }
    let info = parts.into_information(at)?;
    // The points after this one need no more draws than its precision says.
    louis.draws = draws_needed(&info, need, gap_tol);
    Ok(Some((info, runs)))
}

/// The draws per chain that the points after `info`'s need, by its precision: as few as keep the
/// standard errors' own error within a quarter of [`SE_PRECISION`] and a Newton step's noise
/// within half of `gap_tol` (they fall as 1/√draws and 1/draws), at least 4 per jackknife batch,
/// never more than `most`. The margin is the jackknife's: with 4-8 draws a batch its errors can
/// be a third of the truth (a binary random intercept's log-sd, 4-8% reported where seeds
/// spread by 12%), so the draws fall only where the errors are far below the aim. The last
/// step's noise is brought within [`STEP_NOISE`] of the tolerance by runs of the score alone, a
/// fraction of an information's cost. Where the score's control variate leaves little noise (a
/// nearly Gaussian posterior), a fraction of the draws serves.
fn draws_needed(info: &Information, most: usize, gap_tol: f64) -> usize {
    let se = (at_estimate::se_imprecision(info) / (0.25 * SE_PRECISION)).powi(2);
    let step = info.gap_noise / (0.5 * gap_tol);
    let want = (info.draws as f64 * se.max(step)).ceil();
    if !want.is_finite() {
        return most;
    }
    (want as usize).clamp((4 * parts::SE_BATCHES).min(most), most)
}

/// [`polish`], tried again after a failure (an information that is not positive definite is most
/// often noise) with fresh streams and twice the draws, up to `attempts` times in all: the
/// polished estimate and the attempts it took, or why each attempt failed. Attempt a runs
/// [`polish`] with the seed [`attempt_seed`]`(seed, a)`.
#[doc(hidden)]
pub fn polish_retrying<M: LatentModel<f64>>(
    model: &M,
    theta: &[f64],
    s: &PolishSettings,
    seed: u64,
    attempts: usize,
) -> std::result::Result<(Polished, usize), Vec<String>> {
    let mut s = *s;
    let mut failures = Vec::new();
    for attempt in 0..attempts.max(1) {
        match polish(model, theta, &s, attempt_seed(seed, attempt)) {
            Ok(p) => return Ok((p, attempt + 1)),
            Err(e) => {
                failures.push(format!("with {} draws: {e}", s.louis.draws));
                s.louis.draws *= 2;
            }
        }
    }
    Err(failures)
}
