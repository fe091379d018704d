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
            let softplus = eta.max(0.0) + ln_1p_unit(e);
            let p = if eta > 0.0 {
                1.0 / (1.0 + e)
            } else {
                e / (1.0 + e)
            };
            (y * eta - m * softplus, y - m * p, m * p * (1.0 - p))
        }
    }
}

/// ln(1 + e) for e in [0, 1] by a logarithm and a division instead of `ln_1p`, about twice as
/// fast and as accurate (a few ulps): with u = 1 + e rounded, ln(u)·e/(u − 1) cancels the
/// rounding of u (Goldberg's correction); below e = 2⁻⁵³, u = 1 and ln(1 + e) = e to rounding.
#[inline]
fn ln_1p_unit(e: f64) -> f64 {
    let u = 1.0 + e;
    if u == 1.0 {
        e
    } else {
        u.ln() * e / (u - 1.0)
    }
}

#[cfg(test)]
mod tests {
    use super::ln_1p_unit;

    #[test]
    fn ln_1p_unit_is_ln_1p_to_a_few_ulps() {
        let mut e = 1.0f64;
        while e > 1e-300 {
            for x in [e, 0.7 * e, 0.3 * e] {
                let (a, b) = (ln_1p_unit(x), x.ln_1p());
                assert!((a - b).abs() <= 4.0 * f64::EPSILON * b, "{x}: {a} vs {b}");
            }
            e *= 0.5;
        }
        assert_eq!(ln_1p_unit(0.0), 0.0);
    }
}
