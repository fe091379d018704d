//! The ELBO (k = 1) and IWAE (k > 1) gradient on the GPU, under any likelihood the backend knows
//! ([`DeviceLaw`]): the CPU's [`BoundEstimator`](crate::train::BoundEstimator) step for step, with
//! its noise drawn from the same stream on the host, so both engines estimate from the same
//! draws. One pass ([`BoundPass`]) for every bound on the device: E2's estimator here, E3's VAE
//! minibatches ([`crate::bernoulli::gpu`]).

use cudarc::driver::{CudaSlice, PushKernelArg};
use sagd::error::Result;
use sagd::rng::NormalStream;
use sagd::run::{decode, encode};

use crate::cuda::{
    ensure, grid, put, AdamStep, Gpu, GpuError, GpuResult, GpuWorkspace, LikelihoodRows, Replay,
};
use crate::likelihood::DeviceLaw;
use crate::net::Sequential;
use crate::train::gpu::DeviceState;
use crate::train::{gather_rows, DeviceParams, GradientEstimator, TrainState};
use crate::vae::{Vae, VaeParams};

/// The device buffers of a bound's pass, kept between updates.
#[derive(Default)]
pub(crate) struct BoundPass {
    u: Option<CudaSlice<f32>>,
    dh: Option<CudaSlice<f32>>,
    ll: Option<CudaSlice<f32>>,
    wts: Option<CudaSlice<f32>>,
    loss: Option<CudaSlice<f32>>,
    du: Option<CudaSlice<f32>>,
    dout: Option<CudaSlice<f32>>,
    ws_enc: GpuWorkspace,
    ws_dec: GpuWorkspace,
}

/// What a bound's pass reads on the device: the networks and the law, their parameters, the
/// points and their draws ε (n·k × d).
pub(crate) struct BoundInputs<'a> {
    pub enc: (&'a Sequential, &'a CudaSlice<f32>),
    pub dec: (&'a Sequential, &'a CudaSlice<f32>),
    pub law: DeviceLaw,
    pub x: &'a CudaSlice<f32>,
    pub eps: &'a CudaSlice<f32>,
}

impl BoundPass {
    /// Makes (or keeps) the buffers of a pass over `n` points with `k` samples each, latent `d`
    /// and data `px` values per point; a pass makes none of its own, so that its launches can be
    /// captured in a graph.
    pub(crate) fn ensure(
        &mut self,
        gpu: &Gpu,
        (n, k, d, px): (usize, usize, usize, usize),
    ) -> GpuResult<()> {
        let rows = n * k;
        for (slot, len) in [
            (&mut self.u, rows * d),
            (&mut self.dh, rows * px),
            (&mut self.ll, rows),
            (&mut self.wts, rows),
            (&mut self.loss, n),
            (&mut self.du, rows * d),
            (&mut self.dout, n * 2 * d),
        ] {
            ensure(gpu, slot, len)?;
        }
        Ok(())
    }

    /// Each point's loss of the last pass (n values).
    pub(crate) fn loss(&self) -> &CudaSlice<f32> {
        self.loss.as_ref().expect("made by ensure")
    }

