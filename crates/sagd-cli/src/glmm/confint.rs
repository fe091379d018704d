//! `--profile`: profile-likelihood confidence intervals of an exact fit (lme4's `confint(fit)`),
//! in the summary, confint.csv and result.json.

use std::fmt::Write as _;

use sagd::glmm::{Design, Fitted, Glmm, GlmmFit, Summary};
use serde_json::json;

use super::files::csv_text;

/// One parameter's interval on the summary's scale: its kind (fixed, sd, sigma), grouping factor
/// and name, estimate and ends.
struct Row {
    kind: &'static str,
    group: String,
    name: String,
    estimate: f64,
    ends: [f64; 2],
}

/// The profile intervals of a fit at `level`.
pub(super) struct Profiled {
    level: f64,
    rows: Vec<Row>,
}

impl Profiled {
    /// The intervals of `fit` (an exact maximum-likelihood fit, summarised by `s`) at `level`,
    /// or why there are none.
    pub(super) fn find(
        model: &Glmm,
        d: &Design,
        (fit, s): (&GlmmFit, &Summary),
        level: f64,
    ) -> Result<Profiled, String> {
        let Fitted::Exact(exact) = &fit.fitted else {
            return Err(
                "the fit is by Langevin chains, whose likelihood is sampled: profile \
                        intervals need an exact fit (--method exact, on models it can take)"
                    .into(),
            );
        };
        let intervals = model
            .profile_intervals(exact, level)
            .map_err(|e| e.to_string())?;
        let theta = &exact.theta;
        let mut rows = Vec::new();
        let mut add = |(kind, group, name): (&'static str, &str, String),
                       j: usize,
                       estimate: f64,
                       scale: fn(f64) -> f64| {
            if let Some([lo, hi]) = intervals[j] {
                rows.push(Row {
                    kind,
                    group: group.to_string(),
                    name,
                    estimate,
                    ends: [scale(lo), scale(hi)],
                });
            }
        };
        for (j, name) in d.x_names.iter().enumerate() {
            add(("fixed", "", name.clone()), j, theta[j], |v| v);
        }
        // θ's places of each term: its q log sds, then (correlated) each correlation row by
        // row, profiled where it is with the first effect.
        let mut at = model.n_fixed();
        let terms = model.terms().into_iter().zip(&d.term_names).zip(&s.random);
        for (((q, correlated), names), term) in terms {
            let group = names.group.as_str();
            for (a, effect) in names.effects.iter().enumerate() {
                add(
                    ("sd", group, effect.clone()),
                    at + a,
                    term.sd[a].value,
                    f64::exp,
                );
            }
            at += q;
            if correlated {
                for a in 1..q {
                    for b in 0..a {
                        let name = format!("{}:{}", names.effects[b], names.effects[a]);
                        add(("cor", group, name), at, term.cor[a][b], |v| v);
                        at += 1;
                    }
                }
            }
        }
        if at < theta.len() {
            add(
                ("sigma", "", "Residual".into()),
                at,
                theta[at].exp(),
                f64::exp,
            );
        }
        Ok(Profiled { level, rows })
    }

    /// The table under the fixed effects, as lme4's `confint` prints it.
    pub(super) fn table(&self, o: &mut String) {
        let pct = |q: f64| format!("{} %", shown_pct(100.0 * q));
        let (lo, hi) = (pct(0.5 - self.level / 2.0), pct(0.5 + self.level / 2.0));
        let _ = writeln!(
            o,
            "\nProfile confidence intervals ({}, exact likelihood):\n {:<32} {:>10} {:>10} {:>10}",
            pct(self.level),
            "",
            "Estimate",
            lo,
            hi
        );
        for r in &self.rows {
            let name = match r.kind {
                "fixed" => r.name.clone(),
                "sd" | "cor" => format!("{} {} {}", r.kind, r.group, r.name),
                _ => "sigma".to_string(),
            };
            let _ = writeln!(
                o,
                " {name:<32} {:>10.5} {:>10.5} {:>10.5}",
                r.estimate, r.ends[0], r.ends[1]
            );
        }
    }

    /// confint.csv: one row per parameter profiled.
    pub(super) fn csv(&self) -> String {
        let mut o = String::from("kind,group,name,estimate,lower,upper\n");
        for r in &self.rows {
            let _ = writeln!(
                o,
                "{},{},{},{},{},{}",
                r.kind,
                csv_text(&r.group),
                csv_text(&r.name),
                r.estimate,
                r.ends[0],
                r.ends[1]
            );
        }
        o
    }

    /// For result.json.
    pub(super) fn json(&self) -> serde_json::Value {
        let rows: Vec<_> = self
            .rows
            .iter()
            .map(|r| {
                json!({"kind": r.kind, "group": r.group, "name": r.name, "estimate": r.estimate,
                       "lower": finite(r.ends[0]), "upper": finite(r.ends[1])})
            })
            .collect();
        json!({"level": self.level, "method": "profile", "intervals": rows})
    }
}

/// A percentage as R prints it (2.5, 97.5, 95).
fn shown_pct(v: f64) -> String {
    let s = format!("{v:.4}");
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}

/// An end, or a string for ±∞ (JSON has no infinities).
fn finite(v: f64) -> serde_json::Value {
    if v.is_finite() {
        json!(v)
    } else {
        json!(if v > 0.0 { "Inf" } else { "-Inf" })
    }
}
