//! The chains behind the observed information: one run at θ (Louis' identity) or p + 1 runs at
//! θ and θ + h e_j on common random numbers (coupled score differences), with the batch sums behind the
//! jackknife's errors and the chains' R̂.

use super::{Information, InformationMethod, LouisSettings};
use crate::em::mstep::{settle_chains, ChainStep};
use crate::error::{Result, SagdError};
use crate::langevin::{ChainSet, Kernel, LangevinSettings, Momentum};
use crate::linalg::spd_inverse;
use crate::metric::Preconditioned;
use crate::model::{AnchoredTarget, LatentModel, MaximumLikelihood};
use crate::parallel::rows_per_piece;

/// Louis' identity's parts before the information is known to be positive definite.
pub(super) struct LouisParts {
    pub(super) info: Vec<Vec<f64>>,
    pub(super) complete: Vec<Vec<f64>>,
    pub(super) score: Vec<f64>,
    pub(super) score_cov: Vec<Vec<f64>>,
    pub(super) draws: usize,
    /// The information without each batch of draws in turn (the jackknife's replicates).
    pub(super) leave_one_out: Vec<Vec<Vec<f64>>>,
    pub(super) chain_rhat: Option<f64>,
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

/// Above this R̂ a point's chains disagree about its score: [`polish`](super::polish) says so.
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

impl Information {
    /// The same information with the score (and its Monte Carlo covariance and draws) of
    /// `parts`, a [`score_parts`] run at the same θ: the Newton step, the gap and its noise
    /// recomputed.
    pub(super) fn rescored(&mut self, parts: LouisParts) -> Result<()> {
        let Some(inv) = spd_inverse(&self.matrix) else {
            return Err(SagdError::InvalidSetting {
                name: "observed information",
                value: format!("{:?}", self.matrix),
                fix: "it is not positive definite at this θ".into(),
            });
        };
        self.score = parts.score;
        self.score_cov = parts.score_cov;
        self.draws = parts.draws;
        self.set_step(&inv);
        Ok(())
    }

    /// The same information with its score pooled with that of `parts`, a [`score_parts`] run at
    /// the same θ on streams of its own: the two means weighted by their draws, their Monte Carlo
    /// covariances by the squared weights, and the Newton step, the gap and its noise recomputed.
    /// What more draws were meant to buy is then bought by the extra draws alone.
    pub(super) fn pooled(&mut self, parts: LouisParts) -> Result<()> {
        let (d1, d2) = (self.draws as f64, parts.draws as f64);
        let (w1, w2) = (d1 / (d1 + d2), d2 / (d1 + d2));
        let score: Vec<f64> = self
            .score
            .iter()
            .zip(&parts.score)
            .map(|(a, b)| w1 * a + w2 * b)
            .collect();
        let score_cov: Vec<Vec<f64>> = self
            .score_cov
            .iter()
            .zip(&parts.score_cov)
            .map(|(r1, r2)| {
                r1.iter()
                    .zip(r2)
                    .map(|(a, b)| w1 * w1 * a + w2 * w2 * b)
                    .collect()
            })
            .collect();
        let draws = self.draws + parts.draws;
        self.rescored(LouisParts {
            score,
            score_cov,
            draws,
            ..parts
        })
    }

