//! The likelihood's own optimum for E2's 1-D model X = Z + N(0, 1): the nonparametric maximum
//! likelihood estimate of π (Kiefer and Wolfowitz), the law of Z over all laws, not only those a
//! decoder can express. Every method of Table 1 maximises (a bound on) this same likelihood in a
//! smaller family, so how far the NPMLE lies from π shows how far from π maximum likelihood leads
//! on these data: a method that fits the likelihood better need not come closer to π.
//!
//! The NPMLE is discrete (Lindsay 1983). It is computed on a fine grid of atoms spanning the data
//! by EM on the atoms' weights, a concave problem whose optimality gap is known at every iterate:
//! with D_k = (1/n) Σ_i φ(x_i − a_k) / p̂(x_i), the mean log-likelihood is within max_k D_k − 1 of
//! the best over the grid.

use rayon::prelude::*;
use sagd::metrics::{ks_w1, Law};
use serde::{Deserialize, Serialize};

use super::eval::noisy_density;
use super::{simulate, Case};

/// A law of Z on a grid of atoms, fitted by maximum likelihood to observations X = Z + N(0, 1).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Npmle {
    /// The atoms, evenly spaced from the smallest observation to the largest.
    pub atoms: Vec<f64>,
    /// Their weights (summing to 1).
    pub weights: Vec<f64>,
    /// Mean log-likelihood per observation, log ∑_k w_k φ(x_i − a_k) averaged over i.
    pub loglik_per_point: f64,
    /// Bound on how far the mean log-likelihood is below the best over the grid: max_k D_k − 1.
    pub gap: f64,
    /// EM iterations run.
    pub iterations: usize,
}

/// The NPMLE of π from observations `x` (at least one, all finite) on `atoms` evenly spaced
/// atoms (at least 2), from equal weights until the optimality gap is below `tol` or after
/// `max_iter` iterations: the last of [`npmle_path`].
pub fn npmle(x: &[f64], atoms: usize, max_iter: usize, tol: f64) -> Npmle {
    let mut path = npmle_path(x, atoms, max_iter, &[tol]);
    path.remove(0)
}

/// The iterates of [`npmle`] on its way to the maximum: for each of `tols` (decreasing), the
/// first whose optimality gap is at most it (the last iterate for those not reached within
/// `max_iter` iterations: their `gap` says so). Each iteration is two EM steps extrapolated by SQUAREM (Varadhan and
/// Roland 2008, the SqS3 step), kept only where it does not lower the likelihood: plain EM
/// needs tens of thousands of steps to close the gap to 1e-5 on Table 1's data.
pub fn npmle_path(x: &[f64], atoms: usize, max_iter: usize, tols: &[f64]) -> Vec<Npmle> {
    let (lo, hi) = range(x);
    let k = atoms.max(2);
    let a: Vec<f64> = (0..k)
        .map(|j| lo + (hi - lo) * j as f64 / (k - 1) as f64)
        .collect();
    // φ(x_i − a_j), row by row.
    let like: Vec<f64> = x
        .iter()
        .flat_map(|xi| {
            a.iter()
                .map(move |aj| noisy_density(*xi, &[(*aj, 1.0)], 1.0))
        })
        .collect();
    let n = x.len() as f64;
    // The mean log-likelihood at w, and D_j = (1/n) Σ_i φ(x_i − a_j) / p̂(x_i) into d.
    let pass = |w: &[f64], d: &mut [f64]| -> f64 {
        d.iter_mut().for_each(|v| *v = 0.0);
        let mut ll = 0.0;
        for row in like.chunks_exact(k) {
            let p: f64 = row.iter().zip(w).map(|(l, w)| l * w).sum();
            ll += p.ln();
            for (dj, l) in d.iter_mut().zip(row) {
                *dj += l / (p * n);
            }
        }
        ll / n
    };
    // EM: w_j ← w_j D_j (the weights stay a probability: Σ_j w_j D_j = 1).
    let em = |w: &[f64], d: &[f64]| -> Vec<f64> { w.iter().zip(d).map(|(w, d)| w * d).collect() };
    let mut w = vec![1.0 / k as f64; k];
    let mut d = vec![0.0; k];
    let mut iterations = 0;
    let mut path = Vec::with_capacity(tols.len());
    loop {
        let ll0 = pass(&w, &mut d);
        let gap = d.iter().cloned().fold(f64::NEG_INFINITY, f64::max) - 1.0;
        while path.len() < tols.len() && (gap <= tols[path.len()] || iterations >= max_iter) {
            path.push(Npmle {
                atoms: a.clone(),
                weights: w.clone(),
                loglik_per_point: ll0,
                gap,
                iterations,
            });
        }
        if path.len() == tols.len() {
            return path;
        }
        iterations += 1;
        let w1 = em(&w, &d);
        pass(&w1, &mut d);
        let w2 = em(&w1, &d);
        let r: Vec<f64> = w1.iter().zip(&w).map(|(b, a)| b - a).collect();
        let v: Vec<f64> = w2
            .iter()
            .zip(&w1)
            .zip(&r)
            .map(|((c, b), r)| c - b - r)
            .collect();
        let norm2 = |u: &[f64]| u.iter().map(|t| t * t).sum::<f64>().sqrt();
        // The step from w₀ by α; α = −1 is w₂ itself. A step that leaves the simplex moves α
        // back toward −1 (zeroing a weight instead would end that atom for good: EM multiplies).
        let step = |alpha: f64| -> Vec<f64> {
            w.iter()
                .zip(&r)
                .zip(&v)
                .map(|((w, r), v)| w - 2.0 * alpha * r + alpha * alpha * v)
                .collect()
        };
        let mut alpha = (-norm2(&r) / norm2(&v)).min(-1.0);
        if !alpha.is_finite() {
            alpha = -1.0;
        }
        let mut jump = step(alpha);
        while alpha < -1.0 && jump.iter().any(|t| *t <= 0.0) {
            alpha = if alpha > -1.01 {
                -1.0
            } else {
                0.5 * (alpha - 1.0)
            };
            jump = step(alpha);
        }
        if alpha == -1.0 {
            jump = w2.clone();
        }
        let total: f64 = jump.iter().sum();
        jump.iter_mut().for_each(|t| *t /= total);
        let ll_jump = pass(&jump, &mut d);
        w = if ll_jump.is_finite() && ll_jump >= ll0 {
            em(&jump, &d)
        } else {
            w2
        };
    }
}