    /// The launches of one pass over `n` points, `k` samples each (after [`BoundPass::ensure`]):
    /// the encoder, the reparameterised draws, the decoder, the law's rows and the bound's
    /// weights, then both backward passes; the mean bound's gradients written into `gd` and
    /// `ge`, each point's loss into [`BoundPass::loss`]. No allocation, no host work.
    pub(crate) fn launches(
        &mut self,
        gpu: &Gpu,
        input: BoundInputs<'_>,
        (gd, ge): (&mut CudaSlice<f32>, &mut CudaSlice<f32>),
        (n, k): (usize, usize),
    ) -> GpuResult<()> {
        let BoundPass {
            u: Some(u),
            dh: Some(dh),
            ll: Some(ll),
            wts: Some(wts),
            loss: Some(loss),
            du: Some(du),
            dout: Some(dout),
            ws_enc,
            ws_dec,
        } = self
        else {
            unreachable!("made by ensure");
        };
        let ((enc_net, enc), (dec_net, dec)) = (input.enc, input.dec);
        let (d, px) = (dec_net.input_dim(), dec_net.output_dim());
        let (ni, ki, di, nf) = (n as i32, k as i32, d as i32, n as f32);
        let rows = n * k;
        enc_net.forward_gpu(gpu, enc, input.x, n, ws_enc)?;
        let enc_out = ws_enc.output().expect("forward ran");
        let mut l = gpu.stream.launch_builder(gpu.k("reparam"));
        l.arg(enc_out)
            .arg(input.eps)
            .arg(&mut *u)
            .arg(&ni)
            .arg(&ki)
            .arg(&di);
        // SAFETY: every buffer holds what the shapes ask.
        unsafe { l.launch(grid(rows * d)) }?;
        dec_net.forward_gpu(gpu, dec, u, rows, ws_dec)?;
        let h = ws_dec.output().expect("forward ran");
        // k = 1: dh = −∂ℓ/∂h / n at once; k > 1: scaled by each row's weight below.
        let gscale = if k == 1 { -1.0 / nf } else { 1.0 };
        let shape = LikelihoodRows {
            rows,
            n,
            per: k,
            px,
        };
        gpu.likelihood_rows(input.law, (h, input.x), shape, dh, Some(&mut *ll), gscale)?;
        let mut l = gpu.stream.launch_builder(gpu.k("bound_weights"));
        l.arg(enc_out)
            .arg(&*u)
            .arg(input.eps)
            .arg(&*ll)
            .arg(&mut *wts)
            .arg(&mut *loss)
            .arg(&ni)
            .arg(&ki)
            .arg(&di);
        // SAFETY: as above.
        unsafe { l.launch(grid(n)) }?;
        if k > 1 {
            let (ri, pi, c) = (rows as i32, px as i32, -1.0 / nf);
            let mut l = gpu.stream.launch_builder(gpu.k("scale_rows"));
            l.arg(&mut *dh).arg(&*wts).arg(&c).arg(&ri).arg(&pi);
            // SAFETY: dh holds rows × px values, wts rows.
            unsafe { l.launch(grid(rows * px)) }?;
        }
        gpu.zero(gd)?;
        dec_net.backward_gpu(gpu, dec, ws_dec, dh, Some(&mut *gd), Some(&mut *du))?;
        let enc_out = ws_enc.output().expect("forward ran");
        let mut l = gpu.stream.launch_builder(gpu.k("bound_enc_grad"));
        l.arg(enc_out)
            .arg(&*u)
            .arg(input.eps)
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
        enc_net.backward_gpu(gpu, enc, ws_enc, dout, Some(&mut *ge), None)
    }
}

/// The estimator's uploads: the batch's points and their noise, and the gradients.
#[derive(Default)]
struct Buffers {
    xb: Option<CudaSlice<f32>>,
    eps: Option<CudaSlice<f32>>,
    g_dec: Option<CudaSlice<f32>>,
    g_enc: Option<CudaSlice<f32>>,
}

impl Buffers {
    /// The last pass's gradients, for the device's training state.
    fn grads(&self) -> GpuResult<(&CudaSlice<f32>, Option<&CudaSlice<f32>>)> {
        match &self.g_dec {
            Some(g) => Ok((g, self.g_enc.as_ref())),
            None => Err(GpuError::Settings("a training step before any pass".into())),
        }
    }
}

/// The ELBO (k = 1) or the IWAE bound (k > 1) on the GPU, encoder and decoder. The training
/// job takes its updates on the device ([`DeviceParams`]) where its rule is plain Adam.
pub struct GpuBoundEstimator<'a> {
    gpu: Gpu,
    vae: &'a Vae,
    law: DeviceLaw,
    x: &'a [f32],
    k: usize,
    stream: NormalStream,
    xb: Vec<f32>,
    eps: Vec<f32>,
    host: Vec<f32>,
    /// The networks' parameters (and Adam's moments while the device takes the updates).
    state: DeviceState,
    b: Buffers,
    pass: BoundPass,
    /// The update's launches as a graph, by batch size.
    replay: Replay<usize>,
}

impl<'a> GpuBoundEstimator<'a> {
    /// The estimator of [`BoundEstimator::new`](crate::train::BoundEstimator::new) (same
    /// arguments, same noise) on `gpu`: the paper's likelihood, N(x; h, I).
    pub fn new(gpu: Gpu, vae: &'a Vae, x: &'a [f32], k: usize, seed: u64) -> Self {
        let law = DeviceLaw::Gaussian { precision: 1.0 };
        GpuBoundEstimator::with_law(gpu, vae, law, x, k, seed)
    }

