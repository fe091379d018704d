//! The coordinates a profile moves in: θ, except each correlated term's entries, which become
//! ψ = (log sd_a; atanh of the canonical partial correlations c_ab) in the same places, so that
//! every effect's sd and each correlation with a term's first effect is one coordinate whose
//! profile maximises over the rest (lme4 profiles its `.sig` parameters, sds and correlations,
//! the same way). The correlation matrix R = W Wᵀ with W's rows w_a built from the c_ab
//! (the LKJ construction: w_ab = c_ab √(1 − Σ_{k<b} w_ak²), w_aa the rest of a unit row), and
//! L = diag(sd) W, so that c_a0 = w_a0 is the correlation of effect a with effect 0.

use super::super::{from_units, to_units};
use crate::error::Result;
use crate::glmm::Glmm;

/// A term's place in θ whose entries are taken to ψ: where they start, its effects q.
#[derive(Clone, Copy, Debug)]
struct Block {
    at: usize,
    q: usize,
}

/// θ ↔ ψ and their units.
pub(super) struct Coords {
    blocks: Vec<Block>,
    /// θ's units, and ψ's: θ's, with each correlation's place unscaled.
    theta_units: Vec<(f64, f64)>,
    pub(super) units: Vec<(f64, f64)>,
}

/// Step of the central differences of the map from ψ to θ in units (a few arithmetic
/// operations: their truncation error ~h², their rounding ~1e-16/h).
const H: f64 = 1e-6;

/// The largest |c_ab| θ is made of.
const MAX_COR: f64 = 1.0 - 1e-12;

impl Coords {
    /// The coordinates of `model` at its estimate `theta` in `units`: each correlated term whose
    /// correlations are inside (−1, 1) there taken to ψ (one at ±1, a singular fit's, stays θ).
    pub(super) fn new(model: &Glmm, theta: &[f64], units: &[(f64, f64)]) -> Coords {
        let mut c = Coords {
            blocks: Vec::new(),
            theta_units: units.to_vec(),
            units: units.to_vec(),
        };
        for t in model.terms.iter().filter(|t| t.correlated) {
            let block = Block {
                at: t.theta_at,
                q: t.q,
            };
            let psi = block.psi(theta);
            if psi.iter().all(|v| v.is_finite()) {
                c.blocks.push(block);
                for k in block.q..t.n_params() {
                    c.units[block.at + k] = (1.0, 0.0);
                }
            }
        }
        c
    }

    /// Whether the correlated term whose entries start at `at` is taken to ψ.
    pub(super) fn is_reparametrised(&self, at: usize) -> bool {
        self.blocks.iter().any(|b| b.at == at)
    }

    /// Whether entry `j` is a correlation c_a0 (profiled as ρ_a0 = tanh ψ_j).
    pub(super) fn is_correlation(&self, j: usize) -> bool {
        self.blocks.iter().any(|b| b.first_column(j))
    }

    /// Whether entry `j` is profiled: every entry but the correlations c_ab with b ≥ 1 (which
    /// are partial correlations, not a correlation of the summary).
    pub(super) fn profiled(&self, j: usize) -> bool {
        self.blocks
            .iter()
            .all(|b| !(b.at + b.q..b.at + b.n_params()).contains(&j) || b.first_column(j))
    }

    /// θ of ψ (both on their natural scales).
    pub(super) fn theta(&self, psi: &[f64]) -> Vec<f64> {
        let mut theta = psi.to_vec();
        for b in &self.blocks {
            b.put_theta(psi, &mut theta);
        }
        theta
    }

    /// ψ of θ.
    pub(super) fn psi(&self, theta: &[f64]) -> Vec<f64> {
        let mut psi = theta.to_vec();
        for b in &self.blocks {
            let block = b.psi(theta);
            psi[b.at..b.at + block.len()].copy_from_slice(&block);
        }
        psi
    }

    /// θ in its units of ψ in its units.
    fn theta_phi(&self, phi: &[f64]) -> Vec<f64> {
        let mut out = phi.to_vec();
        if self.blocks.is_empty() {
            return out;
        }
        // The blocks' entries alone, so that the others keep their bits.
        let theta = to_units(
            &self.theta(&from_units(phi, &self.units)),
            &self.theta_units,
        );
        for b in &self.blocks {
            let block = b.at..b.at + b.n_params();
            out[block.clone()].copy_from_slice(&theta[block]);
        }
        out
    }

