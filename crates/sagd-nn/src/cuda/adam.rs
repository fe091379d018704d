//! Adam's step on the device, rounding as the host's [`UpdateRule`](sagd::optim::UpdateRule) does
//! (moments in f64, the direction in f32), so a device-side update keeps the host's bits.

use cudarc::driver::{CudaSlice, PushKernelArg};

use super::{grid, Gpu, GpuResult};
use crate::train::AdamStep;

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
    let mut l = gpu.stream.launch_builder(gpu.k("adam_step"));
    l.arg(theta)
        .arg(g)
        .arg(m)
        .arg(v)
        .arg(&ni)
        .arg(&step.beta1)
        .arg(&step.beta2)
        .arg(&step.eps)
        .arg(&c1)
        .arg(&c2)
        .arg(&step.lr);
    // SAFETY: theta, g, m and v hold at least n values.
    unsafe { l.launch(grid(n)) }?;
    Ok(())
}
