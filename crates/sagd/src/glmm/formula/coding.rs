//! R's coding of a formula's variables: the levels of each categorical variable and of each
//! grouping factor, taken from the rows a model is fitted to, and the model matrices and
//! random-effect terms of any rows under that coding (the fitted rows themselves, or new data's
//! for predictions).

use std::collections::{BTreeMap, BTreeSet};

use super::{Column, Effects, Formula, RandomTerm, Response, TermNames, Var};
use crate::error::{invalid, Result};

/// The columns a formula reads, by name.
pub(super) type Columns<'a> = BTreeMap<&'a str, &'a Column>;

/// The levels behind a design, from the rows a model is fitted to.
#[derive(Clone, Debug)]
pub(super) struct Coding {
    /// Each column that some term reads as categorical, its levels sorted as R sorts them.
    levels: BTreeMap<String, Vec<String>>,
    /// The columns of text (categorical wherever they appear).
    text: BTreeSet<String>,
    /// Each random-effect term's grouping factor: its levels, and whether they sort by value.
    groups: Vec<(Vec<String>, bool)>,
    /// A text response's levels.
    response: Option<Vec<String>>,
}

impl Coding {
    /// A text response's levels (`None` for numbers).
    pub(super) fn response_levels(&self) -> Option<&[String]> {
        self.response.as_deref()
    }

    /// The levels of the variable `v` if it is categorical under this coding.
    pub(super) fn categorical(&self, v: &Var) -> Option<&[String]> {
        if v.factor || self.text.contains(&v.name) {
            self.levels.get(&v.name).map(Vec::as_slice)
        } else {
            None
        }
    }
}

/// Where the rows come from, for errors: the model's data or new data.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) enum Source {
    Fitted,
    New,
}

impl Source {
    /// The input an error names.
    pub(super) fn input(self) -> &'static str {
        match self {
            Source::Fitted => "data",
            Source::New => "new data",
        }
    }

    /// How a row of this source is named: "data row 3", "new-data row 3".
    pub(super) fn row(self, i: usize) -> String {
        match self {
            Source::Fitted => format!("data row {}", i + 1),
            Source::New => format!("new-data row {}", i + 1),
        }
    }
}

/// A model matrix (row-major), its columns' names and each term's columns.
pub(super) type Coded = (Vec<f64>, Vec<String>, Vec<std::ops::Range<usize>>);

impl Formula {
    /// The coding of `rows` of `cols`: every variable that a term reads as categorical and every
    /// grouping factor, with the levels these rows have.
    pub(super) fn coding(&self, cols: &Columns<'_>, rows: &[usize]) -> Coding {
        let mut levels = BTreeMap::new();
        let mut text = BTreeSet::new();
        let effects = std::iter::once(&self.fixed).chain(self.random.iter().map(|b| &b.effects));
        let vars = effects.flat_map(|e| e.terms.iter().flatten());
        for v in vars {
            let is_text = matches!(cols[v.name.as_str()], Column::Text(_));
            if is_text {
                text.insert(v.name.clone());
            }
            if (is_text || v.factor) && !levels.contains_key(&v.name) {
                levels.insert(v.name.clone(), column_levels(cols, &v.name, rows).1);
            }
        }
        let groups = self
            .random
            .iter()
            .map(|b| {
                let labels = group_labels(&b.group, cols, rows);
                let numeric =
                    b.group.len() == 1 && matches!(cols[b.group[0].as_str()], Column::Number(_));
                (index_labels(&labels, numeric).1, numeric)
            })
            .collect();
        let response = match &self.response {
            Response::Column(y) if matches!(cols[y.as_str()], Column::Text(_)) => {
                Some(column_levels(cols, y, rows).1)
            }
            _ => None,
        };
        Coding {
            levels,
            text,
            groups,
            response,
        }
    }

