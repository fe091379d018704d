//! The CUDA backend of the engine: the same [`Sequential`] networks on an NVIDIA GPU, through
//! `cudarc` with dynamic loading — the driver, NVRTC and cuBLAS are found at run time, so a binary
//! built without CUDA runs everywhere and `--device cuda` fails with a clear [`GpuError`] where no
//! GPU or library is found. Linear layers are cuBLAS products (row-major data read as column-major
//! transposes), activations are kernels compiled by NVRTC when the device opens. f32 throughout,
//! without TF32, so results agree with the CPU engine to float rounding.

/// Launches the kernel `name` of `kernels.cu` on `gpu`'s stream over the launch shape `cfg`, with
/// `args` (device buffers and scalars, by reference) in the kernel's order: one statement per
/// launch, inside the caller's `unsafe` block, whose comment says why the buffers suffice.
/// `cuda::tests` checks every launch's arguments against its kernel's parameters.
macro_rules! launch {
    ($gpu:expr, $name:expr, $cfg:expr; $($arg:expr),+ $(,)?) => {{
        let mut args = $gpu.stream.launch_builder($gpu.k($name));
        $(args.arg($arg);)+
        args.launch($cfg)
    }};
}
pub(crate) use launch;

mod adam;
mod likelihood;
mod passes;
mod products;
mod steps;

pub use adam::{adam, AdamStep};
pub(crate) use likelihood::DeviceDecoder;
pub use likelihood::LikelihoodRows;
pub use steps::Replay;

/// Moved to [`crate::train::GpuBoundEstimator`], beside the CPU's estimators.
#[deprecated(since = "0.1.0", note = "moved: use sagd_nn::train::GpuBoundEstimator")]
pub type GpuBoundEstimator<'a> = crate::train::GpuBoundEstimator<'a>;

/// Moved to [`crate::train::GpuChainEstimator`], beside the CPU's estimators.
#[deprecated(since = "0.1.0", note = "moved: use sagd_nn::train::GpuChainEstimator")]
pub type GpuChainEstimator<'a> = crate::train::GpuChainEstimator<'a>;

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
    /// Settings a GPU pass cannot run, or that the core refused (runs check them before any
    /// work, so a program that calls the passes itself meets this).
    #[error("{0}")]
    Settings(String),
}

impl From<sagd::error::SagdError> for GpuError {
    fn from(e: sagd::error::SagdError) -> Self {
        GpuError::Settings(e.to_string())
    }
}

/// Results of the backend.
pub type GpuResult<T> = Result<T, GpuError>;

impl From<GpuError> for sagd::error::SagdError {
    fn from(e: GpuError) -> Self {
        sagd::error::SagdError::Device(e.to_string())
    }
}

/// The kernels of `kernels.cu`, by name.
const KERNELS: [&str; 26] = [
    "act_forward",
    "add_bias",
    "scale",
    "fill",
    "fill_random",
    "reparam",
    "likelihood_rows",
    "bound_weights",
    "scale_rows",
    "bound_enc_grad",
    "posterior_prior",
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
    "encoder_chain_starts",
    "row_distance",
    "adam_step",
    "flag_nonfinite",
];

/// An open GPU: its own stream, a cuBLAS handle on it, and the compiled kernels. Each training job
/// opens its own, so jobs running side by side on CPU threads never share a stream or a handle.
pub struct Gpu {
    ctx: Arc<CudaContext>,
    /// The job's stream: every kernel launch and copy goes on it, in order.
    pub stream: Arc<CudaStream>,
    blas: CudaBlas,
    kernels: HashMap<&'static str, CudaFunction>,
}

/// The GPU that the process `local_rank` places from the first on its machine opens when GPU
/// `first` is asked for, of the `count` it sees: the first process's is `first`, the others take
/// the GPUs after it in turn (one GPU per process while there are enough; a machine that shows
/// each process only its own GPU gives every process its GPU 0).
fn process_ordinal(first: usize, local_rank: usize, count: usize) -> usize {
    (first + local_rank) % count.max(1)
}

/// Threads per block of the elementwise kernels.
const THREADS: u32 = 256;

/// The launch shape of an elementwise kernel over `n` elements.
pub fn grid(n: usize) -> LaunchConfig {
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
pub(crate) fn graphs_enabled() -> bool {
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

/// `kernels.cu` compiled to PTX by NVRTC, which needs no GPU (only its library): what
/// [`Gpu::open`] loads, or NVRTC's log.
fn compile_kernels() -> Result<String, String> {
    cudarc::nvrtc::compile_ptx(include_str!("kernels.cu"))
        .map(|p| p.to_src())
        .map_err(|e| e.to_string())
}

impl Gpu {
    /// The number of GPUs this process sees (after checking the libraries).
    pub fn count() -> GpuResult<usize> {
        libraries_present()?;
        let count = CudaContext::device_count().map_err(|e| GpuError::NoDevice(e.to_string()))?;
        Ok(count.max(0) as usize)
    }

    /// Opens device `ordinal`: checks the libraries first (cudarc would panic on a missing one),
    /// then makes a stream and a cuBLAS handle on the device's primary context, and loads the
    /// kernels (compiled by NVRTC on the first call of the process). In a run split over
    /// processes, the processes on a machine take GPU `ordinal` and the ones after it in turn,
    /// modulo the GPUs each sees, by their rank among the machine's
    /// ([`sagd::share::local_rank`]).
    pub fn open(ordinal: usize) -> GpuResult<Gpu> {
        let count = Self::count()?;
        if ordinal >= count {
            return Err(GpuError::NoDevice(format!(
                "device {ordinal} asked for, {count} found"
            )));
        }
        let ordinal = process_ordinal(ordinal, sagd::share::local_rank(), count);
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
            .get_or_init(compile_kernels)
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
    pub fn k(&self, name: &'static str) -> &CudaFunction {
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
        // SAFETY: the kernel writes v[0..n) only.
        unsafe { launch!(self, "fill", grid(n as usize); v, &c, &n) }?;
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
        // SAFETY: the kernel writes out[0..n) only; out holds at least n.
        unsafe {
            launch!(gpu, "fill_random", grid(n.next_multiple_of(2));
                out, &ni, &k0, &k1, &call, &uni)
        }?;
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
pub fn ensure<'a, T: DeviceRepr + ValidAsZeroBits>(
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
pub fn put<T: DeviceRepr + ValidAsZeroBits>(
    gpu: &Gpu,
    slot: &mut Option<CudaSlice<T>>,
    host: &[T],
) -> GpuResult<()> {
    uploaded(gpu, slot, host).map(|_| ())
}

/// [`put`], returning the buffer.
pub(crate) fn uploaded<'a, T: DeviceRepr + ValidAsZeroBits>(
    gpu: &Gpu,
    slot: &'a mut Option<CudaSlice<T>>,
    host: &[T],
) -> GpuResult<&'a mut CudaSlice<T>> {
    let dev = ensure(gpu, slot, host.len())?;
    gpu.stream
        .memcpy_htod(host, &mut dev.slice_mut(..host.len()))?;
    Ok(dev)
}

impl GpuWorkspace {
    /// The output of the last forward pass (at least rows × out elements; the first are valid).
    pub fn output(&self) -> Option<&CudaSlice<f32>> {
        self.acts.last().and_then(|a| a.as_ref())
    }
}

#[cfg(test)]
mod tests;
