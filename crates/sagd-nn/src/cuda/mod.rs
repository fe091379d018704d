//! The CUDA backend of the engine: the same [`Sequential`] networks on an NVIDIA GPU, through
//! `cudarc` with dynamic loading — the driver, NVRTC and cuBLAS are found at run time, so a binary
//! built without CUDA runs everywhere and `--device cuda` fails with a clear [`GpuError`] where no
//! GPU or library is found. Linear layers are cuBLAS products (row-major data read as column-major
//! transposes), activations are kernels compiled by NVRTC when the device opens. f32 throughout,
//! without TF32, so results agree with the CPU engine to float rounding.

mod bound;
mod chains;
mod check;
mod e3;

pub use bound::GpuBoundEstimator;
pub use chains::GpuChainEstimator;
pub use e3::{E3Pass, GpuE3};

pub use check::{
    check_adam, check_estimators, check_networks, check_training, time_networks, AdamCheck,
    EstimatorCheck, NetworkCheck, NetworkTiming, TrainingCheck,
};

use std::collections::HashMap;
use std::sync::{Arc, OnceLock};

use cudarc::cublas::sys::cublasOperation_t::{CUBLAS_OP_N, CUBLAS_OP_T};
use cudarc::cublas::{CudaBlas, Gemm, GemmConfig, Gemv, GemvConfig};
use cudarc::driver::{
    CudaContext, CudaFunction, CudaSlice, CudaStream, CudaView, DevicePtr, DevicePtrMut,
    DeviceRepr, LaunchConfig, PushKernelArg, ValidAsZeroBits,
};

use cudarc::nvrtc::Ptx;

use crate::conv::Windows;
use crate::math::Activation;
use crate::net::{Layer, Sequential};

