//! Each point's pass over its rows: their linear predictors (row by row over the design, or
//! term by term for scalar effects), the family's terms a chunk of rows at a time in vector
//! lanes, and what the rows give back: log p, ∇u, and ∇θ at a latent or (quadrature) from the
//! posterior means of each row's derivatives.

use std::ops::Range;

use super::family::{Rows, CHUNK};
use super::{Family, Glmm, LN_2PI};
use crate::error::LogpError;

impl Glmm {
    /// Calls `each(column, value)` for the non-zero entries of dη_i/du: Σ_a z_a L_ab at the
    /// b-th effect of the row's level of each term.
    pub(super) fn row_design(
        &self,
        factors: &[Vec<f64>],
        i: usize,
        mut each: impl FnMut(usize, f64),
    ) {
        for (t, term) in self.terms.iter().enumerate() {
            let (q, l) = (term.q, &factors[t]);
            let zi = &term.z[i * q..(i + 1) * q];
            let at = term.slot[i];
            for b in 0..q {
                let v = if term.correlated {
                    (b..q).map(|a| zi[a] * l[a * q + b]).sum()
                } else {
                    zi[b] * l[b * q + b]
                };
                each(at + b, v);
            }
        }
    }

    /// Row `i`'s x_iᵀβ, plus its offset where the model has one.
    pub(super) fn fixed_part(&self, beta: &[f64], i: usize) -> f64 {
        let xi = &self.x[i * self.p..(i + 1) * self.p];
        let v = xi.iter().zip(beta).map(|(a, b)| a * b).sum::<f64>();
        match self.offset.get(i) {
            Some(o) => v + o,
            None => v,
        }
    }

    /// For point `c` at latent `u`: log p(y_c, u; θ) (with `prior_dim` coordinates of u in the
    /// prior), and through `each` every row's (i, dℓ/dη, −d²ℓ/dη²).
    pub(super) fn point_terms(
        &self,
        theta: &[f64],
        factors: &[Vec<f64>],
        c: usize,
        u: &[f64],
        prior_dim: usize,
        mut each: impl FnMut(usize, f64, f64),
    ) -> f64 {
        self.point_chunks(theta, factors, c, u, prior_dim, |block, chunk| {
            for (j, i) in block.enumerate() {
                each(i, chunk.d[j], chunk.w[j]);
            }
        })
    }

    /// [`Glmm::point_terms`] a chunk of rows at a time: `each` gets the chunk's rows and their
    /// terms (dℓ/dη in `d`, −d²ℓ/dη² in `w`), for callers that read the design term by term.
    pub(super) fn point_chunks(
        &self,
        theta: &[f64],
        factors: &[Vec<f64>],
        c: usize,
        u: &[f64],
        prior_dim: usize,
        mut each: impl FnMut(Range<usize>, &Rows),
    ) -> f64 {
        let (inv_var, log_sigma) = self.scale(theta);
        let rows = self.points[c].rows.clone();
        let mut lp = self.row_constant[c]
            - 0.5 * prior_dim as f64 * LN_2PI
            - 0.5 * u[..prior_dim].iter().map(|v| v * v).sum::<f64>()
            - rows.len() as f64 * log_sigma;
        // The rows' linear predictors a chunk at a time, then the family's terms over the chunk
        // in vector lanes.
        let mut chunk = Rows::new();
        let scalar = self.scalar_effects();
        let beta = &theta[..self.p];
        for start in rows.clone().step_by(CHUNK) {
            let block = start..(start + CHUNK).min(rows.end);
            chunk.len = block.len();
            let eta = &mut chunk.eta[..block.len()];
            if scalar {
                self.etas_by_terms(beta, factors, block.clone(), u, eta);
            } else {
                self.etas_by_rows(beta, factors, block.clone(), u, eta);
            }
            let (y, m) = (&self.y[block.clone()], &self.trials[block.clone()]);
            lp += chunk.evaluate(self.family, inv_var, y, m);
            each(block, &chunk);
        }
        lp
    }

