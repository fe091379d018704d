//! `--compare`: likelihood-ratio tests of the model and others of the same rows, each against
//! the one with the next fewer parameters (lme4's `anova(m0, m1, ...)`), and with
//! `--compare-bootstrap N` each test's parametric bootstrap p-value (pbkrtest's `PBmodcomp`);
//! in the summary, anova.csv and result.json.

use std::fmt::Write as _;

use anyhow::{bail, Context, Result};
use sagd::glmm::{Design, Formula, Frame, Glmm, GlmmFit};
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

/// The test of a model against the one before it: the statistic 2 (ℓ − ℓ_before), its degrees
/// of freedom (the parameters gained), the chi-square's p-value (none where none are gained),
/// and the bootstrap's, where asked for.
struct Test {
    chisq: f64,
    df: usize,
    p: Option<f64>,
    boot: Option<Boot>,
}

/// The models ordered by their parameters (the first given first among equals), each after the
/// first tested against the one before it, as lme4's `anova(m0, m1, ...)` tests them.
pub(super) struct Compared {
    rows: Vec<Row>,
    tests: Vec<Test>,
    /// Whether the models, fitted by REML, were refitted by maximum likelihood to be compared
    /// (as lme4's anova refits them).
    pub(super) refitted_by_ml: bool,
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

/// The design of `formula` on `frame`, refused unless it uses the same rows and response as
/// `design` (lme4's anova refuses models of other data).
pub(super) fn other_design(formula: &str, frame: &Frame, design: &Design) -> Result<Design> {
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
    Ok(other)
}

impl Compared {
    /// The tests of `models` (two or more), each against the one with the next fewer
    /// parameters, and with `boot` each test's bootstrap p-value from its statistics,
    /// `boot(k, smaller, larger)` for the k-th test (from 1).
    pub(super) fn find<'a>(
        mut models: Vec<Fitted<'a>>,
        n_obs: usize,
        mut boot: Option<impl FnMut(usize, Fitted<'a>, Fitted<'a>) -> Result<Refitted>>,
    ) -> Result<Compared> {
        models.sort_by_key(|m| m.2.theta.len());
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
        let mut tests = Vec::new();
        for (k, pair) in models.windows(2).enumerate() {
            let (small, large) = (pair[0], pair[1]);
            let (chisq, df, p) = large.2.likelihood_ratio(small.2);
            let boot = match boot.as_mut() {
                Some(test) => Some(Boot::of(test(k + 1, small, large)?, chisq)),
                None => None,
            };
            tests.push(Test { chisq, df, p, boot });
        }
        Ok(Compared {
            rows: models.into_iter().map(row).collect(),
            tests,
            refitted_by_ml: false,
        })
    }

    /// The test of the model in row `k` against the one before it (none for the first).
    fn test_of(&self, k: usize) -> Option<&Test> {
        k.checked_sub(1).map(|j| &self.tests[j])
    }

    /// lme4's table of `anova(m0, m1, ...)`, with the bootstrap's p-values where there are.
    pub(super) fn table(&self, o: &mut String) {
        let width = self.rows.iter().map(|r| r.formula.len()).max().unwrap_or(0);
        let booted = self.tests.iter().any(|t| t.boot.is_some());
        let _ = write!(
            o,
            "\nLikelihood-ratio test (lme4's anova{}):\n{:<width$} {:>5} {:>10} {:>10} {:>11} {:>10} {:>9} {:>3} {:>11}",
            match self.refitted_by_ml {
                true => "; the models refitted by ML instead of REML",
                false => "",
            },
            "", "npar", "AIC", "BIC", "logLik", "deviance", "Chisq", "Df", "Pr(>Chisq)"
        );
        if booted {
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
            if let Some(t) = self.test_of(k) {
                let p = t.p.map_or(String::new(), |p| format!("{p:.4e}"));
                let _ = write!(o, " {:>9.4} {:>3} {p:>11}", t.chisq, t.df);
                if let Some(b) = t.boot {
                    let pb = b.p.map_or(String::new(), |p| format!("{p:.4}"));
                    let _ = write!(o, " {pb:>9}");
                }
            }
            o.push('\n');
        }
        for (t, pair) in self.tests.iter().zip(self.rows.windows(2)) {
            if pair[0].se > 0.0 || pair[1].se > 0.0 {
                let se = 2.0 * pair[0].se.hypot(pair[1].se);
                let _ = writeln!(
                    o,
                    "(Chisq of {} is sampled: its Monte Carlo error is {se:.4})",
                    pair[1].formula
                );
            }
            if let Some(b) = t.boot {
                let _ = writeln!(
                    o,
                    "(Pr(boot) of {}: {} draws from {}, each fitted by both{}{})",
                    pair[1].formula,
                    b.refits,
                    pair[0].formula,
                    Refitted::note(b.resumed),
                    match b.failed {
                        0 => String::new(),
                        k => format!("; {k} whose refit failed left out"),
                    }
                );
            }
        }
    }

    /// anova.csv: one row per model, each after the first with its test against the one before.
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
            match self.test_of(k) {
                None => o.push_str(",,,,\n"),
                Some(t) => {
                    let pb = t.boot.and_then(|b| b.p);
                    let (p, pb) = (text(t.p), text(pb));
                    let _ = writeln!(o, ",{},{},{p},{pb}", t.chisq, t.df);
                }
            }
        }
        o
    }

    /// For result.json: the models in order, each after the first with its test.
    pub(super) fn json(&self) -> serde_json::Value {
        let rows: Vec<_> = self
            .rows
            .iter()
            .enumerate()
            .map(|(k, r)| {
                let test = self.test_of(k).map(|t| {
                    let boot = t.boot.map(|b| {
                        json!({"p_value": b.p, "refits": b.refits, "failed": b.failed,
                               "resumed_refits": b.resumed})
                    });
                    json!({"chisq": t.chisq, "df": t.df, "p_value": t.p, "bootstrap": boot})
                });
                json!({"formula": r.formula, "npar": r.npar, "aic": r.aic, "bic": r.bic,
                       "loglik": r.loglik, "loglik_se": r.se, "deviance": -2.0 * r.loglik,
                       "test": test})
            })
            .collect();
        json!({ "models": rows, "refitted_by_ml": self.refitted_by_ml })
    }
}

impl Boot {
    /// The bootstrap's test from the statistics `stats` of its draws, the data's being `chisq`:
    /// (1 + #{T* ≥ T}) / (1 + refits), none where no refit succeeded.
    fn of(stats: Refitted, chisq: f64) -> Boot {
        let ok: Vec<f64> = stats
            .outcomes
            .iter()
            .filter_map(|t| t.as_ref().ok().map(|t| t[0]))
            .collect();
        // Ties within rounding count as at or above: a null on its boundary gives 0 often.
        let above = ok.iter().filter(|&&t| t >= chisq - 1e-6).count();
        Boot {
            p: (!ok.is_empty()).then(|| (1 + above) as f64 / (1 + ok.len()) as f64),
            refits: ok.len(),
            failed: stats.outcomes.len() - ok.len(),
            resumed: stats.resumed,
        }
    }
}
