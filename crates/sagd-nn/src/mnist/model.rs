//! E3's model and its three passes over a minibatch: the VAE's negative ELBO with its gradients,
//! SAGD's generator gradient from Langevin chains warm-started by the frozen encoder, and the
//! held-out log-likelihood by importance sampling from the encoder.
//!
//! Images are dynamically binarised: pixel j of an image is 1 with probability (its grey level)/255,
//! drawn afresh for every minibatch. The generator's 784 outputs are Bernoulli logits.
//!
//! Every pass cuts its rows into a fixed number of pieces (fixed by the shapes, never by the
//! threads), each summed in f64 and the pieces added in order: the same bits on any number of
//! threads.

use rand::RngExt;
use rand_xoshiro::Xoshiro256PlusPlus;
use rayon::prelude::*;
use sagd::langevin::Scheme;
use sagd::rng::NormalStream;

use super::{encoder, generator, PIXELS};
use crate::math::bernoulli_logits;
use crate::net::{PackedWeights, ParamGrads, Sequential, Workspace, WorkspacePool};
use crate::vae::VaeParams;

/// One thread's buffers for E3's passes: the encoder's and the generator's.
#[derive(Debug, Default)]
pub struct Buffers {
    enc: Workspace,
    gen: Workspace,
}

/// What E3's passes keep between minibatches: each thread's network buffers and the gradients
/// of each piece after the first (reused: fresh ones would cost page faults on every minibatch).
#[derive(Debug, Default)]
pub struct Scratch {
    pool: WorkspacePool<Buffers>,
    pieces: Vec<PieceGrads>,
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
    /// The pieces of a pass over `rows` rows: the first writes its gradients into `gen` and
    /// `enc` themselves, each other one into buffers of its own, which [`Scratch::add_pieces`]
    /// then adds in order (none is zeroed: every piece writes all its gradients). And the
    /// threads' buffers.
    fn pieces_into<'a>(
        &'a mut self,
        gen: &'a mut [f32],
        enc: &'a mut [f32],
        rows: usize,
        count: usize,
    ) -> (&'a WorkspacePool<Buffers>, Vec<Piece<'a>>) {
        let ranges = pieces(rows, count);
        self.pool.ensure(rayon::current_num_threads());
        self.pieces
            .resize_with(ranges.len().saturating_sub(1), Default::default);
        let (n_gen, n_enc) = (gen.len(), enc.len());
        let others = self.pieces.iter_mut().map(|g| {
            g.gen.resize(n_gen, 0.0);
            g.enc.resize(n_enc, 0.0);
            (&mut g.gen[..], &mut g.enc[..])
        });
        let work = ranges
            .into_iter()
            .zip(std::iter::once((gen, enc)).chain(others))
            .map(|(rows, (gen, enc))| Piece { rows, gen, enc })
            .collect();
        (&self.pool, work)
    }

    /// Adds the gradients of the pieces after the first into the first's, in order.
    fn add_pieces(&self, gen: &mut [f32], enc: &mut [f32]) {
        let gens: Vec<&[f32]> = self.pieces.iter().map(|g| &g.gen[..]).collect();
        sagd::parallel::add_parts(&gens, gen);
        if !enc.is_empty() {
            let encs: Vec<&[f32]> = self.pieces.iter().map(|g| &g.enc[..]).collect();
            sagd::parallel::add_parts(&encs, enc);
        }
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

/// E3's networks for latent dimension `d`.
#[derive(Clone, Debug, PartialEq)]
pub struct E3 {
    /// Latent dimension.
    pub d: usize,
    /// h_θ: u → 784 logits.
    pub gen: Sequential,
    /// q_φ: image → (μ, log σ²).
    pub enc: Sequential,
}

/// The Langevin chains of SAGD's gradient, from u₀ ~ q_φ(u | x), ρ₀ ~ N(0, I): the paper's Euler
/// scheme u ← u + δρ, ρ ← (1 − γδ)ρ + δ∇log p(u | x) + √(2γδ) η, or BAOAB (half kick, half drift,
/// exact friction and noise, half drift, half kick: one gradient per step, as Euler, plus one at
/// the start; exact in position on Gaussian posteriors).
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Chains {
    /// Euler (the paper's) or BAOAB.
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

impl E3 {
    /// The spec's networks.
    pub fn new(d: usize) -> Self {
        E3 {
            d,
            gen: generator(d),
            enc: encoder(d),
        }
    }

    /// Initial parameters (PyTorch's default law) from a seed.
    /// (The generator's parameters are `dec`.)
    pub fn init(&self, seed: u64) -> VaeParams {
        VaeParams {
            dec: self.gen.init(seed),
            enc: self.enc.init(seed ^ 0x9E37_79B9_7F4A_7C15),
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

/// The VAE's mean negative ELBO over the binarised images `x` (b × 784) with one reparameterised
/// draw per image from the noise `eps` (b × d), and its gradients into `g_dec` (the generator's)
/// and `g_enc` (overwritten).
pub fn vae_batch(
    m: &E3,
    p: &VaeParams,
    x: &[f32],
    eps: &[f32],
    g_dec: &mut [f32],
    g_enc: &mut [f32],
    scratch: &mut Scratch,
) -> BatchInfo {
    let d = m.d;
    let b = x.len() / PIXELS;
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
                    let xs = &x[s * PIXELS..e * PIXELS];
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
                    let mut dl = vec![0.0f32; n * PIXELS];
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
    scratch.add_pieces(g_dec, g_enc);
    BatchInfo {
        loss: losses.iter().sum::<f64>() / b as f64,
        displacement: 0.0,
    }
}

/// The encoder's (μ, log σ²) for the images `x`, n × 2d, at its parameters `enc`.
pub fn encode(m: &E3, enc: &[f32], x: &[f32], scratch: &mut Scratch) -> Vec<f32> {
    let n = x.len() / PIXELS;
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
                    m.enc.forward_packed(
                        enc,
                        packed,
                        &x[s * PIXELS..e * PIXELS],
                        e - s,
                        &mut bufs.enc,
                    );
                    out.extend_from_slice(bufs.enc.output());
                }
            });
            out
        })
        .collect();
    parts.concat()
}

