//! `sagd.ranova`'s pieces from the core: lmerTest's reductions of a fit's random terms, and the
//! log-likelihood of the fixed effects alone where no random term is left.

use numpy::{PyReadonlyArray1, PyReadonlyArray2};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use sagd::glmm::formula::{self, term_reductions};
use sagd::glmm::Criterion;

use crate::py_error;

/// Per random term (its grouping factor, its effects as lme4 writes them with `1` for the
/// intercept, whether they are correlated), lmerTest's reductions: (the reduced model's name,
/// the term, the effect left out).
#[pyfunction]
#[pyo3(signature = (*, terms))]
pub(crate) fn random_reductions(
    terms: Vec<(String, Vec<String>, bool)>,
) -> Vec<(String, usize, usize)> {
    (terms.iter().enumerate())
        .flat_map(|(t, (group, effects, correlated))| {
            (term_reductions(effects, *correlated, group).into_iter())
                .map(move |(k, name)| (name, t, k))
        })
        .collect()
}

/// R's `logLik(lm(…), REML = reml)` of the responses `y` on the design `x` (n × p), less
/// `offset`, with prior `weights`: (the log-likelihood, its parameters β and σ).
#[pyfunction]
#[pyo3(signature = (*, y, x, offset=None, weights=None, reml=false))]
pub(crate) fn least_squares_loglik(
    y: PyReadonlyArray1<'_, f64>,
    x: PyReadonlyArray2<'_, f64>,
    offset: Option<PyReadonlyArray1<'_, f64>>,
    weights: Option<PyReadonlyArray1<'_, f64>>,
    reml: bool,
) -> PyResult<(f64, usize)> {
    let (y, x) = (y.as_array(), x.as_array());
    if x.nrows() != y.len() || x.ncols() >= y.len() {
        return Err(PyValueError::new_err(format!(
            "least squares: {} responses and a design of {:?}: give one row per response and \
             fewer columns than rows",
            y.len(),
            x.dim()
        )));
    }
    let (y, x): (Vec<f64>, Vec<f64>) = (y.to_vec(), x.iter().copied().collect());
    let offset = offset.map(|o| o.as_array().to_vec());
    let weights = weights.map(|w| w.as_array().to_vec());
    let criterion = if reml { Criterion::Reml } else { Criterion::Ml };
    let (offset, weights) = (offset.as_deref(), weights.as_deref());
    formula::least_squares_loglik(&x, &y, offset, weights, criterion).map_err(py_error)
}
