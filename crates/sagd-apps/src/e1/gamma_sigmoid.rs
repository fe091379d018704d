//! The paper's EM example: X | Z ~ Gamma(shape 10·σ(a + bZ), rate 1), Z ~ N(0, 1), θ = (a, b).

use rand::SeedableRng;
use rand_distr::{Distribution, Gamma, StandardNormal};
use rand_xoshiro::Xoshiro256PlusPlus;
use statrs::function::gamma::{digamma, ln_gamma};

use sagd::error::{LogpError, Result, SagdError};
use sagd::model::LatentModel;
use sagd::rng::stream_seed;

/// The largest rounding of the log-likelihood, in nats, that data may cause (see
/// [`GammaSigmoid::new`]).
const MAX_ROUNDING: f64 = 1e-3;

/// The largest Gamma shape the model gives: 10 times a sigmoid.
const SHAPE_BOUND: f64 = 10.0;

const HALF_LN_2PI: f64 = 0.918_938_533_204_672_8;

/// The Gamma-sigmoid model over observed positive x_1..x_n.
#[derive(Clone, Debug, PartialEq)]
pub struct GammaSigmoid {
    x: Vec<f64>,
    log_x: Vec<f64>,
}

fn sigmoid(u: f64) -> f64 {
    1.0 / (1.0 + (-u).exp())
}

impl GammaSigmoid {
    /// The model for observations `x` (finite and > 0).
    pub fn new(x: Vec<f64>) -> Result<Self> {
        if x.is_empty() {
            return Err(SagdError::InvalidSetting {
                name: "data",
                value: "no observations".into(),
                fix: "give at least one positive observation".into(),
            });
        }
        if let Some((i, v)) = x
            .iter()
            .enumerate()
            .find(|(_, v)| !(v.is_finite() && **v > 0.0))
        {
            return Err(SagdError::InvalidSetting {
                name: "data",
                value: format!("observation {} = {v}", i + 1),
                fix: "the Gamma model needs finite observations > 0".into(),
            });
        }
        // A subnormal value has lost most of its bits (5e-324 has one): its logarithm, which ℓ
        // weighs by the Gamma shape, is then an artefact of the format, and the fits run off.
        if let Some((i, v)) = x.iter().enumerate().find(|(_, v)| **v < f64::MIN_POSITIVE) {
            return Err(SagdError::InvalidSetting {
                name: "data",
                value: format!("observation {} = {v:e}", i + 1),
                fix: "values below 2.2e-308 are subnormal and have lost their precision; the model (rate 1) expects values of order 1 to 100: rescale the data".into(),
            });
        }
        // ℓ(θ) carries −Σx, which does not depend on θ: rounded in f64 it moves by about
        // Σx·2⁻⁵³ between any two θ. Beyond a thousandth of a nat, likelihood comparisons (the
        // MLE, the gap to it, the stopping rule) mean nothing: refuse, naming the largest value.
        let rounding = x.iter().sum::<f64>() * f64::EPSILON / 2.0;
        if rounding.is_nan() || rounding >= MAX_ROUNDING {
            let (i, v) = x
                .iter()
                .enumerate()
                .fold((0, 0.0), |b, (i, v)| if *v > b.1 { (i, *v) } else { b });
            return Err(SagdError::InvalidSetting {
                name: "data",
                value: format!("observation {} = {v:e}", i + 1),
                fix: format!(
                    "values this large round the log-likelihood by about {rounding:.1e} nats, which swamps its dependence on θ; the model (rate 1) expects values of order 1 to 100: rescale the data"
                ),
            });
        }
        let log_x = x.iter().map(|v| v.ln()).collect();
        Ok(GammaSigmoid { x, log_x })
    }

    /// Simulates n observations at θ = (a, b) from `seed`: returns the model and the latent z.
    pub fn simulate(n: usize, a: f64, b: f64, seed: u64) -> Result<(Self, Vec<f64>)> {
        let mut rng = Xoshiro256PlusPlus::seed_from_u64(stream_seed(seed, u64::MAX));
        let z: Vec<f64> = (0..n).map(|_| StandardNormal.sample(&mut rng)).collect();
        let x = z
            .iter()
            .map(|zi| {
                let s = SHAPE_BOUND * sigmoid(a + b * zi);
                Gamma::new(s, 1.0)
                    .map(|g| g.sample(&mut rng).max(f64::MIN_POSITIVE))
                    .map_err(|e| SagdError::InvalidSetting {
                        name: "true parameters",
                        value: format!("({a}, {b})"),
                        fix: e.to_string(),
                    })
            })
            .collect::<Result<Vec<f64>>>()?;
        Ok((GammaSigmoid::new(x)?, z))
    }

    /// The observations.
    pub fn data(&self) -> &[f64] {
        &self.x
    }

    /// ℓ's limit as a → +∞ (any b): every shape 10·σ(a + bZ) at its bound 10, so each x_i is a
    /// Gamma(10, 1) draw. No other way out of ℓ's domain (a → −∞, |b| → ∞) leads higher, so ℓ has
    /// a maximum at a finite θ exactly when it rises above this somewhere.
    pub fn loglik_at_shape_bound(&self) -> f64 {
        let c = ln_gamma(SHAPE_BOUND);
        self.x
            .iter()
            .zip(&self.log_x)
            .map(|(x, lx)| (SHAPE_BOUND - 1.0) * lx - c - x)
            .sum()
    }

