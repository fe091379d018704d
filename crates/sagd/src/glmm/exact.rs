//! Fits by the exact marginal likelihood, where it can be computed to rounding, as lme4 does:
//! the Gaussian family by its closed form with β and σ profiled out (maximum likelihood or REML,
//! lmer's criteria), and the other families with at most [`MAX_QUADRATURE_DIM`] effects per point
//! by adaptive Gauss-Hermite quadrature at each point's posterior mode (glmer's nAGQ, extended to
//! correlated effects by a product rule), maximised by BFGS with the gradient from Fisher's
//! identity at the same nodes. Standard errors come from the observed information, by central
//! differences of the exact log-likelihood (or of its exact gradient). Models with larger points
//! (crossed non-Gaussian designs, long latents) are fitted by automated EM.

use rayon::prelude::*;
use serde::{Deserialize, Serialize};

use super::likelihood::{not_finite, Laplace};
use super::{Family, Glmm, LikelihoodMethod, LN_2PI};
use crate::error::{Result, SagdError};
use crate::metric::Factor;
use crate::optim::bfgs;
use crate::quadrature::GaussHermite;

/// The most effects per point that [`Glmm::fit_exact`] integrates by quadrature.
pub const MAX_QUADRATURE_DIM: usize = 3;

/// Nodes per dimension by the points' dimension (1, 2, 3): 25 as glmer's largest nAGQ.
const DEFAULT_NODES: [usize; MAX_QUADRATURE_DIM] = [25, 15, 9];

/// Points per piece of a parallel pass: sums are taken piece by piece in order, so the result is
/// the same bits on any number of threads.
const POINTS_PER_PIECE: usize = 256;

/// Relative step of the central differences (θ is on log and correlation-like scales).
const DIFF_STEP: f64 = 1e-5;

/// Which likelihood a Gaussian model maximises.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Criterion {
    /// Maximum likelihood: ℓ(β, Σ, σ).
    #[default]
    Ml,
    /// Restricted maximum likelihood (Gaussian family only): the likelihood of the variance
    /// parameters with β integrated out under a flat prior, lmer's default.
    Reml,
}

/// Settings of [`Glmm::fit_exact`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ExactSettings {
    /// ML or REML (REML for the Gaussian family only).
    pub criterion: Criterion,
    /// Quadrature nodes per dimension (None: 25, 15, 9 for 1, 2, 3 effects per point).
    pub nodes: Option<usize>,
    /// The most BFGS iterations.
    pub max_iter: usize,
    /// θ to start from (None: [`Glmm::start`]).
    pub start: Option<Vec<f64>>,
}

impl Default for ExactSettings {
    fn default() -> Self {
        ExactSettings {
            criterion: Criterion::Ml,
            nodes: None,
            max_iter: 500,
            start: None,
        }
    }
}

/// The exact maximum of a GLMM's likelihood (or REML criterion) with its observed information.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ExactFit {
    /// θ̂ on the model's scale (β; per term log diag L and L's off-diagonal; log σ).
    pub theta: Vec<f64>,
    /// ℓ(θ̂), every constant included (the ML log-likelihood also after a REML fit).
    pub log_likelihood: f64,
    /// The REML criterion at θ̂ (lme4's REML `logLik`), after a REML fit.
    pub reml: Option<f64>,
    /// The criterion maximised.
    pub criterion: Criterion,
    /// How ℓ was computed: `Exact` (closed form) or `Quadrature`.
    pub method: LikelihoodMethod,
    /// Quadrature nodes per dimension (0 for the closed form).
    pub nodes: usize,
    /// |ℓ(θ̂) by `nodes` − ℓ(θ̂) by half as many more|: the quadrature's error, bounded from
    /// above (0 for the closed form).
    pub quadrature_error: f64,
    /// The observed information −∇²ℓ(θ̂) (REML: of the criterion for the variance parameters,
    /// and Xᵀ V⁻¹ X for β, as lmer's standard errors).
    pub information: Vec<Vec<f64>>,
    /// √diag of the information's inverse (NaN where it is not positive definite: a variance at
    /// its boundary).
    pub se: Vec<f64>,
    /// BFGS iterations.
    pub iterations: usize,
    /// Whether BFGS met its tolerance or no representable step could improve ℓ.
    pub converged: bool,
    /// max |∂ℓ/∂ψ| at the end, on BFGS's scale (ℓ divided by the observations).
    pub grad_max: f64,
}

/// A product Gauss-Hermite rule in d dimensions on the scale of N(0, I/2)'s weight: nodes
/// s = √2 t and log weights log Π w + |t|² + (d/2) log 2, so that ∫ f = Σ_k exp(log_w_k) f(s_k).
struct ProductRule {
    d: usize,
    nodes: Vec<f64>,
    log_w: Vec<f64>,
}

