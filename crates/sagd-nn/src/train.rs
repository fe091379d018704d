//! One training loop for every method; the methods differ only in how they estimate the gradient
//! ([`GradientEstimator`]). The update is the core crate's Adam transform.

use sagd::error::{Result, SagdError};
use sagd::hmc::HmcSettings;
use sagd::langevin::{ChainSet, Kernel, LangevinSettings, Momentum, Scheme};
use sagd::model::{AnchoredTarget, MaximumLikelihood, Problem};
use sagd::optim::{Optimizer, Transform};
use sagd::rng::NormalStream;
use serde::{Deserialize, Serialize};

use crate::math;
use crate::net::{Workspace, WorkspacePool};
use crate::vae::{DecoderPosterior, Vae, VaeParams};

/// The fine-tuning methods of Table 1.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Method {
    /// The evidence lower bound, one reparameterised sample (encoder and decoder).
    Vae,
    /// The importance-weighted bound with k samples (encoder and decoder).
    Iwae,
    /// Decoder only; HMC chains from an encoder draw at every update.
    Hmc,
    /// Decoder only; persistent underdamped Langevin chains (SAGD).
    Sagd,
}

impl Method {
    /// All, in table order.
    pub const ALL: [Method; 4] = [Method::Vae, Method::Iwae, Method::Hmc, Method::Sagd];

    /// The name as the command line spells it.
    pub fn name(self) -> &'static str {
        match self {
            Method::Vae => "vae",
            Method::Iwae => "iwae",
            Method::Hmc => "hmc",
            Method::Sagd => "sagd",
        }
    }
}

impl std::str::FromStr for Method {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        Method::ALL
            .into_iter()
            .find(|m| m.name() == s.trim().to_ascii_lowercase())
            .ok_or_else(|| format!("unknown method `{s}`: use vae, iwae, hmc or sagd"))
    }
}

/// Settings of the methods: experiment E2's, except that SAGD integrates with BAOAB and returns the
/// average of its last half of iterates (measured better over 30 replications; see the README).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MethodSettings {
    /// IWAE's importance samples k.
    pub iwae_k: usize,
    /// SAGD's friction γ.
    pub sagd_gamma: f64,
    /// SAGD's Langevin step δ.
    pub sagd_delta: f64,
    /// SAGD's steps per update K.
    pub sagd_k: usize,
    /// SAGD's burn-in steps before the first update.
    pub sagd_burn_in: usize,
    /// SAGD's integrator.
    pub sagd_scheme: Scheme,
    /// SAGD's initial momentum.
    pub sagd_rho0: Momentum,
    /// HMC's leapfrog steps per proposal.
    pub hmc_l: usize,
    /// HMC's leapfrog step (the SAGD δ by default).
    pub hmc_eps: f64,
    /// HMC's transitions per update (the SAGD K by default).
    pub hmc_k: usize,
    /// SAGD returns the average of its iterates over this final fraction of the updates (0: the
    /// last iterate; Algorithm 1 averages all of them).
    pub sagd_average: f64,
}

impl Default for MethodSettings {
    fn default() -> Self {
        MethodSettings {
            iwae_k: 50,
            sagd_gamma: 2.0,
            sagd_delta: 0.02,
            sagd_k: 10,
            sagd_burn_in: 50,
            sagd_scheme: Scheme::Baoab,
            sagd_rho0: Momentum::Normal,
            hmc_l: 5,
            hmc_eps: 0.02,
            hmc_k: 10,
            sagd_average: 0.5,
        }
    }
}

/// A gradient estimate of the training loss at the current parameters.
pub trait GradientEstimator {
    /// Whether the encoder is trained too.
    fn trains_encoder(&self) -> bool;
    /// Adds the gradient of the loss on the data points `batch` into `g_dec` (and `g_enc`), and
    /// returns the loss estimate.
    fn estimate(
        &mut self,
        p: &VaeParams,
        batch: &[usize],
        g_dec: &mut [f32],
        g_enc: &mut [f32],
    ) -> Result<f64>;
    /// Method diagnostics (acceptance rates, chain states), as JSON.
    fn diagnostics(&self) -> serde_json::Value {
        serde_json::Value::Null
    }
}

