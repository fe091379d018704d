//! The ELBO (k = 1) and IWAE (k > 1) gradient estimators on the GPU: the CPU's
//! [`BoundEstimator`](crate::train::BoundEstimator) step for step, with its noise drawn from the
//! same stream on the host, so both engines estimate from the same draws.

use cudarc::driver::{CudaSlice, PushKernelArg};
use sagd::error::Result;
use sagd::rng::NormalStream;
use sagd::run::{decode, encode};

use crate::cuda::{ensure, grid, put, Gpu, GpuResult, GpuWorkspace, Replay};
use crate::train::{gather_rows, GradientEstimator};
use crate::vae::{Vae, VaeParams};

/// Device buffers of the bound estimator.
#[derive(Default)]
struct Buffers {
    dec: Option<CudaSlice<f32>>,
    enc: Option<CudaSlice<f32>>,
    xb: Option<CudaSlice<f32>>,
    eps: Option<CudaSlice<f32>>,
    u: Option<CudaSlice<f32>>,
    dh: Option<CudaSlice<f32>>,
    wts: Option<CudaSlice<f32>>,
    loss: Option<CudaSlice<f32>>,
    du: Option<CudaSlice<f32>>,
    dout: Option<CudaSlice<f32>>,
    g_dec: Option<CudaSlice<f32>>,
    g_enc: Option<CudaSlice<f32>>,
    ws_enc: GpuWorkspace,
    ws_dec: GpuWorkspace,
}

/// The ELBO (k = 1) or the IWAE bound (k > 1) on the GPU, encoder and decoder.
pub struct GpuBoundEstimator<'a> {
    gpu: Gpu,
    vae: &'a Vae,
    x: &'a [f32],
    k: usize,
    stream: NormalStream,
    xb: Vec<f32>,
    eps: Vec<f32>,
    host: Vec<f32>,
    b: Buffers,
    /// The update's launches as a graph, by batch size.
    replay: Replay<usize>,
}

impl<'a> GpuBoundEstimator<'a> {
    /// The estimator of [`BoundEstimator::new`](crate::train::BoundEstimator::new) (same
    /// arguments, same noise) on `gpu`.
    pub fn new(gpu: Gpu, vae: &'a Vae, x: &'a [f32], k: usize, seed: u64) -> Self {
        GpuBoundEstimator {
            gpu,
            vae,
            x,
            k: k.max(1),
            stream: NormalStream::new(seed),
            xb: Vec::new(),
            eps: Vec::new(),
            host: Vec::new(),
            b: Buffers::default(),
            replay: Replay::default(),
        }
    }

    fn run(
        &mut self,
        p: &VaeParams,
        batch: &[usize],
        g_dec: &mut [f32],
        g_enc: &mut [f32],
    ) -> GpuResult<f64> {
        let (vae, gpu, d, k) = (self.vae, &self.gpu, self.vae.d, self.k);
        let n = batch.len();
        let rows = n * k;
        gather_rows(self.x, d, batch, &mut self.xb);
        self.eps.resize(rows * d, 0.0);
        self.stream.fill(&mut self.eps);
        let b = &mut self.b;
        put(gpu, &mut b.dec, &p.dec)?;
        put(gpu, &mut b.enc, &p.enc)?;
        put(gpu, &mut b.xb, &self.xb)?;
        put(gpu, &mut b.eps, &self.eps)?;
        for (slot, len) in [
            (&mut b.u, rows * d),
            (&mut b.dh, rows * d),
            (&mut b.du, rows * d),
            (&mut b.wts, rows),
            (&mut b.loss, n),
            (&mut b.dout, n * 2 * d),
            (&mut b.g_dec, p.dec.len()),
            (&mut b.g_enc, p.enc.len()),
        ] {
            ensure(gpu, slot, len)?;
        }
        // The update's launches, replayed from a CUDA graph once captured.
        self.replay
            .run(gpu, n, || launches(gpu, vae, b, (n, k, d)))?;
        let (Some(gd), Some(ge), Some(loss)) = (&b.g_dec, &b.g_enc, &b.loss) else {
            unreachable!("made above");
        };
        for (dev, out) in [(gd, g_dec), (ge, g_enc)] {
            self.host.resize(out.len(), 0.0);
            gpu.download_into(dev, &mut self.host)?;
            out.iter_mut().zip(&self.host).for_each(|(a, b)| *a += b);
        }
        self.host.resize(n, 0.0);
        gpu.download_into(loss, &mut self.host)?;
        Ok(self.host.iter().map(|v| *v as f64).sum::<f64>() / n as f64)
    }
}

