//! The polish's walk: Monte Carlo Newton-Raphson on ℓ, a point at a time, each step's length
//! checked against the gap it reaches.

use crate::error::{Result, SagdError};
use crate::linalg::spd_inverse;
use crate::model::LatentModel;
use crate::rng::stream_seed;

use super::answer::{finish, LastPoint};
use super::parts::{continued_parts, score_parts, Continued};
use super::steps::{damped_direction, gap_sd, step_fraction, uphill_reach};
use super::{
    draws_needed, pilot, Information, LouisSettings, PolishSettings, Polished, LAG_GAP,
    NOISE_DOUBLING_GAP, PILOT_STREAM,
};

/// Monte Carlo Newton-Raphson on ℓ from `theta` (EM's estimate, say): at each point, chains on
/// every posterior give the score ∇ℓ (Fisher's identity) and the observed information I (Louis'
/// identity); ½ ∇ℓᵀ I⁻¹ ∇ℓ estimates how far ℓ is below its maximum, and the Newton step I⁻¹ ∇ℓ
/// how far θ is from it. The steps continue until that gap, less what Monte Carlo noise alone
/// puts into its estimate, is below `gap_tol`. This is the stopping rule that EM's own progress
/// cannot give when EM is slow: each Newton step covers the distance that many M-steps would.
/// A point reached by a whole step from within [`LAG_GAP`] tolerances of the maximum keeps the
/// previous point's information (when that point estimated its own) and estimates only its score.
/// The standard errors come from an information taken at the answer itself
/// ([`Polished::information`]).
pub fn polish<M: LatentModel<f64>>(
    model: &M,
    theta: &[f64],
    s: &PolishSettings,
    seed: u64,
) -> Result<Polished> {
    let mut walk = Walk {
        at: theta.to_vec(),
        gaps: Vec::new(),
        louis: s.louis,
        doublings: 0,
        step: 0,
        last: None,
        lagged: None,
        taken: Vec::new(),
        fraction: 1.0,
        runs: None,
    };
    loop {
        let Some((info, fresh)) = walk.information(model, s, seed)? else {
            continue;
        };
        let gap = info.gap - info.gap_noise;
        walk.gaps.push(gap);
        let noisy = info.gap_noise >= s.gap_tol;
        if noisy && walk.doublings < s.max_doublings && gap < NOISE_DOUBLING_GAP * info.gap_noise {
            walk.louis.draws *= 2;
            walk.doublings += 1;
        }
        if !walk
            .at
            .iter()
            .zip(&info.newton_step)
            .all(|(t, d)| (t + d).is_finite())
        {
            return Err(SagdError::NonFiniteUpdate {
                iteration: walk.step + 1,
            });
        }
        let converged = gap < s.gap_tol && !noisy;
        let last_step = converged || walk.step + 1 >= s.max_steps;
        if walk.went_too_far(gap, info.gap_noise, last_step) {
            continue;
        }
        if last_step {
            let Walk {
                at,
                gaps,
                louis,
                taken,
                runs,
                ..
            } = walk;
            let last = LastPoint {
                at,
                info,
                runs,
                gaps,
                gap,
                converged,
            };
            return finish(model, s, louis, seed, last, &taken);
        }
        walk.advance(info, gap, fresh);
    }
}

/// A point the polish stepped from: where, its Newton step (shrunk by its noise), its gap and
/// the gap's noise.
struct Accepted {
    from: Vec<f64>,
    newton: Vec<f64>,
    gap: f64,
    noise: f64,
}

/// Where [`polish`] stands between its points.
struct Walk<'a, M> {
    at: Vec<f64>,
    gaps: Vec<f64>,
    louis: LouisSettings,
    doublings: usize,
    step: usize,
    last: Option<Accepted>,
    /// The last point's information, which serves the next point when the step between them is
    /// short (lent once, never on).
    lagged: Option<Information>,
    /// Every information estimated on the way (where the standard errors' slope is read from).
    taken: Vec<Information>,
    /// The fraction of the last Newton step taken.
    fraction: f64,
    /// The runs behind this point's information where it estimated its own, which more draws
    /// continue.
    runs: Option<Continued<'a, M>>,
}

