//! Table 1: replications of one case in parallel, and their summary beside the paper's numbers.

use std::collections::BTreeMap;

use sagd::diagnostics::mean_sd;
use sagd::error::{Result, SagdError};
use sagd::metrics::Law;
use serde::{Deserialize, Serialize};

use super::eval::Evaluation;
use super::replicate::{replicate, Replication, RunOptions};
use super::{Case, E2Settings, Method};

/// The methods of the paper's Table 1, in its column order.
pub const PAPER_METHODS: [Method; 4] = [Method::Vae, Method::Iwae, Method::Hmc, Method::Sagd];

/// The paper's Table 1 for `case` and `metric` ("D" or "W"): (mean, standard error) for VAE,
/// IWAE, HMC and SAGD.
pub fn paper(case: Case, metric: &str) -> Option<[(f64, f64); 4]> {
    let d = metric == "D";
    Some(match (case, d) {
        (Case::Normal, true) => [
            (0.033, 0.0024),
            (0.043, 0.0035),
            (0.032, 0.0019),
            (0.033, 0.0020),
        ],
        (Case::Normal, false) => [
            (0.052, 0.0040),
            (0.066, 0.0047),
            (0.050, 0.0032),
            (0.052, 0.0035),
        ],
        (Case::Exp, true) => [
            (0.095, 0.0018),
            (0.059, 0.0039),
            (0.085, 0.0016),
            (0.064, 0.0029),
        ],
        (Case::Exp, false) => [
            (0.226, 0.0079),
            (0.125, 0.0091),
            (0.161, 0.0051),
            (0.115, 0.0082),
        ],
        (Case::Mixture, true) => [
            (0.127, 0.0027),
            (0.098, 0.0061),
            (0.104, 0.0015),
            (0.085, 0.0019),
        ],
        (Case::Mixture, false) => [
            (0.320, 0.0025),
            (0.165, 0.0059),
            (0.276, 0.0021),
            (0.197, 0.0031),
        ],
        (Case::Highdim, true) => [
            (0.093, 0.0010),
            (0.080, 0.0012),
            (0.092, 0.0008),
            (0.065, 0.0005),
        ],
        (Case::Highdim, false) => [
            (0.222, 0.0027),
            (0.158, 0.0029),
            (0.212, 0.0030),
            (0.093, 0.0015),
        ],
    })
    .filter(|_| d || metric == "W")
}

/// A mean with its standard error (none for a single value without coordinates).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    /// The mean.
    pub mean: f64,
    /// Its standard error: over replications, or over coordinates for one replication of several.
    pub se: Option<f64>,
}

impl std::fmt::Display for Summary {
    /// `mean (se)` as Table 1 prints it: three decimals, the standard error four.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.se {
            Some(se) => write!(f, "{:.3} ({:.4})", self.mean, se),
            None => write!(f, "{:.3}", self.mean),
        }
    }
}

/// Table 1 for one case: every replication and the summaries.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Table1 {
    /// The case.
    pub case: Case,
    /// The settings run.
    pub settings: E2Settings,
    /// How the settings relate to the paper's.
    pub settings_profile: String,
    /// The true latent law.
    pub law: Law,
    /// The replications' seeds.
    pub seeds: Vec<u64>,
    /// `pretrained_D`, `vae_W`, …: mean and standard error of each metric.
    pub summary: BTreeMap<String, Summary>,
    /// Mean wall seconds per replication of `pretrain` and of each method.
    pub mean_time_s: BTreeMap<String, f64>,
    /// The replications, in seed order.
    pub replications: Vec<Replication>,
}

impl Table1 {
    /// The summary of `who` ("pretrained" or a method's name) for `metric` ("D" or "W").
    pub fn get(&self, who: &str, metric: &str) -> Option<Summary> {
        self.summary.get(&format!("{who}_{metric}")).copied()
    }

    /// The paper's number for `method` (its column: the paper's SAGD for both SAGD rows) and
    /// `metric` in this case.
    pub fn paper(&self, method: Method, metric: &str) -> Option<Summary> {
        let i = PAPER_METHODS
            .iter()
            .position(|m| *m == method.paper_column())?;
        let (mean, se) = paper(self.case, metric)?[i];
        Some(Summary { mean, se: Some(se) })
    }

    /// Whether `method`'s row can be set against the paper's: the run has the paper's settings
    /// (beside SAGD's own, [`E2Settings::differs_from_paper`]) and the method is the paper's.
    pub fn comparable(&self, method: Method) -> bool {
        self.settings.differs_from_paper(self.case).is_empty()
            && (method != Method::Sagd || self.settings.sagd_differs_from_paper().is_empty())
    }