    /// Refuses, by name, a categorical fixed-effect predictor (under `coding`) with a level of
    /// its own on every one of the `rows` (two or more): its columns alone fit every row, so no
    /// fixed effect can be estimated. Most often a column of numbers with one value written
    /// otherwise (`np.float64(0.36)`), which makes it text.
    pub(super) fn refuse_saturated(
        &self,
        cols: &Columns<'_>,
        rows: &[usize],
        coding: &Coding,
    ) -> Result<()> {
        if rows.len() < 2 {
            return Ok(());
        }
        for v in self.fixed.terms.iter().flatten() {
            match coding.levels.get(&v.name) {
                Some(levels) if levels.len() >= rows.len() => {}
                _ => continue,
            }
            let col = cols[v.name.as_str()];
            let first = label(col, rows[0]);
            let kind = match col {
                Column::Text(_) => "text",
                Column::Number(_) => "factor()",
            };
            return Err(invalid(
                "data",
                format!(
                    "column `{}`: {kind} with a different value on each of its {} rows (the first `{first}`)",
                    v.name,
                    rows.len()
                ),
                "as a categorical predictor it gives every row a fixed effect of its own, which \
                 no model can estimate: if the column holds numbers, write them as plain numbers \
                 (one value such as `np.float64(0.36)` makes the whole column text); else leave it \
                 out of the fixed effects, or make it a grouping factor",
            ));
        }
        Ok(())
    }

