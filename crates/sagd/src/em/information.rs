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
use crate::metric::{Preconditioned, Preconditioner};
use crate::model::{AnchoredTarget, LatentModel, MaximumLikelihood};
use crate::parallel::rows_for_dim;
use crate::rng::stream_seed;

use super::mstep::{settle_chains, ChainStep};

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
    /// Chains in all, at least (each point gets ⌈min_chains / n⌉; 0 or 1: one per point).
    #[serde(default)]
    pub min_chains: usize,
    /// The chains' mass matrix, adapted at θ ([`crate::metric`]).
    #[serde(default)]
    pub preconditioner: Preconditioner,
    /// How the information is estimated.
    #[serde(default)]
    pub method: InformationMethod,
    /// The step h of [`InformationMethod::CoupledScore`] (relative to 1 + |θ_j|).
    #[serde(default = "default_coupled_step")]
    pub coupled_step: f64,
}

fn default_coupled_step() -> f64 {
    1e-4
}

/// How [`louis_information`] estimates the observed information.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum InformationMethod {
    /// Louis' identity from one set of chains at θ: complete minus missing information. Cheap
    /// (one run), but where most information is missing, the difference of two large noisy
    /// terms: its relative error, and the standard errors' bias, grow with the missing fraction.
    Louis,
    /// −∂ score/∂θ by central differences of Fisher's score, each from chains at θ ± h e_j
    /// driven by the same noise from the same settled state (common random numbers; Langevin
    /// without a Metropolis test is smooth in θ, so the paired chains stay within O(h)). 2p runs
    /// instead of one, but no cancellation: on a 300-long latent series with two thirds of the
    /// information missing, 100 draws gave the information to 1-2%, where Louis' identity with
    /// 1000 draws was off by up to 30%.
    #[default]
    #[serde(rename = "coupled-score")]
    CoupledScore,
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
            draws: 200,
            thin: 5,
            fd_step: 1e-5,
            chain_step: ChainStep::adaptive(),
            min_chains: 4,
            preconditioner: Preconditioner::Auto,
            method: InformationMethod::CoupledScore,
            coupled_step: default_coupled_step(),
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
    /// The Monte Carlo standard error of each `se`, by the jackknife over batches of draws
    /// (empty with fewer than 20 draws).
    #[serde(default)]
    pub se_error: Vec<f64>,
    /// With several chains per point: the largest split R̂ of a point's score along its chains
    /// (near 1 when they agree; above [`CHAIN_RHAT_LIMIT`] they have not mixed).
    #[serde(default)]
    pub chain_rhat: Option<f64>,
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
    /// The information without each batch of draws in turn (the jackknife's replicates).
    leave_one_out: Vec<Vec<Vec<f64>>>,
    chain_rhat: Option<f64>,
}

/// The largest split R̂ over points and parameters of the score along each point's chains
/// (`series[row][parameter]`, row r belonging to point r % n); `None` without rows.
fn chain_rhat(series: &[Vec<Vec<f64>>], n: usize) -> Option<f64> {
    let p = series.first()?.len();
    let mut worst: Option<f64> = None;
    for i in 0..n {
        for k in 0..p {
            let chains: Vec<Vec<f64>> = series
                .iter()
                .skip(i)
                .step_by(n)
                .map(|r| r[k].clone())
                .collect();
            let r = crate::diagnostics::rhat(&chains);
            if r.is_finite() {
                worst = Some(worst.map_or(r, |w: f64| w.max(r)));
            }
        }
    }
    worst
}

/// Above this R̂ a point's chains disagree about its score: [`polish`] says so.
pub const CHAIN_RHAT_LIMIT: f64 = 1.05;

/// √diag(I⁻¹), `None` when I is not positive definite.
fn standard_errors(info: &[Vec<f64>]) -> Option<Vec<f64>> {
    let inv = spd_inverse(info)?;
    Some((0..info.len()).map(|j| inv[j][j].sqrt()).collect())
}

/// The jackknife's standard error of a statistic from its leave-one-batch-out replicates.
fn jackknife_se(replicates: &[Vec<f64>]) -> Vec<f64> {
    let b = replicates.len() as f64;
    let p = replicates.first().map_or(0, Vec::len);
    (0..p)
        .map(|j| {
            let mean = replicates.iter().map(|r| r[j]).sum::<f64>() / b;
            let ss: f64 = replicates.iter().map(|r| (r[j] - mean).powi(2)).sum();
            ((b - 1.0) / b * ss).sqrt()
        })
        .collect()
}