    /// How far `method`'s mean is from the paper's, in standard errors of the difference; `None`
    /// where the two are not [`comparable`](Table1::comparable).
    pub fn z_vs_paper(&self, method: Method, metric: &str) -> Option<f64> {
        if !self.comparable(method) {
            return None;
        }
        let ours = self.get(method.name(), metric)?;
        let theirs = self.paper(method, metric)?;
        let pse = theirs.se.unwrap_or(0.0);
        let se = (ours.se.unwrap_or(0.0).powi(2) + pse * pse).sqrt();
        Some((ours.mean - theirs.mean) / se)
    }
}

/// Mean and standard error over values (none for a single value).
fn mean_se(v: &[f64]) -> Summary {
    let (m, sd) = mean_sd(v);
    Summary {
        mean: m,
        se: (v.len() > 1).then(|| sd / (v.len() as f64).sqrt()),
    }
}

/// Replications `seeds` of `case` with settings `s`, in parallel (the first keeps its draws of Z
/// for Figure 2), summarised. `paper_settings` only names the profile in the result.
pub fn run_table(
    s: &E2Settings,
    case: Case,
    paper_settings: bool,
    seeds: &[u64],
    opts: &RunOptions,
    progress: &(dyn Fn(&str, usize, usize) + Sync),
) -> Result<Table1> {
    s.validate()?;
    if seeds.is_empty() {
        return Err(SagdError::InvalidSetting {
            name: "replications",
            value: "0".into(),
            fix: "run at least one replication".into(),
        });
    }
    let law = case.law();
    let first = seeds.first().copied();
    let one = |seed: u64| {
        let o = RunOptions {
            keep_samples: opts.keep_samples || Some(seed) == first,
            ..opts.clone()
        };
        replicate(s, &law, seed, &o, progress).map_err(|e| SagdError::Context {
            what: format!("replication {seed}"),
            cause: Box::new(e),
        })
    };
    // Replications side by side, split over the processes of a split run; with fewer
    // replications than processes, one at a time with their methods split instead.
    let replications: Vec<Replication> = if seeds.len() >= sagd::share::size() {
        // What the result file leaves out (the draws, data and decoders of the figures) travels
        // beside it.
        sagd::share::map(seeds.len(), |k| {
            let mut r = one(seeds[k])?;
            let kept = (
                std::mem::take(&mut r.samples),
                std::mem::take(&mut r.x),
                std::mem::take(&mut r.decoders),
            );
            Ok((r, kept))
        })?
        .into_iter()
        .map(|(mut r, (samples, x, decoders))| {
            (r.samples, r.x, r.decoders) = (samples, x, decoders);
            r
        })
        .collect()
    } else {
        seeds.iter().map(|&seed| one(seed)).collect::<Result<_>>()?
    };
    let summary = summarise(&replications, &s.methods);
    let mean_time_s = mean_times(&replications, &s.methods);
    Ok(Table1 {
        case,
        settings: s.clone(),
        settings_profile: {
            let over = s.overrides(&case.settings(paper_settings));
            if over.is_empty() {
                case.profile(paper_settings).to_string()
            } else {
                format!(
                    "{}, except {}",
                    case.profile(paper_settings),
                    over.join(", ")
                )
            }
        },
        law,
        seeds: seeds.to_vec(),
        summary,
        mean_time_s,
        replications,
    })
}

/// Mean (standard error) over replications of D and W, per fitted model (`pretrained_D`,
/// `vae_W`, …). One replication of several coordinates: the standard error is over coordinates.
fn summarise(replications: &[Replication], methods: &[Method]) -> BTreeMap<String, Summary> {
    let mut summary = BTreeMap::new();
    for metric in ["D", "W"] {
        let pick = |e: &Evaluation| if metric == "D" { e.ks } else { e.w1 };
        let coord_se = |e: &Evaluation| if metric == "D" { e.ks_se } else { e.w1_se };
        let over = |evals: Vec<&Evaluation>| {
            let mut v = mean_se(&evals.iter().map(|e| pick(e)).collect::<Vec<_>>());
            if v.se.is_none() && evals.len() == 1 {
                v.se = coord_se(evals[0]);
            }
            v
        };
        let pre = over(replications.iter().map(|r| &r.pretrained).collect());
        summary.insert(format!("pretrained_{metric}"), pre);
        for m in methods {
            let v = over(
                replications
                    .iter()
                    .map(|r| &r.methods[m.name()].eval)
                    .collect(),
            );
            summary.insert(format!("{}_{metric}", m.name()), v);
        }
    }
    summary
}

/// Mean wall seconds per replication of pre-training and of each method.
fn mean_times(replications: &[Replication], methods: &[Method]) -> BTreeMap<String, f64> {
    let mean_time = |f: &dyn Fn(&Replication) -> f64| {
        mean_se(&replications.iter().map(f).collect::<Vec<_>>()).mean
    };
    let mut mean_time_s = BTreeMap::new();
    mean_time_s.insert("pretrain".to_string(), mean_time(&|r| r.pretrain_time_s));
    for m in methods {
        mean_time_s.insert(
            m.name().to_string(),
            mean_time(&|r| r.methods[m.name()].time_s),
        );
    }
    mean_time_s
}
