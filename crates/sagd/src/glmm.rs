//! Generalised linear mixed models, ready to fit: y_i | b ~ family(η_i) with
//! η_i = x_iᵀβ + z_iᵀ b_{g(i)}, one random-effect vector b_j ~ N(0, diag(τ²)) per group j, for the
//! Gaussian, Poisson and binomial (Bernoulli) families — the models of lme4's `glmer` with
//! independent random effects.
//!
//! As a [`LatentModel`] each group is a data point whose latent is u_j = b_j / τ (standard normal
//! a priori: the non-centred form, whose posteriors stay well scaled however small τ is), with
//! θ = (β, log τ, and log σ for the Gaussian family). Gradients are written out, O(rows) per group.
//! The log densities include every constant (log y!, the binomial coefficients, 2π), so that
//! log-likelihoods compare with lme4's.

use serde::{Deserialize, Serialize};

use crate::error::{LogpError, Result, SagdError};
use crate::model::LatentModel;

const LN_2PI: f64 = 1.837_877_066_409_345_5;

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

/// ln Γ(x + 1) for the counts' constants.
fn ln_factorial(k: f64) -> f64 {
    statrs::function::gamma::ln_gamma(k + 1.0)
}

/// A GLMM's data, checked.
#[derive(Clone, Debug)]
pub struct Glmm {
    family: Family,
    y: Vec<f64>,
    /// Fixed-effects design, row-major n × p.
    x: Vec<f64>,
    p: usize,
    /// Random-effects design, row-major n × q.
    z: Vec<f64>,
    q: usize,
    /// Trials per row (binomial).
    trials: Vec<f64>,
    /// The rows of each group.
    groups: Vec<Vec<usize>>,
    /// Σ over rows of the log density's constant part (log y!, binomial coefficients, 2π).
    constant: Vec<f64>,
}

/// What a row contributes: log f(y | η) without its constant, and d/dη.
#[inline]
fn row(family: Family, y: f64, m: f64, eta: f64, inv_var: f64) -> (f64, f64) {
    match family {
        Family::Gaussian => {
            let e = y - eta;
            (-0.5 * e * e * inv_var, e * inv_var)
        }
        Family::Poisson => {
            let mu = eta.exp();
            (y * eta - mu, y - mu)
        }
        Family::Binomial => {
            // log(1 + e^η) without overflow.
            let softplus = if eta > 0.0 {
                eta + (-eta).exp().ln_1p()
            } else {
                eta.exp().ln_1p()
            };
            let p = 1.0 / (1.0 + (-eta).exp());
            (y * eta - m * softplus, y - m * p)
        }
    }
}

