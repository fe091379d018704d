//! The standard errors of a polished estimate, taken at the estimate itself, with the error that
//! the estimate's own Monte Carlo error puts into them.
//!
//! The information changes with θ faster than a Newton step's size suggests: on a 300-long latent
//! AR(1) series, a point 0.24 standard errors from the maximum had a standard error 5.5% away from
//! the maximum's, six times its own Monte Carlo error. So the polish takes the information again
//! at its answer, and the two informations, at the last Newton point and at the answer, measure
//! how fast the standard errors move with θ; the answer's own Monte Carlo error (about `radius`
//! standard errors from the maximum) moves them by that much more, which the error reported for
//! them then includes.

use super::parts::{self, continued_parts};
use super::{Information, LouisSettings, SE_DOUBLINGS, SE_PRECISION};
use crate::error::Result;
use crate::linalg::spd_inverse;
use crate::model::LatentModel;

/// How far (in standard errors) from the answer the last point's information may be for
/// [`polish`](super::polish) to keep it for the standard errors (its error widened by their
/// slope, read from another point's information); farther, or with no other point, the
/// information is taken again at the answer (on a 300-long latent series, 0.24 standard errors
/// moved one standard error by 5.5%).
pub const SE_STEP: f64 = 0.1;

/// About how fast a standard error moves with θ, as a fraction of itself per standard error (a
/// 300-long latent AR(1) series: 0.23 to 0.4). The last point's information stands for the
/// answer's only where that drift over their distance is within half the standard errors' own
/// Monte Carlo error: a precise information (an exact control leaves errors of 1e-8) is taken
/// again at the answer however near.
const SE_DRIFT: f64 = 0.5;

/// How far (in standard errors) from the answer an information taken on the way may be for
/// [`polish`](super::polish) to read the standard errors' slope from it (the farthest within
/// this reach): near points give the slope only through the noise of both, far ones through the
/// curvature.
pub const SLOPE_REACH: f64 = 1.0;

/// The information behind the standard errors of `estimate`, the answer of a last step taken
/// with `step` (the last point's information): `step` itself when it lies within [`SE_STEP`] of
/// `estimate`, near enough that the standard errors' drift ([`SE_DRIFT`]) stays within their
/// noise, and another of `taken` (the informations estimated on the way) gives the slope,
/// else one taken at `estimate` with `louis`'s chains from `seed`. Its `se_error` is widened by
/// how far the answer's own Monte Carlo error, √(2·gap_noise) standard errors whatever part of
/// the step was taken (a step not taken was that much noise), moves the standard errors. With a
/// warning when the information at `estimate` is not positive definite (then `step`'s).
pub(super) fn answer_information<M: LatentModel<f64>>(
    model: &M,
    estimate: &[f64],
    mut step: Information,
    taken: &[Information],
    louis: &LouisSettings,
    seed: u64,
) -> Result<(Information, Option<String>)> {
    let radius = (2.0 * step.gap_noise).max(0.0).sqrt();
    let apart = mahalanobis(&step.matrix, estimate, &step.theta);
    let before = farthest_within(taken, estimate, SLOPE_REACH).filter(|b| b.theta != step.theta);
    let near = apart <= SE_STEP && apart * SE_DRIFT <= 0.5 * se_imprecision(&step);
    if let Some(b) = before.filter(|_| near) {
        widen(&mut step, b, apart.hypot(radius));
        return Ok((step, None));
    }
    let b = before.unwrap_or(&step);
    Ok(
        match information_at(model, estimate, b, radius, louis, seed)? {
            Some(there) => (there, None),
            None => {
                let warning = format!(
                "the information at the estimate is not positive definite; the standard errors are those of the last Newton point, {apart:.2} standard errors from it"
            );
                (step, Some(warning))
            }
        },
    )
}

/// The largest ratio of a standard error's Monte Carlo error to the standard error (∞ when it
/// has none).
pub(super) fn se_imprecision(info: &Information) -> f64 {
    if info.se_error.is_empty() {
        return f64::INFINITY;
    }
    info.se
        .iter()
        .zip(&info.se_error)
        .map(|(se, e)| e / se)
        .fold(0.0, f64::max)
}

