//! A set of chains stepped together: positions, momenta and cached gradients in flat row-major
//! buffers, one random stream per chain, double buffers for the last accepted state.

use rayon::prelude::*;
use serde::{Deserialize, Serialize};

use super::block::{evaluated, row_finite, run_block, Block, BlockBuffers, BlockStats};
use super::Kernel;
use crate::error::{check_len, Result, SagdError};
use crate::model::LogDensity;
use crate::real::Real;
use crate::rng::ChainRng;

mod steps;

/// Elements per block of rows handed to one task (and to one call of the target).
const BLOCK_ELEMS: usize = 4096;

/// How momenta start.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Momentum {
    /// ρ₀ ~ N(0, I), the stationary law.
    #[default]
    Normal,
    /// ρ₀ = 0.
    Zero,
}

impl Momentum {
    /// The name as the command line spells it.
    pub fn name(self) -> &'static str {
        match self {
            Momentum::Normal => "normal",
            Momentum::Zero => "zero",
        }
    }
}

impl std::fmt::Display for Momentum {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Momentum {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        [Momentum::Normal, Momentum::Zero]
            .into_iter()
            .find(|m| m.name() == s.trim().to_ascii_lowercase())
            .ok_or_else(|| format!("unknown momentum `{s}`: use normal or zero"))
    }
}

/// What one transition of all chains did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct StepInfo {
    /// Chains whose new state was not finite (or, for HMC, whose energy error exceeded 1000): they
    /// were reset to their last finite state with fresh momentum.
    pub divergences: usize,
    /// Mean of log π over chains at the new states.
    pub mean_log_density: f64,
    /// Mean of ρ_j² over chains and coordinates: near 1 at equilibrium; a discretisation that heats
    /// the chain shows here first.
    pub kinetic_temperature: f64,
    /// HMC: mean Metropolis acceptance probability. `None` for Langevin steps.
    pub acceptance: Option<f64>,
    /// HMC: mean energy change H(end) − H(start) over chains with a finite one.
    pub energy_change: Option<f64>,
}

/// What one block's transition produced, as the hook of [`ChainSet::run_steps`] sees it.
#[derive(Clone, Copy, Debug)]
pub struct BlockStep<'a, T> {
    /// The block's first chain.
    pub first_row: usize,
    /// The block's positions after the transition.
    pub positions: &'a [T],
    /// The block's chains that diverged in it (reset to their last finite state).
    pub divergences: usize,
    /// What the target computed beside its gradient at exactly these positions
    /// ([`LogDensity::logp_grad_aux`]): present when asked for, when the kernel ends at its last
    /// evaluation ([`Kernel::ends_at_gradient`]), and when no chain of the block was reset.
    pub aux: Option<&'a [T]>,
}

/// `n` chains of dimension `d`.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(bound = "T: Real")]
pub struct ChainSet<T> {
    n: usize,
    d: usize,
    x: [Vec<T>; 2],
    g: [Vec<T>; 2],
    lp: [Vec<T>; 2],
    rho: Vec<T>,
    cur: usize,
    rngs: Vec<ChainRng>,
    rows_per_block: usize,
    initialized: bool,
    /// Transitions taken.
    pub steps: u64,
    /// Divergences since creation.
    pub divergences: u64,
    #[serde(skip)]
    scratch: Scratch<T>,
    #[serde(skip)]
    stale: Stale,
}

/// After blocks were stepped by several processes: `Some(rows per block)` when this process
/// holds only its own blocks' random streams current. States travel at every exchange; streams,
/// which are most of a chain's bytes, only when another process needs them
/// ([`ChainSet::sync_streams`]).
#[derive(Clone, Copy, Default)]
struct Stale(Option<usize>);

impl PartialEq for Stale {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl std::fmt::Debug for Stale {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Stale({:?})", self.0)
    }
}

/// Noise buffers: working memory, not state. Equal to any other, empty when cloned or loaded.
#[derive(Default)]
struct Scratch<T>(Vec<T>);

impl<T> Clone for Scratch<T> {
    fn clone(&self) -> Self {
        Scratch(Vec::new())
    }
}

impl<T> PartialEq for Scratch<T> {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl<T> std::fmt::Debug for Scratch<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Scratch({})", self.0.len())
    }
}

/// The machine's memory in bytes (Linux: `MemTotal`), if known.
fn memory_total() -> Option<u128> {
    let info = std::fs::read_to_string("/proc/meminfo").ok()?;
    let kb: u128 = info
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    Some(kb * 1024)
}

