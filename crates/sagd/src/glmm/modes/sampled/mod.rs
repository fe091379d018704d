//! The conditional means of blocks too large to integrate (crossed factors join their levels in
//! one block): HMC on each point's posterior, in the coordinates where Laplace's approximation at
//! its mode is N(0, I), so that one step size serves every direction of a block of hundreds of
//! effects. Metropolis keeps the draws exact; their Monte Carlo error is reported beside them.

use rayon::prelude::*;
use serde::{Deserialize, Serialize};

use super::super::likelihood::Laplace;
use super::{effect, Estimate, Glmm};
use crate::diagnostics::{ess_mean, mean_sd, rhat};
use crate::error::{LogpError, Result, SagdError};
use crate::hmc::HmcSettings;
use crate::langevin::{ChainSet, Momentum};
use crate::model::LogDensity;
use crate::rng::{ChainRng, Seed};

/// Chains per point: enough for R-hat to see chains that have not met.
const CHAINS: usize = 4;

/// The leapfrog's path per proposal, εL, about its mean: a quarter period of N(0, I), where
/// the proposal from x is independent of x (a path of 1.2, where a Gaussian's successive draws
/// correlate by cos 1.2 = 0.36, gave 0.6 of the effective draws a gradient on crossed designs).
const PATH: f64 = std::f64::consts::FRAC_PI_2;

/// Each transition's path is drawn uniformly within this fraction of [`PATH`], so that no
/// direction whose posterior sd is not 1 comes back to where it started at every step (half a
/// period turns x into −x and leaves x² where it was).
const JITTER: f64 = 0.25;

/// The warm-up's transitions between adjustments of ε, and the acceptance it keeps ε within.
const ADAPT_EVERY: usize = 25;
const ACCEPT: (f64, f64) = (0.6, 0.9);

/// Each level's conditional means by sampling, with their Monte Carlo errors and the chains'
/// diagnostics ([`Glmm::conditional_means_sampled`]).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct SampledMeans {
    /// Per term, per level, per effect: E[b | y; θ] (its `value`) and the posterior sd (its
    /// `se`), as [`Glmm::conditional_means`] lays them out.
    pub effects: Vec<Vec<Vec<Estimate>>>,
    /// The Monte Carlo standard error of each mean (the posterior sd over √ESS), in the same
    /// layout.
    pub mcse: Vec<Vec<Vec<f64>>>,
    /// Draws per chain after the warm-up.
    pub draws: usize,
    /// Chains per point.
    pub chains: usize,
    /// The smallest effective sample size of any effect's mean (of `draws` × `chains`).
    pub min_ess: f64,
    /// The largest split R-hat of any effect (above 1.01: the chains have not mixed; treat the
    /// means as unconverged).
    pub max_rhat: f64,
    /// The proposals' mean acceptance after the warm-up, over the points.
    pub acceptance: f64,
}

impl SampledMeans {
    /// The fewest draws a chain [`Glmm::conditional_means_sampled`] takes: fewer leave R-hat and
    /// the ESS too noisy to judge the chains by.
    pub const MIN_DRAWS: usize = 20;
}

/// Point `c`'s log posterior in v, where u = m + L⁻ᵀ v (H = L Lᵀ the curvature at the mode m).
struct Whitened<'a> {
    glmm: &'a Glmm,
    theta: &'a [f64],
    factors: &'a [Vec<f64>],
    c: usize,
    lap: &'a Laplace,
}

impl Whitened<'_> {
    fn u_of(&self, v: &[f64]) -> Vec<f64> {
        let mut u = v.to_vec();
        self.lap.curvature.solve_upper(&mut u);
        u.iter_mut().zip(&self.lap.mode).for_each(|(u, m)| *u += m);
        u
    }
}

impl LogDensity<f64> for Whitened<'_> {
    fn dim(&self) -> usize {
        self.lap.mode.len()
    }

    fn logp_grad(
        &self,
        _first_row: usize,
        x: &[f64],
        logp: &mut [f64],
        grad: &mut [f64],
    ) -> std::result::Result<(), LogpError> {
        let dim = self.dim();
        for ((v, lp), g) in x.chunks(dim).zip(logp).zip(grad.chunks_mut(dim)) {
            let u = self.u_of(v);
            g.iter_mut().zip(&u).for_each(|(g, u)| *g = -u);
            *lp = self.glmm.point_chunks(
                self.theta,
                self.factors,
                self.c,
                &u,
                dim,
                |block, chunk| {
                    let dl = &chunk.d[..block.len()];
                    self.glmm.add_chunk_grad_u(self.factors, block, dl, g);
                },
            );
            // ∇v = (∂u/∂v)ᵀ ∇u = L⁻¹ ∇u.
            self.lap.curvature.solve_lower(g);
            // A state the family cannot evaluate is refused by its chain's Metropolis test
            // alone (an error would refuse every chain of the block).
            if g.iter().any(|x| !x.is_finite()) {
                *lp = f64::NAN;
            }
        }
        Ok(())
    }
}

