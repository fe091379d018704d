//! ranef.csv: each level's random effects given the data, the conditional modes beside the
//! conditional means (integrated, or sampled with their Monte Carlo errors).

use std::fmt::Write as _;

use sagd::glmm::{Design, Estimate, Glmm, SampledMeans};
use serde_json::json;

use super::files::csv_text;
use crate::output::{write_atomic, Staging};

/// ranef.csv into `staging`, with a note on stderr of how its means were found; where the modes
/// could not be found (`ranef`'s error), a warning instead of the file.
pub(super) fn write_ranef(
    staging: &mut Staging,
    d: &Design,
    ranef: &sagd::error::Result<Vec<Vec<Vec<Estimate>>>>,
    means: &Means,
) -> anyhow::Result<()> {
    match ranef {
        Ok(r) => {
            match means {
                Means::Blank(e) => say_err!("note: ranef.csv's mean and mean_sd are blank: {e}"),
                Means::Sampled(m) => say_err!("{}", sampled_note(m)),
                Means::Exact(_) => {}
            }
            write_atomic(&staging.path("ranef.csv"), ranef_csv(d, r, means))?
        }
        Err(e) => say_err!("warning: no ranef.csv: the random effects given the data: {e}"),
    }
    Ok(())
}

/// Each level's conditional means, as far as they were computed.
pub(super) enum Means {
    /// By quadrature, or the Gaussian family's closed form: no Monte Carlo error.
    Exact(Vec<Vec<Vec<Estimate>>>),
    /// By HMC, with their Monte Carlo errors.
    Sampled(SampledMeans),
    /// Not computed, and why.
    Blank(String),
}

impl Means {
    /// The means at θ: integrated where quadrature reaches, else sampled with `draws` a chain
    /// (blank with 0), the reason where there are none.
    pub(super) fn find(model: &Glmm, theta: &[f64], draws: usize, seed: u64) -> Means {
        match model.conditional_means(theta) {
            Ok(m) => Means::Exact(m),
            Err(_) if draws > 0 => match model.conditional_means_sampled(theta, draws, seed) {
                Ok(m) => Means::Sampled(m),
                Err(e) => Means::Blank(e.to_string()),
            },
            Err(e) => Means::Blank(format!("{e}; or sample them: --ranef-draws 500")),
        }
    }

    /// Effect `k` of level `l` of term `t`: its mean, sd and Monte Carlo error as CSV fields.
    fn fields(&self, t: usize, l: usize, k: usize) -> [String; 3] {
        let of = |e: &Estimate, mcse: f64| [e.value, e.se, mcse].map(|v| v.to_string());
        match self {
            Means::Exact(m) => of(&m[t][l][k], 0.0),
            Means::Sampled(m) => of(&m.effects[t][l][k], m.mcse[t][l][k]),
            Means::Blank(_) => Default::default(),
        }
    }

    /// How the means were found, for result.json.
    pub(super) fn json(&self) -> serde_json::Value {
        match self {
            Means::Exact(_) => json!({"method": "exact"}),
            Means::Sampled(m) => json!({
                "method": "hmc", "chains": m.chains, "draws": m.draws, "min_ess": m.min_ess,
                "max_rhat": m.max_rhat, "acceptance": m.acceptance,
            }),
            Means::Blank(why) => json!({"method": null, "why": why}),
        }
    }
}

/// What the user is told of sampled means: how, their diagnostics, and a warning where the
/// chains have not mixed.
pub(super) fn sampled_note(m: &SampledMeans) -> String {
    let how = format!(
        "ranef.csv's means are sampled by HMC ({} chains × {} draws; smallest ESS {:.0}, largest \
         R-hat {:.3}), their Monte Carlo errors in mean_mcse",
        m.chains, m.draws, m.min_ess, m.max_rhat
    );
    if m.max_rhat > 1.01 {
        format!("warning: {how}: the chains have not mixed (R-hat above 1.01); rerun with more --ranef-draws")
    } else {
        format!("note: {how}")
    }
}

/// One row per random effect of each level: the factor, the level, the effect, its
/// conditional mode and sd (lme4's `ranef` with `condVar`), and its conditional mean, sd and
/// the mean's Monte Carlo error (0 where integrated) where `means` has them (else blank).
pub(super) fn ranef_csv(d: &Design, ranef: &[Vec<Vec<Estimate>>], means: &Means) -> String {
    let mut o = String::from("group,level,effect,mode,sd,mean,mean_sd,mean_mcse\n");
    for (t, (names, term)) in d.term_names.iter().zip(ranef).enumerate() {
        for (l, (level, effects)) in names.levels.iter().zip(term).enumerate() {
            for (k, (effect, e)) in names.effects.iter().zip(effects).enumerate() {
                let [mean, mean_sd, mcse] = means.fields(t, l, k);
                let _ = writeln!(
                    o,
                    "{},{},{},{},{},{mean},{mean_sd},{mcse}",
                    csv_text(&names.group),
                    csv_text(level),
                    csv_text(effect),
                    e.value,
                    e.se
                );
            }
        }
    }
    o
}
