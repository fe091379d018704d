//! Models and problems given as Python functions: each call hands the function a whole block of
//! chains and reads back its arrays; what it raises is kept and given back to the caller as itself.

use std::ffi::{c_long, c_ulong};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use numpy::{PyArray1, PyArrayMethods, PyReadonlyArrayDyn};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use sagd::error::LogpError;
use sagd::model::LatentModel;

/// What the user's function returns for a block, flattened: (logp, grad_z, grad_theta).
pub(crate) type BlockOutput = (Vec<f64>, Vec<f64>, Vec<f64>);

/// A Python function's `(logp, grad_z, grad_theta)` for `rows` rows of dimension `d` and `p`
/// parameters, flattened, with a `ValueError` that names a wrong output by `names` (the two
/// gradients' names in the function's documentation).
fn block_output(
    py: Python<'_>,
    out: &Bound<'_, PyAny>,
    (rows, d, p): (usize, usize, usize),
    names: [&str; 2],
) -> PyResult<BlockOutput> {
    let (lp, gz, gt): (Bound<'_, PyAny>, Bound<'_, PyAny>, Bound<'_, PyAny>) =
        out.extract().map_err(|_| {
            PyValueError::new_err(format!(
                "the function must return a tuple (logp, {}, {})",
                names[0], names[1]
            ))
        })?;
    let np = py.import("numpy")?;
    // `rows` × `cols` values, as one row of `cols` per chain when the array has two axes: a
    // transposed (cols, rows) array has the right length but the wrong values in each place.
    let flat = |a: Bound<'_, PyAny>, name: &str, rows: usize, cols: usize| -> PyResult<Vec<f64>> {
        let len = rows * cols;
        let arr = np.call_method1("ascontiguousarray", (a, "float64"))?;
        let arr: PyReadonlyArrayDyn<'_, f64> = arr.extract().map_err(|_| {
            PyValueError::new_err(format!(
                "the function returned {name} that is not an array of numbers"
            ))
        })?;
        let shape = arr.as_array().shape().to_vec();
        if shape.len() == 2 && rows > 1 && shape != [rows, cols] {
            return Err(PyValueError::new_err(format!(
                "the function returned {name} of shape ({}, {}); expected ({rows}, {cols}): one row per chain (is it transposed?)",
                shape[0], shape[1]
            )));
        }
        if shape.len() > 2 {
            return Err(PyValueError::new_err(format!(
                "the function returned {name} with {} axes; expected an array of shape ({rows}, {cols})",
                shape.len()
            )));
        }
        let v = arr.as_slice()?;
        if v.len() != len {
            return Err(PyValueError::new_err(format!(
                "the function returned {name} with {} values; expected {len}",
                v.len()
            )));
        }
        Ok(v.to_vec())
    };
    Ok((
        flat(lp, "logp", rows, 1)?,
        flat(gz, names[0], rows, d)?,
        flat(gt, names[1], 1, p)?,
    ))
}

/// What Ctrl-C does to a run of a user's function: the first press raises `flag`, so that the
/// function is not called again and the run ends after the calls in progress; a second raises
/// `KeyboardInterrupt` inside those calls, for a function that takes long a call.
#[derive(Clone, Default)]
pub(crate) struct Halt {
    /// Raised by the first Ctrl-C.
    pub(crate) flag: Arc<AtomicBool>,
    /// The Python thread idents of the calls in progress, and whether a second Ctrl-C came.
    calls: Arc<Mutex<(Vec<c_ulong>, bool)>>,
}

impl Halt {
    /// A halt that raises `flag` (a run with no user's function to interrupt).
    pub(crate) fn of_flag(flag: Arc<AtomicBool>) -> Self {
        Halt {
            flag,
            calls: Arc::default(),
        }
    }

    /// Raises `KeyboardInterrupt` in every call in progress, at its next Python instruction (a
    /// call blocked inside C, such as `time.sleep`, returns first), and in calls that start later.
    pub(crate) fn interrupt_calls(&self, _py: Python<'_>) {
        self.flag.store(true, Ordering::Relaxed);
        let Ok(mut calls) = self.calls.lock() else {
            return;
        };
        calls.1 = true;
        for &id in &calls.0 {
            // SAFETY: the GIL is held (`_py`), and the exception type is a static object.
            unsafe {
                pyo3::ffi::PyThreadState_SetAsyncExc(
                    id as c_long,
                    pyo3::ffi::PyExc_KeyboardInterrupt,
                );
            }
        }
    }

    /// Runs `call` (of the user's function, the GIL held) as a call in progress.
    fn during<R>(&self, _py: Python<'_>, call: impl FnOnce() -> R) -> R {
        // SAFETY: the GIL is held (`_py`).
        let id = unsafe { pyo3::ffi::PyThread_get_thread_ident() };
        if let Ok(mut calls) = self.calls.lock() {
            calls.0.push(id);
        }
        let out = call();
        if let Ok(mut calls) = self.calls.lock() {
            calls.0.retain(|&c| c != id);
            if calls.1 {
                // An interrupt sent as the call returned is pending still: clear it, so that it
                // does not strike this thread's later Python code.
                // SAFETY: the GIL is held; a null exception clears the thread's pending one.
                unsafe {
                    pyo3::ffi::PyThreadState_SetAsyncExc(id as c_long, std::ptr::null_mut());
                }
            }
        }
        out
    }
}

