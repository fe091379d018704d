//! `--ranova`: lmerTest's `ranova(fit)`, the likelihood-ratio test of each random effect: the
//! model refitted without it, under the fit's own criterion (REML's, or the likelihood), against
//! the model; in the summary, ranova.csv and result.json.

use std::fmt::Write as _;

use anyhow::{bail, Context, Result};
use sagd::glmm::GlmmFit;
use serde_json::json;

use super::files::csv_text;
use super::inputs::{weighted_model, Inputs};
use super::summary::{criterion, p_text};
use super::{fit_with_progress, GlmmArgs};

/// A row of the table: the model (`<none>`) or the random effect left out, its parameters, its
/// criterion and, for a reduced model, the test's statistic, degrees of freedom and p.
struct Row {
    name: String,
    npar: usize,
    loglik: f64,
    test: Option<(f64, usize, f64)>,
}

impl Row {
    /// Akaike's criterion, −2 logLik + 2 npar.
    fn aic(&self) -> f64 {
        -2.0 * self.loglik + 2.0 * self.npar as f64
    }
}

/// lmerTest's `ranova` table, and whether its criterion is REML's.
pub(super) struct Ranova {
    rows: Vec<Row>,
    reml: bool,
}

impl Ranova {
    /// The model of `i` fitted as `fit`, then each of its formula's random reductions
    /// ([`sagd::glmm::Formula::random_reductions`]) fitted alike on the same rows (the fixed
    /// effects alone by least squares where no random effect is left), each tested against it.
    pub(super) fn find(a: &GlmmArgs, i: &Inputs, fit: &GlmmFit) -> Result<Ranova> {
        let (full, _) = criterion(fit);
        let mut rows = vec![Row {
            name: "<none>".into(),
            npar: fit.theta.len(),
            loglik: full,
            test: None,
        }];
        let weights = i.weights.as_deref();
        for (name, reduced) in i.formula.random_reductions() {
            let (loglik, npar) = match reduced {
                Some(f) => {
                    let what = || format!("--ranova: the model without {name}");
                    let design = f.design(&i.frame).with_context(what)?;
                    if design.rows != i.design.rows {
                        bail!("{}: it keeps other rows of the data (a grouping factor's missing values); refit on the rows that miss none", what());
                    }
                    let model = weighted_model(&design, i.family, weights).with_context(what)?;
                    let reduced =
                        fit_with_progress(&model, &i.settings, a.quiet).with_context(what)?;
                    (criterion(&reduced).0, reduced.theta.len())
                }
                None => (i.design)
                    .least_squares_loglik(weights, i.settings.exact.criterion)
                    .with_context(|| {
                        format!("--ranova: the fixed effects alone, without {name}")
                    })?,
            };
            let (lrt, df, p) =
                GlmmFit::likelihood_ratio_of((full, fit.theta.len()), (loglik, npar));
            let p = p.unwrap_or(f64::NAN);
            rows.push(Row {
                name,
                npar,
                loglik,
                test: Some((lrt, df, p)),
            });
        }
        let reml = i.settings.exact.criterion == sagd::glmm::Criterion::Reml;
        Ok(Ranova { rows, reml })
    }

    /// The table as lmerTest prints it.
    pub(super) fn table(&self, o: &mut String) {
        let width = self.rows.iter().map(|r| r.name.len()).max().unwrap_or(0);
        let _ = write!(
            o,
            "\nLikelihood-ratio tests of the random effects (lmerTest's ranova{}):\n{:<width$} {:>5} {:>11} {:>10} {:>9} {:>3} {:>11}",
            if self.reml { ", REML criterion" } else { "" },
            "", "npar", "logLik", "AIC", "LRT", "Df", "Pr(>Chisq)"
        );
        for r in &self.rows {
            let _ = write!(
                o,
                "\n{:<width$} {:>5} {:>11.4} {:>10.4}",
                r.name,
                r.npar,
                r.loglik,
                r.aic()
            );
            if let Some((lrt, df, p)) = r.test {
                let _ = write!(o, " {lrt:>9.4} {df:>3} {:>11}", p_text(p));
            }
        }
        o.push('\n');
    }

    /// ranova.csv: a row per model.
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

    /// result.json's `ranova`: the criterion, then a row per model.
    pub(super) fn json(&self) -> serde_json::Value {
        let rows: Vec<_> = (self.rows.iter())
            .map(|r| {
                let test = r
                    .test
                    .map(|(lrt, df, p)| json!({"lrt": lrt, "df": df, "p": p}));
                json!({"term": r.name, "npar": r.npar, "loglik": r.loglik,
                       "aic": r.aic(), "test": test})
            })
            .collect();
        json!({"criterion": if self.reml { "REML" } else { "ML" }, "models": rows})
    }
}
