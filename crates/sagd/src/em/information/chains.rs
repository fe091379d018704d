//! The chains behind the observed information, settled once at θ ([`Settled::at`]: at the
//! posterior modes, δ and γ from their curvature, burnt in), and the runs each estimator draws
//! from that state: the score alone, Louis' identity from one run, or coupled score differences
//! from p + 1 runs at θ and θ + h e_j on the same noise (2p + 1 with θ − h e_j, where the
//! information is precise enough to need central differences; their estimator in
//! [`coupled`]).

use super::control::{MovedControl, ScoreControl};
use super::parts::{jackknife_se, LouisSums, SE_BATCHES};
use super::{InformationMethod, LouisSettings};
use crate::em::mstep::{settle_chains, ChainStep};
use crate::error::{Result, SagdError};
use crate::langevin::{ChainSet, Kernel, LangevinSettings, Momentum};
use crate::metric::Preconditioned;
use crate::model::{AnchoredTarget, LatentModel, MaximumLikelihood, Problem};
use crate::parallel::rows_per_piece;
use rayon::prelude::*;
use std::ops::Range;

mod coupled;
pub(super) use coupled::CoupledRuns;
#[cfg(test)]
pub(super) use coupled::{relative_error, CENTRAL_BELOW};

/// What a run of the information's chains does with each draw: `(batch, z, fused, control)` in (z
/// of every chain, rows × d; the blocks' Σ ∇θ log p where the step computed them, [`Fused`]; each
/// row's control variate of its score, rows × p, [`ScoreControl`], where there is one), the
/// draw's score out (Σ over rows / chains per point).
type TakeDraw<'a> =
    dyn FnMut(usize, &[f64], Option<&Fused>, Option<&[f64]>) -> Result<Vec<f64>> + 'a;

/// The θ-gradients that a model computing ∇θ in the same pass as ∇z gave with a draw's last
/// step: each block of chains' first row and its Σ ∇θ log p, in block order.
type Fused = Vec<(usize, Vec<f64>)>;

/// What one of the estimators gives: (I, the complete-data information, the score, the score
/// per draw, I without each batch of draws).
pub(super) type Estimates = (
    Vec<Vec<f64>>,
    Vec<Vec<f64>>,
    Vec<f64>,
    Vec<Vec<f64>>,
    Vec<Vec<Vec<f64>>>,
);

/// A row's score at one of its draws, for R̂: `(row, ∇θ log p)`.
pub(super) type Record<'a> = dyn FnMut(usize, &[f64]) + 'a;

/// The chains on every point's posterior at θ, settled (at the posterior modes, δ and γ from
/// their curvature, burnt in): the state every run of the estimators starts from.
pub(super) struct Settled<'a, M> {
    model: &'a M,
    s: LouisSettings,
    problem: Preconditioned<MaximumLikelihood<'a, M>>,
    chains: ChainSet<f64>,
    kernel: Kernel<f64>,
    /// Points n, the latent's dimension d, chains per point, rows n · chains per point.
    n: usize,
    d: usize,
    per_point: usize,
    pub(super) rows: usize,
    /// Batches of draws behind the jackknife.
    batches: usize,
    /// Each row's point.
    all_points: Vec<usize>,
    /// The score's control variate at θ, where the metric allows one.
    control: Option<ScoreControl>,
    /// The coupled runs' steps h_j in θ, which the control carries the settled states by.
    coupled: Vec<f64>,
    /// Each run at θ + h e_j's own control ([`ScoreControl::carried`]).
    ahead_controls: Vec<Option<MovedControl>>,
}

impl<'a, M: LatentModel<f64>> Settled<'a, M> {
    /// Chains on `problem` at `theta` (`per_point` per point), settled.
    pub(super) fn at(
        model: &'a M,
        mut problem: Preconditioned<MaximumLikelihood<'a, M>>,
        theta: &[f64],
        s: &LouisSettings,
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
        let coupled: Vec<f64> = theta
            .iter()
            .enumerate()
            .map(|(j, t)| s.coupled_step * (model.theta_scale(j) + t.abs()))
            .collect();
        let control = match problem.metric() {
            Some(metric) => ScoreControl::at(&problem.inner, metric, theta, &coupled)?,
            None => None,
        };
        let batches = if s.draws >= 2 * SE_BATCHES {
            SE_BATCHES
        } else {
            1
        };
        let mut settled = Settled {
            model,
            s: *s,
            problem,
            chains,
            kernel,
            n,
            d,
            per_point,
            rows,
            batches,
            all_points: (0..rows).map(|r| r % n).collect(),
            control,
            coupled,
            ahead_controls: Vec::new(),
        };
        if s.method == InformationMethod::CoupledScore {
            settled.ahead_controls = settled.moved_controls(theta, 1.0)?;
        }
        Ok(settled)
    }

