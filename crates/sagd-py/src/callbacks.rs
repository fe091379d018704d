//! Models and problems given as Python functions: each call hands the function a whole block of
//! chains and reads back its arrays; what it raises is kept and given back to the caller as itself.

use std::sync::Mutex;

use numpy::{PyArray1, PyArrayMethods, PyReadonlyArrayDyn};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use sagd::error::LogpError;
use sagd::model::LatentModel;

/// What the user's function returns for a block, flattened: (logp, grad_z, grad_theta).
pub(crate) type BlockOutput = (Vec<f64>, Vec<f64>, Vec<f64>);

/// A Python function's `(logp, grad_z, grad_theta)` for `rows` rows of dimension `d` and `p`
/// parameters, flattened, with a `ValueError` that names a wrong output.
fn block_output(
    py: Python<'_>,
    out: &Bound<'_, PyAny>,
    rows: usize,
    d: usize,
    p: usize,
) -> PyResult<BlockOutput> {
    let (lp, gz, gt): (Bound<'_, PyAny>, Bound<'_, PyAny>, Bound<'_, PyAny>) =
        out.extract().map_err(|_| {
            PyValueError::new_err("the function must return a tuple (logp, grad_z, grad_theta)")
        })?;
    let np = py.import("numpy")?;
    let flat = |a: Bound<'_, PyAny>, name: &str, len: usize| -> PyResult<Vec<f64>> {
        let arr = np.call_method1("ascontiguousarray", (a, "float64"))?;
        let arr: PyReadonlyArrayDyn<'_, f64> = arr.extract().map_err(|_| {
            PyValueError::new_err(format!(
                "the function returned {name} that is not an array of numbers"
            ))
        })?;
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
        flat(lp, "logp", rows)?,
        flat(gz, "grad_z", rows * d)?,
        flat(gt, "grad_theta", p)?,
    ))
}

/// A model given by a Python function `f(theta, points, z) -> (logp, grad_z, grad_theta)`:
/// `points` the data indices of the rows, `z` their latents (rows × latent_dim); `logp` one value
/// per row, `grad_z` the rows' ∇z, `grad_theta` Σ over the rows of ∇θ. One call serves a whole
/// block of chains.
pub(crate) struct PyModel {
    pub(crate) f: Py<PyAny>,
    pub(crate) n: usize,
    pub(crate) d: usize,
    pub(crate) p: usize,
    /// The first exception the function raised or the first wrong shape it returned, given back
    /// to the caller as itself after the run.
    pub(crate) error: Mutex<Option<PyErr>>,
}

impl PyModel {
    fn fail(&self, e: PyErr) -> LogpError {
        let message = e.to_string();
        if let Ok(mut slot) = self.error.lock() {
            slot.get_or_insert(e);
        }
        LogpError::Fatal(format!("the model function failed: {message}"))
    }

    /// Calls the function on a block: (logp, grad_z, grad_theta).
    fn call(&self, theta: &[f64], data: &[usize], z: &[f64]) -> Result<BlockOutput, LogpError> {
        let rows = data.len();
        Python::attach(|py| -> PyResult<BlockOutput> {
            let th = PyArray1::from_slice(py, theta);
            let idx: Vec<i64> = data.iter().map(|&i| i as i64).collect();
            let pts = PyArray1::from_vec(py, idx);
            let zz = PyArray1::from_slice(py, z).reshape([rows, self.d])?;
            let out = self.f.bind(py).call1((th, pts, zz))?;
            block_output(py, &out, rows, self.d, self.p)
        })
        .map_err(|e| self.fail(e))
    }
}

impl LatentModel<f64> for PyModel {
    fn n_data(&self) -> usize {
        self.n
    }
    fn latent_dim(&self) -> usize {
        self.d
    }
    fn theta_dim(&self) -> usize {
        self.p
    }
    fn log_joint(
        &self,
        theta: &[f64],
        data: &[usize],
        z: &[f64],
        logp: &mut [f64],
        grad_z: &mut [f64],
    ) -> Result<(), LogpError> {
        let mut unused = vec![0.0; self.p];
        self.log_joint_and_grad_theta(theta, data, z, logp, grad_z, &mut unused)
    }
    fn add_grad_theta(
        &self,
        theta: &[f64],
        data: &[usize],
        z: &[f64],
        grad_theta: &mut [f64],
    ) -> Result<(), LogpError> {
        let (_, _, gt) = self.call(theta, data, z)?;
        if gt.iter().any(|v| !v.is_finite()) {
            return Err(LogpError::NonFinite);
        }
        grad_theta.iter_mut().zip(&gt).for_each(|(o, v)| *o += v);
        Ok(())
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
        let (lp, gz, gt) = self.call(theta, data, z)?;
        logp.copy_from_slice(&lp);
        grad_z.copy_from_slice(&gz);
        if lp.iter().chain(&gz).chain(&gt).any(|v| !v.is_finite()) {
            return Err(LogpError::NonFinite);
        }
        grad_theta.iter_mut().zip(&gt).for_each(|(o, v)| *o += v);
        Ok(())
    }
}

/// Algorithm 1's problem given by a Python function `f(theta, xi) -> (logp, grad_xi, grad_f)`:
/// the chains' log density log π_θ(ξ) for each row of `xi`, its gradient in ξ, and Σ over the rows
/// of ∇θ f(θ; ξ).
pub(crate) struct PyProblem {
    pub(crate) f: Py<PyAny>,
    pub(crate) chains: usize,
    pub(crate) d: usize,
    pub(crate) p: usize,
    pub(crate) error: Mutex<Option<PyErr>>,
}

impl PyProblem {
    fn call(&self, theta: &[f64], xi: &[f64]) -> Result<BlockOutput, LogpError> {
        let rows = xi.len() / self.d.max(1);
        Python::attach(|py| -> PyResult<BlockOutput> {
            let th = PyArray1::from_slice(py, theta);
            let x = PyArray1::from_slice(py, xi).reshape([rows, self.d])?;
            let out = self.f.bind(py).call1((th, x))?;
            block_output(py, &out, rows, self.d, self.p)
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

impl sagd::model::Problem<f64> for PyProblem {
    fn theta_dim(&self) -> usize {
        self.p
    }
    fn n_chains(&self) -> usize {
        self.chains
    }
    fn chain_dim(&self) -> usize {
        self.d
    }
    fn log_target(
        &self,
        anchor: &[f64],
        _first_row: usize,
        xi: &[f64],
        logp: &mut [f64],
        grad: &mut [f64],
    ) -> Result<(), LogpError> {
        let mut unused = vec![0.0; self.p];
        self.log_target_and_grad_f(anchor, 0, xi, logp, grad, &mut unused)
    }
    fn add_grad_f(
        &self,
        theta: &[f64],
        _first_row: usize,
        xi: &[f64],
        grad: &mut [f64],
    ) -> Result<(), LogpError> {
        let (_, _, gf) = self.call(theta, xi)?;
        if gf.iter().any(|v| !v.is_finite()) {
            return Err(LogpError::NonFinite);
        }
        grad.iter_mut().zip(&gf).for_each(|(o, v)| *o += v);
        Ok(())
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
        let (lp, gx, gf) = self.call(theta, xi)?;
        logp.copy_from_slice(&lp);
        grad.copy_from_slice(&gx);
        if lp.iter().chain(&gx).chain(&gf).any(|v| !v.is_finite()) {
            return Err(LogpError::NonFinite);
        }
        grad_f.iter_mut().zip(&gf).for_each(|(o, v)| *o += v);
        Ok(())
    }
}
