//! `sagd glmm`: a generalised linear mixed model from a CSV file and an lme4 formula, fitted by
//! the library's [`Glmm::fit`] (the exact likelihood where it can be computed, else automated
//! EM), printed as lme4's `summary` prints it and written to OUT/result.json, estimates.csv,
//! ranef.csv (each level's random effects given the data: modes, and means integrated or
//! sampled), fitted.csv (each observation's fit and residuals), with `--profile` confint.csv
//! (profile-likelihood intervals), with `--predict` predictions.csv (the fit on new rows), with
//! `--simulate` simulate.csv (new responses from the fitted model), with `--bootstrap`
//! bootstrap.csv and confint_bootstrap.csv (the parametric bootstrap's refits and their
//! percentile intervals), with `--compare` anova.csv, with `--ranova` ranova.csv, with `--drop1`
//! drop1.csv, with
//! `--ls-means` ls_means.csv (lmerTest's tests), and summary.txt.

use std::path::PathBuf;
use std::time::Instant;

use anyhow::Result;
use clap::Args;
use sagd::em::{EmEvent, EmSettings};
use sagd::glmm::{
    Criterion, Estimate, ExactSettings, Family, FitSettings, FittedValues, Glmm, GlmmFit, Summary,
};
use sagd::run::Control;
use serde::Serialize;
use serde_json::json;

use crate::output::{write_atomic, Checkpointing, Staging};
use crate::progress::progress_bar;

mod anova;
mod confint;
mod ddf;
mod deletions;
mod files;
mod fitted;
mod inputs;
mod ls_means;
mod predict;
mod ranef;
mod refits;
mod step;
mod summary;
use anova::{Compared, Fitted as Compares};
use confint::Intervals;
use ddf::Ddf;
use deletions::Deletions;
use files::{estimates_csv, result_json};
use fitted::{fitted_csv, simulate_csv};
use inputs::Inputs;
use ls_means::LsMeans;
use ranef::{write_ranef, Means};
use refits::{Refits, Refitted};
use step::Step;
use summary::render;

