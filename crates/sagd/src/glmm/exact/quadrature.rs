//! The other families' exact fit: adaptive Gauss-Hermite product quadrature at each point's
//! posterior mode, the gradient by Fisher's identity at the same nodes, maximised by BFGS.

use rayon::prelude::*;

use super::{
    from_units, negated, symmetrised, Criterion, ExactFit, ExactSettings, DEFAULT_NODES, GTOL,
    POINTS_PER_PIECE,
};
use crate::error::Result;
use crate::glmm::family::evaluate_rows;
use crate::glmm::likelihood::{not_finite, Laplace};
use crate::glmm::LN_2PI;
use crate::glmm::{Glmm, LikelihoodMethod};
use crate::quadrature::GaussHermite;

/// Product Gauss-Hermite rules in 1 to d dimensions on the scale of N(0, I/2)'s weight: in k
/// dimensions, nodes s = √2 t and log weights log Π w + |t|² + (k/2) log 2, so that
/// ∫ f = Σ_j exp(log_w_j) f(s_j). A point takes the rule of its own dimension: points differ
/// where levels are unevenly nested or crossed (a school of one class beside one of two).
pub(in crate::glmm) struct ProductRule {
    /// Per dimension k = 1, 2, …: the nodes (nodes × k) and their log weights.
    by_dim: Vec<(Vec<f64>, Vec<f64>)>,
}

impl ProductRule {
    /// The rules of `m` nodes per dimension in 1 to `d` dimensions.
    pub(in crate::glmm) fn new(d: usize, m: usize) -> Self {
        Self::with_nodes(&vec![m; d])
    }

    /// The rules of `m[k − 1]` nodes per dimension in k = 1 to `m.len()` dimensions.
    pub(in crate::glmm) fn with_nodes(m: &[usize]) -> Self {
        let by_dim = m.iter().enumerate().map(|(k, &m)| grid(k + 1, m)).collect();
        ProductRule { by_dim }
    }

    /// How many nodes the rule in `d` dimensions has.
    pub(in crate::glmm) fn len(&self, d: usize) -> usize {
        self.by_dim[d - 1].1.len()
    }

    /// Node `j` of the rule in u's dimension, centred at a point's mode and scaled by its
    /// curvature H = L Lᵀ there: u = mode + L⁻ᵀ s_j, into `u`; returns the node's log weight
    /// (the change of variables' log det is the caller's, once per point).
    pub(in crate::glmm) fn place(&self, j: usize, lap: &Laplace, u: &mut [f64]) -> f64 {
        let d = u.len();
        let (nodes, log_w) = &self.by_dim[d - 1];
        u.copy_from_slice(&nodes[j * d..(j + 1) * d]);
        lap.curvature.solve_upper(u);
        u.iter_mut().zip(&lap.mode).for_each(|(u, m)| *u += m);
        log_w[j]
    }
}

/// The product rule of `m` nodes per dimension in `d` dimensions: its nodes (nodes × d) and log
/// weights.
fn grid(d: usize, m: usize) -> (Vec<f64>, Vec<f64>) {
    let gh = GaussHermite::new(m);
    let k = m.pow(d as u32);
    let (mut nodes, mut log_w) = (Vec::with_capacity(k * d), Vec::with_capacity(k));
    for flat in 0..k {
        let (mut rest, mut lw) = (flat, 0.5 * d as f64 * std::f64::consts::LN_2);
        for _ in 0..d {
            let (t, w) = (gh.nodes[rest % m], gh.weights[rest % m]);
            rest /= m;
            nodes.push(std::f64::consts::SQRT_2 * t);
            lw += w.ln() + t * t;
        }
        log_w.push(lw);
    }
    (nodes, log_w)
}

/// A point's buffers over its nodes ([`Glmm::posterior_at_nodes`]), kept from point to point of
/// a pass: the nodes placed at the mode (nodes × d), their shares of the posterior, one row's
/// linear predictors, responses, trials and family terms, and every row's dℓ/dη (rows × nodes).
#[derive(Default)]
pub(in crate::glmm) struct NodeScratch {
    pub(in crate::glmm) u: Vec<f64>,
    pub(in crate::glmm) shares: Vec<f64>,
    eta: Vec<f64>,
    y: Vec<f64>,
    m: Vec<f64>,
    l: Vec<f64>,
    w: Vec<f64>,
    dl: Vec<f64>,
    /// A row's dη/du, and a row's posterior mean of dℓ/dη · u (d each).
    a: Vec<f64>,
    dl_u: Vec<f64>,
}