impl ProductRule {
    fn new(d: usize, m: usize) -> Self {
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
}

/// Per-point sums of the Gaussian closed form at relative factors Λ (V₀ = I + Z Λ Λᵀ Zᵀ).
struct Pieces {
    n: f64,
    p: usize,
    /// Xᵀ V₀⁻¹ X (p × p), Xᵀ V₀⁻¹ y, yᵀ V₀⁻¹ y, log det V₀.
    xvx: Vec<f64>,
    xvy: Vec<f64>,
    yvy: f64,
    log_det: f64,
}

impl Pieces {
    fn zero(p: usize) -> Self {
        Pieces {
            n: 0.0,
            p,
            xvx: vec![0.0; p * p],
            xvy: vec![0.0; p],
            yvy: 0.0,
            log_det: 0.0,
        }
    }

    fn add(&mut self, o: &Pieces) {
        self.n += o.n;
        self.xvx.iter_mut().zip(&o.xvx).for_each(|(a, b)| *a += b);
        self.xvy.iter_mut().zip(&o.xvy).for_each(|(a, b)| *a += b);
        self.yvy += o.yvy;
        self.log_det += o.log_det;
    }

    /// The generalised least-squares β̂, the residual sum of squares r̂ᵀV₀⁻¹r̂ and log det XᵀV₀⁻¹X.
    fn gls(&self) -> Result<(Vec<f64>, f64, f64)> {
        let f = Factor::cholesky(&self.xvx, self.p).ok_or_else(|| SagdError::InvalidSetting {
            name: "X",
            value: "columns that are linearly dependent".into(),
            fix: "drop the columns of the fixed-effects design that others determine".into(),
        })?;
        let mut beta = self.xvy.clone();
        f.solve_lower(&mut beta);
        let rss = self.yvy - beta.iter().map(|v| v * v).sum::<f64>();
        f.solve_upper(&mut beta);
        Ok((beta, rss.max(0.0), f.log_det()))
    }

    /// rᵀ V₀⁻¹ r at β.
    fn rvr(&self, beta: &[f64]) -> f64 {
        let p = self.p;
        let quad: f64 = (0..p)
            .map(|j| beta[j] * (0..p).map(|k| self.xvx[j * p + k] * beta[k]).sum::<f64>())
            .sum();
        self.yvy - 2.0 * beta.iter().zip(&self.xvy).map(|(b, v)| b * v).sum::<f64>() + quad
    }

    /// The criterion with β and σ at their maximising values: (value, β̂, σ̂²).
    fn profiled(&self, criterion: Criterion) -> Result<(f64, Vec<f64>, f64)> {
        let (beta, rss, log_det_x) = self.gls()?;
        let df = match criterion {
            Criterion::Ml => self.n,
            Criterion::Reml => self.n - self.p as f64,
        };
        let s2 = rss / df;
        if s2 <= 0.0 || !s2.is_finite() {
            return Err(SagdError::InvalidSetting {
                name: "y",
                value: "fitted exactly by the fixed effects".into(),
                fix: "a Gaussian model needs residual variation: check y and X".into(),
            });
        }
        let mut v = -0.5 * df * ((std::f64::consts::TAU * s2).ln() + 1.0) - 0.5 * self.log_det;
        if criterion == Criterion::Reml {
            v -= 0.5 * log_det_x;
        }
        Ok((v, beta, s2))
    }

    /// ℓ(β, σ) (maximum likelihood), every constant included.
    fn ml(&self, beta: &[f64], log_sigma: f64) -> f64 {
        -0.5 * self.n * LN_2PI
            - self.n * log_sigma
            - 0.5 * self.log_det
            - 0.5 * self.rvr(beta) * (-2.0 * log_sigma).exp()
    }

    /// The REML criterion at σ, β integrated out.
    fn reml(&self, log_sigma: f64) -> Result<f64> {
        let (_, rss, log_det_x) = self.gls()?;
        let df = self.n - self.p as f64;
        Ok(-0.5 * df * LN_2PI
            - df * log_sigma
            - 0.5 * self.log_det
            - 0.5 * log_det_x
            - 0.5 * rss * (-2.0 * log_sigma).exp())
    }
}

impl Glmm {
    /// How [`Glmm::fit_exact`] would compute this model's likelihood: `Exact` (the Gaussian
    /// closed form), `Quadrature` (at most [`MAX_QUADRATURE_DIM`] effects per point), or None
    /// (fit by automated EM).
    pub fn exact_method(&self) -> Option<LikelihoodMethod> {
        if self.family == Family::Gaussian {
            Some(LikelihoodMethod::Exact)
        } else if self.latent_dim <= MAX_QUADRATURE_DIM {
            Some(LikelihoodMethod::Quadrature)
        } else {
            None
        }
    }