    /// The linear predictors x_iᵀβ (+ o_i) + Σ_t z_it L_t u of `rows` into `eta`, row by row over every
    /// term's effects ([`Glmm::row_design`]).
    pub(super) fn etas_by_rows(
        &self,
        beta: &[f64],
        factors: &[Vec<f64>],
        rows: Range<usize>,
        u: &[f64],
        eta: &mut [f64],
    ) {
        for (e, i) in eta.iter_mut().zip(rows) {
            let mut v = self.fixed_part(beta, i);
            self.row_design(factors, i, |k, a| v += a * u[k]);
            *e = v;
        }
    }

    /// [`Glmm::etas_by_rows`] where every term is a scalar effect (intercepts, crossed or
    /// nested), term by term over the rows: each row's operations are the same in the same
    /// order, so the bits are the same, without `row_design`'s loops within a row.
    pub(super) fn etas_by_terms(
        &self,
        beta: &[f64],
        factors: &[Vec<f64>],
        rows: Range<usize>,
        u: &[f64],
        eta: &mut [f64],
    ) {
        // x_iᵀβ column by column: the sum `fixed_part` takes, from its −0, in the same order.
        eta.fill(-0.0);
        let p = self.p;
        for (c, b) in beta.iter().enumerate() {
            let x = self.x[rows.start * p..rows.end * p]
                .iter()
                .skip(c)
                .step_by(p);
            eta.iter_mut().zip(x).for_each(|(e, x)| *e += x * b);
        }
        if let Some(o) = self.offset.get(rows.clone()) {
            eta.iter_mut().zip(o).for_each(|(e, o)| *e += o);
        }
        for (t, term) in self.terms.iter().enumerate() {
            let (z, slot) = (&term.z[rows.clone()], &term.slot[rows.clone()]);
            add_scalar_term(factors[t][0], z, slot, u, eta);
        }
    }

    /// [`LatentModel::log_joint`](crate::model::LatentModel::log_joint), and, with `grad_theta`,
    /// adds Σ_r ∇θ log p into it (each row's sum taken alone and then added, as
    /// [`LatentModel::add_grad_theta`](crate::model::LatentModel::add_grad_theta) does).
    pub(super) fn log_joint_with(
        &self,
        theta: &[f64],
        data: &[usize],
        z: &[f64],
        logp: &mut [f64],
        grad_z: &mut [f64],
        mut grad_theta: Option<&mut [f64]>,
    ) -> std::result::Result<(), LogpError> {
        let d = self.latent_dim;
        let factors = self.factors(theta);
        let (inv_var, _) = self.scale(theta);
        let fused = grad_theta.is_some();
        let mut gt = vec![0.0; if fused { theta.len() } else { 0 }];
        for (r, &c) in data.iter().enumerate() {
            let u = &z[r * d..(r + 1) * d];
            let g = &mut grad_z[r * d..(r + 1) * d];
            g.iter_mut().zip(u).for_each(|(g, u)| *g = -u);
            gt.iter_mut().for_each(|v| *v = 0.0);
            let lp = self.point_chunks(theta, &factors, c, u, d, |block, chunk| {
                let dl = &chunk.d[..block.len()];
                self.add_chunk_grad_u(&factors, block.clone(), dl, g);
                if fused {
                    self.add_chunk_grad_theta(&factors, block, dl, u, inv_var, &mut gt);
                }
            });
            if !lp.is_finite() || g.iter().chain(&gt).any(|v| !v.is_finite()) {
                return Err(LogpError::NonFinite);
            }
            logp[r] = lp;
            if let Some(out) = grad_theta.as_deref_mut() {
                out.iter_mut().zip(&gt).for_each(|(o, v)| *o += v);
            }
        }
        Ok(())
    }

