//! `--step`: lmerTest's `step(fit)`, the backward elimination of a Gaussian fit's terms. First
//! the random effects: each round, the one whose ranova test has the largest p-value above
//! `--step-alpha-random` is left out and the model refitted, until no test's p is above it.
//! Then the fixed-effect terms that no other contains, by their F tests (lmerTest's `drop1`,
//! Satterthwaite's degrees of freedom or, with `--ddf kenward-roger`, Kenward and Roger's),
//! each round the one with the largest p above `--step-alpha-fixed`. In the summary and
//! result.json's `step`, with the model found.

use std::fmt::Write as _;

use anyhow::{Context, Result};
use sagd::glmm::formula::ddf_tests;
use sagd::glmm::{Formula, Glmm, GlmmFit};
use serde_json::json;

use super::deletions::{ranova_rows, refit, Deletions, Kind, Row};
use super::inputs::Inputs;
use super::summary::p_text;
use super::GlmmArgs;

/// A fixed-effect term's F test: its name, the step it was left out at (0: kept), Sum Sq, Mean
/// Sq, its degrees of freedom (numerator, denominator), F and p.
struct FixedRow {
    name: String,
    eliminated: usize,
    mean_sq: f64,
    num_df: usize,
    den_df: f64,
    f: f64,
    p: f64,
}

/// lmerTest's step: the random-effect table (each reduction's test when it was left out, then
/// the final model's), the fixed-effect table likewise, and the model found.
pub(super) struct Step {
    random: Deletions,
    fixed: Vec<FixedRow>,
    kenward_roger: bool,
    found: String,
    /// Why the elimination stopped short of lmerTest's, where it did.
    note: Option<String>,
}

/// The index among `ps` of the largest p-value above `alpha` (the first among equals).
fn worst(ps: impl Iterator<Item = (usize, f64)>, alpha: f64) -> Option<usize> {
    ps.filter(|&(_, p)| p > alpha)
        .fold(None, |best: Option<(usize, f64)>, (k, p)| match best {
            Some((_, q)) if q >= p => best,
            _ => Some((k, p)),
        })
        .map(|(k, _)| k)
}

impl Step {
    /// The elimination from the model of `i` fitted as `fit`.
    pub(super) fn find(a: &GlmmArgs, i: &Inputs, fit: &GlmmFit) -> Result<Step> {
        let (mut formula, mut model, mut fit) = (i.formula.clone(), i.model.clone(), fit.clone());
        let (mut eliminated, mut note) = (Vec::<Row>::new(), None);
        // lmerTest's table opens with the model as given, then what each round left out.
        let mut start = None;
        let kept = loop {
            let mut rows = ranova_rows(a, i, (&formula, "--step"), &fit)?;
            if start.is_none() {
                let first = rows.first().map(|(r, _)| r.clone());
                start = first;
            }
            let ps = (rows.iter().enumerate().skip(1))
                .map(|(k, (r, _))| (k, r.test.map_or(f64::NAN, |t| t.2)));
            let Some(k) = worst(ps, a.step_alpha_random) else {
                break rows;
            };
            let (mut row, reduced) = rows.remove(k);
            let Some(reduced) = reduced else {
                note = Some(format!(
                    "{} has p above {} but is the last random term: lmerTest's step would leave it out and reduce a linear model's fixed effects; sagd fits mixed models and keeps it",
                    row.name, a.step_alpha_random
                ));
                rows.insert(k, (row, None));
                break rows;
            };
            row.eliminated = Some(eliminated.len() + 1);
            eliminated.push(row);
            formula = reduced;
            (model, fit) = refit(a, i, (&formula, &i.settings), || {
                format!("--step: {formula}")
            })?;
        };
        let kept = kept.into_iter().skip(1).map(|(row, _)| row);
        let mut rows: Vec<Row> = start.into_iter().collect();
        rows.extend(eliminated);
        rows.extend(kept.map(|mut r| {
            r.eliminated = Some(0);
            r
        }));
        let random = Deletions {
            kind: Kind::Step,
            rows,
            reml: a.reml,
            refitted_by_ml: false,
        };
        let kenward_roger = a.ddf.as_deref() == Some("kenward-roger");
        let fixed = eliminate_fixed(a, i, (&mut formula, &mut model, &mut fit), kenward_roger)?;
        Ok(Step {
            random,
            fixed,
            kenward_roger,
            found: formula.to_string(),
            note,
        })
    }

