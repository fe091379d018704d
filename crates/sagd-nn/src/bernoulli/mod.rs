//! The VAE of binary data (experiment E3's model, for any image size and any networks) and its
//! three passes over a minibatch: the negative ELBO with its gradients, SAGD's generator gradient
//! from Langevin chains warm-started by the frozen encoder, and the held-out log-likelihood by
//! importance sampling from the encoder; on the CPU here, on a GPU in [`gpu`].
//!
//! Images are dynamically binarised: pixel j of an image is 1 with probability (its grey level)/255,
//! drawn afresh for every minibatch. The generator's outputs, one per pixel, are Bernoulli logits.
//!
//! Every pass cuts its rows into a fixed number of pieces (fixed by the shapes, never by the
//! threads), each summed in f64 and the pieces added in order: the same bits on any number of
//! threads.

use crate::train::ChainSchedule;
use rand::RngExt;
use rand_xoshiro::Xoshiro256PlusPlus;
use rayon::prelude::*;
use sagd::error::Result;
use sagd::langevin::{Kernel, LangevinSettings, LangevinStep, Scheme};
use sagd::rng::Seed;

use crate::math::bernoulli_logits;
use crate::vae::VaeParams;
use crate::{Device, PackedWeights, ParamGrads, Sequential, Workspace, WorkspacePool};

mod carry;
mod chains;
mod estimator;
pub mod gpu;
mod held_out;
mod shares;

pub use chains::{sagd_batch, sagd_batch_continued, sagd_noise_blocks, sagd_noise_len, Carried};
pub use estimator::{BernoulliEstimator, Objective};
pub use held_out::{generate, held_out, HeldOut};

/// One thread's buffers for the passes: the encoder's and the generator's.
#[derive(Debug, Default)]
pub struct Buffers {
    enc: Workspace,
    gen: Workspace,
}

/// What the passes keep between minibatches: each thread's network buffers and the gradients
/// of each piece after the first (reused: fresh ones would cost page faults on every minibatch).
#[derive(Debug, Default)]
pub struct Scratch {
    pool: WorkspacePool<Buffers>,
    pieces: Vec<PieceGrads>,
    /// The number of pieces of the last pass cut by [`Scratch::pieces_into`], all processes'.
    pass_pieces: usize,
    /// The generator's and the encoder's wide weights, packed for a pass's products.
    packed: (PackedWeights, PackedWeights),
}

/// One piece's gradients of both networks (the encoder's empty when a pass has none).
#[derive(Debug, Default)]
struct PieceGrads {
    gen: Vec<f32>,
    enc: Vec<f32>,
}

/// One piece of a pass: its rows, and where its gradients go (written over by its first rows'
/// pass, [`ParamGrads::Set`], then added to).
struct Piece<'a> {
    rows: std::ops::Range<usize>,
    gen: &'a mut [f32],
    enc: &'a mut [f32],
}

impl Piece<'_> {
    /// The sinks of the pass over the rows from `s`: written over by the first, added to after.
    fn sinks(&mut self, s: usize) -> (ParamGrads<'_>, ParamGrads<'_>) {
        if s == self.rows.start {
            (ParamGrads::Set(self.gen), ParamGrads::Set(self.enc))
        } else {
            (ParamGrads::Add(self.gen), ParamGrads::Add(self.enc))
        }
    }
}

