//! `--compare`: the likelihood-ratio test of the model against another of the same rows
//! (lme4's `anova(m0, m1)`), and with `--compare-bootstrap N` the parametric bootstrap's
//! p-value (pbkrtest's `PBmodcomp`); in the summary, anova.csv and result.json.

use std::fmt::Write as _;

use anyhow::{bail, Context, Result};
use sagd::glmm::{Design, Family, Formula, Frame, Glmm, GlmmFit};
use serde_json::json;

use super::files::csv_text;
use super::refits::Refitted;

/// One model of a comparison: its formula, parameters, AIC, BIC, log-likelihood and that
/// value's Monte Carlo error (0 where exact).
struct Row {
    formula: String,
    npar: usize,
    aic: f64,
    bic: f64,
    loglik: f64,
    se: f64,
}

/// The two models ordered by their parameters, and the test of the second against the first.
pub(super) struct Compared {
    rows: [Row; 2],
    chisq: f64,
    df: usize,
    p: Option<f64>,
    /// The bootstrap's test, where it was asked for.
    boot: Option<Boot>,
}

/// The parametric bootstrap's test of a comparison.
#[derive(Clone, Copy)]
struct Boot {
    /// Its p-value (none where no refit succeeded).
    p: Option<f64>,
    /// The draws refitted by both models, those whose refit failed, and those a resumed run
    /// took from its checkpoint.
    refits: usize,
    failed: usize,
    resumed: usize,
}

/// A fitted model of the comparison: its formula, model and fit.
pub(super) type Fitted<'a> = (&'a str, &'a Glmm, &'a GlmmFit);

/// The model of `formula` on `frame` and `family`, refused unless it uses the same rows and
/// response as `design` (lme4's anova refuses models of other data).
pub(super) fn other_model(
    formula: &str,
    frame: &Frame,
    family: Family,
    design: &Design,
) -> Result<Glmm> {
    let other = Formula::parse(formula)
        .and_then(|f| f.design(frame))
        .with_context(|| format!("--compare '{formula}'"))?;
    if other.response != design.response {
        bail!(
            "--compare '{formula}': its response is `{}`, the model's `{}`: compare models of \
             the same response",
            other.response,
            design.response
        );
    }
    if other.rows != design.rows {
        bail!(
            "--compare '{formula}': it keeps {} rows of the data and the model {} (their \
             formulas' missing values differ): compare fits of the same rows, e.g. the data \
             without the rows that miss a value of either formula's columns",
            other.n_obs,
            design.n_obs
        );
    }
    Ok(other.glmm(family)?)
}

