//! The data a formula reads: a table of named columns, numbers or labels, with their missing
//! values.

use crate::error::{invalid, Result};

/// One column of a [`Frame`].
#[derive(Clone, Debug, PartialEq)]
pub enum Column {
    /// Numbers; NaN marks a missing value.
    Number(Vec<f64>),
    /// Labels; None marks a missing value.
    Text(Vec<Option<String>>),
}

impl Column {
    fn len(&self) -> usize {
        match self {
            Column::Number(v) => v.len(),
            Column::Text(v) => v.len(),
        }
    }

    pub(super) fn missing(&self, i: usize) -> bool {
        match self {
            Column::Number(v) => v[i].is_nan(),
            Column::Text(v) => v[i].is_none(),
        }
    }

    /// A column from text fields: numbers if every field that is not missing reads as one,
    /// else labels. Missing: an empty field, `NA` or `NaN`.
    pub fn infer(fields: Vec<String>) -> Column {
        let missing = |s: &str| matches!(s.trim(), "" | "NA" | "NaN");
        let numbers: Option<Vec<f64>> = fields
            .iter()
            .map(|s| {
                if missing(s) {
                    Some(f64::NAN)
                } else {
                    s.trim().parse::<f64>().ok()
                }
            })
            .collect();
        match numbers {
            Some(v) => Column::Number(v),
            None => Column::Text(
                fields
                    .into_iter()
                    .map(|s| (!missing(&s)).then(|| s.trim().to_string()))
                    .collect(),
            ),
        }
    }
}

/// A table of named columns of equal length: the data a formula refers to.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Frame {
    pub(super) names: Vec<String>,
    pub(super) columns: Vec<Column>,
}

impl Frame {
    /// A table from its columns. Errors name a column whose length differs from the first's, or
    /// a name given twice.
    pub fn new(names: Vec<String>, columns: Vec<Column>) -> Result<Frame> {
        if names.len() != columns.len() {
            return Err(invalid(
                "data",
                format!("{} names for {} columns", names.len(), columns.len()),
                "give one name per column",
            ));
        }
        for (k, (name, col)) in names.iter().zip(&columns).enumerate() {
            if col.len() != columns[0].len() {
                return Err(invalid(
                    "data",
                    format!(
                        "column `{name}` has {} values, column `{}` {}",
                        col.len(),
                        names[0],
                        columns[0].len()
                    ),
                    "give every column one value per row",
                ));
            }
            if names[..k].contains(name) {
                return Err(invalid(
                    "data",
                    format!("two columns named `{name}`"),
                    "give every column its own name",
                ));
            }
        }
        Ok(Frame { names, columns })
    }

    /// The rows.
    pub fn n_rows(&self) -> usize {
        self.columns.first().map_or(0, Column::len)
    }

    /// The column `name`, if there is one.
    pub(super) fn find(&self, name: &str) -> Option<&Column> {
        let k = self.names.iter().position(|n| n == name)?;
        Some(&self.columns[k])
    }

    /// Whether the frame has a column `name`.
    pub fn has_column(&self, name: &str) -> bool {
        self.find(name).is_some()
    }

    pub(super) fn column(&self, name: &str) -> Result<&Column> {
        match self.find(name) {
            Some(col) => Ok(col),
            None => Err(invalid(
                "formula",
                format!("no column `{name}` in the data"),
                &format!("use one of the columns: {}", self.names.join(", ")),
            )),
        }
    }

    /// The numbers of the column `name` at the frame's rows `rows` (a [`Design`]'s), for a
    /// column the formula does not read (lme4's `weights = w`): refused by name where there is
    /// no such column, it holds labels, or one of those rows misses its value. `what` names the
    /// input in the errors.
    ///
    /// [`Design`]: super::Design
    pub fn numbers_at(&self, name: &str, rows: &[usize], what: &'static str) -> Result<Vec<f64>> {
        let Column::Number(v) = self.column(name).map_err(|_| {
            invalid(
                what,
                format!("no column `{name}` in the data"),
                &format!("use one of the columns: {}", self.names.join(", ")),
            )
        })?
        else {
            return Err(invalid(
                what,
                format!("column `{name}` holds labels"),
                "give a column of numbers",
            ));
        };
        match rows.iter().find(|&&i| v[i].is_nan()) {
            Some(i) => Err(invalid(
                what,
                format!("column `{name}` misses its value at data row {}", i + 1),
                "give every row the model uses a value, or leave that row out of the data",
            )),
            None => Ok(rows.iter().map(|&i| v[i]).collect()),
        }
    }
}
