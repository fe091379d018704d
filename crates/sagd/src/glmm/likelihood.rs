//! A GLMM's log-likelihood ℓ(θ) = Σ_c log ∫ p(y_c, u; θ) du over its points c: by quadrature
//! with one effect per point, in closed form for the Gaussian family, and otherwise by importance
//! sampling from a Student-t centred at each point's posterior mode with the curvature there as
//! its scale (Laplace's approximation made exact in expectation), with its Monte Carlo error.

use rayon::prelude::*;
use serde::{Deserialize, Serialize};
use statrs::function::gamma::ln_gamma;

use super::{Family, Glmm, LN_2PI};
use crate::error::{Result, SagdError};
use crate::metric::Factor;
use crate::quadrature::{log_likelihood, GaussHermite};
use crate::rng::{stream_seed, NormalStream};

/// Draws per point of the importance sampler.
pub const IMPORTANCE_DRAWS: usize = 4000;

/// Draws held at once by the importance sampler (their normals), per point.
const IS_BLOCK: usize = 256;

/// Rows' log densities a task of the importance sampler evaluates at least (its draws times the
/// point's rows): enough to outweigh a task's cost where points have few rows.
const IS_ROWS_PER_TASK: usize = 1 << 14;

/// Degrees of freedom of the importance sampler's Student-t: heavier tails than any posterior
/// of a GLMM, so the weights keep a finite variance.
const T_DOF: usize = 5;

/// How [`MarginalLikelihood::value`] was computed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LikelihoodMethod {
    /// Gauss-Hermite quadrature centred at each point's posterior (one effect per point).
    Quadrature,
    /// The Gaussian family's closed form.
    Exact,
    /// Importance sampling, `draws` per point.
    ImportanceSampling {
        /// Draws per point.
        draws: usize,
    },
}

/// A log-likelihood with its own error.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct MarginalLikelihood {
    /// ℓ(θ), every constant included.
    pub value: f64,
    /// Its Monte Carlo standard error (0 for quadrature and the closed form).
    pub se: f64,
    /// How it was computed.
    pub method: LikelihoodMethod,
    /// Importance sampling: the smallest effective sample size of a point, as a fraction of the
    /// draws (near 1: the proposal fits the posterior; below 0.1: treat `se` with care).
    pub min_ess: Option<f64>,
}

/// A point's posterior mode and the Cholesky factor of −∇²log p there.
pub(super) struct Laplace {
    pub(super) mode: Vec<f64>,
    pub(super) curvature: Factor,
}

impl Glmm {
    /// ℓ(θ) by the best method available: quadrature (one effect per point: Gauss-Hermite with
    /// 40 nodes; two or three: the adaptive product rule of [`Glmm::fit_exact`]), the closed
    /// form (Gaussian family) or importance sampling (`seed` fixes its draws).
    pub fn log_likelihood(&self, theta: &[f64], seed: u64) -> Result<MarginalLikelihood> {
        self.check_theta(theta)?;
        if self.latent_dim == 1 {
            let value = log_likelihood(self, theta, &GaussHermite::new(40))?;
            Ok(MarginalLikelihood {
                value,
                se: 0.0,
                method: LikelihoodMethod::Quadrature,
                min_ess: None,
            })
        } else if self.family == Family::Gaussian {
            let value = (0..self.points.len())
                .into_par_iter()
                .map(|c| self.gaussian_point(theta, c))
                .collect::<Result<Vec<_>>>()?
                .iter()
                .sum();
            Ok(MarginalLikelihood {
                value,
                se: 0.0,
                method: LikelihoodMethod::Exact,
                min_ess: None,
            })
        } else if self.exact_method() == Some(LikelihoodMethod::Quadrature) {
            Ok(MarginalLikelihood {
                value: self.quadrature_log_likelihood(theta, None)?,
                se: 0.0,
                method: LikelihoodMethod::Quadrature,
                min_ess: None,
            })
        } else {
            self.log_likelihood_sampled(theta, IMPORTANCE_DRAWS, seed)
        }
    }

