//! `sagd._core`: the Rust side of the Python package. A generalised linear mixed model given as
//! numpy arrays, fitted by its exact likelihood or automated EM (`glmm.rs`; gradients in Rust,
//! the GIL released while it runs), and automated EM on a model given as a Python function
//! (called once per block of chains with all their latents).
//! The Python layer (`python/sagd/__init__.py`) checks the arguments' shapes and wraps the
//! results; errors come back as `ValueError` (bad input, bad settings) or `RuntimeError`, an
//! exception raised by the user's function as itself, and Ctrl-C as `KeyboardInterrupt`.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use numpy::{PyArray1, PyArray2, PyReadonlyArray1};
use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};
use sagd::em::{AutomatedEm, EmEvent, EmSettings, EmTrace, EstimateStatus};
use sagd::error::SagdError;
use sagd::run::Control;

mod callbacks;
mod glmm;

use callbacks::{Callback, Halt, PyModel, PyProblem};
use glmm::{
    bootstrap_lrt, fit_glmm, glmm_loglik, least_squares_loglik, random_reductions, simulate_glmm,
};

/// A library error as the Python exception a user expects: bad input or settings are a
/// `ValueError`, anything else a `RuntimeError`; the message names the input and the fix.
pub(crate) fn py_error(e: SagdError) -> PyErr {
    match e {
        SagdError::InvalidSetting { .. } | SagdError::Dimension { .. } => {
            PyValueError::new_err(e.to_string())
        }
        e => PyRuntimeError::new_err(e.to_string()),
    }
}

/// EM's defaults with at most `max_msteps` M-steps, if given.
pub(crate) fn em_settings(max_msteps: Option<usize>) -> EmSettings {
    let mut settings = EmSettings::default();
    if let Some(m) = max_msteps {
        settings.max_msteps = m;
    }
    settings
}

/// Runs automated EM with the defaults on the user's `model` from `theta0` ([`detached`]: the
/// GIL released, Ctrl-C watched, the function not called again once it is pressed). Results do
/// not depend on the threads.
pub(crate) fn run_em(
    py: Python<'_>,
    model: &PyModel,
    theta0: &[f64],
    seed: u64,
    threads: Option<usize>,
    max_msteps: Option<usize>,
    progress: Option<Py<PyAny>>,
) -> PyResult<EmTrace> {
    let settings = em_settings(max_msteps);
    let halt = Some(model.f.halt());
    let trace = detached(py, threads, progress, halt, |watch| {
        AutomatedEm::new(model, settings).run(theta0, seed, None, &mut |e| match e {
            EmEvent::Update { .. } => watch.tick(1),
            _ => watch.tick(0),
        })
    })?;
    trace.map_err(py_error)
}

/// What a detached job and the thread watching it share: the stop flag Ctrl-C raises, and the
/// work done so far (updates), for a progress display.
struct Watch {
    stop: Arc<AtomicBool>,
    done: AtomicUsize,
}

impl Watch {
    /// Counts one unit of work and says whether to go on.
    fn tick(&self, units: usize) -> Control {
        self.done.fetch_add(units, Ordering::Relaxed);
        if self.stop.load(Ordering::Relaxed) {
            Control::Stop
        } else {
            Control::Continue
        }
    }
}

