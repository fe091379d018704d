//! `--predict NEW.csv`: the fit carried to new rows, lme4's `predict(fit, newdata,
//! allow.new.levels = TRUE)` with the levels' effects and without them (`re.form = NA`), in
//! predictions.csv.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use sagd::glmm::{Design, Family, FittedValues, Formula, Frame, Glmm};
use serde_json::json;

use super::files::csv_text;
use crate::input::read_table;
use crate::output::{write_atomic, Staging};

/// The new rows, coded as the fitted data.
pub(super) struct NewRows {
    path: PathBuf,
    design: Design,
    /// The fit's --weights column, and whether the new file has it (without it, the residuals
    /// that a weight scales are left blank).
    weights: Option<(String, bool)>,
}

impl NewRows {
    /// The rows of the CSV file `path` under `formula`, coded as the fitted data `frame`; with
    /// the fit's --weights column `weights` of `family`, each row's weight from the file where
    /// it has that column (the Gaussian's prior weight, the binomial's trials under its
    /// proportion), as the fitted rows take theirs.
    pub(super) fn read(
        path: &Path,
        formula: &Formula,
        frame: &Frame,
        (weights, family): (Option<&str>, Family),
    ) -> Result<NewRows> {
        let new = read_table(path)?;
        let context = || format!("--predict {}", path.display());
        let mut design = formula.new_design(frame, &new).with_context(context)?;
        let weights = weights.map(|c| (c.to_string(), new.has_column(c)));
        if let Some((column, true)) = &weights {
            let w = (new.numbers_at(column, &design.rows, "--weights")).with_context(context)?;
            if family == Family::Binomial {
                // The proportion's successes of the row's trials (NaN where not given).
                design.y.iter_mut().zip(&w).for_each(|(y, m)| *y *= m);
            }
            design.trials = Some(w);
        }
        Ok(NewRows {
            path: path.to_path_buf(),
            design,
            weights,
        })
    }

    /// Per row, the grouping factors at a level the fit has not seen (`fitted`'s levels are
    /// the first of each factor's).
    fn unseen<'f>(&self, fitted: &'f Design) -> Vec<Vec<&'f str>> {
        let d = &self.design;
        (0..d.n_obs)
            .map(|i| {
                d.terms
                    .iter()
                    .zip(&fitted.term_names)
                    .filter(|(t, names)| t.group[i] >= names.levels.len())
                    .map(|(_, names)| names.group.as_str())
                    .collect()
            })
            .collect()
    }

    /// result.json's account: the file, its rows kept and dropped, and per grouping factor the
    /// rows at a level the fit has not seen.
    fn json(&self, fitted: &Design, unseen: &[Vec<&str>]) -> serde_json::Value {
        let counts: serde_json::Map<String, serde_json::Value> = fitted
            .term_names
            .iter()
            .map(|t| {
                let rows = unseen.iter().filter(|u| u.contains(&t.group.as_str()));
                (t.group.clone(), json!(rows.count()))
            })
            .collect();
        let mut out = json!({
            "data": self.path.display().to_string(),
            "file": "predictions.csv",
            "rows": self.design.n_obs,
            "dropped": self.design.dropped,
            "rows_at_unseen_levels": counts,
        });
        if let Some((column, has)) = &self.weights {
            out["weights"] = json!(has.then_some(column));
        }
        out
    }

    /// predictions.csv into `staging` (one row per new row kept: its row in the file, η and the
    /// mean with the levels' effects and without, the factors at an unseen level, and the
    /// residuals where the file gives the response) and what a reader should know on stderr,
    /// from `model` at `theta` (fitted to `fitted`); returns result.json's account, or `None`
    /// (and a warning) where the levels' modes could not be found.
    pub(super) fn write(
        &self,
        staging: &mut Staging,
        (model, theta): (&Glmm, &[f64]),
        fitted: &Design,
    ) -> Result<Option<serde_json::Value>> {
        let predicted = model
            .predict(theta, &self.design, true)
            .and_then(|with| Ok((with, model.predict(theta, &self.design, false)?)));
        let (mut with, without) = match predicted {
            Ok(p) => p,
            Err(e) => {
                say_err!("warning: no predictions.csv: {e}");
                return Ok(None);
            }
        };
        if let Some((_, false)) = &self.weights {
            // Without the rows' weights, only the response residual is the fit's.
            with.pearson.fill(f64::NAN);
            with.deviance.fill(f64::NAN);
        }
        let unseen = self.unseen(fitted);
        let text = csv(&self.design, (&with, &without), &unseen);
        write_atomic(&staging.path("predictions.csv"), text)?;
        for note in self.notes(&unseen) {
            say_err!("{note}");
        }
        Ok(Some(self.json(fitted, &unseen)))
    }

    /// What a reader should know on stderr: rows dropped, rows at unseen levels.
    fn notes(&self, unseen: &[Vec<&str>]) -> Vec<String> {
        let mut out = Vec::new();
        let d = &self.design;
        if d.dropped > 0 {
            out.push(format!(
                "note: --predict {}: {} row(s) with a missing predictor left out of predictions.csv",
                self.path.display(),
                d.dropped
            ));
        }
        if let Some((column, false)) = &self.weights {
            out.push(format!(
                "note: --predict {}: no column `{column}` (the fit's --weights): the Pearson and deviance residuals, which a row's weight scales, are left blank",
                self.path.display()
            ));
        }
        let unseen = unseen.iter().filter(|u| !u.is_empty()).count();
        if unseen > 0 {
            out.push(format!(
                "note: --predict {}: {unseen} row(s) at a level the fit has not seen: that factor's effect is 0 there (the population's), as lme4's allow.new.levels = TRUE",
                self.path.display()
            ));
        }
        out
    }
}

/// A number as a CSV field, blank for NaN (a response the file does not give).
fn field(v: f64) -> String {
    if v.is_nan() {
        String::new()
    } else {
        v.to_string()
    }
}

/// One row per new row kept.
fn csv(
    d: &Design,
    (with, without): (&FittedValues, &FittedValues),
    unseen: &[Vec<&str>],
) -> String {
    let mut o = String::from(
        "row,eta,fitted,eta_fixed,fitted_fixed,unseen_levels,residual,pearson,deviance\n",
    );
    for (k, row) in d.rows.iter().enumerate() {
        let levels = match unseen[k].is_empty() {
            true => String::new(),
            false => csv_text(&unseen[k].join(";")),
        };
        let _ = writeln!(
            o,
            "{},{},{},{},{},{levels},{},{},{}",
            row + 1,
            with.eta[k],
            with.mean[k],
            without.eta[k],
            without.mean[k],
            field(with.response[k]),
            field(with.pearson[k]),
            field(with.deviance[k]),
        );
    }
    o
}