    /// ℓ(θ) by importance sampling with `draws` per point, whatever the family.
    pub fn log_likelihood_sampled(
        &self,
        theta: &[f64],
        draws: usize,
        seed: u64,
    ) -> Result<MarginalLikelihood> {
        self.check_theta(theta)?;
        if draws < 2 {
            return Err(SagdError::InvalidSetting {
                name: "draws",
                value: draws.to_string(),
                fix: "use at least 2 draws per point".into(),
            });
        }
        let parts = (0..self.points.len())
            .into_par_iter()
            .map(|c| self.sampled_point(theta, c, draws, stream_seed(seed, c as u64)))
            .collect::<Result<Vec<_>>>()?;
        Ok(MarginalLikelihood {
            value: parts.iter().map(|p| p.0).sum(),
            se: parts.iter().map(|p| p.1).sum::<f64>().sqrt(),
            method: LikelihoodMethod::ImportanceSampling { draws },
            min_ess: parts.iter().map(|p| p.2).reduce(f64::min),
        })
    }

    pub(super) fn check_theta(&self, theta: &[f64]) -> Result<()> {
        if theta.len() != self.theta_len() || theta.iter().any(|v| !v.is_finite()) {
            return Err(SagdError::InvalidSetting {
                name: "theta",
                value: format!("{theta:?}"),
                fix: format!("give {} finite values", self.theta_len()),
            });
        }
        Ok(())
    }

    /// The sparse rows of dη/du for point `c`'s rows, as (column, value) lists.
    pub(super) fn point_design(&self, factors: &[Vec<f64>], c: usize) -> Vec<Vec<(usize, f64)>> {
        self.points[c]
            .rows
            .clone()
            .map(|i| {
                let mut a = Vec::new();
                self.row_design(factors, i, |k, v| a.push((k, v)));
                a
            })
            .collect()
    }

    /// log N(y_c; X_c β, σ² I + A Aᵀ), by the determinant lemma and Woodbury's identity in the
    /// point's latent dimension.
    fn gaussian_point(&self, theta: &[f64], c: usize) -> Result<f64> {
        let factors = self.factors(theta);
        let (_, log_sigma) = self.scale(theta);
        let s2 = (2.0 * log_sigma).exp();
        let rows = self.points[c].rows.clone();
        let dim = self.points[c].dim;
        let a = self.point_design(&factors, c);
        let mut m = vec![0.0; dim * dim];
        (0..dim).for_each(|k| m[k * dim + k] = s2);
        let mut v = vec![0.0; dim];
        let (mut rr, mut log_w) = (0.0, 0.0);
        // Prior weights as rows scaled by √w: det V = det Ṽ / det W (weights of 1 exact).
        for (ai, i) in a.iter().zip(rows.clone()) {
            let sw = self.row_weight(i, &mut log_w);
            let r = (self.y[i] - self.fixed_part(&theta[..self.p], i)) * sw;
            rr += r * r;
            for &(j, aj) in ai {
                let aj = aj * sw;
                v[j] += aj * r;
                for &(k, ak) in ai {
                    m[j * dim + k] += aj * (ak * sw);
                }
            }
        }
        let f = Factor::cholesky(&m, dim).ok_or_else(|| not_finite(c))?;
        let mut w = v.clone();
        f.solve_lower(&mut w);
        let quad = (rr - w.iter().map(|x| x * x).sum::<f64>()) / s2;
        let log_det = 2.0 * (rows.len() as f64 - dim as f64) * log_sigma + f.log_det() - log_w;
        Ok(-0.5 * rows.len() as f64 * LN_2PI - 0.5 * log_det - 0.5 * quad)
    }

    /// The Gaussian row `i`'s √w, its prior weight's ln w added to `log_w` (1 and nothing
    /// without weights).
    pub(super) fn row_weight(&self, i: usize, log_w: &mut f64) -> f64 {
        if !self.weighted {
            return 1.0;
        }
        *log_w += self.trials[i].ln();
        self.trials[i].sqrt()
    }

    /// [`Glmm::laplace`] started at `mode` (the point's last mode), from 0 if that search fails;
    /// `mode` becomes the new one.
    pub(super) fn laplace_warm(
        &self,
        theta: &[f64],
        factors: &[Vec<f64>],
        c: usize,
        mode: &mut Vec<f64>,
    ) -> Result<Laplace> {
        let lap = match self.laplace(theta, factors, c, Some(mode)) {
            Ok(l) => l,
            Err(_) => self.laplace(theta, factors, c, None)?,
        };
        mode.clone_from(&lap.mode);
        Ok(lap)
    }