    /// Each random-effect term's groups and design on `rows` under `coding`, and the names of
    /// its grouping factor, effects and levels. A level the coding lacks (new data's) is
    /// numbered after the coding's, so its term names list the coding's levels then the new ones.
    pub(super) fn random_terms(
        &self,
        cols: &Columns<'_>,
        rows: &[usize],
        (coding, source): (&Coding, Source),
    ) -> Result<(Vec<RandomTerm>, Vec<TermNames>)> {
        let mut terms = Vec::new();
        let mut term_names = Vec::new();
        for (b, (known, numeric)) in self.random.iter().zip(&coding.groups) {
            let (z, effects) = self.matrix(&b.effects, cols, rows, (coding, source))?;
            let labels = group_labels(&b.group, cols, rows);
            let fitted = positions(known);
            let unseen: Vec<String> = labels
                .iter()
                .filter(|l| !fitted.contains_key(l.as_str()))
                .cloned()
                .collect();
            let mut levels = known.clone();
            levels.extend(index_labels(&unseen, *numeric).1);
            let at = positions(&levels);
            terms.push(RandomTerm {
                group: labels.iter().map(|l| at[l.as_str()]).collect(),
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

    /// The model matrix of `effects` on `rows` under `coding` (row-major) and its columns'
    /// names. A categorical value the coding lacks (new data's) is an error that names it.
    pub(super) fn matrix(
        &self,
        effects: &Effects,
        cols: &Columns<'_>,
        rows: &[usize],
        (coding, source): (&Coding, Source),
    ) -> Result<(Vec<f64>, Vec<String>)> {
        let (x, names, _) = self.coded_matrix(effects, cols, rows, (coding, source), false)?;
        Ok((x, names))
    }

    /// [`Formula::matrix`], a categorical variable coded by contrasts coded by R's
    /// `contr.treatment` (indicators of every level but the first) or, with `sum`, by
    /// `contr.sum` (level l < k − 1 its column's 1, the last level −1 in every column); and each
    /// term's columns.
    pub(super) fn coded_matrix(
        &self,
        effects: &Effects,
        cols: &Columns<'_>,
        rows: &[usize],
        (coding, source): (&Coding, Source),
        sum: bool,
    ) -> Result<Coded> {
        let n = rows.len();
        let mut ranges = Vec::with_capacity(effects.terms.len());
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
                effects.terms.iter().any(|u| super::same_term(u, t))
            }
        };
        for term in &effects.terms {
            // Each variable's columns, then their products (the first varying fastest).
            let mut parts: Vec<Vec<(String, Vec<f64>)>> = Vec::new();
            for (k, v) in term.iter().enumerate() {
                let Some(levels) = coding.categorical(v) else {
                    let values = super::numbers(cols, rows, &v.name, "variable", source)?;
                    parts.push(vec![(v.name.clone(), values)]);
                    continue;
                };
                let index = level_index(cols, v, rows, levels, source)?;
                let mut rest = term.clone();
                rest.remove(k);
                let contrasts = present(&rest);
                let shown = if v.factor {
                    format!("factor({})", v.name)
                } else {
                    v.name.clone()
                };
                let last = levels.len() - 1;
                let value = |j: usize, l: usize| match (contrasts && sum, j == l) {
                    (_, true) => 1.0,
                    (true, false) if j == last => -1.0,
                    _ => 0.0,
                };
                // Treatment contrasts drop the first level's column, sum contrasts the last's.
                let kept = match (contrasts, sum) {
                    (false, _) => 0..levels.len(),
                    (true, false) => 1..levels.len(),
                    (true, true) => 0..last,
                };
                parts.push(
                    kept.map(|l| {
                        let name = match contrasts && sum {
                            true => format!("{shown}{}", l + 1),
                            false => format!("{shown}{}", levels[l]),
                        };
                        (name, index.iter().map(|&j| value(j, l)).collect())
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
            let start = columns.len();
            for (name, v) in product {
                names.push(name);
                columns.push(v);
            }
            ranges.push(start..columns.len());
        }
        let p = columns.len();
        let mut x = vec![0.0; n * p];
        for (j, c) in columns.iter().enumerate() {
            for (i, v) in c.iter().enumerate() {
                x[i * p + j] = *v;
            }
        }
        Ok((x, names, ranges))
    }
}

/// Each row's index among `levels` of the categorical variable `v`; a value not among them is an
/// error that names it and its row.
fn level_index(
    cols: &Columns<'_>,
    v: &Var,
    rows: &[usize],
    levels: &[String],
    source: Source,
) -> Result<Vec<usize>> {
    let at = positions(levels);
    let col = cols[v.name.as_str()];
    rows.iter()
        .map(|&i| {
            let l = label(col, i);
            at.get(l.as_str()).copied().ok_or_else(|| {
                invalid(
                    source.input(),
                    format!(
                        "`{}` is `{l}` at {}, a level the fitted data do not have",
                        v.name,
                        source.row(i)
                    ),
                    &format!(
                        "predict for the levels the model was fitted to ({}), or refit with this one",
                        levels.join(", ")
                    ),
                )
            })
        })
        .collect()
}

/// Each level's position.
fn positions(levels: &[String]) -> BTreeMap<&str, usize> {
    levels
        .iter()
        .enumerate()
        .map(|(k, l)| (l.as_str(), k))
        .collect()
}

/// A grouping factor's label at each row: its columns' labels joined by `:`.
fn group_labels(group: &[String], cols: &Columns<'_>, rows: &[usize]) -> Vec<String> {
    rows.iter()
        .map(|&i| {
            group
                .iter()
                .map(|g| label(cols[g.as_str()], i))
                .collect::<Vec<_>>()
                .join(":")
        })
        .collect()
}

/// A categorical column's level index at each row and its levels, sorted.
pub(super) fn column_levels(
    cols: &Columns<'_>,
    name: &str,
    rows: &[usize],
) -> (Vec<usize>, Vec<String>) {
    let col = cols[name];
    let labels: Vec<String> = rows.iter().map(|&i| label(col, i)).collect();
    index_labels(&labels, matches!(col, Column::Number(_)))
}

/// A value as a level's label: numbers as R prints them (`3`, `2.5`).
pub(super) fn label(col: &Column, i: usize) -> String {
    match col {
        Column::Number(v) => format!("{}", v[i]),
        Column::Text(v) => v[i].clone().unwrap_or_default(),
    }
}

/// Each label's index among the distinct labels, sorted (by value when `numeric`, else in byte
/// order), and those labels. The distinct labels are found first and only they are sorted
/// (each parsed once): a column of 10⁵ rows has a few thousand.
fn index_labels(labels: &[String], numeric: bool) -> (Vec<usize>, Vec<String>) {
    let distinct: std::collections::HashSet<&str> = labels.iter().map(String::as_str).collect();
    let mut keyed: Vec<(Option<f64>, &str)> = (distinct.into_iter())
        .map(|l| (l.parse::<f64>().ok().filter(|_| numeric), l))
        .collect();
    keyed.sort_by(|a, b| match (a.0, b.0) {
        (Some(x), Some(y)) => x.total_cmp(&y),
        _ => a.1.cmp(b.1),
    });
    let at: std::collections::HashMap<&str, usize> =
        keyed.iter().enumerate().map(|(k, l)| (l.1, k)).collect();
    let index = labels.iter().map(|l| at[l.as_str()]).collect();
    (index, keyed.into_iter().map(|l| l.1.to_string()).collect())
}