    /// The maximum of the exact likelihood (or REML criterion), with its observed information:
    /// lmer's and glmer's (nAGQ) estimates where they are exact, for the models
    /// [`Glmm::exact_method`] accepts. Errors name what the model or settings lack.
    pub fn fit_exact(&self, settings: &ExactSettings) -> Result<ExactFit> {
        let bad = |name: &'static str, value: String, fix: &str| {
            Err(SagdError::InvalidSetting {
                name,
                value,
                fix: fix.into(),
            })
        };
        let Some(method) = self.exact_method() else {
            return bad(
                "method",
                format!(
                    "exact, with {} random effects in a point (over {MAX_QUADRATURE_DIM})",
                    self.latent_dim
                ),
                "fit this model by automated EM (method \"em\"); quadrature integrates at most 3 effects per point",
            );
        };
        if settings.criterion == Criterion::Reml && self.family != Family::Gaussian {
            return bad(
                "criterion",
                "reml".into(),
                "REML is defined for the Gaussian family only; use maximum likelihood",
            );
        }
        if let Some(m) = settings.nodes {
            if !(1..=50).contains(&m) {
                return bad("nodes", m.to_string(), "use 1 to 50 nodes per dimension");
            }
        }
        if settings.max_iter == 0 {
            return bad("max_iter", "0".into(), "allow at least one iteration");
        }
        let start = match &settings.start {
            Some(s) => {
                self.check_theta(s)?;
                s.clone()
            }
            None => self.start(),
        };
        if method == LikelihoodMethod::Exact {
            self.fit_gaussian(settings, &start)
        } else {
            let m = settings
                .nodes
                .unwrap_or(DEFAULT_NODES[self.latent_dim.max(1) - 1]);
            self.fit_quadrature(settings, &start, m)
        }
    }

    // ---- The Gaussian family: the closed form, β and σ profiled out. ----

    /// Where the variance parameters ψ sit in θ: after β, before log σ.
    fn psi_range(&self) -> std::ops::Range<usize> {
        self.p..self.theta_len() - 1
    }

    /// θ with the terms' factors made relative to σ: Λ = L/σ.
    fn relative(&self, theta: &[f64]) -> Vec<f64> {
        let log_sigma = theta[self.theta_len() - 1];
        let mut rel = theta.to_vec();
        for t in &self.terms {
            let at = t.theta_at;
            rel[at..at + t.q].iter_mut().for_each(|v| *v -= log_sigma);
            let off = &mut rel[at + t.q..at + t.n_params()];
            off.iter_mut().for_each(|v| *v *= (-log_sigma).exp());
        }
        rel
    }

    /// θ from ψ (relative factors), β and log σ: L = σΛ.
    fn absolute(&self, psi: &[f64], beta: &[f64], log_sigma: f64) -> Vec<f64> {
        let mut theta = Vec::with_capacity(self.theta_len());
        theta.extend_from_slice(beta);
        theta.extend_from_slice(psi);
        theta.push(log_sigma);
        for t in &self.terms {
            let at = t.theta_at;
            theta[at..at + t.q].iter_mut().for_each(|v| *v += log_sigma);
            let off = &mut theta[at + t.q..at + t.n_params()];
            off.iter_mut().for_each(|v| *v *= log_sigma.exp());
        }
        theta
    }

    /// The sums of the closed form at `rel` (θ whose factors are relative), over the points in
    /// fixed pieces taken in order.
    fn gaussian_pieces(&self, rel: &[f64]) -> Result<Pieces> {
        let factors = self.factors(rel);
        let points: Vec<usize> = (0..self.points.len()).collect();
        let parts = points
            .par_chunks(POINTS_PER_PIECE)
            .map(|chunk| {
                let mut sum = Pieces::zero(self.p);
                for &c in chunk {
                    sum.add(&self.gaussian_point_pieces(&factors, c)?);
                }
                Ok(sum)
            })
            .collect::<Result<Vec<_>>>()?;
        let mut total = Pieces::zero(self.p);
        parts.iter().for_each(|s| total.add(s));
        Ok(total)
    }