/// Flags of `sagd glmm`.
#[derive(Args, Debug, Clone, Serialize)]
pub struct GlmmArgs {
    /// The model in lme4's notation, e.g. 'y ~ x + (1 + x | g)': terms joined by +, a:b and
    /// a*b, factor(x), 0 or - 1 for no intercept, (effects | g) correlated and (effects || g)
    /// independent random effects, g:h and g/h grouping, cbind(successes, failures) for the
    /// binomial family, offset(t) or offset(log(t)) for a known part of η (an exposure). Quote
    /// it for the shell.
    formula: String,
    /// The data: a CSV file whose first row names the columns. Text columns are categorical;
    /// rows with a missing value (empty, NA) in the formula's columns are dropped.
    #[arg(long)]
    data: PathBuf,
    /// gaussian, poisson or binomial (0/1, two levels, or cbind(successes, failures)).
    #[arg(long, default_value = "gaussian")]
    family: String,
    /// A column of prior weights (lme4's `weights = w`), a positive value on every row the model
    /// uses. Gaussian family: row i's residual variance σ²/wᵢ, as for the mean of wᵢ
    /// measurements. Binomial family: row i's number of trials, the response then the
    /// proportion of them that succeeded (simulate.csv gives proportions too).
    #[arg(long, value_name = "COLUMN")]
    weights: Option<String>,
    /// Gaussian family: the fixed effects' t tests and each term's type III F test with
    /// denominator degrees of freedom by `satterthwaite` (lmerTest's `summary(fit, ddf =
    /// "Satterthwaite")` and `anova(fit)`; ML or REML, the standard errors given the variance
    /// parameters, as lmer's `vcov`) or `kenward-roger` (lmerTest's `ddf = "Kenward-Roger"`,
    /// pbkrtest's: --reml fits, the standard errors of β̂'s adjusted covariance).
    #[arg(long, value_name = "METHOD", value_parser = ["satterthwaite", "kenward-roger"])]
    ddf: Option<String>,
    /// With --ddf, the type of the terms' F tests (lmerTest's `anova(fit, type = …)`): 3 (each
    /// term under sum-to-zero contrasts of the categorical variables), 2 (each term adjusted for
    /// every term that does not contain it) or 1 (sequential, in the formula's order); 3 when
    /// left out.
    #[arg(long, value_name = "TYPE", value_parser = clap::value_parser!(u8).range(1..=3))]
    anova_type: Option<u8>,
    /// auto: the exact likelihood where it can be computed (Gaussian; up to 3 random effects per
    /// independent block by adaptive quadrature), else Langevin chains from Laplace's maximum
    /// (the polish's Newton steps; automated EM where they fail); exact; em.
    #[arg(long, default_value = "auto")]
    method: String,
    /// Gaussian family: maximise the REML criterion (lmer's default) instead of the likelihood.
    #[arg(long)]
    reml: bool,
    /// Quadrature nodes per random effect (default 25, 15, 9 with 1, 2, 3 effects per block).
    #[arg(long)]
    nodes: Option<usize>,
    /// EM: the most M-steps before the polish (with --method auto the polish starts at Laplace's
    /// maximum without an M-step, and EM runs only if that polish fails).
    #[arg(long, default_value_t = EmSettings::default().max_msteps)]
    max_msteps: usize,
    /// EM's chains, the sampled log-likelihood's draws and the sampled conditional means'.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Draws a chain for the conditional means of blocks too large to integrate (crossed
    /// factors): HMC, 4 chains, their Monte Carlo errors in ranef.csv's mean_mcse; 0 leaves
    /// those means blank.
    #[arg(long, default_value_t = 500)]
    ranef_draws: usize,
    /// Profile-likelihood confidence intervals (lme4's `confint(fit)`) of the fixed effects, the
    /// random effects' sds and σ at this level (0.95 when given alone), from the exact
    /// likelihood: in the summary, confint.csv and result.json. Exact maximum-likelihood fits
    /// only (not --reml, not EM).
    #[arg(long, num_args = 0..=1, default_missing_value = "0.95", value_name = "LEVEL")]
    profile: Option<f64>,
    /// New data to predict (lme4's `predict(fit, newdata, allow.new.levels = TRUE)`): a CSV file
    /// with the formula's predictors, grouping factors and offsets (the response may be left
    /// out), written to predictions.csv with and without the levels' effects; a level the fit
    /// has not seen gets none.
    #[arg(long, value_name = "NEW.csv")]
    predict: Option<PathBuf>,
    /// Draws of new responses from the fitted model (lme4's `simulate(fit, nsim = N)`: every
    /// level's effects drawn afresh, then each response from its family), one column each in
    /// simulate.csv, from --seed.
    #[arg(long, value_name = "N")]
    simulate: Option<usize>,
    /// With --simulate, each level's effects held at their conditional modes (lme4's
    /// `simulate(fit, use.u = TRUE)`): the responses' own variation given the levels fitted.
    #[arg(long)]
    simulate_conditional: bool,
    /// The parametric bootstrap (lme4's `bootMer` and `confint(fit, method = "boot")`): N
    /// responses drawn from the fitted model, each fitted again the way the model was; their
    /// estimates in bootstrap.csv, and their percentile intervals at --bootstrap-level in the
    /// summary, confint_bootstrap.csv and result.json. From --seed.
    #[arg(long, value_name = "N")]
    bootstrap: Option<usize>,
    /// The level of the bootstrap's intervals.
    #[arg(long, default_value_t = 0.95, value_name = "LEVEL")]
    bootstrap_level: f64,
    /// Another model of the same rows and response to compare this one with, in lme4's
    /// notation, e.g. 'y ~ x + (1 | g)' (given again for more models): all fitted alike and
    /// ordered by their parameters, each tested against the one before by their likelihood
    /// ratio on the chi-square law (lme4's `anova(m0, m1, ...)`; nesting is not checked), in
    /// the summary, anova.csv and result.json.
    #[arg(long, value_name = "FORMULA")]
    compare: Vec<String>,
    /// With --compare, the parametric bootstrap's p-value of each test too (pbkrtest's
    /// `PBmodcomp`): N responses drawn from the smaller model, each fitted by both; it holds
    /// where a variance is tested at 0, where the chi-square's p is conservative. From --seed.
    #[arg(long, value_name = "N")]
    compare_bootstrap: Option<usize>,
    /// Gaussian family: lmerTest's `ranova(fit)`, each random effect tested by the model
    /// refitted without it under the fit's criterion (REML's with --reml), its likelihood ratio
    /// on the chi-square law: a correlated term loses each effect but its intercept, a term of
    /// one effect (and each effect of `(… || g)`) goes whole, the fixed effects alone fitted by
    /// least squares where none is left; in the summary, ranova.csv and result.json.
    #[arg(long)]
    ranova: bool,
    /// lme4's `drop1(fit, test = "Chisq")`: each fixed-effect term that no other contains (R's
    /// `drop.scope`: `x` stays while `x:A` is in the model) tested by the model refitted
    /// without it, by maximum likelihood (a REML fit refitted by ML first, as lme4 refits it),
    /// its likelihood ratio on the chi-square law; in the summary, drop1.csv and result.json.
    #[arg(long)]
    drop1: bool,
    /// Gaussian family: lmerTest's `step(fit)`, the backward elimination of the terms: the
    /// random effects first (each round the one whose ranova test has the largest p above
    /// --step-alpha-random left out), then the fixed-effect terms that no other contains by
    /// their F tests (lmerTest's drop1; Satterthwaite's degrees of freedom, or Kenward and
    /// Roger's with --ddf kenward-roger), each round the one with the largest p above
    /// --step-alpha-fixed; both tables and the model found in the summary and result.json.
    #[arg(long)]
    step: bool,
    /// --step's threshold for the random effects (lmerTest's `alpha.random`).
    #[arg(long, default_value_t = 0.1, value_name = "P")]
    step_alpha_random: f64,
    /// --step's threshold for the fixed-effect terms (lmerTest's `alpha.fixed`).
    #[arg(long, default_value_t = 0.05, value_name = "P")]
    step_alpha_fixed: f64,
    /// lmerTest's `ls_means(fit)`: the least-squares mean of each combination of the levels of
    /// every term of categorical variables (over every level of the other factors, each as
    /// often, and numeric variables at their means), or with `pairwise` the difference of each
    /// pair, with t tests and intervals at --ls-means-level: Gaussian family with Satterthwaite's
    /// degrees of freedom (Kenward and Roger's with --ddf kenward-roger), other families by Wald
    /// z tests on the link's scale (emmeans' asymptotic ones); in the summary, ls_means.csv and
    /// result.json.
    #[arg(long, num_args = 0..=1, default_missing_value = "means", value_name = "pairwise", value_parser = ["means", "pairwise"])]
    ls_means: Option<String>,
    /// The level of --ls-means' intervals.
    #[arg(long, default_value_t = 0.95, value_name = "LEVEL")]
    ls_means_level: f64,
    /// --ls-means of a Poisson or binomial fit on the link's scale (log, logit) or on the
    /// response's (emmeans' `type = "response"`): rates or probabilities with delta-method
    /// standard errors and intervals mapped from the link's, and pairwise ratios of rates or
    /// odds ratios (named `a / b`); the tests stay the link's.
    #[arg(long, default_value = "link", value_name = "SCALE", value_parser = ["link", "response"])]
    ls_means_scale: String,
    #[command(flatten)]
    #[serde(flatten)]
    checkpoints: Checkpointing,
    /// Output folder.
    #[arg(long, default_value = "out/glmm")]
    out: PathBuf,
    /// No progress bar.
    #[arg(long)]
    quiet: bool,
}

