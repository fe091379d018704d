//! The envelope (skyline) Cholesky factor of a point's mass matrix: a banded precision costs O(d)
//! per solve, not O(d²).

use serde::{Deserialize, Serialize};

/// A lower-triangular L with A = L Lᵀ, in envelope form: row i holds columns `start[i]..=i`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[doc(hidden)]
pub struct Factor {
    start: Vec<usize>,
    offset: Vec<usize>,
    vals: Vec<f64>,
}

/// Σ a_k b_k in [`LANES`] running sums (k mod LANES), added pairwise at the end, then the
/// tail: the factorisation's inner products without one sum's chain of additions, whose latency
/// bound a dense block of hundreds of effects; the same bits on every instruction set.
fn dot_in_lanes(a: &[f64], b: &[f64]) -> f64 {
    let whole = a.len() / LANES * LANES;
    let mut acc = [0.0f64; LANES];
    for (x, y) in a[..whole]
        .chunks_exact(LANES)
        .zip(b[..whole].chunks_exact(LANES))
    {
        for l in 0..LANES {
            acc[l] += x[l] * y[l];
        }
    }
    let mut width = LANES;
    while width > 1 {
        width /= 2;
        for l in 0..width {
            acc[l] += acc[l + width];
        }
    }
    let mut s = acc[0];
    for (x, y) in a[whole..].iter().zip(&b[whole..]) {
        s += x * y;
    }
    s
}

/// The running sums of [`dot_in_lanes`].
const LANES: usize = 8;

impl Factor {
    /// The identity of dimension `d`.
    pub fn identity(d: usize) -> Self {
        Factor::diagonal(&vec![1.0; d])
    }

    /// L = diag(√a).
    pub(super) fn diagonal(a: &[f64]) -> Self {
        Factor {
            start: (0..a.len()).collect(),
            offset: (0..a.len()).collect(),
            vals: a.iter().map(|v| v.sqrt()).collect(),
        }
    }

    /// The Cholesky factor of the symmetric `a` (d × d, row-major) within its envelope; `None`
    /// when `a` is not positive definite.
    pub(crate) fn cholesky(a: &[f64], d: usize) -> Option<Self> {
        let start: Vec<usize> = (0..d)
            .map(|i| (0..i).find(|&j| a[i * d + j] != 0.0).unwrap_or(i))
            .collect();
        let mut offset = Vec::with_capacity(d);
        let mut len = 0;
        for (i, s) in start.iter().enumerate() {
            offset.push(len);
            len += i - s + 1;
        }
        let mut f = Factor {
            start,
            offset,
            vals: vec![0.0; len],
        };
        for i in 0..d {
            for j in f.start[i]..=i {
                // Σ_k L_ik L_jk over both envelopes, k from `from` up to j.
                let from = f.start[i].max(f.start[j]);
                let (ri, rj) = (f.offset[i] - f.start[i], f.offset[j] - f.start[j]);
                let s = dot_in_lanes(&f.vals[ri + from..ri + j], &f.vals[rj + from..rj + j]);
                let v = a[i * d + j] - s;
                let l = if i == j {
                    if !(v > 0.0 && v.is_finite()) {
                        return None;
                    }
                    v.sqrt()
                } else {
                    v / f.at(j, j)
                };
                let o = f.offset[i] + j - f.start[i];
                f.vals[o] = l;
            }
        }
        Some(f)
    }

    fn at(&self, i: usize, j: usize) -> f64 {
        self.vals[self.offset[i] + j - self.start[i]]
    }

    /// Where row i's envelope starts: it holds columns `start()[i]..=i`.
    pub(crate) fn start(&self) -> &[usize] {
        &self.start
    }

    /// The index of entry (i, j), `start()[i] ≤ j ≤ i`, in an array laid out as the envelope.
    pub(crate) fn index(&self, i: usize, j: usize) -> usize {
        self.offset[i] + j - self.start[i]
    }

    /// (L Lᵀ)⁻¹ on the envelope, laid out as it ([`Factor::index`]): a column of the inverse per
    /// solve, d solves in all.
    pub(crate) fn inverse_on_envelope(&self) -> Vec<f64> {
        let d = self.dim();
        let mut inverse = vec![0.0; self.stored()];
        let mut column = vec![0.0; d];
        for j in 0..d {
            column.iter_mut().for_each(|v| *v = 0.0);
            column[j] = 1.0;
            self.solve_lower(&mut column);
            self.solve_upper(&mut column);
            for i in j..d {
                if self.start[i] <= j {
                    inverse[self.index(i, j)] = column[i];
                }
            }
        }
        inverse
    }

    /// The dimension.
    pub fn dim(&self) -> usize {
        self.start.len()
    }

    /// The values stored (d for a diagonal, the envelope for a dense matrix).
    pub fn stored(&self) -> usize {
        self.vals.len()
    }

    /// log det(L Lᵀ).
    pub(crate) fn log_det(&self) -> f64 {
        (0..self.dim()).map(|i| 2.0 * self.at(i, i).ln()).sum()
    }

    /// Solves L x = b in place.
    ///
    /// Each x_i waits on x_{i−1} (a banded factor's rows are a chain), so the chain is kept to a
    /// multiply and a subtraction per row: the terms are taken off b_i one by one and the
    /// diagonal's reciprocal, which waits on nothing, is multiplied in instead of dividing (a
    /// division's latency is four multiplications'; the solves were a fifth of a 300-long latent
    /// series' Langevin step).
    #[allow(clippy::needless_range_loop)] // envelope indices read clearer than iterators
    pub(crate) fn solve_lower(&self, b: &mut [f64]) {
        for i in 0..b.len() {
            let o = self.offset[i] - self.start[i];
            let inverse = 1.0 / self.vals[o + i];
            let mut v = b[i];
            for k in self.start[i]..i {
                v -= self.vals[o + k] * b[k];
            }
            b[i] = v * inverse;
        }
    }

    /// Solves Lᵀ x = b in place (the diagonal's reciprocals multiplied in, as in
    /// [`Factor::solve_lower`]).
    #[allow(clippy::needless_range_loop)] // envelope indices read clearer than iterators
    pub(crate) fn solve_upper(&self, b: &mut [f64]) {
        for i in (0..b.len()).rev() {
            let o = self.offset[i] - self.start[i];
            let xi = b[i] * (1.0 / self.vals[o + i]);
            b[i] = xi;
            for k in self.start[i]..i {
                b[k] -= self.vals[o + k] * xi;
            }
        }
    }

    /// out = L x.
    #[allow(clippy::needless_range_loop)] // envelope indices read clearer than iterators
    pub(crate) fn mul_lower(&self, x: &[f64], out: &mut [f64]) {
        for i in 0..x.len() {
            let o = self.offset[i] - self.start[i];
            out[i] = (self.start[i]..=i).map(|k| self.vals[o + k] * x[k]).sum();
        }
    }

    /// out = Lᵀ x.
    #[allow(clippy::needless_range_loop)] // envelope indices read clearer than iterators
    pub(super) fn mul_upper(&self, x: &[f64], out: &mut [f64]) {
        out.iter_mut().for_each(|v| *v = 0.0);
        for i in 0..x.len() {
            let o = self.offset[i] - self.start[i];
            for k in self.start[i]..=i {
                out[k] += self.vals[o + k] * x[i];
            }
        }
    }
}
