//! Standard errors of a maximum-likelihood estimate by Louis' identity: the observed information is
//!
//! I(θ) = Σ_i ( −E[∇²θ log p(x_i, Z_i; θ)] − Var[∇θ log p(x_i, Z_i; θ)] ),  Z_i ~ p(z | x_i; θ),
//!
//! estimated from Langevin chains on each point's posterior at θ̂ (one chain per point, as EM's),
//! with the Hessian of the complete-data log-likelihood by central differences of its gradient.
//! The standard errors are the square roots of the diagonal of I⁻¹.

use serde::{Deserialize, Serialize};

use crate::error::{Result, SagdError};
use crate::langevin::{ChainSet, LangevinSettings, Momentum, Scheme};
use crate::model::{AnchoredTarget, LatentModel, MaximumLikelihood};

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
            draws: 1000,
            thin: 5,
            fd_step: 1e-5,
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
    /// 95% Wald intervals θ̂ ± 1.96 se.
    pub wald95: Vec<[f64; 2]>,
    /// Posterior draws per data point behind the estimate.
    pub draws: usize,
}

/// Inverts a symmetric positive-definite matrix by Cholesky; `None` if it is not.
fn spd_inverse(a: &[Vec<f64>]) -> Option<Vec<Vec<f64>>> {
    let p = a.len();
    let mut l = vec![vec![0.0; p]; p];
    for i in 0..p {
        for j in 0..=i {
            let s: f64 = (0..j).map(|k| l[i][k] * l[j][k]).sum();
            if i == j {
                let d = a[i][i] - s;
                if d.is_nan() || d <= 0.0 {
                    return None;
                }
                l[i][i] = d.sqrt();
            } else {
                l[i][j] = (a[i][j] - s) / l[j][j];
            }
        }
    }
    // Columns of L⁻¹, then A⁻¹ = L⁻ᵀ L⁻¹.
    let mut li = vec![vec![0.0; p]; p];
    #[allow(clippy::needless_range_loop)] // triangular indices read clearer than iterators
    for c in 0..p {
        for i in c..p {
            let s: f64 = (c..i).map(|k| l[i][k] * li[k][c]).sum();
            li[i][c] = (if i == c { 1.0 } else { 0.0 } - s) / l[i][i];
        }
    }
    Some(
        (0..p)
            .map(|i| {
                (0..p)
                    .map(|j| (0..p).map(|k| li[k][i] * li[k][j]).sum())
                    .collect()
            })
            .collect(),
    )
}

/// Louis' observed information of `model` at `theta`, from chains seeded by `seed`.
pub fn louis_information<M: LatentModel<f64>>(
    model: &M,
    theta: &[f64],
    s: &LouisSettings,
    seed: u64,
) -> Result<Information> {
    let (n, d, p) = (model.n_data(), model.latent_dim(), model.theta_dim());
    if s.draws < 2 || s.thin == 0 {
        return Err(SagdError::InvalidSetting {
            name: "louis draws/thin",
            value: format!("{} / {}", s.draws, s.thin),
            fix: "use at least 2 draws and a thinning of at least 1".into(),
        });
    }
    s.langevin.validate(s.step_size)?;
    let problem = MaximumLikelihood::new(model, 1);
    let target = AnchoredTarget {
        problem: &problem,
        anchor: theta,
    };
    let kernel = s.langevin.kernel::<f64>(s.step_size)?;
    let mut chains = ChainSet::new(n, d, seed);
    chains.init(&target, &vec![0.0; d], Momentum::Normal)?;
    chains.burn_in(&target, &kernel, s.burn_in)?;
    // Per point: Σ g, Σ g gᵀ; over all points: Σ H.
    let mut sg = vec![vec![0.0; p]; n];
    let mut sgg = vec![vec![vec![0.0; p]; p]; n];
    let mut sh = vec![vec![0.0; p]; p];
    let grad = |th: &[f64], i: usize, z: &[f64]| -> Result<Vec<f64>> {
        let mut g = vec![0.0; p];
        model
            .add_grad_theta(th, &[i], z, &mut g)
            .map_err(SagdError::Model)?;
        Ok(g)
    };
    for _ in 0..s.draws {
        chains.burn_in(&target, &kernel, s.thin)?;
        for i in 0..n {
            let z = chains.position(i).to_vec();
            let g = grad(theta, i, &z)?;
            for j in 0..p {
                sg[i][j] += g[j];
                for k in 0..p {
                    sgg[i][j][k] += g[j] * g[k];
                }
                let h = s.fd_step * (1.0 + theta[j].abs());
                let (mut tp, mut tm) = (theta.to_vec(), theta.to_vec());
                tp[j] += h;
                tm[j] -= h;
                let (gp, gm) = (grad(&tp, i, &z)?, grad(&tm, i, &z)?);
                for k in 0..p {
                    sh[j][k] += (gp[k] - gm[k]) / (2.0 * h);
                }
            }
        }
    }
    let m = s.draws as f64;
    let mut info = vec![vec![0.0; p]; p];
    for j in 0..p {
        for k in 0..p {
            // −E[H], symmetrised, minus the summed posterior covariances of the score.
            let mut v = -0.5 * (sh[j][k] + sh[k][j]) / m;
            for i in 0..n {
                v -= sgg[i][j][k] / m - (sg[i][j] / m) * (sg[i][k] / m);
            }
            info[j][k] = v;
        }
    }
    let inv = spd_inverse(&info).ok_or_else(|| SagdError::InvalidSetting {
        name: "observed information",
        value: format!("{info:?}"),
        fix: "it is not positive definite at this θ: the estimate is not at a maximum, or the model is not identified there; run EM further".into(),
    })?;
    let se: Vec<f64> = (0..p).map(|j| inv[j][j].sqrt()).collect();
    let wald95 = (0..p)
        .map(|j| [theta[j] - 1.96 * se[j], theta[j] + 1.96 * se[j]])
        .collect();
    Ok(Information {
        theta: theta.to_vec(),
        matrix: info,
        se,
        wald95,
        draws: s.draws,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inverse_of_a_small_spd_matrix() {
        let a = vec![vec![4.0, 1.0], vec![1.0, 3.0]];
        let inv = spd_inverse(&a).unwrap();
        let det = 11.0;
        assert!((inv[0][0] - 3.0 / det).abs() < 1e-15);
        assert!((inv[0][1] + 1.0 / det).abs() < 1e-15);
        assert!((inv[1][1] - 4.0 / det).abs() < 1e-15);
        assert!(spd_inverse(&[vec![1.0, 2.0], vec![2.0, 1.0]]).is_none());
    }
}
