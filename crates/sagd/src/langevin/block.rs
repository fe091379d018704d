//! One block of chains through one transition: the kernel's program of drifts, kicks,
//! Ornstein-Uhlenbeck flows and target evaluations, then the Metropolis test or the recovery of
//! diverged rows. The hot loop of every sampler in the crate.

use super::{Kernel, Op};
use crate::error::{LogpError, Result, SagdError};
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

    /// The block with the step's normal draws given (see [`super::Kernel::run_with_noise`])
    /// rather than drawn from its rows' streams.
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

/// A target's evaluation of some rows taken in: a recoverable error marks their log densities
/// NaN (a divergence, recovered by whoever steps them), any other error stops the run.
#[inline(always)]
pub(super) fn evaluated<T: Real>(
    res: std::result::Result<(), LogpError>,
    logp: &mut [T],
) -> Result<()> {
    match res {
        Ok(()) => Ok(()),
        Err(e) if e.is_recoverable() => {
            logp.iter_mut().for_each(|v| *v = T::nan());
            Ok(())
        }
        Err(e) => Err(SagdError::Model(e)),
    }
}

/// Whether row `r` of positions `x`, gradients `g` (rows × d) and log densities `lp` is finite.
pub(super) fn row_finite<T: Real>(x: &[T], g: &[T], lp: &[T], r: usize, d: usize) -> bool {
    let span = r * d..(r + 1) * d;
    lp[r].is_finite()
        && x[span.clone()].iter().all(|v| v.is_finite())
        && g[span].iter().all(|v| v.is_finite())
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
        let mut t = Transition::new(b);
        for op in &kernel.ops {
            match *op {
                Op::Drift(h) => t.drift(h),
                Op::Kick { decay, grad, noise } => t.kick(decay, grad, noise),
                Op::Ou {
                    decay,
                    drift,
                    v1,
                    x1,
                    x2,
                } => t.ou((decay, drift, v1, x1, x2)),
                Op::Gradient => t.gradient(target, aux.as_deref_mut())?,
                Op::Refresh => t.refresh(),
            }
        }
        t.finish();
        Ok(t.b.settle(kernel.metropolis, &t.h0))
    }
}

/// A block's transition under way: its buffers, and where the program has taken them.
struct Transition<'a, T> {
    b: Block<'a, T>,
    rows: usize,
    d: usize,
    /// Whether the positions moved yet (the new buffer holds them), and whether the target was
    /// evaluated there (the new gradient is current).
    moved: bool,
    fresh: bool,
    /// The given draws taken so far.
    taken: usize,
    /// HMC: the energy at the start, once momenta are drawn.
    h0: Vec<f64>,
}

impl<'a, T: Real> Transition<'a, T> {
    #[inline(always)]
    fn new(b: Block<'a, T>) -> Self {
        let rows = b.lp_old.len();
        let d = b.x_old.len() / rows.max(1);
        Transition {
            b,
            rows,
            d,
            moved: false,
            fresh: false,
            taken: 0,
            h0: Vec::new(),
        }
    }

    /// The positions in the new buffer (copied from the old at the first move).
    #[inline(always)]
    fn start_moving(&mut self) {
        if !self.moved {
            self.b.x_new.copy_from_slice(self.b.x_old);
            self.moved = true;
        }
    }

    /// ξ += h ρ.
    #[inline(always)]
    fn drift(&mut self, h: T) {
        let b = &mut self.b;
        if self.moved {
            b.x_new
                .iter_mut()
                .zip(b.rho.iter())
                .for_each(|(x, r)| *x += h * *r);
        } else {
            b.x_new
                .iter_mut()
                .zip(b.x_old.iter().zip(b.rho.iter()))
                .for_each(|(x, (xo, r))| *x = *xo + h * *r);
            self.moved = true;
        }
    }

    /// ρ = decay·ρ + grad·∇log π(ξ) + noise·η.
    #[inline(always)]
    fn kick(&mut self, decay: T, grad: T, s: T) {
        let b = &mut self.b;
        let g = if self.fresh { &b.g_new[..] } else { b.g_old };
        let len = self.rows * self.d;
        let eta: Option<&[T]> = match (s != T::zero(), b.given) {
            (false, _) => None,
            (true, Some(draws)) => {
                self.taken += 1;
                Some(draws[self.taken - 1])
            }
            (true, None) => {
                let eta = &mut b.noise[..len];
                fill_noise(eta, b.rngs, self.d);
                Some(eta)
            }
        };
        kick(b.rho, g, eta, (decay, grad, s));
    }

