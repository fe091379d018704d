//! Adam's step on the device, rounding as the host's [`UpdateRule`](sagd::optim::UpdateRule) does
//! (moments in f64, the direction in f32), so a device-side update keeps the host's bits.

use cudarc::driver::{CudaSlice, PushKernelArg};

use super::{grid, Gpu, GpuResult};

/// One Adam step as a device takes it: θ ← θ − lr·m̂/(√v̂ + ε), m and v in f64, bias-corrected
/// at the step's number `t` (from 1) of each network, rounded as the host's rule rounds.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AdamStep {
    /// Learning rate.
    pub lr: f64,
    /// First-moment decay.
    pub beta1: f64,
    /// Second-moment decay.
    pub beta2: f64,
    /// Added to √v̂.
    pub eps: f64,
    /// This step's number for the decoder (generator) and the encoder.
    pub t: (u64, u64),
}

/// Adam's step `step` (number `t`) on the first `n` parameters `theta` with gradient `g` and
/// moments `m`, `v`, as the host's rule takes it.
#[allow(clippy::too_many_arguments)]
pub fn adam(
    gpu: &Gpu,
    theta: &mut CudaSlice<f32>,
    g: &CudaSlice<f32>,
    m: &mut CudaSlice<f64>,
    v: &mut CudaSlice<f64>,
    n: usize,
    step: AdamStep,
    t: u64,
) -> GpuResult<()> {
    let c1 = 1.0 - step.beta1.powi(t as i32);
    let c2 = 1.0 - step.beta2.powi(t as i32);
    let ni = n as i32;
    // SAFETY: theta, g, m and v hold at least n values.
    unsafe {
        launch!(gpu, "adam_step", grid(n);
            theta, g, m, v, &ni, &step.beta1, &step.beta2, &step.eps, &c1, &c2, &step.lr)
    }?;
    Ok(())
}
