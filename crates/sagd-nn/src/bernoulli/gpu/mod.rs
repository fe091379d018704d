//! The passes of a VAE of binary images on the GPU: the CPU's [`vae_batch`](crate::bernoulli::vae_batch)
//! and [`sagd_batch`](crate::bernoulli::sagd_batch) step for step, from the same binarised
//! images and the same noise drawn on the host, so both engines compute the same gradients to
//! float rounding. A whole minibatch is one pass over all its rows (E3: 4000 chain states for SAGD's
//! 20 chains of 200 images).

use cudarc::driver::{CudaSlice, PushKernelArg};
use sagd::langevin::{Instruction, Op};

use crate::bernoulli::{BatchInfo, BernoulliVae, Chains};
use crate::cuda::{adam, ensure, grid, put, Gpu, GpuError, GpuResult, GpuWorkspace};
use crate::train::{AdamStep, TrainState};
use crate::vae::VaeParams;

mod chains;
mod update;

/// Device buffers of the passes, kept between minibatches.
#[derive(Default)]
struct Buffers {
    gen: Option<CudaSlice<f32>>,
    enc: Option<CudaSlice<f32>>,
    x: Option<CudaSlice<f32>>,
    noise: Option<CudaSlice<f32>>,
    u: Option<CudaSlice<f32>>,
    u0: Option<CudaSlice<f32>>,
    rho: Option<CudaSlice<f32>>,
    /// ∇u log p(u | x) (or ∂loss/∂u in the VAE's pass).
    gu: Option<CudaSlice<f32>>,
    dl: Option<CudaSlice<f32>>,
    ll: Option<CudaSlice<f32>>,
    kl: Option<CudaSlice<f32>>,
    dist: Option<CudaSlice<f32>>,
    dout: Option<CudaSlice<f32>>,
    g_gen: Option<CudaSlice<f32>>,
    g_enc: Option<CudaSlice<f32>>,
    /// Adam's moments of the generator and the encoder, when the device takes the updates.
    moments: [Option<CudaSlice<f64>>; 4],
    flag: Option<CudaSlice<f32>>,
    ws_enc: GpuWorkspace,
    ws_gen: GpuWorkspace,
}

/// The training state a device holds between updates: of which update count, and whether the
/// encoder's moments are there too.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Held {
    updates: usize,
    encoder: bool,
}

/// The passes of a [`BernoulliVae`] on one GPU.
pub struct GpuPasses {
    gpu: Gpu,
    b: Buffers,
    host: Vec<f32>,
    held: Option<Held>,
}

/// What a minibatch pass computes: the VAE's ELBO, or SAGD's chains.
#[derive(Clone, Copy, Debug)]
pub enum Pass<'c> {
    /// The negative ELBO; both networks' gradients.
    Vae,
    /// SAGD's generator gradient from these chains.
    Sagd(&'c Chains),
}

/// `v` summed in f64.
fn sum(v: &[f32]) -> f64 {
    v.iter().map(|x| *x as f64).sum()
}

impl GpuPasses {
    /// The passes on `gpu`.
    pub fn new(gpu: Gpu) -> Self {
        GpuPasses {
            gpu,
            b: Buffers::default(),
            host: Vec::new(),
            held: None,
        }
    }

    /// Puts the networks' parameters `p` on the device (any training state it held is gone).
    fn load_params(&mut self, p: &VaeParams) -> GpuResult<()> {
        self.held = None;
        put(&self.gpu, &mut self.b.gen, &p.dec)?;
        put(&self.gpu, &mut self.b.enc, &p.enc)
    }

