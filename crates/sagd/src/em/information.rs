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

use super::mstep::{newton_direction, settle_chains, ChainStep};

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
            chain_step: ChainStep::adaptive(),
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
}

/// Louis' identity's parts before the information is known to be positive definite.
struct LouisParts {
    info: Vec<Vec<f64>>,
    complete: Vec<Vec<f64>>,
    score: Vec<f64>,
    score_cov: Vec<Vec<f64>>,
    draws: usize,
}

impl LouisParts {
    /// Standard errors, the Newton step and the gap at `theta`; an error naming the fix when the
    /// information is not positive definite.
    fn into_information(self, theta: &[f64]) -> Result<Information> {
        let p = theta.len();
        let LouisParts {
            info,
            complete,
            score,
            score_cov,
            draws,
        } = self;
        let inv = spd_inverse(&info).ok_or_else(|| SagdError::InvalidSetting {
            name: "observed information",
            value: format!("{info:?}"),
            fix: "it is not positive definite at this θ: the estimate is not at a maximum, or the model is not identified there; run EM further".into(),
        })?;
        let se: Vec<f64> = (0..p).map(|j| inv[j][j].sqrt()).collect();
        let wald95 = (0..p)
            .map(|j| [theta[j] - 1.96 * se[j], theta[j] + 1.96 * se[j]])
            .collect();
        let newton_step: Vec<f64> = (0..p)
            .map(|j| (0..p).map(|k| inv[j][k] * score[k]).sum())
            .collect();
        let gap = 0.5
            * score
                .iter()
                .zip(&newton_step)
                .map(|(g, d)| g * d)
                .sum::<f64>();
        let gap_noise = 0.5
            * (0..p)
                .map(|j| (0..p).map(|k| inv[j][k] * score_cov[k][j]).sum::<f64>())
                .sum::<f64>();
        Ok(Information {
            theta: theta.to_vec(),
            matrix: info,
            se,
            wald95,
            draws,
            score,
            score_cov,
            newton_step,
            gap,
            gap_noise,
            complete,
        })
    }
}

/// Batches of draws behind [`Information::score_cov`].
const SCORE_BATCHES: usize = 20;

/// The covariance of the mean of `rows` (draws × p) by `batches` batch means: the covariance of the
/// batches' means over the number of batches.
fn batch_mean_cov(rows: &[Vec<f64>], batches: usize) -> Vec<Vec<f64>> {
    let p = rows.first().map_or(0, |r| r.len());
    let b = batches.max(2);
    let size = rows.len() / b;
    if size == 0 {
        return vec![vec![f64::INFINITY; p]; p];
    }
    let means: Vec<Vec<f64>> = (0..b)
        .map(|k| {
            let chunk = &rows[k * size..(k + 1) * size];
            (0..p)
                .map(|j| chunk.iter().map(|r| r[j]).sum::<f64>() / size as f64)
                .collect()
        })
        .collect();
    let grand: Vec<f64> = (0..p)
        .map(|j| means.iter().map(|m| m[j]).sum::<f64>() / b as f64)
        .collect();
    (0..p)
        .map(|j| {
            (0..p)
                .map(|k| {
                    means
                        .iter()
                        .map(|m| (m[j] - grand[j]) * (m[k] - grand[k]))
                        .sum::<f64>()
                        / ((b - 1) * b) as f64
                })
                .collect()
        })
        .collect()
}

/// Inverts a symmetric positive-definite matrix by Cholesky; `None` if it is not.
pub(crate) fn spd_inverse(a: &[Vec<f64>]) -> Option<Vec<Vec<f64>>> {
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
    louis_parts(model, theta, s, seed)?.into_information(theta)
}

