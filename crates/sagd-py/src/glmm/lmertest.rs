//! lmerTest's tests of a fit made by `sagd.glmm`: the type III hypotheses of the bindings'
//! formula coding, the t and F tests with Satterthwaite's or Kenward and Roger's degrees of
//! freedom, and the least-squares means.

use numpy::PyReadonlyArray2;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyDict;
use sagd::glmm::formula::{anova_hypotheses, ddf_tests, ls_means_table, type3_hypotheses};
use sagd::glmm::{Glmm, GlmmFit};

use crate::py_error;

/// The type III tests' sum-to-zero coding of the design's rows from the bindings' formula: per
/// term its name, the coding (n × p) and each term's columns (start, end).
pub(super) type Type3<'py> = (Vec<String>, PyReadonlyArray2<'py, f64>, Vec<(usize, usize)>);

/// The table's type (lmerTest's 1, 2 or 3), the terms' names and each one's hypothesis L (rows
/// of p values).
type Hypotheses = (usize, Vec<String>, Vec<Vec<Vec<f64>>>);

/// The hypotheses of the terms' F tests from the bindings' formula: type III's from its
/// sum-to-zero coding, type I's or II's from its terms, none (type III's, empty) without either.
pub(super) fn hypotheses_of(
    x: &PyReadonlyArray2<'_, f64>,
    type3: Option<Type3<'_>>,
    anova_terms: Option<AnovaTerms>,
) -> PyResult<Hypotheses> {
    match (type3, anova_terms) {
        (Some(coding), _) => type3_hypotheses_of(x, coding),
        (None, Some(terms)) => anova_hypotheses_of(x, terms),
        (None, None) => Ok((3, Vec::new(), Vec::new())),
    }
}

/// The type I or II tests' terms from the bindings' formula: the type, per term its name, its
/// columns of the design (start, end) and the terms that contain it.
pub(super) type AnovaTerms = (usize, Vec<String>, Vec<(usize, usize)>, Vec<Vec<usize>>);

/// The terms' names, and each one's type I or II hypothesis on the design `x`'s coefficients
/// (`sagd::glmm::formula::anova_hypotheses`, as `sagd glmm --anova-type` takes them).
fn anova_hypotheses_of(
    x: &PyReadonlyArray2<'_, f64>,
    (kind, names, ranges, contains): AnovaTerms,
) -> PyResult<Hypotheses> {
    let x = x.as_array();
    if names.len() != ranges.len() {
        return Err(PyValueError::new_err(format!(
            "anova_terms: {} names for {} terms",
            names.len(),
            ranges.len()
        )));
    }
    let ranges: Vec<_> = ranges.into_iter().map(|(a, b)| a..b).collect();
    let xv: Vec<f64> = x.iter().copied().collect();
    let hypotheses =
        anova_hypotheses(&xv, x.ncols(), &ranges, &contains, kind).map_err(py_error)?;
    Ok((kind, names, hypotheses))
}

/// The terms' names of `coding`, and each one's type III hypothesis on the design `x`'s
/// coefficients (`sagd::glmm::formula::type3_hypotheses`, as `sagd glmm --ddf` takes them).
fn type3_hypotheses_of(
    x: &PyReadonlyArray2<'_, f64>,
    (names, xs, ranges): Type3<'_>,
) -> PyResult<Hypotheses> {
    let (x, xs) = (x.as_array(), xs.as_array());
    if xs.dim() != x.dim() || names.len() != ranges.len() {
        return Err(PyValueError::new_err(format!(
            "type3: a coding of {:?} values for a design of {:?}, or {} names for {} terms",
            xs.dim(),
            x.dim(),
            names.len(),
            ranges.len()
        )));
    }
    let ranges: Vec<_> = ranges.into_iter().map(|(a, b)| a..b).collect();
    let (xv, xsv): (Vec<f64>, Vec<f64>) =
        (x.iter().copied().collect(), xs.iter().copied().collect());
    let hypotheses = type3_hypotheses(&xv, &xsv, x.ncols(), &ranges).map_err(py_error)?;
    Ok((3, names, hypotheses))
}