impl LouisParts {
    /// Standard errors, their Monte Carlo error, the Newton step and the gap at `theta`; an error
    /// naming the fix when the information is not positive definite.
    fn into_information(self, theta: &[f64]) -> Result<Information> {
        let p = theta.len();
        let LouisParts {
            info,
            complete,
            score,
            score_cov,
            draws,
            leave_one_out,
            chain_rhat,
        } = self;
        let inv = spd_inverse(&info).ok_or_else(|| SagdError::InvalidSetting {
            name: "observed information",
            value: format!("{info:?}"),
            fix: "it is not positive definite at this θ: the estimate is not at a maximum, or the model is not identified there; run EM further".into(),
        })?;
        let se: Vec<f64> = (0..p).map(|j| inv[j][j].sqrt()).collect();
        let se_error = if leave_one_out.is_empty() {
            Vec::new()
        } else {
            let replicates: Option<Vec<Vec<f64>>> =
                leave_one_out.iter().map(|i| standard_errors(i)).collect();
            replicates.map_or_else(|| vec![f64::INFINITY; p], |r| jackknife_se(&r))
        };
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
            se_error,
            chain_rhat,
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

/// Sums over draws behind Louis' identity: per point Σ g and Σ g gᵀ of the score g of its chains'
/// states, and Σ H of the complete-data Hessian over all rows.
#[derive(Clone)]
struct LouisSums {
    p: usize,
    /// Samples per point (draws × chains per point).
    count: f64,
    sg: Vec<f64>,
    sgg: Vec<f64>,
    sh: Vec<f64>,
}

impl LouisSums {
    fn new(n: usize, p: usize) -> Self {
        LouisSums {
            p,
            count: 0.0,
            sg: vec![0.0; n * p],
            sgg: vec![0.0; n * p * p],
            sh: vec![0.0; p * p],
        }
    }

    /// `self` + `sign`·`other`.
    fn add(&mut self, other: &LouisSums, sign: f64) {
        self.count += sign * other.count;
        for (a, b) in [
            (&mut self.sg, &other.sg),
            (&mut self.sgg, &other.sgg),
            (&mut self.sh, &other.sh),
        ] {
            a.iter_mut().zip(b).for_each(|(x, y)| *x += sign * y);
        }
    }

    /// (I, the complete-data information, the score) from these sums.
    fn assemble(&self) -> (Vec<Vec<f64>>, Vec<Vec<f64>>, Vec<f64>) {
        let (p, m) = (self.p, self.count);
        let n = self.sg.len() / p.max(1);
        let mut info = vec![vec![0.0; p]; p];
        let mut complete = vec![vec![0.0; p]; p];
        for j in 0..p {
            for k in 0..p {
                // −E[H], symmetrised, minus the summed posterior covariances of the score.
                complete[j][k] = -0.5 * (self.sh[j * p + k] + self.sh[k * p + j]) / m;
                let mut v = complete[j][k];
                for i in 0..n {
                    let (gj, gk) = (self.sg[i * p + j] / m, self.sg[i * p + k] / m);
                    v -= self.sgg[(i * p + j) * p + k] / m - gj * gk;
                }
                info[j][k] = v;
            }
        }
        let score = (0..p)
            .map(|j| (0..n).map(|i| self.sg[i * p + j]).sum::<f64>() / m)
            .collect();
        (info, complete, score)
    }
}

/// What a run of the information's chains does with each draw: `(batch, z)` in (z of every
/// chain, rows × d), the draw's score out (Σ over rows / chains per point).
type TakeDraw<'a> = dyn FnMut(usize, &[f64]) -> Result<Vec<f64>> + 'a;

/// Batches of draws behind [`Information::se_error`] (the jackknife's).
const SE_BATCHES: usize = 10;

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
    let per_point = s.min_chains.div_ceil(n.max(1)).max(1);
    let rows = n * per_point;
    let mut problem = Preconditioned::new(MaximumLikelihood::new(model, per_point), n);
    let mut chains = ChainSet::new(rows, d, seed);
    let cheap = chains.rows_per_block();
    chains.set_rows_per_block(rows_for_dim(rows, d, cheap));
    chains.init(
        &AnchoredTarget {
            problem: &problem,
            anchor: theta,
        },
        &vec![0.0; d],
        Momentum::Normal,
    )?;
    let adapted = problem.adapt(theta, chains.positions(), s.preconditioner)?;
    let target = AnchoredTarget {
        problem: &problem,
        anchor: theta,
    };
    if let Some(at_modes) = &adapted {
        chains.set_positions(&target, at_modes)?;
    }
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
            adapted.is_some(),
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
    let batches = if s.draws >= 2 * SE_BATCHES {
        SE_BATCHES
    } else {
        1
    };
    // Σ over `points`' rows of ∇θ log p at `z` (one call of the model for all of them).
    let grad_rows = |th: &[f64], points: &[usize], z: &[f64]| -> Result<Vec<f64>> {
        let mut g = vec![0.0; p];
        model
            .add_grad_theta(th, points, z, &mut g)
            .map_err(SagdError::Model)?;
        Ok(g)
    };
    let grad = |th: &[f64], i: usize, z: &[f64]| grad_rows(th, &[i], z);
    let all_points: Vec<usize> = (0..rows).map(|r| r % n).collect();
    // Draw `draws` states of every chain from `start` at `at`, calling `take(batch, row, point,
    // z)` on each; the total score at θ per draw comes back.
    let run =
        |start: &ChainSet<f64>, at: &[f64], take: &mut TakeDraw<'_>| -> Result<Vec<Vec<f64>>> {
            let mut chains = start.clone();
            let target = AnchoredTarget {
                problem: &problem,
                anchor: at,
            };
            let mut per_draw = Vec::with_capacity(s.draws);
            if s.method == InformationMethod::CoupledScore {
                chains.burn_in(&target, &kernel, s.burn_in)?;
            }
            for draw in 0..s.draws {
                chains.burn_in(&target, &kernel, s.thin)?;
                let z = problem.to_z(0, chains.positions());
                per_draw.push(take(draw * batches / s.draws, &z)?);
            }
            Ok(per_draw)
        };
    // Each row's score along its draws, when points have several chains (for R̂).
    let mut series =
        vec![vec![Vec::with_capacity(s.draws); p]; if per_point > 1 { rows } else { 0 }];
    let mut record = |r: usize, g: &[f64]| {
        if let Some(row) = series.get_mut(r) {
            row.iter_mut().zip(g).for_each(|(v, x)| v.push(*x));
        }
    };
    let (info, complete, score, per_draw, leave_one_out) = match s.method {
        InformationMethod::Louis => {
            let mut sums = vec![LouisSums::new(n, p); batches];
            let per_draw = run(&chains, theta, &mut |b, z_all| {
                let sum = &mut sums[b];
                sum.count += per_point as f64;
                let mut total = vec![0.0; p];
                for r in 0..rows {
                    let (i, z) = (r % n, &z_all[r * d..(r + 1) * d]);
                    let g = grad(theta, i, z)?;
                    record(r, &g);
                    for j in 0..p {
                        total[j] += g[j] / per_point as f64;
                        sum.sg[i * p + j] += g[j];
                        for k in 0..p {
                            sum.sgg[(i * p + j) * p + k] += g[j] * g[k];
                        }
                        let h = s.fd_step * (1.0 + theta[j].abs());
                        let (mut tp, mut tm) = (theta.to_vec(), theta.to_vec());
                        tp[j] += h;
                        tm[j] -= h;
                        let (gp, gm) = (grad(&tp, i, z)?, grad(&tm, i, z)?);
                        for k in 0..p {
                            sum.sh[j * p + k] += (gp[k] - gm[k]) / (2.0 * h);
                        }
                    }
                }
                Ok(total)
            })?;
            let mut all = LouisSums::new(n, p);
            sums.iter().for_each(|b| all.add(b, 1.0));
            let (info, complete, score) = all.assemble();
            let leave_one_out = if batches > 1 {
                sums.iter()
                    .map(|b| {
                        let mut rest = all.clone();
                        rest.add(b, -1.0);
                        rest.assemble().0
                    })
                    .collect()
            } else {
                Vec::new()
            };
            (info, complete, score, per_draw, leave_one_out)
        }
        InformationMethod::CoupledScore => {
            // Per batch, Σ over its draws of ∂_j score_k estimated by each pair of runs at
            // θ ± h e_j: [j][k]; and the complete-data term −∂_j g_k at the same states.
            let mut diff = vec![vec![vec![0.0; p]; p]; batches];
            let mut complete = vec![vec![0.0; p]; p];
            let mut counts = vec![0.0; batches];
            let mut totals: Vec<Vec<f64>> = vec![vec![0.0; p]; s.draws];
            for j in 0..p {
                let h = s.coupled_step * (1.0 + theta[j].abs());
                for sign in [1.0, -1.0] {
                    let mut at = theta.to_vec();
                    at[j] += sign * h;
                    let (mut up, mut down) = (at.clone(), at.clone());
                    up[j] += s.fd_step * (1.0 + theta[j].abs());
                    down[j] -= s.fd_step * (1.0 + theta[j].abs());
                    let fd = 2.0 * s.fd_step * (1.0 + theta[j].abs());
                    let per_draw = run(&chains, &at, &mut |b, z_all| {
                        // Row by row only where R̂ needs each row's score (several chains per
                        // point, in the first run); else one call of the model for all rows.
                        let g = if j == 0 && sign > 0.0 && per_point > 1 {
                            let mut g = vec![0.0; p];
                            for r in 0..rows {
                                let gr = grad(&at, r % n, &z_all[r * d..(r + 1) * d])?;
                                record(r, &gr);
                                g.iter_mut().zip(&gr).for_each(|(a, v)| *a += v);
                            }
                            g
                        } else {
                            grad_rows(&at, &all_points, z_all)?
                        };
                        if j == 0 && sign > 0.0 {
                            counts[b] += 1.0;
                        }
                        for k in 0..p {
                            diff[b][j][k] += sign * g[k] / (2.0 * h * per_point as f64);
                        }
                        let gu = grad_rows(&up, &all_points, z_all)?;
                        let gd = grad_rows(&down, &all_points, z_all)?;
                        for k in 0..p {
                            complete[j][k] -= (gu[k] - gd[k]) / (fd * 2.0 * per_point as f64);
                        }
                        Ok(g.iter().map(|v| v / per_point as f64).collect())
                    })?;
                    // The score at θ: the average of all runs' (their θ ± h differ by O(h²)).
                    for (t, d) in totals.iter_mut().zip(&per_draw) {
                        t.iter_mut()
                            .zip(d)
                            .for_each(|(a, v)| *a += v / (2 * p) as f64);
                    }
                }
            }
            let m: f64 = counts.iter().sum();
            let symmetric = |d: &[Vec<f64>], m: f64| -> Vec<Vec<f64>> {
                (0..p)
                    .map(|j| (0..p).map(|k| -0.5 * (d[j][k] + d[k][j]) / m).collect())
                    .collect()
            };
            let mut sum = vec![vec![0.0; p]; p];
            for batch in &diff {
                for j in 0..p {
                    for k in 0..p {
                        sum[j][k] += batch[j][k];
                    }
                }
            }
            let leave_one_out = if batches > 1 {
                diff.iter()
                    .zip(&counts)
                    .map(|(batch, c)| {
                        let rest: Vec<Vec<f64>> = (0..p)
                            .map(|j| (0..p).map(|k| sum[j][k] - batch[j][k]).collect())
                            .collect();
                        symmetric(&rest, m - c)
                    })
                    .collect()
            } else {
                Vec::new()
            };
            let score = (0..p)
                .map(|k| totals.iter().map(|t| t[k]).sum::<f64>() / s.draws as f64)
                .collect();
            let complete = symmetric(
                &complete
                    .iter()
                    .map(|r| r.iter().map(|v| -v).collect())
                    .collect::<Vec<Vec<f64>>>(),
                m,
            );
            (symmetric(&sum, m), complete, score, totals, leave_one_out)
        }
    };
    Ok(LouisParts {
        info,
        complete,
        score,
        score_cov: batch_mean_cov(&per_draw, SCORE_BATCHES.min(s.draws)),
        draws: s.draws,
        leave_one_out,
        chain_rhat: chain_rhat(&series, n),
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
    /// Why the standard errors are less precise than asked ([`SE_PRECISION`]), or a point's
    /// chains disagree ([`CHAIN_RHAT_LIMIT`]), if so.
    #[serde(default)]
    pub se_warning: Option<String>,
}

/// Where the information I is not positive definite: d = (1 + λ)(I + λC)⁻¹ ∇ℓ, C the complete-data
/// information, with λ twice the smallest of 0.1, 0.3, 1, 3, … that makes I + λC positive
/// definite. λ → 0 is Newton's step, λ → ∞ EM's gradient step C⁻¹∇ℓ; doubling λ keeps the step
/// off the singular edge, where it would be thrown far. `None` when no λ up to 10⁴ works.
fn damped_direction(info: &[Vec<f64>], complete: &[Vec<f64>], score: &[f64]) -> Option<Vec<f64>> {
    let p = score.len();
    let with = |lambda: f64| -> Vec<Vec<f64>> {
        (0..p)
            .map(|j| {
                (0..p)
                    .map(|k| info[j][k] + lambda * complete[j][k])
                    .collect()
            })
            .collect()
    };
    let lambda = (0..10)
        .map(|k| 0.1 * 3f64.powi(k))
        .find(|&l| spd_inverse(&with(l)).is_some())?;
    let inv = spd_inverse(&with(2.0 * lambda))?;
    let d: Vec<f64> = (0..p)
        .map(|j| (1.0 + 2.0 * lambda) * (0..p).map(|k| inv[j][k] * score[k]).sum::<f64>())
        .collect();
    d.iter().all(|v| v.is_finite()).then_some(d)
}

/// About the Monte Carlo sd of a gap estimate `gap` whose noise part is `noise`: with a score
/// g + e, e of covariance C, ½(g+e)ᵀI⁻¹(g+e) varies by the cross term (variance ≈ 4·gap·noise)
/// and the quadratic one (≈ 2·noise² for a few parameters).
fn gap_sd(gap: f64, noise: f64) -> f64 {
    (4.0 * gap.max(0.0) * noise + 2.0 * noise * noise).sqrt()
}

/// The seed of polishing attempt `attempt` (0-based) under `seed`: its own streams, unrelated to
/// any other attempt's, run's or point's. Step k of an attempt draws from
/// [`stream_seed`]`(attempt_seed(seed, attempt), k)`, and chain c of that step from
/// `stream_seed(that, c)`.
pub fn attempt_seed(seed: u64, attempt: usize) -> u64 {
    stream_seed(seed, 0xA77E_0000 + attempt as u64)
}

/// The most times [`polish`] doubles the draws at its last point so that the standard errors'
/// own Monte Carlo error falls below [`SE_PRECISION`] of them.
pub const SE_DOUBLINGS: usize = 3;

/// The relative Monte Carlo error of the standard errors that [`polish`] aims for.
pub const SE_PRECISION: f64 = 0.1;

/// The largest ratio of a standard error's Monte Carlo error to the standard error (∞ when it
/// has none).
fn se_imprecision(info: &Information) -> f64 {
    if info.se_error.is_empty() {
        return f64::INFINITY;
    }
    info.se
        .iter()
        .zip(&info.se_error)
        .map(|(se, e)| e / se)
        .fold(0.0, f64::max)
}

/// [`polish`], tried again after a failure (an information that is not positive definite is most
/// often noise) with fresh streams and twice the draws, up to `attempts` times in all: the
/// polished estimate and the attempts it took, or why each attempt failed. Attempt a runs
/// [`polish`] with the seed [`attempt_seed`]`(seed, a)`.
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
        match polish(model, theta, &s, attempt_seed(seed, attempt)) {
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
        let parts = louis_parts(model, &at, &louis, stream_seed(seed, step as u64))?;
        if spd_inverse(&parts.info).is_none() && step + 1 < s.max_steps {
            // Not concave here (too far from the maximum for Newton): a step between Newton's
            // and EM's, which goes uphill.
            let d = damped_direction(&parts.info, &parts.complete, &parts.score).ok_or(
                SagdError::NonFiniteUpdate {
                    iteration: step + 1,
                },
            )?;
            at.iter_mut().zip(&d).for_each(|(t, v)| *t += v);
            gaps.push(f64::NAN);
            step += 1;
            continue;
        }
        let mut info = parts.into_information(&at)?;
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
            // More draws at the last point until the standard errors are precise enough.
            let mut more = 0;
            let mut draws = louis.draws;
            while se_imprecision(&info) > SE_PRECISION && more < SE_DOUBLINGS {
                more += 1;
                draws *= 2;
                let again = LouisSettings { draws, ..louis };
                let seed = stream_seed(seed, (s.max_steps + more) as u64);
                match louis_parts(model, &at, &again, seed)?.into_information(&at) {
                    Ok(i) => info = i,
                    Err(_) => break,
                }
            }
            let estimate: Vec<f64> = at
                .iter()
                .zip(&info.newton_step)
                .map(|(t, d)| t + d)
                .collect();
            let imprecision = se_imprecision(&info);
            let mut warnings = Vec::new();
            if imprecision > SE_PRECISION {
                warnings.push(format!(
                    "the standard errors' own Monte Carlo error is up to {:.0}% of them after {} draws per chain; treat their last digit with care, or polish with more draws",
                    100.0 * imprecision,
                    info.draws
                ));
            }
            if let Some(r) = info.chain_rhat.filter(|r| *r > CHAIN_RHAT_LIMIT) {
                warnings.push(format!(
                    "a point's chains disagree about its score (R-hat {r:.3} > {CHAIN_RHAT_LIMIT}): its posterior may have several modes, or the chains mix too slowly for these draws"
                ));
            }
            let se_warning = (!warnings.is_empty()).then(|| warnings.join("; "));
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
                se_warning,
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