    /// Uploads a pass's images `x` and noise, and runs the encoder on the images (its output in
    /// `ws_enc`).
    fn encode_inputs(
        gpu: &Gpu,
        b: &mut Buffers,
        m: &BernoulliVae,
        x: &[f32],
        noise: &[f32],
    ) -> GpuResult<()> {
        put(gpu, &mut b.x, x)?;
        put(gpu, &mut b.noise, noise)?;
        let (Some(enc), Some(xd)) = (&b.enc, &b.x) else {
            unreachable!("parameters loaded, images put above");
        };
        m.enc
            .forward_gpu(gpu, enc, xd, x.len() / m.pixels(), &mut b.ws_enc)
    }

    /// The first `n` values of the device buffer `slot`.
    fn get(
        &mut self,
        slot: fn(&Buffers) -> &Option<CudaSlice<f32>>,
        n: usize,
    ) -> GpuResult<&[f32]> {
        self.host.resize(n, 0.0);
        if let Some(dev) = slot(&self.b) {
            self.gpu.download_into(dev, &mut self.host)?;
        }
        Ok(&self.host)
    }

    /// ll[r] = log p(x_{r mod b} | logits_r) and dl = gscale ∂ll/∂logits for the first `rows`
    /// rows of the generator's last output, over `images` images of `pixels` pixels.
    fn bernoulli(
        gpu: &Gpu,
        b: &mut Buffers,
        rows: usize,
        (images, pixels): (usize, usize),
        gscale: f32,
    ) -> GpuResult<()> {
        let Buffers {
            x: Some(x),
            dl: Some(dl),
            ll: Some(ll),
            ws_gen,
            ..
        } = b
        else {
            unreachable!("made by the caller");
        };
        let logits = ws_gen.output().expect("forward ran");
        let (bi, px) = (images as i32, pixels as i32);
        let mut l = gpu.stream.launch_builder(gpu.k("bernoulli_rows"));
        l.arg(logits)
            .arg(&*x)
            .arg(&bi)
            .arg(&px)
            .arg(dl)
            .arg(ll)
            .arg(&gscale);
        let cfg = cudarc::driver::LaunchConfig {
            grid_dim: (rows as u32, 1, 1),
            block_dim: (256, 1, 1),
            shared_mem_bytes: 0,
        };
        // SAFETY: logits and dl hold rows × pixels values, x images × pixels, ll rows.
        unsafe { l.launch(cfg) }?;
        Ok(())
    }

    /// The VAE's mean negative ELBO over the binarised images `x` (b × pixels) with the noise `eps`
    /// (b × d), its gradients written into `g_dec` (the generator's) and `g_enc`: the CPU's
    /// [`vae_batch`](crate::bernoulli::vae_batch).
    pub fn vae_batch(
        &mut self,
        m: &BernoulliVae,
        p: &VaeParams,
        x: &[f32],
        eps: &[f32],
        g_dec: &mut [f32],
        g_enc: &mut [f32],
    ) -> GpuResult<BatchInfo> {
        self.load_params(p)?;
        let info = self.pass(m, x, eps, Pass::Vae, p.dec.len(), p.enc.len())?;
        let (Some(gg), Some(ge)) = (&self.b.g_gen, &self.b.g_enc) else {
            unreachable!("made by the pass");
        };
        self.gpu.download_into(gg, g_dec)?;
        self.gpu.download_into(ge, g_enc)?;
        Ok(info)
    }

    /// A pass on the parameters on the device; its gradients stay there (`g_gen`, `g_enc`).
    fn pass(
        &mut self,
        m: &BernoulliVae,
        x: &[f32],
        noise: &[f32],
        what: Pass<'_>,
        n_gen: usize,
        n_enc: usize,
    ) -> GpuResult<BatchInfo> {
        match what {
            Pass::Vae => self.vae_pass(m, x, noise, n_gen, n_enc),
            Pass::Sagd(chains) => self.sagd_pass(m, x, chains, noise, n_gen),
        }
    }