/// The rows `batch` of a row-major matrix with `d` columns, into `out`.
pub fn gather_rows(x: &[f32], d: usize, batch: &[usize], out: &mut Vec<f32>) {
    out.clear();
    for &i in batch {
        out.extend_from_slice(&x[i * d..(i + 1) * d]);
    }
}

/// One reparameterised draw u = μ + σ ε per data point (n × d), from the current encoder.
pub fn encoder_draw(
    vae: &Vae,
    p: &VaeParams,
    x: &[f32],
    stream: &mut NormalStream,
    ws: &mut Workspace,
) -> Vec<f32> {
    let d = vae.d;
    let n = x.len() / d;
    vae.enc.forward(&p.enc, x, n, ws);
    let mut eps = vec![0.0f32; n * d];
    stream.fill(&mut eps);
    let out = ws.output();
    let mut u = vec![0.0f32; n * d];
    for i in 0..n {
        for j in 0..d {
            let (mu, lv) = (out[i * 2 * d + j], out[i * 2 * d + d + j]);
            u[i * d + j] = mu + (0.5 * lv).exp() * eps[i * d + j];
        }
    }
    u
}

/// The ELBO (k = 1) or the IWAE bound (k > 1), reparameterised, encoder and decoder.
pub struct BoundEstimator<'a> {
    vae: &'a Vae,
    x: &'a [f32],
    k: usize,
    stream: NormalStream,
    xb: Vec<f32>,
    eps: Vec<f32>,
    pool: WorkspacePool<BoundScratch>,
}

/// One thread's buffers for [`BoundEstimator`]'s chunks.
#[derive(Debug, Default)]
struct BoundScratch {
    ws_enc: Workspace,
    ws_dec: Workspace,
    sd: Vec<f32>,
    u: Vec<f32>,
    dh: Vec<f32>,
    du: Vec<f32>,
    wts: Vec<f32>,
    dout: Vec<f32>,
}

/// Groups of chunks per update: a group sums its chunks' gradients in order, then the groups'
/// sums are added in order. The grouping is fixed by the batch size, never by the threads.
const GROUPS: usize = 16;

impl<'a> BoundEstimator<'a> {
    /// k = 1: the VAE's ELBO; k > 1: the IWAE bound with k samples.
    pub fn new(vae: &'a Vae, x: &'a [f32], k: usize, seed: u64) -> Self {
        BoundEstimator {
            vae,
            x,
            k: k.max(1),
            stream: NormalStream::new(seed),
            xb: Vec::new(),
            eps: Vec::new(),
            pool: WorkspacePool::default(),
        }
    }

