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

mod frame;
mod parse;

pub use frame::{Column, Frame};

use std::collections::BTreeMap;

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

    /// Every column the formula uses.
    fn columns(&self) -> Vec<&str> {
        let mut out: Vec<&str> = match &self.response {
            Response::Column(y) => vec![y],
            Response::Cbind(s, f) => vec![s, f],
        };
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
        let used = self.columns();
        let mut cols = BTreeMap::new();
        for name in &used {
            cols.insert(*name, frame.column(name)?);
        }
        let rows: Vec<usize> = (0..frame.n_rows())
            .filter(|&i| cols.values().all(|c| !c.missing(i)))
            .collect();
        if rows.is_empty() {
            return Err(invalid(
                "data",
                format!(
                    "no row without a missing value in the formula's columns ({} rows read)",
                    frame.n_rows()
                ),
                "fill in or remove the missing values",
            ));
        }
        let n = rows.len();
        let (response, y, trials) = self.response_values(&cols, &rows)?;
        let (x, x_names) = self.matrix(&self.fixed, &cols, &rows)?;
        let (terms, term_names) = self.random_terms(&cols, &rows)?;
        let offset = self.offset_values(&cols, &rows)?;
        Ok(Design {
            y,
            trials,
            x,
            x_names,
            terms,
            term_names,
            n_obs: n,
            dropped: frame.n_rows() - n,
            response,
            rows,
            offset,
        })
    }

    /// The sum of the offsets on the rows kept (None without any); the log of a value that is
    /// not positive is an error that names its row.
    fn offset_values(
        &self,
        cols: &BTreeMap<&str, &Column>,
        rows: &[usize],
    ) -> Result<Option<Vec<f64>>> {
        if self.offsets.is_empty() {
            return Ok(None);
        }
        let mut total = vec![0.0; rows.len()];
        for o in &self.offsets {
            let values = numbers(cols, rows, &o.column, "offset")?;
            for (k, (t, v)) in total.iter_mut().zip(values).enumerate() {
                if o.log && v <= 0.0 {
                    return Err(invalid(
                        "data",
                        format!(
                            "{}: `{}` is {v} at data row {}",
                            o.shown(),
                            o.column,
                            rows[k] + 1
                        ),
                        "the log of an exposure needs it above 0: fix the value or drop the row",
                    ));
                }
                *t += if o.log { v.ln() } else { v };
            }
        }
        if let Some(k) = total.iter().position(|v| !v.is_finite()) {
            return Err(invalid(
                "data",
                format!("the offset is {} at data row {}", total[k], rows[k] + 1),
                "give offsets that are finite numbers",
            ));
        }
        Ok(Some(total))
    }

    /// The response's name as the formula gives it, its values, and the numbers of trials
    /// (`cbind(successes, failures)`), on the rows kept.
    #[allow(clippy::type_complexity)]
    fn response_values(
        &self,
        cols: &BTreeMap<&str, &Column>,
        rows: &[usize],
    ) -> Result<(String, Vec<f64>, Option<Vec<f64>>)> {
        Ok(match &self.response {
            Response::Column(name) => {
                let y = match cols[name.as_str()] {
                    // A two-level categorical response: the first level is the failure (R's).
                    Column::Text(_) => {
                        let (index, levels) = Self::levels(cols, name, rows);
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
                        index.iter().map(|&k| k as f64).collect()
                    }
                    Column::Number(_) => numbers(cols, rows, name, "response")?,
                };
                (name.clone(), y, None)
            }
            Response::Cbind(s, f) => {
                let succ = numbers(cols, rows, s, "response")?;
                let fail = numbers(cols, rows, f, "response")?;
                let trials = succ.iter().zip(&fail).map(|(a, b)| a + b).collect();
                (format!("cbind({s}, {f})"), succ, Some(trials))
            }
        })
    }

    /// Each random-effect term's groups and design on the rows kept, and the names of its
    /// grouping factor, effects and levels.
    fn random_terms(
        &self,
        cols: &BTreeMap<&str, &Column>,
        rows: &[usize],
    ) -> Result<(Vec<RandomTerm>, Vec<TermNames>)> {
        let mut terms = Vec::new();
        let mut term_names = Vec::new();
        for b in &self.random {
            let (z, effects) = self.matrix(&b.effects, cols, rows)?;
            let labels: Vec<String> = rows
                .iter()
                .map(|&i| {
                    b.group
                        .iter()
                        .map(|g| label(cols[g.as_str()], i))
                        .collect::<Vec<_>>()
                        .join(":")
                })
                .collect();
            // Numbers by value where the factor is one numeric column.
            let numeric =
                b.group.len() == 1 && matches!(cols[b.group[0].as_str()], Column::Number(_));
            let (group, levels) = index_labels(&labels, numeric);
            terms.push(RandomTerm {
                group,
                z,
                correlated: b.correlated,
            });
            term_names.push(TermNames {
                group: b.group.join(":"),
                effects,
                levels,
            });
        }
        Ok((terms, term_names))
    }

    /// A categorical variable's level index at each used row and its levels, sorted.
    fn levels(
        cols: &BTreeMap<&str, &Column>,
        name: &str,
        rows: &[usize],
    ) -> (Vec<usize>, Vec<String>) {
        let col = cols[name];
        let labels: Vec<String> = rows.iter().map(|&i| label(col, i)).collect();
        index_labels(&labels, matches!(col, Column::Number(_)))
    }

    /// The model matrix of `effects` on `rows` (row-major) and its columns' names.
    fn matrix(
        &self,
        effects: &Effects,
        cols: &BTreeMap<&str, &Column>,
        rows: &[usize],
    ) -> Result<(Vec<f64>, Vec<String>)> {
        let n = rows.len();
        // Column-major while built.
        let mut columns: Vec<Vec<f64>> = Vec::new();
        let mut names = Vec::new();
        if effects.intercept {
            columns.push(vec![1.0; n]);
            names.push("(Intercept)".to_string());
        }
        let present = |t: &[Var]| {
            if t.is_empty() {
                effects.intercept
            } else {
                effects.terms.iter().any(|u| same_term(u, t))
            }
        };
        for term in &effects.terms {
            // Each variable's columns, then their products (the first varying fastest).
            let mut parts: Vec<Vec<(String, Vec<f64>)>> = Vec::new();
            for (k, v) in term.iter().enumerate() {
                if let (Column::Number(values), false) = (cols[v.name.as_str()], v.factor) {
                    parts.push(vec![(
                        v.name.clone(),
                        rows.iter().map(|&i| values[i]).collect(),
                    )]);
                    continue;
                }
                let (index, levels) = Self::levels(cols, &v.name, rows);
                let mut rest = term.clone();
                rest.remove(k);
                let contrasts = present(&rest);
                let shown = if v.factor {
                    format!("factor({})", v.name)
                } else {
                    v.name.clone()
                };
                let skip = usize::from(contrasts);
                parts.push(
                    levels
                        .iter()
                        .enumerate()
                        .skip(skip)
                        .map(|(l, level)| {
                            (
                                format!("{shown}{level}"),
                                index.iter().map(|&j| f64::from(u8::from(j == l))).collect(),
                            )
                        })
                        .collect(),
                );
            }
            let mut product: Vec<(String, Vec<f64>)> = vec![(String::new(), vec![1.0; n])];
            for part in parts {
                let mut next = Vec::with_capacity(product.len() * part.len());
                for (pname, pv) in &part {
                    for (name, v) in &product {
                        let joined = if name.is_empty() {
                            pname.clone()
                        } else {
                            format!("{name}:{pname}")
                        };
                        next.push((joined, v.iter().zip(pv).map(|(a, b)| a * b).collect()));
                    }
                }
                product = next;
            }
            for (name, v) in product {
                names.push(name);
                columns.push(v);
            }
        }
        let p = columns.len();
        let mut x = vec![0.0; n * p];
        for (j, c) in columns.iter().enumerate() {
            for (i, v) in c.iter().enumerate() {
                x[i * p + j] = *v;
            }
        }
        Ok((x, names))
    }
}