/// The images of chains `s..e` (chain r belongs to image r mod b) into `xs`, and their starts
/// u₀ = μ + σ ε into `u`.
#[allow(clippy::too_many_arguments)]
fn chain_starts(
    x: &[f32],
    enc: &[f32],
    eps: &[f32],
    (b, d): (usize, usize),
    (s, e): (usize, usize),
    xs: &mut Vec<f32>,
    u: &mut [f32],
) {
    xs.clear();
    for (k, row) in (s..e).enumerate() {
        let i = row % b;
        xs.extend_from_slice(&x[i * PIXELS..(i + 1) * PIXELS]);
        for j in 0..d {
            let (mu, lv) = (enc[i * 2 * d + j], enc[i * 2 * d + d + j]);
            u[k * d + j] = mu + (0.5 * lv).exp() * eps[row * d + j];
        }
    }
}

/// SAGD's gradient for the generator on the binarised images `x` (b × 784), encoder frozen:
/// `chains.per_image` chains per image from u₀ = μ + σ ε, ρ₀, run `chains.steps` Euler steps on
/// p(u | x; θ); the gradient of the mean of −log p(x | u; θ) at their last states goes into
/// `grad_gen` (overwritten). `noise` holds, in order, ε (C × b × d), ρ₀ (C·b × d) and the steps'
/// η (steps × C·b × d); chain r = c·b + i belongs to image i.
///
/// Two passes, each cut by the shapes alone: the chains in blocks of [`SUB_ROWS`] (they need no
/// parameter gradient, so any number of blocks can run side by side: 40 for 200 images), then the
/// gradient at their last states in [`FINAL_PIECES`] pieces with their own gradients, added in
/// order.
pub fn sagd_batch(
    m: &E3,
    p: &VaeParams,
    x: &[f32],
    chains: &Chains,
    noise: &[f32],
    grad_gen: &mut [f32],
    scratch: &mut Scratch,
) -> BatchInfo {
    let d = m.d;
    let b = x.len() / PIXELS;
    let rows = chains.per_image * b;
    let enc = encode(m, &p.enc, x, scratch);
    let (eps, rest) = noise.split_at(rows * d);
    let (rho0, eta) = rest.split_at(rows * d);
    let (delta, gamma) = (chains.delta as f32, chains.gamma as f32);
    let (decay, kick) = (
        1.0 - gamma * delta,
        (2.0 * chains.gamma * chains.delta).sqrt() as f32,
    );
    // The chains, block by block, to their last states u.
    let mut pk_gen = std::mem::take(&mut scratch.packed.0);
    m.gen.pack(&p.dec, true, &mut pk_gen);
    let packed = &pk_gen;
    let mut u = vec![0.0f32; rows * d];
    let pool = &scratch.pool;
    u.par_chunks_mut(SUB_ROWS * d)
        .enumerate()
        .for_each(|(blk, u)| {
            let (s, e) = (blk * SUB_ROWS, (blk * SUB_ROWS + SUB_ROWS).min(rows));
            let n = e - s;
            pool.with(|bufs| {
                let ws = &mut bufs.gen;
                let mut xs = Vec::with_capacity(n * PIXELS);
                chain_starts(x, &enc, eps, (b, d), (s, e), &mut xs, u);
                let mut rho = rho0[s * d..e * d].to_vec();
                let (mut dl, mut gu) = (vec![0.0f32; n * PIXELS], vec![0.0f32; n * d]);
                // gu ← ∇u log p(u | x) = ∇u log p(x | u) − u.
                let mut grad = |u: &[f32], gu: &mut [f32]| {
                    m.gen.forward_packed(&p.dec, packed, u, n, ws);
                    bernoulli_logits(ws.output(), &xs, &mut dl);
                    m.gen
                        .backward_packed(&p.dec, packed, ws, &dl, ParamGrads::Skip, Some(gu));
                    gu.iter_mut().zip(u).for_each(|(g, v)| *g -= v);
                };
                let noise = |step: usize| &eta[(step * rows + s) * d..(step * rows + e) * d];
                if chains.scheme == Scheme::Baoab && chains.steps > 0 {
                    let (c1, c2) = (
                        (-chains.gamma * chains.delta).exp() as f32,
                        (1.0 - (-2.0 * chains.gamma * chains.delta).exp()).sqrt() as f32,
                    );
                    let half = 0.5 * delta;
                    grad(u, &mut gu);
                    for step in 0..chains.steps {
                        for (((uj, rj), gj), hj) in
                            u.iter_mut().zip(&mut rho).zip(&gu).zip(noise(step))
                        {
                            *rj += half * gj;
                            *uj += half * *rj;
                            *rj = c1 * *rj + c2 * hj;
                            *uj += half * *rj;
                        }
                        grad(u, &mut gu);
                        rho.iter_mut().zip(&gu).for_each(|(r, g)| *r += half * g);
                    }
                } else {
                    for step in 0..chains.steps {
                        grad(u, &mut gu);
                        for (((uj, rj), gj), hj) in
                            u.iter_mut().zip(&mut rho).zip(&gu).zip(noise(step))
                        {
                            *uj += delta * *rj;
                            *rj = decay * *rj + delta * gj + kick * hj;
                        }
                    }
                }
            });
        });
    // The generator's gradient at the last states.
    let scale = 1.0 / rows as f32;
    let (pool, work) = scratch.pieces_into(grad_gen, &mut [], rows, FINAL_PIECES);
    let u = &u;
    let sums: Vec<(f64, f64)> = work
        .into_par_iter()
        .map(|mut piece| {
            let (mut loss, mut disp) = (0.0, 0.0);
            pool.with(|bufs| {
                let ws = &mut bufs.gen;
                let r = piece.rows.clone();
                for s in (r.start..r.end).step_by(SUB_ROWS) {
                    let e = (s + SUB_ROWS).min(r.end);
                    let n = e - s;
                    let (mut xs, mut u0) = (Vec::with_capacity(n * PIXELS), vec![0.0f32; n * d]);
                    chain_starts(x, &enc, eps, (b, d), (s, e), &mut xs, &mut u0);
                    let ue = &u[s * d..e * d];
                    m.gen.forward_packed(&p.dec, packed, ue, n, ws);
                    let mut dl = vec![0.0f32; n * PIXELS];
                    loss -= bernoulli_logits(ws.output(), &xs, &mut dl);
                    dl.iter_mut().for_each(|g| *g *= -scale);
                    let (gg, _) = piece.sinks(s);
                    m.gen.backward_packed(&p.dec, packed, ws, &dl, gg, None);
                    disp += ue
                        .chunks_exact(d)
                        .zip(u0.chunks_exact(d))
                        .map(|(a, b)| {
                            a.iter()
                                .zip(b)
                                .map(|(x, y)| ((x - y) as f64).powi(2))
                                .sum::<f64>()
                                .sqrt()
                        })
                        .sum::<f64>();
                }
            });
            (loss, disp)
        })
        .collect();
    scratch.packed.0 = pk_gen;
    scratch.add_pieces(grad_gen, &mut []);
    BatchInfo {
        loss: sums.iter().map(|s| s.0).sum::<f64>() / rows as f64,
        displacement: sums.iter().map(|s| s.1).sum::<f64>() / rows as f64,
    }
}

