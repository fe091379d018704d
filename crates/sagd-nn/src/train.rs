//! One training loop for every method; the methods differ only in how they estimate the gradient
//! ([`GradientEstimator`]). The update is the core crate's Adam transform.

use rand::seq::SliceRandom;
use rand::SeedableRng;
use rand_xoshiro::Xoshiro256PlusPlus;
use sagd::error::{Result, SagdError};
use sagd::hmc::HmcSettings;
use sagd::langevin::{ChainSet, Kernel, LangevinSettings, Momentum, Scheme};
use sagd::model::{AnchoredTarget, MaximumLikelihood, Problem};
use sagd::optim::{Averaging, UpdateRule, UpdateState};
use sagd::rng::NormalStream;
use sagd::run::{decode, encode, Solver};
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
    /// The estimator's own state (random streams, chains), for checkpoints.
    fn save_state(&self) -> Result<Vec<u8>>;
    /// Restores [`GradientEstimator::save_state`].
    fn load_state(&mut self, bytes: &[u8]) -> Result<()>;
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

/// What a [`ChainEstimator`] carries from one update to the next.
#[derive(Serialize, Deserialize)]
struct ChainRecord {
    chains: ChainSet<f32>,
    stream: NormalStream,
    acceptance: Vec<f64>,
    divergences: usize,
    started: bool,
    reused: usize,
}