impl Glmm {
    /// A GLMM of `y` (n values) on the fixed-effects design `x` (n × p, row-major), with groups
    /// `group` (n indices; groups are numbered 0..G, each present) and the random-effects design
    /// `z` (n × q, row-major; a column of ones is a random intercept). `trials` (binomial only, n
    /// values, default 1) are the numbers of trials behind each y. Errors name the input and the
    /// fix.
    pub fn new(
        family: Family,
        y: Vec<f64>,
        x: Vec<f64>,
        group: &[usize],
        z: Vec<f64>,
        trials: Option<Vec<f64>>,
    ) -> Result<Self> {
        let n = y.len();
        let bad = |name: &'static str, value: String, fix: &str| {
            Err(SagdError::InvalidSetting {
                name,
                value,
                fix: fix.into(),
            })
        };
        if n == 0 {
            return bad("y", "empty".into(), "give at least one observation");
        }
        if group.len() != n {
            return bad(
                "groups",
                format!("{} values", group.len()),
                &format!("give one group index per observation ({n})"),
            );
        }
        if !x.len().is_multiple_of(n) || !z.len().is_multiple_of(n) || z.is_empty() {
            return bad(
                "X or Z",
                format!("{} and {} values", x.len(), z.len()),
                &format!("give designs with {n} rows (Z at least one column)"),
            );
        }
        let (p, q) = (x.len() / n, z.len() / n);
        if let Some(i) = y.iter().position(|v| !v.is_finite()) {
            return bad(
                "y",
                format!("{} at row {i}", y[i]),
                "remove or impute the missing or infinite values",
            );
        }
        if x.iter().chain(&z).any(|v| !v.is_finite()) {
            return bad(
                "X or Z",
                "a value that is not finite".into(),
                "remove or impute the missing or infinite values",
            );
        }
        let trials = trials.unwrap_or_else(|| vec![1.0; n]);
        if trials.len() != n {
            return bad(
                "trials",
                format!("{} values", trials.len()),
                &format!("give one number of trials per observation ({n})"),
            );
        }
        for i in 0..n {
            let (yi, m) = (y[i], trials[i]);
            let ok = match family {
                Family::Gaussian => true,
                Family::Poisson => yi >= 0.0 && yi.fract() == 0.0,
                Family::Binomial => {
                    m >= 1.0 && m.fract() == 0.0 && yi >= 0.0 && yi <= m && yi.fract() == 0.0
                }
            };
            if !ok {
                return bad(
                    "y",
                    format!("{yi} at row {i}"),
                    "Poisson needs counts 0, 1, 2, …; binomial needs successes between 0 and the row's trials (whole numbers)",
                );
            }
        }
        let g = group.iter().max().map_or(0, |m| m + 1);
        let mut groups = vec![Vec::new(); g];
        for (i, &j) in group.iter().enumerate() {
            groups[j].push(i);
        }
        if let Some(j) = groups.iter().position(Vec::is_empty) {
            return bad(
                "groups",
                format!("no observation in group {j}"),
                "number the groups 0, 1, …, G − 1 with every number used",
            );
        }
        let constant = groups
            .iter()
            .map(|rows| {
                rows.iter()
                    .map(|&i| match family {
                        Family::Gaussian => -0.5 * LN_2PI,
                        Family::Poisson => -ln_factorial(y[i]),
                        Family::Binomial => {
                            ln_factorial(trials[i])
                                - ln_factorial(y[i])
                                - ln_factorial(trials[i] - y[i])
                        }
                    })
                    .sum::<f64>()
                    - 0.5 * q as f64 * LN_2PI
            })
            .collect();
        Ok(Glmm {
            family,
            y,
            x,
            p,
            z,
            q,
            trials,
            groups,
            constant,
        })
    }

    /// The fixed effects' count p.
    pub fn n_fixed(&self) -> usize {
        self.p
    }

    /// The random effects' count q per group.
    pub fn n_random(&self) -> usize {
        self.q
    }

    /// The family.
    pub fn family(&self) -> Family {
        self.family
    }

    /// A starting θ: β from the mean response on the link scale (intercept where the first
    /// column of X is constant), τ = 0.5, σ the response's sd.
    pub fn start(&self) -> Vec<f64> {
        let n = self.y.len() as f64;
        let mean = self.y.iter().sum::<f64>() / n;
        let mut th = vec![0.0; self.theta_len()];
        let intercept = (0..self.y.len()).all(|i| self.x[i * self.p] == 1.0);
        if intercept && self.p > 0 {
            th[0] = match self.family {
                Family::Gaussian => mean,
                Family::Poisson => mean.max(1e-3).ln(),
                Family::Binomial => {
                    let m = self.trials.iter().sum::<f64>() / n;
                    let r = (mean / m).clamp(1e-3, 1.0 - 1e-3);
                    (r / (1.0 - r)).ln()
                }
            };
        }
        for k in 0..self.q {
            th[self.p + k] = 0.5f64.ln();
        }
        if self.family == Family::Gaussian {
            let var = self.y.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / n;
            th[self.p + self.q] = 0.5 * var.max(1e-12).ln();
        }
        th
    }

    fn theta_len(&self) -> usize {
        self.p + self.q + usize::from(self.family == Family::Gaussian)
    }

    /// For group `j` at latent `u`: log p(y_j, u; θ), and through `each` every row's (i, dℓ/dη).
    fn group_terms(
        &self,
        theta: &[f64],
        j: usize,
        u: &[f64],
        mut each: impl FnMut(usize, f64),
    ) -> f64 {
        let (p, q) = (self.p, self.q);
        let beta = &theta[..p];
        let tau: Vec<f64> = theta[p..p + q].iter().map(|v| v.exp()).collect();
        let inv_var = if self.family == Family::Gaussian {
            (-2.0 * theta[p + q]).exp()
        } else {
            0.0
        };
        let mut lp = self.constant[j] - 0.5 * u.iter().map(|v| v * v).sum::<f64>();
        if self.family == Family::Gaussian {
            lp -= self.groups[j].len() as f64 * theta[p + q];
        }
        for &i in &self.groups[j] {
            let xi = &self.x[i * p..(i + 1) * p];
            let zi = &self.z[i * q..(i + 1) * q];
            let eta = xi.iter().zip(beta).map(|(a, b)| a * b).sum::<f64>()
                + (0..q).map(|k| zi[k] * tau[k] * u[k]).sum::<f64>();
            let (l, d) = row(self.family, self.y[i], self.trials[i], eta, inv_var);
            lp += l;
            each(i, d);
        }
        lp
    }
}