/// Why the GPU could not be used.
#[derive(Debug, thiserror::Error)]
pub enum GpuError {
    /// A CUDA library is not on the loader's path.
    #[error(
        "no CUDA {library} library was found ({file}*): {hint}; or run on the CPU, the default"
    )]
    Library {
        /// Which library.
        library: &'static str,
        /// Its file name.
        file: &'static str,
        /// Where it comes from.
        hint: &'static str,
    },
    /// The driver loaded but no device answered.
    #[error("no CUDA device could be opened ({0}): check nvidia-smi, or run on the CPU")]
    NoDevice(String),
    /// A driver call failed.
    #[error("CUDA driver: {0}")]
    Driver(#[from] cudarc::driver::DriverError),
    /// NVRTC could not compile the kernels.
    #[error("compiling the CUDA kernels with NVRTC: {0}")]
    Compile(String),
    /// A cuBLAS call failed.
    #[error("cuBLAS: {0}")]
    Blas(#[from] cudarc::cublas::result::CublasError),
    /// A layer the GPU backend does not run yet.
    #[error("{0:?} runs on the CPU only for now: use --device cpu")]
    Unsupported(crate::net::Layer),
}

/// Results of the backend.
pub type GpuResult<T> = Result<T, GpuError>;

impl From<GpuError> for sagd::error::SagdError {
    fn from(e: GpuError) -> Self {
        sagd::error::SagdError::Device(e.to_string())
    }
}

/// The kernels of `kernels.cu`, by name.
const KERNELS: [&str; 27] = [
    "act_forward",
    "add_bias",
    "scale",
    "fill",
    "fill_random",
    "reparam",
    "bound_loss",
    "bound_enc_grad",
    "posterior_residual",
    "posterior_grad",
    "chain_drift",
    "chain_drift_add",
    "chain_kick",
    "chain_ou",
    "chain_refresh",
    "chain_finish",
    "column_sums",
    "rows_copy",
    "posterior_mlp",
    "im2col",
    "col2im",
    "bernoulli_rows",
    "e3_vae_grad",
    "e3_chain_init",
    "row_distance",
    "adam_step",
    "flag_nonfinite",
];

/// An open GPU: its own stream, a cuBLAS handle on it, and the compiled kernels. Each training job
/// opens its own, so jobs running side by side on CPU threads never share a stream or a handle.
pub struct Gpu {
    ctx: Arc<CudaContext>,
    pub(crate) stream: Arc<CudaStream>,
    blas: CudaBlas,
    kernels: HashMap<&'static str, CudaFunction>,
}

/// Threads per block of the elementwise kernels.
const THREADS: u32 = 256;

pub(crate) fn grid(n: usize) -> LaunchConfig {
    LaunchConfig {
        grid_dim: ((n as u32).div_ceil(THREADS).max(1), 1, 1),
        block_dim: (THREADS, 1, 1),
        shared_mem_bytes: 0,
    }
}

pub(crate) fn act_code(a: Activation) -> i32 {
    match a {
        Activation::Softplus => 0,
        Activation::Relu => 1,
        Activation::Tanh => 2,
        Activation::Sigmoid => 3,
    }
}

/// Whether updates may be replayed from CUDA graphs (`SAGD_GPU_GRAPHS=0` turns them off).
fn graphs_enabled() -> bool {
    !std::env::var("SAGD_GPU_GRAPHS").is_ok_and(|v| v == "0")
}

/// Whether cuBLAS may run the products on tensor cores in TF32 (10-bit mantissas in, f32 sums):
/// `SAGD_GPU_TF32=1`. Off by default, so that the GPU agrees with the CPU engine to f32 rounding;
/// PyTorch's convolutions use TF32 by default.
pub fn tf32_enabled() -> bool {
    std::env::var("SAGD_GPU_TF32").is_ok_and(|v| v == "1")
}

/// Whether the driver, NVRTC and cuBLAS libraries can be loaded, naming the first that cannot.
pub fn libraries_present() -> GpuResult<()> {
    const TOOLKIT: &str = "install CUDA 13, or point LD_LIBRARY_PATH at a folder that holds it \
                           (PyTorch's CUDA wheels have one: find / -name 'libcublas.so*')";
    // SAFETY: these only try to open the libraries with `dlopen` and close them again.
    let found = unsafe {
        [
            (
                cudarc::driver::sys::is_culib_present(),
                "driver",
                "libcuda.so",
                "this machine has no NVIDIA driver: install one",
            ),
            (
                cudarc::nvrtc::sys::is_culib_present(),
                "NVRTC",
                "libnvrtc.so",
                TOOLKIT,
            ),
            (
                cudarc::cublas::sys::is_culib_present(),
                "cuBLAS",
                "libcublas.so",
                TOOLKIT,
            ),
        ]
    };
    match found.into_iter().find(|(ok, ..)| !ok) {
        Some((_, library, file, hint)) => Err(GpuError::Library {
            library,
            file,
            hint,
        }),
        None => Ok(()),
    }
}

/// The kernels compiled once per process (NVRTC takes about a second).
static PTX: OnceLock<Result<String, String>> = OnceLock::new();

impl Gpu {
    /// Opens device `ordinal`: checks the libraries first (cudarc would panic on a missing one),
    /// then makes a stream and a cuBLAS handle on the device's primary context, and loads the
    /// kernels (compiled by NVRTC on the first call of the process).
    pub fn open(ordinal: usize) -> GpuResult<Gpu> {
        libraries_present()?;
        let count = CudaContext::device_count().map_err(|e| GpuError::NoDevice(e.to_string()))?;
        if ordinal as i32 >= count {
            return Err(GpuError::NoDevice(format!(
                "device {ordinal} asked for, {count} found"
            )));
        }
        let ctx = CudaContext::new(ordinal).map_err(|e| GpuError::NoDevice(e.to_string()))?;
        // Each job's buffers live on its own stream: cudarc's cross-stream event bookkeeping
        // would only add work to each launch.
        // SAFETY: no buffer of this backend is used on two streams.
        unsafe { ctx.disable_event_tracking() };
        let stream = ctx.new_stream()?;
        let blas = CudaBlas::new(stream.clone())?;
        if tf32_enabled() {
            use cudarc::cublas::sys::{cublasMath_t, cublasSetMathMode};
            // SAFETY: the handle was just made and lives as long as `blas`.
            unsafe {
                cublasSetMathMode(*blas.handle(), cublasMath_t::CUBLAS_TF32_TENSOR_OP_MATH)
                    .result()?
            };
        }
        let src = PTX
            .get_or_init(|| {
                cudarc::nvrtc::compile_ptx(include_str!("kernels.cu"))
                    .map(|p| p.to_src())
                    .map_err(|e| e.to_string())
            })
            .clone()
            .map_err(GpuError::Compile)?;
        let module = ctx.load_module(Ptx::from_src(src))?;
        let mut kernels = HashMap::new();
        for name in KERNELS {
            kernels.insert(name, module.load_function(name)?);
        }
        Ok(Gpu {
            ctx,
            stream,
            blas,
            kernels,
        })
    }

    /// The kernel `name` of `kernels.cu`.
    pub(crate) fn k(&self, name: &'static str) -> &CudaFunction {
        &self.kernels[name]
    }

    /// The device's name and compute capability, as `name (sm_XY)`, and TF32 if on.
    pub fn describe(&self) -> GpuResult<String> {
        let (major, minor) = self.ctx.compute_capability()?;
        let tf32 = if tf32_enabled() {
            ", TF32 products"
        } else {
            ""
        };
        Ok(format!("{} (sm_{major}{minor}{tf32})", self.ctx.name()?))
    }

    /// A copy of `host` on the device.
    pub fn upload(&self, host: &[f32]) -> GpuResult<CudaSlice<f32>> {
        Ok(self.stream.clone_htod(host)?)
    }

    /// A copy of `dev` on the host (waits for the stream).
    pub fn download(&self, dev: &CudaSlice<f32>) -> GpuResult<Vec<f32>> {
        Ok(self.stream.clone_dtoh(dev)?)
    }

    /// `n` zeros on the device.
    pub fn zeros(&self, n: usize) -> GpuResult<CudaSlice<f32>> {
        Ok(self.stream.alloc_zeros::<f32>(n.max(1))?)
    }

    /// Copies `host` into the first elements of `dev`.
    pub fn upload_into(&self, host: &[f32], dev: &mut CudaSlice<f32>) -> GpuResult<()> {
        Ok(self
            .stream
            .memcpy_htod(host, &mut dev.slice_mut(..host.len()))?)
    }

    /// Copies the first `host.len()` elements of `dev` into `host` (waits for the stream).
    pub fn download_into(&self, dev: &CudaSlice<f32>, host: &mut [f32]) -> GpuResult<()> {
        Ok(self.stream.memcpy_dtoh(&dev.slice(..host.len()), host)?)
    }

    /// Sets `dev` to zeros.
    pub fn zero(&self, dev: &mut CudaSlice<f32>) -> GpuResult<()> {
        Ok(self.stream.memset_zeros(dev)?)
    }

    /// Copies the first `n` elements of `src` into `dst`.
    pub fn copy(&self, src: &CudaSlice<f32>, dst: &mut CudaSlice<f32>, n: usize) -> GpuResult<()> {
        if n > 0 {
            self.stream
                .memcpy_dtod(&src.slice(..n), &mut dst.slice_mut(..n))?;
        }
        Ok(())
    }

    /// Waits until the stream's work is done.
    pub fn synchronize(&self) -> GpuResult<()> {
        Ok(self.stream.synchronize()?)
    }

    fn fill(&self, v: &mut CudaSlice<f32>, c: f32) -> GpuResult<()> {
        let n = v.len() as i32;
        let mut b = self.stream.launch_builder(self.k("fill"));
        b.arg(v).arg(&c).arg(&n);
        // SAFETY: the kernel writes v[0..n) only.
        unsafe { b.launch(grid(n as usize)) }?;
        Ok(())
    }

    /// Row-major `y (rows × out) = x (rows × inp) · Wᵀ`, W row-major (out × inp): in cuBLAS's
    /// column-major terms yᵀ = op_T(W as inp × out) · xᵀ.
    #[allow(clippy::too_many_arguments)]
    fn linear_forward<W: DevicePtr<f32>, X: DevicePtr<f32>, Y: DevicePtrMut<f32>>(
        &self,
        w: &W,
        x: &X,
        y: &mut Y,
        rows: usize,
        inp: usize,
        out: usize,
    ) -> GpuResult<()> {
        let cfg = GemmConfig {
            transa: CUBLAS_OP_T,
            transb: CUBLAS_OP_N,
            m: out as i32,
            n: rows as i32,
            k: inp as i32,
            alpha: 1.0f32,
            lda: inp as i32,
            ldb: inp as i32,
            beta: 0.0f32,
            ldc: out as i32,
        };
        // SAFETY: the shapes match the buffers' lengths (checked by the callers' layouts).
        unsafe { self.blas.gemm(cfg, w, x, y) }?;
        Ok(())
    }

    /// A product's weight gradient from its input `x` (rows × inp) and ∂L/∂y `g` (rows × out),
    /// added: dW (out × inp, row-major) += gᵀ x.
    fn weight_grad<X, G, DW>(
        &self,
        x: &X,
        g: &G,
        dw: &mut DW,
        rows: usize,
        (inp, out): (usize, usize),
    ) -> GpuResult<()>
    where
        X: DevicePtr<f32>,
        G: DevicePtr<f32>,
        DW: DevicePtrMut<f32>,
    {
        // dWᵀ (inp × out) += xᵀ (inp × rows) · g (rows × out), column-major.
        let cfg = GemmConfig {
            transa: CUBLAS_OP_N,
            transb: CUBLAS_OP_T,
            m: inp as i32,
            n: out as i32,
            k: rows as i32,
            alpha: 1.0f32,
            lda: inp as i32,
            ldb: out as i32,
            beta: 1.0f32,
            ldc: inp as i32,
        };
        // SAFETY: x holds rows·inp values, g rows·out, dw inp·out.
        unsafe { self.blas.gemm(cfg, x, g, dw) }?;
        Ok(())
    }

    /// A bias gradient, added: db (out) += Σ_rows g (rows × out), with `ones` (at least `rows`).
    fn bias_grad<G: DevicePtr<f32>, DB: DevicePtrMut<f32>>(
        &self,
        g: &G,
        db: &mut DB,
        ones: &CudaSlice<f32>,
        rows: usize,
        out: usize,
    ) -> GpuResult<()> {
        // db (out) += g (out × rows, column-major) · 1.
        let cfg = GemvConfig {
            trans: CUBLAS_OP_N,
            m: out as i32,
            n: rows as i32,
            alpha: 1.0f32,
            lda: out as i32,
            incx: 1,
            beta: 1.0f32,
            incy: 1,
        };
        // SAFETY: g holds rows·out values, ones at least rows, db out.
        unsafe { self.blas.gemv(cfg, g, ones, db) }?;
        Ok(())
    }

    /// A Linear layer's input gradient: dx (rows × inp) = g (rows × out) · W, W row-major
    /// (out × inp).
    fn linear_input_grad<W, G, DX>(
        &self,
        w: &W,
        g: &G,
        dx: &mut DX,
        rows: usize,
        (inp, out): (usize, usize),
    ) -> GpuResult<()>
    where
        W: DevicePtr<f32>,
        G: DevicePtr<f32>,
        DX: DevicePtrMut<f32>,
    {
        // dxᵀ (inp × rows) = W as (inp × out) · gᵀ (out × rows).
        let cfg = GemmConfig {
            transa: CUBLAS_OP_N,
            transb: CUBLAS_OP_N,
            m: inp as i32,
            n: rows as i32,
            k: out as i32,
            alpha: 1.0f32,
            lda: inp as i32,
            ldb: out as i32,
            beta: 0.0f32,
            ldc: inp as i32,
        };
        // SAFETY: w holds inp·out values, g rows·out, dx rows·inp.
        unsafe { self.blas.gemm(cfg, w, g, dx) }?;
        Ok(())
    }

    /// The windows of `images` images: gathered from `src` (images × big²·ch) into `dst`
    /// (images·small² × k²·ch) with `gather`, else scattered back with sums (the adjoint).
    fn windows(
        &self,
        gather: bool,
        win: &Windows,
        images: usize,
        src: &CudaSlice<f32>,
        dst: &mut CudaSlice<f32>,
    ) -> GpuResult<()> {
        let n = if gather {
            images * win.count() * win.width()
        } else {
            images * win.image()
        };
        let [im, big, small, k, stride, pad, ch] = [
            images,
            win.big,
            win.small,
            win.k,
            win.stride,
            win.pad,
            win.channels,
        ]
        .map(|v| v as i32);
        let name = if gather { "im2col" } else { "col2im" };
        let mut lb = self.stream.launch_builder(self.k(name));
        lb.arg(src)
            .arg(dst)
            .arg(&im)
            .arg(&big)
            .arg(&small)
            .arg(&k)
            .arg(&stride)
            .arg(&pad)
            .arg(&ch);
        // SAFETY: src and dst hold the images and windows of these shapes.
        unsafe { lb.launch(grid(n)) }?;
        Ok(())
    }

    /// y[r, j] += b[j] for the first rows·out values of y.
    fn add_bias(
        &self,
        y: &mut CudaSlice<f32>,
        b: &CudaView<'_, f32>,
        out: usize,
        n: usize,
    ) -> GpuResult<()> {
        let (o, ni) = (out as i32, n as i32);
        let mut lb = self.stream.launch_builder(self.k("add_bias"));
        lb.arg(y).arg(b).arg(&o).arg(&ni);
        // SAFETY: y has n elements and b has out.
        unsafe { lb.launch(grid(n)) }?;
        Ok(())
    }
}

/// Normal or uniform draws made on the device: Philox-4x32-10 keyed by the seed, with a counter
/// that each fill advances, so a run is the same for the same seed and its state is two numbers.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct GpuRng {
    seed: u64,
    calls: u32,
}