/// The files `sagd glmm` writes into OUT.
const OWNED: [&str; 14] = [
    "result.json",
    "estimates.csv",
    "ranef.csv",
    "fitted.csv",
    "confint.csv",
    "predictions.csv",
    "simulate.csv",
    "bootstrap.csv",
    "confint_bootstrap.csv",
    "anova.csv",
    "ranova.csv",
    "drop1.csv",
    "ls_means.csv",
    "summary.txt",
];

/// Runs `sagd glmm`.
pub fn run(a: GlmmArgs) -> Result<()> {
    let t0 = Instant::now();
    let inputs = Inputs::read(&a)?;
    // Nothing is written before the data and the formula are known to be good.
    let mut staging = Staging::new(&a.out, "glmm")?;
    staging.owns(&OWNED);
    let kept = a.checkpoints.folder(&a.out, "glmm")?;
    let refits = Refits::new(&a.checkpoints, kept, a.quiet);
    let found = Found::find(&a, &inputs, &refits)?;
    let seconds = t0.elapsed().as_secs_f64();
    found.write(&a, &inputs, &mut staging, seconds)?;
    let files = staging.commit("result.json")?;
    say!("wrote {}: {}", a.out.display(), files.join(", "));
    Ok(())
}

/// The fit and what the flags ask of it.
struct Found {
    fit: GlmmFit,
    summary: Summary,
    separation: Option<String>,
    ranef: sagd::error::Result<Vec<Vec<Vec<Estimate>>>>,
    means: Means,
    fitted: sagd::error::Result<FittedValues>,
    quantiles: Option<[f64; 5]>,
    profiled: Option<std::result::Result<Intervals, String>>,
    booted: Option<std::result::Result<(Intervals, String), String>>,
    compared: Option<Compared>,
    /// lmerTest's ranova and lme4's drop1, where asked for.
    deletions: Vec<Deletions>,
    step: Option<Step>,
    ls_means: Option<LsMeans>,
}