impl Compared {
    /// The test of the model with fewer parameters of `one` and `two` against the other, and
    /// with `boot` the bootstrap's p-value from its statistics, `boot(smaller, larger)`.
    pub(super) fn find<'a>(
        one: Fitted<'a>,
        two: Fitted<'a>,
        n_obs: usize,
        boot: Option<impl FnOnce(Fitted<'a>, Fitted<'a>) -> Result<Refitted>>,
    ) -> Result<Compared> {
        let (small, large) = match one.2.theta.len() <= two.2.theta.len() {
            true => (one, two),
            false => (two, one),
        };
        let row = |(formula, model, fit): Fitted<'_>| {
            let s = model.summary(&fit.theta, None);
            let l = fit.log_likelihood;
            Row {
                formula: formula.to_string(),
                npar: s.n_params,
                aic: s.aic(l.value),
                bic: s.bic(l.value, n_obs),
                loglik: l.value,
                // An exact fit's error is its quadrature's, at rounding: only EM's is sampled.
                se: match fit.fitted {
                    sagd::glmm::Fitted::Exact(_) => 0.0,
                    sagd::glmm::Fitted::Em(_) => l.se,
                },
            }
        };
        let (chisq, df, p) = large.2.likelihood_ratio(small.2);
        let boot = match boot {
            Some(test) => {
                let stats = test(small, large)?;
                let ok: Vec<f64> = stats
                    .outcomes
                    .iter()
                    .filter_map(|t| t.as_ref().ok().map(|t| t[0]))
                    .collect();
                // Ties within rounding count as at or above: a null on its boundary gives 0 often.
                let above = ok.iter().filter(|&&t| t >= chisq - 1e-6).count();
                let p = (!ok.is_empty()).then(|| (1 + above) as f64 / (1 + ok.len()) as f64);
                Some(Boot {
                    p,
                    refits: ok.len(),
                    failed: stats.outcomes.len() - ok.len(),
                    resumed: stats.resumed,
                })
            }
            None => None,
        };
        Ok(Compared {
            rows: [row(small), row(large)],
            chisq,
            df,
            p,
            boot,
        })
    }

    /// lme4's table of `anova(m0, m1)`, with the bootstrap's p-value where there is one.
    pub(super) fn table(&self, o: &mut String) {
        let width = self.rows.iter().map(|r| r.formula.len()).max().unwrap_or(0);
        let _ = write!(
            o,
            "\nLikelihood-ratio test (lme4's anova):\n{:<width$} {:>5} {:>10} {:>10} {:>11} {:>10} {:>9} {:>3} {:>11}",
            "", "npar", "AIC", "BIC", "logLik", "deviance", "Chisq", "Df", "Pr(>Chisq)"
        );
        if self.boot.is_some() {
            let _ = write!(o, " {:>9}", "Pr(boot)");
        }
        o.push('\n');
        for (k, r) in self.rows.iter().enumerate() {
            let _ = write!(
                o,
                "{:<width$} {:>5} {:>10.2} {:>10.2} {:>11.4} {:>10.4}",
                r.formula,
                r.npar,
                r.aic,
                r.bic,
                r.loglik,
                -2.0 * r.loglik
            );
            if k == 1 {
                let p = self.p.map_or(String::new(), |p| format!("{p:.4e}"));
                let _ = write!(o, " {:>9.4} {:>3} {p:>11}", self.chisq, self.df);
                if let Some(b) = self.boot {
                    let pb = b.p.map_or(String::new(), |p| format!("{p:.4}"));
                    let _ = write!(o, " {pb:>9}");
                }
            }
            o.push('\n');
        }
        if self.rows.iter().any(|r| r.se > 0.0) {
            let se = 2.0 * self.rows[0].se.hypot(self.rows[1].se);
            let _ = writeln!(o, "(Chisq is sampled: its Monte Carlo error is {se:.4})");
        }
        if let Some(b) = self.boot {
            let _ = writeln!(
                o,
                "(Pr(boot): {} draws from the smaller model, each fitted by both{}{})",
                b.refits,
                Refitted::note(b.resumed),
                match b.failed {
                    0 => String::new(),
                    k => format!("; {k} whose refit failed left out"),
                }
            );
        }
    }

    /// anova.csv: one row per model, the test on the second.
    pub(super) fn csv(&self) -> String {
        let mut o =
            String::from("formula,npar,aic,bic,loglik,loglik_se,deviance,chisq,df,p,p_boot\n");
        for (k, r) in self.rows.iter().enumerate() {
            let _ = write!(
                o,
                "{},{},{},{},{},{},{}",
                csv_text(&r.formula),
                r.npar,
                r.aic,
                r.bic,
                r.loglik,
                r.se,
                -2.0 * r.loglik
            );
            let text = |v: Option<f64>| v.map_or(String::new(), |v| v.to_string());
            match k {
                0 => o.push_str(",,,,\n"),
                _ => {
                    let pb = self.boot.and_then(|b| b.p);
                    let _ = writeln!(
                        o,
                        ",{},{},{},{}",
                        self.chisq,
                        self.df,
                        text(self.p),
                        text(pb)
                    );
                }
            }
        }
        o
    }

    /// For result.json.
    pub(super) fn json(&self) -> serde_json::Value {
        let rows: Vec<_> = self
            .rows
            .iter()
            .map(|r| {
                json!({"formula": r.formula, "npar": r.npar, "aic": r.aic, "bic": r.bic,
                       "loglik": r.loglik, "loglik_se": r.se, "deviance": -2.0 * r.loglik})
            })
            .collect();
        let boot = self.boot.map(|b| {
            json!({"p_value": b.p, "refits": b.refits, "failed": b.failed,
                   "resumed_refits": b.resumed})
        });
        json!({"models": rows, "chisq": self.chisq, "df": self.df, "p_value": self.p,
               "bootstrap": boot})
    }
}