/// `satterthwaite` (or with `kenward_roger`, `kenward_roger`): per fixed effect, its standard
/// error (given the variances, or Kenward and Roger's adjusted), the degrees of freedom and the
/// p-value; with `hypotheses`, `anova_typeN` (N the table's type): per term its name, F, the degrees of freedom
/// (numerator, denominator), p and the unscaled F (Kenward and Roger's F is scaled; the
/// unscaled F σ² is lmerTest's Mean Sq). Tests that cannot be made (no covariance, or
/// variance parameters that the data do not determine) leave `ddf_error`, why.
pub(super) fn ddf_items(
    d: &Bound<'_, PyDict>,
    model: &Glmm,
    fit: &GlmmFit,
    (kind, names, ls): &Hypotheses,
    kenward_roger: bool,
) -> PyResult<()> {
    // The fit stands without them (as the command line's does).
    let (key, t, f) = match ddf_tests((model, fit), ls, kenward_roger) {
        Ok(tests) => tests,
        Err(e) => return d.set_item("ddf_error", e.to_string()),
    };
    d.set_item(key, t)?;
    if !names.is_empty() {
        let terms: Vec<_> = (names.iter().zip(f))
            .map(|(name, (f, unscaled, q, ddf, p))| (name.clone(), f, q, ddf, p, unscaled))
            .collect();
        d.set_item(format!("anova_type{kind}"), terms)?;
    }
    Ok(())
}

/// The least-squares means of the bindings' formula coding: per mean its term, its name, and
/// the rows L (m × p) of the fixed effects whose Lβ it is; a term's rows consecutive.
pub(super) type LsMeansCoding<'py> = (Vec<String>, Vec<String>, PyReadonlyArray2<'py, f64>);

/// `ls_means`: the table of `sagd::glmm::formula::ls_means_table` (the command line's) from the
/// bindings' coding: its method (`ddf`), `level`, whether it holds `pairwise` differences, its
/// `scale` (`link`, or `response` where asked of a Poisson or binomial fit), and
/// per row its term, name, estimate, standard error, degrees of freedom, t, the interval's ends
/// and p. Tests that cannot be made leave `ls_means_error`, why.
#[allow(clippy::type_complexity)]
pub(super) fn ls_means_items(
    d: &Bound<'_, PyDict>,
    fitted: (&Glmm, &GlmmFit),
    (terms, names, l): LsMeansCoding<'_>,
    asked: (bool, bool, bool),
    level: f64,
) -> PyResult<()> {
    let l = l.as_array();
    if terms.len() != l.nrows() || names.len() != l.nrows() {
        return Err(PyValueError::new_err(format!(
            "ls_means: {} terms and {} names for {} rows",
            terms.len(),
            names.len(),
            l.nrows()
        )));
    }
    if !(level > 0.0 && level < 1.0) {
        return Err(PyValueError::new_err(format!(
            "ls_means_level: {level}: give the intervals' level between 0 and 1, e.g. 0.95"
        )));
    }
    let mut grouped: Vec<(String, Vec<(String, Vec<f64>)>)> = Vec::new();
    for ((term, name), row) in terms.into_iter().zip(names).zip(l.rows()) {
        let mean = (name, row.to_vec());
        match grouped.last_mut() {
            Some((t, means)) if *t == term => means.push(mean),
            _ => grouped.push((term, vec![mean])),
        }
    }
    let (method, rows) = match ls_means_table(fitted, grouped, asked, level) {
        Ok(table) => table,
        Err(e) => return d.set_item("ls_means_error", e.to_string()),
    };
    let out = PyDict::new(d.py());
    out.set_item("ddf", method)?;
    out.set_item("level", level)?;
    out.set_item("pairwise", asked.0)?;
    let response = asked.2 && fitted.0.family() != sagd::glmm::Family::Gaussian;
    out.set_item("scale", if response { "response" } else { "link" })?;
    let rows: Vec<_> = (rows.into_iter())
        .map(|(term, name, v)| (term, name, v.to_vec()))
        .collect();
    out.set_item("rows", rows)?;
    d.set_item("ls_means", out)
}