/// One point's draws of its levels' effects b = L_t u: per effect (in the order of `levels` and
/// their q effects), per chain, the series after the warm-up; and the acceptance.
struct PointDraws {
    series: Vec<Vec<Vec<f64>>>,
    acceptance: f64,
}

impl Glmm {
    /// Each random effect's conditional mean E[b | y; θ] and sd by Hamiltonian Monte Carlo, for
    /// designs of any size, crossed factors included, where [`Glmm::conditional_means`]
    /// integrates only blocks of at most three effects. Each point's posterior is sampled by 4
    /// chains in the coordinates where Laplace's approximation at its mode is N(0, I), started
    /// from draws of that approximation; the warm-up (`draws` / 4 + 100 transitions) tunes the
    /// leapfrog step to an acceptance between 0.6 and 0.9, then `draws` transitions a chain are
    /// kept, each along a path drawn within ±25% of a quarter period of N(0, I). The Metropolis
    /// test makes the draws exact; each mean's Monte Carlo error, the smallest ESS and the
    /// largest R-hat come with them. `seed` fixes every draw, whatever the number of threads.
    pub fn conditional_means_sampled(
        &self,
        theta: &[f64],
        draws: usize,
        seed: u64,
    ) -> Result<SampledMeans> {
        self.check_theta(theta)?;
        if draws < SampledMeans::MIN_DRAWS {
            return Err(SagdError::InvalidSetting {
                name: "draws",
                value: draws.to_string(),
                fix: format!(
                    "keep at least {} draws a chain (500 give means to about 3% of an sd)",
                    SampledMeans::MIN_DRAWS
                ),
            });
        }
        let factors = self.factors(theta);
        let seed = Seed::new(seed).stream("conditional means");
        let at_point = self.levels_at_points();
        // Each point's effects summed up where its chains ran, so that its draws go with it.
        let per_point = at_point
            .par_iter()
            .enumerate()
            .filter(|(_, levels)| !levels.is_empty())
            .map(|(c, levels)| {
                let d =
                    self.point_draws(theta, &factors, c, levels, draws, seed.index(c as u64))?;
                let summed: Vec<_> = d.series.iter().map(|chains| summarise(chains)).collect();
                Ok((levels, summed, d.acceptance))
            })
            .collect::<Result<Vec<_>>>()?;
        let (mut effects, mut mcse) = (self.by_level(), self.by_level());
        let (mut min_ess, mut max_rhat, mut acceptance) = (f64::INFINITY, 1.0f64, 0.0);
        for (levels, summed, accepted) in &per_point {
            acceptance += accepted / per_point.len() as f64;
            let mut summed = summed.iter();
            for &(t, level, _) in levels.iter() {
                for _ in 0..self.terms[t].q {
                    let e = summed.next().expect("one summary per effect");
                    min_ess = min_ess.min(e.ess);
                    max_rhat = max_rhat.max(e.rhat);
                    effects[t][level].push(e.estimate);
                    mcse[t][level].push(e.estimate.se / e.ess.sqrt());
                }
            }
        }
        Ok(SampledMeans {
            effects,
            mcse,
            draws,
            chains: CHAINS,
            min_ess,
            max_rhat,
            acceptance,
        })
    }

