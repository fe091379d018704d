//! The random effects given the data: each level's effects at the mode of p(b | y; θ) with
//! their conditional sds from the curvature there (lme4's `ranef` with `condVar`), or their
//! exact conditional means and sds by adaptive quadrature.

use rayon::prelude::*;

use super::exact::{NodeScratch, ProductRule, MAX_QUADRATURE_DIM};
use super::likelihood::Laplace;
use super::summary::sd_of_variance;
use super::{Estimate, Family, Glmm};
use crate::error::{Result, SagdError};

mod fitted;
mod sampled;
pub use fitted::FittedValues;
pub use sampled::SampledMeans;

/// Nodes per dimension of the conditional means' rule by the points' dimension (1, 2, 3): more
/// than the fits' (25, 15, 9), since the moments of a skewed posterior converge more slowly
/// than its integral, and they are taken once per fit. One effect: 100 (a level of 60 successes
/// in 60 rows under τ = 3.6 leaves 2.4e-6 of an sd with 40 nodes, 5.4e-10 with 100); two: 30
/// (the same level with a slope: 6.3e-5 with 20 nodes, 2.9e-6 with 30; ordinary posteriors
/// 1e-11); three: 16 (9 nodes leave 5e-6 of an sd on the tests' posteriors, 16 leave 1e-7;
/// 16³ nodes a point cost a tenth of a 3-effect fit's time).
const MEAN_NODES: [usize; MAX_QUADRATURE_DIM] = [100, 30, 16];

/// A point's posterior of u, as far as the levels' effects need it: a centre and Cov(u).
struct Moments {
    centre: Vec<f64>,
    spread: Spread,
}

/// Cov(u) of a point's latent.
enum Spread {
    /// Laplace's H⁻¹ = L⁻ᵀ L⁻¹ (H = L Lᵀ): entry (a, b) is w_a · w_b, w_j = L⁻¹ e_j.
    Columns(Vec<Vec<f64>>),
    /// Dense, row-major, `dim` × `dim`.
    Dense(Vec<f64>, usize),
}

impl Spread {
    fn at(&self, a: usize, b: usize) -> f64 {
        match self {
            Spread::Columns(w) => w[a].iter().zip(&w[b]).map(|(x, y)| x * y).sum(),
            Spread::Dense(cov, dim) => cov[a * dim + b],
        }
    }
}

impl Glmm {
    /// Each random effect given the data at θ, as lme4's `ranef(fit, condVar = TRUE)` gives
    /// it: per term, per level of its factor (in the order of the term's group indices), per
    /// effect, the conditional mode of b = L u (its `value`) and the sd from the curvature of
    /// log p(b | y; θ) there (its `se`). For the Gaussian family the posterior is Gaussian, so
    /// these are its exact mean and sd; for the others, Laplace's approximation at the mode
    /// ([`Glmm::conditional_means`] for the exact moments).
    pub fn random_effects(&self, theta: &[f64]) -> Result<Vec<Vec<Vec<Estimate>>>> {
        self.given_data(theta, |factors, c| {
            let lap = self.laplace(theta, factors, c, None)?;
            Ok(laplace_moments(lap))
        })
    }

    /// Each random effect's exact conditional mean E[b | y; θ] (its `value`) and sd (its `se`),
    /// in [`Glmm::random_effects`]' layout: the posterior's moments where lme4 gives its mode
    /// and Laplace's curvature. For the Gaussian family they are the same; for the others they
    /// come from adaptive Gauss-Hermite product quadrature at each point's mode (100, 30 or 16
    /// nodes per dimension for 1, 2 or 3 effects per point: within 1e-9, 1e-9 and 1e-7 of each
    /// sd on skewed posteriors checked against fine grids; 3e-6 at a level of all successes
    /// under a wide prior with 2 effects), so a model must have at most
    /// [`MAX_QUADRATURE_DIM`] effects per point (no crossed factors).
    pub fn conditional_means(&self, theta: &[f64]) -> Result<Vec<Vec<Vec<Estimate>>>> {
        if self.family == Family::Gaussian {
            return self.random_effects(theta);
        }
        let d = self.latent_dim;
        if d > MAX_QUADRATURE_DIM {
            return Err(SagdError::InvalidSetting {
                name: "model",
                value: format!("{d} random effects in one block of the data"),
                fix: format!(
                    "the conditional means are integrated for at most {MAX_QUADRATURE_DIM} \
                     effects per block (crossed factors join their levels in one block); the \
                     conditional modes (random_effects) cover any design"
                ),
            });
        }
        // Each point by the rule of its own dimension.
        let rule = ProductRule::with_nodes(&MEAN_NODES[..d]);
        self.given_data(theta, |factors, c| {
            let lap = self.laplace(theta, factors, c, None)?;
            self.quadrature_moments(theta, factors, c, &lap, &rule)
        })
    }

