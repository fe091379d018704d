//! What automated EM does without a step size to guess: Newton steps on the M-step's Monte Carlo
//! objective, with a line search on common random numbers, and a Langevin step set from the
//! curvature of the posteriors the chains are on.
//!
//! # Newton steps on Q
//!
//! During an M-step the chains sit on p(z | x_i; θ_k), so at their states z_r the Monte Carlo
//! objective F̂(θ) = −(1/R) Σ_r log p(x_r, z_r; θ) is −Q(θ; θ_k)/n up to noise, and its Hessian
//! H = −(1/R) Σ_r ∇²θ log p(x_r, z_r; θ) is the complete-data information per point: the curvature
//! that decides how large a gradient step may be. The step is d = −H⁻¹ ĝ (ĝ the update's gradient
//! estimate, averaged over its K_t states), and θ moves to θ + s·d for the first s of 1, ½, ¼, …
//! at which F̂ is finite and no larger than at θ: the same draws on both sides, so the comparison
//! is not blurred by Monte Carlo noise. A quadratic Q is solved in one step whatever its scale;
//! an exponential one (Poisson rates with large counts) is approached without overshooting to
//! overflow. Where H is not positive definite, λI is added (Levenberg) until it is.
//!
//! # The Langevin step
//!
//! The local posterior scale of chain r along coordinate j is σ_rj = (−∂²/∂z_j² log π(z_r))^−½,
//! by central differences of the chains' gradients. With σ̂ a low quantile of them (the narrow
//! posteriors decide stability), the chains run with δ = scale·σ̂ and γ = friction/σ̂: in units of
//! σ̂ every model's narrowest posteriors then see the same dynamics.

use serde::{Deserialize, Serialize};

use crate::error::{LogpError, Result, SagdError};
use crate::langevin::{ChainSet, LangevinSettings};
use crate::metric::{curvature_step, row_target, stacked_shifts};
use crate::model::{AnchoredTarget, Problem};
use crate::parallel::{add_parts, rows_per_piece};

/// How an M-step moves θ.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize, Default)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum MStepUpdate {
    /// Algorithm 1's step θ ← θ − α_t ĝ with the schedules' α_t (the paper's E1; α must suit the
    /// curvature of Q).
    #[default]
    Gradient,
    /// Newton steps on the Monte Carlo Q with a line search (see the module docs): no α.
    Newton {
        /// Halvings of the step the line search may try before it leaves θ where it is.
        max_halvings: usize,
    },
}

/// How the chains' Langevin step and friction are set.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize, Default)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum ChainStep {
    /// The schedules' δ_t and the settings' γ (the paper's).
    #[default]
    Schedule,
    /// δ = `scale`·σ̂ and γ = `friction`/σ̂, σ̂ the `quantile` of the chains' local posterior
    /// scales, measured at the start of every M-step (twice: before and half-way through its
    /// burn-in).
    Adaptive {
        /// δ in units of σ̂.
        scale: f64,
        /// γ in units of 1/σ̂ (below 2: underdamped, whose draws of a Gaussian are anticorrelated
        /// at a lag of about a period, so that their means are less noisy).
        friction: f64,
        /// Which quantile of the scales is σ̂ (low: the narrow posteriors decide).
        quantile: f64,
    },
}

impl ChainStep {
    /// The defaults of [`ChainStep::Adaptive`]: δ = 0.5 σ̂ and γ = 0.5/σ̂, σ̂ the 10% quantile.
    pub fn adaptive() -> Self {
        ChainStep::Adaptive {
            scale: 0.5,
            friction: 0.5,
            quantile: 0.1,
        }
    }

    /// δ and γ for chains whose narrow posteriors have scale σ̂ (`None` with
    /// [`ChainStep::Schedule`]).
    pub fn at(&self, sigma: f64) -> Option<(f64, f64)> {
        match *self {
            ChainStep::Adaptive {
                scale, friction, ..
            } => Some((scale * sigma, friction / sigma)),
            ChainStep::Schedule => None,
        }
    }

