//! A linear-Gaussian state-space model whose one data point carries a long correlated latent:
//! z_1 ~ N(0, σ_z²/(1 − φ²)), z_t = φ z_{t−1} + σ_z ε_t, x_t = z_t + σ_x η_t, with
//! θ = (atanh φ, log σ_z, log σ_x). The Kalman filter gives its exact log-likelihood, so fits
//! and standard errors are checked against the truth. Shared by the tests and, by path, by the
//! example that times it.
#![allow(dead_code)]

use rand::SeedableRng;
use rand_distr::{Distribution, StandardNormal};
use rand_xoshiro::Xoshiro256PlusPlus;
use sagd::error::LogpError;
use sagd::model::{LatentModel, LogJoint, Scalar};

const LN_2PI: f64 = 1.837_877_066_409_345_5;

/// Independent series of equal length; each series is one data point.
#[derive(Clone, Debug)]
pub struct StateSpace {
    /// The observations, one row of `len` values per series.
    pub x: Vec<Vec<f64>>,
}

/// (φ, σ_z, σ_x) from θ.
pub fn natural(theta: &[f64]) -> (f64, f64, f64) {
    (theta[0].tanh(), theta[1].exp(), theta[2].exp())
}

impl StateSpace {
    /// `series` series of length `len` simulated at θ.
    pub fn simulate(series: usize, len: usize, theta: &[f64], seed: u64) -> Self {
        let (phi, sz, sx) = natural(theta);
        let mut rng = Xoshiro256PlusPlus::seed_from_u64(seed);
        let mut normal = || -> f64 { StandardNormal.sample(&mut rng) };
        let x = (0..series)
            .map(|_| {
                let mut z = sz / (1.0 - phi * phi).sqrt() * normal();
                (0..len)
                    .map(|t| {
                        if t > 0 {
                            z = phi * z + sz * normal();
                        }
                        z + sx * normal()
                    })
                    .collect()
            })
            .collect();
        StateSpace { x }
    }

    /// The exact log-likelihood ℓ(θ) by the Kalman filter.
    pub fn kalman_log_likelihood(&self, theta: &[f64]) -> f64 {
        let (phi, sz, sx) = natural(theta);
        let (q, r) = (sz * sz, sx * sx);
        let mut total = 0.0;
        for x in &self.x {
            // The predicted state's mean and variance.
            let (mut m, mut p) = (0.0, q / (1.0 - phi * phi));
            for &xt in x {
                let s = p + r;
                let e = xt - m;
                total -= 0.5 * (LN_2PI + s.ln() + e * e / s);
                let k = p / s;
                let (mf, pf) = (m + k * e, (1.0 - k) * p);
                m = phi * mf;
                p = phi * phi * pf + q;
            }
        }
        total
    }

    /// The maximum of ℓ by Newton's method on the exact log-likelihood (central differences), from
    /// `start`: the MLE and ℓ there.
    pub fn maximum(&self, start: &[f64]) -> (Vec<f64>, f64) {
        let mut th = start.to_vec();
        for _ in 0..100 {
            let (g, h) = self.derivatives(&th);
            let neg: Vec<Vec<f64>> = h.iter().map(|r| r.iter().map(|v| -v).collect()).collect();
            let step = solve3(&neg, &g);
            let mut t = 1.0;
            let l0 = self.kalman_log_likelihood(&th);
            loop {
                let trial: Vec<f64> = th.iter().zip(&step).map(|(a, b)| a + t * b).collect();
                if self.kalman_log_likelihood(&trial) >= l0 - 1e-12 || t < 1e-6 {
                    th = trial;
                    break;
                }
                t *= 0.5;
            }
            if step.iter().map(|v| v.abs()).fold(0.0, f64::max) < 1e-10 {
                break;
            }
        }
        let l = self.kalman_log_likelihood(&th);
        (th, l)
    }

    /// The gradient and Hessian of ℓ by central differences.
    pub fn derivatives(&self, th: &[f64]) -> (Vec<f64>, Vec<Vec<f64>>) {
        let h = 1e-4;
        let f = |t: &[f64]| self.kalman_log_likelihood(t);
        let shifted = |j: usize, a: f64, k: usize, b: f64| {
            let mut t = th.to_vec();
            t[j] += a;
            t[k] += b;
            t
        };
        let g = (0..3)
            .map(|j| (f(&shifted(j, h, j, 0.0)) - f(&shifted(j, -h, j, 0.0))) / (2.0 * h))
            .collect();
        let hess = (0..3)
            .map(|j| {
                (0..3)
                    .map(|k| {
                        (f(&shifted(j, h, k, h))
                            - f(&shifted(j, h, k, -h))
                            - f(&shifted(j, -h, k, h))
                            + f(&shifted(j, -h, k, -h)))
                            / (4.0 * h * h)
                    })
                    .collect()
            })
            .collect();
        (g, hess)
    }

    /// Standard errors from the observed information −∇²ℓ at `th`.
    pub fn reference_se(&self, th: &[f64]) -> Vec<f64> {
        let (_, h) = self.derivatives(th);
        let info: Vec<Vec<f64>> = h.iter().map(|r| r.iter().map(|v| -v).collect()).collect();
        (0..3)
            .map(|j| {
                let mut e = [0.0; 3];
                e[j] = 1.0;
                solve3(&info, &e)[j].sqrt()
            })
            .collect()
    }
}