impl GpuRng {
    /// A stream for `seed`.
    pub fn new(seed: u64) -> Self {
        GpuRng { seed, calls: 0 }
    }

    /// Fills the first `n` elements of `out` with N(0, 1) draws, or U(0, 1] with `uniform`.
    pub fn fill(
        &mut self,
        gpu: &Gpu,
        out: &mut CudaSlice<f32>,
        n: usize,
        uniform: bool,
    ) -> GpuResult<()> {
        let (k0, k1) = (self.seed as u32, (self.seed >> 32) as u32);
        let (ni, call, uni) = (n as i32, self.calls, uniform as i32);
        self.calls = self.calls.wrapping_add(1);
        let mut b = gpu.stream.launch_builder(gpu.k("fill_random"));
        b.arg(out).arg(&ni).arg(&k0).arg(&k1).arg(&call).arg(&uni);
        // SAFETY: the kernel writes out[0..n) only; out holds at least n.
        unsafe { b.launch(grid(n.next_multiple_of(2))) }?;
        Ok(())
    }
}

/// Device buffers of one forward pass of a [`Sequential`], kept for its backward pass.
#[derive(Default)]
pub struct GpuWorkspace {
    rows: usize,
    acts: Vec<Option<CudaSlice<f32>>>,
    derivs: Vec<Option<CudaSlice<f32>>>,
    /// A convolution's gathered input windows (kept for ∂W), a transposed convolution's product
    /// before its scatter.
    cols: Vec<Option<CudaSlice<f32>>>,
    /// ∂L/∂windows in the backward pass of a convolution.
    dcols: Option<CudaSlice<f32>>,
    grad: Option<CudaSlice<f32>>,
    grad2: Option<CudaSlice<f32>>,
    ones: Option<CudaSlice<f32>>,
}