/// Refuses `n` chains of dimension `d` whose state would not fit in this machine's memory, before
/// anything is allocated: a typed error naming `setting` (what made `n` or `d` so large), where
/// the allocation would otherwise abort the process.
#[doc(hidden)]
pub fn check_chains_fit(
    n: usize,
    d: usize,
    bytes_per_value: usize,
    setting: &'static str,
) -> Result<()> {
    // Two positions, two gradients and the momenta of every coordinate, a log density pair and
    // a random stream per chain.
    let bytes = (n as u128) * (d as u128) * 5 * bytes_per_value as u128
        + (n as u128) * (2 * bytes_per_value as u128 + 64);
    let limit = memory_total().unwrap_or(u128::from(u64::MAX));
    if bytes > limit {
        return Err(SagdError::InvalidSetting {
            name: setting,
            value: format!("{n} chains of dimension {d}"),
            fix: format!(
                "their state would take {:.3e} bytes, more than this machine's {:.3e}: use fewer chains per point, fewer data points or a smaller latent dimension",
                bytes as f64, limit as f64
            ),
        });
    }
    Ok(())
}

impl<T: Real> ChainSet<T> {
    /// `n` chains of dimension `d`, with per-chain random streams from `seed`. Call [`Self::init`]
    /// before stepping (see [`check_chains_fit`] for sizes that come from users).
    pub fn new(n: usize, d: usize, seed: u64) -> Self {
        let len = n * d;
        ChainSet {
            n,
            d,
            x: [vec![T::zero(); len], vec![T::zero(); len]],
            g: [vec![T::zero(); len], vec![T::zero(); len]],
            lp: [vec![T::zero(); n], vec![T::zero(); n]],
            rho: vec![T::zero(); len],
            cur: 0,
            rngs: (0..n as u64).map(|c| ChainRng::new(seed, c)).collect(),
            rows_per_block: (BLOCK_ELEMS / d.max(1)).max(1),
            initialized: false,
            steps: 0,
            divergences: 0,
            scratch: Scratch::default(),
            stale: Stale::default(),
        }
    }

    /// The number of chains.
    pub fn n_chains(&self) -> usize {
        self.n
    }

    /// The dimension of one chain.
    pub fn dim(&self) -> usize {
        self.d
    }

    /// Sets the rows per block (one task, one call of the target). The chains' states do not depend
    /// on it; sums over chains (the solver's ∇θ f) are grouped by it, so their
    /// last bits do (never on the number of threads).
    pub fn set_rows_per_block(&mut self, rows: usize) {
        self.rows_per_block = rows.max(1);
    }

    /// The rows per block.
    pub fn rows_per_block(&self) -> usize {
        self.rows_per_block
    }

    /// Starts (or warm-restarts) the chains at `x0` — one row for all chains or one per chain —
    /// with momenta drawn as `momentum` says, and evaluates the target there.
    pub fn init(
        &mut self,
        target: &impl LogDensity<T>,
        x0: &[T],
        momentum: Momentum,
    ) -> Result<()> {
        self.set_positions(target, x0)?;
        match momentum {
            Momentum::Zero => self.rho.iter_mut().for_each(|r| *r = T::zero()),
            Momentum::Normal => self.refresh_momenta()?,
        }
        Ok(())
    }

    /// Moves the chains to `x0` (one row for all chains, or one per chain), keeping their momenta,
    /// and evaluates the target there.
    pub fn set_positions(&mut self, target: &impl LogDensity<T>, x0: &[T]) -> Result<()> {
        check_len("target dimension", self.d, target.dim())?;
        let (n, d) = (self.n, self.d);
        if x0.len() == d && n != 1 {
            for row in self.x[self.cur].chunks_exact_mut(d.max(1)) {
                row.copy_from_slice(x0);
            }
        } else {
            check_len(
                "initial positions (n_chains × dim, or dim)",
                n * d,
                x0.len(),
            )?;
            self.x[self.cur].copy_from_slice(x0);
        }
        self.evaluate(target)?;
        if let Some(chain) = (0..n).find(|&r| !self.row_finite(self.cur, r)) {
            return Err(SagdError::NonFiniteStart { chain });
        }
        self.initialized = true;
        Ok(())
    }

    /// The chains `rows` (in that order) as a chain set of their own: states, momenta, cached
    /// gradients and random streams. Step it, then put it back with [`ChainSet::scatter`]: a
    /// minibatch's chains advance exactly as they would in place.
    pub fn gather(&self, rows: &[usize]) -> Result<ChainSet<T>> {
        if self.stale.0.is_some() {
            return Err(SagdError::InvalidSetting {
                name: "chains",
                value: "stepped by several processes".into(),
                fix: "call ChainSet::sync_streams first, where every process is".into(),
            });
        }
        let d = self.d;
        let cur = self.cur;
        let take = |v: &[T]| -> Vec<T> {
            rows.iter()
                .flat_map(|&r| v[r * d..(r + 1) * d].iter().copied())
                .collect()
        };
        let x = take(&self.x[cur]);
        let g = take(&self.g[cur]);
        Ok(ChainSet {
            n: rows.len(),
            d,
            x: [x.clone(), x],
            g: [g.clone(), g],
            lp: [
                rows.iter().map(|&r| self.lp[cur][r]).collect(),
                rows.iter().map(|&r| self.lp[cur][r]).collect(),
            ],
            rho: take(&self.rho),
            cur: 0,
            rngs: rows.iter().map(|&r| self.rngs[r].clone()).collect(),
            rows_per_block: self.rows_per_block,
            initialized: self.initialized,
            steps: self.steps,
            divergences: 0,
            scratch: Scratch::default(),
            stale: Stale::default(),
        })
    }