impl Npmle {
    /// `m` quantiles of the fitted law, at (i + ½)/m: a sample whose empirical law is the
    /// NPMLE to within 1/m in distribution function, for [`sagd::metrics::ks_w1`].
    pub fn quantile_sample(&self, m: usize) -> Vec<f64> {
        let mut out = Vec::with_capacity(m);
        let (mut j, mut cum) = (0, self.weights[0]);
        for i in 0..m {
            let p = (i as f64 + 0.5) / m as f64;
            while cum < p && j + 1 < self.atoms.len() {
                j += 1;
                cum += self.weights[j];
            }
            out.push(self.atoms[j]);
        }
        out
    }
}

/// The smallest and the largest observation.
fn range(x: &[f64]) -> (f64, f64) {
    x.iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), v| {
            (a.min(*v), b.max(*v))
        })
}

/// Mean log-likelihood per observation of X = Z + N(0, 1) with Z ~ `law`: ∫ φ(x − z) dF(z) over
/// cells of z 0.002 wide, each cell's exact mass (from `law.cdf`) at its midpoint.
pub fn loglik_of_law(law: &Law, x: &[f64]) -> f64 {
    let (lo, hi) = range(x);
    let (lo, hi) = (lo - 10.0, hi + 10.0);
    let cells = ((hi - lo) / 0.002).ceil() as usize;
    let edges: Vec<f64> = (0..=cells)
        .map(|c| lo + (hi - lo) * c as f64 / cells as f64)
        .collect();
    let cdf: Vec<f64> = edges.iter().map(|e| law.cdf(*e)).collect();
    let cells: Vec<(f64, f64)> = edges
        .windows(2)
        .zip(cdf.windows(2))
        .map(|(e, f)| (0.5 * (e[0] + e[1]), f[1] - f[0]))
        .filter(|(_, m)| *m > 0.0)
        .collect();
    let total: f64 = x
        .par_iter()
        .map(|xi| noisy_density(*xi, &cells, 1.0).ln())
        .collect::<Vec<f64>>()
        .iter()
        .sum();
    total / x.len() as f64
}

/// The NPMLE of one replication of a 1-D case of Table 1 (the replication's own data: seed
/// `seed`, `n` points), or an iterate on its way there, measured as the table measures a method.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct NpmleReplication {
    /// The replication's seed.
    pub seed: u64,
    /// The optimality gap asked for (nats per observation).
    pub tol: f64,
    /// Kolmogorov-Smirnov distance D of the NPMLE to π.
    pub ks: f64,
    /// 1-Wasserstein distance W of the NPMLE to π.
    pub w1: f64,
    /// The NPMLE's mean log-likelihood per observation.
    pub loglik: f64,
    /// π's own mean log-likelihood per observation (below the NPMLE's: π is one law of many).
    pub loglik_truth: f64,
    /// The NPMLE's optimality gap.
    pub gap: f64,
    /// Atoms holding 99% of the NPMLE's weight.
    pub atoms_99: usize,
}

/// Atoms of the NPMLE's grid: spacing well below the noise's standard deviation on Table 1's data.
pub const GRID_ATOMS: usize = 400;