/// A buffer of at least `n` elements in `slot` (kept when large enough, else made of zeros).
pub(crate) fn ensure<'a, T: DeviceRepr + ValidAsZeroBits>(
    gpu: &Gpu,
    slot: &'a mut Option<CudaSlice<T>>,
    n: usize,
) -> GpuResult<&'a mut CudaSlice<T>> {
    if slot.as_ref().is_none_or(|s| s.len() < n.max(1)) {
        *slot = Some(gpu.stream.alloc_zeros::<T>(n.max(1))?);
    }
    Ok(slot.as_mut().expect("just made"))
}

/// Copies `host` into the device buffer `slot` (made or grown as needed).
pub(crate) fn put<T: DeviceRepr + ValidAsZeroBits>(
    gpu: &Gpu,
    slot: &mut Option<CudaSlice<T>>,
    host: &[T],
) -> GpuResult<()> {
    let dev = ensure(gpu, slot, host.len())?;
    gpu.stream
        .memcpy_htod(host, &mut dev.slice_mut(..host.len()))?;
    Ok(())
}

impl GpuWorkspace {
    /// The output of the last forward pass (at least rows × out elements; the first are valid).
    pub fn output(&self) -> Option<&CudaSlice<f32>> {
        self.acts.last().and_then(|a| a.as_ref())
    }
}