    /// One point's sums, by Woodbury's identity in its latent dimension: with A = Z_c Λ and
    /// M = I + AᵀA = L Lᵀ, V₀⁻¹ = I − A M⁻¹ Aᵀ and det V₀ = det M.
    fn gaussian_point_pieces(&self, factors: &[Vec<f64>], c: usize) -> Result<Pieces> {
        let (p, rows, dim) = (self.p, &self.points[c].rows, self.points[c].dim);
        let a = self.point_design(factors, c);
        let mut m = vec![0.0; dim * dim];
        (0..dim).for_each(|k| m[k * dim + k] = 1.0);
        let mut atx = vec![0.0; p * dim]; // column j of AᵀX at [j*dim..]
        let mut aty = vec![0.0; dim];
        let mut out = Pieces::zero(p);
        out.n = rows.len() as f64;
        for (ai, &i) in a.iter().zip(rows) {
            let (xi, yi) = (&self.x[i * p..(i + 1) * p], self.y[i]);
            for j in 0..p {
                out.xvy[j] += xi[j] * yi;
                for k in 0..p {
                    out.xvx[j * p + k] += xi[j] * xi[k];
                }
            }
            out.yvy += yi * yi;
            for &(k, ak) in ai {
                aty[k] += ak * yi;
                for j in 0..p {
                    atx[j * dim + k] += ak * xi[j];
                }
                for &(l, al) in ai {
                    m[k * dim + l] += ak * al;
                }
            }
        }
        let f = Factor::cholesky(&m, dim).ok_or_else(|| not_finite(c))?;
        out.log_det = f.log_det();
        f.solve_lower(&mut aty);
        atx.chunks_mut(dim.max(1))
            .for_each(|col| f.solve_lower(col));
        let dot = |u: &[f64], v: &[f64]| u.iter().zip(v).map(|(a, b)| a * b).sum::<f64>();
        out.yvy -= dot(&aty, &aty);
        for j in 0..p {
            let wj = &atx[j * dim..(j + 1) * dim];
            out.xvy[j] -= dot(wj, &aty);
            for k in 0..p {
                out.xvx[j * p + k] -= dot(wj, &atx[k * dim..(k + 1) * dim]);
            }
        }
        Ok(out)
    }

    /// ψ ↦ −(profiled criterion)/n, for BFGS by central differences.
    fn profiled_objective(&self, psi: &[f64], criterion: Criterion) -> Result<f64> {
        let mut rel = vec![0.0; self.theta_len()];
        rel[self.psi_range()].copy_from_slice(psi);
        let (v, _, _) = self.gaussian_pieces(&rel)?.profiled(criterion)?;
        Ok(-v / self.y.len() as f64)
    }

    fn fit_gaussian(&self, settings: &ExactSettings, start: &[f64]) -> Result<ExactFit> {
        let criterion = settings.criterion;
        let psi0 = self.relative(start)[self.psi_range()].to_vec();
        let r = bfgs::minimize(
            |psi| {
                let f = self.profiled_objective(psi, criterion)?;
                let g = central_gradient(|x| self.profiled_objective(x, criterion), psi)?;
                Ok((f, g))
            },
            &psi0,
            1e-9,
            settings.max_iter,
        )?;
        let mut rel = vec![0.0; self.theta_len()];
        rel[self.psi_range()].copy_from_slice(&r.x);
        let pieces = self.gaussian_pieces(&rel)?;
        let (_, beta, s2) = pieces.profiled(criterion)?;
        let log_sigma = 0.5 * s2.ln();
        let theta = self.absolute(&r.x, &beta, log_sigma);
        let ml = |th: &[f64]| -> Result<f64> {
            let pieces = self.gaussian_pieces(&self.relative(th))?;
            Ok(pieces.ml(&th[..self.p], th[self.theta_len() - 1]))
        };
        let log_likelihood = ml(&theta)?;
        let (information, reml) = match criterion {
            Criterion::Ml => (negated(central_hessian(ml, &theta)?), None),
            Criterion::Reml => {
                // The variance parameters' block from the REML criterion; β's from GLS, as lmer.
                let p = self.p;
                let reml_at = |var: &[f64]| -> Result<f64> {
                    let mut th = theta.clone();
                    th[p..].copy_from_slice(var);
                    let pieces = self.gaussian_pieces(&self.relative(&th))?;
                    pieces.reml(th[self.theta_len() - 1])
                };
                let var_block = negated(central_hessian(reml_at, &theta[p..])?);
                let k = theta.len();
                let mut info = vec![vec![0.0; k]; k];
                for (row, xvx) in info.iter_mut().zip(pieces.xvx.chunks(p.max(1))) {
                    row[..p].iter_mut().zip(xvx).for_each(|(o, v)| *o = v / s2);
                }
                for (j, row) in var_block.iter().enumerate() {
                    info[p + j][p..].copy_from_slice(row);
                }
                (info, Some(reml_at(&theta[p..])?))
            }
        };
        Ok(ExactFit {
            se: standard_errors(&information),
            theta,
            log_likelihood,
            reml,
            criterion,
            method: LikelihoodMethod::Exact,
            nodes: 0,
            quadrature_error: 0.0,
            information,
            iterations: r.iterations,
            converged: r.converged,
            grad_max: r.grad_max,
        })
    }