/// The last step's Monte Carlo standard errors √diag(I⁻¹ C I⁻¹), from the information I and the
/// score's covariance C where it was taken (NaN where I is not positive definite).
pub(super) fn step_mc_se(step: &Information) -> Vec<f64> {
    let p = step.score.len();
    let inv = spd_inverse(&step.matrix).unwrap_or_else(|| vec![vec![f64::NAN; p]; p]);
    let from_information = information_step_error(step);
    (0..p)
        .map(|j| {
            let v: f64 = (0..p)
                .flat_map(|a| (0..p).map(move |b| (a, b)))
                .map(|(a, b)| inv[j][a] * step.score_cov[a][b] * inv[b][j])
                .sum();
            v.max(0.0).sqrt().hypot(from_information[j])
        })
        .collect()
}

/// The error that the information's own noise puts into the Newton step I⁻¹∇ℓ: the jackknife
/// over the replicates of I without each batch of draws (zeros without them). Where the score's
/// control variate has made the score nearly exact, this is most of the step's error.
fn information_step_error(step: &Information) -> Vec<f64> {
    let p = step.score.len();
    if step.leave_one_out.is_empty() {
        return vec![0.0; p];
    }
    let steps: Option<Vec<Vec<f64>>> = step
        .leave_one_out
        .iter()
        .map(|i| {
            spd_inverse(i).map(|inv| (0..p).map(|j| parts::dot(&inv[j], &step.score)).collect())
        })
        .collect();
    steps.map_or_else(|| vec![f64::INFINITY; p], |s| parts::jackknife_se(&s))
}

/// The information at `estimate` from a fresh run of `louis`'s chains, with its `se_error`
/// widened by [`widened_errors`] against `step`, the information at the last Newton point;
/// `radius` is the estimate's expected distance from the maximum in standard errors,
/// √tr(I Σ) with Σ the last step's Monte Carlo covariance. `Ok(None)` when the information is not
/// positive definite there.
fn information_at<M: LatentModel<f64>>(
    model: &M,
    estimate: &[f64],
    step: &Information,
    radius: f64,
    louis: &LouisSettings,
    seed: u64,
) -> Result<Option<Information>> {
    // Each doubling below takes the same runs on (the same draws as a longer run from `seed`).
    let (first, mut runs) = continued_parts(model, estimate, louis, seed)?;
    let Ok(mut info) = first.into_information(estimate) else {
        return Ok(None);
    };
    let mut draws = louis.draws;
    if info.chains_disagree() {
        // Once more with the same chains run twice as long, as the last point's (`sharpen`):
        // R̂ of few draws of a slowly mixing score stands above 1 by itself.
        if let Ok(again) = runs.extend(2 * louis.draws)?.into_information(estimate) {
            info = again;
            draws = 2 * louis.draws;
        }
    }
    // The draws were halved from the last point's on its precision; where the answer's own
    // standard errors come out less precise than asked (a small skewed design: 19% after 40
    // draws), they are doubled, as at the last point, before any warning.
    for _ in 0..SE_DOUBLINGS {
        if se_imprecision(&info) <= SE_PRECISION {
            break;
        }
        draws *= 2;
        match runs.extend(draws)?.into_information(estimate) {
            Ok(again) => info = again,
            Err(_) => break,
        }
    }
    widen(&mut info, step, radius);
    Ok(Some(info))
}

/// `info`'s `se_error` widened by [`widened_errors`] against `before`, for an answer `radius`
/// standard errors from where `info` was taken.
pub(super) fn widen(info: &mut Information, before: &Information, radius: f64) {
    if !info.se_error.is_empty() && !before.se_error.is_empty() {
        let apart = mahalanobis(&info.matrix, &info.theta, &before.theta);
        info.se_error = widened_errors(
            (&info.se, &info.se_error),
            (&before.se, &before.se_error),
            apart,
            radius,
        );
    }
}

/// Of `taken`, the information farthest from `estimate` within `reach` standard errors (in its
/// own metric), or, when none is that near, the nearest.
pub(super) fn farthest_within<'a>(
    taken: &'a [Information],
    estimate: &[f64],
    reach: f64,
) -> Option<&'a Information> {
    let apart = |i: &Information| mahalanobis(&i.matrix, estimate, &i.theta);
    let within = taken
        .iter()
        .filter(|i| apart(i) <= reach)
        .max_by(|a, b| apart(a).total_cmp(&apart(b)));
    within.or_else(|| taken.iter().min_by(|a, b| apart(a).total_cmp(&apart(b))))
}

