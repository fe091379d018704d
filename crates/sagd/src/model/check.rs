//! A model's gradients against central differences of its log density: the check every
//! hand-written ∇z and ∇θ should pass before a run.

use super::LatentModel;
use crate::error::{check_len, Result, SagdError};

/// One gradient's worst coordinate against its central difference.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Worst {
    /// The data point (for ∇z; for ∇θ, the sum over the points checked, reported as `None`).
    pub datum: Option<usize>,
    /// The coordinate of z_i or θ.
    pub coordinate: usize,
    /// The model's derivative.
    pub analytic: f64,
    /// The central difference.
    pub numeric: f64,
    /// |analytic − numeric| / max(1, |analytic|, |numeric|).
    pub error: f64,
}

/// The worst coordinates of ∇z and ∇θ over the points checked ([`check_gradients`]).
#[derive(Clone, Debug, PartialEq)]
pub struct GradientCheck {
    /// ∇z log p(x_i, z_i; θ), per point.
    pub z: Option<Worst>,
    /// ∇θ Σ_i log p(x_i, z_i; θ).
    pub theta: Option<Worst>,
    /// The difference step used.
    pub step: f64,
}

impl GradientCheck {
    /// The larger of the two errors.
    pub fn worst_error(&self) -> f64 {
        [self.z, self.theta]
            .iter()
            .flatten()
            .map(|w| w.error)
            .fold(0.0, f64::max)
    }

    /// Whether both gradients agree with their differences to `tolerance`.
    pub fn passes(&self, tolerance: f64) -> bool {
        self.worst_error() <= tolerance
    }
}

impl std::fmt::Display for GradientCheck {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let show = |f: &mut std::fmt::Formatter<'_>, name: &str, w: &Option<Worst>| {
            match w {
            Some(w) => writeln!(
                f,
                "{name}: worst at {}coordinate {}: model {:.9e}, central difference {:.9e}, relative error {:.2e}",
                w.datum.map(|i| format!("data point {i}, ")).unwrap_or_default(),
                w.coordinate,
                w.analytic,
                w.numeric,
                w.error
            ),
            None => writeln!(f, "{name}: nothing to check"),
        }
        };
        show(f, "∇z", &self.z)?;
        show(f, "∇θ", &self.theta)?;
        write!(f, "(central differences with step {:e})", self.step)
    }
}

fn keep_worst(worst: &mut Option<Worst>, w: Worst) {
    if worst.is_none_or(|o| w.error > o.error) {
        *worst = Some(w);
    }
}

/// Compares `model`'s ∇z (at each data point i with latent z_i, row i of `z`, n_data × latent
/// dim) and ∇θ (of the sum over the points) with central differences of its log density at θ,
/// with step `step` (1e-5 suits f64 models whose variables are of order one). A relative error
/// near 1e-8 is rounding; near 1, a wrong derivative, and the report names where.
pub fn check_gradients<M: LatentModel<f64>>(
    model: &M,
    theta: &[f64],
    z: &[f64],
    step: f64,
) -> Result<GradientCheck> {
    let (n, d, p) = (model.n_data(), model.latent_dim(), model.theta_dim());
    check_len("θ", p, theta.len())?;
    check_len("latents (n_data × latent_dim)", n * d, z.len())?;
    if !(step.is_finite() && step > 0.0) {
        return Err(SagdError::InvalidSetting {
            name: "step",
            value: step.to_string(),
            fix: "use a small positive step, such as 1e-5".into(),
        });
    }
    let data: Vec<usize> = (0..n).collect();
    let log_joint = |theta: &[f64], z: &[f64]| -> Result<(Vec<f64>, Vec<f64>)> {
        let (mut lp, mut g) = (vec![0.0; n], vec![0.0; n * d]);
        model
            .log_joint(theta, &data, z, &mut lp, &mut g)
            .map_err(SagdError::Model)?;
        Ok((lp, g))
    };
    let rel = |a: f64, b: f64| (a - b).abs() / 1f64.max(a.abs()).max(b.abs());
    let (_, gz) = log_joint(theta, z)?;
    let mut out = GradientCheck {
        z: None,
        theta: None,
        step,
    };
    let mut zz = z.to_vec();
    for j in 0..d {
        // Coordinate j of every point at once: point i's log density depends on z_i alone.
        for i in 0..n {
            zz[i * d + j] = z[i * d + j] + step;
        }
        let (up, _) = log_joint(theta, &zz)?;
        for i in 0..n {
            zz[i * d + j] = z[i * d + j] - step;
        }
        let (down, _) = log_joint(theta, &zz)?;
        for i in 0..n {
            zz[i * d + j] = z[i * d + j];
            let numeric = (up[i] - down[i]) / (2.0 * step);
            let analytic = gz[i * d + j];
            keep_worst(
                &mut out.z,
                Worst {
                    datum: Some(i),
                    coordinate: j,
                    analytic,
                    numeric,
                    error: rel(analytic, numeric),
                },
            );
        }
    }
    let mut gt = vec![0.0; p];
    model
        .add_grad_theta(theta, &data, z, &mut gt)
        .map_err(SagdError::Model)?;
    let mut tt = theta.to_vec();
    for k in 0..p {
        tt[k] = theta[k] + step;
        let up: f64 = log_joint(&tt, z)?.0.iter().sum();
        tt[k] = theta[k] - step;
        let down: f64 = log_joint(&tt, z)?.0.iter().sum();
        tt[k] = theta[k];
        let numeric = (up - down) / (2.0 * step);
        keep_worst(
            &mut out.theta,
            Worst {
                datum: None,
                coordinate: k,
                analytic: gt[k],
                numeric,
                error: rel(gt[k], numeric),
            },
        );
    }
    Ok(out)
}