    /// The two tables and the model found, as lmerTest prints them.
    pub(super) fn table(&self, o: &mut String) {
        self.random.table(o);
        let width = self.fixed.iter().map(|r| r.name.len()).max().unwrap_or(0);
        let method = match self.kenward_roger {
            true => "Kenward-Roger's",
            false => "Satterthwaite's",
        };
        let _ = write!(
            o,
            "\nBackward reduced fixed-effect table ({method} degrees of freedom):\n{:<width$} {:>10} {:>10} {:>10} {:>5} {:>9} {:>9} {:>10}",
            "", "Eliminated", "Sum Sq", "Mean Sq", "NumDF", "DenDF", "F value", "Pr(>F)"
        );
        for r in &self.fixed {
            let _ = write!(
                o,
                "\n{:<width$} {:>10} {:>10.4} {:>10.4} {:>5} {:>9.2} {:>9.4} {:>10}",
                r.name,
                r.eliminated,
                r.mean_sq * r.num_df as f64,
                r.mean_sq,
                r.num_df,
                r.den_df,
                r.f,
                p_text(r.p)
            );
        }
        let _ = writeln!(o, "\n\nModel found:\n{}", self.found);
        if let Some(n) = &self.note {
            let _ = writeln!(o, "note: {n}");
        }
    }

    /// result.json's `step`: both tables, the method of the F tests' degrees of freedom, the
    /// model found, and the note where there is one.
    pub(super) fn json(&self) -> serde_json::Value {
        let fixed: Vec<_> = (self.fixed.iter())
            .map(|r| {
                json!({"term": r.name, "eliminated": r.eliminated,
                       "sum_sq": r.mean_sq * r.num_df as f64, "mean_sq": r.mean_sq,
                       "num_df": r.num_df, "den_df": r.den_df, "f": r.f, "p": r.p})
            })
            .collect();
        let ddf = match self.kenward_roger {
            true => "kenward_roger",
            false => "satterthwaite",
        };
        json!({"random": self.random.json(), "fixed": fixed, "ddf": ddf,
               "model_found": self.found, "note": self.note})
    }
}

/// The fixed-effect part of the elimination on `formula` fitted as `(model, fit)` (each
/// updated to the model found): per round the F tests of the terms no other contains (their
/// type III hypotheses: for such a term, its coefficients are 0), the one with the largest p
/// above `--step-alpha-fixed` left out; the rows of those left out, then the final model's.
fn eliminate_fixed(
    a: &GlmmArgs,
    i: &Inputs,
    (formula, model, fit): (&mut Formula, &mut Glmm, &mut GlmmFit),
    kenward_roger: bool,
) -> Result<Vec<FixedRow>> {
    let mut out = Vec::new();
    loop {
        let reductions = formula.fixed_reductions();
        if reductions.is_empty() {
            return Ok(out);
        }
        let rows = marginal_tests((formula, &*model, &*fit), i, &reductions, kenward_roger)?;
        let ps = rows.iter().map(|r| r.p).enumerate();
        let Some(k) = worst(ps, a.step_alpha_fixed) else {
            out.extend(rows);
            return Ok(out);
        };
        let mut row = rows.into_iter().nth(k).expect("k indexes the rows");
        row.eliminated = out.len() + 1;
        let reduced = reductions.into_iter().find(|(name, _)| *name == row.name);
        *formula = reduced.expect("a row per reduction, by name").1;
        out.push(row);
        let what = || format!("--step: {formula}");
        (*model, *fit) = refit(a, i, (formula, &i.settings), what)?;
    }
}

/// The F test of each term of `reductions` (those no other contains) in `formula` fitted as
/// `(model, fit)`, in their order, each kept (0).
fn marginal_tests(
    (formula, model, fit): (&Formula, &Glmm, &GlmmFit),
    i: &Inputs,
    reductions: &[(String, Formula)],
    kenward_roger: bool,
) -> Result<Vec<FixedRow>> {
    let what = || format!("--step: the F tests of {formula}");
    let contrasts = formula.anova_contrasts(&i.frame, 3).with_context(what)?;
    let (names, hypotheses): (Vec<String>, Vec<_>) = (contrasts.into_iter())
        .filter(|(name, _)| reductions.iter().any(|(r, _)| r == name))
        .unzip();
    let (_, _, tests) = ddf_tests((model, fit), &hypotheses, kenward_roger).with_context(what)?;
    let sigma2 = (2.0 * fit.theta[fit.theta.len() - 1]).exp();
    Ok((names.into_iter().zip(tests))
        .map(|(name, (f, unscaled, q, den_df, p))| FixedRow {
            name,
            eliminated: 0,
            mean_sq: unscaled * sigma2,
            num_df: q,
            den_df,
            f,
            p,
        })
        .collect())
}