    /// The posterior's moments of point `c`'s latent by `rule` at its mode and curvature `lap`.
    /// (Placing the rule again at the moments it found, Naylor and Smith's iteration, left
    /// larger errors on the skewed posteriors of the tests: where the likelihood falls steeply
    /// on one side, as the successes' of a level of all successes, the mode's scale fits best.)
    fn quadrature_moments(
        &self,
        theta: &[f64],
        factors: &[Vec<f64>],
        c: usize,
        lap: &Laplace,
        rule: &ProductRule,
    ) -> Result<Moments> {
        let dim = self.points[c].dim;
        let mut scratch = NodeScratch::default();
        self.posterior_at_nodes(theta, factors, (c, lap, rule), &mut scratch)?;
        let (us, w) = (&scratch.u, &scratch.shares);
        let mut centre = vec![0.0; dim];
        for (u, wj) in us.chunks(dim).zip(w) {
            centre.iter_mut().zip(u).for_each(|(m, u)| *m += wj * u);
        }
        let mut cov = vec![0.0; dim * dim];
        for (u, wj) in us.chunks(dim).zip(w) {
            for a in 0..dim {
                for b in 0..dim {
                    cov[a * dim + b] += wj * (u[a] - centre[a]) * (u[b] - centre[b]);
                }
            }
        }
        Ok(Moments {
            centre,
            spread: Spread::Dense(cov, dim),
        })
    }

    /// Every term's levels' effects b = L u and their sds from each point's `moments` of u.
    fn given_data(
        &self,
        theta: &[f64],
        moments: impl Fn(&[Vec<f64>], usize) -> Result<Moments> + Sync,
    ) -> Result<Vec<Vec<Vec<Estimate>>>> {
        self.check_theta(theta)?;
        let factors = self.factors(theta);
        let per_point = self
            .levels_at_points()
            .par_iter()
            .enumerate()
            .filter(|(_, levels)| !levels.is_empty())
            .map(|(c, levels)| {
                let m = moments(&factors, c)?;
                let found: Vec<_> = levels
                    .iter()
                    .map(|&(t, level, offset)| {
                        let q = self.terms[t].q;
                        let u = &m.centre[offset..offset + q];
                        let cov_u = |a: usize, b: usize| m.spread.at(offset + a, offset + b);
                        (t, level, effects(&factors[t], q, u, cov_u))
                    })
                    .collect();
                Ok(found)
            })
            .collect::<Result<Vec<_>>>()?;
        let mut out = self.by_level();
        for (t, level, e) in per_point.into_iter().flatten() {
            out[t][level] = e;
        }
        Ok(out)
    }

    /// The levels of each point, as (term, level, offset in the point's latent).
    fn levels_at_points(&self) -> Vec<Vec<(usize, usize, usize)>> {
        let mut at_point = vec![Vec::new(); self.points.len()];
        for (t, term) in self.terms.iter().enumerate() {
            for (level, &(c, offset)) in term.levels.iter().enumerate() {
                at_point[c].push((t, level, offset));
            }
        }
        at_point
    }

    /// An empty list per level of each term, to be filled with its effects' values.
    fn by_level<T: Clone>(&self) -> Vec<Vec<Vec<T>>> {
        self.terms
            .iter()
            .map(|term| vec![Vec::new(); term.levels.len()])
            .collect()
    }
}

/// Laplace's moments of a point's latent: its mode and H⁻¹ by the columns L⁻¹ e_j.
fn laplace_moments(lap: Laplace) -> Moments {
    let dim = lap.mode.len();
    let columns = (0..dim)
        .map(|j| {
            let mut e = vec![0.0; dim];
            e[j] = 1.0;
            lap.curvature.solve_lower(&mut e);
            e
        })
        .collect();
    Moments {
        centre: lap.mode,
        spread: Spread::Columns(columns),
    }
}

/// b = L u and the sds of Cov(b) = L Cov(u) Lᵀ, for one level's q effects (L lower-triangular,
/// q × q row-major).
fn effects(l: &[f64], q: usize, u: &[f64], cov_u: impl Fn(usize, usize) -> f64) -> Vec<Estimate> {
    (0..q)
        .map(|a| {
            let value = effect(l, q, u, a);
            let var: f64 = (0..=a)
                .flat_map(|b| (0..=a).map(move |c| (b, c)))
                .map(|(b, c)| l[a * q + b] * cov_u(b, c) * l[a * q + c])
                .sum();
            Estimate {
                value,
                se: sd_of_variance(var),
            }
        })
        .collect()
}

/// Effect `a` of b = L u for one level's q effects.
fn effect(l: &[f64], q: usize, u: &[f64], a: usize) -> f64 {
    (0..=a).map(|b| l[a * q + b] * u[b]).sum()
}

#[cfg(test)]
mod tests;
