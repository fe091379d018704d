//! Models written once: log p(x_i, z; θ) generic over a number type, with ∇z and ∇θ derived.
//! Short latents (the per-datum latents of automated EM) take forward-mode dual numbers
//! (`num-dual`): one evaluation of the model per four coordinates, no bookkeeping. Latents of
//! [`REVERSE_FROM`] coordinates or more (a series, a field) take reverse mode ([`Rev`]): one
//! evaluation on a tape and one backward sweep give ∇z and ∇θ together, where dual numbers would
//! make an O(d) model's gradient O(d²).

use num_dual::{Dual64, DualNum, DualSVec64, DualVec};
use statrs::function::gamma::{digamma, ln_gamma};

use super::reverse::Rev;
use super::LatentModel;
use crate::error::LogpError;

/// The numbers a [`LogJoint`] is written over: `f64` (values), [`Dual64`] and its vector form
/// (values with directional derivatives) and [`Rev`] (values on a tape). Arithmetic with `f64`
/// constants, `exp`, `ln`, `powi`, `sqrt`, `ln_1p`, the trigonometric and hyperbolic functions
/// come from [`DualNum`]; the special functions statistics needs are added here.
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
    /// log p(x_i, z; θ) for data point `i`. Compute it on the calling thread: numbers of type
    /// [`Rev`] carried to other threads lose their derivatives, and the gradient then fails with
    /// an error that says so.
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

