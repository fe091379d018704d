//! HMC and SAGD's chains on the GPU: the CPU's [`ChainEstimator`](crate::train::ChainEstimator)
//! with the chains' state on the device. Each transition runs the kernel's own program (its
//! typed instructions, `Kernel::instructions`: drifts, kicks, Ornstein-Uhlenbeck flows, refreshes,
//! evaluations of the decoder's posterior) and the CPU's end of a transition (divergences, the Metropolis test), as
//! elementwise kernels; the θ-gradient of an update is one pass over the K accepted states of every
//! chain. Chain noise comes from a device stream ([`GpuRng`]): the same law as the CPU's per-chain
//! streams, not the same draws; encoder draws use the CPU estimator's host stream. SAGD's chain
//! options (several chains per point, restarts from the encoder, δ_t and K_t) follow the CPU's
//! plan ([`ChainPlan`]).

use cudarc::driver::{CudaSlice, PushKernelArg};
use sagd::error::{Result, SagdError};
use sagd::langevin::{Instruction, Kernel, Momentum};
use sagd::rng::{NormalStream, Seed};
use sagd::run::{decode, encode};
use serde::{Deserialize, Serialize};

use crate::cuda::{
    act_code, grid, launch, DeviceDecoder, Gpu, GpuError, GpuResult, GpuRng, GpuWorkspace,
    LikelihoodRows, Replay,
};
use crate::likelihood::DeviceLaw;
use crate::program::unknown_operation;
use crate::train::chain_settings::{ChainCourse, ChainPlan};
use crate::train::gpu::{placed, DeviceState, Grads, OnDevice};
use crate::train::{gather_rows, DeviceParams, GradientEstimator, HmcChains, LangevinChains};
use crate::vae::{Vae, VaeParams};
use std::borrow::Cow;

mod update;

/// The paper's likelihood, N(x; h, I).
const UNIT: DeviceLaw = DeviceLaw::Gaussian { precision: 1.0 };

/// Columns of the per-row statistics of `chain_finish`: diverged, acceptance, log π, ρ², energy
/// change, whether it counts.
const STATS: usize = 6;

/// The kernel's program as the GPU runs it: the core's instructions, every one the program's
/// interpreter can run on chains that refresh their momenta (HMC's).
fn program(kernel: &Kernel<f32>) -> GpuResult<Vec<Instruction<f32>>> {
    match unknown_operation(kernel, true) {
        Some(op) => Err(GpuError::Settings(format!(
            "the GPU chains cannot run this kernel: {op}"
        ))),
        None => Ok(kernel.instructions().collect()),
    }
}

/// A decoder d → H → H → d (one activation) small enough for `posterior_mlp`, which evaluates
/// the posterior in one launch (one block of H threads per chain) instead of a dozen: the
/// parameters' offsets of its three Linear layers, the activation's code and H.
#[derive(Clone, Copy, Debug)]
struct FusedMlp {
    offsets: [i32; 3],
    act: i32,
    hidden: usize,
}

impl FusedMlp {
    /// The decoder's shape if it fits (and `SAGD_GPU_FUSED` is not `0`).
    fn of(dec: &crate::net::Sequential) -> Option<FusedMlp> {
        use crate::net::Layer::{Act, Linear};
        if std::env::var("SAGD_GPU_FUSED").is_ok_and(|v| v == "0") {
            return None;
        }
        match *dec.layers() {
            [Linear { inp: d, out: h }, Act { act }, Linear { inp: h2, out: h3 }, Act { act: act2 }, Linear { inp: h4, out: d2 }]
                if d == d2
                    && d <= 4
                    && h == h2
                    && h == h3
                    && h == h4
                    && h <= 1024
                    && h >= d
                    && act == act2 =>
            {
                Some(FusedMlp {
                    offsets: [
                        dec.offset(0) as i32,
                        dec.offset(2) as i32,
                        dec.offset(4) as i32,
                    ],
                    act: act_code(act),
                    hidden: h,
                })
            }
            _ => None,
        }
    }
}

