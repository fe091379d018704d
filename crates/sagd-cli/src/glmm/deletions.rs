//! Tables of models with one term less, each tested against the model by the likelihood ratio:
//! `--ranova`, lmerTest's `ranova(fit)` (each random effect left out, under the fit's own
//! criterion, REML's or the likelihood), and `--drop1`, lme4's `drop1(fit, test = "Chisq")`
//! (each fixed-effect term that no other contains left out, by maximum likelihood); in the
//! summary, ranova.csv or drop1.csv, and result.json.

use std::fmt::Write as _;

use anyhow::{bail, Context, Result};
use sagd::glmm::{Criterion, FitSettings, Formula, Glmm, GlmmFit};
use serde_json::json;

use super::files::csv_text;
use super::inputs::{weighted_model, Inputs};
use super::summary::{criterion, p_text};
use super::{fit_with_progress, ml_settings, GlmmArgs};

/// A row of the table: the model (`<none>`) or the term left out, its parameters, its
/// criterion and that value's Monte Carlo error (0 where exact), and, for a reduced model, the
/// test's statistic, degrees of freedom and p.
#[derive(Clone)]
pub(super) struct Row {
    pub(super) name: String,
    npar: usize,
    loglik: f64,
    se: f64,
    pub(super) test: Option<(f64, usize, f64)>,
    /// lmerTest's step: the step at which the term was eliminated (0: kept).
    pub(super) eliminated: Option<usize>,
}

impl Row {
    /// Akaike's criterion, −2 logLik + 2 npar.
    fn aic(&self) -> f64 {
        -2.0 * self.loglik + 2.0 * self.npar as f64
    }

    /// The row of `fit` named `name`, its criterion `loglik`, tested against `full` (none for
    /// the model itself).
    fn of(name: String, fit: Option<&GlmmFit>, loglik: (f64, usize), full: Option<&Row>) -> Row {
        let se = match fit.map(|f| &f.fitted) {
            Some(sagd::glmm::Fitted::Em(_)) => fit.map_or(0.0, |f| f.log_likelihood.se),
            _ => 0.0,
        };
        let test = full.map(|full| {
            let (lrt, df, p) = GlmmFit::likelihood_ratio_of((full.loglik, full.npar), loglik);
            (lrt, df, p.unwrap_or(f64::NAN))
        });
        Row {
            name,
            npar: loglik.1,
            loglik: loglik.0,
            se,
            test,
            eliminated: None,
        }
    }
}

/// Which table: lmerTest's `ranova`, lme4's `drop1`, or lmerTest's step's random part.
#[derive(Clone, Copy, PartialEq)]
pub(super) enum Kind {
    Ranova,
    Drop1,
    Step,
}

/// A table of deletions, and its criterion: REML's (ranova of a REML fit), or the likelihood
/// (with whether a REML fit was refitted by ML for it, as lme4's drop1 refits).
pub(super) struct Deletions {
    pub(super) kind: Kind,
    pub(super) rows: Vec<Row>,
    pub(super) reml: bool,
    pub(super) refitted_by_ml: bool,
}

impl Deletions {
    /// lmerTest's `ranova`: the model of `i` fitted as `fit`, then each of its formula's random
    /// reductions ([`sagd::glmm::Formula::random_reductions`]) fitted alike on the same rows
    /// (the fixed effects alone by least squares where no random effect is left), each tested
    /// against it.
    pub(super) fn ranova(a: &GlmmArgs, i: &Inputs, fit: &GlmmFit) -> Result<Deletions> {
        let rows = ranova_rows(a, i, (&i.formula, "--ranova"), fit)?;
        let rows = rows.into_iter().map(|(row, _)| row).collect();
        let reml = i.settings.exact.criterion == Criterion::Reml;
        Ok(Deletions {
            kind: Kind::Ranova,
            rows,
            reml,
            refitted_by_ml: false,
        })
    }

