//! One block of chains through one transition: the kernel's program of drifts, kicks,
//! Ornstein-Uhlenbeck flows and target evaluations, then the Metropolis test or the recovery of
//! diverged rows. The hot loop of every sampler in the crate.

use super::{Kernel, Op};
use crate::error::{Result, SagdError};
use crate::model::LogDensity;
use crate::real::{sum_sq, Real};
use crate::rng::ChainRng;

/// Sums over a block, combined in block order so that results do not depend on threads.
#[derive(Clone, Copy, Default, serde::Serialize, serde::Deserialize)]
pub(super) struct BlockStats {
    pub(super) divergences: usize,
    pub(super) logp: f64,
    pub(super) rho2: f64,
    pub(super) accept: f64,
    pub(super) dh: f64,
    pub(super) dh_count: usize,
}

impl BlockStats {
    pub(super) fn add(&mut self, s: &BlockStats) {
        self.divergences += s.divergences;
        self.logp += s.logp;
        self.rho2 += s.rho2;
        self.accept += s.accept;
        self.dh += s.dh;
        self.dh_count += s.dh_count;
    }
}

/// The buffers of one block of rows.
pub(super) struct Block<'a, T> {
    first_row: usize,
    x_old: &'a [T],
    x_new: &'a mut [T],
    g_old: &'a [T],
    g_new: &'a mut [T],
    lp_old: &'a [T],
    lp_new: &'a mut [T],
    rho: &'a mut [T],
    noise: &'a mut [T],
    rngs: &'a mut [ChainRng],
    /// The step's normal draws when the caller gives them (each rows × dim, in the program's
    /// order, an Ornstein-Uhlenbeck flow taking two); `None`: each row draws from its stream.
    given: Option<&'a [&'a [T]]>,
}

impl<'a, T> Block<'a, T> {
    pub(super) fn new(first_row: usize, p: BlockParts<'a, T>) -> Self {
        Block {
            first_row,
            x_old: p.0,
            x_new: p.1,
            g_old: p.2,
            g_new: p.3,
            lp_old: p.4,
            lp_new: p.5,
            rho: p.6,
            noise: p.7,
            rngs: p.8,
            given: None,
        }
    }

    /// The block with the step's normal draws given (see [`super::Kernel::run_with_noise`]) rather than
    /// drawn from its rows' streams.
    pub(super) fn with_draws(mut self, given: &'a [&'a [T]]) -> Self {
        self.given = Some(given);
        self
    }
}

/// A block's rows of both state buffers (x, g, log π: buffer 0, buffer 1), momenta, noise and
/// streams, for all the steps it takes.
pub(super) type BlockBuffers<'a, T> = (
    (&'a mut [T], &'a mut [T]),
    (&'a mut [T], &'a mut [T]),
    (&'a mut [T], &'a mut [T]),
    &'a mut [T],
    &'a mut [T],
    &'a mut [ChainRng],
);

pub(super) type BlockParts<'a, T> = (
    &'a [T],
    &'a mut [T],
    &'a [T],
    &'a mut [T],
    &'a [T],
    &'a mut [T],
    &'a mut [T],
    &'a mut [T],
    &'a mut [ChainRng],
);

#[inline(always)]
pub(super) fn fill_noise<T: Real>(noise: &mut [T], rngs: &mut [ChainRng], per_row: usize) {
    for (row, rng) in noise.chunks_exact_mut(per_row).zip(rngs.iter_mut()) {
        rng.normal.fill(row);
    }
}

#[inline(always)]
fn half_sq<T: Real>(v: &[T]) -> f64 {
    0.5 * sum_sq(v)
}

