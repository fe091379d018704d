//! `sagd.ranova`'s pieces from the core: lmerTest's reductions of a fit's random terms, and the
//! log-likelihood of the fixed effects alone where no random term is left.

use numpy::{PyReadonlyArray1, PyReadonlyArray2};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use sagd::glmm::formula::term_reductions;
use sagd::glmm::{Criterion, Design};

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
    let n = y.len();
    let lengths = [
        offset.as_ref().map(|o| o.as_array().len()),
        weights.as_ref().map(|w| w.as_array().len()),
    ];
    if x.nrows() != n || x.ncols() >= n || lengths.iter().flatten().any(|&l| l != n) {
        return Err(PyValueError::new_err(format!(
            "least squares: {n} responses, a design of {:?} and offsets or weights of other \
             lengths ({lengths:?}), or no fewer rows than columns",
            x.dim()
        )));
    }
    let design = Design {
        y: y.to_vec(),
        trials: None,
        x: x.iter().copied().collect(),
        x_names: Vec::new(),
        terms: Vec::new(),
        term_names: Vec::new(),
        n_obs: n,
        dropped: 0,
        response: "y".into(),
        rows: (0..n).collect(),
        offset: offset.map(|o| o.as_array().to_vec()),
    };
    let weights = weights.map(|w| w.as_array().to_vec());
    let criterion = if reml { Criterion::Reml } else { Criterion::Ml };
    (design.least_squares_loglik(weights.as_deref(), criterion)).map_err(py_error)
}