    /// The loss (summed over the chunk's points) and its gradients, added into `gd` and `ge`, for
    /// the points `x` with noise `eps` (k draws per point, point-major); `nf` is the batch size.
    #[allow(clippy::too_many_arguments)]
    fn chunk(
        &self,
        p: &VaeParams,
        x: &[f32],
        eps: &[f32],
        nf: f32,
        s: &mut BoundScratch,
        gd: &mut [f32],
        ge: &mut [f32],
    ) -> f64 {
        let (d, k) = (self.vae.d, self.k);
        let np = x.len() / d;
        let rows = np * k;
        self.vae.enc.forward(&p.enc, x, np, &mut s.ws_enc);
        let enc = s.ws_enc.output();
        s.sd.resize(np * d, 0.0);
        for (i, sd) in s.sd.chunks_exact_mut(d).enumerate() {
            for (j, v) in sd.iter_mut().enumerate() {
                *v = (0.5 * enc[i * 2 * d + d + j]).exp();
            }
        }
        // Row i·k + s is sample s of point i, u = μ + σ ε.
        s.u.resize(rows * d, 0.0);
        for (r, (u, e)) in s.u.chunks_exact_mut(d).zip(eps.chunks_exact(d)).enumerate() {
            let i = r / k;
            for j in 0..d {
                u[j] = enc[i * 2 * d + j] + s.sd[i * d + j] * e[j];
            }
        }
        self.vae.dec.forward(&p.dec, &s.u, rows, &mut s.ws_dec);
        let h = s.ws_dec.output();
        s.dh.resize(rows * d, 0.0);
        s.wts.resize(rows, 0.0);
        let mut loss = 0.0f64;
        for i in 0..np {
            let xi = &x[i * d..(i + 1) * d];
            let lv = &enc[i * 2 * d + d..(i + 1) * 2 * d];
            if k == 1 {
                // −ELBO per point: ½‖x − h‖² + KL(N(μ, σ²) ‖ N(0, I)).
                for j in 0..d {
                    let (res, mu) = (xi[j] - h[i * d + j], enc[i * 2 * d + j]);
                    loss += 0.5 * (res * res) as f64
                        + 0.5 * (mu * mu + lv[j].exp() - lv[j] - 1.0) as f64;
                    s.dh[i * d + j] = -res / nf;
                }
                continue;
            }
            // log w = −½‖x − h‖² − ½‖u‖² + ½‖ε‖² + ½ Σ log σ²; loss = −Σ_i log mean_s w.
            let w = &mut s.wts[i * k..(i + 1) * k];
            for (sm, lw) in w.iter_mut().enumerate() {
                let r = (i * k + sm) * d;
                let mut acc = 0.0f32;
                for j in 0..d {
                    let res = xi[j] - h[r + j];
                    acc += -0.5 * res * res - 0.5 * s.u[r + j] * s.u[r + j]
                        + 0.5 * eps[r + j] * eps[r + j]
                        + 0.5 * lv[j];
                }
                *lw = acc;
            }
            let m = w.iter().copied().fold(f32::NEG_INFINITY, f32::max);
            math::exp_shifted(w, m);
            let sum: f64 = w.iter().map(|v| *v as f64).sum();
            loss -= m as f64 + sum.ln() - (k as f64).ln();
            // The normalised weight w̃ enters as a constant factor of each sample's gradient.
            for (sm, lw) in w.iter_mut().enumerate() {
                *lw = (*lw as f64 / sum) as f32;
                let r = (i * k + sm) * d;
                for j in 0..d {
                    s.dh[r + j] = -*lw * (xi[j] - h[r + j]) / nf;
                }
            }
        }
        s.du.resize(rows * d, 0.0);
        self.vae
            .dec
            .backward(&p.dec, &mut s.ws_dec, &s.dh, Some(gd), Some(&mut s.du));
        // Back through the reparameterisation to (μ, log σ²), plus the KL term (k = 1) or the
        // direct ∂/∂u and ∂/∂log σ² terms of log w (k > 1).
        s.dout.clear();
        s.dout.resize(np * 2 * d, 0.0);
        let enc = s.ws_enc.output();
        for i in 0..np {
            for sm in 0..k {
                let wt = if k == 1 { 0.0 } else { s.wts[i * k + sm] };
                for j in 0..d {
                    let r = (i * k + sm) * d + j;
                    let du = s.du[r] + wt * s.u[r] / nf;
                    s.dout[i * 2 * d + j] += du;
                    s.dout[i * 2 * d + d + j] += du * eps[r] * 0.5 * s.sd[i * d + j];
                }
            }
            for j in 0..d {
                let (mu, lv) = (enc[i * 2 * d + j], enc[i * 2 * d + d + j]);
                if k == 1 {
                    s.dout[i * 2 * d + j] += mu / nf;
                    s.dout[i * 2 * d + d + j] += 0.5 * (lv.exp() - 1.0) / nf;
                } else {
                    s.dout[i * 2 * d + d + j] -= 0.5 / nf;
                }
            }
        }
        self.vae
            .enc
            .backward(&p.enc, &mut s.ws_enc, &s.dout, Some(ge), None);
        loss
    }
}