impl GradientEstimator for ChainEstimator<'_> {
    fn trains_encoder(&self) -> bool {
        false
    }

    fn save_state(&self) -> Result<Vec<u8>> {
        encode(&ChainRecord {
            chains: self.chains.clone(),
            stream: self.stream.clone(),
            acceptance: self.acceptance.clone(),
            divergences: self.divergences,
            started: self.started,
            reused: self.reused,
        })
    }

    fn load_state(&mut self, bytes: &[u8]) -> Result<()> {
        let r: ChainRecord = decode(bytes)?;
        let rows = self.chains.rows_per_block();
        self.chains = r.chains;
        self.chains.set_rows_per_block(rows);
        self.stream = r.stream;
        self.acceptance = r.acceptance;
        self.divergences = r.divergences;
        self.started = r.started;
        self.reused = r.reused;
        Ok(())
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
        // Without fusion, each step's θ-gradient reuses the forward pass at the step's last
        // evaluation for the chains that stayed there (HMC: the accepted proposals).
        model.remember_passes(!self.fused);
        // Each block of chains takes all K steps in one task; after each, ∇θ f at its new states:
        // the step's own evaluation computed it when fused (f = −log p, as the problem defines).
        let theta = &p.dec[..];
        let run = sub.run_steps(&target, &self.kernel, self.steps, self.fused, |b| {
            match b.aux {
                Some(g) => Ok(g.to_vec()),
                None => {
                    let mut g = vec![0.0f32; theta.len()];
                    problem
                        .add_grad_f(theta, b.first_row, b.positions, &mut g)
                        .map(|()| g)
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

/// How a network is trained: epochs of minibatches, one update of the parameters per batch by
/// the project's [`UpdateRule`] (Adam here) at a constant learning rate.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TrainSettings {
    /// Passes over the data.
    pub epochs: usize,
    /// Minibatch size (n or more: the full batch in order, one update per epoch).
    pub batch_size: usize,
    /// Adam's learning rate.
    pub lr: f64,
    /// The parameters returned: the last iterate, or an average of the final iterates.
    pub averaging: Averaging,
}

/// The state of a training run: parameters, both update rules' states, the shuffling stream.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TrainState {
    /// The current iterate (decoder θ and encoder φ).
    pub params: VaeParams,
    dec: UpdateState,
    enc: UpdateState,
    rng: Xoshiro256PlusPlus,
    order: Vec<usize>,
    /// Updates taken.
    pub updates: usize,
    /// The loss estimate at the last update.
    pub loss: f64,
}

/// What one training update did.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TrainInfo {
    /// Updates taken (1-based count of this one).
    pub update: usize,
    /// Epochs completed, when this update completed one.
    pub epoch_done: Option<usize>,
    /// The loss estimate.
    pub loss: f64,
}

/// Training of a VAE's networks by a [`GradientEstimator`] as a [`Solver`] for the project's
/// [`Runner`](sagd::run::Runner): every method of Table 1, and pre-training, go through it; they differ only in the
/// estimator. The estimator's own state (chains, streams) is checkpointed with the run.
pub struct Training<'a> {
    est: &'a mut dyn GradientEstimator,
    rule: UpdateRule,
    lr: f64,
    n: usize,
    batch: usize,
    total: usize,
    identity: Vec<u8>,
    g_dec: Vec<f32>,
    g_enc: Vec<f32>,
}

impl<'a> Training<'a> {
    /// Training of `vae` on `n` data points by `est`; `identity` names the run for checkpoints
    /// (its settings, seed and data).
    pub fn new(
        vae: &'a Vae,
        est: &'a mut dyn GradientEstimator,
        s: &TrainSettings,
        n: usize,
        identity: Vec<u8>,
    ) -> Result<Self> {
        let rule = UpdateRule::adam(s.averaging);
        rule.validate(0)?;
        let batch = s.batch_size.clamp(1, n.max(1));
        Ok(Training {
            est,
            rule,
            lr: s.lr,
            n,
            batch,
            total: s.epochs * n.div_ceil(batch),
            identity,
            g_dec: vec![0.0; vae.dec.n_params()],
            g_enc: vec![0.0; vae.enc.n_params()],
        })
    }

    /// Updates per epoch.
    pub fn per_epoch(&self) -> usize {
        self.n.div_ceil(self.batch).max(1)
    }

    /// The state at parameters `params`, shuffling from `seed`.
    pub fn init(&self, params: VaeParams, seed: u64) -> TrainState {
        TrainState {
            dec: self.rule.init(params.dec.len(), Some(self.total)),
            enc: self.rule.init(params.enc.len(), Some(self.total)),
            params,
            rng: Xoshiro256PlusPlus::seed_from_u64(seed),
            order: (0..self.n).collect(),
            updates: 0,
            loss: f64::NAN,
        }
    }

    /// The parameters the run returns: the averaged iterates where averaging applies (the
    /// encoder's only when it was trained).
    pub fn finish(&self, state: &TrainState) -> VaeParams {
        let mut p = state.params.clone();
        self.rule.finish(&state.dec, &mut p.dec);
        if self.est.trains_encoder() {
            self.rule.finish(&state.enc, &mut p.enc);
        }
        p
    }

    /// The estimator's diagnostics.
    pub fn diagnostics(&self) -> serde_json::Value {
        self.est.diagnostics()
    }
}

impl Solver for Training<'_> {
    type State = TrainState;
    type Info = TrainInfo;

    fn identity(&self) -> Result<Vec<u8>> {
        Ok(self.identity.clone())
    }

    fn next_iter(&mut self, st: &mut TrainState) -> Result<TrainInfo> {
        let per_epoch = self.per_epoch();
        let b = st.updates % per_epoch;
        if b == 0 && self.batch < self.n {
            st.order.shuffle(&mut st.rng);
        }
        let batch = &st.order[b * self.batch..((b + 1) * self.batch).min(self.n)];
        self.g_dec.iter_mut().for_each(|v| *v = 0.0);
        self.g_enc.iter_mut().for_each(|v| *v = 0.0);
        st.loss = self
            .est
            .estimate(&st.params, batch, &mut self.g_dec, &mut self.g_enc)?;
        let update = st.updates + 1;
        if !self.g_enc.iter().all(|v| v.is_finite()) {
            return Err(SagdError::NonFiniteUpdate { iteration: update });
        }
        self.rule
            .apply(&mut st.dec, &mut st.params.dec, &mut self.g_dec, self.lr)?;
        if self.est.trains_encoder() {
            self.rule
                .apply(&mut st.enc, &mut st.params.enc, &mut self.g_enc, self.lr)?;
        }
        st.updates = update;
        Ok(TrainInfo {
            update,
            epoch_done: update.is_multiple_of(per_epoch).then(|| update / per_epoch),
            loss: st.loss,
        })
    }

    fn terminate(&self, st: &TrainState) -> bool {
        st.updates >= self.total
    }

    fn iterations(&self, st: &TrainState) -> usize {
        st.updates
    }

    fn snapshot(&self) -> Result<Vec<u8>> {
        self.est.save_state()
    }

    fn restore(&mut self, bytes: &[u8]) -> Result<()> {
        self.est.load_state(bytes)
    }
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
        fn save_state(&self) -> Result<Vec<u8>> {
            Ok(Vec::new())
        }
        fn load_state(&mut self, _: &[u8]) -> Result<()> {
            Ok(())
        }
    }

    #[test]
    fn tail_averaging_returns_the_mean_of_the_last_iterates() {
        let vae = Vae::new(1, 2);
        let p0 = vae.init(1);
        let (lr, updates) = (0.01, 10);
        let run = |averaging| {
            let s = TrainSettings {
                epochs: updates,
                batch_size: 4,
                lr,
                averaging,
            };
            let mut est = Constant;
            let mut job = Training::new(&vae, &mut est, &s, 4, Vec::new()).unwrap();
            let mut st = job.init(p0.clone(), 0);
            while !job.terminate(&st) {
                job.next_iter(&mut st).unwrap();
            }
            job.finish(&st)
        };
        let last = run(Averaging::None);
        let avg = run(Averaging::Tail { fraction: 0.5 });
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