/// Runs `job` with the GIL released on a thread of its own, in a pool of `threads` (None: all
/// cores), while this (Python's main) thread looks for Ctrl-C every 20 ms — Python runs signal
/// handlers on its main thread only — and raises the job's stop flag, so that it ends after its
/// current update; the interrupt then comes back as `KeyboardInterrupt`. With `progress`, the
/// work done is handed to it (from this thread, a few times a second). `halt`, when given, is
/// what Ctrl-C raises (a user function's [`Callback::halt`], so that it is not called again and a
/// second Ctrl-C interrupts the calls in progress).
pub(crate) fn detached<R, F>(
    py: Python<'_>,
    threads: Option<usize>,
    progress: Option<Py<PyAny>>,
    halt: Option<Halt>,
    job: F,
) -> PyResult<R>
where
    R: Send,
    F: FnOnce(&Watch) -> R + Send,
{
    if let Some(t) = threads {
        sagd::parallel::check_threads(t).map_err(py_error)?;
    }
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads.unwrap_or(0))
        .build()
        .map_err(|e| PyRuntimeError::new_err(format!("thread pool: {e}")))?;
    let watch = Watch {
        stop: halt.as_ref().map(|h| h.flag.clone()).unwrap_or_default(),
        done: AtomicUsize::new(0),
    };
    let mut interrupt: Option<PyErr> = None;
    let mut shown = 0;
    let show = |py: Python<'_>, shown: &mut usize| -> PyResult<()> {
        let done = watch.done.load(Ordering::Relaxed);
        if let Some(p) = &progress {
            if done != *shown {
                p.bind(py).call1((done,))?;
                *shown = done;
            }
        }
        Ok(())
    };
    let result = py.detach(|| {
        std::thread::scope(|scope| {
            let work = scope.spawn(|| pool.install(|| job(&watch)));
            let mut ticks = 0;
            while !work.is_finished() {
                std::thread::sleep(Duration::from_millis(20));
                ticks += 1;
                Python::attach(|py| {
                    let checked = py.check_signals().and_then(|()| {
                        if interrupt.is_none() && ticks % 10 == 0 {
                            show(py, &mut shown)?;
                        }
                        Ok(())
                    });
                    match (checked, &interrupt) {
                        (Ok(()), _) => {}
                        (Err(e), None) => {
                            interrupt = Some(e);
                            watch.stop.store(true, Ordering::Relaxed);
                        }
                        // A second Ctrl-C: into the user's calls still running.
                        (Err(_), Some(_)) => {
                            if let Some(h) = &halt {
                                h.interrupt_calls(py);
                            }
                        }
                    }
                });
            }
            work.join()
        })
    });
    if let Some(err) = interrupt {
        return Err(err);
    }
    show(py, &mut shown)?;
    result
        .map_err(|_| PyRuntimeError::new_err("the fit panicked (a bug in sagd: please report it)"))
}

/// The fields of a finished run, for the Python result object.
pub(crate) fn trace_dict<'py>(py: Python<'py>, trace: &EmTrace) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    let answer = trace.final_estimate();
    d.set_item("estimate", PyArray1::from_slice(py, answer.estimate))?;
    d.set_item("mc_se", PyArray1::from_slice(py, answer.se))?;
    let status = answer.status.name();
    let why = match answer.status {
        EstimateStatus::PolishFailed(w) => Some(w.to_string()),
        _ => None,
    };
    d.set_item("status", status)?;
    d.set_item("polish_error", why)?;
    d.set_item("converged", trace.converged)?;
    d.set_item("handover_rate", trace.handover_rate)?;
    d.set_item("em_resumed", trace.em_resumed.clone())?;
    d.set_item("msteps", trace.msteps.len())?;
    d.set_item("langevin_steps", trace.langevin_steps)?;
    d.set_item("interrupted", trace.interrupted)?;
    let path: Vec<Vec<f64>> = trace.path.clone();
    d.set_item(
        "path",
        PyArray2::from_vec2(py, &path).map_err(|e| PyRuntimeError::new_err(e.to_string()))?,
    )?;
    if let Some(p) = &trace.polished {
        let i = &p.information;
        d.set_item("se", PyArray1::from_slice(py, &i.se))?;
        d.set_item("se_error", PyArray1::from_slice(py, &i.se_error))?;
        d.set_item(
            "information",
            PyArray2::from_vec2(py, &i.matrix)
                .map_err(|e| PyRuntimeError::new_err(e.to_string()))?,
        )?;
        d.set_item("information_theta", PyArray1::from_slice(py, &i.theta))?;
        d.set_item("chain_rhat", i.chain_rhat)?;
        d.set_item("se_warning", p.se_warning.clone())?;
        d.set_item("gaps", PyArray1::from_slice(py, &p.gaps))?;
    }
    Ok(d)
}

/// Fits a model given as a Python function by automated EM (see `sagd.fit`).
#[pyfunction]
#[pyo3(signature = (*, f, theta0, n_points, latent_dim, seed=0, threads=None, max_msteps=None, progress=None))]
#[allow(clippy::too_many_arguments)]
fn fit_function<'py>(
    py: Python<'py>,
    f: Py<PyAny>,
    theta0: PyReadonlyArray1<'py, f64>,
    n_points: usize,
    latent_dim: usize,
    seed: u64,
    threads: Option<usize>,
    max_msteps: Option<usize>,
    progress: Option<Py<PyAny>>,
) -> PyResult<Bound<'py, PyDict>> {
    let theta0 = theta0.as_array().to_vec();
    let model = PyModel {
        f: Callback::new(f, latent_dim, theta0.len()),
        n: n_points,
    };
    let result = run_em(py, &model, &theta0, seed, threads, max_msteps, progress);
    // The user's own exception first: it says what went wrong in their code.
    if let Some(e) = model.f.take_error() {
        return Err(e);
    }
    let trace = result?;
    trace_dict(py, &trace)
}

