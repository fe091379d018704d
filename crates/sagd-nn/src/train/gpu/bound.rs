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
    ensure, grid, launch, put, Gpu, GpuResult, GpuWorkspace, LikelihoodRows, Replay,
};
use crate::likelihood::DeviceLaw;
use crate::net::Sequential;
use crate::train::gpu::{placed, DeviceState, Grads, OnDevice};
use crate::train::{gather_rows, DeviceParams, GradientEstimator};
use crate::vae::{Vae, VaeParams};

/// The device buffers of a bound's pass, kept between updates: its uploads (the points and
/// their draws), its intermediates and the gradients it leaves.
#[derive(Default)]
pub(crate) struct BoundPass {
    x: Option<CudaSlice<f32>>,
    eps: Option<CudaSlice<f32>>,
    g_dec: Option<CudaSlice<f32>>,
    g_enc: Option<CudaSlice<f32>>,
    u: Option<CudaSlice<f32>>,
    dh: Option<CudaSlice<f32>>,
    ll: Option<CudaSlice<f32>>,
    wts: Option<CudaSlice<f32>>,
    loss: Option<CudaSlice<f32>>,
    du: Option<CudaSlice<f32>>,
    dout: Option<CudaSlice<f32>>,
    ws_enc: GpuWorkspace,
    ws_dec: GpuWorkspace,
    host: Vec<f32>,
}

/// A network and its parameters on the device (none before they were put there).
pub(crate) type Net<'a> = (&'a Sequential, &'a Option<CudaSlice<f32>>);

/// A network and its parameters on the device, as a pass's launches read them.
type Placed<'a> = (&'a Sequential, &'a CudaSlice<f32>);

impl BoundPass {
    /// The mean bound over the points `x` (n of them, row-major) with the draws `eps` (n·k × d)
    /// under `law`, for the encoder and decoder `nets` (their parameters on the device): the
    /// inputs uploaded, then the pass's launches (replayed from a CUDA graph by batch size where
    /// `replay` is given), the gradients left on the device ([`BoundPass::grads`]).
    pub(crate) fn run(
        &mut self,
        gpu: &Gpu,
        (enc, dec): (Net<'_>, Net<'_>),
        (x, eps, law): (&[f32], &[f32], DeviceLaw),
        k: usize,
        replay: Option<&mut Replay<usize>>,
    ) -> GpuResult<f64> {
        let (d, px) = (dec.0.input_dim(), dec.0.output_dim());
        let n = x.len() / px;
        let rows = n * k;
        put(gpu, &mut self.x, x)?;
        put(gpu, &mut self.eps, eps)?;
        for (slot, len) in [
            (&mut self.g_dec, dec.0.n_params()),
            (&mut self.g_enc, enc.0.n_params()),
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
        let nets = ((enc.0, placed(enc.1)?), (dec.0, placed(dec.1)?));
        match replay {
            Some(replay) => replay.run(gpu, n, || self.launches(gpu, nets, law, (n, k)))?,
            None => self.launches(gpu, nets, law, (n, k))?,
        }
        self.host.resize(n, 0.0);
        gpu.download_into(self.loss.as_ref().expect("made above"), &mut self.host)?;
        Ok(self.host.iter().map(|v| *v as f64).sum::<f64>() / n as f64)
    }

    /// The last pass's gradients (the decoder's, the encoder's); `None` before any pass.
    pub(crate) fn grads(&self) -> Option<Grads<'_>> {
        Some((self.g_dec.as_ref()?, self.g_enc.as_ref()))
    }

    /// The last pass's gradients written (or, with `add`, added) into `g_dec` and `g_enc`.
    pub(crate) fn download(
        &mut self,
        gpu: &Gpu,
        (g_dec, g_enc): (&mut [f32], &mut [f32]),
        add: bool,
    ) -> GpuResult<()> {
        let (Some(gd), Some(ge)) = (&self.g_dec, &self.g_enc) else {
            unreachable!("made by the pass");
        };
        for (dev, out) in [(gd, g_dec), (ge, g_enc)] {
            if add {
                self.host.resize(out.len(), 0.0);
                gpu.download_into(dev, &mut self.host)?;
                out.iter_mut().zip(&self.host).for_each(|(a, b)| *a += b);
            } else {
                gpu.download_into(dev, out)?;
            }
        }
        Ok(())
    }

