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
                    // log(1 + e^η) and the success probability from one exponential and one
                    // division, without overflow.
                    let x = eta[j];
                    let e = crate::lanes::exp(-x.abs());
                    let (ln_1p, recip) = crate::lanes::ln_1p_and_recip(e);
                    let softplus = x.max(0.0) + ln_1p;
                    let p = if x > 0.0 { 1.0 } else { e } * recip;
                    l[j] = y[j] * x - m[j] * softplus;
                    d[j] = y[j] - m[j] * p;
                    w[j] = m[j] * p * (1.0 - p);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The binomial rows against log(1 + e^η), σ(η) and their derivatives from `f64`'s own
    /// `ln_1p` and `exp`, at logits from −740 to 740: to a few ulps, and finite at the ends.
    #[test]
    fn binomial_rows_match_std_to_a_few_ulps() {
        let eta: Vec<f64> = (-7400..=7400)
            .map(|i| i as f64 * 0.1 + (i as f64 * 0.37).sin() * 0.01)
            .collect();
        let n = eta.len();
        let (y, m) = (vec![1.0; n], vec![3.0; n]);
        let (mut l, mut d, mut w) = (vec![0.0; n], vec![0.0; n], vec![0.0; n]);
        evaluate_rows(Family::Binomial, 1.0, &y, &m, &eta, &mut l, &mut d, &mut w);
        // Subnormal weights (|η| beyond 708) keep fewer digits.
        let close = |a: f64, b: f64, ulps: f64| {
            (a - b).abs() <= ulps * f64::EPSILON * b.abs() + f64::MIN_POSITIVE * f64::EPSILON
        };
        for j in 0..n {
            let x = eta[j];
            let e = (-x.abs()).exp();
            let softplus = x.max(0.0) + e.ln_1p();
            let p = if x > 0.0 { 1.0 } else { e } / (1.0 + e);
            let (l0, d0, w0) = (
                x - 3.0 * softplus,
                1.0 - 3.0 * p,
                3.0 * e / (1.0 + e).powi(2),
            );
            // l and d lose digits to their differences, and w = m p (1 − p) to 1 − p where p is
            // near 1: each compared against its terms' size.
            let l_ok = (l[j] - l0).abs() <= 8.0 * f64::EPSILON * (x.abs() + 3.0 * softplus);
            let d_ok = (d[j] - d0).abs() <= 8.0 * f64::EPSILON * (1.0 + 3.0 * p);
            let w_ok = close(w[j], w0, 16.0) || (w[j] - w0).abs() <= 8.0 * f64::EPSILON * 3.0 * p;
            assert!(
                l_ok && d_ok && w_ok,
                "η {x}: {:?} vs {:?}",
                (l[j], d[j], w[j]),
                (l0, d0, w0)
            );
        }
    }
}