impl Scratch {
    /// This process's pieces of a pass over `rows` rows cut into `count` ([`sagd::share::mine`]:
    /// all of them in one process). The first piece of the pass writes its gradients into `gen`
    /// and `enc` themselves, every other one into buffers of its own, which
    /// [`Scratch::add_pieces`] then adds in order (none is zeroed: every piece writes all its
    /// gradients). And the threads' buffers.
    fn pieces_into<'a>(
        &'a mut self,
        gen: &'a mut [f32],
        enc: &'a mut [f32],
        rows: usize,
        count: usize,
    ) -> (&'a WorkspacePool<Buffers>, Vec<Piece<'a>>) {
        let all = pieces(rows, count);
        self.pass_pieces = all.len();
        let mine = sagd::share::mine(all.len());
        let first = mine.start == 0 && !mine.is_empty();
        self.pool.ensure(rayon::current_num_threads());
        self.pieces
            .resize_with(mine.len() - usize::from(first), Default::default);
        let (n_gen, n_enc) = (gen.len(), enc.len());
        let others = self.pieces.iter_mut().map(|g| {
            g.gen.resize(n_gen, 0.0);
            g.enc.resize(n_enc, 0.0);
            (&mut g.gen[..], &mut g.enc[..])
        });
        let sinks = first.then_some((gen, enc)).into_iter().chain(others);
        let work = all[mine]
            .iter()
            .cloned()
            .zip(sinks)
            .map(|(rows, (gen, enc))| Piece { rows, gen, enc })
            .collect();
        (&self.pool, work)
    }

    /// Adds this process's pieces after the pass's first into `gen` and `enc`, in order, and,
    /// in a split run, passes the sums on from process to process in piece order
    /// ([`sagd::share::relay_sum`]): every process ends with one process's bits.
    fn add_pieces(&self, gen: &mut [f32], enc: &mut [f32]) -> Result<()> {
        let count = self.pass_pieces;
        let gens: Vec<&[f32]> = self.pieces.iter().map(|g| &g.gen[..]).collect();
        sagd::share::relay_sum(count, gen, |g| sagd::parallel::add_parts(&gens, g))?;
        if !enc.is_empty() {
            let encs: Vec<&[f32]> = self.pieces.iter().map(|g| &g.enc[..]).collect();
            sagd::share::relay_sum(count, enc, |e| sagd::parallel::add_parts(&encs, e))?;
        }
        Ok(())
    }
}

/// Independent pieces of a VAE minibatch pass, each with its own gradients (results depend on
/// the shapes, not on the threads: 100 images each for 200). Two, not more: the wide layers'
/// products run in blocks on all threads inside a piece, and each piece costs a copy of both
/// networks' gradients to zero and add (measured: 2 pieces of 100 images 1.2× faster than 4 of
/// 50 on 2 threads, `e3_minibatch200/vae`).
pub const PIECES: usize = 2;

/// Pieces of SAGD's final pass at the chains' last states (250 chains each for 200 images × 20
/// chains): its parameter gradients are a quarter of SAGD's work, so more pieces than a VAE pass
/// keep many cores busy.
pub const FINAL_PIECES: usize = 16;

/// Rows per forward/backward call inside a piece: what keeps the activations of the wide layers
/// (3136 floats per image) at a few megabytes (the convolutions go through their windows a chunk
/// of images at a time whatever the rows).
pub const SUB_ROWS: usize = 100;

/// A VAE of binary images: its latent dimension and its two networks (E3's are
/// `sagd_apps::mnist::e3`'s). Build one with [`BernoulliVae::new`], which checks that the
/// networks fit together.
#[derive(Clone, Debug, PartialEq)]
pub struct BernoulliVae {
    /// Latent dimension.
    pub d: usize,
    /// h_θ: u → one logit per pixel.
    pub gen: Sequential,
    /// q_φ: image → (μ, log σ²).
    pub enc: Sequential,
}

/// The Langevin chains of SAGD's gradient, from u₀ ~ q_φ(u | x), ρ₀ ~ N(0, I), stepped by the
/// core's program of any [`Scheme`]: the paper's Euler u ← u + δρ, ρ ← (1 − γδ)ρ + δ∇log p(u | x) +
/// √(2γδ) η, or OBABO, BAOAB (exact in position on Gaussian posteriors) or UBU. Each evaluates the
/// gradient once per step, on either device.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Chains {
    /// The integrator (default: the paper's Euler).
    #[serde(default)]
    pub scheme: Scheme,
    /// Chains per image.
    pub per_image: usize,
    /// Steps per chain (the paper's burn-in: the gradient is taken at the last state).
    pub steps: usize,
    /// Friction γ.
    pub gamma: f64,
    /// Step δ.
    pub delta: f64,
    /// δ_t and K_t along the refinement (Theorems 3-4's shrinking step and lengthening chains,
    /// cost-matched as E2's), applied by the estimator at each update; its `updates` are set
    /// to the phase's by the run. `None`: δ and K fixed, as the paper's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schedule: Option<ChainSchedule>,
    /// Chains that persist between an image's visits (E2's `refresh_every` for BernoulliVae): a visit
    /// continues each of the image's chains where its last visit left it (position and
    /// momentum), and every `refresh_every`-th visit starts them afresh from the encoder. `None`
    /// (or 1): fresh from the encoder at every visit, as the paper's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refresh_every: Option<usize>,
}