impl Found {
    /// The model fitted, then its summary, random effects, fitted values, and the intervals
    /// and comparisons the flags ask for.
    fn find(a: &GlmmArgs, i: &Inputs, refits: &Refits) -> Result<Found> {
        let (model, settings) = (&i.model, &i.settings);
        let fit = fit_with_progress(model, settings, a.quiet)?;
        let summary = model.summary(&fit.theta, fit.covariance.as_deref());
        let separation = model.separation(&fit.theta);
        // The fit stands without them: a level whose mode cannot be found leaves no ranef.csv.
        let ranef = model.random_effects(&fit.theta);
        // The exact conditional means where quadrature reaches, sampled beyond it.
        let means = match &ranef {
            Ok(_) => Means::find(model, &fit.theta, a.ranef_draws, a.seed),
            Err(e) => Means::Blank(e.to_string()),
        };
        // Each observation's fit, at the same modes as ranef.csv's.
        let fitted = model.fitted_values(&fit.theta);
        let quantiles = fitted.as_ref().ok().and_then(|f| f.pearson_quantiles());
        let profiled = a
            .profile
            .map(|level| Intervals::profile(model, &i.design, (&fit, &summary), level));
        let booted = match a.bootstrap {
            Some(draws) => {
                let reps = bootstrap(a, refits, (model, &fit, settings), draws)?;
                let level = a.bootstrap_level;
                Some(Intervals::bootstrap(
                    model, &i.design, &summary, &reps, level,
                ))
            }
            None => None,
        };
        let compared = compare(a, i, &fit, refits)?;
        let mut deletions = Vec::new();
        if a.ranova {
            deletions.push(Deletions::ranova(a, i, &fit)?);
        }
        if a.drop1 {
            deletions.push(Deletions::drop1(a, i, &fit)?);
        }
        let step = match a.step {
            true => Some(Step::find(a, i, &fit)?),
            false => None,
        };
        let ls_means = LsMeans::find(a, i, &fit);
        Ok(Found {
            fit,
            summary,
            separation,
            ranef,
            means,
            fitted,
            quantiles,
            profiled,
            booted,
            compared,
            deletions,
            step,
            ls_means,
        })
    }

    /// The summary printed and every file written into `staging`, the run having taken
    /// `seconds`.
    fn write(&self, a: &GlmmArgs, i: &Inputs, staging: &mut Staging, seconds: f64) -> Result<()> {
        let (design, fit) = (&i.design, &self.fit);
        let intervals = [
            ("profile", self.profiled.as_ref().map(|p| p.as_ref())),
            (
                "bootstrap",
                self.booted.as_ref().map(|b| b.as_ref().map(|b| &b.0)),
            ),
        ]
        .into_iter()
        .filter_map(|(what, i)| match i? {
            Ok(i) => Some(i),
            Err(e) => {
                say_err!("warning: no {what} intervals: {e}");
                None
            }
        })
        .collect::<Vec<_>>();
        let tests = a.ddf.as_deref().and_then(|method| {
            let kind = (method, usize::from(a.anova_type.unwrap_or(3)));
            Ddf::find(kind, &i.model, fit, (&i.formula, &i.frame))
        });
        let sep = self.separation.as_deref();
        let notes = (
            sep,
            self.quantiles.as_ref(),
            &intervals[..],
            self.compared.as_ref(),
            tests.as_ref(),
            (&self.deletions[..], self.step.as_ref()),
            self.ls_means.as_ref(),
        );
        let text = render(a, i.family, design, (fit, notes), &self.summary, seconds);
        say_part!("{text}");
        write_atomic(&staging.path("summary.txt"), &text)?;
        let predictions = self.write_csv(a, i, staging)?;
        let mut result = result_json(a, i.family, design, (fit, sep), &self.summary, seconds);
        if let Some(json) = predictions {
            result["predictions"] = json;
        }
        if self.ranef.is_ok() {
            result["ranef_means"] = self.means.json();
        }
        // lme4's `summary(fit)$residuals`' minimum, quartiles and maximum.
        result["scaled_residuals"] = json!(self.quantiles);
        if let Some(t) = &tests {
            t.json(design, &mut result);
        }
        if let Some(Ok(p)) = &self.profiled {
            result["confint"] = p.json();
        }
        if let Some(Ok((b, _))) = &self.booted {
            result["bootstrap"] = b.json();
        }
        if let Some(c) = &self.compared {
            result["anova"] = c.json();
        }
        for d in &self.deletions {
            result[d.name()] = d.json();
        }
        if let Some(s) = &self.step {
            result["step"] = s.json();
        }
        if let Some(m) = &self.ls_means {
            result["ls_means"] = m.json();
        }
        write_atomic(
            &staging.path("result.json"),
            serde_json::to_string_pretty(&result)?,
        )?;
        Ok(())
    }

