//! One way into a GLMM fit for every interface: the exact likelihood maximised directly where
//! it can be computed ([`Glmm::fit_exact`]), automated EM with Langevin chains elsewhere, and
//! what both report — the estimate, its covariance, the log-likelihood at it and whether the
//! fit is singular.

use serde::{Deserialize, Serialize};

use super::{Criterion, ExactFit, ExactSettings, Family, Glmm, MarginalLikelihood};
use crate::em::{AutomatedEm, EmEvent, EmSettings, EmTrace};
use crate::error::{Result, SagdError};
use crate::linalg::spd_inverse;
use crate::run::Control;

/// The most M-steps [`Method::Auto`] runs from Laplace's maximum before the polish (when the
/// settings polish): none. From there the polish's Newton steps, whose estimated gap to the
/// maximum decides convergence, cover the rest sooner than EM's short steps: on the crossed
/// binary designs of `crates/sagd-py/bench/lme4.py`, the one M-step it took until 2026-11-29
/// cost 0.29 s of a 1.34 s fit (30 × 20 levels) and 0.11 s of 0.76 s (the salamander design),
/// on one thread, and the fits from Laplace's maximum reach the same likelihood.
#[doc(hidden)]
pub const LAPLACE_START_MSTEPS: usize = 0;

/// How [`Glmm::fit`] maximises the likelihood.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Method {
    /// The exact likelihood where [`Glmm::exact_method`] can compute it, else EM started at
    /// Laplace's maximum ([`Glmm::fit_laplace`]) for at most [`LAPLACE_START_MSTEPS`] M-steps
    /// (none), then the polish; where Laplace's fit fails, as [`Method::Em`].
    #[default]
    Auto,
    /// The exact likelihood, or an error saying why it cannot be computed.
    Exact,
    /// Automated Monte Carlo EM with Langevin chains, on any model, from [`Glmm::start`].
    Em,
}

impl std::str::FromStr for Method {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s {
            "auto" => Ok(Method::Auto),
            "exact" => Ok(Method::Exact),
            "em" => Ok(Method::Em),
            _ => Err(format!(
                "unknown method `{s}`: use auto (the exact likelihood where it can be computed, else EM), exact or em"
            )),
        }
    }
}

/// Settings of [`Glmm::fit`].
#[derive(Clone, Debug, Default)]
pub struct FitSettings {
    /// Exact, EM or whichever applies.
    pub method: Method,
    /// The exact fit's (REML only with the exact method, Gaussian family).
    pub exact: ExactSettings,
    /// EM's.
    pub em: EmSettings,
    /// EM's chains and the sampled log-likelihood's draws.
    pub seed: u64,
}

/// How a [`GlmmFit`] was made.
#[derive(Clone, Debug)]
pub enum Fitted {
    /// By the exact likelihood.
    Exact(ExactFit),
    /// By automated EM (its trace holds the polish, its Monte Carlo errors and warnings).
    Em(Box<EmTrace>),
}

/// The stream under a fit's seed of the EM that runs on after a failed polish from Laplace's
/// start.
const SECOND_EM_STREAM: u64 = 0x5EC0_4D00_0000_0001;

/// A random-effect sd below this (on the linear predictor's scale: a slope's times its
/// covariate's root mean square; Gaussian: as a share of the residual sd σ, as lmer's relative
/// scale, so that the rule does not depend on the data's units) is taken as 0: the fit is then
/// singular.
pub const SINGULAR_SD: f64 = 1e-4;

/// What a singular fit means and what to do about it, as the printouts say it.
pub const SINGULAR_NOTE: &str = "singular fit: the likelihood is highest with a random effect's sd at 0 or a correlation at +-1 (the data show no more variation between groups than a simpler model allows), so that estimate is only near its boundary and has no standard error; drop the random effect or the correlation, or report it at its boundary";

/// A GLMM fitted by [`Glmm::fit`].
#[derive(Clone, Debug)]
pub struct GlmmFit {
    /// θ̂.
    pub theta: Vec<f64>,
    /// θ̂'s covariance (the observed information's inverse), if it could be taken; NaN rows for
    /// parameters at a boundary.
    pub covariance: Option<Vec<Vec<f64>>>,
    /// ℓ(θ̂): exact, or sampled with its Monte Carlo error.
    pub log_likelihood: MarginalLikelihood,
    /// Whether a random-effect covariance is at its boundary: the exact fit's test, EM's with a
    /// single random intercept, and for any fit an sd below [`SINGULAR_SD`] (None where none of
    /// these applies: EM with more than one random effect, every sd above it). Printouts say
    /// [`SINGULAR_NOTE`].
    pub singular: Option<bool>,
    /// The method's own result.
    pub fitted: Fitted,
}