impl Chains {
    /// Whether the chains persist between visits ([`Chains::refresh_every`] above 1).
    pub fn persist(&self) -> bool {
        self.refresh_every.is_some_and(|r| r > 1)
    }

    /// Checks every setting, with messages that say what to change: at least one step and one
    /// chain per image, at least one visit between restarts, γ and δ by the core's rules
    /// ([`Chains::step`]; δ_t only shrinks, so δ's check covers the schedule's) and the
    /// schedule's exponents. [`BernoulliEstimator::on`] checks them before any work.
    pub fn validate(&self) -> Result<()> {
        let refuse = |name, fix: &str| {
            Err(sagd::error::SagdError::InvalidSetting {
                name,
                value: "0".into(),
                fix: fix.into(),
            })
        };
        if self.steps == 0 {
            return refuse(
                "steps",
                "take at least 1 Langevin step per chain (paper: 5): with none the chains stay at \
                 the encoder's draws and the refinement is not SAGD",
            );
        }
        if self.per_image == 0 {
            return refuse("chains", "use at least 1 chain per image (paper: 20)");
        }
        if self.refresh_every == Some(0) {
            return refuse(
                "refresh-every",
                "use 1 (fresh chains at every visit of an image, the paper's) or more (chains \
                 that persist between visits, restarted every so many)",
            );
        }
        self.step()?;
        match self.schedule {
            Some(plan) => plan.validate(),
            None => Ok(()),
        }
    }

    /// Refuses, by name, what `device` cannot run: a GPU's chains run every scheme's program, and
    /// chains that persist between visits in a run of one process (a run split over processes
    /// cuts a GPU's minibatch by images, and the chains kept between visits are not cut with it).
    pub fn runs_on(&self, device: Device) -> Result<()> {
        if device == Device::Cpu {
            return Ok(());
        }
        let refuse = |name, value: String, fix: &str| {
            Err(sagd::error::SagdError::InvalidSetting {
                name,
                value,
                fix: fix.into(),
            })
        };
        // Every scheme's program runs there; an operation the core adds is refused here.
        if crate::program::unknown_operation(&self.kernel()?, false).is_some() {
            return refuse(
                "scheme",
                self.scheme.to_string(),
                "SAGD's chains on a GPU run drifts, kicks, exact flows and evaluations, and this \
                 scheme's program has more: run it with --device cpu",
            );
        }
        if self.persist() && sagd::share::current().is_some() {
            return refuse(
                "refresh-every",
                self.refresh_every.unwrap_or(1).to_string(),
                "SAGD's chains persist between visits on one GPU's process, not on GPUs split \
                 over processes: run one process, or with --device cpu, or leave \
                 --refresh-every out (fresh chains at every visit)",
            );
        }
        Ok(())
    }

    /// The integrator and the friction, as the core's samplers take them.
    pub fn langevin(&self) -> LangevinSettings {
        LangevinSettings {
            scheme: self.scheme,
            gamma: self.gamma,
        }
    }

    /// The integrator, γ and δ, checked by the core's rules (both > 0, γδ < 1 for Euler;
    /// [`LangevinStep::new`]).
    pub fn step(&self) -> Result<LangevinStep> {
        self.langevin().step(self.delta)
    }

    /// The program of one step, once γ and δ are checked ([`Chains::step`]).
    pub fn kernel(&self) -> Result<Kernel<f32>> {
        Ok(self.step()?.kernel())
    }

    /// These chains with a schedule over `updates` updates (K_t's scale depends on them).
    pub fn over(mut self, updates: usize) -> Self {
        if let Some(plan) = self.schedule.as_mut() {
            plan.updates = updates;
        }
        self
    }

    /// The chains of update `t` (from 0): δ_t and K_t by the schedule, or these chains.
    pub fn at(&self, t: usize) -> Chains {
        self.at_scaled(t, self.k_scale())
    }

    /// K_t's scale under the schedule (1 without one).
    pub fn k_scale(&self) -> f64 {
        self.schedule.map_or(1.0, |plan| plan.k_scale(self.steps))
    }