    /// The own controls ([`ScoreControl::carried`]) of the runs at θ + `sign` h_j e_j, j = 0..p
    /// (none without a control at θ).
    fn moved_controls(&self, theta: &[f64], sign: f64) -> Result<Vec<Option<MovedControl>>> {
        match (&self.control, self.problem.metric()) {
            (Some(control), Some(metric)) => (0..theta.len())
                .map(|j| {
                    let h = sign * self.coupled[j];
                    control.carried(&self.problem.inner, metric, theta, &self.coupled, (j, h))
                })
                .collect(),
            _ => Ok(Vec::new()),
        }
    }

    /// Σ over `points`' rows of ∇θ log p at `z` (one call of the model for all of them).
    fn grad_rows(&self, th: &[f64], points: &[usize], z: &[f64]) -> Result<Vec<f64>> {
        let mut g = vec![0.0; self.model.theta_dim()];
        self.model
            .add_grad_theta(th, points, z, &mut g)
            .map_err(SagdError::Model)?;
        Ok(g)
    }

    /// `f(k)` for k in 0..len, in order: in parallel, unless the model's calls are costly (a
    /// Python function, whose calls take its lock one at a time). Each call's result is its
    /// own, so the same bits either way.
    fn each<T: Send>(
        &self,
        len: usize,
        f: impl Fn(usize) -> Result<T> + Sync + Send,
    ) -> Result<Vec<T>> {
        if self.model.calls_are_costly() {
            (0..len).map(f).collect()
        } else {
            (0..len).into_par_iter().map(&f).collect()
        }
    }

    /// ∇θ log p of point `i` at `z`.
    fn grad(&self, th: &[f64], i: usize, z: &[f64]) -> Result<Vec<f64>> {
        self.grad_rows(th, &[i], z)
    }

    /// Draws `draws` (indices into the run's draws) of every chain at `at`, continuing from
    /// `from` where given, else from the settled state, calling `take(draw, z, fused, control)`
    /// on each (z of every chain, rows × d); what `take` returns per draw comes back, with the
    /// chains where the run stopped (more draws continue from them: the same draws as one
    /// longer run). `moved`: `(j, h, own)` for a run at θ + h e_j, whose chains start
    /// from the settled states carried to its posterior ([`ScoreControl::transported`]) where
    /// there is a control, else after a burn-in like every coupled run's; its draws take `own`,
    /// its posterior's control, where there is one.
    fn run(
        &self,
        at: &[f64],
        moved: Option<(usize, f64, Option<&MovedControl>)>,
        (from, draws): (Option<&ChainSet<f64>>, Range<usize>),
        take: &mut TakeDraw<'_>,
    ) -> Result<(Vec<Vec<f64>>, ChainSet<f64>)> {
        let s = self.s;
        let target = AnchoredTarget {
            problem: &self.problem,
            anchor: at,
        };
        let mut per_draw = Vec::with_capacity(draws.len());
        let mut chains = match from {
            Some(chains) => chains.clone(),
            None => self.started(&target, moved)?,
        };
        // Where the model computes ∇θ in the same pass as ∇z, a draw's last step gives its
        // θ-gradients: no pass of their own (for a Python function, no call).
        let fuses = self.problem.fuses_grad_f() && self.kernel.ends_at_gradient();
        for draw in draws {
            let fused = if fuses {
                chains.burn_in(&target, &self.kernel, s.thin - 1)?;
                let (_, mut last) = chains.run_steps(&target, &self.kernel, 1, true, |b| {
                    // f = −log p, so the step's Σ ∇θ f is −Σ ∇θ log p.
                    let aux = b.aux.map(|a| a.iter().map(|v| -v).collect::<Vec<f64>>());
                    (b.first_row, aux)
                })?;
                last.pop()
                    .unwrap_or_default()
                    .into_iter()
                    .map(|(row, g)| g.map(|g| (row, g)))
                    .collect::<Option<Fused>>()
            } else {
                chains.burn_in(&target, &self.kernel, s.thin)?;
                None
            };
            let z = self.problem.to_z(0, chains.positions());
            // A moved run's draws take its own posterior's control where there is one.
            let control = match (&self.control, self.problem.metric()) {
                (Some(c), Some(metric)) => Some(match moved.and_then(|(_, _, own)| own) {
                    Some(own) => own.rows(metric, &z, chains.gradients()),
                    None => c.rows(metric, &z, chains.gradients()),
                }),
                _ => None,
            };
            per_draw.push(take(draw, &z, fused.as_ref(), control.as_deref())?);
        }
        Ok((per_draw, chains))
    }