/// Solves the 3 × 3 system A x = b by Cramer's rule.
fn solve3(a: &[Vec<f64>], b: &[f64]) -> Vec<f64> {
    let det = |m: &[[f64; 3]; 3]| {
        m[0][0] * (m[1][1] * m[2][2] - m[1][2] * m[2][1])
            - m[0][1] * (m[1][0] * m[2][2] - m[1][2] * m[2][0])
            + m[0][2] * (m[1][0] * m[2][1] - m[1][1] * m[2][0])
    };
    let m: [[f64; 3]; 3] = [
        [a[0][0], a[0][1], a[0][2]],
        [a[1][0], a[1][1], a[1][2]],
        [a[2][0], a[2][1], a[2][2]],
    ];
    let d = det(&m);
    (0..3)
        .map(|c| {
            let mut mc = m;
            for r in 0..3 {
                mc[r][c] = b[r];
            }
            det(&mc) / d
        })
        .collect()
}

impl LogJoint for StateSpace {
    fn n_data(&self) -> usize {
        self.x.len()
    }
    fn latent_dim(&self) -> usize {
        self.x[0].len()
    }
    fn theta_dim(&self) -> usize {
        3
    }
    fn log_joint<S: Scalar>(&self, th: &[S], i: usize, z: &[S]) -> S {
        let phi = th[0].tanh();
        let (ln_sz, ln_sx) = (th[1], th[2]);
        let (inv_qz, inv_qx) = ((ln_sz * -2.0).exp(), (ln_sx * -2.0).exp());
        let stationary = S::constant(1.0) - phi * phi;
        let mut lp =
            (stationary.ln() - ln_sz * 2.0) * 0.5 - z[0] * z[0] * stationary * inv_qz * 0.5;
        for t in 1..z.len() {
            let e = z[t] - phi * z[t - 1];
            lp -= ln_sz + e * e * inv_qz * 0.5;
        }
        for (t, &x) in self.x[i].iter().enumerate() {
            let e = z[t] - x;
            lp -= ln_sx + e * e * inv_qx * 0.5;
        }
        lp
    }
}

/// The same model with its gradients written out: O(T) per gradient where dual numbers take
/// O(T²), for timing the sampler rather than the derivatives.
#[derive(Clone, Debug)]
pub struct Analytic(pub StateSpace);

impl LatentModel<f64> for Analytic {
    fn n_data(&self) -> usize {
        self.0.x.len()
    }
    fn latent_dim(&self) -> usize {
        self.0.x[0].len()
    }
    fn theta_dim(&self) -> usize {
        3
    }
    fn log_joint(
        &self,
        th: &[f64],
        data: &[usize],
        z: &[f64],
        logp: &mut [f64],
        grad_z: &mut [f64],
    ) -> Result<(), LogpError> {
        let d = self.latent_dim();
        let (phi, sz, sx) = natural(th);
        let (iq, ir) = (1.0 / (sz * sz), 1.0 / (sx * sx));
        let st = 1.0 - phi * phi;
        for (r, &i) in data.iter().enumerate() {
            let (zr, g) = (&z[r * d..(r + 1) * d], &mut grad_z[r * d..(r + 1) * d]);
            let mut lp = 0.5 * st.ln() - th[1] - 0.5 * zr[0] * zr[0] * st * iq;
            g[0] = -zr[0] * st * iq;
            g[1..].iter_mut().for_each(|v| *v = 0.0);
            for t in 1..d {
                let e = zr[t] - phi * zr[t - 1];
                lp -= th[1] + 0.5 * e * e * iq;
                g[t] -= e * iq;
                g[t - 1] += phi * e * iq;
            }
            for (t, &x) in self.0.x[i].iter().enumerate() {
                let e = zr[t] - x;
                lp -= th[2] + 0.5 * e * e * ir;
                g[t] -= e * ir;
            }
            if !lp.is_finite() {
                return Err(LogpError::NonFinite);
            }
            logp[r] = lp;
        }
        Ok(())
    }
    fn add_grad_theta(
        &self,
        th: &[f64],
        data: &[usize],
        z: &[f64],
        grad: &mut [f64],
    ) -> Result<(), LogpError> {
        let d = self.latent_dim();
        let (phi, sz, sx) = natural(th);
        let (iq, ir) = (1.0 / (sz * sz), 1.0 / (sx * sx));
        let dphi = 1.0 - phi * phi; // dφ/dθ0
        for (r, &i) in data.iter().enumerate() {
            let zr = &z[r * d..(r + 1) * d];
            // d/dφ and d/d log σ_z of the first term and the transitions.
            let mut gphi = -phi / dphi + zr[0] * zr[0] * phi * iq;
            let mut gz = -1.0 + zr[0] * zr[0] * dphi * iq;
            for t in 1..d {
                let e = zr[t] - phi * zr[t - 1];
                gphi += e * zr[t - 1] * iq;
                gz += -1.0 + e * e * iq;
            }
            let mut gx = 0.0;
            for (t, &x) in self.0.x[i].iter().enumerate() {
                let e = zr[t] - x;
                gx += -1.0 + e * e * ir;
            }
            grad[0] += gphi * dphi;
            grad[1] += gz;
            grad[2] += gx;
        }
        Ok(())
    }
}
