//! lme4's model formulas on a table of columns: `y ~ x + f + (1 + x | g)` read into a
//! [`Design`] (the response, the fixed-effects design, the random-effect terms and every
//! column's name), with R's conventions, so that a formula means here what it means to `glmer`.
//!
//! What is read: a response (a column, or `cbind(successes, failures)` for the binomial family);
//! terms joined by `+`; interactions `a:b` and crossings `a*b` (every sub-interaction); `1`,
//! `0` and `- 1` for the intercept; `factor(x)` to treat a numeric column as categorical; and
//! random-effect terms `(effects | g)` (correlated effects) or `(effects || g)` (independent),
//! whose effects are read as a formula's right-hand side of their own (an intercept unless `0`),
//! grouped by a column, an interaction of columns `g:h`, or a nesting `g/h` (the terms of `g`
//! and of `g:h`). Names with other characters are quoted in backticks. An offset, a known part
//! of the linear predictor, is `offset(t)` or `offset(log(t))` among the fixed effects
//! (different ones are summed and one written twice counts once, as in R). Other functions
//! (`log(x)`, `I(x^2)`) are refused with the advice to add the column to the data.
//!
//! R's coding: a categorical column's levels are sorted (numbers by value, text in byte order);
//! within a term, a categorical variable is coded by treatment contrasts (its first level the
//! reference) when the term without it is in the model (the intercept being the empty term),
//! else by one indicator per level. Columns are named as R names them: `(Intercept)`, `x`,
//! `gB`, `x:gB`. Rows with a missing value (an empty field, `NA` or `NaN`) in any variable the
//! formula uses are dropped and counted, as lme4's `na.omit`.

mod coding;
mod frame;
mod ls_means;
pub use ls_means::{contrast_table, ls_means_table, pairwise_contrasts, LS_MEANS_METHODS};
mod new_data;
mod parse;
mod ranova;
mod render;
pub use ranova::{least_squares_loglik, term_reductions};
mod type3;
pub use type3::{ddf_tests, type3_hypotheses};
mod types12;
pub use types12::anova_hypotheses;

pub use frame::{Column, Frame};

use std::collections::BTreeMap;

use coding::{Coding, Columns, Source};

use super::{checks, Family, Glmm, RandomTerm};
use crate::error::{invalid, Result};

/// A variable of a term: a column, categorical when `factor(…)` says so or its values are text.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Var {
    name: String,
    factor: bool,
}

/// A right-hand side: whether it has an intercept, and its terms (each an interaction of
/// variables) in the order R gives them (by degree, then first appearance).
#[derive(Clone, Debug, PartialEq)]
struct Effects {
    intercept: bool,
    terms: Vec<Vec<Var>>,
}

/// `(effects | g)` or `(effects || g)`, one per grouping factor after a nesting `g/h` is expanded.
#[derive(Clone, Debug, PartialEq)]
struct Bar {
    effects: Effects,
    /// The columns whose interaction groups the rows.
    group: Vec<String>,
    correlated: bool,
}

/// `offset(column)` or `offset(log(column))`.
#[derive(Clone, Debug, PartialEq)]
struct Offset {
    column: String,
    log: bool,
}

impl Offset {
    /// As written in the formula.
    fn shown(&self) -> String {
        if self.log {
            format!("offset(log({}))", self.column)
        } else {
            format!("offset({})", self.column)
        }
    }
}

/// The response.
#[derive(Clone, Debug, PartialEq)]
enum Response {
    Column(String),
    /// `cbind(successes, failures)`.
    Cbind(String, String),
}

/// A parsed model formula in lme4's notation (see the module's documentation).
#[derive(Clone, Debug, PartialEq)]
pub struct Formula {
    text: String,
    response: Response,
    fixed: Effects,
    random: Vec<Bar>,
    offsets: Vec<Offset>,
}

/// The names of one random-effect term's effects, its grouping factor and the factor's levels.
#[derive(Clone, Debug, PartialEq)]
pub struct TermNames {
    /// The grouping factor, as written (`g`, `g:h`).
    pub group: String,
    /// The effects' names (`(Intercept)`, `x`).
    pub effects: Vec<String>,
    /// The factor's levels, in the order of the term's group indices.
    pub levels: Vec<String>,
}

/// A formula applied to a [`Frame`]: the arrays a [`Glmm`] is built from, and their names.
#[derive(Clone, Debug)]
pub struct Design {
    /// The response (successes, for `cbind`).
    pub y: Vec<f64>,
    /// Trials per row (`cbind(s, f)`: s + f), if the formula gives them.
    pub trials: Option<Vec<f64>>,
    /// The fixed-effects design, row-major n × p.
    pub x: Vec<f64>,
    /// Its columns' names.
    pub x_names: Vec<String>,
    /// The random-effect terms.
    pub terms: Vec<RandomTerm>,
    /// Their names.
    pub term_names: Vec<TermNames>,
    /// The rows used.
    pub n_obs: usize,
    /// The rows dropped for a missing value.
    pub dropped: usize,
    /// The response's name as written.
    pub response: String,
    /// Each used row's index in the frame (0-based).
    pub rows: Vec<usize>,
    /// The offset of each used row (the sum of the formula's `offset(…)` terms), if it has any.
    pub offset: Option<Vec<f64>>,
}

