//! Choosing between fitted deconvolutions. With no true latent law, the one thing the data can
//! judge is how well each fitted model predicts observations it was not trained on: the held-out
//! log-likelihood, compared model against model on the same observations (paired), so that the
//! spread of the observations themselves cancels from the differences.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Paired standard errors below which two models count as tied.
pub const TIE_Z: f64 = 2.0;

/// Paired standard errors above which the best model is clearly better.
pub const CLEAR_Z: f64 = 3.0;

/// How sure the recommendation is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Confidence {
    /// The best model is ahead of every other by at least [`CLEAR_Z`] paired standard errors.
    Clear,
    /// Ahead of every other by at least [`TIE_Z`], not all by [`CLEAR_Z`].
    Likely,
    /// Some other model is within [`TIE_Z`] paired standard errors: the data cannot choose.
    Undecided,
}

/// One fitted model's held-out score.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ModelScore {
    /// The fitted model (`pretrained` or a method).
    pub model: String,
    /// Mean held-out log-likelihood per observation (unit-noise scale).
    pub mean: f64,
    /// Its standard error over the held-out observations.
    pub se: f64,
    /// How far below the best model it is, per observation (0 for the best).
    pub below_best: f64,
    /// The paired standard error of that difference.
    pub below_best_se: f64,
}

/// The comparison of the fitted models on held-out observations.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct HeldOut {
    /// Held-out observations.
    pub n: usize,
    /// Every model, best first.
    pub scores: Vec<ModelScore>,
    /// The model with the highest held-out log-likelihood, which the data may not tell apart
    /// from others ([`HeldOut::chosen`]).
    pub best: String,
    /// The model the data choose: `best` when it is ahead of every other by at least [`TIE_Z`]
    /// paired standard errors (or is the only one), none when they cannot choose.
    #[serde(default)]
    pub chosen: Option<String>,
    /// How sure the choice is.
    pub confidence: Confidence,
    /// The recommendation in words.
    pub advice: String,
}

fn mean_se(v: &[f64]) -> (f64, f64) {
    let n = v.len() as f64;
    let mean = v.iter().sum::<f64>() / n;
    let var = v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0).max(1.0);
    (mean, (var / n).sqrt())
}

/// Compares models by their per-observation held-out log-likelihoods (the same observations, in
/// the same order, for every model; at least one model and two observations).
pub fn compare(per_point: &BTreeMap<String, Vec<f64>>) -> HeldOut {
    let mut scores: Vec<ModelScore> = per_point
        .iter()
        .map(|(model, v)| {
            let (mean, se) = mean_se(v);
            ModelScore {
                model: model.clone(),
                mean,
                se,
                below_best: 0.0,
                below_best_se: 0.0,
            }
        })
        .collect();
    scores.sort_by(|a, b| b.mean.total_cmp(&a.mean));
    let best = scores[0].model.clone();
    let top = &per_point[&best];
    for s in scores.iter_mut().skip(1) {
        let diff: Vec<f64> = top
            .iter()
            .zip(&per_point[&s.model])
            .map(|(a, b)| a - b)
            .collect();
        (s.below_best, s.below_best_se) = mean_se(&diff);
    }
    let z = |s: &ModelScore| {
        if s.below_best_se > 0.0 {
            s.below_best / s.below_best_se
        } else {
            0.0
        }
    };
    let others = &scores[1..];
    let weakest = others.iter().map(z).fold(f64::INFINITY, f64::min);
    let confidence = if weakest >= CLEAR_Z {
        Confidence::Clear
    } else if weakest >= TIE_Z {
        Confidence::Likely
    } else {
        Confidence::Undecided
    };
    let advice = match confidence {
        _ if others.is_empty() => format!("{best} is the only fitted model"),
        Confidence::Clear => format!(
            "{best} predicts held-out observations best, ahead of every other model by at least \
             {weakest:.1} paired standard errors: use it"
        ),
        Confidence::Likely => format!(
            "{best} predicts held-out observations best, ahead of every other model by \
             {weakest:.1} paired standard errors or more: probably the best (more data would \
             settle it)"
        ),
        Confidence::Undecided => {
            let tied: Vec<String> = others
                .iter()
                .filter(|s| z(s) < TIE_Z)
                .map(|s| format!("{} ({:.4} ± {:.4})", s.model, s.below_best, s.below_best_se))
                .collect();
            format!(
                "the data cannot choose: {} within {TIE_Z} paired standard errors of {best} \
                 (nats per observation below it); their latent laws predict the observations \
                 equally well, so where they differ the data do not say which is right",
                tied.join(", ")
            )
        }
    };
    let chosen = (others.is_empty() || confidence != Confidence::Undecided).then(|| best.clone());
    HeldOut {
        n: top.len(),
        scores,
        best,
        chosen,
        confidence,
        advice,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scores(models: &[(&str, f64, f64)], n: usize) -> BTreeMap<String, Vec<f64>> {
        // Observations that vary a lot (sd 1) shared by every model, plus each model's own offset
        // and a little noise of its own: only pairing sees the offsets.
        models
            .iter()
            .map(|&(name, offset, noise)| {
                let v = (0..n)
                    .map(|i| {
                        let shared = ((i * 7919) % 1000) as f64 / 1000.0 * 3.4 - 1.7;
                        let own = (((i + 31 * name.as_bytes()[0] as usize) * 104_729) % 997) as f64
                            / 997.0
                            - 0.5;
                        -1.5 + shared + offset + noise * own
                    })
                    .collect();
                (name.to_string(), v)
            })
            .collect()
    }

    #[test]
    fn a_model_ahead_by_many_paired_errors_is_chosen_clearly() {
        let h = compare(&scores(&[("a", 0.0, 0.01), ("b", 0.02, 0.01)], 200));
        assert_eq!(h.best, "b");
        assert_eq!(h.chosen.as_deref(), Some("b"));
        assert_eq!(h.confidence, Confidence::Clear, "{h:?}");
        // Unpaired, the 0.02 would be lost in the observations' spread (se about 0.07).
        assert!(h.scores[0].se > 0.05, "{h:?}");
        assert!(h.advice.contains("use it"));
    }

    #[test]
    fn models_within_their_paired_errors_are_a_tie() {
        let h = compare(&scores(&[("a", 0.0, 0.05), ("b", 0.001, 0.05)], 200));
        assert_eq!(h.confidence, Confidence::Undecided, "{h:?}");
        assert!(h.advice.contains("cannot choose"), "{}", h.advice);
        assert_eq!(h.scores[1].model, "a");
        // The highest score is not a choice the data made.
        assert_eq!(h.chosen, None);
    }
}