    // ---- Other families: adaptive Gauss-Hermite quadrature at each point's mode. ----

    /// ℓ(θ) and ∇ℓ(θ) by the product rule at each point's mode, starting each point's Newton
    /// search at `modes` (updated to the new modes).
    fn quadrature_value_grad(
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
                    let lap = match self.laplace(theta, &factors, c, Some(mode)) {
                        Ok(l) => l,
                        Err(_) => self.laplace(theta, &factors, c, None)?,
                    };
                    value += self.quadrature_point(theta, &factors, c, &lap, rule, &mut grad)?;
                    mode.clone_from(&lap.mode);
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
        let nodes = rule.log_w.len();
        let mut terms = vec![0.0; nodes];
        let mut grads = vec![0.0; nodes * k];
        let mut u = vec![0.0; d];
        for j in 0..nodes {
            u.copy_from_slice(&rule.nodes[j * d..(j + 1) * d]);
            lap.curvature.solve_upper(&mut u);
            u.iter_mut().zip(&lap.mode).for_each(|(u, m)| *u += m);
            let g = &mut grads[j * k..(j + 1) * k];
            let lp = self.point_grad_theta(theta, factors, c, &u, d, g);
            terms[j] = rule.log_w[j] + lp;
        }
        let top = terms.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        if !top.is_finite() {
            return Err(not_finite(c));
        }
        let w: Vec<f64> = terms.iter().map(|t| (t - top).exp()).collect();
        let total: f64 = w.iter().sum();
        for (j, wj) in w.iter().enumerate() {
            let share = wj / total;
            grad.iter_mut()
                .zip(&grads[j * k..(j + 1) * k])
                .for_each(|(a, b)| *a += share * b);
        }
        Ok(top + total.ln() - 0.5 * lap.curvature.log_det())
    }

    fn fit_quadrature(
        &self,
        settings: &ExactSettings,
        start: &[f64],
        m: usize,
    ) -> Result<ExactFit> {
        let rule = ProductRule::new(self.latent_dim, m);
        let n = self.y.len() as f64;
        let mut modes: Vec<Vec<f64>> = self.points.iter().map(|c| vec![0.0; c.dim]).collect();
        let r = bfgs::minimize(
            |th| {
                let (v, g) = self.quadrature_value_grad(th, &rule, &mut modes)?;
                Ok((-v / n, g.iter().map(|g| -g / n).collect()))
            },
            start,
            1e-9,
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
            se: standard_errors(&information),
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
        })
    }
}

/// The step of a central difference at x.
fn step_at(x: f64) -> f64 {
    DIFF_STEP * x.abs().max(1.0)
}

/// ∇f by central differences.
fn central_gradient(f: impl Fn(&[f64]) -> Result<f64>, x: &[f64]) -> Result<Vec<f64>> {
    let mut xs = x.to_vec();
    (0..x.len())
        .map(|j| {
            let h = step_at(x[j]);
            xs[j] = x[j] + h;
            let up = f(&xs)?;
            xs[j] = x[j] - h;
            let down = f(&xs)?;
            xs[j] = x[j];
            Ok((up - down) / (2.0 * h))
        })
        .collect()
}

/// The Jacobian of a gradient g by central differences: row j is ∂g/∂x_j.
fn central_jacobian(g: impl Fn(&[f64]) -> Result<Vec<f64>>, x: &[f64]) -> Result<Vec<Vec<f64>>> {
    let mut xs = x.to_vec();
    (0..x.len())
        .map(|j| {
            let h = step_at(x[j]);
            xs[j] = x[j] + h;
            let up = g(&xs)?;
            xs[j] = x[j] - h;
            let down = g(&xs)?;
            xs[j] = x[j];
            Ok(up
                .iter()
                .zip(&down)
                .map(|(a, b)| (a - b) / (2.0 * h))
                .collect())
        })
        .collect()
}

/// ∇²f by central second differences of f's values (f exact to rounding).
fn central_hessian(f: impl Fn(&[f64]) -> Result<f64>, x: &[f64]) -> Result<Vec<Vec<f64>>> {
    let k = x.len();
    let hs: Vec<f64> = x.iter().map(|&v| 100.0 * step_at(v)).collect();
    let at = |moves: &[(usize, f64)]| {
        let mut xs = x.to_vec();
        moves.iter().for_each(|&(j, s)| xs[j] += s * hs[j]);
        f(&xs)
    };
    let f0 = f(x)?;
    let mut h = vec![vec![0.0; k]; k];
    for j in 0..k {
        h[j][j] = (at(&[(j, 1.0)])? - 2.0 * f0 + at(&[(j, -1.0)])?) / (hs[j] * hs[j]);
        for l in 0..j {
            let v = (at(&[(j, 1.0), (l, 1.0)])?
                - at(&[(j, 1.0), (l, -1.0)])?
                - at(&[(j, -1.0), (l, 1.0)])?
                + at(&[(j, -1.0), (l, -1.0)])?)
                / (4.0 * hs[j] * hs[l]);
            h[j][l] = v;
            h[l][j] = v;
        }
    }
    Ok(h)
}