/// Algorithm 1 on a problem given by a Python function (see `sagd.minimize`).
#[pyfunction]
#[pyo3(signature = (*, f, theta0, xi0, n_chains, iterations, schedule="theorem3", c1=0.1, c2=1.0, c=0.25, alpha0=0.1, step_size=None, chain_length=None, learning_rate=None, scheme="baoab", gamma=1.0, seed=0, threads=None, progress=None))]
#[allow(clippy::too_many_arguments)]
fn minimize<'py>(
    py: Python<'py>,
    f: Py<PyAny>,
    theta0: PyReadonlyArray1<'py, f64>,
    xi0: PyReadonlyArray1<'py, f64>,
    n_chains: usize,
    iterations: usize,
    schedule: &str,
    c1: f64,
    c2: f64,
    c: f64,
    alpha0: f64,
    step_size: Option<f64>,
    chain_length: Option<usize>,
    learning_rate: Option<f64>,
    scheme: &str,
    gamma: f64,
    seed: u64,
    threads: Option<usize>,
    progress: Option<Py<PyAny>>,
) -> PyResult<Bound<'py, PyDict>> {
    use sagd::langevin::{LangevinSettings, Scheme};
    use sagd::prelude::{Runner, Sagd, SagdSettings, Schedules};
    use sagd::run::Outcome;
    let theta0 = theta0.as_array().to_vec();
    let xi0 = xi0.as_array().to_vec();
    let schedules = match schedule {
        "theorem3" => Schedules::theorem3(c1, c2, alpha0),
        "theorem4" => Schedules::theorem4(c1, c2, c, alpha0),
        "constant" => match (step_size, chain_length, learning_rate) {
            (Some(delta), Some(k), Some(alpha)) => Schedules::constant(delta, k, alpha),
            _ => {
                return Err(PyValueError::new_err(
                    "schedule='constant' needs step_size, chain_length and learning_rate",
                ))
            }
        },
        other => {
            return Err(PyValueError::new_err(format!(
                "schedule: unknown `{other}`; use theorem3, theorem4 or constant"
            )))
        }
    };
    let scheme: Scheme = scheme.parse().map_err(PyValueError::new_err)?;
    let problem = PyProblem {
        f: Callback::new(f, xi0.len() / n_chains.max(1), theta0.len()),
        chains: n_chains,
    };
    let settings = SagdSettings {
        schedules,
        langevin: LangevinSettings { scheme, gamma },
        ..Default::default()
    };
    let solver = Sagd::new(settings);
    let result = detached(
        py,
        threads,
        progress,
        Some(problem.f.halt()),
        |watch| -> sagd::error::Result<_> {
            let mut state = solver.init(&problem, &theta0, &xi0, seed)?;
            let mut path = vec![state.theta.clone()];
            let mut grad_norms = Vec::new();
            let mut record = |st: &sagd::prelude::SagdState<f64>,
                              info: &sagd::prelude::IterInfo| {
                path.push(st.theta.clone());
                grad_norms.push(info.grad_norm);
                watch.tick(1)
            };
            let outcome = Runner::new(solver.on(&problem, iterations))
                .observe(&mut record)
                .run(&mut state)?;
            Ok((
                state.theta.clone(),
                state.theta_avg(),
                path,
                grad_norms,
                outcome == Outcome::Stopped,
            ))
        },
    )?;
    if let Some(e) = problem.f.take_error() {
        return Err(e);
    }
    let (theta, theta_avg, path, grad_norms, stopped) = result.map_err(py_error)?;
    let d = PyDict::new(py);
    d.set_item("theta", PyArray1::from_vec(py, theta))?;
    d.set_item("theta_avg", PyArray1::from_vec(py, theta_avg))?;
    d.set_item(
        "path",
        PyArray2::from_vec2(py, &path).map_err(|e| PyRuntimeError::new_err(e.to_string()))?,
    )?;
    d.set_item("grad_norms", PyArray1::from_vec(py, grad_norms))?;
    d.set_item("stopped", stopped)?;
    Ok(d)
}