impl GradientEstimator for BoundEstimator<'_> {
    fn trains_encoder(&self) -> bool {
        true
    }

    fn estimate(
        &mut self,
        p: &VaeParams,
        batch: &[usize],
        g_dec: &mut [f32],
        g_enc: &mut [f32],
    ) -> Result<f64> {
        use rayon::prelude::*;
        let (d, k) = (self.vae.d, self.k);
        let n = batch.len();
        gather_rows(self.x, d, batch, &mut self.xb);
        // The noise, drawn in one stream before the parallel part.
        self.eps.resize(k * n * d, 0.0);
        self.stream.fill(&mut self.eps);
        self.pool.ensure(rayon::current_num_threads());
        // Chunks of whole points (about `chunk_rows` decoder rows), each run start to finish —
        // encoder, samples, decoder, weights, both backward passes — while its buffers are in
        // cache; chunks in fixed groups.
        let per_chunk = (self.vae.chunk_rows() / k).max(1);
        let chunks = n.div_ceil(per_chunk);
        let groups = chunks.min(GROUPS);
        let (nd, ne) = (g_dec.len(), g_enc.len());
        let this = &*self;
        let parts: Vec<(f64, Vec<f32>, Vec<f32>)> = (0..groups)
            .into_par_iter()
            .map(|g| {
                this.pool.with(|s| {
                    let (mut gd, mut ge) = (vec![0.0f32; nd], vec![0.0f32; ne]);
                    let mut loss = 0.0;
                    for c in g * chunks / groups..(g + 1) * chunks / groups {
                        let (i0, i1) = (c * per_chunk, ((c + 1) * per_chunk).min(n));
                        let x = &this.xb[i0 * d..i1 * d];
                        let eps = &this.eps[i0 * k * d..i1 * k * d];
                        loss += this.chunk(p, x, eps, n as f32, s, &mut gd, &mut ge);
                    }
                    (loss, gd, ge)
                })
            })
            .collect();
        let mut loss = 0.0f64;
        for (l, gd, ge) in parts {
            loss += l;
            g_dec.iter_mut().zip(&gd).for_each(|(a, b)| *a += b);
            g_enc.iter_mut().zip(&ge).for_each(|(a, b)| *a += b);
        }
        Ok(loss / n as f64)
    }
}

/// HMC (fresh chains from an encoder draw at every update) or SAGD (persistent chains) on the
/// decoder's posterior; the gradient is the chain average of ∇θ of −log p(x | u; θ).
pub struct ChainEstimator<'a> {
    vae: &'a Vae,
    x: &'a [f32],
    chains: ChainSet<f32>,
    kernel: Kernel<f32>,
    steps: usize,
    fresh_from_encoder: bool,
    stream: NormalStream,
    ws: Workspace,
    grad: Vec<f64>,
    acceptance: Vec<f64>,
    divergences: usize,
    started: bool,
    burn_in: usize,
    momentum: Momentum,
    xb: Vec<f32>,
    fused: bool,
    reused: usize,
}

impl<'a> ChainEstimator<'a> {
    /// HMC: K transitions of L leapfrog steps of size ε from an encoder draw, every update.
    pub fn hmc(vae: &'a Vae, x: &'a [f32], s: &MethodSettings, seed: u64) -> Result<Self> {
        let kernel = HmcSettings {
            step_size: s.hmc_eps,
            n_leapfrog: s.hmc_l,
        }
        .kernel::<f32>()?;
        Ok(Self::with(vae, x, kernel, s.hmc_k, true, 0, seed))
    }

    /// SAGD: persistent underdamped Langevin chains started from an encoder draw, burn-in once.
    pub fn sagd(vae: &'a Vae, x: &'a [f32], s: &MethodSettings, seed: u64) -> Result<Self> {
        let kernel = LangevinSettings {
            scheme: s.sagd_scheme,
            gamma: s.sagd_gamma,
        }
        .kernel::<f32>(s.sagd_delta)?;
        let mut e = Self::with(vae, x, kernel, s.sagd_k, false, s.sagd_burn_in, seed);
        e.momentum = s.sagd_rho0;
        // These schemes evaluate the gradient at the state they end the step in.
        e.fused = s.sagd_scheme != Scheme::Ubu;
        Ok(e)
    }