/// Latents of this many coordinates or more take reverse mode. On the state-space model's
/// log p (`cargo bench -p sagd --bench derived`) a gradient by tape cost 1.2 times the dual
/// numbers' at 16 coordinates and 0.7 times at 32; models with costlier functions (ln Γ, exp per
/// coordinate) gain from the tape earlier, since it evaluates them once.
#[doc(hidden)]
pub const REVERSE_FROM: usize = 24;

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
        if d >= REVERSE_FROM {
            let th: Vec<Rev> = theta.iter().map(|&a| Rev::constant(a)).collect();
            for (r, &i) in data.iter().enumerate() {
                let (zr, gr) = (&z[r * d..(r + 1) * d], &mut grad_z[r * d..(r + 1) * d]);
                logp[r] = Rev::gradient(zr, |zd| self.0.log_joint(&th, i, zd), gr)?;
            }
            return Ok(());
        }
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
        let (d, p) = (self.0.latent_dim(), theta.len());
        let mut g = vec![0.0; p];
        let mut add = |g: &[f64]| {
            for (o, gk) in grad_theta.iter_mut().zip(g) {
                *o += gk;
            }
        };
        if p >= REVERSE_FROM {
            let mut zr = Vec::with_capacity(d);
            for (r, &i) in data.iter().enumerate() {
                zr.clear();
                zr.extend(z[r * d..(r + 1) * d].iter().map(|&a| Rev::constant(a)));
                Rev::gradient(theta, |th| self.0.log_joint(th, i, &zr), &mut g)?;
                add(&g);
            }
        } else if p > 1 {
            let mut zr = Vec::with_capacity(d);
            for (r, &i) in data.iter().enumerate() {
                zr.clear();
                zr.extend(
                    z[r * d..(r + 1) * d]
                        .iter()
                        .map(|&a| DualSVec64::from_re(a)),
                );
                gradient_lanes(theta, |th| self.0.log_joint(th, i, &zr), &mut g)?;
                add(&g);
            }
        } else {
            let (mut th, mut zd) = (Vec::new(), Vec::new());
            for (r, &i) in data.iter().enumerate() {
                seeded(&z[r * d..(r + 1) * d], None, &mut zd);
                for (k, gk) in g.iter_mut().enumerate() {
                    seeded(theta, Some(k), &mut th);
                    *gk = finite(self.0.log_joint(&th, i, &zd).eps)?;
                }
                add(&g);
            }
        }
        Ok(())
    }

    fn fuses_grad_theta(&self) -> bool {
        self.0.latent_dim() >= REVERSE_FROM
    }

    fn log_joint_and_grad_theta(
        &self,
        theta: &[f64],
        data: &[usize],
        z: &[f64],
        logp: &mut [f64],
        grad_z: &mut [f64],
        grad_theta: &mut [f64],
    ) -> Result<(), LogpError> {
        let (d, p) = (self.0.latent_dim(), theta.len());
        if d < REVERSE_FROM {
            self.log_joint(theta, data, z, logp, grad_z)?;
            return self.add_grad_theta(theta, data, z, grad_theta);
        }
        // θ and z on one tape: one sweep gives both gradients.
        let mut v = vec![0.0; p + d];
        let mut g = vec![0.0; p + d];
        v[..p].copy_from_slice(theta);
        for (r, &i) in data.iter().enumerate() {
            v[p..].copy_from_slice(&z[r * d..(r + 1) * d]);
            logp[r] = Rev::gradient(&v, |x| self.0.log_joint(&x[..p], i, &x[p..]), &mut g)?;
            grad_z[r * d..(r + 1) * d].copy_from_slice(&g[p..]);
            for (o, gk) in grad_theta.iter_mut().zip(&g[..p]) {
                *o += gk;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A series of `d` latents with `p` parameters: an AR(1) prior, ln Γ and exp of the
    /// parameters, and each parameter weighting a sine of one latent.
    struct Series {
        d: usize,
        p: usize,
    }

    impl LogJoint for Series {
        fn n_data(&self) -> usize {
            2
        }
        fn latent_dim(&self) -> usize {
            self.d
        }
        fn theta_dim(&self) -> usize {
            self.p
        }
        fn log_joint<S: Scalar>(&self, th: &[S], i: usize, z: &[S]) -> S {
            let phi = th[0].tanh();
            let mut lp = (th[0] * th[0] + 1.0).ln_gamma() - z[0] * z[0] * 0.5;
            for t in 1..z.len() {
                let e = z[t] - phi * z[t - 1] - (i as f64) * 0.1;
                lp -= e * e * (th[0] * -0.5).exp() * 0.5;
            }
            for (k, &b) in th.iter().enumerate().skip(1) {
                lp += b * z[k % z.len()].sin() - b * b * 0.5;
            }
            lp
        }
    }

    /// ∂ log p / ∂v_k one direction at a time, the reference for every path.
    fn one_at_a_time(m: &Series, theta: &[f64], i: usize, z: &[f64], in_z: bool) -> Vec<f64> {
        let n = if in_z { z.len() } else { theta.len() };
        (0..n)
            .map(|k| {
                let (mut th, mut zd) = (Vec::new(), Vec::new());
                seeded(theta, (!in_z).then_some(k), &mut th);
                seeded(z, in_z.then_some(k), &mut zd);
                m.log_joint(&th, i, &zd).eps
            })
            .collect()
    }

    fn close(a: &[f64], b: &[f64], what: &str) {
        for (k, (x, y)) in a.iter().zip(b).enumerate() {
            assert!(
                (x - y).abs() <= 1e-12 * y.abs().max(1.0),
                "{what}, coordinate {k}: {x} against {y}"
            );
        }
    }

    /// Every path of `Derived` (one direction, four lanes, the tape; ∇z, ∇θ and both in one
    /// call) gives the derivatives of one direction at a time, for two rows at once.
    #[test]
    fn every_path_gives_the_derivatives_of_one_direction_at_a_time() {
        for (d, p) in [
            (3, 1),
            (8, 3),
            (REVERSE_FROM, 3),
            (40, 2),
            (5, REVERSE_FROM + 6),
        ] {
            let m = Series { d, p };
            let theta: Vec<f64> = (0..p).map(|k| 0.3 + 0.1 * k as f64).collect();
            let z: Vec<f64> = (0..2 * d).map(|t| (t as f64 * 0.7).sin()).collect();
            let rows = [1, 0];
            let model = Derived(m);
            let (mut logp, mut grad_z) = (vec![0.0; 2], vec![0.0; 2 * d]);
            model
                .log_joint(&theta, &rows, &z, &mut logp, &mut grad_z)
                .expect("finite");
            let mut grad_theta = vec![0.0; p];
            model
                .add_grad_theta(&theta, &rows, &z, &mut grad_theta)
                .expect("finite");
            let (mut logp2, mut grad_z2, mut grad_theta2) =
                (vec![0.0; 2], vec![0.0; 2 * d], vec![0.0; p]);
            model
                .log_joint_and_grad_theta(
                    &theta,
                    &rows,
                    &z,
                    &mut logp2,
                    &mut grad_z2,
                    &mut grad_theta2,
                )
                .expect("finite");
            let mut want_theta = vec![0.0; p];
            for (r, &i) in rows.iter().enumerate() {
                let zr = &z[r * d..(r + 1) * d];
                let what = format!("d {d}, p {p}, row {r}");
                assert_eq!(logp[r], model.0.log_joint(&theta, i, zr), "{what}");
                assert_eq!(logp2[r], logp[r], "{what}");
                let want_z = one_at_a_time(&model.0, &theta, i, zr, true);
                close(&grad_z[r * d..(r + 1) * d], &want_z, &format!("{what}: ∇z"));
                close(
                    &grad_z2[r * d..(r + 1) * d],
                    &want_z,
                    &format!("{what}: fused ∇z"),
                );
                for (w, g) in want_theta
                    .iter_mut()
                    .zip(one_at_a_time(&model.0, &theta, i, zr, false))
                {
                    *w += g;
                }
            }
            close(&grad_theta, &want_theta, &format!("d {d}, p {p}: ∇θ"));
            close(
                &grad_theta2,
                &want_theta,
                &format!("d {d}, p {p}: fused ∇θ"),
            );
            if p < REVERSE_FROM {
                // Four lanes carry each direction's arithmetic unchanged.
                assert_eq!(grad_theta, want_theta, "d {d}, p {p}: ∇θ by lanes");
            }
            assert_eq!(model.fuses_grad_theta(), d >= REVERSE_FROM);
        }
    }

    /// A model that computes on other threads gets an error that says so, never a wrong gradient.
    #[test]
    fn a_model_computing_on_another_thread_fails_with_the_reason() {
        struct Threaded;
        impl LogJoint for Threaded {
            fn n_data(&self) -> usize {
                1
            }
            fn latent_dim(&self) -> usize {
                REVERSE_FROM
            }
            fn theta_dim(&self) -> usize {
                1
            }
            fn log_joint<S: Scalar>(&self, th: &[S], _: usize, z: &[S]) -> S {
                std::thread::scope(|s| {
                    s.spawn(|| z.iter().fold(th[0], |a, &b| a - b * b))
                        .join()
                        .expect("joins")
                })
            }
        }
        let z = vec![0.5; REVERSE_FROM];
        let (mut logp, mut grad) = (vec![0.0], vec![0.0; REVERSE_FROM]);
        let err = Derived(Threaded)
            .log_joint(&[1.0], &[0], &z, &mut logp, &mut grad)
            .expect_err("the tape was left");
        assert!(!err.is_recoverable());
        assert!(err.to_string().contains("another thread"), "{err}");
    }
}