/// A Python function called on blocks of chains: `f(theta, points, z)` (a model) or `f(theta, xi)`
/// (a problem). The first exception it raises, or the first wrong shape it returns, is kept and
/// given back to the caller as itself after the run.
pub(crate) struct Callback {
    f: Py<PyAny>,
    d: usize,
    p: usize,
    error: Mutex<Option<PyErr>>,
    halt: Halt,
    calls: AtomicUsize,
    /// Calls in a row whose every row was not finite, and the first of them.
    broken: Mutex<(usize, usize)>,
}

/// Calls in a row that return no finite row at all before the function is taken to be broken
/// (a chain that diverges is restarted and comes back to finite values; a function that returns
/// NaN everywhere from some call on never does, and the run would go on without moving).
const BROKEN_CALLS: usize = 100;

impl Callback {
    /// `f` for rows of dimension `d` and `p` parameters.
    pub(crate) fn new(f: Py<PyAny>, d: usize, p: usize) -> Self {
        Callback {
            f,
            d,
            p,
            error: Mutex::new(None),
            halt: Halt::default(),
            calls: AtomicUsize::new(0),
            broken: Mutex::new((0, 0)),
        }
    }

    /// What Ctrl-C does to this function's run ([`Halt`]): once its flag is raised every later
    /// call fails at once instead of calling the function, so that a run whose function takes
    /// seconds a call ends after the calls in flight, not after its current update (minutes).
    pub(crate) fn halt(&self) -> Halt {
        self.halt.clone()
    }

    /// Counts `call` as broken when none of its `rows` is finite in logp and `grad` (named
    /// `grad`); [`BROKEN_CALLS`] of them in a row are an error naming the output and the first.
    fn count_broken(
        &self,
        out: &BlockOutput,
        rows: usize,
        call: usize,
        grad: &str,
    ) -> PyResult<()> {
        let d = self.d.max(1);
        let finite_row = |r: usize| {
            out.0[r].is_finite() && out.1[r * d..(r + 1) * d].iter().all(|v| v.is_finite())
        };
        let Ok(mut broken) = self.broken.lock() else {
            return Ok(());
        };
        if (0..rows).any(finite_row) {
            *broken = (0, 0);
            return Ok(());
        }
        if broken.0 == 0 {
            broken.1 = call;
        }
        broken.0 += 1;
        if broken.0 < BROKEN_CALLS {
            return Ok(());
        }
        let what = if out.0.iter().any(|v| !v.is_finite()) {
            "logp"
        } else {
            grad
        };
        Err(PyValueError::new_err(format!(
            "the function returned {what} that is not finite in every row of each of its last {BROKEN_CALLS} calls (since call {}): a chain that diverges comes back, so the function is broken there",
            broken.1
        )))
    }

    /// What the function raised, if it did.
    pub(crate) fn take_error(&self) -> Option<PyErr> {
        self.error.lock().ok().and_then(|mut slot| slot.take())
    }

    /// Calls the function on a block (with the rows' data indices, for a model):
    /// (logp, grad_x, grad_theta).
    fn call(
        &self,
        theta: &[f64],
        points: Option<&[usize]>,
        x: &[f64],
    ) -> Result<BlockOutput, LogpError> {
        if self.halt.flag.load(Ordering::Relaxed) {
            return Err(LogpError::Fatal("interrupted (Ctrl-C)".into()));
        }
        let rows = x.len() / self.d.max(1);
        let call = self.calls.fetch_add(1, Ordering::Relaxed) + 1;
        let names = match points {
            Some(_) => ["grad_z", "grad_theta"],
            None => ["grad_xi", "grad_f"],
        };
        Python::attach(|py| -> PyResult<BlockOutput> {
            let th = PyArray1::from_slice(py, theta);
            let xx = PyArray1::from_slice(py, x).reshape([rows, self.d])?;
            let f = self.f.bind(py);
            let out = match points {
                Some(data) => {
                    let idx: Vec<i64> = data.iter().map(|&i| i as i64).collect();
                    let idx = PyArray1::from_vec(py, idx);
                    self.halt.during(py, || f.call1((th, idx, xx)))?
                }
                None => self.halt.during(py, || f.call1((th, xx)))?,
            };
            let out = block_output(py, &out, (rows, self.d, self.p), names)?;
            // The θ-gradient has no divergence to recover from (the chains' log density and
            // gradient may leave the finite numbers where a chain wanders; θ's may not).
            if let Some(v) = out.2.iter().find(|v| !v.is_finite()) {
                return Err(PyValueError::new_err(format!(
                    "the function returned {} with a value that is not finite ({v}) at call {call}, theta = {theta:?}: it must be finite wherever the chains go",
                    names[1]
                )));
            }
            self.count_broken(&out, rows, call, names[0])?;
            Ok(out)
        })
        .map_err(|e| {
            let message = e.to_string();
            if let Ok(mut slot) = self.error.lock() {
                slot.get_or_insert(e);
            }
            LogpError::Fatal(format!("the function failed: {message}"))
        })
    }
}