    /// The posterior mode of point `c` by damped Newton ascent from `start` (0 if none), and the
    /// curvature there.
    pub(super) fn laplace(
        &self,
        theta: &[f64],
        factors: &[Vec<f64>],
        c: usize,
        start: Option<&[f64]>,
    ) -> Result<Laplace> {
        let dim = self.points[c].dim;
        let a = self.point_design(factors, c);
        let at = |u: &[f64], grad: &mut Vec<f64>, hess: &mut Vec<f64>| {
            self.point_curvature(theta, factors, c, u, &a, grad, hess)
        };
        let (mut grad, mut hess) = (vec![0.0; dim], vec![0.0; dim * dim]);
        let mut u = start.map_or_else(|| vec![0.0; dim], <[f64]>::to_vec);
        let mut lp = at(&u, &mut grad, &mut hess);
        for _ in 0..200 {
            let f = Factor::cholesky(&hess, dim).ok_or_else(|| not_finite(c))?;
            let mut step = grad.clone();
            f.solve_lower(&mut step);
            f.solve_upper(&mut step);
            let mut scale = 1.0;
            let (mut g2, mut h2) = (grad.clone(), hess.clone());
            loop {
                let trial: Vec<f64> = u.iter().zip(&step).map(|(u, s)| u + scale * s).collect();
                let l = at(&trial, &mut g2, &mut h2);
                if l.is_finite() && l >= lp - 1e-12 * lp.abs() {
                    u = trial;
                    lp = l;
                    break;
                }
                scale *= 0.5;
                if scale < 1e-10 {
                    return Err(not_finite(c));
                }
            }
            (grad, hess) = (g2, h2);
            if step.iter().map(|s| (scale * s).abs()).fold(0.0, f64::max) < 1e-10 {
                break;
            }
        }
        let curvature = Factor::cholesky(&hess, dim).ok_or_else(|| not_finite(c))?;
        Ok(Laplace { mode: u, curvature })
    }

    /// Point `c`'s log marginal by importance sampling: (estimate, its variance, ESS / draws).
    fn sampled_point(
        &self,
        theta: &[f64],
        c: usize,
        draws: usize,
        seed: u64,
    ) -> Result<(f64, f64, f64)> {
        let factors = self.factors(theta);
        let dim = self.points[c].dim;
        let lap = self.laplace(theta, &factors, c, None)?;
        let nu = T_DOF as f64;
        let d = dim as f64;
        let log_norm = ln_gamma(0.5 * (nu + d))
            - ln_gamma(0.5 * nu)
            - 0.5 * d * (nu * std::f64::consts::PI).ln()
            + 0.5 * lap.curvature.log_det();
        // The draws in the stream's order, then each one's weight on its own (in parallel:
        // one crossed block is the whole data), so the bits do not depend on the threads.
        let width = dim + T_DOF;
        let mut normals = NormalStream::new(seed);
        let mut log_w = Vec::with_capacity(draws);
        let rows = self.points[c].rows.len().max(1);
        let mut drawn = vec![0.0; IS_BLOCK.min(draws) * width];
        for start in (0..draws).step_by(IS_BLOCK) {
            let block = &mut drawn[..(draws - start).min(IS_BLOCK) * width];
            normals.fill(block);
            let weight = |draw: &[f64]| {
                let (eps, chi) = draw.split_at(dim);
                let s = (chi.iter().map(|v| v * v).sum::<f64>() / nu).sqrt();
                let mut u: Vec<f64> = eps.iter().map(|e| e / s).collect();
                let r2: f64 = u.iter().map(|e| e * e).sum();
                lap.curvature.solve_upper(&mut u);
                u.iter_mut().zip(&lap.mode).for_each(|(u, m)| *u += m);
                let lp = self.point_terms(theta, &factors, c, &u, dim, |_, _, _| {});
                let lq = log_norm - 0.5 * (nu + d) * (r2 / nu).ln_1p();
                lp - lq
            };
            let weights: Vec<f64> = block
                .par_chunks(width)
                .with_min_len(IS_ROWS_PER_TASK.div_ceil(rows))
                .map(weight)
                .collect();
            log_w.extend(weights);
        }
        let top = log_w.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        if !top.is_finite() {
            return Err(not_finite(c));
        }
        let w: Vec<f64> = log_w.iter().map(|l| (l - top).exp()).collect();
        let n = draws as f64;
        let mean = w.iter().sum::<f64>() / n;
        let var = w.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0);
        let ess = w.iter().sum::<f64>().powi(2) / w.iter().map(|x| x * x).sum::<f64>();
        Ok((top + mean.ln(), var / (n * mean * mean), ess / n))
    }
}

pub(super) fn not_finite(c: usize) -> SagdError {
    SagdError::InvalidSetting {
        name: "theta",
        value: format!("a log density that is not finite at point {c}"),
        fix: "evaluate the log-likelihood at a finite estimate".into(),
    }
}