    /// Point `c`'s chains: warm-up, then `draws` transitions, each recording its levels' b.
    /// Each chain runs a stretch of transitions in one task of its own (its stream and state
    /// are its own), so the chains meet only where the warm-up adjusts ε, not at every
    /// transition: the same draws as stepping them together.
    fn point_draws(
        &self,
        theta: &[f64],
        factors: &[Vec<f64>],
        c: usize,
        levels: &[(usize, usize, usize)],
        draws: usize,
        seed: Seed,
    ) -> Result<PointDraws> {
        let lap = self.laplace(theta, factors, c, None)?;
        let dim = lap.mode.len();
        let target = Whitened {
            glmm: self,
            theta,
            factors,
            c,
            lap: &lap,
        };
        let mut chains = ChainSet::<f64>::new(CHAINS, dim, seed.stream("chains").get());
        let mut starts = vec![0.0; CHAINS * dim];
        seed.stream("starts").normals().fill(&mut starts);
        chains.init(&target, &starts, Momentum::Normal)?;
        let mut each = (0..CHAINS)
            .map(|r| chains.gather(&[r]))
            .collect::<Result<Vec<_>>>()?;
        // ε ∝ d^(-1/4) keeps the leapfrog's energy error, and so the acceptance, level as d grows.
        let mut step = (1.2 / (dim as f64).powf(0.25)).min(1.2);
        // The chains start from draws of Laplace's approximation, close to the posterior: the
        // warm-up is for the step.
        let warm_up = draws / 4 + 100;
        let mut paths = Paths(ChainRng::new(seed.stream("paths").get(), 0));
        let mut done = 0;
        while done < warm_up {
            let n = ADAPT_EVERY.min(warm_up - done);
            let kernels = paths.kernels(step, n)?;
            let (accepted, _) = stretch(&mut each, &target, &kernels, (|| (), |_, _| ()))?;
            done += n;
            let rate = accepted / n as f64;
            if rate < ACCEPT.0 {
                step *= 0.7;
            } else if rate > ACCEPT.1 {
                step *= 1.2;
            }
        }
        let kernels = paths.kernels(step, draws)?;
        let effects: usize = levels.iter().map(|&(t, _, _)| self.terms[t].q).sum();
        // Per chain, per effect (in the order of `levels` and their q effects), its series.
        let record = |x: &[f64], series: &mut Vec<Vec<f64>>| {
            let u = target.u_of(x);
            let values = levels.iter().flat_map(|&(t, _, offset)| {
                let (q, u) = (self.terms[t].q, &u[offset..offset + self.terms[t].q]);
                (0..q).map(move |a| effect(&factors[t], q, u, a))
            });
            series.iter_mut().zip(values).for_each(|(s, b)| s.push(b));
        };
        let start = || vec![Vec::with_capacity(draws); effects];
        let (accepted, per_chain) = stretch(&mut each, &target, &kernels, (start, record))?;
        // Each chain's series moved into their places, effect by effect.
        let mut per_chain: Vec<_> = per_chain.into_iter().map(Vec::into_iter).collect();
        let series = (0..effects)
            .map(|_| {
                let chains = per_chain.iter_mut();
                chains
                    .map(|s| s.next().expect("a series per effect"))
                    .collect()
            })
            .collect();
        Ok(PointDraws {
            series,
            acceptance: accepted / draws as f64,
        })
    }
}

/// Every chain of `each` (a chain a set) through the transitions `kernels`, a chain a task,
/// `record` seeing its position after each transition in a value of its own, made by `start`.
/// Returns the acceptance summed over the transitions, each transition's the mean over the
/// chains taken in their order (as a set of all of them reports it), and each chain's value.
fn stretch<R: Send>(
    each: &mut [ChainSet<f64>],
    target: &Whitened<'_>,
    kernels: &[crate::langevin::Kernel<f64>],
    (start, record): (impl Fn() -> R + Sync, impl Fn(&[f64], &mut R) + Sync),
) -> Result<(f64, Vec<R>)> {
    let runs = each
        .par_iter_mut()
        .map(|chain| {
            let mut value = start();
            let mut accepted = Vec::with_capacity(kernels.len());
            for kernel in kernels {
                accepted.push(chain.step(target, kernel)?.acceptance.unwrap_or(0.0));
                record(chain.position(0), &mut value);
            }
            Ok((accepted, value))
        })
        .collect::<Result<Vec<_>>>()?;
    let chains = runs.len().max(1) as f64;
    let accepted = (0..kernels.len())
        .map(|s| runs.iter().fold(0.0, |total, (a, _)| total + a[s]) / chains)
        .fold(0.0, |total, a| total + a);
    Ok((accepted, runs.into_iter().map(|(_, v)| v).collect()))
}

/// One effect's draws summed up: its mean and sd, and the chains' ESS and R-hat.
struct Summed {
    estimate: Estimate,
    ess: f64,
    rhat: f64,
}

/// The summary of one effect's draws, a series per chain.
fn summarise(chains: &[Vec<f64>]) -> Summed {
    let all: Vec<f64> = chains.iter().flatten().copied().collect();
    let (value, se) = mean_sd(&all);
    Summed {
        estimate: Estimate { value, se },
        ess: ess_mean(chains),
        rhat: rhat(chains),
    }
}

/// The transitions' paths: one draw a transition, shared by a point's chains, from a stream of
/// its own so that the bits do not depend on the threads.
struct Paths(ChainRng);

impl Paths {
    /// HMC with step ε along each of the next `n` paths, [`PATH`] within ±[`JITTER`].
    fn kernels(&mut self, step: f64, n: usize) -> Result<Vec<crate::langevin::Kernel<f64>>> {
        (0..n)
            .map(|_| {
                let path = PATH * (1.0 + JITTER * (2.0 * self.0.uniform() - 1.0));
                HmcSettings {
                    step_size: step,
                    n_leapfrog: (path / step).ceil().max(1.0) as usize,
                }
                .kernel()
            })
            .collect()
    }
}

#[cfg(test)]
mod tests;