    /// The exact Ornstein-Uhlenbeck flow, on two blocks of draws.
    #[inline(always)]
    fn ou(&mut self, coefficients: (T, T, T, T, T)) {
        self.start_moving();
        let (rows, d) = (self.rows, self.d);
        let b = &mut self.b;
        let eta = &mut b.noise[..if b.given.is_some() { 0 } else { 2 * rows * d }];
        for ((row, rng), _) in eta
            .chunks_exact_mut(2 * d)
            .zip(b.rngs.iter_mut())
            .zip(0..rows)
        {
            rng.normal.fill(row);
        }
        let given = b.given;
        let taken = self.taken + if given.is_some() { 2 } else { 0 };
        self.taken = taken;
        // Row r's two draws: from the given blocks, or its stream's 2d in a row.
        let z = |r: usize| match given {
            Some(draws) => {
                let span = r * d..(r + 1) * d;
                (&draws[taken - 2][span.clone()], &draws[taken - 1][span])
            }
            None => eta[2 * r * d..2 * (r + 1) * d].split_at(d),
        };
        ou_flow(b.x_new, b.rho, d, coefficients, z);
    }

    /// log π and its gradient at the current positions (and the target's auxiliary output).
    #[inline(always)]
    fn gradient<D: LogDensity<T>>(&mut self, target: &D, aux: Option<&mut [T]>) -> Result<()> {
        self.start_moving();
        let b = &mut self.b;
        let res = match aux {
            Some(a) => {
                a.iter_mut().for_each(|v| *v = T::zero());
                target.logp_grad_aux(b.first_row, b.x_new, b.lp_new, b.g_new, a)
            }
            None => target.logp_grad(b.first_row, b.x_new, b.lp_new, b.g_new),
        };
        evaluated(res, b.lp_new)?;
        self.fresh = true;
        Ok(())
    }

    /// ρ ~ N(0, I), and the energy at the start (HMC).
    #[inline(always)]
    fn refresh(&mut self) {
        let (rows, d) = (self.rows, self.d);
        let b = &mut self.b;
        match b.given {
            Some(draws) => {
                self.taken += 1;
                b.rho.copy_from_slice(draws[self.taken - 1]);
            }
            None => fill_noise(b.rho, b.rngs, d),
        }
        self.h0 = (0..rows)
            .map(|r| -b.lp_old[r].f64() + half_sq(&b.rho[r * d..(r + 1) * d]))
            .collect();
    }

    /// The block with every new buffer written (what the program left alone carried over), and
    /// the energies at the start.
    #[inline(always)]
    fn finish(&mut self) {
        self.start_moving();
        let b = &mut self.b;
        if !self.fresh {
            b.g_new.copy_from_slice(b.g_old);
            b.lp_new.copy_from_slice(b.lp_old);
        }
    }
}

impl<T: Real> Block<'_, T> {
    /// After the program: each row accepted or put back (HMC's Metropolis test), a row whose state
    /// is not finite counted as a divergence and restarted at its last state; the block's sums.
    #[inline(always)]
    fn settle(&mut self, metropolis: bool, h0: &[f64]) -> BlockStats {
        let Block {
            x_old,
            x_new,
            g_old,
            g_new,
            lp_old,
            lp_new,
            rho,
            rngs,
            given,
            ..
        } = self;
        let rows = lp_old.len();
        let d = x_old.len() / rows.max(1);
        let mut st = BlockStats::default();
        for r in 0..rows {
            let span = r * d..(r + 1) * d;
            // Squares overflow only for states that have left any sensible range: a divergence too.
            let rho2 = sum_sq(&rho[span.clone()]);
            let ok = lp_new[r].is_finite()
                && (sum_sq(&x_new[span.clone()]) + sum_sq(&g_new[span.clone()]) + rho2).is_finite();
            let mut keep = ok;
            let mut diverged = !ok;
            if metropolis {
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
        st
    }
}

/// ρ = decay·ρ + grad·g + noise·η (η given when the noise coefficient is not 0).
#[inline(always)]
fn kick<T: Real>(rho: &mut [T], g: &[T], eta: Option<&[T]>, (decay, grad, s): (T, T, T)) {
    match eta {
        Some(eta) => {
            for ((r, gi), e) in rho.iter_mut().zip(g.iter()).zip(eta.iter()) {
                *r = decay * *r + grad * *gi + s * *e;
            }
        }
        None if decay == T::one() => rho
            .iter_mut()
            .zip(g.iter())
            .for_each(|(r, gi)| *r += grad * *gi),
        None => rho
            .iter_mut()
            .zip(g.iter())
            .for_each(|(r, gi)| *r = decay * *r + grad * *gi),
    }
}

/// The Ornstein-Uhlenbeck flow on each row, `z(r)` its two blocks of draws:
/// ξ += drift·ρ + x1·ζ1 + x2·ζ2, ρ = decay·ρ + v1·ζ1.
#[inline(always)]
fn ou_flow<'z, T: Real + 'z>(
    x: &mut [T],
    rho: &mut [T],
    d: usize,
    (decay, drift, v1, x1, x2): (T, T, T, T, T),
    z: impl Fn(usize) -> (&'z [T], &'z [T]),
) {
    for (r, (xs, ps)) in x
        .chunks_exact_mut(d.max(1))
        .zip(rho.chunks_exact_mut(d.max(1)))
        .enumerate()
    {
        let (z1, z2) = z(r);
        for j in 0..d {
            xs[j] += drift * ps[j] + x1 * z1[j] + x2 * z2[j];
            ps[j] = decay * ps[j] + v1 * z1[j];
        }
    }
}