impl GlmmFit {
    /// The likelihood-ratio test of `smaller`, a fit of a model this one nests, against this
    /// fit (lme4's `anova(smaller, fit)`): the statistic 2 (ℓ − ℓ_smaller), the parameters
    /// gained (its degrees of freedom), and its p-value on the chi-square law with them (`None`
    /// where none is gained). Nesting is not checked (nor is it by lme4); where a variance is
    /// tested at 0, on its boundary, this p-value is conservative
    /// ([`Glmm::bootstrap_lrt`]'s holds there).
    pub fn likelihood_ratio(&self, smaller: &GlmmFit) -> (f64, usize, Option<f64>) {
        let larger = (self.log_likelihood.value, self.theta.len());
        let smaller = (smaller.log_likelihood.value, smaller.theta.len());
        GlmmFit::likelihood_ratio_of(larger, smaller)
    }

    /// [`GlmmFit::likelihood_ratio`] from each model's maximised criterion (ℓ, or REML's where
    /// both share their fixed effects, as lmerTest's `ranova` compares them) and number of
    /// parameters, the larger model's first: 2 (ℓ − ℓ_smaller), the parameters gained, p.
    pub fn likelihood_ratio_of(
        (larger, k1): (f64, usize),
        (smaller, k0): (f64, usize),
    ) -> (f64, usize, Option<f64>) {
        let chisq = 2.0 * (larger - smaller);
        let df = k1.saturating_sub(k0);
        let p = statrs::distribution::ChiSquared::new(df as f64)
            .ok()
            .filter(|_| df > 0)
            .map(|law| {
                use statrs::distribution::ContinuousCDF;
                if chisq > 0.0 {
                    law.sf(chisq)
                } else {
                    1.0
                }
            });
        (chisq, df, p)
    }

    /// θ̂'s covariance for tests of contrasts; refused by name where the fit has none.
    pub(crate) fn tested_covariance(&self) -> Result<&[Vec<f64>]> {
        self.covariance.as_deref().ok_or_else(|| {
            crate::error::invalid(
                "fit",
                "no covariance of the estimate (its information could not be inverted)".into(),
                "refit with more data or fewer parameters before testing contrasts",
            )
        })
    }

    /// The Wald z test of each contrast lᵀβ = 0 (emmeans' asymptotic test of a GLMM's means,
    /// on the link's scale): per row l of `contrasts` (a value per fixed effect, θ's first
    /// entries), the standard error √(lᵀ Cov(β̂) l) from the fit's covariance, the degrees of
    /// freedom (infinite) and the two-sided p-value of z = lᵀβ̂ / se on the normal law. Refused
    /// by name where the fit has no covariance or a row is longer than θ.
    pub fn wald_contrasts(&self, contrasts: &[Vec<f64>]) -> Result<Vec<(f64, f64, f64)>> {
        let cov = self.tested_covariance()?;
        let p = contrasts.first().map_or(0, Vec::len);
        if let Some(l) = contrasts
            .iter()
            .find(|l| l.len() != p || l.len() > self.theta.len())
        {
            return Err(crate::error::invalid(
                "contrasts",
                format!(
                    "a row of {} values for {} fixed effects",
                    l.len(),
                    p.min(self.theta.len())
                ),
                "give each contrast one value per fixed effect",
            ));
        }
        Ok((contrasts.iter())
            .map(|l| {
                let estimate: f64 = l.iter().zip(&self.theta).map(|(a, b)| a * b).sum();
                let v: f64 = (0..p)
                    .map(|j| l[j] * (0..p).map(|k| cov[j][k] * l[k]).sum::<f64>())
                    .sum();
                let z = estimate / v.sqrt();
                (
                    v.sqrt(),
                    f64::INFINITY,
                    super::exact::t_tail(z, f64::INFINITY),
                )
            })
            .collect())
    }
}

