//! `--ls-means`: lmerTest's `ls_means(fit)`, the least-squares mean of each combination of the
//! levels of every term of categorical variables (or, with `pairwise`, each pair's difference),
//! with its t test and interval: Satterthwaite's or Kenward and Roger's degrees of freedom for a
//! Gaussian fit, Wald z (emmeans' asymptotic test, on the link's scale) for the other families;
//! in the summary, ls_means.csv and result.json.

use std::fmt::Write as _;

use sagd::glmm::formula::ls_means_table;
use sagd::glmm::{Family, GlmmFit};
use serde_json::json;

use super::files::csv_text;
use super::inputs::Inputs;
use super::summary::{p_text, se_text, shown};
use super::GlmmArgs;

/// A mean (or a difference of two): its term, its name, and its table row (estimate, standard
/// error, degrees of freedom, t, the interval's ends, p).
struct Row {
    term: String,
    name: String,
    values: [f64; 7],
}

/// The least-squares means of a fit, how their degrees of freedom were found, and at what level
/// their intervals are.
pub(super) struct LsMeans {
    rows: Vec<Row>,
    method: &'static str,
    level: f64,
    pairwise: bool,
    /// Whether the rows are on the response's scale (a non-Gaussian family's, asked for).
    response: bool,
}

impl LsMeans {
    /// The means (or their pairwise differences) of the fit of `i`, or `None` and a warning
    /// where they cannot be made (no term of categorical variables, no covariance).
    pub(super) fn find(a: &GlmmArgs, i: &Inputs, fit: &GlmmFit) -> Option<LsMeans> {
        let pairwise = a.ls_means.as_deref()? == "pairwise";
        let warn = |e: String| say_err!("warning: no least-squares means: {e}");
        let terms = match i.formula.ls_means_contrasts(&i.frame) {
            Ok(t) if t.is_empty() => {
                warn("the fixed effects have no term of categorical variables only".into());
                return None;
            }
            Ok(t) => t,
            Err(e) => {
                warn(e.to_string());
                return None;
            }
        };
        let response = a.ls_means_scale == "response" && i.family != Family::Gaussian;
        let asked = (
            pairwise,
            a.ddf.as_deref() == Some("kenward-roger"),
            response,
        );
        let fitted = (&i.model, fit);
        let (method, rows) = match ls_means_table(fitted, terms, asked, a.ls_means_level) {
            Ok(t) => t,
            Err(e) => {
                warn(e.to_string());
                return None;
            }
        };
        let rows = (rows.into_iter())
            .map(|(term, name, values)| Row { term, name, values })
            .collect();
        Some(LsMeans {
            rows,
            method,
            level: a.ls_means_level,
            pairwise,
            response,
        })
    }

    /// The table as lmerTest prints it, under a heading that says what it holds.
    pub(super) fn table(&self, o: &mut String) {
        let what = match (self.pairwise, self.response) {
            (true, false) => "Pairwise differences of least-squares means",
            (true, true) => "Pairwise ratios of least-squares means on the response scale",
            (false, false) => "Least-squares means",
            (false, true) => "Least-squares means on the response scale",
        };
        let (how, stat, p) = match self.method {
            "kenward_roger" => ("Kenward-Roger's degrees of freedom", "t value", "Pr(>|t|)"),
            "satterthwaite" => ("Satterthwaite's degrees of freedom", "t value", "Pr(>|t|)"),
            _ => ("Wald z tests on the link's scale", "z value", "Pr(>|z|)"),
        };
        let width = self.rows.iter().map(|r| r.name.len()).max().unwrap_or(0);
        let _ = write!(
            o,
            "\n{what} (lmerTest's ls_means; {how}; {}% intervals):\n{:<width$} {:>10} {:>11} {:>7} {:>8} {:>10} {:>10} {:>10}",
            100.0 * self.level,
            "", "Estimate", "Std. Error", "df", stat, "lower", "upper", p
        );
        for r in &self.rows {
            let [e, se, df, t, lo, hi, pv] = r.values;
            let _ = write!(
                o,
                "\n{:<width$} {:>10} {:>11} {df:>7.1} {t:>8.4} {:>10} {:>10} {:>10}",
                r.name,
                shown(e, 5),
                se_text(se),
                shown(lo, 5),
                shown(hi, 5),
                p_text(pv)
            );
        }
        o.push('\n');
    }

    /// ls_means.csv: a row per mean (or difference).
    pub(super) fn csv(&self) -> String {
        let mut o = String::from("term,name,estimate,se,df,t,lower,upper,p\n");
        for r in &self.rows {
            let [e, se, df, t, lo, hi, p] = r.values;
            let _ = writeln!(
                o,
                "{},{},{e},{se},{df},{t},{lo},{hi},{p}",
                csv_text(&r.term),
                csv_text(&r.name)
            );
        }
        o
    }

    /// result.json's `ls_means`: how the degrees of freedom were found, the intervals' level,
    /// whether the rows are pairwise differences, their scale (`link` or `response`), then a row per mean (or difference); infinite
    /// degrees of freedom (Wald's) are null.
    pub(super) fn json(&self) -> serde_json::Value {
        let rows: Vec<_> = (self.rows.iter())
            .map(|r| {
                let [e, se, df, t, lo, hi, p] = r.values;
                let df = df.is_finite().then_some(df);
                json!({"term": r.term, "name": r.name, "estimate": e, "se": se, "df": df,
                       "t": t, "lower": lo, "upper": hi, "p": p})
            })
            .collect();
        let scale = if self.response { "response" } else { "link" };
        json!({"ddf": self.method, "level": self.level, "pairwise": self.pairwise,
               "scale": scale, "means": rows})
    }
}
