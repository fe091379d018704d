//! `sagd glmm`'s inputs: the flags' family, formula, data, weights, models and settings, read
//! and checked before anything is written.

use anyhow::{Context, Result};
use sagd::em::EmSettings;
use sagd::glmm::{
    Criterion, Design, ExactSettings, Family, FitSettings, Formula, Frame, Glmm, Method,
    SampledMeans,
};

use super::anova::other_design;
use super::predict::NewRows;
use super::GlmmArgs;
use crate::input::read_table;

/// What a run reads and checks before it writes anything.
pub(super) struct Inputs {
    pub(super) family: Family,
    pub(super) formula: Formula,
    pub(super) frame: Frame,
    pub(super) design: Design,
    /// The --weights column's values at the design's rows.
    pub(super) weights: Option<Vec<f64>>,
    pub(super) model: Glmm,
    /// The --compare models, on the same rows and weights.
    pub(super) others: Vec<Glmm>,
    pub(super) new_rows: Option<NewRows>,
    pub(super) settings: FitSettings,
}

impl Inputs {
    /// The flags' family, formula, data, weights, models, new rows and settings, each checked.
    pub(super) fn read(a: &GlmmArgs) -> Result<Inputs> {
        let family: Family = a
            .family
            .parse()
            .map_err(|e| anyhow::anyhow!("--family: {e}"))?;
        let formula = Formula::parse(&a.formula)?;
        let frame = read_table(&a.data)?;
        let design = formula
            .design(&frame)
            .with_context(|| format!("the formula on {}", a.data.display()))?;
        let weights = match &a.weights {
            Some(column) => Some(frame.numbers_at(column, &design.rows, "--weights")?),
            None => None,
        };
        let model = weighted_model(&design, family, weights.as_deref())?;
        let others = (a.compare.iter())
            .map(|f| {
                let other = other_design(f, &frame, &design)?;
                weighted_model(&other, family, weights.as_deref())
            })
            .collect::<Result<Vec<_>>>()?;
        let new_rows = match &a.predict {
            Some(path) => Some(NewRows::read(
                path,
                &formula,
                &frame,
                (a.weights.as_deref(), family),
            )?),
            None => None,
        };
        let settings = fit_settings(a, family)?;
        Ok(Inputs {
            family,
            formula,
            frame,
            design,
            weights,
            model,
            others,
            new_rows,
            settings,
        })
    }
}

/// The model of `design` in `family` under --weights `w`: the Gaussian's prior weights, or the
/// binomial's trials, its response then the proportion of them that succeeded (lme4's
/// `glmer(y ~ …, weights = w, family = binomial)`).
pub(super) fn weighted_model(design: &Design, family: Family, w: Option<&[f64]>) -> Result<Glmm> {
    let Some(w) = w else {
        return Ok(design.glmm(family)?);
    };
    if family != Family::Binomial {
        return design.glmm(family)?.with_weights(w).context("--weights");
    }
    let row = |k: usize| format!("data row {}", design.rows[k] + 1);
    let given = (&design.y[..], design.trials.as_deref());
    let (y, trials) = Glmm::weighted_proportions(given, w, row).context("--weights")?;
    let counts = Design {
        y,
        trials: Some(trials),
        ..design.clone()
    };
    Ok(counts.glmm(family)?)
}

