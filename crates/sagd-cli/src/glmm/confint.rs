//! Confidence intervals of a fit, in the summary, a CSV file and result.json: `--profile`'s from
//! the exact likelihood's profile (lme4's `confint(fit)`, confint.csv), `--bootstrap`'s as the
//! percentiles of the parametric bootstrap's refits (lme4's `confint(fit, method = "boot")`,
//! confint_bootstrap.csv, with each refit in bootstrap.csv).

use std::fmt::Write as _;

use sagd::glmm::{Design, Fitted, Glmm, GlmmFit, Summary};
use serde_json::json;

use super::files::csv_text;
use super::refits::Refitted;

/// One parameter's interval on the summary's scale: its kind (fixed, sd, cor, sigma), grouping
/// factor and name, estimate and ends.
struct Row {
    kind: &'static str,
    group: String,
    name: String,
    estimate: f64,
    ends: [f64; 2],
}

/// A parameter on the summary's scale: kind, grouping factor, name and estimate.
type Parameter = (&'static str, String, String, f64);

/// How a fit's intervals were found.
pub(super) enum Source {
    /// By the profile of the exact likelihood.
    Profile,
    /// As the percentiles of the parametric bootstrap's refits: their number, the draws whose
    /// refit failed, with why, and the refits a resumed run took from its checkpoint.
    Bootstrap {
        refits: usize,
        failed: Vec<(usize, String)>,
        resumed: usize,
    },
}

/// A fit's confidence intervals at `level`.
pub(super) struct Intervals {
    level: f64,
    source: Source,
    rows: Vec<Row>,
}

/// Every parameter the summary reports, in θ's order (β; per term its sds, then for correlated
/// effects their correlations row by row below the diagonal; σ), with its value in `s`.
fn parameters(model: &Glmm, d: &Design, s: &Summary) -> Vec<Parameter> {
    let values = s.values(&model.terms());
    let mut out: Vec<(&'static str, String, String)> = d
        .x_names
        .iter()
        .map(|n| ("fixed", String::new(), n.clone()))
        .collect();
    for ((_, correlated), names) in model.terms().into_iter().zip(&d.term_names) {
        let (group, e) = (&names.group, &names.effects);
        out.extend(e.iter().map(|n| ("sd", group.clone(), n.clone())));
        if correlated {
            for a in 1..e.len() {
                out.extend((0..a).map(|b| ("cor", group.clone(), format!("{}:{}", e[b], e[a]))));
            }
        }
    }
    if s.sigma.is_some() {
        out.push(("sigma", String::new(), "Residual".into()));
    }
    out.into_iter()
        .zip(values)
        .map(|((kind, group, name), v)| (kind, group, name, v))
        .collect()
}

/// The `p` quantile of `sorted` (ascending, not empty) by linear interpolation between order
/// statistics (R's `quantile` type 7, numpy's default).
fn quantile(sorted: &[f64], p: f64) -> f64 {
    let h = (sorted.len() - 1) as f64 * p;
    let (lo, hi) = (h.floor() as usize, h.ceil() as usize);
    sorted[lo] + (h - lo as f64) * (sorted[hi] - sorted[lo])
}

impl Intervals {
    /// The profile intervals of `fit` (an exact maximum-likelihood fit, summarised by `s`) at
    /// `level`, or why there are none.
    pub(super) fn profile(
        model: &Glmm,
        d: &Design,
        (fit, s): (&GlmmFit, &Summary),
        level: f64,
    ) -> Result<Intervals, String> {
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
        // Each profiled place of θ, its ends on the summary's scale (sds and σ from their logs).
        let rows = parameters(model, d, s)
            .into_iter()
            .zip(intervals)
            .filter_map(|((kind, group, name, estimate), ends)| {
                let scale = |v: f64| {
                    if matches!(kind, "sd" | "sigma") {
                        v.exp()
                    } else {
                        v
                    }
                };
                ends.map(|[lo, hi]| Row {
                    kind,
                    group,
                    name,
                    estimate,
                    ends: [scale(lo), scale(hi)],
                })
            })
            .collect();
        Ok(Intervals {
            level,
            source: Source::Profile,
            rows,
        })
    }

    /// The percentile intervals at `level` of the parametric bootstrap's refits `reps` of the fit
    /// summarised by `s` (each refit's [`Summary::values`], or why it failed), and
    /// bootstrap.csv: each draw's status and parameters; or why there are none (no refit
    /// succeeded).
    pub(super) fn bootstrap(
        model: &Glmm,
        d: &Design,
        s: &Summary,
        reps: &Refitted,
        level: f64,
    ) -> Result<(Intervals, String), String> {
        let params = parameters(model, d, s);
        let mut csv = String::from("draw,status");
        for (kind, group, name, _) in &params {
            let label = match *kind {
                "fixed" => name.clone(),
                "sigma" => "sigma".into(),
                _ => format!("{kind} {group} {name}"),
            };
            let _ = write!(csv, ",{}", csv_text(&label));
        }
        csv.push('\n');
        let (mut values, mut failed) = (vec![Vec::new(); params.len()], Vec::new());
        let (resumed, reps) = (reps.resumed, &reps.outcomes);
        for (draw, rep) in reps.iter().enumerate() {
            match rep {
                Ok(v) => {
                    let _ = write!(csv, "{draw},ok");
                    for (j, &v) in v.iter().enumerate() {
                        let _ = write!(csv, ",{v}");
                        values[j].push(v);
                    }
                }
                Err(why) => {
                    let _ = write!(csv, "{draw},{}", csv_text(why));
                    failed.push((draw, why.clone()));
                    csv.push_str(&",".repeat(params.len()));
                }
            }
            csv.push('\n');
        }
        let refits = reps.len() - failed.len();
        if refits == 0 {
            return Err(format!(
                "none of the {} refits succeeded (draw 0: {})",
                reps.len(),
                failed.first().map_or("", |f| f.1.as_str())
            ));
        }
        let tail = (1.0 - level) / 2.0;
        let rows = params
            .into_iter()
            .zip(values)
            .map(|((kind, group, name, estimate), mut v)| {
                v.sort_by(f64::total_cmp);
                Row {
                    kind,
                    group,
                    name,
                    estimate,
                    ends: [quantile(&v, tail), quantile(&v, 1.0 - tail)],
                }
            })
            .collect();
        let source = Source::Bootstrap {
            refits,
            failed,
            resumed,
        };
        Ok((
            Intervals {
                level,
                source,
                rows,
            },
            csv,
        ))
    }

    /// The table under the fixed effects, as lme4's `confint` prints it.
    pub(super) fn table(&self, o: &mut String) {
        let pct = |q: f64| format!("{} %", shown_pct(100.0 * q));
        let (lo, hi) = (pct(0.5 - self.level / 2.0), pct(0.5 + self.level / 2.0));
        let how = match &self.source {
            Source::Profile => format!(
                "Profile confidence intervals ({}, exact likelihood)",
                pct(self.level)
            ),
            Source::Bootstrap {
                refits,
                failed,
                resumed,
            } => format!(
                "Parametric bootstrap intervals ({}, percentiles of {refits} refits{}{})",
                pct(self.level),
                Refitted::note(*resumed),
                match failed.len() {
                    0 => String::new(),
                    1 => "; 1 draw whose refit failed left out, see bootstrap.csv".into(),
                    k => format!("; {k} draws whose refit failed left out, see bootstrap.csv"),
                }
            ),
        };
        let _ = writeln!(
            o,
            "\n{how}:\n {:<32} {:>10} {:>10} {:>10}",
            "", "Estimate", lo, hi
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

    /// confint.csv (or confint_bootstrap.csv): one row per parameter.
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
        match &self.source {
            Source::Profile => json!({"level": self.level, "method": "profile", "intervals": rows}),
            Source::Bootstrap {
                refits,
                failed,
                resumed,
            } => {
                let failed: Vec<_> = failed
                    .iter()
                    .map(|(draw, why)| json!({"draw": draw, "error": why}))
                    .collect();
                json!({"level": self.level, "method": "bootstrap percentile", "refits": refits,
                       "failed": failed, "resumed_refits": resumed, "intervals": rows})
            }
        }
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
