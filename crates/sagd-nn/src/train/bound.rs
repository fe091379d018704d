//! The evidence lower bound (k = 1) and the importance-weighted bound (k > 1) as gradient
//! estimators: reparameterised, through encoder and decoder, under any [`Likelihood`] of the
//! decoder's output.

use sagd::error::Result;
use sagd::parallel::{add_parts, piece_rows, PIECES};
use sagd::rng::NormalStream;
use sagd::run::{decode, encode};

use super::{gather_rows, GradientEstimator};
use crate::likelihood::{Likelihood, UnitGaussian};
use crate::math;
use crate::net::{ParamGrads, ParamTerms, Workspace, WorkspacePool, MIN_PIECE_ROWS};
use crate::vae::{Vae, VaeParams};

/// The ELBO (k = 1) or the IWAE bound (k > 1), reparameterised, encoder and decoder; the data's
/// likelihood N(x; h, I) by default ([`BoundEstimator::with_likelihood`] for another).
pub struct BoundEstimator<'a, L: Likelihood = UnitGaussian> {
    vae: &'a Vae,
    lik: L,
    x: &'a [f32],
    k: usize,
    stream: NormalStream,
    xb: Vec<f32>,
    eps: Vec<f32>,
    pool: WorkspacePool<BoundScratch>,
    /// Per chunk, the terms of its decoder and encoder gradients (buffers kept between updates).
    terms: Vec<(ParamTerms, ParamTerms)>,
    /// Per group of chunks, its decoder and encoder gradient sums (when terms are not kept).
    parts: Vec<(Vec<f32>, Vec<f32>)>,
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

/// What one update's gradient copies or kept terms may take and still be read back from cache.
const CACHE_BYTES: usize = 8 << 20;

impl<'a> BoundEstimator<'a> {
    /// k = 1: the VAE's ELBO; k > 1: the IWAE bound with k samples; the paper's likelihood,
    /// N(x; h, I).
    pub fn new(vae: &'a Vae, x: &'a [f32], k: usize, seed: u64) -> Self {
        BoundEstimator::with_likelihood(vae, UnitGaussian, x, k, seed)
    }
}

impl<'a, L: Likelihood> BoundEstimator<'a, L> {
    /// [`BoundEstimator::new`] under the likelihood `lik`, the data `x` points of
    /// [`Vae::data_dim`] values.
    pub fn with_likelihood(vae: &'a Vae, lik: L, x: &'a [f32], k: usize, seed: u64) -> Self {
        BoundEstimator {
            vae,
            lik,
            x,
            k: k.max(1),
            stream: NormalStream::new(seed),
            xb: Vec::new(),
            eps: Vec::new(),
            pool: WorkspacePool::default(),
            terms: Vec::new(),
            parts: Vec::new(),
        }
    }

    /// The loss (summed over the chunk's points) for the points `x` with noise `eps` (k draws per
    /// point, point-major; `nf` is the batch size), and its gradients (decoder, encoder) added or
    /// kept as terms.
    fn chunk(
        &self,
        p: &VaeParams,
        (x, eps, nf): (&[f32], &[f32], f32),
        s: &mut BoundScratch,
        (gd, ge): (ParamGrads<'_>, ParamGrads<'_>),
    ) -> f64 {
        let (d, px, k) = (self.vae.d, self.vae.data_dim(), self.k);
        let np = x.len() / px;
        let rows = np * k;
        self.vae.enc.forward(&p.enc, x, np, &mut s.ws_enc);
        reparameterise(s.ws_enc.output(), eps, (np, d, k), &mut s.sd, &mut s.u);
        self.vae.dec.forward(&p.dec, &s.u, rows, &mut s.ws_dec);
        let shape = (np, d, k, nf);
        let (enc, h) = (s.ws_enc.output(), s.ws_dec.output());
        let data = (&self.lik, x, eps, &s.u[..]);
        let loss = bound_and_dh(data, enc, h, shape, (&mut s.dh, &mut s.wts));
        s.du.resize(rows * d, 0.0);
        self.vae
            .dec
            .backward_with(&p.dec, &mut s.ws_dec, &s.dh, gd, Some(&mut s.du));
        let samples = (eps, &s.sd[..], &s.u[..], &s.wts[..]);
        to_encoder(s.ws_enc.output(), samples, &s.du, shape, &mut s.dout);
        self.vae
            .enc
            .backward_with(&p.enc, &mut s.ws_enc, &s.dout, ge, None);
        loss
    }
}

/// σ = exp(½ log σ²) of each of the `np` points' encodings `enc` (μ, log σ² per point), and its
/// k samples u = μ + σ ε, row i·k + s for sample s of point i.
fn reparameterise(
    enc: &[f32],
    eps: &[f32],
    (np, d, k): (usize, usize, usize),
    sd: &mut Vec<f32>,
    u: &mut Vec<f32>,
) {
    sd.resize(np * d, 0.0);
    for (i, sd) in sd.chunks_exact_mut(d).enumerate() {
        for (j, v) in sd.iter_mut().enumerate() {
            *v = (0.5 * enc[i * 2 * d + d + j]).exp();
        }
    }
    u.resize(np * k * d, 0.0);
    for (r, (u, e)) in u.chunks_exact_mut(d).zip(eps.chunks_exact(d)).enumerate() {
        let i = r / k;
        for j in 0..d {
            u[j] = enc[i * 2 * d + j] + sd[i * d + j] * e[j];
        }
    }
}