    /// [`Chains::at`] with K_t's scale given ([`ChainSchedule::k_scale`] sums over the run's
    /// updates: a run computes it once).
    pub fn at_scaled(&self, t: usize, k_scale: f64) -> Chains {
        match self.schedule {
            None => *self,
            Some(plan) => {
                let (delta, steps) = plan.at(t, self.delta, k_scale);
                Chains {
                    delta,
                    steps,
                    schedule: None,
                    ..*self
                }
            }
        }
    }
}

impl Default for Chains {
    /// The paper's 20 chains of 5 steps; γ = 2 and δ = 0.01 as the peer (the paper gives no δ).
    fn default() -> Self {
        Chains {
            scheme: Scheme::Euler,
            per_image: 20,
            steps: 5,
            gamma: 2.0,
            delta: 0.01,
            schedule: None,
            refresh_every: None,
        }
    }
}

/// What a minibatch pass measured.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct BatchInfo {
    /// The mean loss per image (negative ELBO, or −log p(x | u) at the chains' last states).
    pub loss: f64,
    /// The chains' mean distance from their starts (SAGD).
    pub displacement: f64,
}

impl BernoulliVae {
    /// The VAE of the generator `gen` (u → one logit per pixel) and the encoder `enc` (image →
    /// μ, then log σ²), its latent dimension `gen`'s input width; refused, by name, unless the
    /// encoder reads the generator's images and gives two numbers per latent dimension.
    pub fn new(gen: Sequential, enc: Sequential) -> Result<Self> {
        let d = gen.input_dim();
        crate::vae::check_networks(d, "generator", &gen, &enc)?;
        Ok(BernoulliVae { d, gen, enc })
    }

    /// Pixels per image: the generator's outputs.
    pub fn pixels(&self) -> usize {
        self.gen.output_dim()
    }

    /// Initial parameters (PyTorch's default law) from a seed.
    /// (The generator's parameters are `dec`.)
    pub fn init(&self, seed: u64) -> VaeParams {
        VaeParams {
            dec: self.gen.init(Seed::new(seed).stream("decoder").get()),
            enc: self.enc.init(Seed::new(seed).stream("encoder").get()),
        }
    }
}

/// Dynamic binarisation: x_j = 1 if U_j < p_j (p = grey level/255), U_j uniform on [0, 1) from
/// `rng`, drawn pixel by pixel in order.
pub fn binarise(pixels: &[u8], rng: &mut Xoshiro256PlusPlus) -> Vec<f32> {
    binarise_with(pixels, &uniforms(rng, pixels.len()))
}

/// `n` uniforms on [0, 1) from `rng`, in order: the draws of [`binarise`] for n pixels.
pub fn uniforms(rng: &mut Xoshiro256PlusPlus, n: usize) -> Vec<f32> {
    (0..n).map(|_| rng.random_range(0.0f32..1.0)).collect()
}

/// [`binarise`] with its uniforms drawn beforehand ([`uniforms`]), one per pixel.
pub fn binarise_with(pixels: &[u8], u: &[f32]) -> Vec<f32> {
    debug_assert_eq!(pixels.len(), u.len());
    pixels
        .iter()
        .zip(u)
        .map(|(p, u)| if *u < *p as f32 / 255.0 { 1.0 } else { 0.0 })
        .collect()
}

/// Row ranges of `count` pieces of `n` rows.
fn pieces(n: usize, count: usize) -> Vec<std::ops::Range<usize>> {
    let per = n.div_ceil(count).max(1);
    (0..n).step_by(per).map(|a| a..(a + per).min(n)).collect()
}