    /// lme4's `drop1(fit, test = "Chisq")`: the model of `i` (refitted by maximum likelihood
    /// where `fit` is REML's), then the model without each fixed-effect term that no other
    /// contains ([`Formula::fixed_reductions`]) fitted alike on the same rows, each tested
    /// against it.
    pub(super) fn drop1(a: &GlmmArgs, i: &Inputs, fit: &GlmmFit) -> Result<Deletions> {
        let by_ml = a.reml;
        let settings = match by_ml {
            true => ml_settings(&i.settings),
            false => i.settings.clone(),
        };
        let ml_fit = match by_ml {
            true => Some(fit_with_progress(&i.model, &settings, a.quiet)?),
            false => None,
        };
        let fit = ml_fit.as_ref().unwrap_or(fit);
        let loglik = |f: &GlmmFit| (f.log_likelihood.value, f.theta.len());
        let full = Row::of("<none>".into(), Some(fit), loglik(fit), None);
        let mut rows = vec![];
        for (name, reduced) in i.formula.fixed_reductions() {
            let what = || format!("--drop1: the model without {name}");
            let (_, reduced) = refit(a, i, (&reduced, &settings), what)?;
            rows.push(Row::of(name, Some(&reduced), loglik(&reduced), Some(&full)));
        }
        if rows.is_empty() {
            bail!("--drop1: the model has no fixed-effect term to leave out (its intercept stays, as lme4's drop1 keeps it)");
        }
        rows.insert(0, full);
        Ok(Deletions {
            kind: Kind::Drop1,
            rows,
            reml: false,
            refitted_by_ml: by_ml,
        })
    }

    /// The file's name and result.json's key: `ranova` or `drop1`.
    pub(super) fn name(&self) -> &'static str {
        match self.kind {
            Kind::Ranova => "ranova",
            Kind::Drop1 => "drop1",
            Kind::Step => "step",
        }
    }

    /// The table as lmerTest's ranova or lme4's drop1 heads it, with the columns of both.
    pub(super) fn table(&self, o: &mut String) {
        let width = self.rows.iter().map(|r| r.name.len()).max().unwrap_or(0);
        let title = match (self.kind, self.reml, self.refitted_by_ml) {
            (Kind::Ranova, true, _) => {
                "Likelihood-ratio tests of the random effects (lmerTest's ranova, REML criterion)"
            }
            (Kind::Ranova, false, _) => {
                "Likelihood-ratio tests of the random effects (lmerTest's ranova)"
            }
            (Kind::Drop1, _, false) => "Single term deletions (lme4's drop1, test = \"Chisq\")",
            (Kind::Drop1, _, true) => {
                "Single term deletions (lme4's drop1, test = \"Chisq\"; the models refitted by ML instead of REML)"
            }
            (Kind::Step, _, _) => "Backward reduced random-effect table (lmerTest's step)",
        };
        let step = self.kind == Kind::Step;
        let _ = write!(o, "\n{title}:\n{:<width$}", "");
        if step {
            let _ = write!(o, " {:>10}", "Eliminated");
        }
        let _ = write!(
            o,
            " {:>5} {:>11} {:>10} {:>9} {:>3} {:>11}",
            "npar", "logLik", "AIC", "LRT", "Df", "Pr(>Chisq)"
        );
        for r in &self.rows {
            let _ = write!(o, "\n{:<width$}", r.name);
            if step {
                let e = r.eliminated.map_or(String::new(), |e| e.to_string());
                let _ = write!(o, " {e:>10}");
            }
            let _ = write!(o, " {:>5} {:>11.4} {:>10.4}", r.npar, r.loglik, r.aic());
            if let Some((lrt, df, p)) = r.test {
                let _ = write!(o, " {lrt:>9.4} {df:>3} {:>11}", p_text(p));
            }
        }
        o.push('\n');
        let full_se = self.rows.first().map_or(0.0, |r| r.se);
        for r in self
            .rows
            .iter()
            .skip(1)
            .filter(|r| r.se > 0.0 || full_se > 0.0)
        {
            let se = 2.0 * r.se.hypot(full_se);
            let _ = writeln!(
                o,
                "(LRT of {} is sampled: its Monte Carlo error is {se:.4})",
                r.name
            );
        }
    }

    /// ranova.csv or drop1.csv: a row per model.
    pub(super) fn csv(&self) -> String {
        let mut o = String::from("term,npar,loglik,aic,lrt,df,p\n");
        for r in &self.rows {
            let _ = write!(
                o,
                "{},{},{},{}",
                csv_text(&r.name),
                r.npar,
                r.loglik,
                r.aic()
            );
            match r.test {
                Some((lrt, df, p)) => {
                    let _ = writeln!(o, ",{lrt},{df},{p}");
                }
                None => o.push_str(",,,\n"),
            }
        }
        o
    }

    /// result.json's `ranova` or `drop1`: the criterion (and for drop1 whether the models were
    /// refitted by ML), then a row per model.
    pub(super) fn json(&self) -> serde_json::Value {
        let rows: Vec<_> = (self.rows.iter())
            .map(|r| {
                let test = r
                    .test
                    .map(|(lrt, df, p)| json!({"lrt": lrt, "df": df, "p": p}));
                let mut row = json!({"term": r.name, "npar": r.npar, "loglik": r.loglik,
                                     "loglik_se": r.se, "aic": r.aic(), "test": test});
                if let Some(e) = r.eliminated {
                    row["eliminated"] = json!(e);
                }
                row
            })
            .collect();
        let mut out = json!({"criterion": if self.reml { "REML" } else { "ML" }, "models": rows});
        if self.kind == Kind::Drop1 {
            out["refitted_by_ml"] = json!(self.refitted_by_ml);
        }
        out
    }
}