/// The chunk's bound (−ELBO for k = 1, the IWAE bound's negative for k > 1) under the likelihood
/// `lik` at the decoder's outputs `h`, with its gradient with respect to them (`dh`, each point's
/// share divided by `nf`) and, for k > 1, each sample's normalised weight (`wts`).
///
/// Each point's terms are summed coordinate by coordinate, the data's (p of them) beside the
/// latent's (d): where p = d (the paper's VAE) in the order of the sums before the likelihood was a
/// parameter, and so to the same bits.
fn bound_and_dh<L: Likelihood>(
    (lik, x, eps, u): (&L, &[f32], &[f32], &[f32]),
    enc: &[f32],
    h: &[f32],
    (np, d, k, nf): (usize, usize, usize, f32),
    (dh, wts): (&mut Vec<f32>, &mut Vec<f32>),
) -> f64 {
    let px = x.len() / np.max(1);
    dh.resize(np * k * px, 0.0);
    wts.resize(np * k, 0.0);
    let mut loss = 0.0f64;
    for i in 0..np {
        let xi = &x[i * px..(i + 1) * px];
        let lv = &enc[i * 2 * d + d..(i + 1) * 2 * d];
        // The data's coordinates beside the latent's, j < both, then the rest of either.
        let both = px.min(d);
        if k == 1 {
            // −ELBO per point: −log p(x | h) + KL(N(μ, σ²) ‖ N(0, I)).
            let mut nll = |j: usize| {
                let (l, g) = lik.log_density(h[i * px + j], xi[j]);
                dh[i * px + j] = -g / nf;
                -(l as f64)
            };
            let kl = |j: usize| {
                let mu = enc[i * 2 * d + j];
                0.5 * (mu * mu + lv[j].exp() - lv[j] - 1.0) as f64
            };
            for j in 0..both {
                loss += nll(j) + kl(j);
            }
            (both..px).for_each(|j| loss += nll(j));
            (both..d).for_each(|j| loss += kl(j));
            continue;
        }
        // log w = log p(x | h) − ½‖u‖² + ½‖ε‖² + ½ Σ log σ²; loss = −Σ_i log mean_s w.
        let w = &mut wts[i * k..(i + 1) * k];
        for (sm, lw) in w.iter_mut().enumerate() {
            let (rh, ru) = ((i * k + sm) * px, (i * k + sm) * d);
            // ℓ_j, with ∂ℓ_j/∂h kept in dh to be weighted below.
            let mut ell = |j: usize| {
                let (l, g) = lik.log_density(h[rh + j], xi[j]);
                dh[rh + j] = g;
                l
            };
            // The latent's terms after `t`.
            let latent = |j: usize, t: f32| {
                t - 0.5 * u[ru + j] * u[ru + j] + 0.5 * eps[ru + j] * eps[ru + j] + 0.5 * lv[j]
            };
            let mut acc = 0.0f32;
            for j in 0..both {
                acc += latent(j, ell(j));
            }
            (both..px).for_each(|j| acc += ell(j));
            (both..d).for_each(|j| acc += latent(j, 0.0));
            *lw = acc;
        }
        let m = w.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        math::exp_shifted(w, m);
        let sum: f64 = w.iter().map(|v| *v as f64).sum();
        loss -= m as f64 + sum.ln() - (k as f64).ln();
        // The normalised weight w̃ enters as a constant factor of each sample's gradient.
        for (sm, lw) in w.iter_mut().enumerate() {
            *lw = (*lw as f64 / sum) as f32;
            let rh = (i * k + sm) * px;
            for g in &mut dh[rh..rh + px] {
                *g = -*lw * *g / nf;
            }
        }
    }
    loss
}

/// ∂/∂(μ, log σ²) of each point's encoding into `dout`: the samples' ∂/∂u (`du`) back through
/// the reparameterisation, plus the KL term (k = 1) or log w's own ∂/∂u and ∂/∂log σ² (k > 1).
// Inlined into the chunk: left as a call (the compiler's choice on the code of 2026-12-06), E2's
// pre-training, VAE and IWAE phases ran 2-4 % slower (docs/results/speed.md).
#[inline]
fn to_encoder(
    enc: &[f32],
    (eps, sd, u, wts): (&[f32], &[f32], &[f32], &[f32]),
    du: &[f32],
    (np, d, k, nf): (usize, usize, usize, f32),
    dout: &mut Vec<f32>,
) {
    dout.clear();
    dout.resize(np * 2 * d, 0.0);
    for i in 0..np {
        for sm in 0..k {
            let wt = if k == 1 { 0.0 } else { wts[i * k + sm] };
            for j in 0..d {
                let r = (i * k + sm) * d + j;
                let du = du[r] + wt * u[r] / nf;
                dout[i * 2 * d + j] += du;
                dout[i * 2 * d + d + j] += du * eps[r] * 0.5 * sd[i * d + j];
            }
        }
        for j in 0..d {
            let (mu, lv) = (enc[i * 2 * d + j], enc[i * 2 * d + d + j]);
            if k == 1 {
                dout[i * 2 * d + j] += mu / nf;
                dout[i * 2 * d + d + j] += 0.5 * (lv.exp() - 1.0) / nf;
            } else {
                dout[i * 2 * d + d + j] -= 0.5 / nf;
            }
        }
    }
}