    /// Checks the constants.
    pub fn validate(&self) -> Result<()> {
        if let ChainStep::Adaptive {
            scale,
            friction,
            quantile,
        } = *self
        {
            crate::error::positive(
                "adaptive step scale",
                scale,
                "use a step of a fraction of the posterior scale, such as 0.25",
            )?;
            crate::error::positive(
                "adaptive friction",
                friction,
                "use a friction in units of the posterior scale, such as 0.5",
            )?;
            if !(quantile > 0.0 && quantile < 1.0) {
                return Err(SagdError::InvalidSetting {
                    name: "adaptive step quantile",
                    value: quantile.to_string(),
                    fix: "use a quantile in (0, 1), such as 0.1".into(),
                });
            }
        }
        Ok(())
    }
}

/// Brings `chains` onto their targets at `anchor` with [`ChainStep::Adaptive`]: to the posterior
/// modes (unless they are `at_modes` already), then `burn_in` steps in two halves, σ̂ measured
/// before each (where no posterior is locally log-concave, `previous`, or 1, stays). Returns σ̂.
#[allow(clippy::too_many_arguments)]
pub fn settle_chains<P: Problem<f64> + ?Sized>(
    problem: &P,
    anchor: &[f64],
    chains: &mut ChainSet<f64>,
    step: ChainStep,
    langevin: LangevinSettings,
    burn_in: usize,
    previous: Option<f64>,
    at_modes: bool,
) -> Result<f64> {
    let ChainStep::Adaptive { quantile, .. } = step else {
        return Err(SagdError::InvalidSetting {
            name: "chain step",
            value: "schedule".into(),
            fix: "settle_chains sets an adaptive step: use ChainStep::Adaptive".into(),
        });
    };
    let target = AnchoredTarget { problem, anchor };
    if !at_modes {
        let modes = posterior_modes(problem, anchor, chains.positions())?;
        chains.set_positions(&target, &modes)?;
    }
    let mut sigma = previous.unwrap_or(1.0);
    for steps in [burn_in / 2, burn_in - burn_in / 2] {
        if let Some(s) = posterior_scale(problem, anchor, chains.positions(), quantile)? {
            sigma = s;
        }
        let (delta, gamma) = step.at(sigma).unwrap_or((sigma, langevin.gamma));
        let kernel = LangevinSettings { gamma, ..langevin }.kernel::<f64>(delta)?;
        chains.burn_in(&target, &kernel, steps)?;
    }
    Ok(sigma)
}

/// The most coordinates per chain whose curvature [`posterior_scale`] measures.
const SCALE_COORDS: usize = 16;

/// Σ over pieces of `f(first_row, positions)`, in piece order: the same bits for any number of
/// threads.
fn sum_pieces<F>(positions: &[f64], dim: usize, len: usize, costly: bool, f: F) -> Result<Vec<f64>>
where
    F: Fn(usize, &[f64]) -> Result<Vec<f64>> + Sync,
{
    let rows = positions.len() / dim.max(1);
    let per = rows_per_piece(rows, dim, costly);
    let parts = crate::share::map_chunks(positions, per * dim.max(1), |b, xi| f(b * per, xi))?;
    let mut out = vec![0.0; len];
    add_parts(&parts, &mut out);
    Ok(out)
}

/// F̂(θ) = −(1/R) Σ_r log π_θ(ξ_r): the problem's target taken at θ (for maximum likelihood,
/// log p(x_r, z_r; θ)); +∞ where the model is not finite.
pub fn objective<P: Problem<f64> + ?Sized>(problem: &P, theta: &[f64], xi: &[f64]) -> Result<f64> {
    match sum_objective(problem, theta, xi) {
        Err(SagdError::Model(LogpError::NonFinite)) => Ok(f64::INFINITY),
        r => r,
    }
}