    /// The settled chains as a run on `target` starts from them: a run at θ + h e_j (`moved`)
    /// from the settled states carried to its own posterior where there is a control (so that
    /// neither run needs a burn-in of its own), else every coupled run after a burn-in.
    fn started(
        &self,
        target: &AnchoredTarget<'_, f64, Preconditioned<MaximumLikelihood<'a, M>>>,
        moved: Option<(usize, f64, Option<&MovedControl>)>,
    ) -> Result<ChainSet<f64>> {
        let s = self.s;
        let mut chains = self.chains.clone();
        match (&self.control, self.problem.metric()) {
            (Some(c), Some(metric)) if s.method == InformationMethod::CoupledScore => {
                if let Some((j, h, _)) = moved {
                    let u = c.transported(metric, j, h, chains.positions());
                    chains.set_positions(target, &u)?;
                }
            }
            _ if s.method == InformationMethod::CoupledScore => {
                chains.burn_in(target, &self.kernel, s.burn_in)?;
            }
            _ => {}
        }
        Ok(chains)
    }

    /// The jackknife's batch of draw `draw` of a run of `draws`.
    fn batch_of(&self, draw: usize, draws: usize) -> usize {
        draw * self.batches / draws
    }

    /// The draw's score: Σ over every row of ∇θ log p at `th` for a draw `z_all`, less the rows'
    /// `control` (rows × p) where there is one, over the chains per point.
    fn draw_score(
        &self,
        th: &[f64],
        z_all: &[f64],
        fused: Option<&Fused>,
        control: Option<&[f64]>,
    ) -> Result<Vec<f64>> {
        let g = self.total(th, z_all, fused)?;
        Ok(self.controlled(g, control))
    }

    /// A draw's Σ over rows of ∇θ log p, less the rows' `control` (rows × p), over the chains per
    /// point.
    fn controlled(&self, mut g: Vec<f64>, control: Option<&[f64]>) -> Vec<f64> {
        if let Some(c) = control {
            for row in c.chunks_exact(g.len().max(1)) {
                g.iter_mut().zip(row).for_each(|(v, s)| *v -= s);
            }
        }
        g.iter().map(|v| v / self.per_point as f64).collect()
    }

    /// Σ over every row of ∇θ log p at `th` for a draw `z_all`: from the step's fused gradients
    /// where it has them, else one call of the model for all rows.
    fn total(&self, th: &[f64], z_all: &[f64], fused: Option<&Fused>) -> Result<Vec<f64>> {
        match fused {
            Some(blocks) => {
                let mut g = vec![0.0; self.model.theta_dim()];
                for (_, b) in blocks {
                    g.iter_mut().zip(b).for_each(|(a, v)| *a += v);
                }
                Ok(g)
            }
            None => self.grad_rows(th, &self.all_points, z_all),
        }
    }

    /// Each row's ∇θ log p at `th` for a draw `z_all`: from the step's fused gradients where
    /// each block is one row, else a call of the model per row.
    fn rows_of(&self, th: &[f64], z_all: &[f64], fused: Option<&Fused>) -> Result<Vec<Vec<f64>>> {
        match fused {
            Some(blocks) if blocks.len() == self.rows => {
                Ok(blocks.iter().map(|(_, g)| g.clone()).collect())
            }
            _ => {
                let d = self.d;
                self.each(self.rows, |r| {
                    self.grad(th, r % self.n, &z_all[r * d..(r + 1) * d])
                })
            }
        }
    }

    /// The score alone, from one run at θ.
    pub(super) fn score(&self, theta: &[f64]) -> Result<Estimates> {
        let p = self.model.theta_dim();
        let all = (None, 0..self.s.draws);
        let (per_draw, _) = self.run(theta, None, all, &mut |_, z_all, fused, control| {
            self.draw_score(theta, z_all, fused, control)
        })?;
        let score = mean_score(&per_draw, p);
        Ok((Vec::new(), Vec::new(), score, per_draw, Vec::new()))
    }

    /// Louis' identity from one run at θ: the complete-data information by central differences
    /// of ∇θ at each draw, less the posterior variance of each point's score.
    pub(super) fn louis(&self, theta: &[f64], record: &mut Record<'_>) -> Result<Estimates> {
        let (p, s) = (self.model.theta_dim(), self.s);
        let mut sums = vec![LouisSums::new(self.n, p); self.batches];
        let all = (None, 0..s.draws);
        let (per_draw, _) = self.run(theta, None, all, &mut |draw, z_all, _, _| {
            let sum = &mut sums[self.batch_of(draw, s.draws)];
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
                    let h = s.fd_step * (self.model.theta_scale(j) + theta[j].abs());
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
}

/// The mean over draws of each draw's score (`per_draw`, draws × p).
fn mean_score(per_draw: &[Vec<f64>], p: usize) -> Vec<f64> {
    (0..p)
        .map(|k| per_draw.iter().map(|t| t[k]).sum::<f64>() / per_draw.len().max(1) as f64)
        .collect()
}