/// Deconvolution of `x` = Z + N(0, noise_sd²) by E2's methods (see `sagd.deconvolve`): per fitted
/// model (`pretrained` and each method) the draws of Z (sorted), in the data's units, and the mean
/// log-likelihood per observation on the unit-noise scale. SAGD runs with the named settings
/// `preset` ([`sagd_apps::debias::SagdPreset`]); the networks train on `device` (cpu, cuda,
/// cuda:N).
#[pyfunction]
#[pyo3(signature = (*, x, noise_sd, holdout, methods, seed=0, threads=None, pretrain_epochs=None, finetune_epochs=None, progress=None, preset = "default", device = "cpu"))]
#[allow(clippy::too_many_arguments)]
fn deconvolve<'py>(
    py: Python<'py>,
    x: PyReadonlyArray1<'py, f64>,
    noise_sd: f64,
    holdout: f64,
    methods: Vec<String>,
    seed: u64,
    threads: Option<usize>,
    pretrain_epochs: Option<usize>,
    finetune_epochs: Option<usize>,
    progress: Option<Py<PyAny>>,
    preset: &str,
    device: &str,
) -> PyResult<Bound<'py, PyDict>> {
    use sagd_apps::debias::{deconvolve as fit, E2Settings, Method, RunOptions, SagdPreset};
    let preset: SagdPreset = preset.parse().map_err(py_error)?;
    let device: sagd_nn::Device = device
        .parse()
        .map_err(|e| PyValueError::new_err(format!("device: {e}")))?;
    let x = x.as_array().to_vec();
    let methods = methods
        .iter()
        .map(|m| m.parse::<Method>())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| PyValueError::new_err(format!("methods: {e}")))?;
    let mut s = E2Settings {
        methods,
        batch_size: x.len(),
        ..E2Settings::default()
    };
    if let Some(e) = pretrain_epochs {
        s.pretrain_epochs = e;
    }
    if let Some(e) = finetune_epochs {
        s.finetune_epochs = e;
    }
    preset.apply(&mut s);
    // Ctrl-C stops the phase in progress after its current update. Progress counts the work
    // units (`E2Settings::update_cost`), `total_work` of them in all.
    let stop = Arc::new(AtomicBool::new(false));
    let opts = RunOptions {
        keep_samples: true,
        stop: Some(stop.clone()),
        device,
        ..RunOptions::default()
    };
    // Ctrl-C raises `stop` itself, which the phases read.
    let result = detached(py, threads, progress, Some(Halt::of_flag(stop)), |watch| {
        fit(&s, &x, noise_sd, holdout, seed, &opts, &|phase, _, _| {
            watch.tick(s.update_cost(phase) as usize);
        })
    })?
    .map_err(py_error)?;
    let d = PyDict::new(py);
    let draws = PyDict::new(py);
    for (name, v) in &result.samples {
        draws.set_item(name, PyArray1::from_slice(py, v))?;
    }
    d.set_item("draws", draws)?;
    let loglik = PyDict::new(py);
    for (name, v) in &result.loglik_per_point_scaled_data {
        loglik.set_item(name, *v)?;
    }
    d.set_item("loglik_per_point", loglik)?;
    if let Some(h) = &result.held_out {
        let scores = PyList::empty(py);
        for m in &h.scores {
            let row = PyDict::new(py);
            row.set_item("model", &m.model)?;
            row.set_item("mean", m.mean)?;
            row.set_item("se", m.se)?;
            row.set_item("below_best", m.below_best)?;
            row.set_item("below_best_se", m.below_best_se)?;
            scores.append(row)?;
        }
        let held = PyDict::new(py);
        held.set_item("n", h.n)?;
        held.set_item("scores", scores)?;
        held.set_item("best", &h.best)?;
        held.set_item("chosen", &h.chosen)?;
        held.set_item("confidence", format!("{:?}", h.confidence).to_lowercase())?;
        held.set_item("advice", &h.advice)?;
        d.set_item("held_out", held)?;
    }
    d.set_item("n", result.n)?;
    d.set_item("total_work", s.replication_work(x.len()))?;
    d.set_item("noise_sd", result.noise_sd)?;
    Ok(d)
}

/// The extension module.
#[pymodule]
fn _core(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(fit_glmm, m)?)?;
    m.add_function(wrap_pyfunction!(glmm_loglik, m)?)?;
    m.add_function(wrap_pyfunction!(bootstrap_lrt, m)?)?;
    m.add_function(wrap_pyfunction!(random_reductions, m)?)?;
    m.add_function(wrap_pyfunction!(least_squares_loglik, m)?)?;
    m.add_function(wrap_pyfunction!(simulate_glmm, m)?)?;
    m.add_function(wrap_pyfunction!(fit_function, m)?)?;
    m.add_function(wrap_pyfunction!(minimize, m)?)?;
    m.add_function(wrap_pyfunction!(deconvolve, m)?)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