/// lmerTest's `ranova` rows of `formula` (of `i`'s rows and fixed effects) fitted as `fit`, for
/// the flag `flag` (which errors name):
/// the model's own row, then per random reduction its row (its test against the model) and its
/// formula (`None` where only the fixed effects are left, fitted by least squares).
pub(super) fn ranova_rows(
    a: &GlmmArgs,
    i: &Inputs,
    (formula, flag): (&Formula, &str),
    fit: &GlmmFit,
) -> Result<Vec<(Row, Option<Formula>)>> {
    let full = Row::of(
        "<none>".into(),
        None,
        (criterion(fit).0, fit.theta.len()),
        None,
    );
    let mut rows = vec![];
    for (name, reduced) in formula.random_reductions() {
        let what = || format!("{flag}: the model without {name}");
        let loglik = match &reduced {
            Some(f) => {
                let (_, reduced) = refit(a, i, (f, &i.settings), what)?;
                (criterion(&reduced).0, reduced.theta.len())
            }
            None => (i.design)
                .least_squares_loglik(i.weights.as_deref(), i.settings.exact.criterion)
                .with_context(|| format!("{flag}: the fixed effects alone, without {name}"))?,
        };
        rows.push((Row::of(name, None, loglik, Some(&full)), reduced));
    }
    rows.insert(0, (full, None));
    Ok(rows)
}

/// The model of `formula` on the rows of `i`'s model (refused where it keeps other rows) and
/// its fit under `settings`, `what` naming it in errors.
pub(super) fn refit(
    a: &GlmmArgs,
    i: &Inputs,
    (formula, settings): (&Formula, &FitSettings),
    what: impl Fn() -> String,
) -> Result<(Glmm, GlmmFit)> {
    let design = formula.design(&i.frame).with_context(&what)?;
    if design.rows != i.design.rows {
        bail!(
            "{}: it keeps {} rows of the data and the model {} (their columns' missing values \
             differ): fit the data without the rows that miss a value of the model's columns",
            what(),
            design.n_obs,
            i.design.n_obs
        );
    }
    let model = weighted_model(&design, i.family, i.weights.as_deref()).with_context(&what)?;
    let fit = fit_with_progress(&model, settings, a.quiet).with_context(what)?;
    Ok((model, fit))
}