fn louis_parts<M: LatentModel<f64>>(
    model: &M,
    theta: &[f64],
    s: &LouisSettings,
    seed: u64,
) -> Result<LouisParts> {
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
    let mut chains = ChainSet::new(n, d, seed);
    chains.init(&target, &vec![0.0; d], Momentum::Normal)?;
    let kernel = if s.chain_step == ChainStep::Schedule {
        let kernel = s.langevin.kernel::<f64>(s.step_size)?;
        chains.burn_in(&target, &kernel, s.burn_in)?;
        kernel
    } else {
        let sigma = settle_chains(
            &problem,
            theta,
            &mut chains,
            s.chain_step,
            s.langevin,
            s.burn_in,
            None,
        )?;
        let (delta, gamma) = s
            .chain_step
            .at(sigma)
            .unwrap_or((s.step_size, s.langevin.gamma));
        LangevinSettings {
            gamma,
            ..s.langevin
        }
        .kernel::<f64>(delta)?
    };
    // Per point: Σ g, Σ g gᵀ; over all points: Σ H.
    let mut sg = vec![vec![0.0; p]; n];
    let mut sgg = vec![vec![vec![0.0; p]; p]; n];
    let mut sh = vec![vec![0.0; p]; p];
    // The total score at each draw, for the batch means.
    let mut per_draw: Vec<Vec<f64>> = Vec::with_capacity(s.draws);
    let grad = |th: &[f64], i: usize, z: &[f64]| -> Result<Vec<f64>> {
        let mut g = vec![0.0; p];
        model
            .add_grad_theta(th, &[i], z, &mut g)
            .map_err(SagdError::Model)?;
        Ok(g)
    };
    for _ in 0..s.draws {
        chains.burn_in(&target, &kernel, s.thin)?;
        let mut total = vec![0.0; p];
        for i in 0..n {
            let z = chains.position(i).to_vec();
            let g = grad(theta, i, &z)?;
            total.iter_mut().zip(&g).for_each(|(t, v)| *t += v);
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
        per_draw.push(total);
    }
    let m = s.draws as f64;
    let mut info = vec![vec![0.0; p]; p];
    let mut complete = vec![vec![0.0; p]; p];
    for j in 0..p {
        for k in 0..p {
            // −E[H], symmetrised, minus the summed posterior covariances of the score.
            complete[j][k] = -0.5 * (sh[j][k] + sh[k][j]) / m;
            let mut v = complete[j][k];
            for i in 0..n {
                v -= sgg[i][j][k] / m - (sg[i][j] / m) * (sg[i][k] / m);
            }
            info[j][k] = v;
        }
    }
    let score: Vec<f64> = (0..p)
        .map(|j| (0..n).map(|i| sg[i][j]).sum::<f64>() / m)
        .collect();
    Ok(LouisParts {
        info,
        complete,
        score,
        score_cov: batch_mean_cov(&per_draw, SCORE_BATCHES.min(s.draws)),
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
    /// The estimate: the last point plus its Newton step.
    pub estimate: Vec<f64>,
    /// Its Monte Carlo standard errors, √diag(I⁻¹ C I⁻¹) with C the score's Monte Carlo covariance.
    pub mc_se: Vec<f64>,
    /// The information at the last point (its `se` are the estimate's standard errors).
    pub information: Information,
    /// The estimated gap ½ ∇ℓᵀ I⁻¹ ∇ℓ, less its noise part, at each point visited (NaN where I
    /// was not positive definite and an EM-gradient step was taken instead).
    pub gaps: Vec<f64>,
    /// The noise part at the last point: about the gap that the estimate's own Monte Carlo error
    /// leaves.
    pub gap_noise: f64,
    /// Whether the last gap was below the tolerance.
    pub converged: bool,
}

/// About the Monte Carlo sd of a gap estimate `gap` whose noise part is `noise`: with a score
/// g + e, e of covariance C, ½(g+e)ᵀI⁻¹(g+e) varies by the cross term (variance ≈ 4·gap·noise)
/// and the quadratic one (≈ 2·noise² for a few parameters).
fn gap_sd(gap: f64, noise: f64) -> f64 {
    (4.0 * gap.max(0.0) * noise + 2.0 * noise * noise).sqrt()
}

/// [`polish`], tried again after a failure (an information that is not positive definite is most
/// often noise) with fresh streams and twice the draws, up to `attempts` times in all: the
/// polished estimate and the attempts it took, or why each attempt failed. The first attempt uses
/// `seed` itself, so a polish that succeeds at once gives [`polish`]'s result.
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
        let seed = seed ^ (attempt as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        match polish(model, theta, &s, seed) {
            Ok(p) => return Ok((p, attempt + 1)),
            Err(e) => {
                failures.push(format!("with {} draws: {e}", s.louis.draws));
                s.louis.draws *= 2;
            }
        }
    }
    Err(failures)
}

/// Monte Carlo Newton-Raphson on ℓ from `theta` (EM's estimate, say): at each point, chains on
/// every posterior give the score ∇ℓ (Fisher's identity) and the observed information I (Louis'
/// identity); ½ ∇ℓᵀ I⁻¹ ∇ℓ estimates how far ℓ is below its maximum, and the Newton step I⁻¹ ∇ℓ
/// how far θ is from it. The steps continue until that gap, less what Monte Carlo noise alone
/// puts into its estimate, is below `gap_tol`. This is the stopping rule that EM's own progress
/// cannot give when EM is slow: each Newton step covers the distance that many M-steps would.
pub fn polish<M: LatentModel<f64>>(
    model: &M,
    theta: &[f64],
    s: &PolishSettings,
    seed: u64,
) -> Result<Polished> {
    let p = theta.len();
    let mut at = theta.to_vec();
    let mut gaps = Vec::new();
    let mut louis = s.louis;
    let mut doublings = 0;
    let mut step = 0;
    // The last accepted point, its Newton step, gap and gap noise, and the fraction of the step
    // taken.
    let mut last: Option<(Vec<f64>, Vec<f64>, f64, f64)> = None;
    let mut fraction = 1.0;
    loop {
        let parts = louis_parts(model, &at, &louis, seed.wrapping_add(step as u64))?;
        if spd_inverse(&parts.info).is_none() && step + 1 < s.max_steps {
            // Not concave here (too far from the maximum for Newton): an EM-gradient step,
            // the score scaled by the complete-data information, which goes uphill.
            let d = newton_direction(&parts.complete, &parts.score).ok_or(
                SagdError::NonFiniteUpdate {
                    iteration: step + 1,
                },
            )?;
            at.iter_mut().zip(&d).for_each(|(t, v)| *t -= v);
            gaps.push(f64::NAN);
            step += 1;
            continue;
        }
        let info = parts.into_information(&at)?;
        let gap = info.gap - info.gap_noise;
        gaps.push(gap);
        let noisy = info.gap_noise >= s.gap_tol;
        if noisy && doublings < s.max_doublings {
            louis.draws *= 2;
            doublings += 1;
        }
        let estimate: Vec<f64> = at
            .iter()
            .zip(&info.newton_step)
            .map(|(t, d)| t + d)
            .collect();
        if !estimate.iter().all(|v| v.is_finite()) {
            return Err(SagdError::NonFiniteUpdate {
                iteration: step + 1,
            });
        }
        let converged = gap < s.gap_tol && !noisy;
        let last_step = converged || step + 1 >= s.max_steps;
        if let Some((from, newton, last_gap, last_noise)) = &last {
            let rise = gap - last_gap;
            let sd = gap_sd(gap, info.gap_noise).hypot(gap_sd(*last_gap, *last_noise));
            if !last_step && rise > 3.0 * sd {
                // The step went too far (ℓ is far from quadratic there): back to where it was
                // taken, with half of it.
                fraction *= 0.5;
                at = from
                    .iter()
                    .zip(newton)
                    .map(|(t, d)| t + fraction * d)
                    .collect();
                step += 1;
                continue;
            }
            fraction = (2.0 * fraction).min(1.0);
        }
        if last_step {
            let inv = spd_inverse(&info.matrix).unwrap_or_else(|| vec![vec![f64::NAN; p]; p]);
            let mc_se = (0..p)
                .map(|j| {
                    let mut v = 0.0;
                    for a in 0..p {
                        for b in 0..p {
                            v += inv[j][a] * info.score_cov[a][b] * inv[b][j];
                        }
                    }
                    v.max(0.0).sqrt()
                })
                .collect();
            return Ok(Polished {
                estimate,
                mc_se,
                gap_noise: info.gap_noise,
                information: info,
                gaps,
                converged,
            });
        }
        at = at
            .iter()
            .zip(&info.newton_step)
            .map(|(t, d)| t + fraction * d)
            .collect();
        last = Some((info.theta, info.newton_step, gap, info.gap_noise));
        step += 1;
    }
}
