//! SAGD's pass over a minibatch: Langevin chains on each image's latent, warm-started by the
//! frozen encoder, stepped in blocks of rows, and the generator's gradient averaged over their
//! states.

use std::sync::Mutex;

use sagd::error::{check_len, LogpError};
use sagd::model::LogDensity;

use super::*;

/// What both of SAGD's passes over a minibatch read: the networks, the images, the encoder's
/// output on them and the chains' start draws ε.
struct Minibatch<'a> {
    m: &'a BernoulliVae,
    dec: &'a [f32],
    packed: &'a PackedWeights,
    x: &'a [f32],
    enc: &'a [f32],
    eps: &'a [f32],
    /// Images b, and chains (rows) C·b.
    images: usize,
    rows: usize,
    /// Where persistent chains start instead of the encoder's draw and ρ₀ (their rows marked).
    carried: Option<&'a Carried>,
}

/// The chains of a minibatch that an earlier visit of their images left, for chains that persist
/// ([`Chains::refresh_every`]): row r (chain c·b + i, of image i) starts, where `from[r]`, at row
/// r of `u` and `rho` instead of the encoder's draw and ρ₀. [`sagd_batch_continued`] writes every
/// row's last position and momentum back.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Carried {
    /// The rows that continue (C·b).
    pub from: Vec<bool>,
    /// Positions (C·b × d).
    pub u: Vec<f32>,
    /// Momenta (C·b × d).
    pub rho: Vec<f32>,
}

impl Carried {
    /// Refuses, by name, carried chains that are not `rows` rows (C·b) of `d` values.
    pub(crate) fn check(&self, rows: usize, d: usize) -> Result<()> {
        for (what, expected, got) in [
            ("the carried chains' marks (C·b)", rows, self.from.len()),
            ("the carried positions (C·b × d)", rows * d, self.u.len()),
            ("the carried momenta (C·b × d)", rows * d, self.rho.len()),
        ] {
            check_len(what, expected, got)?;
        }
        Ok(())
    }
}

impl Minibatch<'_> {
    /// The images of chains `s..e` (chain r belongs to image r mod b) into `xs`, and their starts
    /// u₀ = μ + σ ε (or where a carried chain was left) into `u`.
    fn starts(&self, (s, e): (usize, usize), xs: &mut Vec<f32>, u: &mut [f32]) {
        let (b, d, px) = (self.images, self.m.d, self.m.pixels());
        xs.clear();
        for (k, row) in (s..e).enumerate() {
            let i = row % b;
            xs.extend_from_slice(&self.x[i * px..(i + 1) * px]);
            if let Some(c) = self.carried.filter(|c| c.from[row]) {
                u[k * d..(k + 1) * d].copy_from_slice(&c.u[row * d..(row + 1) * d]);
                continue;
            }
            for j in 0..d {
                let (mu, lv) = (self.enc[i * 2 * d + j], self.enc[i * 2 * d + d + j]);
                u[k * d + j] = mu + (0.5 * lv).exp() * self.eps[row * d + j];
            }
        }
    }

    /// This process's blocks of [`SUB_ROWS`] chains from their starts and momenta `rho0` (or
    /// the carried ones) through `steps` transitions of `kernel` on the draws `eta`, side by
    /// side; every process's last positions, in chain order, and where chains persist their
    /// momenta after whole transitions.
    fn last_states(
        &self,
        kernel: &Kernel<f32>,
        steps: usize,
        (rho0, eta): (&[f32], &[f32]),
        pool: &WorkspacePool<Buffers>,
    ) -> Result<(Vec<f32>, Option<Vec<f32>>)> {
        let (rows, d) = (self.rows, self.m.d);
        let blocks = sagd::share::mine(rows.div_ceil(SUB_ROWS));
        let my_rows = (blocks.end * SUB_ROWS).min(rows) - (blocks.start * SUB_ROWS).min(rows);
        let (mut u, mut rho_out) = (vec![0.0f32; my_rows * d], vec![0.0f32; my_rows * d]);
        u.par_chunks_mut(SUB_ROWS * d)
            .zip(rho_out.par_chunks_mut(SUB_ROWS * d))
            .enumerate()
            .try_for_each(|(blk, (u, rho_out))| -> Result<()> {
                let blk = blocks.start + blk;
                let (s, e) = (blk * SUB_ROWS, (blk * SUB_ROWS + SUB_ROWS).min(rows));
                pool.with(|bufs| {
                    let mut xs = Vec::with_capacity((e - s) * self.m.pixels());
                    self.starts((s, e), &mut xs, u);
                    let mut rho = rho0[s * d..e * d].to_vec();
                    if let Some(c) = self.carried {
                        for row in (s..e).filter(|&r| c.from[r]) {
                            rho[(row - s) * d..(row - s + 1) * d]
                                .copy_from_slice(&c.rho[row * d..(row + 1) * d]);
                        }
                    }
                    let posterior = Posterior {
                        m: self.m,
                        dec: self.dec,
                        packed: self.packed,
                        xs: &xs,
                        work: Mutex::new((&mut bufs.gen, vec![0.0f32; (e - s) * self.m.pixels()])),
                    };
                    // Draw i of the block: its rows of the i-th η block.
                    let draws = |i: usize| &eta[(i * rows + s) * d..(i * rows + e) * d];
                    if self.carried.is_some() {
                        kernel.continue_with_noise(&posterior, u, &mut rho, steps, draws)?;
                        rho_out.copy_from_slice(&rho);
                        Ok(())
                    } else {
                        kernel
                            .run_with_noise(&posterior, u, &mut rho, steps, draws)
                            .map(|_| ())
                    }
                })
            })?;
        let rho = match self.carried {
            Some(_) => Some(sagd::share::gather(rho_out)?),
            None => None,
        };
        Ok((sagd::share::gather(u)?, rho))
    }

    /// The gradient of the mean of −log p(x | u; θ) at the chains' last states `u` into
    /// `grad_gen`, in [`FINAL_PIECES`] pieces; the loss and the chains' mean distance from their
    /// starts.
    fn gradient_at(
        &self,
        u: &[f32],
        grad_gen: &mut [f32],
        scratch: &mut Scratch,
    ) -> Result<BatchInfo> {
        let (rows, d) = (self.rows, self.m.d);
        let scale = 1.0 / rows as f32;
        let (pool, work) = scratch.pieces_into(grad_gen, &mut [], rows, FINAL_PIECES);
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
                        let (mut xs, mut u0) =
                            (Vec::with_capacity(n * self.m.pixels()), vec![0.0f32; n * d]);
                        self.starts((s, e), &mut xs, &mut u0);
                        let ue = &u[s * d..e * d];
                        self.m.gen.forward_packed(self.dec, self.packed, ue, n, ws);
                        let mut dl = vec![0.0f32; n * self.m.pixels()];
                        loss -= bernoulli_logits(ws.output(), &xs, &mut dl);
                        dl.iter_mut().for_each(|g| *g *= -scale);
                        let (gg, _) = piece.sinks(s);
                        self.m
                            .gen
                            .backward_packed(self.dec, self.packed, ws, &dl, gg, None);
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
        scratch.add_pieces(grad_gen, &mut [])?;
        let sums = sagd::share::gather(sums)?;
        Ok(BatchInfo {
            loss: sums.iter().map(|s| s.0).sum::<f64>() / rows as f64,
            displacement: sums.iter().map(|s| s.1).sum::<f64>() / rows as f64,
        })
    }
}