/// The device buffers, sized for all n chains (the largest batch).
struct Buffers {
    /// All data rows, and the batch's rows.
    x_all: CudaSlice<f32>,
    x_batch: CudaSlice<f32>,
    /// The persistent chains: positions and momenta of all n.
    pos: CudaSlice<f32>,
    rho_all: CudaSlice<f32>,
    /// The batch's chains: state a (current) and b (next), momenta.
    xa: CudaSlice<f32>,
    xb: CudaSlice<f32>,
    ga: CudaSlice<f32>,
    gb: CudaSlice<f32>,
    la: CudaSlice<f32>,
    lb: CudaSlice<f32>,
    rho: CudaSlice<f32>,
    /// The encoder draws' noise (from the host); the chains' normals and uniforms of an update.
    eta: CudaSlice<f32>,
    noise: CudaSlice<f32>,
    uni: CudaSlice<f32>,
    h0: CudaSlice<f64>,
    stats: CudaSlice<f32>,
    sums: CudaSlice<f64>,
    idx: CudaSlice<i32>,
    /// The accepted states of an update's K transitions, step-major, and ∂ log p(x | h)/∂h at
    /// them (K·n rows of the data's values; the first n rows serve an evaluation too).
    store: CudaSlice<f32>,
    resid: CudaSlice<f32>,
    g_theta: CudaSlice<f32>,
    ws: GpuWorkspace,
    ws_theta: GpuWorkspace,
}

/// What the estimator carries between updates, for checkpoints.
#[derive(Serialize, Deserialize)]
struct Record {
    pos: Vec<f32>,
    rho: Vec<f32>,
    stream: NormalStream,
    rng: GpuRng,
    started: bool,
    divergences: usize,
    acceptance: Vec<f64>,
    #[serde(default)]
    update: usize,
}

/// HMC (fresh chains from an encoder draw at every update) or SAGD (persistent chains) on the
/// decoder's posterior, on the GPU; the gradient is the chain average of ∇θ of −log p(x | u; θ).
pub struct GpuChainEstimator<'a> {
    gpu: Gpu,
    vae: &'a Vae,
    /// The decoder's likelihood, and the data's values per point.
    law: DeviceLaw,
    px: usize,
    /// The data points, each `chains_per_point` times, as the CPU's: one chain per row.
    x: Cow<'a, [f32]>,
    program: Vec<Instruction<f32>>,
    /// Normal draws per coordinate per transition: the program's, and the fresh momenta of
    /// diverged rows.
    normals_per_coord: usize,
    metropolis: bool,
    fused: Option<FusedMlp>,
    /// The chains along the run: kernel, K, starts, restarts, δ_t and K_t, the updates done.
    course: ChainCourse,
    stream: NormalStream,
    rng: GpuRng,
    divergences: usize,
    acceptance: Vec<f64>,
    host: Vec<f32>,
    xb: Vec<f32>,
    eps: Vec<f32>,
    /// The decoder's and the encoder's parameters (and the decoder's Adam moments while the
    /// device takes the updates).
    state: DeviceState,
    b: Option<Buffers>,
    /// Chain positions and momenta restored from a checkpoint before the buffers exist.
    pending: Option<(Vec<f32>, Vec<f32>)>,
    /// An update's transitions and θ-gradient as a graph, by (batch size, whole data, K, the
    /// bits of δ: a schedule changes the last two).
    replay: Replay<(usize, bool, usize, u64)>,
    /// The bits of this update's δ_t (0 without a schedule).
    delta_bits: u64,
    /// A batch of points as rows of `x` (every copy of each).
    rows: Vec<usize>,
}

impl<'a> GpuChainEstimator<'a> {
    /// HMC as [`ChainEstimator::hmc`](crate::train::ChainEstimator::hmc), on `gpu`.
    pub fn hmc(gpu: Gpu, vae: &'a Vae, x: &'a [f32], s: &HmcChains, seed: u64) -> Result<Self> {
        Self::hmc_with(gpu, vae, UNIT, x, s, seed)
    }

    /// HMC as [`ChainEstimator::hmc_with`](crate::train::ChainEstimator::hmc_with) under the
    /// likelihood `law`, the data `x` points of [`Vae::data_dim`] values, on `gpu`.
    pub fn hmc_with(
        gpu: Gpu,
        vae: &'a Vae,
        law: DeviceLaw,
        x: &'a [f32],
        s: &HmcChains,
        seed: u64,
    ) -> Result<Self> {
        let course = ChainCourse::hmc(s)?;
        Self::with(gpu, (vae, law), Cow::Borrowed(x), course, seed)
    }

    /// SAGD as [`ChainEstimator::sagd`](crate::train::ChainEstimator::sagd), on `gpu`.
    pub fn sagd(
        gpu: Gpu,
        vae: &'a Vae,
        x: &'a [f32],
        s: &LangevinChains,
        seed: u64,
    ) -> Result<Self> {
        Self::sagd_with(gpu, vae, UNIT, x, s, seed)
    }

