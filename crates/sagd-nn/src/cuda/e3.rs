//! E3's minibatch passes on the GPU (MNIST): the CPU's [`vae_batch`](crate::mnist::model::vae_batch)
//! and [`sagd_batch`](crate::mnist::model::sagd_batch) step for step, from the same binarised
//! images and the same noise drawn on the host, so both engines compute the same gradients to
//! float rounding. A whole minibatch is one pass over all its rows: 4000 chain states for SAGD's
//! 20 chains of 200 images.

use cudarc::driver::{CudaSlice, PushKernelArg};
use sagd::langevin::Scheme;

use super::{ensure, grid, put, Gpu, GpuResult, GpuWorkspace};
use crate::mnist::model::{BatchInfo, Chains, E3};
use crate::mnist::PIXELS;
use crate::train::{AdamStep, TrainState};
use crate::vae::VaeParams;

/// Device buffers of E3's passes, kept between minibatches.
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

/// E3's passes on one GPU.
pub struct GpuE3 {
    gpu: Gpu,
    b: Buffers,
    host: Vec<f32>,
    held: Option<Held>,
}

/// What a minibatch pass computes: the VAE's ELBO, or SAGD's chains.
#[derive(Clone, Copy, Debug)]
pub enum E3Pass<'c> {
    /// The negative ELBO; both networks' gradients.
    Vae,
    /// SAGD's generator gradient from these chains.
    Sagd(&'c Chains),
}

/// `v` summed in f64.
fn sum(v: &[f32]) -> f64 {
    v.iter().map(|x| *x as f64).sum()
}

