//! The polish's answer from its last point: the draws added there until its standard errors and
//! its step are precise enough, the step shrunk by its noise, the answer's own information for the
//! standard errors, and the warnings that say what the answer needs care for.

use super::at_estimate::{self, se_imprecision};
use super::parts::{self, louis_parts, score_parts, Continued, CHAIN_RHAT_LIMIT};
use super::{
    step_fraction, Information, LouisSettings, PolishSettings, Polished, SE_DOUBLINGS,
    SE_PRECISION, STEP_NOISE,
};
use crate::error::Result;
use crate::model::LatentModel;
use crate::rng::stream_seed;

/// The least fraction of a Newton step ([`step_fraction`]: χ² ≥ 10 p, the step clear of its
/// noise) that marks the score as precise: then [`finish`] measures the score at the estimate
/// and takes the step it gives, shrunk by its noise.
const FURTHER_STEP: f64 = 0.9;

/// The stream under the polish's seed of [`finish`]'s run for the score at the estimate (apart
/// from the steps' `0..max_steps` and the extra draws' after them).
const FURTHER_STREAM: u64 = 0xF0_0000;

/// Where [`polish`](super::polish) stopped: its last point, that point's information, the gaps on the way and
/// the last one's, and whether that was below the tolerance.
pub(super) struct LastPoint<'a, M> {
    pub(super) at: Vec<f64>,
    pub(super) info: Information,
    /// The runs behind `info` where the point estimated its own, which more draws continue.
    pub(super) runs: Option<Continued<'a, M>>,
    pub(super) gaps: Vec<f64>,
    pub(super) gap: f64,
    pub(super) converged: bool,
}

/// [`polish`](super::polish)'s answer from its last point: more draws there until its standard errors and its
/// step are precise enough ([`sharpen`]), the step shrunk by its noise, the answer's own
/// information for the standard errors, and what the answer needs care for.
pub(super) fn finish<M: LatentModel<f64>>(
    model: &M,
    s: &PolishSettings,
    louis: LouisSettings,
    seed: u64,
    last: LastPoint<'_, M>,
    taken: &[Information],
) -> Result<Polished> {
    let LastPoint {
        at,
        info,
        runs,
        gaps,
        gap,
        converged,
    } = last;
    let (info, draws) = sharpen(model, s, louis, seed, (&at, info, runs))?;
    let shrink = step_fraction(&info.score, &info.score_cov);
    let estimate: Vec<f64> = at
        .iter()
        .zip(&info.newton_step)
        .map(|(t, d)| t + shrink * d)
        .collect();
    let step_info = info.clone();
    let seed = stream_seed(seed, (s.max_steps + SE_DOUBLINGS + 1) as u64);
    // The answer's information serves its standard errors alone (its score moves nothing): the
    // draws halved while the last point's standard errors, with their error grown by √2 at each
    // halving, would still be within half the precision asked for, and each of the jackknife's
    // batches keeps 4 draws or more.
    let mut draws = draws;
    let mut imprecision = se_imprecision(&step_info);
    while imprecision * std::f64::consts::SQRT_2 <= 0.5 * SE_PRECISION
        && draws / 2 >= 4 * parts::SE_BATCHES
    {
        draws /= 2;
        imprecision *= std::f64::consts::SQRT_2;
    }
    let again = LouisSettings { draws, ..louis };
    let mut gaps = gaps;
    // Where the last step was measured precisely (the score's control variate leaves little
    // noise on a nearly Gaussian posterior), what it left is worth measuring too: ℓ's curvature
    // changes along a step (a binary random intercept's log-sd: the step from 0.02 nats below
    // the maximum landed a third short). The score at the estimate, from a run for the score
    // alone with the last point's information lent, gives one more Newton step, shrunk by its
    // noise, whose errors are then the estimate's.
    let there = if step_fraction(&step_info.score, &step_info.score_cov) >= FURTHER_STEP {
        let seed = stream_seed(seed, FURTHER_STREAM);
        let mut lent = step_info.clone();
        lent.rescored(score_parts(model, &estimate, &again, seed)?)?;
        Some(lent)
    } else {
        None
    };
    let further = there
        .as_ref()
        .map_or(0.0, |t| step_fraction(&t.score, &t.score_cov));
    let (at, last, estimate) = match there {
        Some(there) if further > 0.0 => {
            gaps.push(there.gap - there.gap_noise);
            let next = estimate
                .iter()
                .zip(&there.newton_step)
                .map(|(t, d)| t + further * d)
                .collect();
            (estimate, there, next)
        }
        _ => (at, step_info.clone(), estimate),
    };
    // The standard errors are the answer's own, taken once the answer has stopped moving.
    let (mut info, warning) =
        at_estimate::answer_information(model, &estimate, info, taken, &again, seed)?;
    // The answer is `estimate`, so its intervals are centred there.
    info.wald95 = parts::wald95(&estimate, &info.se);
    let se_warning = answer_warnings(s, &info, &step_info, warning, gap, converged);
    Ok(Polished {
        last_point: at,
        last_step: last.newton_step.clone(),
        estimate,
        mc_se: at_estimate::step_mc_se(&last),
        gap_noise: last.gap_noise,
        information: info,
        se_warning,
        gaps,
        converged,
    })
}