    /// SAGD as [`ChainEstimator::sagd_with`](crate::train::ChainEstimator::sagd_with) under
    /// the likelihood `law`, the data `x` points of [`Vae::data_dim`] values, on `gpu`.
    pub fn sagd_with(
        gpu: Gpu,
        vae: &'a Vae,
        law: DeviceLaw,
        x: &'a [f32],
        s: &LangevinChains,
        seed: u64,
    ) -> Result<Self> {
        let plan = ChainPlan::new(s)?;
        let x = plan.chain_rows(x, (vae.data_dim(), vae.d))?;
        Self::with(gpu, (vae, law), x, ChainCourse::sagd(plan, s), seed)
    }

    /// The chains: one per row of `x`.
    fn chains(&self) -> usize {
        self.x.len() / self.px
    }

    /// Takes the course's kernel for the transitions (its program; the scheme's noise per step
    /// and Metropolis test do not change along a run).
    fn take_kernel(&mut self) -> Result<()> {
        self.program = program(&self.course.kernel)?;
        Ok(())
    }

    fn with(
        gpu: Gpu,
        (vae, law): (&'a Vae, DeviceLaw),
        x: Cow<'a, [f32]>,
        course: ChainCourse,
        seed: u64,
    ) -> Result<Self> {
        let kernel = &course.kernel;
        Ok(GpuChainEstimator {
            gpu,
            vae,
            law,
            px: vae.data_dim(),
            x,
            program: program(kernel)?,
            normals_per_coord: 1 + kernel.normals_per_step(),
            metropolis: kernel.metropolis(),
            fused: FusedMlp::of(&vae.dec).filter(|_| law.is_unit_gaussian()),
            course,
            stream: Seed::new(seed).stream("starts").normals(),
            rng: GpuRng::new(Seed::new(seed).stream("device").get()),
            divergences: 0,
            acceptance: Vec::new(),
            host: Vec::new(),
            xb: Vec::new(),
            eps: Vec::new(),
            state: DeviceState::default(),
            b: None,
            pending: None,
            replay: Replay::default(),
            delta_bits: 0,
            rows: Vec::new(),
        })
    }

    fn alloc(&self) -> GpuResult<Buffers> {
        let (gpu, d, px) = (&self.gpu, self.vae.d, self.px);
        let n = self.chains();
        let nd = n * d;
        let z = |len: usize| gpu.zeros(len);
        Ok(Buffers {
            x_all: gpu.upload(&self.x)?,
            x_batch: z(n * px)?,
            pos: z(nd)?,
            rho_all: z(nd)?,
            xa: z(nd)?,
            xb: z(nd)?,
            ga: z(nd)?,
            gb: z(nd)?,
            la: z(n)?,
            lb: z(n)?,
            rho: z(nd)?,
            eta: z(nd)?,
            noise: z(self.course.steps.max(1) * self.normals_per_coord * nd)?,
            uni: z(self.course.steps.max(1) * n)?,
            h0: gpu.stream.alloc_zeros::<f64>(n.max(1))?,
            stats: z(STATS * n)?,
            sums: gpu.stream.alloc_zeros::<f64>(STATS)?,
            idx: gpu.stream.alloc_zeros::<i32>(n.max(1))?,
            store: z(self.course.steps * nd)?,
            resid: z(self.course.steps * n * px)?,
            g_theta: z(self.vae.dec.n_params())?,
            ws: GpuWorkspace::default(),
            ws_theta: GpuWorkspace::default(),
        })
    }

    /// One reparameterised encoder draw per row of `x` (nb rows) into `out`, the noise from the
    /// host stream (as the CPU's `encoder_draw`).
    fn encoder_draw(&mut self, b: &mut Buffers, all: bool, nb: usize) -> GpuResult<()> {
        let (gpu, vae, d) = (&self.gpu, self.vae, self.vae.d);
        self.eps.resize(nb * d, 0.0);
        self.stream.fill(&mut self.eps);
        gpu.upload_into(&self.eps, &mut b.eta)?;
        let x = if all { &b.x_all } else { &b.x_batch };
        vae.enc
            .forward_gpu(gpu, placed(&self.state.enc)?, x, nb, &mut b.ws)?;
        let enc_out = b.ws.output().expect("forward ran");
        let (ni, one, di) = (nb as i32, 1i32, d as i32);
        // SAFETY: buffers sized for all n rows.
        unsafe {
            launch!(gpu, "reparam", grid(nb * d);
                enc_out, &b.eta, &mut b.xa, &ni, &one, &di)
        }?;
        Ok(())
    }

    /// log π and ∇log π of the batch's posterior (nb rows; all of the data's with `all`) at
    /// the transition's next state (`next`) or its start, into that state's gradient and log
    /// density; ∂ log p(x | h)/∂h in `resid`.
    fn evaluate(&self, b: &mut Buffers, all: bool, next: bool, nb: usize) -> GpuResult<()> {
        let Buffers {
            x_all,
            x_batch,
            xa,
            xb,
            ga,
            gb,
            la,
            lb,
            resid,
            ws,
            ..
        } = b;
        let data = if all { &*x_all } else { &*x_batch };
        let (x, g, lp) = match next {
            true => (&*xb, gb, lb),
            false => (&*xa, ga, la),
        };
        let (gpu, vae, law, fused) = (&self.gpu, self.vae, self.law, self.fused);
        let dec = placed(&self.state.dec)?;
        let d = vae.d;
        if let Some(f) = fused {
            let (ni, di, hi) = (nb as i32, d as i32, f.hidden as i32);
            let [o0, o2, o4] = f.offsets;
            let cfg = cudarc::driver::LaunchConfig {
                grid_dim: (nb.max(1) as u32, 1, 1),
                block_dim: (f.hidden as u32, 1, 1),
                shared_mem_bytes: ((6 * f.hidden + 8) * 4) as u32,
            };
            // SAFETY: one block of H threads per row, the shared memory the kernel lays out;
            // θ has the decoder's layout (checked when `fused` was made).
            unsafe {
                launch!(gpu, "posterior_mlp", cfg;
                    dec, &o0, &o2, &o4, &f.act, data, x, &mut *lp, &mut *g, &ni, &di, &hi)
            }?;
            return Ok(());
        }
        let shape = LikelihoodRows {
            rows: nb,
            n: nb,
            per: 1,
            px: vae.data_dim(),
        };
        let decoder = DeviceDecoder {
            net: &vae.dec,
            params: dec,
            law,
            data,
            shape,
        };
        decoder.posterior(gpu, x, (g, Some(lp)), resid, ws)
    }
}

impl GradientEstimator for GpuChainEstimator<'_> {
    fn trains_encoder(&self) -> bool {
        false
    }