    /// The Newton step I⁻¹∇ℓ, the gap ½∇ℓᵀI⁻¹∇ℓ and its noise part ½ tr(I⁻¹C) from the score
    /// and its covariance C, `inv` being I⁻¹.
    fn set_step(&mut self, inv: &[Vec<f64>]) {
        let p = self.score.len();
        self.newton_step = (0..p).map(|j| dot(&inv[j], &self.score)).collect();
        self.gap = 0.5 * dot(&self.score, &self.newton_step);
        self.gap_noise = 0.5
            * (0..p)
                .map(|j| dot(&inv[j], &self.score_cov[j]))
                .sum::<f64>();
    }
}

fn dot(a: &[f64], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

impl LouisParts {
    /// Standard errors, their Monte Carlo error, the Newton step and the gap at `theta`; an error
    /// naming the fix when the information is not positive definite.
    pub(super) fn into_information(self, theta: &[f64]) -> Result<Information> {
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
        let wald95 = wald95(theta, &se);
        let mut information = Information {
            theta: theta.to_vec(),
            matrix: info,
            se,
            se_error,
            chain_rhat,
            wald95,
            draws,
            score,
            score_cov,
            newton_step: Vec::new(),
            gap: 0.0,
            gap_noise: 0.0,
            complete,
        };
        information.set_step(&inv);
        Ok(information)
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

/// The coupled runs take the complete-data term (two more model passes, central differences of
/// the gradient) at every this many draws: it only damps a step where the information is not
/// positive definite, so a quarter of the draws serve.
const COMPLETE_EVERY: usize = 4;

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

/// The score ∇ℓ(θ) and its Monte Carlo covariance from one run of the chains at θ (`s.draws`
/// draws), without the information: what [`super::polish`] refines at its last point when only
/// the step, not the standard errors, needs more draws. Its `info`, `complete` and
/// `leave_one_out` are empty.
pub(super) fn score_parts<M: LatentModel<f64>>(
    model: &M,
    theta: &[f64],
    s: &LouisSettings,
    seed: u64,
) -> Result<LouisParts> {
    parts_of(model, theta, s, seed, true)
}

pub(super) fn louis_parts<M: LatentModel<f64>>(
    model: &M,
    theta: &[f64],
    s: &LouisSettings,
    seed: u64,
) -> Result<LouisParts> {
    parts_of(model, theta, s, seed, false)
}

fn parts_of<M: LatentModel<f64>>(
    model: &M,
    theta: &[f64],
    s: &LouisSettings,
    seed: u64,
    score_only: bool,
) -> Result<LouisParts> {
    if s.draws < 2 || s.thin == 0 {
        return Err(SagdError::InvalidSetting {
            name: "louis draws/thin",
            value: format!("{} / {}", s.draws, s.thin),
            fix: "use at least 2 draws and a thinning of at least 1".into(),
        });
    }
    s.langevin.validate(s.step_size)?;
    let (n, p) = (model.n_data(), model.theta_dim());
    let per_point = s.min_chains.div_ceil(n.max(1)).max(1);
    let problem = Preconditioned::new(MaximumLikelihood::new(model, per_point), n);
    let settled = Settled::at(model, problem, theta, s, seed, per_point)?;
    // Each row's score along its draws, when points have several chains (for R̂).
    let rows = settled.rows;
    let mut series =
        vec![vec![Vec::with_capacity(s.draws); p]; if per_point > 1 { rows } else { 0 }];
    let mut record = |r: usize, g: &[f64]| {
        if let Some(row) = series.get_mut(r) {
            row.iter_mut().zip(g).for_each(|(v, x)| v.push(*x));
        }
    };
    let (info, complete, score, per_draw, leave_one_out) = match s.method {
        _ if score_only => settled.score(theta)?,
        InformationMethod::Louis => settled.louis(theta, &mut record)?,
        InformationMethod::CoupledScore => settled.coupled(theta, &mut record)?,
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

/// What one of the estimators gives: (I, the complete-data information, the score, the score
/// per draw, I without each batch of draws).
type Estimates = (
    Vec<Vec<f64>>,
    Vec<Vec<f64>>,
    Vec<f64>,
    Vec<Vec<f64>>,
    Vec<Vec<Vec<f64>>>,
);

/// A row's score at one of its draws, for R̂: `(row, ∇θ log p)`.
type Record<'a> = dyn FnMut(usize, &[f64]) + 'a;

/// The chains on every point's posterior at θ, settled (at the posterior modes, δ and γ from
/// their curvature, burnt in): the state every run of the estimators starts from.
struct Settled<'a, M> {
    model: &'a M,
    s: &'a LouisSettings,
    problem: Preconditioned<MaximumLikelihood<'a, M>>,
    chains: ChainSet<f64>,
    kernel: Kernel<f64>,
    /// Points n, the latent's dimension d, chains per point, rows n · chains per point.
    n: usize,
    d: usize,
    per_point: usize,
    rows: usize,
    /// Batches of draws behind the jackknife.
    batches: usize,
    /// Each row's point.
    all_points: Vec<usize>,
}

impl<'a, M: LatentModel<f64>> Settled<'a, M> {
    /// Chains on `problem` at `theta` (`per_point` per point), settled.
    fn at(
        model: &'a M,
        mut problem: Preconditioned<MaximumLikelihood<'a, M>>,
        theta: &[f64],
        s: &'a LouisSettings,
        seed: u64,
        per_point: usize,
    ) -> Result<Self> {
        let (n, d) = (model.n_data(), model.latent_dim());
        let rows = n * per_point;
        let mut chains = ChainSet::new(rows, d, seed);
        chains.set_rows_per_block(rows_per_piece(rows, d, model.calls_are_costly()));
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
        Ok(Settled {
            model,
            s,
            problem,
            chains,
            kernel,
            n,
            d,
            per_point,
            rows,
            batches,
            all_points: (0..rows).map(|r| r % n).collect(),
        })
    }

    /// Σ over `points`' rows of ∇θ log p at `z` (one call of the model for all of them).
    fn grad_rows(&self, th: &[f64], points: &[usize], z: &[f64]) -> Result<Vec<f64>> {
        let mut g = vec![0.0; self.model.theta_dim()];
        self.model
            .add_grad_theta(th, points, z, &mut g)
            .map_err(SagdError::Model)?;
        Ok(g)
    }

    /// ∇θ log p of point `i` at `z`.
    fn grad(&self, th: &[f64], i: usize, z: &[f64]) -> Result<Vec<f64>> {
        self.grad_rows(th, &[i], z)
    }

    /// Draws `s.draws` states of every chain from the settled state at `at`, calling
    /// `take(batch, z)` on each (z of every chain, rows × d); what `take` returns per draw comes
    /// back.
    fn run(&self, at: &[f64], take: &mut TakeDraw<'_>) -> Result<Vec<Vec<f64>>> {
        let s = self.s;
        let mut chains = self.chains.clone();
        let target = AnchoredTarget {
            problem: &self.problem,
            anchor: at,
        };
        let mut per_draw = Vec::with_capacity(s.draws);
        if s.method == InformationMethod::CoupledScore {
            chains.burn_in(&target, &self.kernel, s.burn_in)?;
        }
        for draw in 0..s.draws {
            chains.burn_in(&target, &self.kernel, s.thin)?;
            let z = self.problem.to_z(0, chains.positions());
            per_draw.push(take(draw * self.batches / s.draws, &z)?);
        }
        Ok(per_draw)
    }

    /// The score alone, from one run at θ.
    fn score(&self, theta: &[f64]) -> Result<Estimates> {
        let p = self.model.theta_dim();
        let per_draw = self.run(theta, &mut |_, z_all| {
            let g = self.grad_rows(theta, &self.all_points, z_all)?;
            Ok(g.iter().map(|v| v / self.per_point as f64).collect())
        })?;
        let score = (0..p)
            .map(|k| per_draw.iter().map(|t| t[k]).sum::<f64>() / self.s.draws as f64)
            .collect();
        Ok((Vec::new(), Vec::new(), score, per_draw, Vec::new()))
    }

    /// Louis' identity from one run at θ: the complete-data information by central differences
    /// of ∇θ at each draw, less the posterior variance of each point's score.
    fn louis(&self, theta: &[f64], record: &mut Record<'_>) -> Result<Estimates> {
        let (p, s) = (self.model.theta_dim(), self.s);
        let mut sums = vec![LouisSums::new(self.n, p); self.batches];
        let per_draw = self.run(theta, &mut |b, z_all| {
            let sum = &mut sums[b];
            sum.count += self.per_point as f64;
            let mut total = vec![0.0; p];
            for r in 0..self.rows {
                let (i, z) = (r % self.n, &z_all[r * self.d..(r + 1) * self.d]);
                let g = self.grad(theta, i, z)?;
                record(r, &g);
                for j in 0..p {
                    total[j] += g[j] / self.per_point as f64;
                    sum.sg[i * p + j] += g[j];
                    for k in 0..p {
                        sum.sgg[(i * p + j) * p + k] += g[j] * g[k];
                    }
                    let h = s.fd_step * (1.0 + theta[j].abs());
                    let (mut tp, mut tm) = (theta.to_vec(), theta.to_vec());
                    tp[j] += h;
                    tm[j] -= h;
                    let (gp, gm) = (self.grad(&tp, i, z)?, self.grad(&tm, i, z)?);
                    for k in 0..p {
                        sum.sh[j * p + k] += (gp[k] - gm[k]) / (2.0 * h);
                    }
                }
            }
            Ok(total)
        })?;
        let mut all = LouisSums::new(self.n, p);
        sums.iter().for_each(|b| all.add(b, 1.0));
        let (info, complete, score) = all.assemble();
        let leave_one_out = if self.batches > 1 {
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
        Ok((info, complete, score, per_draw, leave_one_out))
    }

    /// The information by coupled score differences: runs at θ and at θ + h e_j for each j.
    fn coupled(&self, theta: &[f64], record: &mut Record<'_>) -> Result<Estimates> {
        let (p, s) = (self.model.theta_dim(), self.s);
        // One run at θ, then one at θ + h e_j for each j, all on the same noise from the
        // same settled state: ∂_j score_k is (score_k(θ + h e_j) − score_k(θ)) / h draw by
        // draw. One-sided differences carry an O(h) bias, about 1e-4 of the information at
        // h = 1e-4 (1 + |θ_j|), far below its Monte Carlo error; central ones would take 2p
        // runs where these take p + 1.
        let mut counts = vec![0.0; self.batches];
        let mut complete = vec![vec![0.0; p]; p];
        let mut complete_count = 0.0;
        let steps: Vec<f64> = theta.iter().map(|t| s.fd_step * (1.0 + t.abs())).collect();
        let mut draw = 0;
        let base = self.run(theta, &mut |b, z_all| {
            // Row by row only where R̂ needs each row's score (several chains per point);
            // else one call of the model for all self.rows.
            let g = if self.per_point > 1 {
                let mut g = vec![0.0; p];
                for r in 0..self.rows {
                    let gr = self.grad(theta, r % self.n, &z_all[r * self.d..(r + 1) * self.d])?;
                    record(r, &gr);
                    g.iter_mut().zip(&gr).for_each(|(a, v)| *a += v);
                }
                g
            } else {
                self.grad_rows(theta, &self.all_points, z_all)?
            };
            counts[b] += 1.0;
            if draw % COMPLETE_EVERY == 0 {
                for (j, h) in steps.iter().enumerate() {
                    let (mut up, mut down) = (theta.to_vec(), theta.to_vec());
                    up[j] += h;
                    down[j] -= h;
                    let gu = self.grad_rows(&up, &self.all_points, z_all)?;
                    let gd = self.grad_rows(&down, &self.all_points, z_all)?;
                    for k in 0..p {
                        complete[j][k] += (gu[k] - gd[k]) / (2.0 * h * self.per_point as f64);
                    }
                }
                complete_count += 1.0;
            }
            draw += 1;
            Ok(g.iter().map(|v| v / self.per_point as f64).collect())
        })?;
        // Per batch, Σ over its draws of each draw's ∂_j score_k: [j][k].
        let mut diff = vec![vec![vec![0.0; p]; p]; self.batches];
        for j in 0..p {
            let h = s.coupled_step * (1.0 + theta[j].abs());
            let mut at = theta.to_vec();
            at[j] += h;
            let mut draw = 0;
            self.run(&at, &mut |b, z_all| {
                let g: Vec<f64> = self
                    .grad_rows(&at, &self.all_points, z_all)?
                    .iter()
                    .map(|v| v / self.per_point as f64)
                    .collect();
                for k in 0..p {
                    diff[b][j][k] += (g[k] - base[draw][k]) / h;
                }
                draw += 1;
                Ok(g)
            })?;
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
        let leave_one_out = if self.batches > 1 {
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
            .map(|k| base.iter().map(|t| t[k]).sum::<f64>() / s.draws as f64)
            .collect();
        let complete = symmetric(&complete, complete_count);
        Ok((symmetric(&sum, m), complete, score, base, leave_one_out))
    }
}

/// 95% Wald intervals θ ± 1.96 se.
pub(super) fn wald95(theta: &[f64], se: &[f64]) -> Vec<[f64; 2]> {
    theta
        .iter()
        .zip(se)
        .map(|(t, s)| [t - 1.96 * s, t + 1.96 * s])
        .collect()
}