crate::vectorized! {
    /// Runs the kernel's program on one block, then accepts, rejects or recovers each row. Compiled for
    /// AVX-512 and AVX2 with run-time dispatch; no fused multiply-adds, so every path gives the same bits.
    /// With given draws a diverged row restarts at its last state with ρ = 0 (it has no stream to
    /// draw a new momentum from); Metropolis kernels need the streams.
    pub(super) fn run_block<T: Real, D: LogDensity<T>>(
        target: &D,
        kernel: &Kernel<T>,
        b: Block<'_, T>,
        aux: Option<&mut [T]>,
    ) -> Result<BlockStats> {
        let mut aux = aux;
        let Block {
            first_row,
            x_old,
            x_new,
            g_old,
            g_new,
            lp_old,
            lp_new,
            rho,
            noise,
            rngs,
            given,
        } = b;
        // The given draws taken so far.
        let mut taken = 0;
        let rows = lp_old.len();
        let d = x_old.len() / rows.max(1);
        let len = rows * d;
        let mut moved = false;
        let mut fresh = false;
        // HMC: the energy at the start, once momenta are drawn.
        let mut h0: Vec<f64> = Vec::new();
        for op in &kernel.ops {
            match *op {
                Op::Drift(h) => {
                    if moved {
                        x_new
                            .iter_mut()
                            .zip(rho.iter())
                            .for_each(|(x, r)| *x += h * *r);
                    } else {
                        x_new
                            .iter_mut()
                            .zip(x_old.iter().zip(rho.iter()))
                            .for_each(|(x, (xo, r))| *x = *xo + h * *r);
                        moved = true;
                    }
                }
                Op::Kick {
                    decay,
                    grad,
                    noise: s,
                } => {
                    let g = if fresh { &g_new[..] } else { g_old };
                    if s != T::zero() {
                        let eta: &[T] = match given {
                            Some(draws) => {
                                taken += 1;
                                draws[taken - 1]
                            }
                            None => {
                                let eta = &mut noise[..len];
                                fill_noise(eta, rngs, d);
                                eta
                            }
                        };
                        for ((r, gi), e) in rho.iter_mut().zip(g.iter()).zip(eta.iter()) {
                            *r = decay * *r + grad * *gi + s * *e;
                        }
                    } else if decay == T::one() {
                        rho.iter_mut()
                            .zip(g.iter())
                            .for_each(|(r, gi)| *r += grad * *gi);
                    } else {
                        rho.iter_mut()
                            .zip(g.iter())
                            .for_each(|(r, gi)| *r = decay * *r + grad * *gi);
                    }
                }
                Op::Ou {
                    decay,
                    drift,
                    v1,
                    x1,
                    x2,
                } => {
                    let eta = &mut noise[..if given.is_some() { 0 } else { 2 * len }];
                    for ((row, rng), _) in eta
                        .chunks_exact_mut(2 * d)
                        .zip(rngs.iter_mut())
                        .zip(0..rows)
                    {
                        rng.normal.fill(row);
                    }
                    if !moved {
                        x_new.copy_from_slice(x_old);
                        moved = true;
                    }
                    taken += if given.is_some() { 2 } else { 0 };
                    for r in 0..rows {
                        let span = r * d..(r + 1) * d;
                        let (z1, z2) = match given {
                            Some(draws) => (&draws[taken - 2][span.clone()], &draws[taken - 1][span]),
                            None => eta[2 * r * d..2 * (r + 1) * d].split_at(d),
                        };
                        let xs = &mut x_new[r * d..(r + 1) * d];
                        let ps = &mut rho[r * d..(r + 1) * d];
                        for j in 0..d {
                            xs[j] += drift * ps[j] + x1 * z1[j] + x2 * z2[j];
                            ps[j] = decay * ps[j] + v1 * z1[j];
                        }
                    }
                }
                Op::Gradient => {
                    if !moved {
                        x_new.copy_from_slice(x_old);
                        moved = true;
                    }
                    let res = match aux.as_deref_mut() {
                        Some(a) => {
                            a.iter_mut().for_each(|v| *v = T::zero());
                            target.logp_grad_aux(first_row, x_new, lp_new, g_new, a)
                        }
                        None => target.logp_grad(first_row, x_new, lp_new, g_new),
                    };
                    match res {
                        Ok(()) => {}
                        Err(e) if e.is_recoverable() => lp_new.iter_mut().for_each(|v| *v = T::nan()),
                        Err(e) => return Err(SagdError::Model(e)),
                    }
                    fresh = true;
                }
                Op::Refresh => {
                    match given {
                        Some(draws) => {
                            taken += 1;
                            rho.copy_from_slice(draws[taken - 1]);
                        }
                        None => fill_noise(rho, rngs, d),
                    }
                    h0 = (0..rows)
                        .map(|r| -lp_old[r].f64() + half_sq(&rho[r * d..(r + 1) * d]))
                        .collect();
                }
            }
        }
        if !moved {
            x_new.copy_from_slice(x_old);
        }
        if !fresh {
            g_new.copy_from_slice(g_old);
            lp_new.copy_from_slice(lp_old);
        }
        let mut st = BlockStats::default();
        for r in 0..rows {
            let span = r * d..(r + 1) * d;
            // Squares overflow only for states that have left any sensible range: a divergence too.
            let rho2 = sum_sq(&rho[span.clone()]);
            let ok = lp_new[r].is_finite()
                && (sum_sq(&x_new[span.clone()]) + sum_sq(&g_new[span.clone()]) + rho2).is_finite();
            let mut keep = ok;
            let mut diverged = !ok;
            if kernel.metropolis {
                let h1 = -lp_new[r].f64() + 0.5 * rho2;
                let dh = h1 - h0[r];
                let accept = if ok && dh.is_finite() {
                    (-dh).exp().min(1.0)
                } else {
                    0.0
                };
                if ok && dh.is_finite() {
                    st.dh += dh;
                    st.dh_count += 1;
                }
                if dh.is_nan() || dh > 1000.0 {
                    diverged = true;
                }
                st.accept += accept;
                let u = rngs[r].uniform();
                keep = ok && u < accept;
            }
            if !keep {
                x_new[span.clone()].copy_from_slice(&x_old[span.clone()]);
                g_new[span.clone()].copy_from_slice(&g_old[span.clone()]);
                lp_new[r] = lp_old[r];
            }
            if diverged {
                st.divergences += 1;
                match given {
                    Some(_) => rho[span.clone()].iter_mut().for_each(|v| *v = T::zero()),
                    None => rngs[r].normal.fill(&mut rho[span.clone()]),
                }
            }
            st.logp += lp_new[r].f64();
            st.rho2 += if diverged { sum_sq(&rho[span]) } else { rho2 };
        }
        Ok(st)
    }
}