impl Design {
    /// The GLMM of this design in `family`.
    pub fn glmm(&self, family: Family) -> Result<Glmm> {
        if self.trials.is_some() && family != Family::Binomial {
            return Err(invalid(
                "formula",
                format!("cbind(…) response with family {family:?}"),
                "cbind(successes, failures) is the binomial family's response: use --family binomial",
            ));
        }
        // The family's response, checked here to name the data row.
        for (k, &yi) in self.y.iter().enumerate() {
            let m = self.trials.as_ref().map_or(1.0, |t| t[k]);
            let needs = match family {
                Family::Gaussian => "",
                Family::Poisson => "counts 0, 1, 2, …",
                Family::Binomial if self.trials.is_some() => {
                    "whole numbers of successes and failures, at least one trial a row"
                }
                Family::Binomial => "0 or 1 (or two levels, or cbind(successes, failures))",
            };
            if !family.admits(yi, m) {
                return Err(invalid(
                    "data",
                    format!(
                        "the response `{}` is {yi} at data row {}",
                        self.response,
                        self.rows[k] + 1
                    ),
                    &format!("the {family:?} family needs {needs}: fix the value, or choose the family that fits the data"),
                ));
            }
        }
        // Named by the formula's grouping factors before the model names them by number.
        let levels: Vec<usize> = self.term_names.iter().map(|t| t.levels.len()).collect();
        checks::identified_terms(family, &levels, self.y.len(), |t| {
            format!("the grouping factor `{}`", self.term_names[t].group)
        })?;
        checks::distinct_effects(&self.terms, self.y.len(), |t, a| {
            let names = &self.term_names[t];
            format!(
                "`{}` of random-effect term {} (grouped by `{}`)",
                names.effects[a],
                t + 1,
                names.group
            )
        })?;
        let (y, x, terms, trials) = (
            self.y.clone(),
            self.x.clone(),
            self.terms.clone(),
            self.trials.clone(),
        );
        match &self.offset {
            Some(o) => Glmm::with_offset(family, y, x, terms, trials, o.clone()),
            None => Glmm::with_terms(family, y, x, terms, trials),
        }
    }
}

impl Formula {
    /// The formula as given.
    pub fn text(&self) -> &str {
        &self.text
    }

    /// The response's columns.
    fn response_columns(&self) -> Vec<&str> {
        match &self.response {
            Response::Column(y) => vec![y],
            Response::Cbind(s, f) => vec![s, f],
        }
    }

    /// Every column the formula uses.
    fn columns(&self) -> Vec<&str> {
        let mut out = self.response_columns();
        let effects = std::iter::once(&self.fixed).chain(self.random.iter().map(|b| &b.effects));
        for e in effects {
            out.extend(e.terms.iter().flatten().map(|v| v.name.as_str()));
        }
        out.extend(
            self.random
                .iter()
                .flat_map(|b| b.group.iter().map(String::as_str)),
        );
        out.extend(self.offsets.iter().map(|o| o.column.as_str()));
        out.sort_unstable();
        out.dedup();
        out
    }

    /// The formula's arrays on `frame`'s rows without a missing value.
    pub fn design(&self, frame: &Frame) -> Result<Design> {
        let (cols, rows) = complete_rows(frame, &self.columns(), Source::Fitted)?;
        let coding = self.coding(&cols, &rows);
        self.refuse_saturated(&cols, &rows, &coding)?;
        let fitted = (&coding, Source::Fitted);
        let response = self.response_values(&cols, &rows, fitted)?;
        self.arrays(&cols, (rows, frame.n_rows()), fitted, response)
    }

    /// The design of `rows` of `cols` (of `read` rows in all) under `coding`, with the
    /// response's name, values and trials.
    fn arrays(
        &self,
        cols: &Columns<'_>,
        (rows, read): (Vec<usize>, usize),
        (coding, source): (&Coding, Source),
        (response, y, trials): (String, Vec<f64>, Option<Vec<f64>>),
    ) -> Result<Design> {
        let (x, x_names) = self.matrix(&self.fixed, cols, &rows, (coding, source))?;
        let (terms, term_names) = self.random_terms(cols, &rows, (coding, source))?;
        let offset = self.offset_values(cols, &rows, source)?;
        Ok(Design {
            y,
            trials,
            x,
            x_names,
            terms,
            term_names,
            n_obs: rows.len(),
            dropped: read - rows.len(),
            response,
            rows,
            offset,
        })
    }