fn sum_objective<P: Problem<f64> + ?Sized>(problem: &P, theta: &[f64], xi: &[f64]) -> Result<f64> {
    let d = problem.chain_dim();
    let rows = xi.len() / d.max(1);
    let s = sum_pieces(xi, d, 1, problem.calls_are_costly(), |first, x| {
        let n = x.len() / d.max(1);
        let (mut logp, mut g) = (vec![0.0; n], vec![0.0; x.len()]);
        problem
            .log_target(theta, first, x, &mut logp, &mut g)
            .map_err(SagdError::Model)?;
        Ok(vec![logp.iter().sum()])
    })?;
    Ok(-s[0] / rows.max(1) as f64)
}

/// The Hessian of F̂ at θ (p × p, symmetrised) by central differences of Σ_r ∇θ f, with steps
/// `rel`·(1 + |θ_j|).
pub fn objective_hessian<P: Problem<f64> + ?Sized>(
    problem: &P,
    theta: &[f64],
    xi: &[f64],
    rel: f64,
) -> Result<Vec<Vec<f64>>> {
    let (p, d) = (problem.theta_dim(), problem.chain_dim());
    let rows = xi.len() / d.max(1);
    let mut h = vec![vec![0.0; p]; p];
    for j in 0..p {
        let step = rel * (1.0 + theta[j].abs());
        let grad_at = |sign: f64| {
            let mut th = theta.to_vec();
            th[j] += sign * step;
            sum_pieces(xi, d, p, problem.calls_are_costly(), |first, x| {
                let mut g = vec![0.0; p];
                problem
                    .add_grad_f(&th, first, x, &mut g)
                    .map_err(SagdError::Model)?;
                Ok(g)
            })
        };
        let (gp, gm) = (grad_at(1.0)?, grad_at(-1.0)?);
        for k in 0..p {
            h[j][k] = (gp[k] - gm[k]) / (2.0 * step * rows.max(1) as f64);
        }
    }
    // Symmetrised.
    Ok((0..p)
        .map(|j| (0..p).map(|k| 0.5 * (h[j][k] + h[k][j])).collect())
        .collect())
}

/// Solves (H + λI) d = −g by Cholesky, with λ = 0 if H is positive definite, else the smallest of
/// 10⁻⁸·s, 10⁻⁷·s, … (s the largest |H_jj|, or 1) that makes it so. `None` when nothing does
/// (a non-finite H).
pub fn newton_direction(h: &[Vec<f64>], g: &[f64]) -> Option<Vec<f64>> {
    let p = g.len();
    let s = h
        .iter()
        .enumerate()
        .map(|(j, r)| r[j].abs())
        .fold(0.0f64, f64::max);
    let s = if s > 0.0 && s.is_finite() { s } else { 1.0 };
    for k in 0..=16 {
        let lambda = if k == 0 { 0.0 } else { s * 10f64.powi(k - 9) };
        let mut a = h.to_vec();
        for (j, row) in a.iter_mut().enumerate() {
            row[j] += lambda;
        }
        if let Some(inv) = crate::linalg::spd_inverse(&a) {
            let d: Vec<f64> = (0..p)
                .map(|j| -(0..p).map(|k| inv[j][k] * g[k]).sum::<f64>())
                .collect();
            if d.iter().all(|v| v.is_finite()) {
                return Some(d);
            }
        }
    }
    None
}

/// What one Newton update did.
#[derive(Clone, Debug, PartialEq)]
pub struct NewtonStep {
    /// Where θ moved to (θ itself when no trial step was accepted).
    pub to: Vec<f64>,
    /// The accepted fraction s of the Newton step (0 when none was).
    pub fraction: f64,
}