/// Draws per image of [`sagd_batch`]'s `noise`: ε, ρ₀ and the steps' η.
pub fn sagd_noise_len(m: &E3, chains: &Chains, images: usize) -> usize {
    (2 + chains.steps) * chains.per_image * images * m.d
}

/// One image's importance-sampling estimate: log p̂(x) = log (1/k) Σ_j w_j with
/// w_j = p(x | u_j) N(u_j; 0, I) / q(u_j | x), u_j ~ q; the ELBO over the same draws; and the
/// effective sample size (Σ w)²/Σ w² of the weights.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct HeldOut {
    /// log p̂(x).
    pub log_px: f64,
    /// The ELBO estimate.
    pub elbo: f64,
    /// The weights' effective sample size.
    pub ess: f64,
}

/// [`HeldOut`] for every image of `x` (binarised) with `k` draws each; image i's draws come from
/// its own stream (`seed`, i), so that two generators evaluated with the same encoder and seed
/// see the same draws (common random numbers: their difference is paired).
pub fn held_out(
    m: &E3,
    gen: &[f32],
    enc: &[f32],
    x: &[f32],
    k: usize,
    seed: u64,
    scratch: &mut Scratch,
) -> Vec<HeldOut> {
    let d = m.d;
    let n = x.len() / PIXELS;
    let q = encode(m, enc, x, scratch);
    let pool = &scratch.pool;
    let packed = &mut scratch.packed.0;
    m.gen.pack(gen, false, packed);
    let packed = &*packed;
    (0..n)
        .into_par_iter()
        .map(|i| {
            let mut stream = NormalStream::new(sagd::rng::stream_seed(seed, i as u64));
            let mut eps = vec![0.0f32; k * d];
            stream.fill(&mut eps);
            let (mu, lv) = (
                &q[i * 2 * d..i * 2 * d + d],
                &q[i * 2 * d + d..(i + 1) * 2 * d],
            );
            let xi = &x[i * PIXELS..(i + 1) * PIXELS];
            let mut lw = Vec::with_capacity(k);
            let mut ll_sum = 0.0f64;
            pool.with(|bufs| {
                let ws = &mut bufs.gen;
                let mut dl = vec![0.0f32; PIXELS];
                for s in (0..k).step_by(SUB_ROWS) {
                    let e = (s + SUB_ROWS).min(k);
                    let mut u = vec![0.0f32; (e - s) * d];
                    let mut lpq = Vec::with_capacity(e - s);
                    for (r, row) in u.chunks_exact_mut(d).enumerate() {
                        let mut v = 0.0f64;
                        for j in 0..d {
                            let z = eps[(s + r) * d + j];
                            row[j] = mu[j] + (0.5 * lv[j]).exp() * z;
                            // log N(u; 0, I) − log q(u | x).
                            v += -0.5 * (row[j] as f64).powi(2)
                                + 0.5 * (z as f64).powi(2)
                                + 0.5 * lv[j] as f64;
                        }
                        lpq.push(v);
                    }
                    m.gen.forward_packed(gen, packed, &u, e - s, ws);
                    for (r, logits) in ws.output().chunks_exact(PIXELS).enumerate() {
                        let ll = bernoulli_logits(logits, xi, &mut dl);
                        ll_sum += ll;
                        lw.push(ll + lpq[r]);
                    }
                }
            });
            let top = lw.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            let (s1, s2) = lw.iter().fold((0.0, 0.0), |(a, b), v| {
                let w = (v - top).exp();
                (a + w, b + w * w)
            });
            let kl: f64 = (0..d)
                .map(|j| 0.5 * ((mu[j] * mu[j]) as f64 + (lv[j] as f64).exp() - lv[j] as f64 - 1.0))
                .sum();
            HeldOut {
                log_px: top + (s1 / k as f64).ln(),
                elbo: ll_sum / k as f64 - kl,
                ess: s1 * s1 / s2,
            }
        })
        .collect()
}

/// The generator's pixel probabilities σ(h_θ(u)) for the latents `u` (n × d), n × 784.
pub fn generate(m: &E3, gen: &[f32], u: &[f32]) -> Vec<f32> {
    let n = u.len() / m.d.max(1);
    let mut ws = Workspace::default();
    let mut out = Vec::with_capacity(n * PIXELS);
    for s in (0..n).step_by(SUB_ROWS) {
        let e = (s + SUB_ROWS).min(n);
        m.gen.forward(gen, &u[s * m.d..e * m.d], e - s, &mut ws);
        out.extend(ws.output().iter().map(|l| 1.0 / (1.0 + (-l).exp())));
    }
    out
}
