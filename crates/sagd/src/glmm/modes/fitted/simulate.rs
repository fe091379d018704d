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
        let simulator = self.simulator(theta, seed, conditional)?;
        (0..draws)
            .into_par_iter()
            .map(|d| simulator.draw(d))
            .collect()
    }

    /// What every draw of [`Glmm::simulate`] at θ reads, so that a draw can be made on its own
    /// (the bootstrap makes each where it refits it, not all of them first).
    pub(in crate::glmm) fn simulator<'a>(
        &'a self,
        theta: &'a [f64],
        seed: u64,
        conditional: bool,
    ) -> Result<Simulator<'a>> {
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
        Ok(Simulator {
            model: self,
            beta: &theta[..self.p],
            factors,
            modes,
            sigma: self.scale(theta).1.exp(),
            stream: Seed::new(seed).stream("simulate"),
        })
    }
}

/// The model at θ, ready to draw responses from: β, the effects' factors, the levels' modes
/// where they are held there, σ, and the stream whose d-th member draw d takes.
pub(in crate::glmm) struct Simulator<'a> {
    model: &'a Glmm,
    beta: &'a [f64],
    factors: Vec<Vec<f64>>,
    modes: Option<Vec<Vec<f64>>>,
    sigma: f64,
    stream: Seed,
}

impl Simulator<'_> {
    /// Draw `d`: one response per row, in the order the rows were given.
    pub(in crate::glmm) fn draw(&self, d: usize) -> Result<Vec<f64>> {
        let m = self.model;
        let draw = self.stream.index(d as u64);
        let (mut normals, mut rng) = (draw.stream("effects").normals(), draw.rng());
        let mut noise = draw.stream("noise").normals();
        let (mut y, mut drawn, mut eta) = (vec![0.0; m.n_obs()], Vec::new(), Vec::new());
        for (c, point) in m.points.iter().enumerate() {
            let u = match &self.modes {
                Some(modes) => &modes[c],
                None => {
                    drawn.resize(point.dim, 0.0);
                    normals.fill(&mut drawn);
                    &drawn
                }
            };
            eta.resize(point.rows.len(), 0.0);
            m.etas_by_rows(self.beta, &self.factors, point.rows.clone(), u, &mut eta);
            for (k, &eta) in point.rows.clone().zip(&eta) {
                let i = m.given_row(k);
                y[i] = match m.family {
                    Family::Gaussian => {
                        let sd = self.sigma / m.trials[k].sqrt();
                        eta + m.response_shift_at(i) + sd * noise.draw()
                    }
                    Family::Poisson => count(eta.exp(), &mut rng, i)?,
                    Family::Binomial => {
                        let p = 1.0 / (1.0 + (-eta).exp());
                        let law =
                            Binomial::new(m.trials[k] as u64, p).map_err(|_| not_drawable(i, p))?;
                        law.sample(&mut rng) as f64
                    }
                };
            }
        }
        Ok(y)
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