/// The nodes' log terms (log weight + log density) of point `c` turned into each node's share
/// of the posterior, in place; returns the log of their total (the log marginal before the
/// change of variables' determinant).
fn into_shares(terms: &mut [f64], c: usize) -> Result<f64> {
    let top = terms.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
    if !top.is_finite() {
        return Err(not_finite(c));
    }
    terms.iter_mut().for_each(|t| *t = (*t - top).exp());
    let total: f64 = terms.iter().sum();
    terms.iter_mut().for_each(|w| *w /= total);
    Ok(top + total.ln())
}

impl Glmm {
    /// ℓ(θ) and ∇ℓ(θ) by the product rule at each point's mode, starting each point's Newton
    /// search at `modes` (updated to the new modes).
    pub(super) fn quadrature_value_grad(
        &self,
        theta: &[f64],
        rule: &ProductRule,
        modes: &mut [Vec<f64>],
    ) -> Result<(f64, Vec<f64>)> {
        let factors = self.factors(theta);
        let k = self.theta_len();
        let points: Vec<usize> = (0..self.points.len()).collect();
        let parts = points
            .par_chunks(POINTS_PER_PIECE)
            .zip(modes.par_chunks_mut(POINTS_PER_PIECE))
            .map(|(chunk, modes)| {
                let (mut value, mut grad) = (0.0, vec![0.0; k]);
                let mut scratch = NodeScratch::default();
                for (&c, mode) in chunk.iter().zip(modes) {
                    let lap = self.laplace_warm(theta, &factors, c, mode)?;
                    let at = (c, &lap, rule);
                    value += self.quadrature_point(theta, &factors, at, &mut scratch, &mut grad)?;
                }
                Ok((value, grad))
            })
            .collect::<Result<Vec<_>>>()?;
        let (mut value, mut grad) = (0.0, vec![0.0; k]);
        for (v, g) in parts {
            value += v;
            grad.iter_mut().zip(&g).for_each(|(a, b)| *a += b);
        }
        Ok((value, grad))
    }

    /// Point `c`'s log marginal by the rule centred at its mode; adds its ∇θ (Fisher's identity:
    /// the posterior mean of ∇θ log p(y_c, u), at the same nodes) to `grad`, each row's share
    /// from the posterior means of its dℓ/dη and of dℓ/dη · u
    /// ([`Glmm::add_row_mean_grad_theta`]).
    fn quadrature_point(
        &self,
        theta: &[f64],
        factors: &[Vec<f64>],
        at: (usize, &Laplace, &ProductRule),
        scratch: &mut NodeScratch,
        grad: &mut [f64],
    ) -> Result<f64> {
        let c = at.0;
        let d = self.points[c].dim;
        if d == 0 {
            let mut g = vec![0.0; grad.len()];
            let lp = self.point_grad_theta(theta, factors, c, &[], 0, &mut g);
            grad.iter_mut().zip(&g).for_each(|(a, b)| *a += b);
            return Ok(lp);
        }
        let value = self.posterior_at_nodes(theta, factors, at, scratch)?;
        let (inv_var, _) = self.scale(theta);
        let (rows, nodes) = (self.points[c].rows.clone(), at.2.len(d));
        let NodeScratch {
            u,
            shares,
            dl,
            dl_u,
            ..
        } = scratch;
        dl_u.resize(d, 0.0);
        for (r, i) in rows.enumerate() {
            let dl_row = &dl[r * nodes..(r + 1) * nodes];
            let (mut mean, mut sq) = (0.0, 0.0);
            dl_u.fill(0.0);
            for ((s, v), uj) in shares.iter().zip(dl_row).zip(u.chunks_exact(d)) {
                let sv = s * v;
                mean += sv;
                sq += sv * v;
                dl_u.iter_mut().zip(uj).for_each(|(o, u)| *o += sv * u);
            }
            let moments = (mean, &dl_u[..], sq);
            self.add_row_mean_grad_theta(factors, i, moments, inv_var, grad);
        }
        Ok(value)
    }