    /// The CSV files written into `staging`; result.json's predictions where --predict asked.
    fn write_csv(
        &self,
        a: &GlmmArgs,
        i: &Inputs,
        staging: &mut Staging,
    ) -> Result<Option<serde_json::Value>> {
        let (design, fit) = (&i.design, &self.fit);
        write_atomic(
            &staging.path("estimates.csv"),
            estimates_csv(design, fit, &self.summary),
        )?;
        write_ranef(staging, design, &self.ranef, &self.means)?;
        if let Some(Ok(p)) = &self.profiled {
            write_atomic(&staging.path("confint.csv"), p.csv())?;
        }
        if let Some(c) = &self.compared {
            write_atomic(&staging.path("anova.csv"), c.csv())?;
        }
        for d in &self.deletions {
            write_atomic(&staging.path(&format!("{}.csv", d.name())), d.csv())?;
        }
        if let Some(m) = &self.ls_means {
            write_atomic(&staging.path("ls_means.csv"), m.csv())?;
        }
        if let Some(Ok((b, reps))) = &self.booted {
            write_atomic(&staging.path("confint_bootstrap.csv"), b.csv())?;
            write_atomic(&staging.path("bootstrap.csv"), reps)?;
        }
        match &self.fitted {
            Ok(f) => write_atomic(&staging.path("fitted.csv"), fitted_csv(design, f))?,
            Err(e) => say_err!("warning: no fitted.csv: the fit at the random effects' modes: {e}"),
        }
        let predictions = match &i.new_rows {
            Some(n) => n.write(staging, (&i.model, &fit.theta), design)?,
            None => None,
        };
        if let Some(draws) = a.simulate {
            match i
                .model
                .simulate(&fit.theta, draws, a.seed, a.simulate_conditional)
            {
                Ok(sims) => {
                    // A binomial's draws as its response was given: proportions of the weights.
                    let per = i
                        .weights
                        .as_deref()
                        .filter(|_| i.family == Family::Binomial);
                    let csv = simulate_csv(design, &sims, per);
                    write_atomic(&staging.path("simulate.csv"), csv)?
                }
                Err(e) => say_err!("warning: no simulate.csv: {e}"),
            }
        }
        Ok(predictions)
    }
}

/// The --compare models fitted as the model was and tested in turn (with --compare-bootstrap,
/// by the bootstrap too); fits by REML are compared by their likelihoods refitted by ML, as
/// lme4's anova compares them.
fn compare(a: &GlmmArgs, i: &Inputs, fit: &GlmmFit, refits: &Refits) -> Result<Option<Compared>> {
    if i.others.is_empty() {
        return Ok(None);
    }
    let ml_settings = ml_settings(&i.settings);
    let by_ml = a.reml;
    let settings = if by_ml { &ml_settings } else { &i.settings };
    let ml_fit = match by_ml {
        true => Some(fit_with_progress(&i.model, settings, a.quiet)?),
        false => None,
    };
    let other_fits = (i.others.iter())
        .map(|m| fit_with_progress(m, settings, a.quiet))
        .collect::<Result<Vec<_>>>()?;
    let mut models = vec![(&a.formula[..], &i.model, ml_fit.as_ref().unwrap_or(fit))];
    let given = a.compare.iter().zip(&i.others).zip(&other_fits);
    models.extend(given.map(|((f, m), fit)| (&f[..], m, fit)));
    let boot = a.compare_bootstrap.map(|draws| {
        move |k, small, large| bootstrap_test(a, refits, settings, (k, small, large), draws)
    });
    let mut compared = Compared::find(models, i.model.n_obs(), boot)?;
    compared.refitted_by_ml = by_ml;
    Ok(Some(compared))
}