/// √(Δᵀ I Δ), Δ = a − b: how many standard errors apart `a` and `b` are in the metric of `info`.
pub(super) fn mahalanobis(info: &[Vec<f64>], a: &[f64], b: &[f64]) -> f64 {
    let d: Vec<f64> = a.iter().zip(b).map(|(x, y)| x - y).collect();
    let q: f64 = info
        .iter()
        .zip(&d)
        .map(|(row, dj)| dj * row.iter().zip(&d).map(|(v, dk)| v * dk).sum::<f64>())
        .sum();
    q.max(0.0).sqrt()
}

/// The errors of the standard errors `(se, error)` taken at the estimate, widened by how far the
/// estimate's own Monte Carlo error moves them: each standard error's rate of change with θ is
/// its change from `before` (taken `apart` standard errors away), less what the two errors
/// explain, over that distance; over the estimate's `radius` it moves by that rate times
/// `radius`, in
/// whichever direction the estimate's error lies (the rate along one direction stands for the
/// rate along a random one: √p times larger in the gradient's own direction, √p times smaller
/// in that of a random unit vector). Two points nearer than `radius` cannot tell the slope from
/// their noise: then their whole difference is taken as the change over the radius (an upper
/// bound, not a slope read from noise over a short distance).
pub(super) fn widened_errors(
    (se, error): (&[f64], &[f64]),
    (se_before, error_before): (&[f64], &[f64]),
    apart: f64,
    radius: f64,
) -> Vec<f64> {
    let over = apart.max(radius);
    se.iter()
        .zip(error)
        .zip(se_before.iter().zip(error_before))
        .map(|((s, e), (b, eb))| {
            let moved = if apart >= radius {
                ((s - b).powi(2) - e * e - eb * eb).max(0.0)
            } else {
                (s - b).powi(2)
            };
            let rate2 = if over > 0.0 {
                moved / (over * over)
            } else {
                0.0
            };
            (e * e + rate2 * radius * radius).sqrt()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_standard_errors_elsewhere_leave_the_error_as_it_was() {
        let w = widened_errors((&[1.0], &[0.01]), (&[1.0], &[0.01]), 1.0, 0.1);
        assert!((w[0] - 0.01).abs() < 1e-15);
        // A change within the two errors, over more than the radius, is noise: not a rate.
        let w = widened_errors((&[1.0], &[0.01]), (&[1.012], &[0.01]), 0.2, 0.1);
        assert!((w[0] - 0.01).abs() < 1e-15);
    }

    #[test]
    fn a_standard_error_that_moves_with_theta_widens_its_error_by_the_rate_times_the_radius() {
        // 0.05 apart over 0.5 standard errors, errors 0.003: a rate of √(0.05² − 2·0.003²)/0.5,
        // over a radius 0.1.
        let w = widened_errors((&[1.0], &[0.003]), (&[1.05], &[0.003]), 0.5, 0.1);
        let rate = (0.05f64.powi(2) - 2.0 * 0.003f64.powi(2)).sqrt() / 0.5;
        let want = (0.003f64.powi(2) + (rate * 0.1).powi(2)).sqrt();
        assert!((w[0] - want).abs() < 1e-15, "{} vs {want}", w[0]);
        // Nearer than the radius: the whole change, noise and all, not a steeper rate.
        let w = widened_errors((&[1.0], &[0.003]), (&[1.004], &[0.003]), 0.01, 0.1);
        assert!((w[0] - (0.003f64.powi(2) + 0.004f64.powi(2)).sqrt()).abs() < 1e-15);
    }

    #[test]
    fn standard_errors_apart_in_the_informations_metric() {
        let info = vec![vec![4.0, 0.0], vec![0.0, 1.0]];
        let d = mahalanobis(&info, &[1.5, 2.0], &[1.0, 2.0]);
        assert!((d - 1.0).abs() < 1e-15);
    }
}