impl GpuE3 {
    /// E3's passes on `gpu`.
    pub fn new(gpu: Gpu) -> Self {
        GpuE3 {
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
        m: &E3,
        x: &[f32],
        noise: &[f32],
    ) -> GpuResult<()> {
        put(gpu, &mut b.x, x)?;
        put(gpu, &mut b.noise, noise)?;
        let (Some(enc), Some(xd)) = (&b.enc, &b.x) else {
            unreachable!("parameters loaded, images put above");
        };
        m.enc
            .forward_gpu(gpu, enc, xd, x.len() / PIXELS, &mut b.ws_enc)
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
    /// rows of the generator's last output.
    fn bernoulli(
        gpu: &Gpu,
        b: &mut Buffers,
        rows: usize,
        images: usize,
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
        let (bi, px) = (images as i32, PIXELS as i32);
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
        // SAFETY: logits and dl hold rows × 784 values, x images × 784, ll rows.
        unsafe { l.launch(cfg) }?;
        Ok(())
    }

    /// The VAE's mean negative ELBO over the binarised images `x` (b × 784) with the noise `eps`
    /// (b × d), its gradients written into `g_dec` (the generator's) and `g_enc`: the CPU's
    /// [`vae_batch`](crate::mnist::model::vae_batch).
    pub fn vae_batch(
        &mut self,
        m: &E3,
        p: &VaeParams,
        x: &[f32],
        eps: &[f32],
        g_dec: &mut [f32],
        g_enc: &mut [f32],
    ) -> GpuResult<BatchInfo> {
        self.load_params(p)?;
        let info = self.pass(m, x, eps, E3Pass::Vae, p.dec.len(), p.enc.len())?;
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
        m: &E3,
        x: &[f32],
        noise: &[f32],
        what: E3Pass<'_>,
        n_gen: usize,
        n_enc: usize,
    ) -> GpuResult<BatchInfo> {
        match what {
            E3Pass::Vae => self.vae_pass(m, x, noise, n_gen, n_enc),
            E3Pass::Sagd(chains) => self.sagd_pass(m, x, chains, noise, n_gen),
        }
    }

    fn vae_pass(
        &mut self,
        m: &E3,
        x: &[f32],
        eps: &[f32],
        n_gen: usize,
        n_enc: usize,
    ) -> GpuResult<BatchInfo> {
        let (gpu, b, d) = (&self.gpu, &mut self.b, m.d);
        let n = x.len() / PIXELS;
        let scale = 1.0 / n as f32;
        Self::encode_inputs(gpu, b, m, x, eps)?;
        for (slot, len) in [
            (&mut b.u, n * d),
            (&mut b.gu, n * d),
            (&mut b.dl, n * PIXELS),
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
        Self::bernoulli(gpu, b, n, n, -scale)?;
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
        let mut l = gpu.stream.launch_builder(gpu.k("e3_vae_grad"));
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

    /// SAGD's generator gradient on the binarised images `x` (b × 784), encoder frozen, from
    /// `noise` laid out as the CPU's [`sagd_batch`](crate::mnist::model::sagd_batch) reads it
    /// (ε, ρ₀, then each step's η); written into `g_dec`.
    pub fn sagd_batch(
        &mut self,
        m: &E3,
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

    /// One whole training update on the device: the pass `what` on `x` and `noise` at the
    /// parameters it holds (loaded from `st` when it holds another state), then Adam's `step`
    /// on the generator (and the encoder for the VAE), parameters and moments staying there.
    /// Returns the pass and whether every gradient was finite (if not, nothing moved).
    pub fn train_step(
        &mut self,
        m: &E3,
        st: &TrainState,
        x: &[f32],
        noise: &[f32],
        what: E3Pass<'_>,
        step: AdamStep,
    ) -> GpuResult<(BatchInfo, bool)> {
        let encoder = matches!(what, E3Pass::Vae);
        let want = Held {
            updates: st.updates,
            encoder,
        };
        if self.held != Some(want) {
            self.load_params(&st.params)?;
            let gpu = &self.gpu;
            let [mg, vg, me, ve] = &mut self.b.moments;
            put(gpu, mg, &st.dec.opt.m)?;
            put(gpu, vg, &st.dec.opt.v)?;
            if encoder {
                put(gpu, me, &st.enc.opt.m)?;
                put(gpu, ve, &st.enc.opt.v)?;
            }
            self.held = Some(want);
        }
        let (n_gen, n_enc) = (st.params.dec.len(), st.params.enc.len());
        let info = self.pass(m, x, noise, what, n_gen, n_enc)?;
        let gpu = &self.gpu;
        let b = &mut self.b;
        let flag = ensure(gpu, &mut b.flag, 1)?;
        gpu.zero(flag)?;
        let grads: Vec<(&CudaSlice<f32>, usize)> = match (&b.g_gen, &b.g_enc) {
            (Some(g), Some(e)) if encoder => vec![(g, n_gen), (e, n_enc)],
            (Some(g), _) => vec![(g, n_gen)],
            _ => unreachable!("made by the pass"),
        };
        for (g, n) in grads {
            let ni = n as i32;
            let mut l = gpu.stream.launch_builder(gpu.k("flag_nonfinite"));
            l.arg(g).arg(&ni).arg(&mut *flag);
            // SAFETY: g holds n values, flag one.
            unsafe { l.launch(grid(n)) }?;
        }
        let mut f = [0.0f32];
        gpu.download_into(flag, &mut f)?;
        if f[0] != 0.0 {
            return Ok((info, false));
        }
        let Buffers {
            gen: Some(gen),
            enc: Some(enc),
            g_gen: Some(gg),
            g_enc,
            moments: [Some(mg), Some(vg), me, ve],
            ..
        } = b
        else {
            unreachable!("loaded above");
        };
        adam(gpu, gen, gg, mg, vg, n_gen, step, step.t.0)?;
        if encoder {
            let (Some(ge), Some(me), Some(ve)) = (g_enc, me, ve) else {
                unreachable!("loaded above");
            };
            adam(gpu, enc, ge, me, ve, n_enc, step, step.t.1)?;
        }
        self.held = Some(Held {
            updates: st.updates + 1,
            encoder,
        });
        Ok((info, true))
    }

    /// Writes the parameters and moments the device holds into `st`, if they are of its update
    /// count (else there is nothing newer on the device).
    pub fn sync(&mut self, st: &mut TrainState) -> GpuResult<()> {
        let Some(held) = self.held else {
            return Ok(());
        };
        if held.updates != st.updates {
            return Ok(());
        }
        let (gpu, b) = (&self.gpu, &self.b);
        let (Some(gen), Some(enc)) = (&b.gen, &b.enc) else {
            return Ok(());
        };
        gpu.download_into(gen, &mut st.params.dec)?;
        gpu.download_into(enc, &mut st.params.enc)?;
        let [mg, vg, me, ve] = &b.moments;
        let mut pairs = vec![(mg, &mut st.dec.opt.m), (vg, &mut st.dec.opt.v)];
        if held.encoder {
            pairs.push((me, &mut st.enc.opt.m));
            pairs.push((ve, &mut st.enc.opt.v));
        }
        for (dev, host) in pairs {
            if let Some(dev) = dev {
                gpu.stream
                    .memcpy_dtoh(&dev.slice(..host.len()), &mut host[..])?;
            }
        }
        Ok(())
    }

    fn sagd_pass(
        &mut self,
        m: &E3,
        x: &[f32],
        chains: &Chains,
        noise: &[f32],
        n_gen: usize,
    ) -> GpuResult<BatchInfo> {
        let (gpu, b, d) = (&self.gpu, &mut self.b, m.d);
        let n = x.len() / PIXELS;
        let rows = chains.per_image * n;
        let len = rows * d;
        let scale = 1.0 / rows as f32;
        Self::encode_inputs(gpu, b, m, x, noise)?;
        for (slot, size) in [
            (&mut b.u, len),
            (&mut b.u0, len),
            (&mut b.rho, len),
            (&mut b.gu, len),
            (&mut b.dl, rows * PIXELS),
            (&mut b.ll, rows),
            (&mut b.dist, rows),
            (&mut b.g_gen, n_gen),
        ] {
            ensure(gpu, slot, size)?;
        }
        {
            let Buffers {
                noise: Some(nz),
                u: Some(u),
                u0: Some(u0),
                rho: Some(rho),
                ws_enc,
                ..
            } = b
            else {
                unreachable!("made above");
            };
            let enc_out = ws_enc.output().expect("forward ran");
            let (ri, bi, di) = (rows as i32, n as i32, d as i32);
            let eps = nz.slice(..len);
            let mut l = gpu.stream.launch_builder(gpu.k("e3_chain_init"));
            l.arg(enc_out)
                .arg(&eps)
                .arg(&mut *u)
                .arg(&mut *u0)
                .arg(&ri)
                .arg(&bi)
                .arg(&di);
            // SAFETY: enc_out holds n × 2d values, the others rows × d.
            unsafe { l.launch(grid(len)) }?;
            gpu.stream
                .memcpy_dtod(&nz.slice(len..2 * len), &mut rho.slice_mut(..len))?;
        }
        let li = len as i32;
        let (delta, gamma) = (chains.delta as f32, chains.gamma as f32);
        let eta_at = |step: usize| (2 + step) * len..(3 + step) * len;
        // ρ = decay ρ + grad g + s η, or u += h ρ.
        let kick = |b: &mut Buffers, decay: f32, grad: f32, s: f32, step: usize| -> GpuResult<()> {
            let (Some(rho), Some(g), Some(nz)) = (&mut b.rho, &b.gu, &b.noise) else {
                unreachable!("made above");
            };
            let eta = nz.slice(eta_at(step));
            let mut l = gpu.stream.launch_builder(gpu.k("chain_kick"));
            l.arg(rho)
                .arg(g)
                .arg(&eta)
                .arg(&decay)
                .arg(&grad)
                .arg(&s)
                .arg(&li);
            // SAFETY: every buffer holds at least len values.
            unsafe { l.launch(grid(len)) }?;
            Ok(())
        };
        let drift = |b: &mut Buffers, h: f32| -> GpuResult<()> {
            let (Some(u), Some(rho)) = (&mut b.u, &b.rho) else {
                unreachable!("made above");
            };
            let mut l = gpu.stream.launch_builder(gpu.k("chain_drift_add"));
            l.arg(u).arg(rho).arg(&h).arg(&li);
            // SAFETY: as above.
            unsafe { l.launch(grid(len)) }?;
            Ok(())
        };
        // gu = ∇u log p(x | u) − u at the chains' states.
        let grad = |b: &mut Buffers| -> GpuResult<()> {
            {
                let (Some(gen), Some(u)) = (&b.gen, &b.u) else {
                    unreachable!("made above");
                };
                m.gen.forward_gpu(gpu, gen, u, rows, &mut b.ws_gen)?;
            }
            Self::bernoulli(gpu, b, rows, n, 1.0)?;
            let (Some(gen), Some(u), Some(gu), Some(dl)) = (&b.gen, &b.u, &mut b.gu, &b.dl) else {
                unreachable!("made above");
            };
            m.gen
                .backward_gpu(gpu, gen, &mut b.ws_gen, dl, None, Some(&mut *gu))?;
            let mut l = gpu.stream.launch_builder(gpu.k("posterior_grad"));
            l.arg(gu).arg(u).arg(&li);
            // SAFETY: as above.
            unsafe { l.launch(grid(len)) }?;
            Ok(())
        };
        if chains.scheme == Scheme::Baoab && chains.steps > 0 {
            let (c1, c2) = (
                (-chains.gamma * chains.delta).exp() as f32,
                (1.0 - (-2.0 * chains.gamma * chains.delta).exp()).sqrt() as f32,
            );
            let half = 0.5 * delta;
            grad(b)?;
            for step in 0..chains.steps {
                kick(b, 1.0, half, 0.0, step)?;
                drift(b, half)?;
                kick(b, c1, 0.0, c2, step)?;
                drift(b, half)?;
                grad(b)?;
                kick(b, 1.0, half, 0.0, step)?;
            }
        } else {
            let decay = 1.0 - gamma * delta;
            let noise_scale = (2.0 * chains.gamma * chains.delta).sqrt() as f32;
            for step in 0..chains.steps {
                grad(b)?;
                drift(b, delta)?;
                kick(b, decay, delta, noise_scale, step)?;
            }
        }
        // The generator's gradient of the mean of −log p(x | u) at the last states.
        {
            let (Some(gen), Some(u)) = (&b.gen, &b.u) else {
                unreachable!("made above");
            };
            m.gen.forward_gpu(gpu, gen, u, rows, &mut b.ws_gen)?;
        }
        Self::bernoulli(gpu, b, rows, n, -scale)?;
        let Buffers {
            gen: Some(gen),
            u: Some(u),
            u0: Some(u0),
            dl: Some(dl),
            dist: Some(dist),
            g_gen: Some(gg),
            ws_gen,
            ..
        } = b
        else {
            unreachable!("made above");
        };
        gpu.zero(gg)?;
        m.gen
            .backward_gpu(gpu, gen, ws_gen, dl, Some(&mut *gg), None)?;
        let (ri, di) = (rows as i32, d as i32);
        let mut l = gpu.stream.launch_builder(gpu.k("row_distance"));
        l.arg(&*u).arg(&*u0).arg(&mut *dist).arg(&ri).arg(&di);
        // SAFETY: u and u0 hold rows × d values, dist rows.
        unsafe { l.launch(grid(rows)) }?;
        let ll = sum(self.get(|b| &b.ll, rows)?);
        let dist = sum(self.get(|b| &b.dist, rows)?);
        Ok(BatchInfo {
            loss: -ll / rows as f64,
            displacement: dist / rows as f64,
        })
    }
}

/// Adam's step `step` (number `t`) on the first `n` parameters `theta` with gradient `g` and
/// moments `m`, `v`, as the host's rule takes it.
#[allow(clippy::too_many_arguments)]
pub(crate) fn adam(
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