/// [`npmle_path`] on the data of replication `seed` of `case` (1-D) with `n` points, in parallel
/// over the seeds: per seed, the iterates whose mean log-likelihood is first within each of
/// `tols` nats per observation of the grid's best.
pub fn table1_reference(
    case: Case,
    n: usize,
    seeds: &[u64],
    tols: &[f64],
) -> Vec<Vec<NpmleReplication>> {
    let law = case.law();
    seeds
        .par_iter()
        .map(|&seed| {
            let (_, x) = simulate(&law, n, 1, seed);
            let truth = loglik_of_law(&law, &x);
            npmle_path(&x, GRID_ATOMS, 100_000, tols)
                .into_iter()
                .zip(tols)
                .map(|(f, tol)| measure(&f, &law, seed, *tol, truth))
                .collect()
        })
        .collect()
}

/// An iterate measured against π.
fn measure(f: &Npmle, law: &Law, seed: u64, tol: f64, loglik_truth: f64) -> NpmleReplication {
    let (ks, w1) = ks_w1(&f.quantile_sample(100_000), law);
    let mut w = f.weights.clone();
    w.sort_by(|a, b| b.total_cmp(a));
    let mut cum = 0.0;
    let atoms_99 = w
        .iter()
        .take_while(|v| {
            let before = cum;
            cum += *v;
            before < 0.99
        })
        .count();
    NpmleReplication {
        seed,
        tol,
        ks,
        w1,
        loglik: f.loglik_per_point,
        loglik_truth,
        gap: f.gap,
        atoms_99,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_far_observations_give_two_atoms_of_half_each() {
        // The likelihood of two points 40 apart is maximal with an atom on each.
        let f = npmle(&[-20.0, 20.0], 81, 10_000, 1e-9);
        assert!(f.gap <= 1e-9, "{f:?}");
        assert!((f.weights[0] - 0.5).abs() < 1e-6 && (f.weights[80] - 0.5).abs() < 1e-6);
        let want = -0.5 * (2.0 * std::f64::consts::PI).ln() + 0.5f64.ln();
        assert!((f.loglik_per_point - want).abs() < 1e-6);
        assert_eq!(f.quantile_sample(4), vec![-20.0, -20.0, 20.0, 20.0]);
    }

    #[test]
    fn the_fit_beats_every_law_on_its_grid_by_its_gap() {
        // Observations from a two-atom law: the NPMLE's log-likelihood is at least the true
        // law's (the truth is on the grid) less the gap bound.
        let mut state = 7u64;
        let mut uniform = || {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((state >> 11) as f64 + 0.5) / (1u64 << 53) as f64
        };
        let x: Vec<f64> = (0..400)
            .map(|i| {
                let z = if i % 4 == 0 { -2.0 } else { 2.0 };
                let g = (-2.0 * uniform().ln()).sqrt() * (std::f64::consts::TAU * uniform()).cos();
                z + g
            })
            .collect();
        let f = npmle(&x, 200, 20_000, 1e-7);
        assert!(f.gap <= 1e-7, "{} after {}", f.gap, f.iterations);
        let ll =
            |law: &dyn Fn(f64) -> f64| x.iter().map(|v| law(*v).ln()).sum::<f64>() / x.len() as f64;
        let phi = |v: f64| (-0.5 * v * v).exp() / (2.0 * std::f64::consts::PI).sqrt();
        // The truth, with its atoms moved to the nearest grid atoms.
        let near = |t: f64| {
            f.atoms
                .iter()
                .cloned()
                .min_by(|a, b| (a - t).abs().total_cmp(&(b - t).abs()))
                .unwrap()
        };
        let (a1, a2) = (near(-2.0), near(2.0));
        let truth = ll(&|v| 0.25 * phi(v - a1) + 0.75 * phi(v - a2));
        assert!(
            f.loglik_per_point + f.gap >= truth,
            "{} < {truth}",
            f.loglik_per_point
        );
        // And strictly above it: the NPMLE is discrete, with atoms the truth does not have (here
        // one near −0.6, 5% of the weight, between the true atoms 4 noise sds apart).
        assert!(f.loglik_per_point > truth + 1e-3);
    }

    #[test]
    fn a_laws_likelihood_is_its_convolution_with_the_noise() {
        // Z ~ N(1, 0.5²): X ~ N(1, 1.25) exactly.
        let law = Law::normal(1.0, 0.5);
        let x: Vec<f64> = (0..50).map(|i| -2.0 + 0.1 * i as f64).collect();
        let v: f64 = 1.25;
        let exact = x
            .iter()
            .map(|t| -0.5 * (2.0 * std::f64::consts::PI * v).ln() - 0.5 * (t - 1.0).powi(2) / v)
            .sum::<f64>()
            / x.len() as f64;
        // Midpoints of cells 0.002 wide: error O(0.002²).
        assert!((loglik_of_law(&law, &x) - exact).abs() < 1e-6);
    }
}