    fn with(
        vae: &'a Vae,
        x: &'a [f32],
        kernel: Kernel<f32>,
        steps: usize,
        fresh: bool,
        burn_in: usize,
        seed: u64,
    ) -> Self {
        let n = x.len() / vae.d;
        let mut chains = ChainSet::new(n, vae.d, seed);
        // Blocks of rows step in parallel; the block boundaries, not the threads, fix the results.
        chains.set_rows_per_block(vae.chunk_rows());
        ChainEstimator {
            vae,
            x,
            chains,
            kernel,
            steps: steps.max(1),
            fresh_from_encoder: fresh,
            stream: NormalStream::new(seed ^ 0xA5A5_5A5A_DEAD_BEEF),
            ws: Workspace::default(),
            grad: Vec::new(),
            acceptance: Vec::new(),
            divergences: 0,
            started: false,
            burn_in,
            momentum: Momentum::Normal,
            xb: Vec::new(),
            fused: false,
            reused: 0,
        }
    }
}

impl GradientEstimator for ChainEstimator<'_> {
    fn trains_encoder(&self) -> bool {
        false
    }

    fn estimate(
        &mut self,
        p: &VaeParams,
        batch: &[usize],
        g_dec: &mut [f32],
        _g_enc: &mut [f32],
    ) -> Result<f64> {
        let d = self.vae.d;
        let full =
            batch.len() == self.chains.n_chains() && batch.iter().enumerate().all(|(k, &i)| k == i);
        gather_rows(self.x, d, batch, &mut self.xb);
        let model = DecoderPosterior::new(&self.vae.dec, &self.xb);
        let problem = MaximumLikelihood::new(&model, 1);
        let target = AnchoredTarget {
            problem: &problem,
            anchor: &p.dec[..],
        };
        if !self.started {
            // Every chain starts from an encoder draw and burns in under the pre-trained decoder.
            let all = DecoderPosterior::new(&self.vae.dec, self.x);
            let all_problem = MaximumLikelihood::new(&all, 1);
            let all_target = AnchoredTarget {
                problem: &all_problem,
                anchor: &p.dec[..],
            };
            let u0 = encoder_draw(self.vae, p, self.x, &mut self.stream, &mut self.ws);
            self.chains.init(&all_target, &u0, self.momentum)?;
            self.divergences += self
                .chains
                .burn_in(&all_target, &self.kernel, self.burn_in)?;
            self.started = true;
        }
        let mut sub = if full {
            std::mem::replace(&mut self.chains, ChainSet::new(0, d, 0))
        } else {
            self.chains.gather(batch)
        };
        if self.fresh_from_encoder {
            let u0 = encoder_draw(self.vae, p, &self.xb, &mut self.stream, &mut self.ws);
            sub.set_positions(&target, &u0)?;
        } else {
            // θ moved since the chains' gradients were computed.
            sub.evaluate(&target)?;
        }
        self.grad.clear();
        self.grad.resize(p.dec.len(), 0.0);
        let mut logp = 0.0;
        let mut result = Ok(());
        model.fuse_theta_grad(self.fused);
        // Without fusion, each step's θ-gradient reuses the forward pass at the step's last
        // evaluation for the chains that stayed there (HMC: the accepted proposals).
        model.remember_passes(!self.fused);
        // Each block of chains takes all K steps in one task; after each, ∇θ f at its new states.
        let (fused, theta) = (self.fused, &p.dec[..]);
        let run = sub.run_steps(&target, &self.kernel, self.steps, |first, u, diverged| {
            match fused.then(|| model.take_block_theta_grad(first)).flatten() {
                // f = −log p: the fused pass gave +∇θ log p at the new states.
                Some(mut g) if diverged == 0 => {
                    g.iter_mut().for_each(|v| *v = -*v);
                    Ok(g)
                }
                // Without fusion, or after a reset chain: a pass at the kept states.
                _ => {
                    let mut g = vec![0.0f32; theta.len()];
                    problem.add_grad_f(theta, first, u, &mut g).map(|()| g)
                }
            }
        });
        match run {
            Ok((infos, parts)) => {
                for info in &infos {
                    self.divergences += info.divergences;
                    logp += info.mean_log_density;
                    if let Some(a) = info.acceptance {
                        self.acceptance.push(a);
                    }
                }
                // Summed step by step, blocks in order.
                for part in parts.into_iter().flatten() {
                    match part {
                        Ok(g) => self
                            .grad
                            .iter_mut()
                            .zip(&g)
                            .for_each(|(a, b)| *a += *b as f64),
                        Err(e) => result = Err(SagdError::Model(e)),
                    }
                }
            }
            Err(e) => result = Err(e),
        }
        model.fuse_theta_grad(false);
        model.remember_passes(false);
        self.reused += model.reused_passes();
        if full {
            self.chains = sub;
        } else {
            self.chains.scatter(&sub, batch)?;
        }
        result?;
        let scale = 1.0 / (self.steps * batch.len()) as f64;
        for (g, v) in g_dec.iter_mut().zip(&self.grad) {
            *g += (v * scale) as f32;
        }
        Ok(-logp / self.steps as f64)
    }

    fn diagnostics(&self) -> serde_json::Value {
        let pos = self.chains.positions();
        serde_json::json!({
            "acceptance": (!self.acceptance.is_empty()).then(|| self.acceptance.iter().sum::<f64>() / self.acceptance.len() as f64),
            "divergences": self.divergences,
            "reused_forward_passes": self.reused,
            "chain_abs_max": pos.iter().fold(0.0f32, |m, v| m.max(v.abs())),
        })
    }
}