impl<L: Likelihood> GradientEstimator for BoundEstimator<'_, L> {
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
        let (d, px, k) = (self.vae.d, self.vae.data_dim(), self.k);
        let n = batch.len();
        gather_rows(self.x, px, batch, &mut self.xb);
        // The noise, drawn in one stream before the parallel part.
        self.eps.resize(k * n * d, 0.0);
        self.stream.fill(&mut self.eps);
        self.pool.ensure(rayon::current_num_threads());
        // Chunks of whole points (about PIECES or more, at most about `chunk_rows` decoder
        // rows), each run start to finish — encoder, samples, decoder, weights, both backward
        // passes — while its buffers are in cache.
        let per_chunk = piece_rows(
            n,
            MIN_PIECE_ROWS.div_ceil(k),
            (self.vae.chunk_rows() / k).max(1),
        );
        let chunks = n.div_ceil(per_chunk);
        // Two ways to sum the chunks' parameter gradients, the same bits for any thread count:
        // each of at most PIECES groups of chunks into its own copy of the gradients, the copies
        // then added in order; or each chunk keeping the terms of its products, which then run in
        // parallel over the parameters. The copies are cheap while they stay in cache (small
        // networks); for wide networks on modest batches the terms are the smaller.
        let groups = chunks.min(PIECES);
        let sums_bytes = 4 * groups * (g_dec.len() + g_enc.len());
        let kept_bytes = 4 * n * (k * self.vae.dec.terms_per_row() + self.vae.enc.terms_per_row());
        let keep_terms = sums_bytes > CACHE_BYTES && kept_bytes <= CACHE_BYTES;
        let (mut terms, mut parts) = (
            std::mem::take(&mut self.terms),
            std::mem::take(&mut self.parts),
        );
        let this = &*self;
        let run = |c: usize, s: &mut BoundScratch, g: (ParamGrads<'_>, ParamGrads<'_>)| {
            let (i0, i1) = (c * per_chunk, ((c + 1) * per_chunk).min(n));
            let x = &this.xb[i0 * px..i1 * px];
            let eps = &this.eps[i0 * k * d..i1 * k * d];
            this.chunk(p, (x, eps, n as f32), s, g)
        };
        let loss: f64 = if keep_terms {
            terms.resize_with(chunks, Default::default);
            let losses: Vec<f64> = terms[..chunks]
                .par_iter_mut()
                .enumerate()
                .map(|(c, (td, te))| {
                    this.pool
                        .with(|s| run(c, s, (ParamGrads::Keep(td), ParamGrads::Keep(te))))
                })
                .collect();
            let dec: Vec<&ParamTerms> = terms[..chunks].iter().map(|t| &t.0).collect();
            let enc: Vec<&ParamTerms> = terms[..chunks].iter().map(|t| &t.1).collect();
            this.vae.dec.add_param_grads(&dec, g_dec);
            this.vae.enc.add_param_grads(&enc, g_enc);
            losses.iter().sum()
        } else {
            let (nd, ne) = (g_dec.len(), g_enc.len());
            parts.resize_with(groups, Default::default);
            let losses: Vec<f64> = parts[..groups]
                .par_iter_mut()
                .enumerate()
                .map(|(g, (gd, ge))| {
                    gd.clear();
                    gd.resize(nd, 0.0);
                    ge.clear();
                    ge.resize(ne, 0.0);
                    this.pool.with(|s| {
                        (g * chunks / groups..(g + 1) * chunks / groups)
                            .map(|c| run(c, s, (ParamGrads::Add(gd), ParamGrads::Add(ge))))
                            .sum::<f64>()
                    })
                })
                .collect();
            for (out, which) in [(g_dec, 0), (g_enc, 1)] {
                let mut sum = vec![0.0f64; out.len()];
                let slices: Vec<&[f32]> = parts[..groups]
                    .iter()
                    .map(|(gd, ge)| if which == 0 { &gd[..] } else { &ge[..] })
                    .collect();
                add_parts(&slices, &mut sum);
                out.iter_mut().zip(&sum).for_each(|(a, b)| *a += *b as f32);
            }
            losses.iter().sum()
        };
        (self.terms, self.parts) = (terms, parts);
        Ok(loss / n as f64)
    }
}