/// More draws at the last point `at` until the standard errors are within [`SE_PRECISION`], the
/// step's noise part within [`STEP_NOISE`] of the tolerance and its chains agree
/// ([`CHAIN_RHAT_LIMIT`], one doubling for that), [`SE_DOUBLINGS`] times at most:
/// the point's information, and the draws per chain its matrix came from. A doubling takes the
/// point's `runs` on where there are any (its draws kept, half the cost), else runs afresh.
fn sharpen<M: LatentModel<f64>>(
    model: &M,
    s: &PolishSettings,
    louis: LouisSettings,
    seed: u64,
    (at, mut info, mut runs): (&[f64], Information, Option<Continued<'_, M>>),
) -> Result<(Information, usize)> {
    let mut more = 0;
    let mut draws = louis.draws;
    let step_noise = STEP_NOISE * s.gap_tol;
    let most = louis.draws << SE_DOUBLINGS;
    // Chains that disagree about a point's score (R̂ above the limit) get one doubling of the
    // whole information, which measures R̂ again on chains twice as long: with few draws of a slowly mixing score (a
    // control variate leaves little else), R̂ stands above 1 by about the inverse of the
    // draws' effective number; chains that still disagree then are reported.
    let mut rhat_doubled = false;
    let rhat_asks = |info: &Information, doubled: bool| info.chains_disagree() && !doubled;
    while (se_imprecision(&info) > SE_PRECISION
        || info.gap_noise > step_noise
        || rhat_asks(&info, rhat_doubled))
        && more < SE_DOUBLINGS
    {
        more += 1;
        let seed = stream_seed(seed, (s.max_steps + more) as u64);
        if se_imprecision(&info) <= SE_PRECISION && !rhat_asks(&info, rhat_doubled) {
            // Only the step is short of draws: a run for the score alone (a fraction of the
            // information's p + 1 runs), pooled with the draws the point has, with as many more
            // as its noise asks for.
            let want = (info.draws as f64 * 1.5 * info.gap_noise / step_noise).ceil();
            let extra = (want as usize)
                .saturating_sub(info.draws)
                .clamp((louis.draws / 2).max(2), most);
            let again = LouisSettings {
                draws: extra,
                ..louis
            };
            info.pooled(score_parts(model, at, &again, seed)?)?;
            if extra == most {
                break;
            }
            continue;
        }
        rhat_doubled |= info.chains_disagree();
        let parts = match runs.as_mut() {
            Some(runs) => {
                draws = 2 * runs.drawn();
                runs.extend(draws)?
            }
            None => {
                draws *= 2;
                louis_parts(model, at, &LouisSettings { draws, ..louis }, seed)?
            }
        };
        match parts.into_information(at) {
            Ok(i) => info = i,
            Err(_) => break,
        }
    }
    Ok((info, draws))
}

/// What the polished answer needs care for, in one line: the polish ran out of Newton steps
/// (first), the answer's information was not its own (`warning`), its standard errors or its
/// last step are less precise than asked, or a point's chains disagree.
fn answer_warnings(
    s: &PolishSettings,
    info: &Information,
    step_info: &Information,
    warning: Option<String>,
    gap: f64,
    converged: bool,
) -> Option<String> {
    let mut warnings: Vec<String> = warning.into_iter().collect();
    let imprecision = se_imprecision(info);
    if imprecision > SE_PRECISION {
        warnings.push(format!(
            "the standard errors' own Monte Carlo error is up to {:.0}% of them after {} draws per chain; treat their last digit with care, or polish with more draws",
            100.0 * imprecision,
            info.draws
        ));
    }
    if step_info.gap_noise > STEP_NOISE * s.gap_tol {
        warnings.push(format!(
            "the last Newton step's own Monte Carlo noise leaves the estimate about {:.4} nats below the maximum after {} draws per chain; polish with more draws for a closer estimate",
            step_info.gap_noise, step_info.draws
        ));
    }
    let rhat = [info.chain_rhat, step_info.chain_rhat]
        .into_iter()
        .flatten()
        .reduce(f64::max);
    if let Some(r) = rhat.filter(|r| *r > CHAIN_RHAT_LIMIT) {
        warnings.push(format!(
            "a point's chains disagree about its score (R-hat {r:.3} > {CHAIN_RHAT_LIMIT}): its posterior may have several modes, or the chains mix too slowly for these draws"
        ));
    }
    if !converged {
        warnings.insert(
            0,
            format!(
                "the polish used its {} Newton steps without its gap estimate falling below {} (last {:.4} nats beyond its noise, the noise part {:.4}): the estimate may lie below the maximum; run EM further or polish again from it",
                s.max_steps, s.gap_tol, gap, step_info.gap_noise
            ),
        );
    }
    (!warnings.is_empty()).then(|| warnings.join("; "))
}