    /// ℓ and its gradient in ψ's units from ℓ and its gradient in θ's (`of_theta`): the chain
    /// rule through the map's Jacobian, by central differences on each block's entries.
    pub(super) fn loglik<'a>(
        &'a self,
        mut of_theta: impl FnMut(&[f64]) -> Result<(f64, Vec<f64>)> + 'a,
    ) -> impl FnMut(&[f64]) -> Result<(f64, Vec<f64>)> + 'a {
        move |phi: &[f64]| {
            let (v, g) = of_theta(&self.theta_phi(phi))?;
            let mut out = g.clone();
            for b in &self.blocks {
                let block = b.at..b.at + b.n_params();
                for j in block.clone() {
                    let at = |h: f64| {
                        let mut p = phi.to_vec();
                        p[j] += h;
                        self.theta_phi(&p)
                    };
                    let (up, down) = (at(H), at(-H));
                    out[j] = block
                        .clone()
                        .map(|i| g[i] * (up[i] - down[i]) / (2.0 * H))
                        .sum();
                }
            }
            Ok((v, out))
        }
    }

    /// The standard error of each entry of ψ: θ's `se` outside the blocks, and in them from θ's
    /// covariance `cov` (the delta method, the map's Jacobian by central differences).
    pub(super) fn psi_se(&self, theta: &[f64], (se, cov): (&[f64], &[Vec<f64>])) -> Vec<f64> {
        let mut se = se.to_vec();
        se.resize(theta.len(), f64::NAN);
        for b in &self.blocks {
            let block = b.at..b.at + b.n_params();
            // ∂ψ/∂θ on the block, column by column: jac[i][j] = ∂ψ_j/∂θ_i.
            let jac: Vec<Vec<f64>> = block
                .clone()
                .map(|i| {
                    let at = |h: f64| {
                        let mut t = theta.to_vec();
                        t[i] += h;
                        b.psi(&t)
                    };
                    let (up, down) = (at(H), at(-H));
                    up.iter()
                        .zip(&down)
                        .map(|(u, d)| (u - d) / (2.0 * H))
                        .collect()
                })
                .collect();
            for (jj, j) in block.clone().enumerate() {
                let mut var = 0.0;
                for (ii, i) in block.clone().enumerate() {
                    for (kk, k) in block.clone().enumerate() {
                        let c = cov.get(i).and_then(|r| r.get(k)).copied();
                        var += jac[ii][jj] * jac[kk][jj] * c.unwrap_or(f64::NAN);
                    }
                }
                se[j] = var.sqrt();
            }
        }
        se
    }
}

impl Block {
    fn n_params(self) -> usize {
        self.q + self.q * (self.q - 1) / 2
    }

    /// Whether entry `j` is one of this block's c_a0.
    fn first_column(self, j: usize) -> bool {
        // Off-diagonals row by row: (1,0), (2,0), (2,1), (3,0), …: c_a0 at a(a−1)/2.
        (1..self.q).any(|a| j == self.at + self.q + a * (a - 1) / 2)
    }

    /// This block's ψ from θ: log sd_a = log |row a of L|, then atanh c_ab row by row.
    fn psi(self, theta: &[f64]) -> Vec<f64> {
        let (q, at) = (self.q, self.at);
        let mut out = vec![0.0; self.n_params()];
        let mut k = q;
        for a in 0..q {
            let row: Vec<f64> = (0..=a)
                .map(|b| match b == a {
                    true => theta[at + a].exp(),
                    false => theta[at + q + a * (a - 1) / 2 + b],
                })
                .collect();
            let sd = row.iter().map(|v| v * v).sum::<f64>().sqrt();
            out[a] = sd.ln();
            let mut rest = 1.0f64;
            for &l in &row[..a] {
                let w = l / sd;
                out[k] = (w / rest.sqrt()).atanh();
                rest -= w * w;
                k += 1;
            }
        }
        out
    }

    /// θ's entries of this block from ψ's, into `theta`.
    fn put_theta(self, psi: &[f64], theta: &mut [f64]) {
        let (q, at) = (self.q, self.at);
        let mut k = at + q;
        for a in 0..q {
            let sd = psi[at + a].exp();
            let mut rest = 1.0f64;
            for _ in 0..a {
                // |c| < 1 however far ψ goes, so that ℓ stays defined along a profile whose
                // correlation never falls far enough (its end is then ±1).
                let c = psi[k].tanh().clamp(-MAX_COR, MAX_COR);
                let w = c * rest.sqrt();
                theta[k] = sd * w;
                rest -= w * w;
                k += 1;
            }
            theta[at + a] = psi[at + a] + 0.5 * rest.ln();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Σ = L Lᵀ of a block's θ entries (q effects from `at`).
    fn sigma(theta: &[f64], at: usize, q: usize) -> Vec<Vec<f64>> {
        let l = |a: usize, b: usize| match (a == b, b < a) {
            (true, _) => theta[at + a].exp(),
            (false, true) => theta[at + q + a * (a - 1) / 2 + b],
            _ => 0.0,
        };
        (0..q)
            .map(|a| {
                (0..q)
                    .map(|c| (0..q).map(|k| l(a, k) * l(c, k)).sum())
                    .collect()
            })
            .collect()
    }

    #[test]
    fn psi_holds_each_sd_and_the_correlations_with_the_first_effect_and_maps_back() {
        // A 3-effect block after two other entries: log diag L, then L10, L20, L21.
        let b = Block { at: 2, q: 3 };
        let theta = [0.3, -0.2, 0.1, -0.7, 0.4, 0.5, -0.9, 0.35, 9.0];
        let psi = b.psi(&theta);
        let s = sigma(&theta, 2, 3);
        let sd: Vec<f64> = (0..3).map(|a| s[a][a].sqrt()).collect();
        for a in 0..3 {
            assert!((psi[a] - sd[a].ln()).abs() < 1e-14, "sd {a}");
        }
        // c_10 and c_20 are the correlations ρ_10 and ρ_20.
        assert!((psi[3].tanh() - s[1][0] / (sd[1] * sd[0])).abs() < 1e-14);
        assert!((psi[4].tanh() - s[2][0] / (sd[2] * sd[0])).abs() < 1e-14);
        let mut back = theta.to_vec();
        back[2..8].copy_from_slice(&[0.0; 6]);
        let mut full = theta.to_vec();
        full[2..8].copy_from_slice(&psi);
        b.put_theta(&full, &mut back);
        for (j, (u, v)) in theta.iter().zip(&back).enumerate() {
            assert!((u - v).abs() < 1e-13, "entry {j}: {u} vs {v}");
        }
    }
}
