//! The observed information's parts and what follows from them: the estimators' sums over
//! batches of draws (run by [`super::chains`]), the jackknife's errors, the chains' R̂, the
//! score's Monte Carlo covariance, and the Newton step and gap of an [`Information`].

use super::chains::{CoupledRuns, Estimates, Settled};
use super::{Information, InformationMethod, LouisSettings};
use crate::error::{Result, SagdError};
use crate::linalg::spd_inverse;
use crate::metric::Preconditioned;
use crate::model::{LatentModel, MaximumLikelihood};

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
/// (`series[row][parameter]`, row r belonging to point r % n); `None` without rows. A parameter
/// whose chains' means all lie within [`NEGLIGIBLE_SPREAD`] of √I_kk (`info`'s diagonal, where
/// there is one) counts as agreeing: where the score's control variate leaves it nearly
/// constant, R̂ would compare the rounding of its differences.
fn chain_rhat(series: &[Vec<Vec<f64>>], n: usize, info: &[Vec<f64>]) -> Option<f64> {
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
            let means: Vec<f64> = chains
                .iter()
                .map(|c| c.iter().sum::<f64>() / c.len().max(1) as f64)
                .collect();
            let spread = means.iter().fold(f64::NEG_INFINITY, |a, &b| a.max(b))
                - means.iter().fold(f64::INFINITY, |a, &b| a.min(b));
            let scale = info.get(k).map_or(0.0, |row| row[k].max(0.0).sqrt());
            if spread <= NEGLIGIBLE_SPREAD * scale {
                worst = Some(worst.map_or(1.0, |w: f64| w.max(1.0)));
                continue;
            }
            let r = crate::diagnostics::rhat(&chains);
            if r.is_finite() {
                worst = Some(worst.map_or(r, |w: f64| w.max(r)));
            }
        }
    }
    worst
}

/// How far apart a point's chains' mean scores may lie, in units of √I_kk, and still agree
/// whatever their R̂: a disagreement that moves θ_k by a thousandth of its standard error.
const NEGLIGIBLE_SPREAD: f64 = 1e-3;

/// Above this R̂ a point's chains disagree about its score: [`polish`](super::polish) says so.
#[doc(hidden)]
pub const CHAIN_RHAT_LIMIT: f64 = 1.05;

/// √diag(I⁻¹), `None` when I is not positive definite.
fn standard_errors(info: &[Vec<f64>]) -> Option<Vec<f64>> {
    let inv = spd_inverse(info)?;
    Some((0..info.len()).map(|j| inv[j][j].sqrt()).collect())
}

/// The jackknife's standard error of a statistic from its leave-one-batch-out replicates.
pub(super) fn jackknife_se(replicates: &[Vec<f64>]) -> Vec<f64> {
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

    /// Whether a point's chains disagree about its score: R̂ above [`CHAIN_RHAT_LIMIT`].
    pub(super) fn chains_disagree(&self) -> bool {
        self.chain_rhat.is_some_and(|r| r > CHAIN_RHAT_LIMIT)
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

pub(super) fn dot(a: &[f64], b: &[f64]) -> f64 {
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
            leave_one_out,
        };
        information.set_step(&inv);
        Ok(information)
    }
}

/// Sums over draws behind Louis' identity: per point Σ g and Σ g gᵀ of the score g of its chains'
/// states, and Σ H of the complete-data Hessian over all rows.
#[derive(Clone)]
pub(super) struct LouisSums {
    pub(super) p: usize,
    /// Samples per point (draws × chains per point).
    pub(super) count: f64,
    pub(super) sg: Vec<f64>,
    pub(super) sgg: Vec<f64>,
    pub(super) sh: Vec<f64>,
}

impl LouisSums {
    pub(super) fn new(n: usize, p: usize) -> Self {
        LouisSums {
            p,
            count: 0.0,
            sg: vec![0.0; n * p],
            sgg: vec![0.0; n * p * p],
            sh: vec![0.0; p * p],
        }
    }

