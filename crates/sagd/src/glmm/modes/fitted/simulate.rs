//! New responses from the model at θ: lme4's `simulate(fit, nsim, seed, use.u)`, the draws a
//! parametric bootstrap or a check of the model's fit is made of.

use rand_distr::{Binomial, Distribution, Poisson};
use rayon::prelude::*;

use crate::error::{invalid, Result};
use crate::glmm::{Family, Glmm};
use crate::rng::Seed;

impl Glmm {
    /// `draws` response vectors drawn from the model at θ, each one value per row in the order
    /// the rows were given (lme4's `simulate(fit, nsim = draws)`): every level's effects drawn
    /// afresh from N(0, Σ_t) (`use.u = FALSE`, lme4's default), or, with `conditional`, held at
    /// their conditional modes ([`Glmm::random_effects`]; `use.u = TRUE`); then each response
    /// from its family at η (offset included): Gaussian with sd σ, Poisson counts, binomial
    /// successes out of the row's trials. Draw d takes its randomness from its own stream of
    /// `seed`, so the draws are the same on any number of threads.
    pub fn simulate(
        &self,
        theta: &[f64],
        draws: usize,
        seed: u64,
        conditional: bool,
    ) -> Result<Vec<Vec<f64>>> {
        self.check_theta(theta)?;
        let factors = self.factors(theta);
        let modes: Option<Vec<Vec<f64>>> = match conditional {
            true => Some(
                (0..self.points.len())
                    .into_par_iter()
                    .map(|c| Ok(self.laplace(theta, &factors, c, None)?.mode))
                    .collect::<Result<_>>()?,
            ),
            false => None,
        };
        let sigma = self.scale(theta).1.exp();
        let beta = &theta[..self.p];
        let stream = Seed::new(seed).stream("simulate");
        (0..draws)
            .into_par_iter()
            .map(|d| {
                let draw = stream.index(d as u64);
                let (mut normals, mut rng) = (draw.stream("effects").normals(), draw.rng());
                let mut noise = draw.stream("noise").normals();
                let (mut y, mut drawn, mut eta) = (vec![0.0; self.n_obs()], Vec::new(), Vec::new());
                for (c, point) in self.points.iter().enumerate() {
                    let u = match &modes {
                        Some(m) => &m[c],
                        None => {
                            drawn.resize(point.dim, 0.0);
                            normals.fill(&mut drawn);
                            &drawn
                        }
                    };
                    eta.resize(point.rows.len(), 0.0);
                    self.etas_by_rows(beta, &factors, point.rows.clone(), u, &mut eta);
                    for (k, &eta) in point.rows.clone().zip(&eta) {
                        let i = self.given_row(k);
                        y[i] = match self.family {
                            Family::Gaussian => {
                                let shift = self.response_shift.get(i).copied().unwrap_or(0.0);
                                eta + shift + sigma * noise.draw()
                            }
                            Family::Poisson => count(eta.exp(), &mut rng, i)?,
                            Family::Binomial => {
                                let p = 1.0 / (1.0 + (-eta).exp());
                                let law = Binomial::new(self.trials[k] as u64, p)
                                    .map_err(|_| not_drawable(i, p))?;
                                law.sample(&mut rng) as f64
                            }
                        };
                    }
                }
                Ok(y)
            })
            .collect()
    }
}

/// A Poisson count of mean `rate` (0 at a rate of 0).
fn count(rate: f64, rng: &mut impl rand::Rng, row: usize) -> Result<f64> {
    if rate == 0.0 {
        return Ok(0.0);
    }
    let law = Poisson::new(rate).map_err(|_| not_drawable(row, rate))?;
    Ok(law.sample(rng))
}

/// The error for a row whose mean cannot be drawn from (a rate that overflowed).
fn not_drawable(row: usize, mean: f64) -> crate::error::SagdError {
    invalid(
        "theta",
        format!("a mean of {mean} at row {}", row + 1),
        "simulate at a θ whose means are finite (an estimate of this model)",
    )
}