    fn vae_pass(
        &mut self,
        m: &BernoulliVae,
        x: &[f32],
        eps: &[f32],
        n_gen: usize,
        n_enc: usize,
    ) -> GpuResult<BatchInfo> {
        let (gpu, b, d) = (&self.gpu, &mut self.b, m.d);
        let n = x.len() / m.pixels();
        let scale = 1.0 / n as f32;
        Self::encode_inputs(gpu, b, m, x, eps)?;
        for (slot, len) in [
            (&mut b.u, n * d),
            (&mut b.gu, n * d),
            (&mut b.dl, n * m.pixels()),
            (&mut b.ll, n),
            (&mut b.kl, n),
            (&mut b.dout, n * 2 * d),
            (&mut b.g_gen, n_gen),
            (&mut b.g_enc, n_enc),
        ] {
            ensure(gpu, slot, len)?;
        }
        {
            let Buffers {
                gen: Some(gen),
                noise: Some(noise),
                u: Some(u),
                ws_enc,
                ws_gen,
                ..
            } = b
            else {
                unreachable!("made above");
            };
            let enc_out = ws_enc.output().expect("forward ran");
            let (ni, one, di) = (n as i32, 1i32, d as i32);
            let mut l = gpu.stream.launch_builder(gpu.k("reparam"));
            l.arg(enc_out)
                .arg(&*noise)
                .arg(&mut *u)
                .arg(&ni)
                .arg(&one)
                .arg(&di);
            // SAFETY: enc_out holds n × 2d values, noise and u n × d.
            unsafe { l.launch(grid(n * d)) }?;
            m.gen.forward_gpu(gpu, gen, u, n, ws_gen)?;
        }
        Self::bernoulli(gpu, b, n, (n, m.pixels()), -scale)?;
        let Buffers {
            gen: Some(gen),
            enc: Some(enc),
            noise: Some(noise),
            gu: Some(du),
            dl: Some(dl),
            kl: Some(kl),
            dout: Some(dout),
            g_gen: Some(gg),
            g_enc: Some(ge),
            ws_enc,
            ws_gen,
            ..
        } = b
        else {
            unreachable!("made above");
        };
        gpu.zero(gg)?;
        m.gen
            .backward_gpu(gpu, gen, ws_gen, dl, Some(&mut *gg), Some(&mut *du))?;
        let enc_out = ws_enc.output().expect("forward ran");
        let (ni, di) = (n as i32, d as i32);
        let mut l = gpu.stream.launch_builder(gpu.k("gaussian_encoder_grad"));
        l.arg(enc_out)
            .arg(&*noise)
            .arg(&*du)
            .arg(&mut *dout)
            .arg(&mut *kl)
            .arg(&ni)
            .arg(&di)
            .arg(&scale);
        // SAFETY: enc_out and dout hold n × 2d values, noise and du n × d, kl n.
        unsafe { l.launch(grid(n)) }?;
        gpu.zero(ge)?;
        m.enc
            .backward_gpu(gpu, enc, ws_enc, dout, Some(&mut *ge), None)?;
        let kl = sum(self.get(|b| &b.kl, n)?);
        let ll = sum(self.get(|b| &b.ll, n)?);
        Ok(BatchInfo {
            loss: (kl - ll) / n as f64,
            displacement: 0.0,
        })
    }

    /// SAGD's generator gradient on the binarised images `x` (b × pixels), encoder frozen, from
    /// `noise` laid out as the CPU's [`sagd_batch`](crate::bernoulli::sagd_batch) reads it
    /// (ε, ρ₀, then each step's η); written into `g_dec`.
    pub fn sagd_batch(
        &mut self,
        m: &BernoulliVae,
        p: &VaeParams,
        x: &[f32],
        chains: &Chains,
        noise: &[f32],
        g_dec: &mut [f32],
    ) -> GpuResult<BatchInfo> {
        self.load_params(p)?;
        let info = self.sagd_pass(m, x, chains, noise, p.dec.len())?;
        let Some(gg) = &self.b.g_gen else {
            unreachable!("made by the pass");
        };
        self.gpu.download_into(gg, g_dec)?;
        Ok(info)
    }
}
