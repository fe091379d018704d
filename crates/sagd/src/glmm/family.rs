//! The response families: each row's log density in η, without its constant, and its
//! derivatives.

use serde::{Deserialize, Serialize};

/// The distribution of y given the linear predictor η.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Family {
    /// y ~ N(η, σ²), σ a parameter.
    Gaussian,
    /// y ~ Poisson(e^η).
    Poisson,
    /// y ~ Binomial(m, 1/(1 + e^−η)), m the trials of the row (1: Bernoulli).
    Binomial,
}

impl std::str::FromStr for Family {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s.trim().to_ascii_lowercase().as_str() {
            "gaussian" | "normal" => Ok(Family::Gaussian),
            "poisson" => Ok(Family::Poisson),
            "binomial" | "bernoulli" => Ok(Family::Binomial),
            _ => Err(format!(
                "unknown family `{s}`: use gaussian, poisson or binomial"
            )),
        }
    }
}

impl Family {
    /// Whether `y` (with `trials` behind it, binomial) is in the family's support: any real for
    /// the Gaussian, a count for the Poisson, a whole number of successes in 0..=trials (whole,
    /// at least 1) for the binomial.
    pub(super) fn admits(self, y: f64, trials: f64) -> bool {
        let count = y >= 0.0 && y.fract() == 0.0;
        match self {
            Family::Gaussian => true,
            Family::Poisson => count,
            Family::Binomial => count && trials >= 1.0 && trials.fract() == 0.0 && y <= trials,
        }
    }
}

/// ln Γ(x + 1) for the counts' constants.
pub(super) fn ln_factorial(k: f64) -> f64 {
    statrs::function::gamma::ln_gamma(k + 1.0)
}

/// What a row contributes: log f(y | η) without its constant, d/dη and −d²/dη².
#[inline]
pub(super) fn row(family: Family, y: f64, m: f64, eta: f64, inv_var: f64) -> (f64, f64, f64) {
    match family {
        Family::Gaussian => {
            let e = y - eta;
            (-0.5 * e * e * inv_var, e * inv_var, inv_var)
        }
        Family::Poisson => {
            let mu = eta.exp();
            (y * eta - mu, y - mu, mu)
        }
        Family::Binomial => {
            // log(1 + e^η) and the success probability from one exponential, without overflow.
            let e = (-eta.abs()).exp();
            let softplus = eta.max(0.0) + e.ln_1p();
            let p = if eta > 0.0 {
                1.0 / (1.0 + e)
            } else {
                e / (1.0 + e)
            };
            (y * eta - m * softplus, y - m * p, m * p * (1.0 - p))
        }
    }
}