    /// The launches of one pass over `n` points, `k` samples each: the encoder, the
    /// reparameterised draws, the decoder, the law's rows and the bound's weights, then both
    /// backward passes; the mean bound's gradients written into `g_dec` and `g_enc`, each point's
    /// loss into `loss`. No allocation, no host work, so that they can be captured in a graph.
    fn launches(
        &mut self,
        gpu: &Gpu,
        ((enc_net, enc), (dec_net, dec)): (Placed<'_>, Placed<'_>),
        law: DeviceLaw,
        (n, k): (usize, usize),
    ) -> GpuResult<()> {
        let BoundPass {
            x: Some(x),
            eps: Some(eps),
            g_dec: Some(gd),
            g_enc: Some(ge),
            u: Some(u),
            dh: Some(dh),
            ll: Some(ll),
            wts: Some(wts),
            loss: Some(loss),
            du: Some(du),
            dout: Some(dout),
            ws_enc,
            ws_dec,
            ..
        } = self
        else {
            unreachable!("made by the pass");
        };
        let (d, px) = (dec_net.input_dim(), dec_net.output_dim());
        let (ni, ki, di, nf) = (n as i32, k as i32, d as i32, n as f32);
        let rows = n * k;
        enc_net.forward_gpu(gpu, enc, x, n, ws_enc)?;
        let enc_out = ws_enc.output().expect("forward ran");
        // SAFETY: every buffer holds what the shapes ask.
        unsafe { launch!(gpu, "reparam", grid(rows * d); enc_out, &*eps, &mut *u, &ni, &ki, &di) }?;
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
        gpu.likelihood_rows(law, (h, x), shape, dh, Some(&mut *ll), gscale)?;
        // SAFETY: as above.
        unsafe {
            launch!(gpu, "bound_weights", grid(n);
                enc_out, &*u, &*eps, &*ll, &mut *wts, &mut *loss, &ni, &ki, &di)
        }?;
        if k > 1 {
            let (ri, pi, c) = (rows as i32, px as i32, -1.0 / nf);
            // SAFETY: dh holds rows × px values, wts rows.
            unsafe { launch!(gpu, "scale_rows", grid(rows * px); &mut *dh, &*wts, &c, &ri, &pi) }?;
        }
        gpu.zero(gd)?;
        dec_net.backward_gpu(gpu, dec, ws_dec, dh, Some(&mut *gd), Some(&mut *du))?;
        let enc_out = ws_enc.output().expect("forward ran");
        // SAFETY: as above.
        unsafe {
            launch!(gpu, "bound_enc_grad", grid(n * d);
                enc_out, &*u, &*eps, &*du, &*wts, &mut *dout, &ni, &ki, &di, &nf)
        }?;
        gpu.zero(ge)?;
        enc_net.backward_gpu(gpu, enc, ws_enc, dout, Some(&mut *ge), None)
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
    /// The networks' parameters (and Adam's moments while the device takes the updates).
    state: DeviceState,
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
            state: DeviceState::default(),
            pass: BoundPass::default(),
            replay: Replay::default(),
        }
    }

    /// The pass on `batch` at the parameters the device holds, its gradients left in the
    /// pass's buffers; the mean loss.
    fn pass_on_held(&mut self, batch: &[usize]) -> GpuResult<f64> {
        let (vae, d, k) = (self.vae, self.vae.d, self.k);
        gather_rows(self.x, vae.data_dim(), batch, &mut self.xb);
        self.eps.resize(batch.len() * k * d, 0.0);
        self.stream.fill(&mut self.eps);
        let nets = ((&vae.enc, &self.state.enc), (&vae.dec, &self.state.dec));
        let host = (&self.xb[..], &self.eps[..], self.law);
        // The update's launches, replayed from a CUDA graph once captured.
        self.pass
            .run(&self.gpu, nets, host, k, Some(&mut self.replay))
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
        self.pass.download(&self.gpu, (g_dec, g_enc), true)?;
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

impl OnDevice for GpuBoundEstimator<'_> {
    fn state(&self) -> Option<&DeviceState> {
        Some(&self.state)
    }

    fn on_device(&mut self) -> Option<(&Gpu, &mut DeviceState, Option<Grads<'_>>)> {
        Some((&self.gpu, &mut self.state, self.pass.grads()))
    }

    fn pass_at_held(&mut self, batch: &[usize]) -> Result<f64> {
        Ok(self.pass_on_held(batch)?)
    }
}
