//! The other families' exact fit: adaptive Gauss-Hermite product quadrature at each point's
//! posterior mode, the gradient by Fisher's identity at the same nodes, maximised by BFGS.

use rayon::prelude::*;

use super::{
    central_jacobian, negated, symmetrised, Criterion, ExactFit, ExactSettings, DEFAULT_NODES,
    GTOL, POINTS_PER_PIECE,
};
use crate::error::Result;
use crate::glmm::likelihood::{not_finite, Laplace};
use crate::glmm::{Glmm, LikelihoodMethod};
use crate::optim::bfgs;
use crate::quadrature::GaussHermite;

/// A product Gauss-Hermite rule in d dimensions on the scale of N(0, I/2)'s weight: nodes
/// s = √2 t and log weights log Π w + |t|² + (d/2) log 2, so that ∫ f = Σ_k exp(log_w_k) f(s_k).
pub(in crate::glmm) struct ProductRule {
    d: usize,
    nodes: Vec<f64>,
    log_w: Vec<f64>,
}

impl ProductRule {
    /// The rule of `m` nodes per dimension in `d` dimensions.
    pub(in crate::glmm) fn new(d: usize, m: usize) -> Self {
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
        ProductRule { d, nodes, log_w }
    }

    /// How many nodes the rule has.
    pub(in crate::glmm) fn len(&self) -> usize {
        self.log_w.len()
    }

    /// Node `j` centred at a point's mode and scaled by its curvature H = L Lᵀ there:
    /// u = mode + L⁻ᵀ s_j, into `u`; returns the node's log weight (the change of variables'
    /// log det is the caller's, once per point).
    pub(in crate::glmm) fn place(&self, j: usize, lap: &Laplace, u: &mut [f64]) -> f64 {
        let d = self.d;
        u.copy_from_slice(&self.nodes[j * d..(j + 1) * d]);
        lap.curvature.solve_upper(u);
        u.iter_mut().zip(&lap.mode).for_each(|(u, m)| *u += m);
        self.log_w[j]
    }
}

/// The nodes' log terms (log weight + log density) of point `c` as each node's weight exp(term −
/// top), their total and the top term: the posterior's shares are weight / total.
pub(in crate::glmm) fn node_weights(terms: &[f64], c: usize) -> Result<(Vec<f64>, f64, f64)> {
    let top = terms.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
    if !top.is_finite() {
        return Err(not_finite(c));
    }
    let w: Vec<f64> = terms.iter().map(|t| (t - top).exp()).collect();
    let total: f64 = w.iter().sum();
    Ok((w, total, top))
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
                for (&c, mode) in chunk.iter().zip(modes) {
                    let lap = self.laplace_warm(theta, &factors, c, mode)?;
                    value += self.quadrature_point(theta, &factors, c, &lap, rule, &mut grad)?;
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
    /// the posterior mean of ∇θ log p(y_c, u), at the same nodes) to `grad`.
    fn quadrature_point(
        &self,
        theta: &[f64],
        factors: &[Vec<f64>],
        c: usize,
        lap: &Laplace,
        rule: &ProductRule,
        grad: &mut [f64],
    ) -> Result<f64> {
        let (d, k) = (self.points[c].dim, grad.len());
        if d == 0 {
            let mut g = vec![0.0; k];
            let lp = self.point_grad_theta(theta, factors, c, &[], 0, &mut g);
            grad.iter_mut().zip(&g).for_each(|(a, b)| *a += b);
            return Ok(lp);
        }
        debug_assert_eq!(d, rule.d);
        let nodes = rule.len();
        let mut terms = vec![0.0; nodes];
        let mut grads = vec![0.0; nodes * k];
        let mut u = vec![0.0; d];
        for j in 0..nodes {
            let log_w = rule.place(j, lap, &mut u);
            let g = &mut grads[j * k..(j + 1) * k];
            let lp = self.point_grad_theta(theta, factors, c, &u, d, g);
            terms[j] = log_w + lp;
        }
        let (w, total, top) = node_weights(&terms, c)?;
        for (j, wj) in w.iter().enumerate() {
            let share = wj / total;
            grad.iter_mut()
                .zip(&grads[j * k..(j + 1) * k])
                .for_each(|(a, b)| *a += share * b);
        }
        Ok(top + total.ln() - 0.5 * lap.curvature.log_det())
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
        let mut objective = |th: &[f64]| {
            let (v, g) = self.quadrature_value_grad(th, &rule, &mut modes)?;
            Ok((-v / n, g.iter().map(|g| -g / n).collect()))
        };
        let r = bfgs::minimize(&mut objective, start, GTOL, settings.max_iter)?;
        let r = self.settle_at_boundary(
            &mut objective,
            r,
            (|th: &[f64]| th.to_vec(), 0),
            settings.max_iter,
        )?;
        let theta = r.x;
        let (log_likelihood, _) = self.quadrature_value_grad(&theta, &rule, &mut modes)?;
        let finer = ProductRule::new(self.latent_dim, m + m.div_ceil(2));
        let (finer_value, _) = self.quadrature_value_grad(&theta, &finer, &mut modes)?;
        let jac = central_jacobian(
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
