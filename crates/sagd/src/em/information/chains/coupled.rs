//! The coupled score differences' estimator on the settled chains: a run at θ and one at
//! θ + h e_j for each j on the same noise (and at θ − h e_j where the information is precise
//! enough for central differences), each draw's ∂_j score_k from their scores, the jackknife
//! over batches of draws; the runs kept so that more draws take them on where they stopped.

use super::*;

/// The coupled runs take the complete-data term (two more model passes, central differences of
/// the gradient) at every this many draws: it only damps a step where the information is not
/// positive definite, so a quarter of the draws serve.
const COMPLETE_EVERY: usize = 4;

impl<'a, M: LatentModel<f64>> Settled<'a, M> {
    /// A draw's score, row by row: each row's (less its control) recorded for R̂, their sum
    /// returned.
    fn recorded_rows(
        &self,
        theta: &[f64],
        z_all: &[f64],
        fused: Option<&Fused>,
        control: Option<&[f64]>,
        record: &mut Record<'_>,
    ) -> Result<Vec<f64>> {
        let p = theta.len();
        let rows = self.rows_of(theta, z_all, fused)?;
        let mut g = vec![0.0; p];
        for (r, gr) in rows.iter().enumerate() {
            // R̂ reads what the estimate averages: the score less its control.
            match control {
                Some(c) => {
                    let own: Vec<f64> = gr
                        .iter()
                        .zip(&c[r * p..(r + 1) * p])
                        .map(|(v, s)| v - s)
                        .collect();
                    record(r, &own);
                }
                None => record(r, gr),
            }
            g.iter_mut().zip(gr).for_each(|(a, v)| *a += v);
        }
        Ok(g)
    }

    /// A draw's complete-data Hessian of log p in θ, by central differences of ∇θ at θ ± h_j
    /// e_j (per point: divided by the chains per point), unsymmetrised: [j][k].
    fn complete_hessian(
        &self,
        theta: &[f64],
        steps: &[f64],
        z_all: &[f64],
    ) -> Result<Vec<Vec<f64>>> {
        let p = theta.len();
        let pairs = self.each(p, |j| {
            let (mut up, mut down) = (theta.to_vec(), theta.to_vec());
            up[j] += steps[j];
            down[j] -= steps[j];
            let gu = self.grad_rows(&up, &self.all_points, z_all)?;
            Ok((gu, self.grad_rows(&down, &self.all_points, z_all)?))
        })?;
        Ok(pairs
            .iter()
            .zip(steps)
            .map(|((gu, gd), h)| {
                (0..p)
                    .map(|k| (gu[k] - gd[k]) / (2.0 * h * self.per_point as f64))
                    .collect()
            })
            .collect())
    }

    /// The runs at θ + `sign` h_j e_j, j = 0..p, with their `controls`, each brought to `to`
    /// draws (from where `runs` left it, else from its own copy of the settled state), each
    /// draw's score kept: reading no other run, side by side (the same bits as one after the
    /// other). Split over processes, each run's chain steps are shared among them: one at a
    /// time.
    fn moved_runs(
        &self,
        theta: &[f64],
        (sign, controls): (f64, &[Option<MovedControl>]),
        runs: Option<&[Run]>,
        to: usize,
    ) -> Result<Vec<Run>> {
        let moved_run = |j: usize| {
            let h = sign * self.coupled[j];
            let mut at = theta.to_vec();
            at[j] += h;
            let own = controls.get(j).and_then(Option::as_ref);
            let run = runs.and_then(|r| r.get(j));
            let done = run.map_or(0, |r| r.per_draw.len());
            let from = (run.and_then(|r| r.chains.as_ref()), done..to);
            let (more, chains) =
                self.run(&at, Some((j, h, own)), from, &mut |_, z, fused, c| {
                    self.draw_score(&at, z, fused, c)
                })?;
            let mut per_draw = run.map_or_else(Vec::new, |r| r.per_draw.clone());
            per_draw.extend(more);
            Ok(Run {
                chains: Some(chains),
                per_draw,
            })
        };
        let p = theta.len();
        if crate::share::current().is_some() {
            (0..p).map(moved_run).collect()
        } else {
            self.each(p, moved_run)
        }
    }