    /// Writes back chains taken by [`ChainSet::gather`] with the same `rows`.
    pub fn scatter(&mut self, sub: &ChainSet<T>, rows: &[usize]) -> Result<()> {
        check_len("gathered chains", rows.len(), sub.n)?;
        self.sync_streams()?;
        let d = self.d;
        let cur = self.cur;
        for (k, &r) in rows.iter().enumerate() {
            self.x[cur][r * d..(r + 1) * d].copy_from_slice(sub.position(k));
            self.g[cur][r * d..(r + 1) * d].copy_from_slice(&sub.gradients()[k * d..(k + 1) * d]);
            self.lp[cur][r] = sub.log_densities()[k];
            self.rho[r * d..(r + 1) * d].copy_from_slice(&sub.rho[k * d..(k + 1) * d]);
            self.rngs[r] = sub.rngs[k].clone();
        }
        self.divergences += sub.divergences;
        Ok(())
    }

    /// Sets the momenta (n_chains × dim values).
    pub fn set_momenta(&mut self, rho: &[T]) -> Result<()> {
        check_len("momenta", self.rho.len(), rho.len())?;
        self.rho.copy_from_slice(rho);
        Ok(())
    }

    /// Draws fresh momenta ρ ~ N(0, I) from each chain's stream.
    pub fn refresh_momenta(&mut self) -> Result<()> {
        self.sync_streams()?;
        let d = self.d.max(1);
        for (row, rng) in self.rho.chunks_exact_mut(d).zip(self.rngs.iter_mut()) {
            rng.normal.fill(row);
        }
        Ok(())
    }

    /// Re-evaluates the target at the current positions (after θ changed, say), block by block in
    /// parallel. A block whose evaluation fails recoverably gets NaN log densities.
    pub fn evaluate(&mut self, target: &impl LogDensity<T>) -> Result<()> {
        let cur = self.cur;
        let (x, g, lp) = (&self.x[cur], &mut self.g[cur], &mut self.lp[cur]);
        let rows = self.rows_per_block.min(self.n.max(1));
        let bd = (rows * self.d).max(1);
        type Parts<'a, T> = (usize, ((&'a [T], &'a mut [T]), &'a mut [T]));
        let block = |(i, ((xb, gb), lpb)): Parts<'_, T>| {
            evaluated(target.logp_grad(i * rows, xb, lpb, gb), lpb)
        };
        let results: Vec<Result<()>> = if self.n <= rows || rayon::current_num_threads() == 1 {
            x.chunks(bd)
                .zip(g.chunks_mut(bd))
                .zip(lp.chunks_mut(rows))
                .enumerate()
                .map(block)
                .collect()
        } else {
            x.par_chunks(bd)
                .zip(g.par_chunks_mut(bd))
                .zip(lp.par_chunks_mut(rows))
                .enumerate()
                .map(block)
                .collect()
        };
        results.into_iter().collect()
    }

    /// All positions, row-major (n_chains × dim).
    pub fn positions(&self) -> &[T] {
        &self.x[self.cur]
    }

    /// The position of chain `r`.
    pub fn position(&self, r: usize) -> &[T] {
        &self.x[self.cur][r * self.d..(r + 1) * self.d]
    }

    /// All momenta, row-major.
    pub fn momenta(&self) -> &[T] {
        &self.rho
    }

    /// log π at the current positions, one per chain.
    pub fn log_densities(&self) -> &[T] {
        &self.lp[self.cur]
    }

    /// ∇log π at the current positions, row-major.
    pub fn gradients(&self) -> &[T] {
        &self.g[self.cur]
    }

    fn row_finite(&self, buf: usize, r: usize) -> bool {
        row_finite(&self.x[buf], &self.g[buf], &self.lp[buf], r, self.d)
    }
}

#[cfg(test)]
mod tests {
    use super::check_chains_fit;

    #[test]
    fn chains_beyond_the_machine_s_memory_are_refused_by_name() {
        assert!(check_chains_fit(1000, 10, 8, "chains_per_point").is_ok());
        let err = check_chains_fit(usize::MAX, usize::MAX, 8, "chains_per_point")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("`chains_per_point`") && err.contains("fewer chains"),
            "{err}"
        );
    }
}
