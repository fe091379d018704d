//! `--ddf satterthwaite` and `--ddf kenward-roger`: lmerTest's tests of a Gaussian fit's fixed
//! effects, the t test of each coefficient (`summary(fit)`) and the type III F test of each term
//! (`anova(fit)`), with Satterthwaite's or Kenward and Roger's degrees of freedom; in the
//! summary and result.json.

use std::fmt::Write as _;

use sagd::glmm::formula::ddf_tests;
use sagd::glmm::{Design, Formula, Frame, Glmm, GlmmFit, Summary};
use serde_json::json;

use super::summary::{p_text, se_text, shown};

/// A term's type III test: its name, F, its degrees of freedom (numerator, denominator), p, and
/// its Mean Sq (the unscaled F times σ²; Kenward and Roger's F is scaled).
type TermTest = (String, f64, usize, f64, f64, f64);

/// A fit's tests: per coefficient its standard error (given the variance parameters, or
/// Kenward and Roger's adjusted), degrees of freedom and p; per term of the fixed effects its F
/// test; and whether they are Kenward and Roger's.
pub(super) struct Ddf {
    kenward_roger: bool,
    t: Vec<(f64, f64, f64)>,
    terms: Vec<TermTest>,
    /// The terms' tests' type (lmerTest's 1, 2 or 3).
    kind: usize,
}

impl Ddf {
    /// The tests of `fit` (of `model`, from `formula` on `frame`) by `method` (`satterthwaite`
    /// or `kenward-roger`), or `None` (and a warning) where the fit has no covariance to take
    /// Satterthwaite's from or the tests cannot be made; without the terms' tests (and a
    /// warning) where their hypotheses cannot be made.
    pub(super) fn find(
        (method, kind): (&str, usize),
        model: &Glmm,
        fit: &GlmmFit,
        (formula, frame): (&Formula, &Frame),
    ) -> Option<Ddf> {
        let kenward_roger = method == "kenward-roger";
        let name = if kenward_roger {
            "Kenward-Roger"
        } else {
            "Satterthwaite"
        };
        let warn = |what: &str, e: String| say_err!("warning: no {name} {what}: {e}");
        let contrasts = formula.anova_contrasts(frame, kind).unwrap_or_else(|e| {
            warn("F tests of the terms", e.to_string());
            Vec::new()
        });
        let (names, hypotheses): (Vec<String>, Vec<_>) = contrasts.into_iter().unzip();
        let (t, f) = match ddf_tests((model, fit), &hypotheses, kenward_roger) {
            Ok((_, t, f)) => (t, f),
            Err(e) => {
                warn("tests", e.to_string());
                return None;
            }
        };
        let sigma2 = (2.0 * fit.theta[fit.theta.len() - 1]).exp();
        let terms = (names.into_iter().zip(f))
            .map(|(name, (f, fu, q, ddf, p))| (name, f, q, ddf, p, fu * sigma2))
            .collect();
        Some(Ddf {
            kenward_roger,
            t,
            terms,
            kind,
        })
    }

    /// The method's name as lmerTest prints it.
    fn method(&self) -> &'static str {
        match self.kenward_roger {
            true => "Kenward-Roger's",
            false => "Satterthwaite's",
        }
    }

    /// The fixed effects' table with the t tests, then the terms' type III table, as lmerTest
    /// prints them.
    pub(super) fn tables(&self, o: &mut String, d: &Design, s: &Summary) {
        let _ = writeln!(
            o,
            "\nFixed effects (t tests with {} degrees of freedom):\n {:<20} {:>10} {:>11} {:>9} {:>8} {:>10}",
            self.method(), "", "Estimate", "Std. Error", "df", "t value", "Pr(>|t|)"
        );
        for ((name, e), &(se, df, p)) in d.x_names.iter().zip(&s.fixed).zip(&self.t) {
            let _ = writeln!(
                o,
                " {name:<20} {:>10} {:>11} {df:>9.2} {:>8.3} {:>10}",
                shown(e.value, 5),
                se_text(se),
                e.value / se,
                p_text(p)
            );
        }
        if self.terms.is_empty() {
            return;
        }
        let _ = writeln!(
            o,
            "\nType {} analysis of variance with {} method:\n {:<20} {:>10} {:>10} {:>5} {:>9} {:>9} {:>10}",
            ["I", "II", "III"][self.kind - 1], self.method(), "", "Sum Sq", "Mean Sq", "NumDF", "DenDF", "F value", "Pr(>F)"
        );
        for (name, f, q, ddf, p, ms) in &self.terms {
            let _ = writeln!(
                o,
                " {name:<20} {:>10.4} {ms:>10.4} {q:>5} {ddf:>9.2} {f:>9.4} {:>10}",
                ms * *q as f64,
                p_text(*p)
            );
        }
    }

    /// result.json's `satterthwaite` (or `kenward_roger`: per coefficient its name, standard
    /// error, degrees of freedom and p) and `anova_typeN` for the table's type N (per term its
    /// Sum Sq, Mean Sq, F, degrees of freedom and p; `anova_typeN_ddf` says by which method).
    pub(super) fn json(&self, d: &Design, result: &mut serde_json::Value) {
        let key = if self.kenward_roger {
            "kenward_roger"
        } else {
            "satterthwaite"
        };
        result[key] = json!((d.x_names.iter().zip(&self.t))
            .map(|(name, (se, df, p))| json!({"name": name, "se": se, "df": df, "p": p}))
            .collect::<Vec<_>>());
        result[format!("anova_type{}", self.kind)] = json!((self.terms.iter())
            .map(|(name, f, q, ddf, p, ms)| json!({"term": name, "sum_sq": ms * *q as f64, "mean_sq": ms,
                                                   "f": f, "num_df": q, "den_df": ddf, "p": p}))
            .collect::<Vec<_>>());
        result[format!("anova_type{}_ddf", self.kind)] = json!(key);
    }
}