/// The VAE's mean negative ELBO over the binarised images `x` (b × pixels) with one reparameterised
/// draw per image from the noise `eps` (b × d), and its gradients into `g_dec` (the generator's)
/// and `g_enc` (overwritten). Split over processes by its pieces (same bits).
pub fn vae_batch(
    m: &BernoulliVae,
    p: &VaeParams,
    x: &[f32],
    eps: &[f32],
    g_dec: &mut [f32],
    g_enc: &mut [f32],
    scratch: &mut Scratch,
) -> Result<BatchInfo> {
    let d = m.d;
    let px = m.pixels();
    let b = x.len() / px;
    let scale = 1.0 / b as f32;
    let (mut pk_gen, mut pk_enc) = std::mem::take(&mut scratch.packed);
    m.gen.pack(&p.dec, true, &mut pk_gen);
    m.enc.pack(&p.enc, true, &mut pk_enc);
    let (pool, work) = scratch.pieces_into(g_dec, g_enc, b, PIECES);
    let losses: Vec<f64> = work
        .into_par_iter()
        .map(|mut piece| {
            let mut loss = 0.0;
            pool.with(|bufs| {
                let Buffers { enc: ws, gen: wg } = bufs;
                let r = piece.rows.clone();
                for s in (r.start..r.end).step_by(SUB_ROWS) {
                    let e = (s + SUB_ROWS).min(r.end);
                    let n = e - s;
                    let xs = &x[s * px..e * px];
                    m.enc.forward_packed(&p.enc, &pk_enc, xs, n, ws);
                    let out = ws.output().to_vec();
                    let mut u = vec![0.0f32; n * d];
                    for i in 0..n {
                        for j in 0..d {
                            let (mu, lv) = (out[i * 2 * d + j], out[i * 2 * d + d + j]);
                            u[i * d + j] = mu + (0.5 * lv).exp() * eps[(s + i) * d + j];
                            loss += 0.5 * (mu * mu + lv.exp() - lv - 1.0) as f64;
                        }
                    }
                    m.gen.forward_packed(&p.dec, &pk_gen, &u, n, wg);
                    let mut dl = vec![0.0f32; n * px];
                    loss -= bernoulli_logits(wg.output(), xs, &mut dl);
                    // ∂(−log p)/∂logits = −(x − σ), averaged over the batch.
                    dl.iter_mut().for_each(|g| *g *= -scale);
                    let mut du = vec![0.0f32; n * d];
                    let (gg, ge) = piece.sinks(s);
                    m.gen
                        .backward_packed(&p.dec, &pk_gen, wg, &dl, gg, Some(&mut du));
                    let mut dout = vec![0.0f32; n * 2 * d];
                    for i in 0..n {
                        for j in 0..d {
                            let (mu, lv) = (out[i * 2 * d + j], out[i * 2 * d + d + j]);
                            let sd = (0.5 * lv).exp();
                            let g = du[i * d + j];
                            dout[i * 2 * d + j] = g + mu * scale;
                            dout[i * 2 * d + d + j] = g * eps[(s + i) * d + j] * 0.5 * sd
                                + 0.5 * (lv.exp() - 1.0) * scale;
                        }
                    }
                    m.enc.backward_packed(&p.enc, &pk_enc, ws, &dout, ge, None);
                }
            });
            loss
        })
        .collect();
    scratch.packed = (pk_gen, pk_enc);
    scratch.add_pieces(g_dec, g_enc)?;
    let losses = sagd::share::gather(losses)?;
    Ok(BatchInfo {
        loss: losses.iter().sum::<f64>() / b as f64,
        displacement: 0.0,
    })
}

/// The encoder's (μ, log σ²) for the images `x`, n × 2d, at its parameters `enc`.
pub fn encode(m: &BernoulliVae, enc: &[f32], x: &[f32], scratch: &mut Scratch) -> Vec<f32> {
    let px = m.pixels();
    let n = x.len() / px;
    scratch.pool.ensure(rayon::current_num_threads());
    let pool = &scratch.pool;
    let packed = &mut scratch.packed.1;
    m.enc.pack(enc, false, packed);
    let packed = &*packed;
    let parts: Vec<Vec<f32>> = pieces(n, PIECES)
        .into_par_iter()
        .map(|r| {
            let mut out = Vec::with_capacity(r.len() * 2 * m.d);
            pool.with(|bufs| {
                for s in (r.start..r.end).step_by(SUB_ROWS) {
                    let e = (s + SUB_ROWS).min(r.end);
                    m.enc
                        .forward_packed(enc, packed, &x[s * px..e * px], e - s, &mut bufs.enc);
                    out.extend_from_slice(bufs.enc.output());
                }
            });
            out
        })
        .collect();
    parts.concat()
}

#[cfg(test)]
mod tests;