/// SAGD's gradient for the generator on the binarised images `x` (b × pixels), encoder frozen:
/// `chains.per_image` chains per image from u₀ = μ + σ ε, ρ₀, run `chains.steps` steps of the
/// core's Langevin program ([`Kernel::run_with_noise`]) on p(u | x; θ); the gradient of the mean
/// of −log p(x | u; θ) at their last states goes into `grad_gen` (overwritten). `noise` holds, in
/// order, ε (C × b × d), ρ₀ (C·b × d) and the steps' draws (steps × m × C·b × d, m the scheme's
/// [`Kernel::normals_per_step`]); chain r = c·b + i belongs to image i.
///
/// Two passes, each cut by the shapes alone: the chains in blocks of [`SUB_ROWS`] (they need no
/// parameter gradient, so any number of blocks can run side by side: 40 for 200 images), then the
/// gradient at their last states in [`FINAL_PIECES`] pieces with their own gradients, added in
/// order. Both split over processes (same bits): each runs its share of the blocks and of the
/// pieces; the chains' last states are gathered, the gradients relayed in piece order.
pub fn sagd_batch(
    m: &BernoulliVae,
    p: &VaeParams,
    x: &[f32],
    chains: &Chains,
    noise: &[f32],
    grad_gen: &mut [f32],
    scratch: &mut Scratch,
) -> Result<BatchInfo> {
    sagd_pass(m, p, x, chains, noise, None, grad_gen, scratch).map(|(info, _)| info)
}

/// [`sagd_batch`] on chains that persist between visits: the rows `carried` marks start where it
/// holds them (their ε and ρ₀ in `noise` unused), every transition runs whole (one more
/// evaluation of the posterior per chain than [`sagd_batch`]), and every row's last position and
/// momentum go back into `carried` (all of its rows then marked), where the next visit of the
/// images continues them.
#[allow(clippy::too_many_arguments)]
pub fn sagd_batch_continued(
    m: &BernoulliVae,
    p: &VaeParams,
    x: &[f32],
    chains: &Chains,
    noise: &[f32],
    carried: &mut Carried,
    grad_gen: &mut [f32],
    scratch: &mut Scratch,
) -> Result<BatchInfo> {
    carried.check(chains.per_image * (x.len() / m.pixels()), m.d)?;
    let (info, last) = sagd_pass(m, p, x, chains, noise, Some(carried), grad_gen, scratch)?;
    if let Some(last) = last {
        *carried = last;
    }
    Ok(info)
}

