//! How much of a step [`polish`](super::polish) takes: where ℓ is not concave, a direction
//! between Newton's and EM's and how far along it ℓ keeps rising; near the maximum, the fraction
//! of a Newton step its own noise allows; and the noise of a gap estimate.

use crate::model::LatentModel;
use crate::rng::stream_seed;

use super::parts::score_parts;
use super::LouisSettings;
use crate::linalg::spd_inverse;

/// Where the information I is not positive definite: d = (1 + λ)(I + λC)⁻¹ ∇ℓ, C the complete-data
/// information, with λ twice the smallest of 0.1, 0.3, 1, 3, … that makes I + λC positive
/// definite. λ → 0 is Newton's step, λ → ∞ EM's gradient step C⁻¹∇ℓ; doubling λ keeps the step
/// off the singular edge, where it would be thrown far. `None` when no λ up to 10⁴ works.
pub(super) fn damped_direction(
    info: &[Vec<f64>],
    complete: &[Vec<f64>],
    score: &[f64],
) -> Option<Vec<f64>> {
    let p = score.len();
    let with = |lambda: f64| -> Vec<Vec<f64>> {
        (0..p)
            .map(|j| {
                (0..p)
                    .map(|k| info[j][k] + lambda * complete[j][k])
                    .collect()
            })
            .collect()
    };
    let lambda = (0..10)
        .map(|k| 0.1 * 3f64.powi(k))
        .find(|&l| spd_inverse(&with(l)).is_some())?;
    let inv = spd_inverse(&with(2.0 * lambda))?;
    let d: Vec<f64> = (0..p)
        .map(|j| (1.0 + 2.0 * lambda) * (0..p).map(|k| inv[j][k] * score[k]).sum::<f64>())
        .collect();
    d.iter().all(|v| v.is_finite()).then_some(d)
}

/// The most times [`polish`](super::polish) doubles its step where ℓ is not concave (extending it while the
/// score along it stays positive).
pub const REACH_DOUBLINGS: usize = 10;

/// How far along `d` (in multiples of it, a power of 2 up to 2^[`REACH_DOUBLINGS`]) ℓ keeps
/// rising from `theta`, by the sign of the score along `d` at 2, 4, 8, … times it: the first
/// point where that slope is not above twice its Monte Carlo error ends the search, and the
/// multiple before it is the reach (1 when the slope at 2 is already flat or falling, or its
/// chains fail). Where ℓ is not concave the damped step is sized by the complete-data
/// information, which can be hundreds of times the observed one (Poisson counts in the hundreds
/// with the slope's information mostly missing): the step is then a sliver of the way, and each
/// doubling costs one run of the score, not an information.
pub(super) fn uphill_reach<M: LatentModel<f64>>(
    model: &M,
    theta: &[f64],
    d: &[f64],
    louis: &LouisSettings,
    seed: u64,
) -> f64 {
    let mut reach = 1.0;
    for k in 0..REACH_DOUBLINGS {
        let trial: Vec<f64> = theta
            .iter()
            .zip(d)
            .map(|(t, v)| t + 2.0 * reach * v)
            .collect();
        let Ok(parts) = score_parts(model, &trial, louis, stream_seed(seed, 1 + k as u64)) else {
            break;
        };
        let slope: f64 = parts.score.iter().zip(d).map(|(g, v)| g * v).sum();
        let var = quadratic_form(d, &parts.score_cov);
        // A NaN slope (a failed run) ends the search too.
        let uphill = slope > 2.0 * var.max(0.0).sqrt();
        if !uphill {
            break;
        }
        reach *= 2.0;
    }
    reach
}

/// About the Monte Carlo sd of a gap estimate `gap` whose noise part is `noise`: with a score
/// g + e, e of covariance C, ½(g+e)ᵀI⁻¹(g+e) varies by the cross term (variance ≈ 4·gap·noise)
/// and the quadratic one (≈ 2·noise² for a few parameters).
pub(super) fn gap_sd(gap: f64, noise: f64) -> f64 {
    (4.0 * gap.max(0.0) * noise + 2.0 * noise * noise).sqrt()
}

/// The fraction of a Newton step that [`polish`](super::polish) takes: 1 − p/χ², or none when that is
/// negative, with χ² = ∇ℓᵀ C⁻¹ ∇ℓ the score's Wald statistic (C its Monte Carlo covariance) and
/// p its length: the positive-part James–Stein shrinkage of the step towards the point, in the
/// metric of its own noise. A step that is noise alone (χ² about p) is not taken, so a polish
/// does not undo an EM that had already converged (the example: EM 0.0001 below the
/// maximum, a whole step 0.0005 below); a step measured precisely in any direction (χ² ≫ p) is
/// taken nearly whole. Measuring χ² in the noise's metric, not the gap's, keeps a step that is
/// small but exact in one coordinate from being discarded with the noise of the others.
#[doc(hidden)]
pub fn step_fraction(score: &[f64], score_cov: &[Vec<f64>]) -> f64 {
    let p = score.len();
    let Some(inv) = spd_inverse(score_cov) else {
        // No noise to measure against (an exact score, or too few draws to tell): whole.
        return 1.0;
    };
    let chi2 = quadratic_form(score, &inv);
    if chi2.is_finite() && chi2 > 0.0 {
        (1.0 - p as f64 / chi2).clamp(0.0, 1.0)
    } else {
        0.0
    }
}

/// xᵀ A x, row by row.
fn quadratic_form(x: &[f64], a: &[Vec<f64>]) -> f64 {
    (0..x.len())
        .map(|j| (0..x.len()).map(|k| x[j] * a[j][k] * x[k]).sum::<f64>())
        .sum()
}