impl Glmm {
    /// Fits the model by `settings.method`. `on_event` sees EM's progress (and may stop it);
    /// an exact fit does not call it. Errors name a method or setting that does not apply.
    pub fn fit(
        &self,
        settings: &FitSettings,
        on_event: &mut dyn FnMut(EmEvent) -> Control,
    ) -> Result<GlmmFit> {
        let exact = match settings.method {
            Method::Exact => true,
            Method::Auto => self.exact_method().is_some(),
            Method::Em => false,
        };
        if !exact && settings.exact.criterion == Criterion::Reml {
            return Err(SagdError::InvalidSetting {
                name: "reml",
                value: "with EM".into(),
                fix: "REML is fitted by the closed form only: the Gaussian family with the method auto or exact".into(),
            });
        }
        if exact {
            let fit = self.fit_exact(&settings.exact)?;
            return Ok(GlmmFit {
                theta: fit.theta.clone(),
                covariance: Some(fit.covariance.clone()),
                log_likelihood: MarginalLikelihood {
                    value: fit.log_likelihood,
                    se: fit.quadrature_error,
                    method: fit.method,
                    min_ess: None,
                },
                singular: self.singular_at(&fit.theta, Some(fit.singular)),
                fitted: Fitted::Exact(fit),
            });
        }
        // Auto starts at Laplace's maximum, which leaves only the distance to the exact one: the
        // polish's Newton steps, whose gap decides convergence, cover it from there
        // (LAPLACE_START_MSTEPS M-steps first). `Method::Em` keeps the built-in start and EM's
        // own rule, and so does Auto where Laplace's fit fails (the fit then says it ran EM).
        let mut em = settings.em.clone();
        let laplace = match settings.method {
            Method::Auto => self.laplace_maximum_start().ok(),
            _ => None,
        };
        let capped =
            laplace.is_some() && em.polish.is_some() && em.max_msteps > LAPLACE_START_MSTEPS;
        let theta0 = laplace.unwrap_or_else(|| self.start());
        if capped {
            em.max_msteps = LAPLACE_START_MSTEPS;
        }
        let mut trace = if capped && em.max_msteps == 0 {
            // The settings a failed polish hands over to are checked before the polish runs.
            settings.em.validate(self.theta_len())?;
            AutomatedEm::new(self, em).polish_from(&theta0, settings.seed)
        } else {
            AutomatedEm::new(self, em).run(&theta0, settings.seed, None, on_event)?
        };
        if capped && !trace.interrupted {
            if let Some(why) = trace.polish_error.clone() {
                // The polish from Laplace's start failed: EM runs on from where the start left
                // it, under its own rule and cap, on streams of its own, and the polish starts
                // again where it ends.
                let seed = crate::rng::stream_seed(settings.seed, SECOND_EM_STREAM);
                let mut longer = AutomatedEm::new(self, settings.em.clone()).run(
                    &trace.estimate,
                    seed,
                    None,
                    on_event,
                )?;
                let first = format!(
                    "the polish after Laplace's start failed ({why}); EM ran on from its estimate"
                );
                longer.em_resumed = Some(match longer.em_resumed.take() {
                    Some(then) => format!("{first}; then {then}"),
                    None => first,
                });
                trace = longer;
            }
        }
        let theta = trace.final_estimate().estimate.to_vec();
        let covariance = trace
            .polished
            .as_ref()
            .and_then(|p| spd_inverse(&p.information.matrix));
        let log_likelihood = self.log_likelihood(&theta, settings.seed)?;
        // With a single random intercept: whether ℓ is no higher than with its sd at 0 (the
        // maximum on the boundary, where log sd has no estimate).
        let singular = if self.terms() == [(1, false)] {
            let mut at_zero = theta.clone();
            at_zero[self.n_fixed()] = -30.0;
            Some(self.log_likelihood(&at_zero, settings.seed)?.value >= log_likelihood.value - 1e-3)
        } else {
            None
        };
        Ok(GlmmFit {
            singular: self.singular_at(&theta, singular),
            theta,
            covariance,
            log_likelihood,
            fitted: Fitted::Em(Box::new(trace)),
        })
    }

    /// The warning that the fixed effects of `theta` put some fitted means numerically at the
    /// edge of the family's range, as R's `glm` warns: at the random effects' mean (0), a
    /// probability within ten machine epsilons of 0 or 1 (binomial), a rate within them of 0
    /// (Poisson); `None` where no observation is there, and for the Gaussian family. Such a fit
    /// is that of separated data (a column, or a combination, that splits the responses
    /// perfectly): there the likelihood rises without end as some β run off to ±∞, so the
    /// optimiser stops at values set by its tolerance, with standard errors that mean nothing.
    pub fn separation(&self, theta: &[f64]) -> Option<String> {
        const EDGE: f64 = 10.0 * f64::EPSILON;
        if self.family == Family::Gaussian {
            return None;
        }
        let beta = theta.get(..self.p)?;
        let binomial = self.family == Family::Binomial;
        let at_edge = (0..self.n_obs())
            .filter(|&i| {
                let eta = self.fixed_part(beta, i);
                // Binomial: min(p, 1 − p) = 1/(1 + e^|η|); Poisson: the rate e^η.
                let edge = if binomial {
                    1.0 / (1.0 + eta.abs().exp())
                } else {
                    eta.exp()
                };
                edge < EDGE
            })
            .count();
        let (what, why) = match self.family {
            Family::Binomial => (
                "probabilities numerically 0 or 1",
                "the fixed effects separate the responses (complete or quasi-complete separation)",
            ),
            _ => (
                "rates numerically 0",
                "the fixed effects mark out observations whose counts are all 0 (a level or a range with no events)",
            ),
        };
        (at_edge > 0).then(|| {
            format!(
                "fitted {what} at the fixed effects for {at_edge} of {} observations: {why}, so some estimates run off towards infinity and their standard errors mean nothing; drop or merge the column that does it, or fit with a penalty (Firth's)",
                self.n_obs()
            )
        })
    }

    /// `test`'s verdict, or singular where a random effect's sd at `theta`, on η's scale (times
    /// its column's root mean square), is below [`SINGULAR_SD`] (of σ, Gaussian).
    pub(super) fn singular_at(&self, theta: &[f64], test: Option<bool>) -> Option<bool> {
        let summary = self.summary(theta, None);
        let unit = summary.sigma.as_ref().map_or(1.0, |s| s.value);
        let at_zero = summary
            .random
            .iter()
            .zip(self.effect_rms())
            .flat_map(|(t, rms)| t.sd.iter().zip(rms))
            .any(|(sd, rms)| sd.value * rms < SINGULAR_SD * unit);
        if at_zero {
            Some(true)
        } else {
            test
        }
    }
}