impl Sequential {
    /// The forward pass on the GPU: `x` holds rows × input_dim values; the output is
    /// [`GpuWorkspace::output`].
    pub fn forward_gpu(
        &self,
        gpu: &Gpu,
        params: &CudaSlice<f32>,
        x: &CudaSlice<f32>,
        rows: usize,
        ws: &mut GpuWorkspace,
    ) -> GpuResult<()> {
        let layers = self.layers();
        ws.rows = rows;
        ws.acts.resize_with(layers.len() + 1, || None);
        ws.derivs.resize_with(layers.len(), || None);
        ws.cols.resize_with(layers.len(), || None);
        let n0 = rows * self.input_dim();
        let a0 = ensure(gpu, &mut ws.acts[0], n0)?;
        gpu.stream
            .memcpy_dtod(&x.slice(..n0), &mut a0.slice_mut(..n0))?;
        let mut width = self.input_dim();
        for (i, l) in layers.iter().enumerate() {
            if let Layer::Act { act } = *l {
                let n = rows * width;
                ensure(gpu, &mut ws.acts[i + 1], n)?;
                let dy = ensure(gpu, &mut ws.derivs[i], n)?;
                let (done, rest) = ws.acts.split_at_mut(i + 1);
                let (xin, y) = (
                    done[i].as_ref().expect("made above"),
                    rest[0].as_mut().expect("made above"),
                );
                let (kind, ni) = (act_code(act), n as i32);
                let mut lb = gpu.stream.launch_builder(gpu.k("act_forward"));
                lb.arg(&kind).arg(xin).arg(y).arg(dy).arg(&ni);
                // SAFETY: x, y and dy have at least n elements.
                unsafe { lb.launch(grid(n)) }?;
                continue;
            }
            let Some((_, out_width)) = l.widths() else {
                continue;
            };
            let off = self.offset(i);
            let np = l.n_params();
            ensure(gpu, &mut ws.acts[i + 1], rows * out_width)?;
            let (done, rest) = ws.acts.split_at_mut(i + 1);
            let (xin, y) = (
                done[i].as_ref().expect("made above"),
                rest[0].as_mut().expect("made above"),
            );
            match (*l, l.windows()) {
                (Layer::Linear { inp, out }, _) => {
                    let w = params.slice(off..off + inp * out);
                    let b = params.slice(off + inp * out..off + np);
                    gpu.linear_forward(&w, xin, y, rows, inp, out)?;
                    gpu.add_bias(y, &b, out, rows * out)?;
                }
                (Layer::Conv { c_out, .. }, Some(win)) => {
                    // y = windows(x) · Wᵀ + b, one row per window.
                    let wrows = rows * win.count();
                    let cols = ensure(gpu, &mut ws.cols[i], wrows * win.width())?;
                    gpu.windows(true, &win, rows, xin, cols)?;
                    let w = params.slice(off..off + np - c_out);
                    let b = params.slice(off + np - c_out..off + np);
                    gpu.linear_forward(&w, &*cols, y, wrows, win.width(), c_out)?;
                    gpu.add_bias(y, &b, c_out, wrows * c_out)?;
                }
                (Layer::ConvT { c_in, c_out, .. }, Some(win)) => {
                    // y = scatter(x · Wᵀ) + b per channel, one product row per input pixel.
                    let prows = rows * win.count();
                    let cols = ensure(gpu, &mut ws.cols[i], prows * win.width())?;
                    let w = params.slice(off..off + np - c_out);
                    let b = params.slice(off + np - c_out..off + np);
                    gpu.linear_forward(&w, xin, cols, prows, c_in, win.width())?;
                    gpu.windows(false, &win, rows, cols, y)?;
                    gpu.add_bias(y, &b, c_out, rows * out_width)?;
                }
                _ => return Err(GpuError::Unsupported(*l)),
            }
            width = out_width;
        }
        Ok(())
    }