/// Writes a block's log densities and gradients, and adds its Σ∇θ into `add`; non-finite values
/// are a divergence of the block.
fn write_block(
    (lp, gx, gt): BlockOutput,
    logp: &mut [f64],
    grad: &mut [f64],
    add: &mut [f64],
) -> Result<(), LogpError> {
    logp.copy_from_slice(&lp);
    grad.copy_from_slice(&gx);
    if lp.iter().chain(&gx).any(|v| !v.is_finite()) {
        return Err(LogpError::NonFinite);
    }
    add_finite(&gt, add)
}

/// `add += g`, when g is finite.
fn add_finite(g: &[f64], add: &mut [f64]) -> Result<(), LogpError> {
    if g.iter().any(|v| !v.is_finite()) {
        return Err(LogpError::NonFinite);
    }
    add.iter_mut().zip(g).for_each(|(o, v)| *o += v);
    Ok(())
}

/// A model given by a Python function `f(theta, points, z) -> (logp, grad_z, grad_theta)`:
/// `points` the data indices of the rows, `z` their latents (rows × latent_dim); `logp` one value
/// per row, `grad_z` the rows' ∇z, `grad_theta` Σ over the rows of ∇θ. One call serves a whole
/// block of chains.
pub(crate) struct PyModel {
    pub(crate) f: Callback,
    pub(crate) n: usize,
}

impl LatentModel<f64> for PyModel {
    fn n_data(&self) -> usize {
        self.n
    }
    fn latent_dim(&self) -> usize {
        self.f.d
    }
    fn theta_dim(&self) -> usize {
        self.f.p
    }
    fn log_joint(
        &self,
        theta: &[f64],
        data: &[usize],
        z: &[f64],
        logp: &mut [f64],
        grad_z: &mut [f64],
    ) -> Result<(), LogpError> {
        let mut unused = vec![0.0; self.f.p];
        self.log_joint_and_grad_theta(theta, data, z, logp, grad_z, &mut unused)
    }
    fn add_grad_theta(
        &self,
        theta: &[f64],
        data: &[usize],
        z: &[f64],
        grad_theta: &mut [f64],
    ) -> Result<(), LogpError> {
        add_finite(&self.f.call(theta, Some(data), z)?.2, grad_theta)
    }
    fn fuses_grad_theta(&self) -> bool {
        true
    }
    /// A call crosses into Python (tens of µs before any work): hand it all rows at once.
    fn calls_are_costly(&self) -> bool {
        true
    }
    fn log_joint_and_grad_theta(
        &self,
        theta: &[f64],
        data: &[usize],
        z: &[f64],
        logp: &mut [f64],
        grad_z: &mut [f64],
        grad_theta: &mut [f64],
    ) -> Result<(), LogpError> {
        write_block(self.f.call(theta, Some(data), z)?, logp, grad_z, grad_theta)
    }
}

/// Algorithm 1's problem given by a Python function `f(theta, xi) -> (logp, grad_xi, grad_f)`:
/// the chains' log density log π_θ(ξ) for each row of `xi`, its gradient in ξ, and Σ over the rows
/// of ∇θ f(θ; ξ).
pub(crate) struct PyProblem {
    pub(crate) f: Callback,
    pub(crate) chains: usize,
}

impl sagd::model::Problem<f64> for PyProblem {
    fn theta_dim(&self) -> usize {
        self.f.p
    }
    fn n_chains(&self) -> usize {
        self.chains
    }
    fn chain_dim(&self) -> usize {
        self.f.d
    }
    fn log_target(
        &self,
        anchor: &[f64],
        _first_row: usize,
        xi: &[f64],
        logp: &mut [f64],
        grad: &mut [f64],
    ) -> Result<(), LogpError> {
        let mut unused = vec![0.0; self.f.p];
        self.log_target_and_grad_f(anchor, 0, xi, logp, grad, &mut unused)
    }
    fn add_grad_f(
        &self,
        theta: &[f64],
        _first_row: usize,
        xi: &[f64],
        grad: &mut [f64],
    ) -> Result<(), LogpError> {
        add_finite(&self.f.call(theta, None, xi)?.2, grad)
    }
    fn fuses_grad_f(&self) -> bool {
        true
    }
    fn calls_are_costly(&self) -> bool {
        true
    }
    fn log_target_and_grad_f(
        &self,
        theta: &[f64],
        _first_row: usize,
        xi: &[f64],
        logp: &mut [f64],
        grad: &mut [f64],
        grad_f: &mut [f64],
    ) -> Result<(), LogpError> {
        write_block(self.f.call(theta, None, xi)?, logp, grad, grad_f)
    }
}