/// What a training run did.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct TrainStats {
    /// Updates taken.
    pub iterations: usize,
    /// The loss estimate at the last update.
    pub final_loss: f64,
}

/// The shared loop: `epochs` passes over the data in minibatches of `batch_size` (a new random
/// order every epoch from `seed`; the full batch in order when `batch_size` ≥ n), one Adam update
/// (learning rate `lr`) of the decoder, and of the encoder if the estimator trains it, per batch.
/// With `average_tail` > 0 the parameters returned are the average of the iterates over that final
/// fraction of the updates (Polyak-Ruppert tail averaging). `progress(updates, θ and φ, loss)` is
/// called after every update, with the current iterate.
#[allow(clippy::too_many_arguments)]
pub fn train(
    vae: &Vae,
    p: &mut VaeParams,
    est: &mut dyn GradientEstimator,
    n: usize,
    epochs: usize,
    batch_size: usize,
    lr: f64,
    average_tail: f64,
    seed: u64,
    progress: &mut dyn FnMut(usize, &VaeParams, f64),
) -> Result<TrainStats> {
    use rand::seq::SliceRandom;
    use rand::SeedableRng;
    let adam = Optimizer::adam();
    let mut st_dec = adam.init(vae.dec.n_params());
    let mut st_enc = adam.init(vae.enc.n_params());
    let mut g_dec = vec![0.0f32; vae.dec.n_params()];
    let mut g_enc = vec![0.0f32; vae.enc.n_params()];
    let mut loss = f64::NAN;
    let mut rng = rand_xoshiro::Xoshiro256PlusPlus::seed_from_u64(seed);
    let mut order: Vec<usize> = (0..n).collect();
    let bs = batch_size.clamp(1, n.max(1));
    let total = epochs * n.div_ceil(bs);
    let average_from = if average_tail > 0.0 {
        total - ((average_tail.min(1.0) * total as f64).round() as usize).max(1)
    } else {
        usize::MAX
    };
    let mut avg_dec = vec![0.0f64; p.dec.len()];
    let mut avg_enc = vec![0.0f64; p.enc.len()];
    let mut averaged = 0usize;
    let mut it = 0;
    for _ in 0..epochs {
        if bs < n {
            order.shuffle(&mut rng);
        }
        for batch in order.chunks(bs) {
            g_dec.iter_mut().for_each(|v| *v = 0.0);
            g_enc.iter_mut().for_each(|v| *v = 0.0);
            loss = est.estimate(p, batch, &mut g_dec, &mut g_enc)?;
            it += 1;
            if !g_dec.iter().chain(&g_enc).all(|v| v.is_finite()) {
                return Err(SagdError::NonFiniteUpdate { iteration: it });
            }
            adam.direction(&mut g_dec, &mut st_dec);
            for (w, g) in p.dec.iter_mut().zip(&g_dec) {
                *w -= (lr * *g as f64) as f32;
            }
            if est.trains_encoder() {
                adam.direction(&mut g_enc, &mut st_enc);
                for (w, g) in p.enc.iter_mut().zip(&g_enc) {
                    *w -= (lr * *g as f64) as f32;
                }
            }
            if it > average_from {
                averaged += 1;
                let w = 1.0 / averaged as f64;
                avg_dec
                    .iter_mut()
                    .zip(&p.dec)
                    .for_each(|(a, v)| *a += (*v as f64 - *a) * w);
                avg_enc
                    .iter_mut()
                    .zip(&p.enc)
                    .for_each(|(a, v)| *a += (*v as f64 - *a) * w);
            }
            progress(it, p, loss);
        }
    }
    if averaged > 0 {
        p.dec
            .iter_mut()
            .zip(&avg_dec)
            .for_each(|(v, a)| *v = *a as f32);
        if est.trains_encoder() {
            p.enc
                .iter_mut()
                .zip(&avg_enc)
                .for_each(|(v, a)| *v = *a as f32);
        }
    }
    Ok(TrainStats {
        iterations: it,
        final_loss: loss,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A gradient of 1 on every decoder parameter: Adam then moves each by −lr per update.
    struct Constant;
    impl GradientEstimator for Constant {
        fn trains_encoder(&self) -> bool {
            false
        }
        fn estimate(
            &mut self,
            _p: &VaeParams,
            _b: &[usize],
            g: &mut [f32],
            _e: &mut [f32],
        ) -> Result<f64> {
            g.iter_mut().for_each(|v| *v += 1.0);
            Ok(0.0)
        }
    }

    #[test]
    fn tail_averaging_returns_the_mean_of_the_last_iterates() {
        let vae = Vae::new(1, 2);
        let p0 = vae.init(1);
        let (lr, updates) = (0.01, 10);
        let mut last = p0.clone();
        train(
            &vae,
            &mut last,
            &mut Constant,
            4,
            updates,
            4,
            lr,
            0.0,
            0,
            &mut |_, _, _| {},
        )
        .unwrap();
        let mut avg = p0.clone();
        train(
            &vae,
            &mut avg,
            &mut Constant,
            4,
            updates,
            4,
            lr,
            0.5,
            0,
            &mut |_, _, _| {},
        )
        .unwrap();
        for ((a, l), z) in avg.dec.iter().zip(&last.dec).zip(&p0.dec) {
            // Iterates z − lr·t (Adam's first steps on a constant gradient are lr each); the last
            // five, t = 6..10, average to z − 8·lr.
            assert!((l - (z - 10.0 * lr as f32)).abs() < 1e-5, "{l} vs {z}");
            assert!((a - (z - 8.0 * lr as f32)).abs() < 1e-5, "{a} vs {z}");
        }
        assert_eq!(avg.enc, p0.enc);
    }

    #[test]
    fn the_fused_sagd_gradient_equals_the_separate_pass() {
        let vae = Vae::new(1, 16);
        let p = vae.init(2);
        // Three blocks of chains.
        let x: Vec<f32> = (0..1100)
            .map(|i| ((i as f32) * 0.37).sin() * 2.0 + 1.0)
            .collect();
        let batch: Vec<usize> = (0..1100).collect();
        let s = MethodSettings::default();
        let run = |fused: bool| {
            let mut e = ChainEstimator::sagd(&vae, &x, &s, 5).unwrap();
            e.fused = fused;
            let mut g = vec![0.0f32; p.dec.len()];
            let mut ge = vec![0.0f32; p.enc.len()];
            let mut q = p.clone();
            for _ in 0..3 {
                g.iter_mut().for_each(|v| *v = 0.0);
                e.estimate(&q, &batch, &mut g, &mut ge).unwrap();
                // Move θ as training would, so that later estimates re-evaluate the chains.
                q.dec.iter_mut().zip(&g).for_each(|(w, gi)| *w -= 1e-3 * gi);
            }
            (g, e.chains.positions().to_vec())
        };
        let (g1, c1) = run(true);
        let (g2, c2) = run(false);
        assert_eq!(
            c1, c2,
            "the chains do not depend on how the gradient is taken"
        );
        let scale = g2.iter().fold(0.0f32, |m, v| m.max(v.abs()));
        for (a, b) in g1.iter().zip(&g2) {
            assert!((a - b).abs() <= 1e-4 * scale, "{a} vs {b}");
        }
    }
}