    /// Rows of the longest product of a pass over `rows` rows: a convolution's windows, a
    /// transposed convolution's output pixels (its bias gradient sums over them).
    fn product_rows(&self, rows: usize) -> usize {
        self.layers()
            .iter()
            .map(|l| match (l, l.windows()) {
                (Layer::Conv { .. }, Some(w)) => rows * w.count(),
                (Layer::ConvT { .. }, Some(w)) => rows * w.big * w.big,
                _ => rows,
            })
            .max()
            .unwrap_or(rows)
            .max(rows)
    }

    /// The backward pass on the GPU after [`Sequential::forward_gpu`]: `dout` is ∂L/∂output
    /// (rows × output_dim). Adds ∂L/∂params into `dparams` if given, and writes ∂L/∂x into the
    /// first rows × input_dim elements of `dx` if given.
    pub fn backward_gpu(
        &self,
        gpu: &Gpu,
        params: &CudaSlice<f32>,
        ws: &mut GpuWorkspace,
        dout: &CudaSlice<f32>,
        mut dparams: Option<&mut CudaSlice<f32>>,
        dx: Option<&mut CudaSlice<f32>>,
    ) -> GpuResult<()> {
        let layers = self.layers();
        let rows = ws.rows;
        let widest = layers
            .iter()
            .filter_map(|l| l.widths())
            .map(|(i, o)| i.max(o))
            .max()
            .unwrap_or(1)
            .max(self.input_dim())
            .max(self.output_dim());
        let n_out = rows * self.output_dim();
        ensure(gpu, &mut ws.grad, rows * widest)?;
        ensure(gpu, &mut ws.grad2, rows * widest)?;
        let dcols_len = layers
            .iter()
            .filter_map(|l| l.windows())
            .map(|w| rows * w.count() * w.width())
            .max()
            .unwrap_or(0);
        if dcols_len > 0 {
            ensure(gpu, &mut ws.dcols, dcols_len)?;
        }
        let n_ones = self.product_rows(rows);
        if ws.ones.as_ref().is_none_or(|o| o.len() < n_ones.max(1)) {
            let mut ones = gpu.zeros(n_ones)?;
            gpu.fill(&mut ones, 1.0)?;
            ws.ones = Some(ones);
        }
        let GpuWorkspace {
            acts,
            derivs,
            cols,
            dcols,
            grad,
            grad2,
            ones,
            ..
        } = ws;
        let (mut grad, mut grad2) = (
            grad.as_mut().expect("made above"),
            grad2.as_mut().expect("made above"),
        );
        let ones = ones.as_ref().expect("made above");
        gpu.stream
            .memcpy_dtod(&dout.slice(..n_out), &mut grad.slice_mut(..n_out))?;
        let need_dx = dx.is_some();
        let mut width = self.output_dim();
        for (i, l) in layers.iter().enumerate().rev() {
            let xin = acts[i].as_ref().expect("forward_gpu ran");
            if let Layer::Act { .. } = l {
                let d = derivs[i].as_ref().expect("forward_gpu ran");
                let n = (rows * width) as i32;
                let mut lb = gpu.stream.launch_builder(gpu.k("scale"));
                lb.arg(&mut *grad).arg(d).arg(&n);
                // SAFETY: both hold at least n elements.
                unsafe { lb.launch(grid(n as usize)) }?;
                continue;
            }
            let Some((in_width, _)) = l.widths() else {
                continue;
            };
            let (off, np) = (self.offset(i), l.n_params());
            let input_grad = i > 0 || need_dx;
            match (*l, l.windows()) {
                (Layer::Linear { inp, out }, _) => {
                    if let Some(dp) = dparams.as_deref_mut() {
                        let dw = &mut dp.slice_mut(off..off + inp * out);
                        gpu.weight_grad(xin, &*grad, dw, rows, (inp, out))?;
                        let db = &mut dp.slice_mut(off + inp * out..off + np);
                        gpu.bias_grad(&*grad, db, ones, rows, out)?;
                    }
                    if input_grad {
                        let w = params.slice(off..off + inp * out);
                        gpu.linear_input_grad(&w, &*grad, &mut *grad2, rows, (inp, out))?;
                        std::mem::swap(&mut grad, &mut grad2);
                    }
                }
                (Layer::Conv { c_out, .. }, Some(win)) => {
                    let wrows = rows * win.count();
                    let shape = (win.width(), c_out);
                    let nw = np - c_out;
                    if let Some(dp) = dparams.as_deref_mut() {
                        let c = cols[i].as_ref().expect("forward_gpu ran");
                        let dw = &mut dp.slice_mut(off..off + nw);
                        gpu.weight_grad(c, &*grad, dw, wrows, shape)?;
                        let db = &mut dp.slice_mut(off + nw..off + np);
                        gpu.bias_grad(&*grad, db, ones, wrows, c_out)?;
                    }
                    if input_grad {
                        let dc = dcols.as_mut().expect("made above");
                        let w = params.slice(off..off + nw);
                        gpu.linear_input_grad(&w, &*grad, dc, wrows, shape)?;
                        gpu.windows(false, &win, rows, dc, grad2)?;
                        std::mem::swap(&mut grad, &mut grad2);
                    }
                }
                (Layer::ConvT { c_in, c_out, .. }, Some(win)) => {
                    let prows = rows * win.count();
                    let shape = (c_in, win.width());
                    let nw = np - c_out;
                    let dc = dcols.as_mut().expect("made above");
                    gpu.windows(true, &win, rows, grad, dc)?;
                    if let Some(dp) = dparams.as_deref_mut() {
                        let dw = &mut dp.slice_mut(off..off + nw);
                        gpu.weight_grad(xin, &*dc, dw, prows, shape)?;
                        // db[c] += Σ over output pixels of ∂L/∂y[.., c].
                        let db = &mut dp.slice_mut(off + nw..off + np);
                        gpu.bias_grad(&*grad, db, ones, rows * win.big * win.big, c_out)?;
                    }
                    if input_grad {
                        let w = params.slice(off..off + nw);
                        gpu.linear_input_grad(&w, &*dc, &mut *grad2, prows, shape)?;
                        std::mem::swap(&mut grad, &mut grad2);
                    }
                }
                _ => return Err(GpuError::Unsupported(*l)),
            }
            width = in_width;
        }
        if let Some(dx) = dx {
            let n = rows * self.input_dim();
            gpu.stream
                .memcpy_dtod(&grad.slice(..n), &mut dx.slice_mut(..n))?;
        }
        Ok(())
    }
}