/// The kernel launches of one update, between the uploads and the downloads: no allocation, no
/// host work, so that they can be captured in a graph.
fn launches(
    gpu: &Gpu,
    vae: &Vae,
    b: &mut Buffers,
    (n, k, d): (usize, usize, usize),
) -> GpuResult<()> {
    let Buffers {
        dec: Some(dec),
        enc: Some(enc),
        xb: Some(xb),
        eps: Some(eps),
        u: Some(u),
        dh: Some(dh),
        wts: Some(wts),
        loss: Some(loss),
        du: Some(du),
        dout: Some(dout),
        g_dec: Some(gd),
        g_enc: Some(ge),
        ws_enc,
        ws_dec,
    } = b
    else {
        unreachable!("every buffer was made above");
    };
    let (ni, ki, di, nf) = (n as i32, k as i32, d as i32, n as f32);
    let rows = n * k;
    vae.enc.forward_gpu(gpu, enc, xb, n, ws_enc)?;
    let enc_out = ws_enc.output().expect("forward ran");
    let mut l = gpu.stream.launch_builder(gpu.k("reparam"));
    l.arg(enc_out)
        .arg(&*eps)
        .arg(&mut *u)
        .arg(&ni)
        .arg(&ki)
        .arg(&di);
    // SAFETY: every buffer holds what the shapes ask.
    unsafe { l.launch(grid(rows * d)) }?;
    vae.dec.forward_gpu(gpu, dec, u, rows, ws_dec)?;
    let h = ws_dec.output().expect("forward ran");
    let mut l = gpu.stream.launch_builder(gpu.k("bound_loss"));
    l.arg(&*xb)
        .arg(enc_out)
        .arg(&*u)
        .arg(&*eps)
        .arg(h)
        .arg(&mut *dh)
        .arg(&mut *wts)
        .arg(&mut *loss)
        .arg(&ni)
        .arg(&ki)
        .arg(&di)
        .arg(&nf);
    // SAFETY: as above.
    unsafe { l.launch(grid(n)) }?;
    gpu.zero(gd)?;
    vae.dec
        .backward_gpu(gpu, dec, ws_dec, dh, Some(&mut *gd), Some(&mut *du))?;
    let enc_out = ws_enc.output().expect("forward ran");
    let mut l = gpu.stream.launch_builder(gpu.k("bound_enc_grad"));
    l.arg(enc_out)
        .arg(&*u)
        .arg(&*eps)
        .arg(&*du)
        .arg(&*wts)
        .arg(&mut *dout)
        .arg(&ni)
        .arg(&ki)
        .arg(&di)
        .arg(&nf);
    // SAFETY: as above.
    unsafe { l.launch(grid(n * d)) }?;
    gpu.zero(ge)?;
    vae.enc
        .backward_gpu(gpu, enc, ws_enc, dout, Some(&mut *ge), None)?;
    Ok(())
}

impl GradientEstimator for GpuBoundEstimator<'_> {
    fn trains_encoder(&self) -> bool {
        true
    }

    fn save_state(&self) -> Result<Vec<u8>> {
        encode(&self.stream)
    }

    fn load_state(&mut self, bytes: &[u8]) -> Result<()> {
        self.stream = decode(bytes)?;
        Ok(())
    }

    fn estimate(
        &mut self,
        p: &VaeParams,
        batch: &[usize],
        g_dec: &mut [f32],
        g_enc: &mut [f32],
    ) -> Result<f64> {
        Ok(self.run(p, batch, g_dec, g_enc)?)
    }
}
