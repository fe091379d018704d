//! Models written once: log p(x_i, z; θ) generic over a number type, with ∇z and ∇θ derived by
//! forward-mode dual numbers (`num-dual`). Each derivative is one evaluation of the model on
//! [`Dual64`] numbers, so a row costs about (dim z + dim θ) evaluations: cheap for the per-datum
//! latents of automated EM, where both are small. (Reverse mode pays a tape per evaluation, which
//! only repays itself when dim θ is in the hundreds; see docs/guide.md for the measured cost.)

use num_dual::{Dual64, DualNum, DualSVec64, DualVec};
use statrs::function::gamma::{digamma, ln_gamma};

use super::LatentModel;
use crate::error::LogpError;

/// The numbers a [`LogJoint`] is written over: `f64` (values) and [`Dual64`] (values with one
/// directional derivative). Arithmetic with `f64` constants, `exp`, `ln`, `powi`, `sqrt`, `ln_1p`,
/// the trigonometric and hyperbolic functions come from [`DualNum`]; the special functions
/// statistics needs are added here.
pub trait Scalar: DualNum<Primitive = f64> + Copy + Send + Sync {
    /// ln Γ(x).
    fn ln_gamma(self) -> Self;
    /// The value, without derivatives.
    fn value(self) -> f64;
    /// The constant `c` as this number type, for a constant on the left of an operator:
    /// `S::constant(1.0) - a * a`. (`1.0 - a * a` cannot compile: Rust's orphan rule forbids
    /// implementing `f64 - S` for every `S`; on the right, `a * a - 1.0` works as written.)
    fn constant(c: f64) -> Self {
        Self::from(c)
    }
}

impl Scalar for f64 {
    fn ln_gamma(self) -> Self {
        ln_gamma(self)
    }
    fn value(self) -> f64 {
        self
    }
}

impl Scalar for Dual64 {
    fn ln_gamma(self) -> Self {
        Dual64::new(ln_gamma(self.re), digamma(self.re) * self.eps)
    }
    fn value(self) -> f64 {
        self.re
    }
}

impl<const N: usize> Scalar for DualSVec64<N> {
    fn ln_gamma(self) -> Self {
        DualVec::new(ln_gamma(self.re), self.eps * digamma(self.re))
    }
    fn value(self) -> f64 {
        self.re
    }
}

/// A latent-variable model given by its complete-data log density alone. Wrap it in [`Derived`]
/// to use it wherever a [`LatentModel`] goes (automated EM, the solver, standard errors).
pub trait LogJoint: Sync {
    /// The number of data points.
    fn n_data(&self) -> usize;
    /// The dimension of one data point's latent z_i.
    fn latent_dim(&self) -> usize;
    /// The number of parameters.
    fn theta_dim(&self) -> usize;
    /// log p(x_i, z; θ) for data point `i`.
    fn log_joint<S: Scalar>(&self, theta: &[S], i: usize, z: &[S]) -> S;
}

/// A [`LogJoint`] as a [`LatentModel`], its gradients derived by dual numbers.
#[derive(Clone, Debug, PartialEq)]
pub struct Derived<M>(pub M);

/// Directions per evaluation when a gradient has at least this many coordinates: four
/// derivatives carried by one evaluation cost 2.5 times less than four evaluations with one
/// (measured at 10 to 1000 coordinates; eight or sixteen carry more bookkeeping than they save).
const LANES: usize = 4;

/// The gradient of `f` at `v` into `out`, [`LANES`] directions per evaluation of `f`; the value
/// comes back. The derivatives are the same numbers as one direction at a time gives.
fn gradient_lanes(
    v: &[f64],
    f: impl Fn(&[DualSVec64<LANES>]) -> DualSVec64<LANES>,
    out: &mut [f64],
) -> Result<f64, LogpError> {
    let mut x: Vec<DualSVec64<LANES>> = v.iter().map(|&a| DualSVec64::from_re(a)).collect();
    let mut value = 0.0;
    for c in (0..v.len()).step_by(LANES) {
        let end = (c + LANES).min(v.len());
        for (k, j) in (c..end).enumerate() {
            x[j] = DualSVec64::from_re(v[j]).derivative(k);
        }
        let y = f(&x);
        value = finite(y.re)?;
        for (k, j) in (c..end).enumerate() {
            out[j] = finite(y.eps.0.as_ref().map_or(0.0, |e| e[k]))?;
            x[j] = DualSVec64::from_re(v[j]);
        }
    }
    Ok(value)
}

/// `v` as dual numbers with no derivative, except coordinate `seed`'s (if any), which is 1.
fn seeded(v: &[f64], seed: Option<usize>, out: &mut Vec<Dual64>) {
    out.clear();
    out.extend(
        v.iter()
            .enumerate()
            .map(|(k, &x)| Dual64::new(x, if Some(k) == seed { 1.0 } else { 0.0 })),
    );
}

fn finite(v: f64) -> Result<f64, LogpError> {
    if v.is_finite() {
        Ok(v)
    } else {
        Err(LogpError::NonFinite)
    }
}

impl<M: LogJoint> LatentModel<f64> for Derived<M> {
    fn n_data(&self) -> usize {
        self.0.n_data()
    }
    fn latent_dim(&self) -> usize {
        self.0.latent_dim()
    }
    fn theta_dim(&self) -> usize {
        self.0.theta_dim()
    }
    fn log_joint(
        &self,
        theta: &[f64],
        data: &[usize],
        z: &[f64],
        logp: &mut [f64],
        grad_z: &mut [f64],
    ) -> Result<(), LogpError> {
        let d = self.0.latent_dim();
        let (mut th, mut zd) = (Vec::new(), Vec::new());
        seeded(theta, None, &mut th);
        if d >= LANES {
            let th: Vec<DualSVec64<LANES>> =
                theta.iter().map(|&a| DualSVec64::from_re(a)).collect();
            for (r, &i) in data.iter().enumerate() {
                let (zr, gr) = (&z[r * d..(r + 1) * d], &mut grad_z[r * d..(r + 1) * d]);
                logp[r] = gradient_lanes(zr, |zd| self.0.log_joint(&th, i, zd), gr)?;
            }
            return Ok(());
        }
        for (r, &i) in data.iter().enumerate() {
            let zr = &z[r * d..(r + 1) * d];
            if d == 0 {
                logp[r] = finite(self.0.log_joint(theta, i, zr))?;
            }
            for j in 0..d {
                seeded(zr, Some(j), &mut zd);
                let v = self.0.log_joint(&th, i, &zd);
                if j == 0 {
                    logp[r] = finite(v.re)?;
                }
                grad_z[r * d + j] = finite(v.eps)?;
            }
        }
        Ok(())
    }
    fn add_grad_theta(
        &self,
        theta: &[f64],
        data: &[usize],
        z: &[f64],
        grad_theta: &mut [f64],
    ) -> Result<(), LogpError> {
        let d = self.0.latent_dim();
        let (mut th, mut zd) = (Vec::new(), Vec::new());
        for (r, &i) in data.iter().enumerate() {
            seeded(&z[r * d..(r + 1) * d], None, &mut zd);
            for (k, g) in grad_theta.iter_mut().enumerate() {
                seeded(theta, Some(k), &mut th);
                *g += finite(self.0.log_joint(&th, i, &zd).eps)?;
            }
        }
        Ok(())
    }
}