    fn save_state(&self) -> Result<Vec<u8>> {
        let nd = self.chains() * self.vae.d;
        let (mut pos, mut rho) = (vec![0.0f32; nd], vec![0.0f32; nd]);
        if let Some(b) = &self.b {
            self.gpu.download_into(&b.pos, &mut pos)?;
            self.gpu.download_into(&b.rho_all, &mut rho)?;
        } else if let Some((p, r)) = &self.pending {
            (pos, rho) = (p.clone(), r.clone());
        }
        encode(&Record {
            pos,
            rho,
            stream: self.stream.clone(),
            rng: self.rng.clone(),
            started: self.course.started,
            divergences: self.divergences,
            acceptance: self.acceptance.clone(),
            update: self.course.update,
        })
    }

    fn load_state(&mut self, bytes: &[u8]) -> Result<()> {
        let r: Record = decode(bytes)?;
        let nd = self.chains() * self.vae.d;
        if r.pos.len() != nd || r.rho.len() != nd {
            return Err(SagdError::Device(
                "the checkpoint's chains do not match the data: resume with the same data".into(),
            ));
        }
        self.stream = r.stream;
        self.rng = r.rng;
        self.course.started = r.started;
        self.divergences = r.divergences;
        self.acceptance = r.acceptance;
        self.course.update = r.update;
        match &mut self.b {
            Some(b) => {
                self.gpu.upload_into(&r.pos, &mut b.pos)?;
                self.gpu.upload_into(&r.rho, &mut b.rho_all)?;
            }
            None => self.pending = Some((r.pos, r.rho)),
        }
        Ok(())
    }

    fn estimate(
        &mut self,
        p: &VaeParams,
        batch: &[usize],
        g_dec: &mut [f32],
        _g_enc: &mut [f32],
    ) -> Result<f64> {
        Ok(self.run(Some(p), batch, Some(g_dec))?)
    }

    fn device_params(&mut self) -> Option<&mut dyn DeviceParams> {
        Some(self)
    }

    fn diagnostics(&self) -> serde_json::Value {
        serde_json::json!({
            "acceptance": (!self.acceptance.is_empty()).then(|| self.acceptance.iter().sum::<f64>() / self.acceptance.len() as f64),
            "divergences": self.divergences,
            "device": "cuda",
        })
    }
}

impl OnDevice for GpuChainEstimator<'_> {
    fn state(&self) -> Option<&DeviceState> {
        Some(&self.state)
    }

    fn on_device(&mut self) -> Option<(&Gpu, &mut DeviceState, Option<Grads<'_>>)> {
        let grads = self.b.as_ref().map(|b| (&b.g_theta, None));
        Some((&self.gpu, &mut self.state, grads))
    }

    fn pass_at_held(&mut self, batch: &[usize]) -> Result<f64> {
        Ok(self.run(None, batch, None)?)
    }
}