    /// Per batch, Σ over its draws of each draw's ∂_j score_k ([j][k]): the scores of `ahead[j]`
    /// (the run at θ + h_j e_j) less those of `behind[j]`, over `span[j]`.
    fn differences(
        &self,
        ahead: &[Run],
        behind: &[&[Vec<f64>]],
        span: &[f64],
    ) -> Vec<Vec<Vec<f64>>> {
        let p = ahead.len();
        let mut diff = vec![vec![vec![0.0; p]; p]; self.batches];
        for (j, (up, down)) in ahead.iter().zip(behind).enumerate() {
            let draws = up.per_draw.len();
            for (draw, (g, f)) in up.per_draw.iter().zip(down.iter()).enumerate() {
                let b = self.batch_of(draw, draws);
                for k in 0..p {
                    diff[b][j][k] += (g[k] - f[k]) / span[j];
                }
            }
        }
        diff
    }

    /// The information by coupled score differences: runs at θ and at θ + h e_j for each j, and
    /// the runs themselves, which [`Settled::continue_coupled`] takes on to more draws.
    pub(in crate::em::information) fn coupled(
        &self,
        theta: &[f64],
        record: &mut Record<'_>,
    ) -> Result<(Estimates, CoupledRuns)> {
        let p = theta.len();
        let mut runs = CoupledRuns {
            theta: theta.to_vec(),
            base: Run::default(),
            ahead: Vec::new(),
            behind: None,
            complete: vec![vec![0.0; p]; p],
            complete_count: 0.0,
        };
        let estimates = self.continue_coupled(&mut runs, self.s.draws, record)?;
        Ok((estimates, runs))
    }

    /// The coupled runs `runs` brought to `to` draws each, and the information from all their
    /// draws: the same as [`Settled::coupled`] with `to` draws from the start.
    pub(in crate::em::information) fn continue_coupled(
        &self,
        runs: &mut CoupledRuns,
        to: usize,
        record: &mut Record<'_>,
    ) -> Result<Estimates> {
        let s = self.s;
        let theta = &runs.theta.clone();
        let p = theta.len();
        // A run at θ and one at θ + h e_j for each j, all on the same noise from the same
        // settled state: ∂_j score_k is (score_k(θ + h e_j) − score_k(θ)) / h draw by draw.
        // These one-sided differences carry an O(h) bias, 4e-4 of a standard error at h = 1e-4
        // (1 + |θ_j|) on a latent AR(1) series (its noise sd), so 4e-5 at the default 1e-5,
        // which the Monte Carlo error of most informations hides. Where it does not
        // ([`CENTRAL_BELOW`]), runs at θ − h e_j make the differences central.
        let steps: Vec<f64> = (theta.iter().enumerate())
            .map(|(j, t)| s.fd_step * (self.model.theta_scale(j) + t.abs()))
            .collect();
        let coupled = &self.coupled;
        let ahead = (1.0, self.ahead_controls.as_slice());
        runs.ahead = self.moved_runs(theta, ahead, Some(&runs.ahead), to)?;
        let done = runs.base.per_draw.len();
        let (complete, complete_count) = (&mut runs.complete, &mut runs.complete_count);
        let from = (runs.base.chains.as_ref(), done..to);
        let (more, chains) = self.run(theta, None, from, &mut |draw, z_all, fused, control| {
            // Row by row only where R̂ needs each row's score (several chains per point); else
            // one call of the model for all rows. Where each row costs a call of its own (a
            // Python function: the step's fused gradient is the rows' sum), R̂ reads every
            // COMPLETE_EVERY-th draw.
            let costly = self.model.calls_are_costly() && fused.is_some();
            let g = if self.per_point > 1 && !(costly && draw % COMPLETE_EVERY != 0) {
                self.recorded_rows(theta, z_all, fused, control, record)?
            } else {
                self.total(theta, z_all, fused)?
            };
            if draw % COMPLETE_EVERY == 0 {
                let draw_complete = self.complete_hessian(theta, &steps, z_all)?;
                for (sum, row) in complete.iter_mut().zip(&draw_complete) {
                    sum.iter_mut().zip(row).for_each(|(a, v)| *a += v);
                }
                *complete_count += 1.0;
            }
            Ok(self.controlled(g, control))
        })?;
        runs.base.chains = Some(chains);
        runs.base.per_draw.extend(more);
        let base = &runs.base.per_draw;
        let mut counts = vec![0.0; self.batches];
        (0..to).for_each(|draw| counts[self.batch_of(draw, to)] += 1.0);
        let behind: Vec<&[Vec<f64>]> = vec![base; p];
        let diff = self.differences(&runs.ahead, &behind, coupled);
        let (mut information, mut leave_one_out) = jackknifed(&diff, &counts);
        if relative_error(&information, &leave_one_out) < CENTRAL_BELOW {
            // The runs behind θ (their own controls built only now: most informations never
            // need them), from where they were left when an earlier call made them.
            let back_controls = self.moved_controls(theta, -1.0)?;
            let earlier = runs.behind.as_deref();
            let back = self.moved_runs(theta, (-1.0, &back_controls), earlier, to)?;
            let behind: Vec<&[Vec<f64>]> = back.iter().map(|r| r.per_draw.as_slice()).collect();
            let span: Vec<f64> = coupled.iter().map(|h| 2.0 * h).collect();
            (information, leave_one_out) =
                jackknifed(&self.differences(&runs.ahead, &behind, &span), &counts);
            runs.behind = Some(back);
        }
        let score = mean_score(base, p);
        let complete = symmetric(&runs.complete, runs.complete_count);
        Ok((information, complete, score, base.clone(), leave_one_out))
    }
}