/// [`sagd_batch`], from `carried` where given: the pass's measures, and then the chains' last
/// positions and momenta (every row marked to continue).
#[allow(clippy::too_many_arguments)]
fn sagd_pass(
    m: &BernoulliVae,
    p: &VaeParams,
    x: &[f32],
    chains: &Chains,
    noise: &[f32],
    carried: Option<&Carried>,
    grad_gen: &mut [f32],
    scratch: &mut Scratch,
) -> Result<(BatchInfo, Option<Carried>)> {
    let d = m.d;
    let images = x.len() / m.pixels();
    let rows = chains.per_image * images;
    let expected = sagd_noise_len(m, chains, images);
    check_len("SAGD's noise (sagd_noise_len draws)", expected, noise.len())?;
    let kernel = chains.kernel()?;
    let enc = encode(m, &p.enc, x, scratch);
    let (eps, rest) = noise.split_at(rows * d);
    let (rho0, eta) = rest.split_at(rows * d);
    let mut packed = std::mem::take(&mut scratch.packed.0);
    m.gen.pack(&p.dec, true, &mut packed);
    let batch = Minibatch {
        m,
        dec: &p.dec,
        packed: &packed,
        x,
        enc: &enc,
        eps,
        images,
        rows,
        carried,
    };
    let result = batch
        .last_states(&kernel, chains.steps, (rho0, eta), &scratch.pool)
        .and_then(|(u, rho)| {
            let info = batch.gradient_at(&u, grad_gen, scratch)?;
            let last = rho.map(|rho| Carried {
                from: vec![true; rows],
                u,
                rho,
            });
            Ok((info, last))
        });
    scratch.packed.0 = packed;
    result
}

/// Draws per image of [`sagd_batch`]'s `noise`: ε, ρ₀ and the steps' η.
pub fn sagd_noise_len(m: &BernoulliVae, chains: &Chains, images: usize) -> usize {
    sagd_noise_blocks(chains) * images * m.d
}

/// The blocks of b rows (one per image, chain c·b + i of image i) in [`sagd_batch`]'s `noise`:
/// `per_image` each for ε, ρ₀ and every normal draw of every step (one per step for Euler and
/// BAOAB, two for OBABO, four for UBU). Settings that make no kernel count one per step; the
/// pass refuses them.
pub fn sagd_noise_blocks(chains: &Chains) -> usize {
    let per_step = chains.kernel().map_or(1, |k| k.normals_per_step());
    (2 + chains.steps * per_step) * chains.per_image
}

/// The posterior p(u | x; θ) ∝ p(x | u; θ) N(u; 0, I) of one block's chains (row r the latent of
/// image `xs[r]`), as the core's Langevin program reads a target. The block's task is its only
/// user: the lock is never contended.
struct Posterior<'a> {
    m: &'a BernoulliVae,
    dec: &'a [f32],
    packed: &'a PackedWeights,
    xs: &'a [f32],
    /// The generator's buffers and the logits' gradient.
    work: Mutex<(&'a mut Workspace, Vec<f32>)>,
}

impl LogDensity<f32> for Posterior<'_> {
    fn dim(&self) -> usize {
        self.m.d
    }

    /// log p(x | u) − |u|²/2 and its gradient ∇u log p(x | u) − u.
    fn logp_grad(
        &self,
        _first_row: usize,
        u: &[f32],
        logp: &mut [f32],
        gu: &mut [f32],
    ) -> std::result::Result<(), LogpError> {
        let mut work = self
            .work
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let (ws, dl) = &mut *work;
        let (gen, n, d, px) = (&self.m.gen, logp.len(), self.m.d, self.m.pixels());
        gen.forward_packed(self.dec, self.packed, u, n, ws);
        let rows = ws.output().chunks_exact(px).zip(self.xs.chunks_exact(px));
        for (((lp, (logits, x)), dl), ur) in logp
            .iter_mut()
            .zip(rows)
            .zip(dl.chunks_exact_mut(px))
            .zip(u.chunks_exact(d))
        {
            let prior: f64 = ur.iter().map(|v| (v * v) as f64).sum();
            *lp = (bernoulli_logits(logits, x, dl) - 0.5 * prior) as f32;
        }
        gen.backward_packed(self.dec, self.packed, ws, dl, ParamGrads::Skip, Some(gu));
        gu.iter_mut().zip(u).for_each(|(g, v)| *g -= v);
        Ok(())
    }
}