    /// Point `c` (with a latent) at the rule's nodes centred at its mode and scaled by its
    /// curvature `lap`: the nodes (`scratch.u`), each one's share of the posterior
    /// (`scratch.shares`) and each row's dℓ/dη there (`scratch.dl`, rows × nodes); returns the
    /// point's log marginal. Each row is taken over all the nodes at once: its linear predictor
    /// is affine in u, and the family's terms run in vector lanes.
    pub(in crate::glmm) fn posterior_at_nodes(
        &self,
        theta: &[f64],
        factors: &[Vec<f64>],
        (c, lap, rule): (usize, &Laplace, &ProductRule),
        scratch: &mut NodeScratch,
    ) -> Result<f64> {
        let d = self.points[c].dim;
        let (rows, nodes) = (self.points[c].rows.clone(), rule.len(d));
        let (inv_var, log_sigma) = self.scale(theta);
        let NodeScratch {
            u,
            shares,
            eta,
            y,
            m,
            l,
            w,
            dl,
            a,
            ..
        } = scratch;
        a.resize(d, 0.0);
        u.resize(nodes * d, 0.0);
        dl.resize(rows.len() * nodes, 0.0);
        for v in [&mut *eta, &mut *y, &mut *m, &mut *l, &mut *w] {
            v.resize(nodes, 0.0);
        }
        // Each node's log weight with the prior's and the constants' terms, then the rows'.
        let constant =
            self.row_constant[c] - 0.5 * d as f64 * LN_2PI - rows.len() as f64 * log_sigma;
        shares.clear();
        shares.extend(u.chunks_exact_mut(d).enumerate().map(|(j, uj)| {
            let log_w = rule.place(j, lap, uj);
            log_w + constant - 0.5 * uj.iter().map(|v| v * v).sum::<f64>()
        }));
        for (r, i) in rows.enumerate() {
            // η = x_iᵀβ + aᵀu at every node.
            a.fill(0.0);
            self.row_design(factors, i, |k, v| a[k] += v);
            let fixed = self.fixed_part(&theta[..self.p], i);
            for (e, uj) in eta.iter_mut().zip(u.chunks_exact(d)) {
                *e = fixed + a.iter().zip(uj).map(|(a, u)| a * u).sum::<f64>();
            }
            y.fill(self.y[i]);
            m.fill(self.trials[i]);
            let dl_row = &mut dl[r * nodes..(r + 1) * nodes];
            evaluate_rows(self.family, inv_var, y, m, eta, l, dl_row, w);
            shares.iter_mut().zip(l.iter()).for_each(|(t, l)| *t += l);
        }
        Ok(into_shares(shares, c)? - 0.5 * lap.curvature.log_det())
    }

    /// ℓ(θ) by adaptive product quadrature with `nodes` per dimension (None: the default).
    pub(in crate::glmm) fn quadrature_log_likelihood(
        &self,
        theta: &[f64],
        nodes: Option<usize>,
    ) -> Result<f64> {
        let m = nodes.unwrap_or(DEFAULT_NODES[self.latent_dim.max(1) - 1]);
        let rule = ProductRule::new(self.latent_dim, m);
        let mut modes: Vec<Vec<f64>> = self.points.iter().map(|c| vec![0.0; c.dim]).collect();
        Ok(self.quadrature_value_grad(theta, &rule, &mut modes)?.0)
    }

    pub(super) fn fit_quadrature(
        &self,
        settings: &ExactSettings,
        start: &[f64],
        m: usize,
    ) -> Result<ExactFit> {
        let rule = ProductRule::new(self.latent_dim, m);
        let n = self.y.len() as f64;
        let mut modes: Vec<Vec<f64>> = self.points.iter().map(|c| vec![0.0; c.dim]).collect();
        let units = self.units_with(1.0);
        let mut objective = |phi: &[f64]| {
            let (v, g) = self.quadrature_value_grad(&from_units(phi, &units), &rule, &mut modes)?;
            Ok((
                -v / n,
                g.iter().zip(&units).map(|(g, u)| -g * u.0 / n).collect(),
            ))
        };
        let r = self.minimize_in_units(
            &mut objective,
            (start, &units),
            Some((&|th: &[f64]| th.to_vec(), 0)),
            (GTOL, settings.max_iter),
        )?;
        let theta = r.x;
        let (log_likelihood, _) = self.quadrature_value_grad(&theta, &rule, &mut modes)?;
        let finer = ProductRule::new(self.latent_dim, m + m.div_ceil(2));
        let (finer_value, _) = self.quadrature_value_grad(&theta, &finer, &mut modes)?;
        let jac = self.jacobian_in_units(
            |th| {
                let mut modes = modes.clone();
                Ok(self.quadrature_value_grad(th, &rule, &mut modes)?.1)
            },
            &theta,
        )?;
        let information = negated(symmetrised(jac));
        Ok(ExactFit {
            covariance: Vec::new(),
            se: Vec::new(),
            singular: false,
            theta,
            log_likelihood,
            reml: None,
            criterion: Criterion::Ml,
            method: LikelihoodMethod::Quadrature,
            nodes: m,
            quadrature_error: (finer_value - log_likelihood).abs(),
            information,
            iterations: r.iterations,
            converged: r.converged,
            grad_max: r.grad_max,
        }
        .with_errors(self))
    }
}