impl<'a, M: LatentModel<f64>> Walk<'a, M> {
    /// The information at this point and whether it is its own (not lent by the last point);
    /// `None` where the point was not concave and a damped step was taken from it instead.
    fn information(
        &mut self,
        model: &'a M,
        s: &PolishSettings,
        seed: u64,
    ) -> Result<Option<(Information, bool)>> {
        let point_seed = stream_seed(seed, self.step as u64);
        let near =
            self.fraction == 1.0 && matches!(&self.last, Some(l) if l.gap < LAG_GAP * s.gap_tol);
        let piloted = match self.step {
            0 => pilot(
                model,
                &self.at,
                &mut self.louis,
                s.gap_tol,
                stream_seed(seed, PILOT_STREAM),
            )?,
            _ => None,
        };
        self.runs = None;
        match (piloted, self.lagged.take().filter(|_| near)) {
            (Some((info, runs)), _) => {
                self.taken.push(info.clone());
                self.runs = Some(runs);
                Ok(Some((info, true)))
            }
            (None, Some(mut info)) => {
                // A whole step from a point within LAG_GAP tolerances of the maximum moves θ by
                // a fraction of its standard errors, where the information hardly changes: a
                // run for the score alone (one of the information's p + 1 runs) serves here.
                info.rescored(score_parts(model, &self.at, &self.louis, point_seed)?)?;
                Ok(Some((info, false)))
            }
            (None, None) => {
                let (parts, runs) = continued_parts(model, &self.at, &self.louis, point_seed)?;
                if spd_inverse(&parts.info).is_none() && self.step + 1 < s.max_steps {
                    // Not concave here (too far from the maximum for Newton): a step between
                    // Newton's and EM's, which goes uphill.
                    let d = damped_direction(&parts.info, &parts.complete, &parts.score).ok_or(
                        SagdError::NonFiniteUpdate {
                            iteration: self.step + 1,
                        },
                    )?;
                    let reach = uphill_reach(model, &self.at, &d, &self.louis, point_seed);
                    self.at
                        .iter_mut()
                        .zip(&d)
                        .for_each(|(t, v)| *t += reach * v);
                    self.gaps.push(f64::NAN);
                    self.step += 1;
                    return Ok(None);
                }
                let info = parts.into_information(&self.at)?;
                // The next points need no more draws than this one's precision says.
                self.louis.draws = draws_needed(&info, self.louis.draws, s.gap_tol);
                self.taken.push(info.clone());
                self.runs = Some(runs);
                Ok(Some((info, true)))
            }
        }
    }

    /// Whether the step to this point went too far (its gap rose by more than 3 of its errors:
    /// ℓ is far from quadratic there): then the walk is back where it was taken, with half of
    /// it. Otherwise the next step may be longer again.
    fn went_too_far(&mut self, gap: f64, noise: f64, last_step: bool) -> bool {
        let Some(last) = &self.last else {
            return false;
        };
        let rise = gap - last.gap;
        let sd = gap_sd(gap, noise).hypot(gap_sd(last.gap, last.noise));
        if !last_step && rise > 3.0 * sd {
            self.fraction *= 0.5;
            self.at = last
                .from
                .iter()
                .zip(&last.newton)
                .map(|(t, d)| t + self.fraction * d)
                .collect();
            self.step += 1;
            return true;
        }
        self.fraction = (2.0 * self.fraction).min(1.0);
        false
    }

    /// The next point: this one's Newton step, shrunk by its noise, times the fraction taken.
    fn advance(&mut self, info: Information, gap: f64, fresh: bool) {
        let shrink = step_fraction(&info.score, &info.score_cov);
        let newton: Vec<f64> = info.newton_step.iter().map(|d| shrink * d).collect();
        let from = std::mem::take(&mut self.at);
        self.at = from
            .iter()
            .zip(&newton)
            .map(|(t, d)| t + self.fraction * d)
            .collect();
        self.last = Some(Accepted {
            from,
            newton,
            gap,
            noise: info.gap_noise,
        });
        self.lagged = fresh.then_some(info);
        self.step += 1;
    }
}