/// The Newton update of θ from the gradient estimate `g` of F at θ and the chains' states `xi`
/// (see the module docs): the line search starts at `first` (1, or less after back-offs) and
/// halves at most `max_halvings` times.
pub fn newton_step<P: Problem<f64> + ?Sized>(
    problem: &P,
    theta: &[f64],
    g: &[f64],
    xi: &[f64],
    first: f64,
    max_halvings: usize,
) -> Result<NewtonStep> {
    let stay = NewtonStep {
        to: theta.to_vec(),
        fraction: 0.0,
    };
    let h = match objective_hessian(problem, theta, xi, 1e-5) {
        Err(SagdError::Model(LogpError::NonFinite)) => return Ok(stay),
        r => r?,
    };
    let Some(d) = newton_direction(&h, g) else {
        return Ok(stay);
    };
    let f0 = objective(problem, theta, xi)?;
    let mut s = first;
    for _ in 0..=max_halvings {
        let to: Vec<f64> = theta.iter().zip(&d).map(|(t, v)| t + s * v).collect();
        if to.iter().all(|v| v.is_finite()) {
            let f = objective(problem, &to, xi)?;
            // A NaN F̂ at θ itself (a model undefined there) accepts any finite improvement.
            if f.is_finite() && (f <= f0 || f0.is_nan()) {
                return Ok(NewtonStep { to, fraction: s });
            }
        }
        s *= 0.5;
    }
    Ok(stay)
}

/// Moves every chain to a mode of its target π (at `anchor`) by diagonal Newton ascent with
/// backtracking, curvatures by central differences of the gradient: where the chains start an
/// M-step when the Langevin step comes from the posteriors. From a state far in a tail, where
/// gradients are large and curvature small, a Langevin step sized for the mode would be thrown
/// across it; from the mode, the burn-in has only the posterior's own spread to cover. Rows whose
/// target is not finite where they are stay put.
pub fn posterior_modes<P: Problem<f64> + ?Sized>(
    problem: &P,
    anchor: &[f64],
    xi: &[f64],
) -> Result<Vec<f64>> {
    let d = problem.chain_dim().max(1);
    let rows = xi.len() / d;
    let per = rows_per_piece(rows, d, problem.calls_are_costly());
    let pieces = crate::share::map_chunks(xi, per * d, |b, x| {
        let mut out = x.to_vec();
        for (k, z) in out.chunks_exact_mut(d).enumerate() {
            ascend(problem, anchor, b * per + k, z)?;
        }
        Ok(out)
    })?;
    Ok(pieces.concat())
}

/// Diagonal Newton ascent of one row's log π from `z`, in place (see [`posterior_modes`]).
fn ascend<P: Problem<f64> + ?Sized>(
    problem: &P,
    anchor: &[f64],
    r: usize,
    z: &mut [f64],
) -> Result<()> {
    let Some((mut lp, mut g)) = row_target(problem, anchor, r, z)? else {
        return Ok(());
    };
    for _ in 0..100 {
        // Newton along each coordinate where log π is concave there; elsewhere a unit step up
        // the gradient, which the backtracking shortens.
        let mut dir = vec![0.0; z.len()];
        for j in 0..z.len() {
            let h = 1e-4 * (1.0 + z[j].abs());
            let mut y = z.to_vec();
            y[j] += h;
            let up = row_target(problem, anchor, r, &y)?;
            y[j] -= 2.0 * h;
            let down = row_target(problem, anchor, r, &y)?;
            let curv = match (up, down) {
                (Some((_, gu)), Some((_, gd))) => -(gu[j] - gd[j]) / (2.0 * h),
                _ => f64::NAN,
            };
            dir[j] = if curv > 0.0 {
                g[j] / curv
            } else {
                g[j].signum()
            };
        }
        let mut t = 1.0;
        let mut moved = false;
        for _ in 0..40 {
            let y: Vec<f64> = z.iter().zip(&dir).map(|(a, v)| a + t * v).collect();
            if let Some((l, gy)) = row_target(problem, anchor, r, &y)? {
                if l > lp {
                    let small = z
                        .iter()
                        .zip(&y)
                        .all(|(a, b)| (a - b).abs() <= 1e-9 * (1.0 + a.abs()));
                    z.copy_from_slice(&y);
                    (lp, g) = (l, gy);
                    moved = !small;
                    break;
                }
            }
            t *= 0.5;
        }
        if !moved {
            break;
        }
    }
    Ok(())
}

