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

/// Rows evaluated at once: the most a [`Rows`] holds, on the stack (two AVX-512 registers' worth:
/// small enough that clearing it costs little beside a group of a few rows).
pub(super) const CHUNK: usize = 16;

/// A chunk of rows: their linear predictors in, and what each contributes out — log f(y | η)
/// without its constant, d/dη and −d²/dη².
pub(super) struct Rows {
    /// How many of the slots are in use.
    pub(super) len: usize,
    pub(super) eta: [f64; CHUNK],
    pub(super) l: [f64; CHUNK],
    pub(super) d: [f64; CHUNK],
    pub(super) w: [f64; CHUNK],
}

impl Rows {
    /// No rows.
    pub(super) fn new() -> Self {
        Rows {
            len: 0,
            eta: [0.0; CHUNK],
            l: [0.0; CHUNK],
            d: [0.0; CHUNK],
            w: [0.0; CHUNK],
        }
    }

    /// Fills `l`, `d` and `w` of the rows in use, whose responses are `y` and trials `m` (the
    /// Gaussian's prior weights), for `family` (1/σ² `inv_var`, Gaussian), and returns Σ l.
    pub(super) fn evaluate(&mut self, family: Family, inv_var: f64, y: &[f64], m: &[f64]) -> f64 {
        let n = self.len;
        evaluate_rows(
            family,
            inv_var,
            y,
            m,
            &self.eta[..n],
            &mut self.l[..n],
            &mut self.d[..n],
            &mut self.w[..n],
        );
        self.l[..n].iter().sum()
    }
}

crate::vectorized! {
    /// [`Rows::evaluate`]'s loop, over lanes: exp and log written to vectorise ([`crate::lanes`]),
    /// where `f64::exp` and `f64::ln` are calls, one row at a time.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn evaluate_rows(
        family: Family,
        inv_var: f64,
        y: &[f64],
        m: &[f64],
        eta: &[f64],
        l: &mut [f64],
        d: &mut [f64],
        w: &mut [f64],
    ) {
        let n = eta.len();
        let (y, m, l, d, w) = (&y[..n], &m[..n], &mut l[..n], &mut d[..n], &mut w[..n]);
        match family {
            Family::Gaussian => {
                // m: the rows' prior weights, each row's variance σ²/m (1 without weights, which
                // multiplies exactly).
                for j in 0..n {
                    let (e, prec) = (y[j] - eta[j], inv_var * m[j]);
                    l[j] = -0.5 * e * e * prec;
                    d[j] = e * prec;
                    w[j] = prec;
                }
            }
            Family::Poisson => {
                for j in 0..n {
                    let mu = crate::lanes::exp(eta[j]);
                    l[j] = y[j] * eta[j] - mu;
                    d[j] = y[j] - mu;
                    w[j] = mu;
                }
            }
            Family::Binomial => {
                for j in 0..n {
                    // log(1 + e^η) and the success probability from one exponential, without
                    // overflow.
                    let x = eta[j];
                    let e = crate::lanes::exp(-x.abs());
                    let softplus = x.max(0.0) + ln_1p_unit(e);
                    let p = if x > 0.0 { 1.0 } else { e } / (1.0 + e);
                    l[j] = y[j] * x - m[j] * softplus;
                    d[j] = y[j] - m[j] * p;
                    w[j] = m[j] * p * (1.0 - p);
                }
            }
        }
    }
}

/// ln(1 + e) for e in [0, 1] by a logarithm and a division instead of `ln_1p`, about twice as
/// fast and as accurate (a few ulps): with u = 1 + e rounded, ln(u)·e/(u − 1) cancels the
/// rounding of u (Goldberg's correction); below e = 2⁻⁵³, u = 1 and ln(1 + e) = e to rounding.
#[inline(always)]
fn ln_1p_unit(e: f64) -> f64 {
    let u = 1.0 + e;
    if u == 1.0 {
        e
    } else {
        crate::lanes::ln(u) * e / (u - 1.0)
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