/// Whether two interactions have the same variables (in any order).
fn same_term(a: &[Var], b: &[Var]) -> bool {
    a.len() == b.len() && a.iter().all(|v| b.contains(v))
}

/// A value as a level's label: numbers as R prints them (`3`, `2.5`).
fn label(col: &Column, i: usize) -> String {
    match col {
        Column::Number(v) => format!("{}", v[i]),
        Column::Text(v) => v[i].clone().unwrap_or_default(),
    }
}

/// Each label's index among the distinct labels, sorted (by value when `numeric`, else in byte
/// order), and those labels.
fn index_labels(labels: &[String], numeric: bool) -> (Vec<usize>, Vec<String>) {
    let mut levels: Vec<String> = labels.to_vec();
    levels.sort_by(|a, b| match (a.parse::<f64>(), b.parse::<f64>()) {
        (Ok(x), Ok(y)) if numeric => x.total_cmp(&y),
        _ => a.cmp(b),
    });
    levels.dedup();
    let at: BTreeMap<&str, usize> = levels
        .iter()
        .enumerate()
        .map(|(k, l)| (l.as_str(), k))
        .collect();
    let index = labels.iter().map(|l| at[l.as_str()]).collect();
    (index, levels)
}

/// The values of the numeric column `name` (the formula's `role`) on the rows kept; text is an
/// error that names it.
fn numbers(
    cols: &BTreeMap<&str, &Column>,
    rows: &[usize],
    name: &str,
    role: &str,
) -> Result<Vec<f64>> {
    match cols[name] {
        Column::Number(v) => Ok(rows.iter().map(|&i| v[i]).collect()),
        Column::Text(v) => {
            let i = rows.iter().copied().find(|&i| v[i].is_some()).unwrap_or(0);
            Err(invalid(
                "data",
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
