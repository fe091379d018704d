//! A point's marginal covariance Σ = σ²I + UUᵀ (U = ZΛ: each row's few effects, Λ the terms'
//! Cholesky factors) used through Woodbury's identity, Σ⁻¹ = (I − U M⁻¹ Uᵀ)/σ² with
//! M = σ²I + UᵀU. Every product costs the rows times their effects; only M, the block's effects
//! squared, is dense. So a crossed design, one block of every row, needs no m × m matrix.

use nalgebra::{Cholesky, DMatrix, Dyn};

use crate::error::{invalid, Result};

/// A sparse m × L matrix of one entry per row: row r holds `z[r]` in column `lev[r]` (a term's
/// effect column on a block's rows, the term's levels numbered within the block).
pub(super) struct EffectColumn {
    pub(super) lev: Vec<usize>,
    pub(super) z: Vec<f64>,
    pub(super) levels: usize,
}

impl EffectColumn {
    /// AᵀY (L × c).
    fn t_times(&self, y: &DMatrix<f64>) -> DMatrix<f64> {
        let mut out = DMatrix::zeros(self.levels, y.ncols());
        for c in 0..y.ncols() {
            for (r, (&l, &z)) in self.lev.iter().zip(&self.z).enumerate() {
                out[(l, c)] += z * y[(r, c)];
            }
        }
        out
    }

    /// AB (m × c) of B (L × c).
    fn times(&self, b: &DMatrix<f64>) -> DMatrix<f64> {
        DMatrix::from_fn(self.lev.len(), b.ncols(), |r, c| {
            self.z[r] * b[(self.lev[r], c)]
        })
    }

    /// AᵀB of another column B on the same rows (L × L′).
    fn t_times_column(&self, o: &EffectColumn) -> DMatrix<f64> {
        let mut out = DMatrix::zeros(self.levels, o.levels);
        for r in 0..self.lev.len() {
            out[(self.lev[r], o.lev[r])] += self.z[r] * o.z[r];
        }
        out
    }

    /// (A (BᵀY)) + (B (AᵀY)) where `both`, else A (BᵀY): the product of Y with the term entry's
    /// Gᵢ = ABᵀ (+ BAᵀ off the diagonal).
    pub(super) fn outer_times(
        &self,
        o: &EffectColumn,
        y: &DMatrix<f64>,
        both: bool,
    ) -> DMatrix<f64> {
        let mut out = self.times(&o.t_times(y));
        if both {
            out += o.times(&self.t_times(y));
        }
        out
    }
}

/// Σ of one block of rows, m of them, as σ² and U's sparse rows (each row's effects: their
/// columns among the block's q effects and their values), with UᵀU and M's Cholesky factor.
pub(super) struct Block {
    u: Vec<Vec<(usize, f64)>>,
    s2: f64,
    utu: DMatrix<f64>,
    m_chol: Cholesky<f64, Dyn>,
}

impl Block {
    /// The block of `q` effects whose rows of U are `u` (`Glmm::point_design`'s), and σ² =
    /// `s2`.
    pub(super) fn new(q: usize, u: Vec<Vec<(usize, f64)>>, s2: f64) -> Result<Block> {
        let mut utu = DMatrix::zeros(q, q);
        for row in &u {
            for &(a, va) in row {
                for &(b, vb) in row {
                    utu[(a, b)] += va * vb;
                }
            }
        }
        let m = &utu + DMatrix::identity(q, q) * s2;
        let m_chol = match s2 > 0.0 && s2.is_finite() {
            true => Cholesky::new(m),
            false => None,
        }
        .ok_or_else(|| {
            invalid(
                "θ",
                "a marginal covariance that is not positive definite".into(),
                "give the estimate of a fit, whose σ is above 0",
            )
        })?;
        Ok(Block { u, s2, utu, m_chol })
    }

    /// UᵀY (q × c).
    fn ut_times(&self, y: &DMatrix<f64>) -> DMatrix<f64> {
        let mut out = DMatrix::zeros(self.utu.nrows(), y.ncols());
        for c in 0..y.ncols() {
            for (r, row) in self.u.iter().enumerate() {
                row.iter().for_each(|&(a, v)| out[(a, c)] += v * y[(r, c)]);
            }
        }
        out
    }

    /// UB (m × c) of B (q × c).
    fn u_times(&self, b: &DMatrix<f64>) -> DMatrix<f64> {
        DMatrix::from_fn(self.u.len(), b.ncols(), |r, c| {
            self.u[r].iter().map(|&(a, v)| v * b[(a, c)]).sum()
        })
    }

    /// Σ⁻¹Y = (Y − U M⁻¹ UᵀY)/σ².
    pub(super) fn solve(&self, y: &DMatrix<f64>) -> DMatrix<f64> {
        let t = self.m_chol.solve(&self.ut_times(y));
        (y - self.u_times(&t)) / self.s2
    }

    /// UᵀA (q × L) of a column A.
    fn ut_column(&self, a: &EffectColumn) -> DMatrix<f64> {
        let mut out = DMatrix::zeros(self.utu.nrows(), a.levels);
        for (r, row) in self.u.iter().enumerate() {
            let (l, z) = (a.lev[r], a.z[r]);
            row.iter().for_each(|&(e, v)| out[(e, l)] += v * z);
        }
        out
    }

    /// AᵀΣ⁻¹B and AᵀΣ⁻²B of every two of `columns` (A the first index), from
    /// Σ⁻¹ = (I − UM⁻¹Uᵀ)/σ² and Σ⁻² = (I − 2UM⁻¹Uᵀ + UM⁻¹UᵀUM⁻¹Uᵀ)/σ⁴: UᵀA and M⁻¹UᵀA taken
    /// once per column, each pair once (the other order its transpose).
    #[allow(clippy::type_complexity)]
    pub(super) fn inners(
        &self,
        columns: &[EffectColumn],
    ) -> Vec<Vec<(DMatrix<f64>, DMatrix<f64>)>> {
        let v: Vec<DMatrix<f64>> = columns.iter().map(|a| self.ut_column(a)).collect();
        let mv: Vec<DMatrix<f64>> = v.iter().map(|va| self.m_chol.solve(va)).collect();
        let s4 = self.s2 * self.s2;
        let mut out: Vec<Vec<(DMatrix<f64>, DMatrix<f64>)>> = Vec::with_capacity(columns.len());
        for (a, ca) in columns.iter().enumerate() {
            let row = (0..columns.len())
                .map(|b| match b < a {
                    true => {
                        let (once, twice) = &out[b][a];
                        (once.transpose(), twice.transpose())
                    }
                    false => {
                        let ab = ca.t_times_column(&columns[b]);
                        let cross = v[a].transpose() * &mv[b];
                        let once = (&ab - &cross) / self.s2;
                        let curve = mv[a].transpose() * &self.utu * &mv[b];
                        (once, (ab - cross * 2.0 + curve) / s4)
                    }
                })
                .collect();
            out.push(row);
        }
        out
    }

    /// tr(Σ⁻²) = (m − 2 tr R + tr R²)/σ⁴, R = M⁻¹UᵀU.
    pub(super) fn trace_square(&self) -> f64 {
        let r = self.m_chol.solve(&self.utu);
        let tr2 = r.component_mul(&r.transpose()).sum();
        (self.u.len() as f64 - 2.0 * r.trace() + tr2) / (self.s2 * self.s2)
    }
}
