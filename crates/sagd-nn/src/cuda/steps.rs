//! The Langevin program's elementwise operations as the backend's: a drift, a kick and the exact
//! Ornstein-Uhlenbeck flow on the first `len` values of a chain state, one launch each: the
//! backend of the program's one interpreter ([`crate::program`]), which E2's and E3's chains on a
//! GPU run. Chains gathered or scattered by rows ([`Gpu::rows_copy`]), and an update's launches
//! replayed from a CUDA graph ([`Replay`]).

use cudarc::driver::sys::{CUgraphInstantiate_flags, CUstreamCaptureMode};
use cudarc::driver::{CudaGraph, CudaSlice, CudaView, PushKernelArg};

use std::ops::Range;

use super::{graphs_enabled, grid, Gpu, GpuError, GpuResult};
use crate::program::Elementwise;

impl Gpu {
    /// x += h ρ, or x = from + h ρ where `from` is given.
    pub fn drift(
        &self,
        x: &mut CudaSlice<f32>,
        from: Option<&CudaSlice<f32>>,
        rho: &CudaSlice<f32>,
        h: f32,
        len: usize,
    ) -> GpuResult<()> {
        let li = len as i32;
        match from {
            None => {
                // SAFETY: x and rho hold at least len values.
                unsafe { launch!(self, "chain_drift_add", grid(len); x, rho, &h, &li) }?;
            }
            Some(from) => {
                // SAFETY: x, from and rho hold at least len values.
                unsafe { launch!(self, "chain_drift", grid(len); x, from, rho, &h, &li) }?;
            }
        }
        Ok(())
    }

    /// ρ = decay ρ + grad g + noise η (η read, times 0, when `noise` is 0).
    pub fn kick(
        &self,
        rho: &mut CudaSlice<f32>,
        g: &CudaSlice<f32>,
        eta: &CudaView<'_, f32>,
        (decay, grad, noise): (f32, f32, f32),
        len: usize,
    ) -> GpuResult<()> {
        let li = len as i32;
        // SAFETY: every buffer holds at least len values.
        unsafe { launch!(self, "chain_kick", grid(len); rho, g, eta, &decay, &grad, &noise, &li) }?;
        Ok(())
    }

    /// The exact Ornstein-Uhlenbeck flow: x += drift ρ + x1 ζ1 + x2 ζ2, ρ = decay ρ + v1 ζ1, the
    /// coefficients `[decay, drift, v1, x1, x2]` of the core's `Op::Ou`.
    pub fn ou(
        &self,
        (x, rho): (&mut CudaSlice<f32>, &mut CudaSlice<f32>),
        (z1, z2): (&CudaView<'_, f32>, &CudaView<'_, f32>),
        [decay, drift, v1, x1, x2]: [f32; 5],
        len: usize,
    ) -> GpuResult<()> {
        let li = len as i32;
        // SAFETY: every buffer holds at least len values.
        unsafe {
            launch!(self, "chain_ou", grid(len);
                x, rho, z1, z2, &decay, &drift, &v1, &x1, &x2, &li)
        }?;
        Ok(())
    }
}

/// The backend of the program's interpreter ([`crate::program`]): these launches.
impl Elementwise for Gpu {
    type Buf = CudaSlice<f32>;
    type View<'a> = CudaView<'a, f32>;
    type Error = GpuError;
    fn view<'a>(&'a self, buf: &'a CudaSlice<f32>, at: Range<usize>) -> CudaView<'a, f32> {
        buf.slice(at)
    }
    fn copy(&self, from: &Self::Buf, to: &mut Self::Buf, len: usize) -> GpuResult<()> {
        Gpu::copy(self, from, to, len)
    }
    fn drift(
        &self,
        x: &mut Self::Buf,
        from: Option<&Self::Buf>,
        rho: &Self::Buf,
        h: f32,
        len: usize,
    ) -> GpuResult<()> {
        Gpu::drift(self, x, from, rho, h, len)
    }
    fn kick(
        &self,
        rho: &mut Self::Buf,
        g: &Self::Buf,
        eta: &CudaView<'_, f32>,
        coefficients: (f32, f32, f32),
        len: usize,
    ) -> GpuResult<()> {
        Gpu::kick(self, rho, g, eta, coefficients, len)
    }
    fn ou(
        &self,
        state: (&mut Self::Buf, &mut Self::Buf),
        z: (&CudaView<'_, f32>, &CudaView<'_, f32>),
        coefficients: [f32; 5],
        len: usize,
    ) -> GpuResult<()> {
        Gpu::ou(self, state, z, coefficients, len)
    }
    fn refuse(&self, what: String) -> GpuError {
        GpuError::Settings(what)
    }
}

impl Gpu {
    /// Gathers the rows `idx` (n of them) of `src` into the first n rows of `dst`, or with
    /// `scatter` the first n rows of `src` into the rows `idx` of `dst`; rows of d values.
    pub fn rows_copy(
        &self,
        dst: &mut CudaSlice<f32>,
        src: &CudaSlice<f32>,
        idx: &CudaSlice<i32>,
        (n, d): (usize, usize),
        scatter: bool,
    ) -> GpuResult<()> {
        let (ni, di, si) = (n as i32, d as i32, scatter as i32);
        // SAFETY: idx holds n valid row numbers of the buffers it indexes.
        unsafe { launch!(self, "rows_copy", grid(n * d); dst, src, idx, &ni, &di, &si) }?;
        Ok(())
    }
}

/// An update's launches replayed from a CUDA graph: run as they are at the first update of a
/// shape `K`, captured at the second (the first made every buffer, so the captured launches
/// allocate nothing) and replayed from then on, one launch instead of dozens (the buffers, shapes
/// and arguments are the same at every update of a shape). One graph, for the first shape seen
/// twice in a row; other shapes run their launches as they are. `SAGD_GPU_GRAPHS=0` turns it off.
pub struct Replay<K> {
    graph: Option<(K, CudaGraph)>,
    last: Option<K>,
}

impl<K> Default for Replay<K> {
    fn default() -> Self {
        Replay {
            graph: None,
            last: None,
        }
    }
}

impl<K: Copy + PartialEq> Replay<K> {
    /// Runs `launches` (launches only, on `gpu`'s stream) for an update of shape `key`, or
    /// replays them from the graph captured for it.
    pub fn run(
        &mut self,
        gpu: &Gpu,
        key: K,
        launches: impl FnOnce() -> GpuResult<()>,
    ) -> GpuResult<()> {
        match &self.graph {
            Some((k, graph)) if *k == key => graph.launch()?,
            _ => {
                let capture = self.graph.is_none() && self.last == Some(key) && graphs_enabled();
                if capture {
                    gpu.stream
                        .begin_capture(CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)?;
                }
                let res = launches();
                if capture {
                    let graph = gpu.stream.end_capture(CUgraphInstantiate_flags(0));
                    res?;
                    let g =
                        graph?.ok_or_else(|| GpuError::Compile("an empty CUDA graph".into()))?;
                    g.launch()?;
                    self.graph = Some((key, g));
                } else {
                    res?;
                }
            }
        }
        self.last = Some(key);
        Ok(())
    }
}