    /// log p(x_i, z; θ) with all constants, and (∂z, ∂a, ∂b) of it.
    #[inline]
    fn eval(&self, theta: &[f64], i: usize, z: f64) -> (f64, f64, f64) {
        let (a, b) = (theta[0], theta[1]);
        let sg = sigmoid(a + b * z);
        let s = SHAPE_BOUND * sg;
        let lp = -0.5 * z * z - HALF_LN_2PI + (s - 1.0) * self.log_x[i] - ln_gamma(s) - self.x[i];
        // ∂/∂u of (s − 1) log x − ln Γ(s), u = a + bz.
        let du = (self.log_x[i] - digamma(s)) * s * (1.0 - sg);
        (lp, -z + b * du, du)
    }
}

/// The same density written once for derived gradients ([`sagd::model::Derived`]): the
/// reference against which the hand-written gradients above are tested and timed.
impl sagd::model::LogJoint for GammaSigmoid {
    fn n_data(&self) -> usize {
        self.x.len()
    }
    fn latent_dim(&self) -> usize {
        1
    }
    fn theta_dim(&self) -> usize {
        2
    }
    fn log_joint<S: sagd::model::Scalar>(&self, theta: &[S], i: usize, z: &[S]) -> S {
        let (a, b, z) = (theta[0], theta[1], z[0]);
        // s = 10 σ(a + b z); log Gamma(x; s, 1) + log N(z; 0, 1).
        let s = (((a + b * z) * -1.0).exp() + 1.0).recip() * SHAPE_BOUND;
        (s - 1.0) * self.log_x[i] - s.ln_gamma() - self.x[i] - z * z * 0.5 - HALF_LN_2PI
    }
}

impl LatentModel<f64> for GammaSigmoid {
    fn n_data(&self) -> usize {
        self.x.len()
    }
    fn latent_dim(&self) -> usize {
        1
    }
    fn theta_dim(&self) -> usize {
        2
    }
    fn log_joint(
        &self,
        theta: &[f64],
        data: &[usize],
        z: &[f64],
        logp: &mut [f64],
        grad_z: &mut [f64],
    ) -> Result<(), LogpError> {
        for (r, &i) in data.iter().enumerate() {
            let (lp, gz, _) = self.eval(theta, i, z[r]);
            logp[r] = lp;
            grad_z[r] = gz;
        }
        Ok(())
    }
    fn add_grad_theta(
        &self,
        theta: &[f64],
        data: &[usize],
        z: &[f64],
        g: &mut [f64],
    ) -> Result<(), LogpError> {
        for (r, &i) in data.iter().enumerate() {
            let (_, _, du) = self.eval(theta, i, z[r]);
            g[0] += du;
            g[1] += du * z[r];
        }
        Ok(())
    }
    fn add_weighted_grad_theta(
        &self,
        theta: &[f64],
        data: &[usize],
        z: &[f64],
        w: &[f64],
        g: &mut [f64],
    ) -> Result<(), LogpError> {
        for (r, &i) in data.iter().enumerate() {
            let (_, _, du) = self.eval(theta, i, z[r]);
            g[0] += w[r] * du;
            g[1] += w[r] * du * z[r];
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gradients_match_central_differences() {
        let (m, _) = GammaSigmoid::simulate(20, 2.0, 0.5, 3).unwrap();
        let h = 1e-6;
        for (i, z) in [(0usize, -1.3), (5, 0.2), (19, 2.5)] {
            for theta in [[2.0, 0.5], [-0.7, 1.4], [0.0, -2.0]] {
                let (_, gz, _) = m.eval(&theta, i, z);
                let num_z = (m.eval(&theta, i, z + h).0 - m.eval(&theta, i, z - h).0) / (2.0 * h);
                assert!(
                    (gz - num_z).abs() < 1e-6 * (1.0 + gz.abs()),
                    "dz {gz} vs {num_z}"
                );
                let mut g = [0.0; 2];
                m.add_grad_theta(&theta, &[i], &[z], &mut g).unwrap();
                for k in 0..2 {
                    let (mut tp, mut tm) = (theta, theta);
                    tp[k] += h;
                    tm[k] -= h;
                    let num = (m.eval(&tp, i, z).0 - m.eval(&tm, i, z).0) / (2.0 * h);
                    assert!(
                        (g[k] - num).abs() < 1e-6 * (1.0 + num.abs()),
                        "d theta[{k}] {} vs {num}",
                        g[k]
                    );
                }
            }
        }
    }

    #[test]
    fn log_joint_is_a_normalised_density_in_x() {
        // ∫ p(x | z; θ) dx = 1 for fixed z: check the constants by a trapezoid rule in x.
        let theta = [0.3, 0.8];
        let z = 0.4;
        let xs: Vec<f64> = (1..600_000).map(|k| k as f64 * 1e-4).collect();
        let m = GammaSigmoid::new(xs.clone()).unwrap();
        let total: f64 = (0..xs.len())
            .map(|i| {
                let (lp, _, _) = m.eval(&theta, i, z);
                (lp + 0.5 * z * z + HALF_LN_2PI).exp() * 1e-4
            })
            .sum();
        assert!((total - 1.0).abs() < 1e-6, "{total}");
    }

    #[test]
    fn bad_observations_are_rejected() {
        assert!(GammaSigmoid::new(vec![]).is_err());
        let e = GammaSigmoid::new(vec![1.0, 0.0]).unwrap_err().to_string();
        assert!(e.contains("observation 2 = 0"), "{e}");
        assert!(GammaSigmoid::new(vec![f64::NAN]).is_err());
        // The 5e-324 data ran, and the run blamed its learning rate.
        let e = GammaSigmoid::new(vec![1.0, 5e-324])
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("observation 2") && e.contains("subnormal"),
            "{e}"
        );
        assert!(GammaSigmoid::new(vec![1.0, 1e-300]).is_ok());
    }
}