    /// [`GpuBoundEstimator::new`] under the likelihood `law` (a law's
    /// [`Likelihood::device_law`](crate::likelihood::Likelihood::device_law)), the data `x`
    /// points of [`Vae::data_dim`] values: the estimator of
    /// [`BoundEstimator::with_likelihood`](crate::train::BoundEstimator::with_likelihood).
    pub fn with_law(
        gpu: Gpu,
        vae: &'a Vae,
        law: DeviceLaw,
        x: &'a [f32],
        k: usize,
        seed: u64,
    ) -> Self {
        GpuBoundEstimator {
            gpu,
            vae,
            law,
            x,
            k: k.max(1),
            stream: NormalStream::new(seed),
            xb: Vec::new(),
            eps: Vec::new(),
            host: Vec::new(),
            state: DeviceState::default(),
            b: Buffers::default(),
            pass: BoundPass::default(),
            replay: Replay::default(),
        }
    }

    /// The pass on `batch` at the parameters the device holds, its gradients left in the
    /// estimator's buffers; the mean loss.
    fn pass_on_held(&mut self, batch: &[usize]) -> GpuResult<f64> {
        let (vae, gpu, d, k) = (self.vae, &self.gpu, self.vae.d, self.k);
        let (n, px) = (batch.len(), vae.data_dim());
        gather_rows(self.x, px, batch, &mut self.xb);
        self.eps.resize(n * k * d, 0.0);
        self.stream.fill(&mut self.eps);
        let b = &mut self.b;
        put(gpu, &mut b.xb, &self.xb)?;
        put(gpu, &mut b.eps, &self.eps)?;
        ensure(gpu, &mut b.g_dec, vae.dec.n_params())?;
        ensure(gpu, &mut b.g_enc, vae.enc.n_params())?;
        self.pass.ensure(gpu, (n, k, d, px))?;
        let (Some(dec), Some(enc)) = (&self.state.dec, &self.state.enc) else {
            return Err(GpuError::Settings(
                "a pass on the device's parameters before any were put there".into(),
            ));
        };
        let (Some(xb), Some(eps), Some(gd), Some(ge)) = (&b.xb, &b.eps, &mut b.g_dec, &mut b.g_enc)
        else {
            unreachable!("made above");
        };
        let input = BoundInputs {
            enc: (&vae.enc, enc),
            dec: (&vae.dec, dec),
            law: self.law,
            x: xb,
            eps,
        };
        // The update's launches, replayed from a CUDA graph once captured.
        let pass = &mut self.pass;
        self.replay
            .run(gpu, n, || pass.launches(gpu, input, (gd, ge), (n, k)))?;
        self.host.resize(n, 0.0);
        gpu.download_into(self.pass.loss(), &mut self.host)?;
        Ok(self.host.iter().map(|v| *v as f64).sum::<f64>() / n as f64)
    }

    /// The pass at the host's parameters `p`, its gradients added into `g_dec` and `g_enc`.
    fn run(
        &mut self,
        p: &VaeParams,
        batch: &[usize],
        g_dec: &mut [f32],
        g_enc: &mut [f32],
    ) -> GpuResult<f64> {
        self.state.put_params(&self.gpu, p)?;
        let loss = self.pass_on_held(batch)?;
        let (Some(gd), Some(ge)) = (&self.b.g_dec, &self.b.g_enc) else {
            unreachable!("made by the pass");
        };
        for (dev, out) in [(gd, g_dec), (ge, g_enc)] {
            self.host.resize(out.len(), 0.0);
            self.gpu.download_into(dev, &mut self.host)?;
            out.iter_mut().zip(&self.host).for_each(|(a, b)| *a += b);
        }
        Ok(loss)
    }
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

    fn device_params(&mut self) -> Option<&mut dyn DeviceParams> {
        Some(self)
    }
}

impl DeviceParams for GpuBoundEstimator<'_> {
    fn held(&self, encoder: bool) -> Option<usize> {
        self.state.held(encoder)
    }

    fn load(&mut self, st: &TrainState, encoder: bool) -> Result<()> {
        Ok(self.state.load(&self.gpu, st, encoder)?)
    }

    fn gradient(&mut self, batch: &[usize]) -> Result<f64> {
        Ok(self.pass_on_held(batch)?)
    }

    fn finite(&mut self) -> Result<bool> {
        let grads = self.b.grads()?;
        Ok(self.state.finite(&self.gpu, grads)?)
    }

    fn step(&mut self, step: AdamStep) -> Result<()> {
        let grads = self.b.grads()?;
        Ok(self.state.step(&self.gpu, grads, step)?)
    }

    fn sync(&mut self, st: &mut TrainState) -> Result<()> {
        Ok(self.state.sync(&self.gpu, st)?)
    }
}
