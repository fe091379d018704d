//! The bootstraps of `sagd.glmm` and `sagd.anova`: the refits of simulated responses, run in
//! parts kept in a checkpoint where `checkpoint=` asks (`sagd::glmm::refits`), their progress
//! and Ctrl-C watched, and their outcomes as the Python layer takes them.

use pyo3::exceptions::PyKeyboardInterrupt;
use pyo3::prelude::*;
use pyo3::types::PyDict;
use sagd::glmm::refits::{in_parts, Keeping, Outcome, Part};
use sagd::glmm::{FitSettings, Glmm, GlmmFit};
use sagd::run::{Control, Identity};
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};

use super::{fit_settings, model_of};
use crate::{detached, py_error};

/// The draws whose bootstrap refit failed, with why.
type Failed = Vec<(usize, String)>;

/// Per draw of a bootstrap, `value` of its refit, or `failed` where it failed (and the draw and
/// why in the second list).
fn by_draw<T, E: ToString, V: Clone>(
    draws: Vec<Result<T, E>>,
    failed: V,
    value: impl Fn(T) -> V,
) -> (Vec<V>, Failed) {
    let mut why = Vec::new();
    let values = draws
        .into_iter()
        .enumerate()
        .map(|(draw, r)| match r {
            Ok(t) => value(t),
            Err(e) => {
                why.push((draw, e.to_string()));
                failed.clone()
            }
        })
        .collect();
    (values, why)
}

/// The parametric bootstrap's likelihood-ratio statistics of the model `null` (a dict of
/// `glmm_model`'s arguments) at θ̂ `theta_null` against the larger `alt` at `theta_alt`
/// (`Glmm::bootstrap_lrt`), each refit under the method, nodes and M-steps given: one
/// statistic per draw, NaN where a refit failed, and the failed draws with why.
#[pyfunction]
#[pyo3(signature = (*, null, alt, theta_null, theta_alt, draws, seed=0, threads=None, progress=None, method="auto", nodes=None, max_msteps=None, checkpoint=None, checkpoint_every=100, interrupt_after=None))]
#[allow(clippy::too_many_arguments)]
pub(crate) fn bootstrap_lrt(
    py: Python<'_>,
    null: Bound<'_, PyDict>,
    alt: Bound<'_, PyDict>,
    theta_null: Vec<f64>,
    theta_alt: Vec<f64>,
    draws: usize,
    seed: u64,
    threads: Option<usize>,
    progress: Option<Py<PyAny>>,
    method: &str,
    nodes: Option<usize>,
    max_msteps: Option<usize>,
    checkpoint: Option<std::path::PathBuf>,
    checkpoint_every: usize,
    interrupt_after: Option<usize>,
) -> PyResult<(Vec<f64>, Failed)> {
    let (m0, m1) = (model_of(&null)?, model_of(&alt)?);
    let settings = fit_settings(method, false, nodes, max_msteps, seed)?;
    let identity = refits_identity(&settings, seed, &[&theta_null, &theta_alt])?;
    let kept = (checkpoint, checkpoint_every, interrupt_after);
    let stats = refits_kept(
        py,
        (threads, progress),
        (identity, draws, kept),
        |range, on| {
            let alt = (&m1, &theta_alt[..]);
            let part = m0.bootstrap_lrt_draws(&theta_null, alt, &settings, (range, seed), on)?;
            Ok(outcomes(part, |t| vec![t]))
        },
    )?;
    let (values, failed) = by_draw(stats, f64::NAN, |t| t[0]);
    Ok((values, failed))
}

/// Where `sagd.glmm`'s bootstrap keeps its refits (`checkpoint=`, `checkpoint_every=`), and
/// after how many it stops as if interrupted (`_interrupt_after`, for the tests).
pub(crate) type Kept = (Option<std::path::PathBuf>, usize, Option<usize>);