/// The fit's settings from the flags, each checked against the others and the family.
fn fit_settings(a: &GlmmArgs, family: Family) -> Result<FitSettings> {
    let method: Method = a
        .method
        .parse()
        .map_err(|e| anyhow::anyhow!("--method: {e}"))?;
    if (1..SampledMeans::MIN_DRAWS).contains(&a.ranef_draws) {
        anyhow::bail!(
            "--ranef-draws {}: use 0 (no sampled means) or at least {} draws a chain",
            a.ranef_draws,
            SampledMeans::MIN_DRAWS
        );
    }
    if a.simulate_conditional && a.simulate.is_none() {
        anyhow::bail!("--simulate-conditional: give the number of draws too, --simulate N");
    }
    if a.simulate == Some(0) {
        anyhow::bail!("--simulate 0: give the number of draws, 1 or more");
    }
    if a.bootstrap.is_some_and(|n| n < 2) {
        anyhow::bail!("--bootstrap {}: give the number of refits, 2 or more (lme4's bootMer takes 100 to 1000)", a.bootstrap.unwrap_or(0));
    }
    if a.checkpoints.asked() && a.bootstrap.is_none() && a.compare_bootstrap.is_none() {
        anyhow::bail!("--checkpoint-every, --resume: sagd glmm keeps the refits of its bootstraps only; give --bootstrap N or --compare-bootstrap N");
    }
    if a.compare_bootstrap.is_some() && a.compare.is_empty() {
        anyhow::bail!("--compare-bootstrap: give the model to compare with, --compare 'FORMULA'");
    }
    if let Some(n) = a.compare_bootstrap.filter(|&n| n < 2) {
        anyhow::bail!("--compare-bootstrap {n}: give the number of draws, 2 or more (pbkrtest's PBmodcomp takes 1000)");
    }
    if !(a.bootstrap_level > 0.0 && a.bootstrap_level < 1.0) {
        anyhow::bail!(
            "--bootstrap-level {}: give the intervals' level between 0 and 1, e.g. 0.95",
            a.bootstrap_level
        );
    }
    if a.reml && family != Family::Gaussian {
        anyhow::bail!("--reml: REML is for the Gaussian family only; leave it out for {family:?}");
    }
    check_tests(a, family, method)?;
    if let Some(level) = a.profile {
        if !(level > 0.0 && level < 1.0) {
            anyhow::bail!(
                "--profile {level}: give the intervals' level between 0 and 1, e.g. 0.95"
            );
        }
        if a.reml {
            anyhow::bail!("--profile: the intervals profile the likelihood, not REML's criterion; leave out --reml");
        }
        if method == Method::Em {
            anyhow::bail!(
                "--profile: the intervals need the exact likelihood; leave out --method em"
            );
        }
    }
    Ok(FitSettings {
        method,
        exact: ExactSettings {
            criterion: if a.reml {
                Criterion::Reml
            } else {
                Criterion::Ml
            },
            nodes: a.nodes,
            ..ExactSettings::default()
        },
        em: EmSettings {
            max_msteps: a.max_msteps,
            ..EmSettings::default()
        },
        seed: a.seed,
    })
}

/// The flags of lmerTest's tests (--ddf, --ranova, --step, --ls-means) checked against the family and
/// the method.
fn check_tests(a: &GlmmArgs, family: Family, method: Method) -> Result<()> {
    if a.ranova && family != Family::Gaussian {
        anyhow::bail!("--ranova: lmerTest's ranova tests a Gaussian model's random effects; compare {family:?} models with --compare 'FORMULA'");
    }
    if a.ranova && method == Method::Em {
        anyhow::bail!("--ranova: the tests need the exact likelihood; leave out --method em");
    }
    if a.step && family != Family::Gaussian {
        anyhow::bail!("--step: lmerTest's step reduces a Gaussian model; test {family:?} models' fixed effects with --drop1 and their random effects with --compare 'FORMULA'");
    }
    if a.step && method == Method::Em {
        anyhow::bail!("--step: the tests need the exact likelihood; leave out --method em");
    }
    for (flag, alpha) in [
        ("--step-alpha-random", a.step_alpha_random),
        ("--step-alpha-fixed", a.step_alpha_fixed),
    ] {
        if !(0.0..=1.0).contains(&alpha) {
            anyhow::bail!("{flag} {alpha}: a threshold of p-values is in [0, 1] (lmerTest's are 0.1 and 0.05)");
        }
    }
    if let Some(ddf) = &a.ddf {
        if family != Family::Gaussian {
            anyhow::bail!("--ddf {ddf}: its degrees of freedom are the Gaussian family's t and F tests (lmerTest's); {family:?} fixed effects have Wald z tests: leave it out");
        }
        if method == Method::Em {
            anyhow::bail!(
                "--ddf {ddf}: the tests need the exact likelihood; leave out --method em"
            );
        }
        if ddf == "kenward-roger" && !a.reml {
            anyhow::bail!("--ddf kenward-roger: Kenward and Roger's method is for REML fits (as pbkrtest's and lmerTest's); add --reml, or use --ddf satterthwaite");
        }
        if ddf == "kenward-roger" && a.weights.is_some() {
            anyhow::bail!("--ddf kenward-roger: pbkrtest's method leaves prior weights out of the covariance, so sagd has no reference for it with --weights; use --ddf satterthwaite");
        }
    }
    if let (Some(kind), None) = (a.anova_type, &a.ddf) {
        anyhow::bail!("--anova-type {kind}: the terms' F tests come with --ddf; add --ddf satterthwaite (or kenward-roger with --reml)");
    }
    if a.ls_means.is_none() && a.ls_means_scale != "link" {
        anyhow::bail!("--ls-means-scale {}: give --ls-means too", a.ls_means_scale);
    }
    if a.ls_means.is_some() {
        if !(a.ls_means_level > 0.0 && a.ls_means_level < 1.0) {
            anyhow::bail!(
                "--ls-means-level {}: give the intervals' level between 0 and 1, e.g. 0.95",
                a.ls_means_level
            );
        }
        if family == Family::Gaussian && method == Method::Em {
            anyhow::bail!("--ls-means: a Gaussian model's tests need the exact likelihood; leave out --method em");
        }
    }
    Ok(())
}