impl LatentModel<f64> for Glmm {
    fn n_data(&self) -> usize {
        self.groups.len()
    }
    fn latent_dim(&self) -> usize {
        self.q
    }
    fn theta_dim(&self) -> usize {
        self.theta_len()
    }
    fn log_joint(
        &self,
        theta: &[f64],
        data: &[usize],
        z: &[f64],
        logp: &mut [f64],
        grad_z: &mut [f64],
    ) -> std::result::Result<(), LogpError> {
        let q = self.q;
        let tau: Vec<f64> = theta[self.p..self.p + q].iter().map(|v| v.exp()).collect();
        for (r, &j) in data.iter().enumerate() {
            let u = &z[r * q..(r + 1) * q];
            let g = &mut grad_z[r * q..(r + 1) * q];
            for k in 0..q {
                g[k] = -u[k];
            }
            let lp = self.group_terms(theta, j, u, |i, d| {
                for k in 0..q {
                    g[k] += d * self.z[i * q + k] * tau[k];
                }
            });
            if !lp.is_finite() || g.iter().any(|v| !v.is_finite()) {
                return Err(LogpError::NonFinite);
            }
            logp[r] = lp;
        }
        Ok(())
    }
    fn add_grad_theta(
        &self,
        theta: &[f64],
        data: &[usize],
        z: &[f64],
        grad: &mut [f64],
    ) -> std::result::Result<(), LogpError> {
        let (p, q) = (self.p, self.q);
        let tau: Vec<f64> = theta[p..p + q].iter().map(|v| v.exp()).collect();
        let gaussian = self.family == Family::Gaussian;
        let inv_var = if gaussian {
            (-2.0 * theta[p + q]).exp()
        } else {
            0.0
        };
        for (r, &j) in data.iter().enumerate() {
            let u = &z[r * q..(r + 1) * q];
            let mut g = vec![0.0; grad.len()];
            self.group_terms(theta, j, u, |i, d| {
                let xi = &self.x[i * p..(i + 1) * p];
                g[..p].iter_mut().zip(xi).for_each(|(o, v)| *o += d * v);
                for k in 0..q {
                    g[p + k] += d * self.z[i * q + k] * tau[k] * u[k];
                }
                if gaussian {
                    // d/d log σ of −log σ − e²/(2σ²): −1 + e²/σ², with e = d·σ².
                    let e = d / inv_var;
                    g[p + q] += -1.0 + e * e * inv_var;
                }
            });
            if g.iter().any(|v| !v.is_finite()) {
                return Err(LogpError::NonFinite);
            }
            grad.iter_mut().zip(&g).for_each(|(o, v)| *o += v);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::check_gradients;

    fn small(family: Family) -> Glmm {
        let n = 12;
        let y: Vec<f64> = (0..n)
            .map(|i| match family {
                Family::Gaussian => (i as f64 * 0.7).sin() * 2.0,
                Family::Poisson => (i % 5) as f64,
                Family::Binomial => (i % 4) as f64,
            })
            .collect();
        let x: Vec<f64> = (0..n).flat_map(|i| [1.0, (i as f64 * 0.3).cos()]).collect();
        let z: Vec<f64> = (0..n).flat_map(|i| [1.0, i as f64 / n as f64]).collect();
        let group: Vec<usize> = (0..n).map(|i| i % 3).collect();
        let trials = (family == Family::Binomial).then(|| vec![4.0; n]);
        Glmm::new(family, y, x, &group, z, trials).unwrap()
    }

    #[test]
    fn gradients_match_central_differences() {
        for family in [Family::Gaussian, Family::Poisson, Family::Binomial] {
            let m = small(family);
            let theta: Vec<f64> = (0..m.theta_dim()).map(|k| 0.1 * k as f64 - 0.2).collect();
            let z = [0.3, -0.4, 0.1, 0.2, -0.5, 0.6];
            let check = check_gradients(&m, &theta, &z, 1e-6).unwrap();
            assert!(check.worst_error() < 1e-6, "{family:?}: {check:?}");
        }
    }

    #[test]
    fn bad_data_is_named() {
        let err = |r: Result<Glmm>| format!("{:?}", r.unwrap_err());
        let e = err(Glmm::new(
            Family::Poisson,
            vec![1.0, -1.0],
            vec![1.0, 1.0],
            &[0, 0],
            vec![1.0, 1.0],
            None,
        ));
        assert!(e.contains("y") && e.contains("row 1"), "{e}");
        let e = err(Glmm::new(
            Family::Gaussian,
            vec![1.0, 2.0],
            vec![1.0, 1.0],
            &[0, 2],
            vec![1.0, 1.0],
            None,
        ));
        assert!(e.contains("group 1"), "{e}");
        let e = err(Glmm::new(
            Family::Gaussian,
            vec![1.0, f64::NAN],
            vec![1.0, 1.0],
            &[0, 0],
            vec![1.0, 1.0],
            None,
        ));
        assert!(e.contains("NaN"), "{e}");
    }
}