/// The parametric bootstrap's items (its refits counted on `progress`, Ctrl-C watched):
/// `bootstrap`, each refit's estimates on the summary's scales in θ's order
/// (`Summary::values`; NaN where the refit failed), and `bootstrap_failed`, the failed draws
/// with why; kept as `kept` says ([`refits_kept`]).
pub(super) fn bootstrap_items(
    py: Python<'_>,
    d: &Bound<'_, PyDict>,
    model: &Glmm,
    (fit, settings): (&GlmmFit, &FitSettings),
    (draws, seed, threads): (usize, u64, Option<usize>),
    (progress, kept): (Option<Py<PyAny>>, Kept),
) -> PyResult<()> {
    let terms = model.terms();
    let identity = refits_identity(settings, seed, &[&fit.theta])?;
    let outcomes = refits_kept(
        py,
        (threads, progress),
        (identity, draws, kept),
        |range, on| {
            let part = model.bootstrap_draws(&fit.theta, settings, (range, seed), on)?;
            let values = |f: GlmmFit| model.summary(&f.theta, None).values(&terms);
            Ok(outcomes(part, values))
        },
    )?;
    let nan = vec![f64::NAN; fit.theta.len()];
    let (values, failed) = by_draw(outcomes, nan, |v| v);
    d.set_item("bootstrap", values)?;
    d.set_item("bootstrap_failed", failed)
}

/// What a bootstrap's checkpoint is kept for: the refits' settings, the seed and the fits'
/// estimates to the bit (the data).
fn refits_identity(settings: &FitSettings, seed: u64, thetas: &[&[f64]]) -> PyResult<Identity> {
    let how = format!(
        "{:?}",
        (
            settings.method,
            settings.exact.criterion,
            settings.exact.nodes,
            settings.em.max_msteps
        )
    );
    (Identity::new().with("method, criterion, nodes and M-steps", &how))
        .and_then(|i| i.with("seed", &seed))
        .and_then(|i| i.with("the fits' estimates (the data)", thetas))
        .map_err(py_error)
}

/// A part's refits as the checkpoint keeps them: `values` of each, or why it failed.
fn outcomes<T>(part: Vec<Option<sagd::error::Result<T>>>, values: impl Fn(T) -> Vec<f64>) -> Part {
    (part.into_iter())
        .map(|o| o.map(|r| r.map(&values).map_err(|e| e.to_string())))
        .collect()
}

/// Every outcome of `draws` draws of a bootstrap, from `part(range, on_refit)` (its refits
/// counted on `progress`, Ctrl-C watched), on `threads`: with a checkpoint, run in parts
/// each kept there (`sagd::glmm::refits`), a call stopped by Ctrl-C keeping what it refitted
/// and the same call going on from there to the outcomes of an uninterrupted run. A stop
/// (Ctrl-C, or `_interrupt_after` refits) raises KeyboardInterrupt.
fn refits_kept(
    py: Python<'_>,
    (threads, progress): (Option<usize>, Option<Py<PyAny>>),
    (identity, draws, (path, every, interrupt_after)): (Identity, usize, Kept),
    part: impl Fn(std::ops::Range<usize>, &(dyn Fn() -> Control + Sync)) -> sagd::error::Result<Part>
        + Sync,
) -> PyResult<Vec<Outcome>> {
    let keeping = path.as_deref().map(|path| Keeping {
        path,
        every,
        resume: true,
    });
    let refitted = AtomicUsize::new(0);
    let (done, _) = detached(py, threads, progress, None, |watch| {
        let on_refit = || match watch.tick(1) {
            _ if interrupt_after.is_some_and(|k| refitted.fetch_add(1, Relaxed) + 1 >= k) => {
                Control::Stop
            }
            c => c,
        };
        let resumed = |kept| _ = watch.tick(kept);
        in_parts(keeping, &identity, draws, resumed, |r| part(r, &on_refit))
    })?
    .map_err(py_error)?;
    if done.iter().any(Option::is_none) {
        let finished = done.iter().filter(|o| o.is_some()).count();
        return Err(PyKeyboardInterrupt::new_err(format!(
            "bootstrap stopped after {finished} of {draws} refits"
        )));
    }
    Ok(done.into_iter().flatten().collect())
}