    /// log p(y_c, u; θ) of point `c` at `u` (every coordinate in the prior), with ∇u into `grad`
    /// and −∇²u into `hess` (u.len()² values, row-major): −u + Σ_r dℓ_r/dη a_r and
    /// I + Σ_r w_r a_r a_rᵀ over the point's rows, a_r = dη_r/du from `design` (the point's
    /// [`Glmm::point_design`]) and w_r = −d²ℓ_r/dη². Laplace's mode search and the curvature in
    /// closed form ([`LatentModel::neg_hessian_z`](crate::model::LatentModel::neg_hessian_z))
    /// both read it.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn point_curvature(
        &self,
        theta: &[f64],
        factors: &[Vec<f64>],
        c: usize,
        u: &[f64],
        design: &[Vec<(usize, f64)>],
        grad: &mut [f64],
        hess: &mut [f64],
    ) -> f64 {
        let dim = u.len();
        grad.iter_mut().zip(u).for_each(|(g, u)| *g = -u);
        hess.iter_mut().for_each(|h| *h = 0.0);
        (0..dim).for_each(|k| hess[k * dim + k] = 1.0);
        let mut rows = design.iter();
        self.point_terms(theta, factors, c, u, dim, |_, dl, w| {
            let Some(a) = rows.next() else { return };
            for &(j, aj) in a {
                grad[j] += dl * aj;
                for &(k, ak) in a {
                    hess[j * dim + k] += w * aj * ak;
                }
            }
        })
    }

    /// For point `c` at latent `u` (its first `prior_dim` coordinates in the prior): adds
    /// ∇θ log p(y_c, u; θ) to `g` and returns log p(y_c, u; θ).
    pub(super) fn point_grad_theta(
        &self,
        theta: &[f64],
        factors: &[Vec<f64>],
        c: usize,
        u: &[f64],
        prior_dim: usize,
        g: &mut [f64],
    ) -> f64 {
        let (inv_var, _) = self.scale(theta);
        self.point_terms(theta, factors, c, u, prior_dim, |i, dl, _| {
            self.add_row_grad_theta(factors, i, dl, u, inv_var, g)
        })
    }

    /// Adds the posterior mean of row `i`'s ∇θ log p to `g`, from the means of its derivative in
    /// η, `dl` = E[dℓ/dη], of that derivative times the point's latent, `dl_u` = E[dℓ/dη · u],
    /// and (Gaussian) of its square, `dl_sq`: ∇θ is linear in them, so a point's quadrature
    /// nodes are summed row by row before the design is read.
    pub(super) fn add_row_mean_grad_theta(
        &self,
        factors: &[Vec<f64>],
        i: usize,
        (dl, dl_u, dl_sq): (f64, &[f64], f64),
        inv_var: f64,
        g: &mut [f64],
    ) {
        // The row's precision m/σ² under its prior weight m (1 without weights: exact).
        let gaussian = self.family == Family::Gaussian;
        let d_log_sigma = gaussian.then(|| -1.0 + dl_sq / (inv_var * self.trials[i]));
        self.add_row_parts(factors, i, dl, (1.0, dl_u), d_log_sigma, g);
    }

    /// Adds row `i`'s ∇θ log p (its log-likelihood's derivative in η `dl`) at latent `u` to `g`.
    fn add_row_grad_theta(
        &self,
        factors: &[Vec<f64>],
        i: usize,
        dl: f64,
        u: &[f64],
        inv_var: f64,
        g: &mut [f64],
    ) {
        let gaussian = self.family == Family::Gaussian;
        let d_log_sigma = gaussian.then(|| d_log_sigma(dl, inv_var * self.trials[i]));
        self.add_row_parts(factors, i, dl, (dl, u), d_log_sigma, g);
    }

    /// Adds Σ_i dℓ_i/dη (dη_i/du) of the rows `block` (their derivatives in η `dl`) to `g`: row
    /// by row over [`Glmm::row_design`], or, where every term is a scalar effect, term by term
    /// (each coordinate of u belongs to one term, so it gathers its rows in their order, as row
    /// by row).
    pub(super) fn add_chunk_grad_u(
        &self,
        factors: &[Vec<f64>],
        block: Range<usize>,
        dl: &[f64],
        g: &mut [f64],
    ) {
        if self.scalar_effects() {
            for (t, term) in self.terms.iter().enumerate() {
                let l = factors[t][0];
                let (z, slot) = (&term.z[block.clone()], &term.slot[block.clone()]);
                for ((&dl, z), &k) in dl.iter().zip(z).zip(slot) {
                    g[k] += dl * (z * l);
                }
            }
        } else {
            for (i, &dl) in block.zip(dl) {
                self.row_design(factors, i, |k, a| g[k] += dl * a);
            }
        }
    }

    /// Adds the ∇θ log p of the rows `block` (their derivatives in η `dl`) at latent `u` to `g`:
    /// row by row ([`Glmm::add_row_grad_theta`]), or, where every term is a scalar effect, one
    /// part of θ at a time: each part gathers the rows in their order with the same operations,
    /// so the bits are those of the rows one by one.
    fn add_chunk_grad_theta(
        &self,
        factors: &[Vec<f64>],
        block: Range<usize>,
        dl: &[f64],
        u: &[f64],
        inv_var: f64,
        g: &mut [f64],
    ) {
        if !self.scalar_effects() {
            for (i, &dl) in block.zip(dl) {
                self.add_row_grad_theta(factors, i, dl, u, inv_var, g);
            }
            return;
        }
        let p = self.p;
        for (i, &dl) in block.clone().zip(dl) {
            let xi = &self.x[i * p..(i + 1) * p];
            g[..p].iter_mut().zip(xi).for_each(|(o, v)| *o += dl * v);
        }
        for (t, term) in self.terms.iter().enumerate() {
            let l = factors[t][0];
            let mut sum = g[term.theta_at];
            let (z, slot) = (&term.z[block.clone()], &term.slot[block.clone()]);
            for ((&dl, z), &k) in dl.iter().zip(z).zip(slot) {
                // d/d log L of z L u, as `add_row_parts` writes it.
                sum += dl * z * l * u[k];
            }
            g[term.theta_at] = sum;
        }
        if self.family == Family::Gaussian {
            let last = g.len() - 1;
            for (&dl, &m) in dl.iter().zip(&self.trials[block]) {
                g[last] += d_log_sigma(dl, inv_var * m);
            }
        }
    }

    /// Adds to `g` row `i`'s ∇θ in its parts: `dl` x_i for β; for each term's L, `s` times
    /// d(z_iᵀ L u)/dL at u = `u` (s = dℓ/dη at a point u, or 1 where `u` holds a mean of dℓ/dη · u);
    /// `d_log_sigma` for log σ (the Gaussian family's; None for the others, which have no σ).
    fn add_row_parts(
        &self,
        factors: &[Vec<f64>],
        i: usize,
        dl: f64,
        (s, u): (f64, &[f64]),
        d_log_sigma: Option<f64>,
        g: &mut [f64],
    ) {
        let p = self.p;
        let last = g.len() - 1;
        let xi = &self.x[i * p..(i + 1) * p];
        g[..p].iter_mut().zip(xi).for_each(|(o, v)| *o += dl * v);
        for (t, term) in self.terms.iter().enumerate() {
            let (q, l) = (term.q, &factors[t]);
            let zi = &term.z[i * q..(i + 1) * q];
            let ut = &u[term.slot[i]..][..q];
            let at = term.theta_at;
            for a in 0..q {
                // d/d log L_aa of z_a L_aa u_a.
                g[at + a] += s * zi[a] * l[a * q + a] * ut[a];
            }
            if term.correlated {
                let mut k = at + q;
                for (a, za) in zi.iter().enumerate().skip(1) {
                    for ub in &ut[..a] {
                        g[k] += s * za * ub;
                        k += 1;
                    }
                }
            }
        }
        if let Some(d) = d_log_sigma {
            g[last] += d;
        }
    }
}

/// A Gaussian row's d/d log σ of −log σ − m e²/(2σ²), −1 + m e²/σ², from its derivative in η
/// `dl` = m e/σ² (its precision m/σ² `inv_var`, m its prior weight).
fn d_log_sigma(dl: f64, inv_var: f64) -> f64 {
    let e = dl / inv_var;
    -1.0 + e * e * inv_var
}

crate::vectorized! {
    /// Adds z_i l u_k of one scalar term to each row's `eta` (its factor `l`, the rows' `z` and
    /// slots `slot` in `u`), in vector lanes: the slots' loads as gathers, which a bounds check on
    /// each would keep one row at a time. Every slot is in `u` (the terms are built so); a clamp
    /// stands in for the check.
    fn add_scalar_term(l: f64, z: &[f64], slot: &[usize], u: &[f64], eta: &mut [f64]) {
        let Some(last) = u.len().checked_sub(1) else {
            return;
        };
        let n = eta.len();
        let (z, slot) = (&z[..n], &slot[..n]);
        for j in 0..n {
            debug_assert!(slot[j] <= last);
            eta[j] += z[j] * l * u[slot[j].min(last)];
        }
    }
}