    /// The sum of the offsets on the rows kept (None without any); the log of a value that is
    /// not positive is an error that names its row.
    fn offset_values(
        &self,
        cols: &Columns<'_>,
        rows: &[usize],
        source: Source,
    ) -> Result<Option<Vec<f64>>> {
        if self.offsets.is_empty() {
            return Ok(None);
        }
        let mut total = vec![0.0; rows.len()];
        for o in &self.offsets {
            let values = numbers(cols, rows, &o.column, "offset", source)?;
            for (k, (t, v)) in total.iter_mut().zip(values).enumerate() {
                if o.log && v <= 0.0 {
                    return Err(invalid(
                        source.input(),
                        format!(
                            "{}: `{}` is {v} at {}",
                            o.shown(),
                            o.column,
                            source.row(rows[k])
                        ),
                        "the log of an exposure needs it above 0: fix the value or drop the row",
                    ));
                }
                *t += if o.log { v.ln() } else { v };
            }
        }
        if let Some(k) = total.iter().position(|v| !v.is_finite()) {
            return Err(invalid(
                source.input(),
                format!("the offset is {} at {}", total[k], source.row(rows[k])),
                "give offsets that are finite numbers",
            ));
        }
        Ok(Some(total))
    }

    /// The response's name as the formula gives it, its values, and the numbers of trials
    /// (`cbind(successes, failures)`), on `rows`; a text response as its level's index under
    /// `coding` (the first level the failure, as R's), NaN where a row of new data lacks it.
    #[allow(clippy::type_complexity)]
    fn response_values(
        &self,
        cols: &Columns<'_>,
        rows: &[usize],
        (coding, source): (&Coding, Source),
    ) -> Result<(String, Vec<f64>, Option<Vec<f64>>)> {
        Ok(match &self.response {
            Response::Column(name) => {
                let y = match coding.response_levels() {
                    Some(levels) => {
                        if levels.len() != 2 {
                            return Err(invalid(
                                "data",
                                format!(
                                    "the response `{name}` has text with {} levels",
                                    levels.len()
                                ),
                                "give numbers, or two levels for a binary response",
                            ));
                        }
                        let col = cols[name.as_str()];
                        rows.iter()
                            .map(|&i| match coding::label(col, i) {
                                _ if col.missing(i) => Ok(f64::NAN),
                                l if l == levels[0] => Ok(0.0),
                                l if l == levels[1] => Ok(1.0),
                                l => Err(invalid(
                                    source.input(),
                                    format!("the response `{name}` is `{l}` at {}", source.row(i)),
                                    &format!("give one of its two levels, {}", levels.join(" or ")),
                                )),
                            })
                            .collect::<Result<_>>()?
                    }
                    None => numbers(cols, rows, name, "response", source)?,
                };
                (self.response_name(), y, None)
            }
            Response::Cbind(s, f) => {
                let succ = numbers(cols, rows, s, "response", source)?;
                let fail = numbers(cols, rows, f, "response", source)?;
                let trials = succ.iter().zip(&fail).map(|(a, b)| a + b).collect();
                (self.response_name(), succ, Some(trials))
            }
        })
    }

    /// The response as written: its column, or `cbind(successes, failures)`.
    fn response_name(&self) -> String {
        match &self.response {
            Response::Column(name) => name.clone(),
            Response::Cbind(s, f) => format!("cbind({s}, {f})"),
        }
    }
}

/// The columns `names` of `frame` and its rows without a missing value in any of them; a
/// column that is not there, or no such row, is an error that says so.
fn complete_rows<'f>(
    frame: &'f Frame,
    names: &[&'f str],
    source: Source,
) -> Result<(Columns<'f>, Vec<usize>)> {
    let mut cols = BTreeMap::new();
    for &name in names {
        let col = match (frame.find(name), source) {
            (Some(col), _) => col,
            (None, Source::Fitted) => frame.column(name)?,
            (None, Source::New) => {
                return Err(invalid(
                    "new data",
                    format!("no column `{name}`, which the formula uses"),
                    "add it: new data need every predictor, grouping factor and offset of the \
                     formula (the response may be left out)",
                ))
            }
        };
        cols.insert(name, col);
    }
    let rows: Vec<usize> = (0..frame.n_rows())
        .filter(|&i| cols.values().all(|c| !c.missing(i)))
        .collect();
    if rows.is_empty() {
        let what = match source {
            Source::Fitted => "the formula's columns",
            Source::New => "the formula's predictors, grouping factors and offsets",
        };
        return Err(invalid(
            source.input(),
            format!(
                "no row without a missing value in {what} ({} rows read)",
                frame.n_rows()
            ),
            "fill in or remove the missing values",
        ));
    }
    Ok((cols, rows))
}

/// Whether two interactions have the same variables (in any order).
fn same_term(a: &[Var], b: &[Var]) -> bool {
    a.len() == b.len() && a.iter().all(|v| b.contains(v))
}

/// The values of the numeric column `name` (the formula's `role`) on the rows kept; text is an
/// error that names it.
fn numbers(
    cols: &Columns<'_>,
    rows: &[usize],
    name: &str,
    role: &str,
    source: Source,
) -> Result<Vec<f64>> {
    match cols[name] {
        Column::Number(v) => Ok(rows.iter().map(|&i| v[i]).collect()),
        Column::Text(v) => {
            let i = rows.iter().copied().find(|&i| v[i].is_some()).unwrap_or(0);
            Err(invalid(
                source.input(),
                format!(
                    "the {role} `{name}` has text (`{}`)",
                    v[i].as_deref().unwrap_or("")
                ),
                "give it numbers, or fix the value",
            ))
        }
    }
}

#[cfg(test)]
mod tests;
