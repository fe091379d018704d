//! Each observation's fit at the levels' conditional modes, and its residuals: lme4's
//! `predict`, `fitted` and `residuals` of a fitted model.

use rayon::prelude::*;
use serde::{Deserialize, Serialize};

use super::super::{Family, Glmm};
use crate::error::Result;

/// Each observation's linear predictor, mean and residuals at θ with the random effects at
/// their conditional modes ([`Glmm::random_effects`]' values), one entry per row of the data in
/// the order the model was given them ([`Glmm::fitted_values`]), or per new row
/// ([`Glmm::predict`]).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FittedValues {
    /// η_i = o_i + x_iᵀβ + Σ_t z_{t,i}ᵀ b̂_{t, g_t(i)}, offset included (lme4's `predict(fit)`).
    pub eta: Vec<f64>,
    /// μ_i = g⁻¹(η_i): the response's mean (Gaussian, Poisson) or the probability of a success
    /// (binomial) (`fitted(fit)`).
    pub mean: Vec<f64>,
    /// y_i − μ_i; for the binomial family the proportion of successes y_i / m_i less μ_i
    /// (`residuals(fit, "response")`).
    pub response: Vec<f64>,
    /// The response residual over its sd under the family: σ (Gaussian), √μ_i (Poisson),
    /// √(μ_i (1 − μ_i) / m_i) (binomial) (`residuals(fit, "pearson", scaled = TRUE)`, whose
    /// quantiles lme4's `summary` prints as its scaled residuals).
    pub pearson: Vec<f64>,
    /// sign(y_i − μ_i) √d_i, d_i the row's share of the deviance; the response residual for the
    /// Gaussian family (`residuals(fit, "deviance")`, glmer's default).
    pub deviance: Vec<f64>,
}

impl FittedValues {
    /// n rows of zeros, to be filled.
    fn zeros(n: usize) -> Self {
        FittedValues {
            eta: vec![0.0; n],
            mean: vec![0.0; n],
            response: vec![0.0; n],
            pearson: vec![0.0; n],
            deviance: vec![0.0; n],
        }
    }

    /// The minimum, quartiles and maximum of the Pearson residuals (R's `quantile`, type 7), as
    /// lme4's `summary` prints them under "Scaled residuals"; `None` without observations.
    pub fn pearson_quantiles(&self) -> Option<[f64; 5]> {
        let mut v: Vec<f64> = self
            .pearson
            .iter()
            .copied()
            .filter(|r| !r.is_nan())
            .collect();
        if v.is_empty() {
            return None;
        }
        v.sort_by(f64::total_cmp);
        let at = |p: f64| {
            let h = p * (v.len() - 1) as f64;
            let (lo, frac) = (h.floor() as usize, h - h.floor());
            match v.get(lo + 1) {
                Some(hi) if frac > 0.0 => v[lo] + frac * (hi - v[lo]),
                _ => v[lo],
            }
        };
        Some([0.0, 0.25, 0.5, 0.75, 1.0].map(at))
    }
}

impl Glmm {
    /// Each observation's fit at θ: its linear predictor and mean with every level's effects at
    /// their conditional mode, and its response, Pearson and deviance residuals, in the order
    /// the rows were given (lme4's `predict`, `fitted` and `residuals` of a fit). For the
    /// Gaussian family the modes are the exact conditional means (lmer's BLUPs).
    pub fn fitted_values(&self, theta: &[f64]) -> Result<FittedValues> {
        self.check_theta(theta)?;
        let factors = self.factors(theta);
        let beta = &theta[..self.p];
        // η of the stored rows, point by point at the point's mode.
        let etas = (0..self.points.len())
            .into_par_iter()
            .map(|c| {
                let lap = self.laplace(theta, &factors, c, None)?;
                let design = self.point_design(&factors, c);
                let rows = self.points[c].rows.clone();
                Ok(rows
                    .zip(&design)
                    .map(|(i, a)| {
                        let random: f64 = a.iter().map(|&(k, v)| v * lap.mode[k]).sum();
                        self.fixed_part(beta, i) + random
                    })
                    .collect::<Vec<f64>>())
            })
            .collect::<Result<Vec<_>>>()?
            .concat();
        let sigma = self.scale(theta).1.exp();
        let n = self.n_obs();
        let mut out = FittedValues::zeros(n);
        for (k, &eta) in etas.iter().enumerate() {
            let i = self.given_row(k);
            // A Gaussian's offset was taken from its response: it goes back into η and μ.
            let shift = self.response_shift.get(i).copied().unwrap_or(0.0);
            let (mean, [response, pearson, deviance]) =
                residuals(self.family, eta, self.y[k], self.trials[k], sigma);
            out.eta[i] = eta + shift;
            out.mean[i] = mean + shift;
            out.response[i] = response;
            out.pearson[i] = pearson;
            out.deviance[i] = deviance;
        }
        Ok(out)
    }
}

/// One row's mean at η and its response, Pearson and deviance residuals (response y, m trials,
/// residual sd σ for the Gaussian family); NaN residuals where y is NaN (not given).
fn residuals(family: Family, eta: f64, y: f64, m: f64, sigma: f64) -> (f64, [f64; 3]) {
    // y ln(y/μ), 0 at y = 0; NaN for a response not given (new rows'), as every residual.
    let ylog = |y: f64, mu: f64| if y == 0.0 { 0.0 } else { y * (y / mu).ln() };
    // A deviance below 0 by rounding is 0 (`f64::max` would make NaN's 0 too).
    let signed = |r: f64, d: f64| (if d < 0.0 { 0.0 } else { d }).sqrt().copysign(r);
    match family {
        Family::Gaussian => {
            // m: the row's prior weight, its sd σ/√m.
            let (r, sw) = (y - eta, m.sqrt());
            (eta, [r, sw * r / sigma, sw * r])
        }
        Family::Poisson => {
            let mu = eta.exp();
            let r = y - mu;
            let d = 2.0 * (ylog(y, mu) - r);
            (mu, [r, r / mu.sqrt(), signed(r, d)])
        }
        Family::Binomial => {
            // p and 1 − p each from its own side, so that neither is 1 − (a value near 1).
            let (p, q) = (logistic(eta), logistic(-eta));
            let prop = y / m;
            let r = prop - p;
            let d = 2.0 * m * (ylog(prop, p) + ylog(1.0 - prop, q));
            (p, [r, r / (p * q / m).sqrt(), signed(r, d)])
        }
    }
}

/// 1 / (1 + e^−x).
fn logistic(x: f64) -> f64 {
    1.0 / (1.0 + (-x).exp())
}

mod predict;
mod simulate;

#[cfg(test)]
mod tests;