fn symmetrised(m: Vec<Vec<f64>>) -> Vec<Vec<f64>> {
    (0..m.len())
        .map(|j| (0..m.len()).map(|l| 0.5 * (m[j][l] + m[l][j])).collect())
        .collect()
}

fn negated(m: Vec<Vec<f64>>) -> Vec<Vec<f64>> {
    m.into_iter()
        .map(|r| r.into_iter().map(|v| -v).collect())
        .collect()
}

/// √diag(I⁻¹), NaN throughout when I is not positive definite.
fn standard_errors(info: &[Vec<f64>]) -> Vec<f64> {
    let k = info.len();
    let flat: Vec<f64> = info.iter().flatten().copied().collect();
    let Some(f) = Factor::cholesky(&flat, k) else {
        return vec![f64::NAN; k];
    };
    (0..k)
        .map(|j| {
            let mut e = vec![0.0; k];
            e[j] = 1.0;
            f.solve_lower(&mut e);
            e.iter().map(|v| v * v).sum::<f64>().sqrt()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::glmm::RandomTerm;
    use crate::rng::NormalStream;

    /// y_ij = 1 + b_i + e_ij, b ~ N(0, 0.8²), e ~ N(0, 0.5²): `groups` balanced groups of `per`.
    fn one_way(groups: usize, per: usize, seed: u64) -> Glmm {
        let mut s = NormalStream::new(seed);
        let b: Vec<f64> = (0..groups).map(|_| 0.8 * s.draw()).collect();
        let n = groups * per;
        let y = (0..n).map(|i| 1.0 + b[i / per] + 0.5 * s.draw()).collect();
        let g: Vec<usize> = (0..n).map(|i| i / per).collect();
        Glmm::new(Family::Gaussian, y, vec![1.0; n], &g, vec![1.0; n], None).unwrap()
    }

    /// Counts or successes with a random intercept (sd 0.6) and a covariate.
    fn intercepts(family: Family, groups: usize, per: usize, seed: u64) -> Glmm {
        let mut s = NormalStream::new(seed);
        let b: Vec<f64> = (0..groups).map(|_| 0.6 * s.draw()).collect();
        let n = groups * per;
        let x: Vec<f64> = (0..n)
            .flat_map(|i| [1.0, ((i * 7) % 11) as f64 / 5.0 - 1.0])
            .collect();
        let trials = 5.0;
        let y = (0..n)
            .map(|i| {
                let eta = 0.3 + 0.4 * x[2 * i + 1] + b[i / per];
                // A deterministic draw near the mean keeps the data fixed without a Poisson sampler.
                let u = (s.draw() * 0.5).tanh() * 0.5 + 0.5;
                match family {
                    Family::Poisson => (eta.exp() * (0.5 + u)).round(),
                    _ => (trials / (1.0 + (-eta).exp()) * (0.5 + u))
                        .round()
                        .min(trials),
                }
            })
            .collect();
        let g: Vec<usize> = (0..n).map(|i| i / per).collect();
        let t = (family == Family::Binomial).then(|| vec![trials; n]);
        Glmm::new(family, y, x, &g, vec![1.0; n], t).unwrap()
    }

    /// Poisson counts with correlated random intercepts and slopes.
    fn slopes(groups: usize, per: usize) -> Glmm {
        let mut s = NormalStream::new(5);
        let n = groups * per;
        let x: Vec<f64> = (0..n).map(|_| s.draw()).collect();
        let b: Vec<(f64, f64)> = (0..groups)
            .map(|_| {
                let (e1, e2) = (s.draw(), s.draw());
                (0.5 * e1, 0.3 * (0.6 * e1 + 0.8 * e2))
            })
            .collect();
        let y = (0..n)
            .map(|i| {
                let (b0, b1) = b[i / per];
                let mean = (0.5 + b0 + (0.3 + b1) * x[i]).exp();
                (mean + mean.sqrt() * s.draw()).round().max(0.0)
            })
            .collect();
        let term = RandomTerm {
            group: (0..n).map(|i| i / per).collect(),
            z: x.iter().flat_map(|&v| [1.0, v]).collect(),
            correlated: true,
        };
        let xs = x.iter().flat_map(|&v| [1.0, v]).collect();
        Glmm::with_terms(Family::Poisson, y, xs, vec![term], None).unwrap()
    }

    #[test]
    fn balanced_one_way_fits_are_the_anova_estimates() {
        // ML and REML of the balanced one-way model in closed form (Searle, Casella and
        // McCulloch 1992, ch. 3): σ̂² = MSW; σ̂_b² = (MSB − MSW)/n (REML) or
        // ((1 − 1/G)·MSB − MSW)/n (ML); μ̂ = ȳ, its se √(MSB/(nG)) under REML.
        let (g, n) = (30, 6);
        let m = one_way(g, n, 3);
        let y = &m.y;
        let mean = y.iter().sum::<f64>() / (g * n) as f64;
        let means: Vec<f64> = (0..g)
            .map(|i| y[i * n..(i + 1) * n].iter().sum::<f64>() / n as f64)
            .collect();
        let ssw: f64 = (0..g * n).map(|i| (y[i] - means[i / n]).powi(2)).sum();
        let ssb: f64 = means.iter().map(|v| n as f64 * (v - mean).powi(2)).sum();
        let (msw, msb) = (ssw / (g * (n - 1)) as f64, ssb / (g - 1) as f64);
        for (criterion, sb2) in [
            (Criterion::Reml, (msb - msw) / n as f64),
            (
                Criterion::Ml,
                ((1.0 - 1.0 / g as f64) * msb - msw) / n as f64,
            ),
        ] {
            let fit = m
                .fit_exact(&ExactSettings {
                    criterion,
                    ..Default::default()
                })
                .unwrap();
            assert!(fit.converged, "{fit:?}");
            let th = &fit.theta;
            assert!(
                (th[0] - mean).abs() < 1e-8,
                "{criterion:?}: {th:?} vs {mean}"
            );
            assert!(
                (th[1].exp().powi(2) / sb2 - 1.0).abs() < 1e-6,
                "{criterion:?}: {th:?}"
            );
            assert!(
                (th[2].exp().powi(2) / msw - 1.0).abs() < 1e-6,
                "{criterion:?}: {th:?}"
            );
            // μ̂'s standard error: Var = (σ_b² + σ²/n)/G at the estimates (under REML,
            // MSB/(nG)); the same form under ML, where the information's cross terms vanish.
            let want = ((sb2 + msw / n as f64) / g as f64).sqrt();
            assert!(
                (fit.se[0] / want - 1.0).abs() < 1e-5,
                "{criterion:?}: {:?}",
                fit.se
            );
            assert_eq!(fit.reml.is_some(), criterion == Criterion::Reml);
        }
    }

    #[test]
    fn the_gaussian_fit_is_the_maximum_of_the_closed_form() {
        // Crossed correlated slopes × intercepts (one point of 11 effects) and nested terms: the
        // fit's ℓ is the closed form's (tested against the dense normal density in mod.rs) and
        // no step of 1e-3 along any coordinate raises it.
        let terms = |nested: bool| {
            let n = 60;
            let mut s = NormalStream::new(9);
            let x: Vec<f64> = (0..n).map(|i| (i as f64 * 0.37).sin()).collect();
            let y: Vec<f64> = (0..n)
                .map(|i| 1.0 + 0.5 * x[i] + 0.7 * ((i % 4) as f64 - 1.5) + 0.6 * s.draw())
                .collect();
            let a = RandomTerm {
                group: (0..n).map(|i| i % 4).collect(),
                z: x.iter().flat_map(|&v| [1.0, v]).collect(),
                correlated: true,
            };
            let b = RandomTerm {
                group: (0..n)
                    .map(|i| {
                        if nested {
                            2 * (i % 4) + (i / 4) % 2
                        } else {
                            i % 5
                        }
                    })
                    .collect(),
                z: vec![1.0; n],
                correlated: false,
            };
            let xs = x.iter().flat_map(|&v| [1.0, v]).collect();
            Glmm::with_terms(Family::Gaussian, y, xs, vec![a, b], None).unwrap()
        };
        for nested in [false, true] {
            let m = terms(nested);
            let fit = m.fit_exact(&ExactSettings::default()).unwrap();
            assert!(fit.converged, "{fit:?}");
            let at = |th: &[f64]| m.log_likelihood(th, 0).unwrap().value;
            assert!((at(&fit.theta) - fit.log_likelihood).abs() < 1e-9);
            for j in 0..fit.theta.len() {
                for s in [-1e-3, 1e-3] {
                    let mut th = fit.theta.clone();
                    th[j] += s;
                    assert!(
                        at(&th) <= fit.log_likelihood + 1e-9,
                        "nested {nested}, θ[{j}]"
                    );
                }
            }
        }
    }

    #[test]
    fn quadrature_fits_are_the_one_dimensional_maximum() {
        // Against the generic 1-D maximum of `em::maximum_likelihood` (40 Gauss-Hermite nodes,
        // finite-difference centring): the same maximum, the same log-likelihood.
        for family in [Family::Poisson, Family::Binomial] {
            let m = intercepts(family, 40, 8, 2);
            let fit = m.fit_exact(&ExactSettings::default()).unwrap();
            assert!(fit.converged && fit.quadrature_error < 1e-8, "{fit:?}");
            let reference =
                crate::em::maximum_likelihood(&m, &m.start(), &GaussHermite::new(40)).unwrap();
            assert!(
                (-reference.f - fit.log_likelihood).abs() < 1e-8,
                "{family:?}: {fit:?}"
            );
            for (a, b) in fit.theta.iter().zip(&reference.x) {
                assert!(
                    (a - b).abs() < 1e-5,
                    "{family:?}: {:?} vs {:?}",
                    fit.theta,
                    reference.x
                );
            }
            let quad = m.log_likelihood(&fit.theta, 0).unwrap();
            assert_eq!(quad.method, LikelihoodMethod::Quadrature);
            assert!((quad.value - fit.log_likelihood).abs() < 1e-8);
            assert!(fit.se.iter().all(|s| s.is_finite() && *s > 0.0), "{fit:?}");
        }
    }

    #[test]
    fn correlated_slopes_by_product_quadrature() {
        // Two effects per point: ℓ by the 15² rule agrees with importance sampling within 4 of
        // its errors; the Fisher-identity gradient is ℓ's own (central differences of ℓ).
        let m = slopes(30, 8);
        let theta = vec![0.4, 0.25, -0.6, -1.1, 0.1];
        let rule = ProductRule::new(2, 15);
        let mut modes: Vec<Vec<f64>> = m.points.iter().map(|c| vec![0.0; c.dim]).collect();
        let (value, grad) = m.quadrature_value_grad(&theta, &rule, &mut modes).unwrap();
        let sampled = m.log_likelihood_sampled(&theta, 20_000, 4).unwrap();
        assert!(
            (sampled.value - value).abs() < 4.0 * sampled.se,
            "{sampled:?} vs {value}"
        );
        assert!(sampled.se < 0.02, "{sampled:?}");
        let fd = central_gradient(
            |th| {
                let mut modes = modes.clone();
                Ok(m.quadrature_value_grad(th, &rule, &mut modes)?.0)
            },
            &theta,
        )
        .unwrap();
        for (a, b) in grad.iter().zip(&fd) {
            assert!(
                (a - b).abs() < 1e-5 * a.abs().max(1.0),
                "{grad:?} vs {fd:?}"
            );
        }
        let fit = m.fit_exact(&ExactSettings::default()).unwrap();
        assert!(fit.converged && fit.quadrature_error < 1e-6, "{fit:?}");
        assert!(fit.se.iter().all(|s| s.is_finite() && *s > 0.0), "{fit:?}");
    }

    #[test]
    fn same_bits_on_any_number_of_threads() {
        let m = intercepts(Family::Poisson, 600, 4, 8);
        let fits: Vec<ExactFit> = [1, 3]
            .iter()
            .map(|&t| {
                let pool = rayon::ThreadPoolBuilder::new()
                    .num_threads(t)
                    .build()
                    .unwrap();
                pool.install(|| m.fit_exact(&ExactSettings::default()).unwrap())
            })
            .collect();
        assert_eq!(fits[0], fits[1]);
    }

    #[test]
    fn what_cannot_be_fitted_exactly_is_named() {
        let err = |m: &Glmm, s: ExactSettings| format!("{}", m.fit_exact(&s).unwrap_err());
        let poisson = intercepts(Family::Poisson, 5, 4, 1);
        let reml = ExactSettings {
            criterion: Criterion::Reml,
            ..Default::default()
        };
        assert!(err(&poisson, reml).contains("Gaussian family only"));
        let nodes = ExactSettings {
            nodes: Some(0),
            ..Default::default()
        };
        assert!(err(&poisson, nodes).contains("1 to 50"));
        // Crossed Poisson intercepts: one point of 9 effects.
        let n = 20;
        let crossed = Glmm::with_terms(
            Family::Poisson,
            (0..n).map(|i| (i % 3) as f64).collect(),
            vec![1.0; n],
            [4, 5]
                .iter()
                .map(|&l| RandomTerm {
                    group: (0..n).map(|i| i % l).collect(),
                    z: vec![1.0; n],
                    correlated: false,
                })
                .collect(),
            None,
        )
        .unwrap();
        assert_eq!(crossed.exact_method(), None);
        assert!(err(&crossed, ExactSettings::default()).contains("automated EM"));
    }
}