/// The `quantile` of the chains' local posterior scales σ_rj = (−∂²_j log π(ξ_r))^−½, by central
/// differences of the gradient of the target at `anchor` with steps 10⁻⁴·(1 + |ξ_rj|); coordinates
/// where log π is not concave are left out. `None` when none is. Of a long latent, 16 evenly
/// spaced coordinates stand for all (each costs two gradient evaluations of every chain).
pub fn posterior_scale<P: Problem<f64> + ?Sized>(
    problem: &P,
    anchor: &[f64],
    xi: &[f64],
    quantile: f64,
) -> Result<Option<f64>> {
    let d = problem.chain_dim().max(1);
    let rows = xi.len() / d;
    let per = rows_per_piece(rows, d, problem.calls_are_costly());
    let scales: Vec<Vec<f64>> = crate::share::map_chunks(xi, per * d, |b, x| {
        let n = x.len() / d;
        let mut out = Vec::with_capacity(x.len());
        let steps: Vec<f64> = x.iter().map(|&v| curvature_step(v)).collect();
        let mut curv = vec![0.0; x.len()];
        let coords: Vec<usize> = if d <= SCALE_COORDS {
            (0..d).collect()
        } else {
            (0..SCALE_COORDS).map(|k| k * d / SCALE_COORDS).collect()
        };
        // Every coordinate's shifted states in one call (copies up, down, up, down, …): for a
        // model, one pass over all of them; a costly function is called once.
        let copies = 2 * coords.len();
        let y = stacked_shifts(x, d, &coords);
        let (mut lp, mut g) = (vec![0.0; copies * n], vec![0.0; y.len()]);
        problem
            .log_target_copies(anchor, b * per, copies, &y, &mut lp, &mut g)
            .map_err(SagdError::Model)?;
        for (c, &j) in coords.iter().enumerate() {
            let (up, down) = (&g[2 * c * x.len()..], &g[(2 * c + 1) * x.len()..]);
            for r in 0..n {
                let i = r * d + j;
                curv[i] = -(up[i] - down[i]) / (2.0 * steps[i]);
            }
        }
        out.extend(
            curv.iter()
                .filter(|c| c.is_finite() && **c > 0.0)
                .map(|c| 1.0 / c.sqrt()),
        );
        Ok(out)
    })?;
    let mut all: Vec<f64> = scales.into_iter().flatten().collect();
    if all.is_empty() {
        return Ok(None);
    }
    all.sort_by(f64::total_cmp);
    let at = ((all.len() - 1) as f64 * quantile).round() as usize;
    Ok(Some(all[at.min(all.len() - 1)]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn newton_direction_solves_a_positive_definite_system() {
        let h = vec![vec![4.0, 1.0], vec![1.0, 3.0]];
        let d = newton_direction(&h, &[1.0, 2.0]).unwrap();
        // H d = −g.
        assert!((4.0 * d[0] + d[1] + 1.0).abs() < 1e-12);
        assert!((d[0] + 3.0 * d[1] + 2.0).abs() < 1e-12);
    }

    #[test]
    fn newton_direction_is_a_descent_direction_on_an_indefinite_hessian() {
        let h = vec![vec![1.0, 0.0], vec![0.0, -2.0]];
        let g = [1.0, 1.0];
        let d = newton_direction(&h, &g).unwrap();
        assert!(d.iter().zip(&g).map(|(a, b)| a * b).sum::<f64>() < 0.0);
        assert!(newton_direction(&[vec![f64::NAN]], &[1.0]).is_none());
    }
}