/// `settings` with maximum likelihood as the exact fits' criterion (lme4's `refitML`).
fn ml_settings(settings: &FitSettings) -> FitSettings {
    FitSettings {
        exact: ExactSettings {
            criterion: Criterion::Ml,
            ..settings.exact.clone()
        },
        ..settings.clone()
    }
}

/// The parametric bootstrap's `draws` refits of `fit` under `settings`, each refit's estimates
/// on the summary's scales (or why it failed), kept as `refits` says.
fn bootstrap(
    a: &GlmmArgs,
    refits: &Refits,
    (model, fit, settings): (&Glmm, &GlmmFit, &FitSettings),
    draws: usize,
) -> Result<Refitted> {
    let terms = model.terms();
    let identity = identity(a, &[&fit.theta])?;
    let what = ("bootstrap", "the parametric bootstrap's refits");
    refits.run(what, identity, draws, |range, on_refit| {
        let part = model.bootstrap_draws(&fit.theta, settings, (range, a.seed), on_refit)?;
        let values = |f: GlmmFit| model.summary(&f.theta, None).values(&terms);
        Ok(outcomes(part, values))
    })
}

/// The k-th bootstrap test's statistics of `draws` responses drawn from the smaller model,
/// fitted by both under `settings`, kept as `refits` says.
fn bootstrap_test(
    a: &GlmmArgs,
    refits: &Refits,
    settings: &FitSettings,
    (k, (_, small, small_fit), (_, large, large_fit)): (usize, Compares<'_>, Compares<'_>),
    draws: usize,
) -> Result<Refitted> {
    let identity = identity(a, &[&small_fit.theta, &large_fit.theta])?;
    let (name, what) = match a.compare.len() {
        1 => (
            "compare-bootstrap".into(),
            "the bootstrap test's refits".into(),
        ),
        _ => (
            format!("compare-bootstrap-{k}"),
            format!("the bootstrap test {k}'s refits"),
        ),
    };
    refits.run((&name, &what), identity, draws, |range, on_refit| {
        let alt = (large, &large_fit.theta[..]);
        let theta = &small_fit.theta;
        let part = small.bootstrap_lrt_draws(theta, alt, settings, (range, a.seed), on_refit)?;
        Ok(outcomes(part, |t| vec![t]))
    })
}

/// A part's refits as the results keep them: `values` of each, or why it failed.
fn outcomes<T>(
    part: Vec<Option<sagd::error::Result<T>>>,
    values: impl Fn(T) -> Vec<f64>,
) -> refits::Part {
    let keep = |r: sagd::error::Result<T>| r.map(&values).map_err(|e| e.to_string());
    part.into_iter().map(|r| r.map(keep)).collect()
}

/// What a bootstrap's kept refits belong to: the flags that make its draws and refits, and the
/// estimates `thetas` it draws from (to the bit).
fn identity(a: &GlmmArgs, thetas: &[&[f64]]) -> Result<sagd::run::Identity> {
    let flags = (&a.formula, &a.family, &a.method, a.reml, a.nodes);
    Ok(sagd::run::Identity::new()
        .with("formula, family and method", &flags)?
        .with("--max-msteps", &a.max_msteps)?
        .with("--seed", &a.seed)?
        .with("--compare", &a.compare)?
        .with("the fit's estimates (the data)", thetas)?)
}

/// `model` fitted under `settings`, EM's updates on a progress bar unless `quiet`.
pub(super) fn fit_with_progress(
    model: &Glmm,
    settings: &FitSettings,
    quiet: bool,
) -> Result<GlmmFit> {
    let bar = progress_bar(
        quiet,
        (settings.em.max_msteps * settings.em.updates_per_mstep) as u64,
    );
    let fit = model.fit(settings, &mut |e| {
        if let EmEvent::Update { mstep, .. } = e {
            bar.inc(1);
            bar.set_message(format!("EM, M-step {}", mstep + 1));
        }
        Control::Continue
    })?;
    bar.finish_and_clear();
    Ok(fit)
}