    /// `self` + `sign`·`other`.
    pub(super) fn add(&mut self, other: &LouisSums, sign: f64) {
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
    pub(super) fn assemble(&self) -> (Vec<Vec<f64>>, Vec<Vec<f64>>, Vec<f64>) {
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

/// Batches of draws behind [`Information::se_error`] (the jackknife's).
pub(super) const SE_BATCHES: usize = 10;

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
    let (settled, mut series) = settle(model, theta, s, seed)?;
    let estimates = {
        let mut record = recorder(&mut series);
        match s.method {
            _ if score_only => settled.score(theta)?,
            InformationMethod::Louis => settled.louis(theta, &mut record)?,
            InformationMethod::CoupledScore => settled.coupled(theta, &mut record)?.0,
        }
    };
    Ok(assemble(estimates, &series, model.n_data(), s.draws))
}

/// The chains of an information at `theta` settled, and, where points have several chains, an
/// empty series of each row's score along its draws (for R̂).
fn settle<'a, M: LatentModel<f64>>(
    model: &'a M,
    theta: &[f64],
    s: &LouisSettings,
    seed: u64,
) -> Result<(Settled<'a, M>, Series)> {
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
    let rows = settled.rows;
    let series = vec![vec![Vec::with_capacity(s.draws); p]; if per_point > 1 { rows } else { 0 }];
    Ok((settled, series))
}

/// Each row's score along its draws, per parameter (for R̂; empty with one chain per point).
type Series = Vec<Vec<Vec<f64>>>;

/// What records each row's score into `series`.
fn recorder(series: &mut Series) -> impl FnMut(usize, &[f64]) + '_ {
    |r: usize, g: &[f64]| {
        if let Some(row) = series.get_mut(r) {
            row.iter_mut().zip(g).for_each(|(v, x)| v.push(*x));
        }
    }
}

/// Louis' parts from an estimator's `estimates` of `draws` draws, R̂ from `series` over `n`
/// points.
fn assemble(estimates: Estimates, series: &Series, n: usize, draws: usize) -> LouisParts {
    let (info, complete, score, per_draw, leave_one_out) = estimates;
    let chain_rhat = chain_rhat(series, n, &info);
    LouisParts {
        info,
        complete,
        score,
        score_cov: batch_mean_cov(&per_draw, SCORE_BATCHES.min(draws)),
        draws,
        leave_one_out,
        chain_rhat,
    }
}

/// An information's draws kept for more ([`continued_parts`]): where it was estimated, and, for
/// coupled score differences, the settled chains, the runs where they stopped and R̂'s series.
pub(super) struct Continued<'a, M> {
    model: &'a M,
    theta: Vec<f64>,
    s: LouisSettings,
    seed: u64,
    /// The draws behind the last parts.
    drawn: usize,
    kept: Option<(Settled<'a, M>, CoupledRuns, Series)>,
}

impl<M: LatentModel<f64>> Continued<'_, M> {
    /// Louis' parts from `to` draws (no fewer than those already drawn): the same as
    /// [`louis_parts`] with `to` draws and the same seed. Coupled runs are taken on from where
    /// they stopped, for the cost of the draws added; the other estimators run again from the
    /// start.
    pub(super) fn extend(&mut self, to: usize) -> Result<LouisParts> {
        let to = to.max(self.drawn);
        self.drawn = to;
        let Some((settled, runs, series)) = &mut self.kept else {
            let s = LouisSettings {
                draws: to,
                ..self.s
            };
            return louis_parts(self.model, &self.theta, &s, self.seed);
        };
        let estimates = {
            let mut record = recorder(series);
            settled.continue_coupled(runs, to, &mut record)?
        };
        Ok(assemble(estimates, series, self.model.n_data(), to))
    }

    /// The draws behind the last parts.
    pub(super) fn drawn(&self) -> usize {
        self.drawn
    }
}

/// [`louis_parts`], with what takes them on to more draws ([`Continued::extend`]).
pub(super) fn continued_parts<'a, M: LatentModel<f64>>(
    model: &'a M,
    theta: &[f64],
    s: &LouisSettings,
    seed: u64,
) -> Result<(LouisParts, Continued<'a, M>)> {
    let mut continued = Continued {
        model,
        theta: theta.to_vec(),
        s: *s,
        seed,
        drawn: s.draws,
        kept: None,
    };
    if s.method != InformationMethod::CoupledScore {
        return Ok((louis_parts(model, theta, s, seed)?, continued));
    }
    let (settled, mut series) = settle(model, theta, s, seed)?;
    let (estimates, runs) = {
        let mut record = recorder(&mut series);
        settled.coupled(theta, &mut record)?
    };
    let parts = assemble(estimates, &series, model.n_data(), s.draws);
    continued.kept = Some((settled, runs, series));
    Ok((parts, continued))
}

/// 95% Wald intervals θ ± 1.96 se.
pub(super) fn wald95(theta: &[f64], se: &[f64]) -> Vec<[f64; 2]> {
    theta
        .iter()
        .zip(se)
        .map(|(t, s)| [t - 1.96 * s, t + 1.96 * s])
        .collect()
}