/// One of an information's runs after its draws so far: where its chains stopped (none before
/// its first draw), and each draw's score.
#[derive(Clone, Default)]
pub(in crate::em::information) struct Run {
    chains: Option<ChainSet<f64>>,
    per_draw: Vec<Vec<f64>>,
}

/// The coupled runs of an information at `theta` after their draws so far, which
/// [`Settled::continue_coupled`] takes on: the run at θ, those at θ + h e_j, those at θ − h e_j
/// where the differences were central, and the complete-data term's sums.
pub(in crate::em::information) struct CoupledRuns {
    theta: Vec<f64>,
    base: Run,
    ahead: Vec<Run>,
    behind: Option<Vec<Run>>,
    complete: Vec<Vec<f64>>,
    complete_count: f64,
}

/// The largest relative jackknife error of the information's diagonal below which the coupled
/// differences are made central: there the one-sided ones' bias (about 1e-4 of an entry at the
/// default step, in the worst case seen) would stand out of the noise. Most informations are
/// noisier (a crossed binary GLMM's: 1e-3 to 1e-2, 300 × 200 levels included) and keep their
/// p + 1 runs; where the score's control is exact (a linear Gaussian model: errors of 1e-8) the
/// p runs more cost little.
pub(in crate::em::information) const CENTRAL_BELOW: f64 = 2e-4;

/// The largest relative jackknife error of `information`'s diagonal, from its `leave_one_out`
/// replicates (∞ without them).
pub(in crate::em::information) fn relative_error(
    information: &[Vec<f64>],
    leave_one_out: &[Vec<Vec<f64>>],
) -> f64 {
    if leave_one_out.is_empty() {
        return f64::INFINITY;
    }
    let diagonals: Vec<Vec<f64>> = leave_one_out
        .iter()
        .map(|r| (0..r.len()).map(|j| r[j][j]).collect())
        .collect();
    jackknife_se(&diagonals)
        .iter()
        .enumerate()
        .map(|(j, e)| e / information[j][j].abs())
        .fold(0.0, f64::max)
}

/// −½(D + Dᵀ)/m: the information from `d`, a sum over m draws of ∂_j score_k.
fn symmetric(d: &[Vec<f64>], m: f64) -> Vec<Vec<f64>> {
    let p = d.len();
    (0..p)
        .map(|j| (0..p).map(|k| -0.5 * (d[j][k] + d[k][j]) / m).collect())
        .collect()
}

/// The information from each batch's sum of ∂_j score_k (`diff`, over `counts` draws), and the
/// jackknife's replicates with each batch left out (none for one batch).
fn jackknifed(diff: &[Vec<Vec<f64>>], counts: &[f64]) -> (Vec<Vec<f64>>, Vec<Vec<Vec<f64>>>) {
    let p = diff.first().map_or(0, Vec::len);
    let m: f64 = counts.iter().sum();
    let mut sum = vec![vec![0.0; p]; p];
    for batch in diff {
        for j in 0..p {
            for k in 0..p {
                sum[j][k] += batch[j][k];
            }
        }
    }
    let leave_one_out = if diff.len() > 1 {
        diff.iter()
            .zip(counts)
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
    (symmetric(&sum, m), leave_one_out)
}
