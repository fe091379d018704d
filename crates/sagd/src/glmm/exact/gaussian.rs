//! The Gaussian family's exact fit: the closed form with β and σ profiled out (lmer's way), the
//! variance parameters ψ = the factors relative to σ found by BFGS, ML or REML.

use super::{
    central_gradient, central_jacobian, from_units, negated, to_units, Criterion, ExactFit,
    ExactSettings, GTOL,
};
use crate::error::{Result, SagdError};
use crate::glmm::likelihood::not_finite;
use crate::glmm::{Glmm, LikelihoodMethod, LN_2PI};
use crate::metric::Factor;

/// The closed form's sums that do not depend on θ ([`Glmm::gaussian_cross`]), made at their
/// first use and kept with the model. A clone starts without them: a clone is how a model with
/// other responses or weights is made, and they are sums of those.
#[derive(Debug, Default)]
pub(in crate::glmm) struct ThetaFree(std::sync::OnceLock<Pieces>);

impl Clone for ThetaFree {
    fn clone(&self) -> Self {
        ThetaFree::default()
    }
}

/// Per-point sums of the Gaussian closed form at relative factors Λ (V₀ = I + Z Λ Λᵀ Zᵀ).
#[derive(Debug)]
pub(super) struct Pieces {
    n: f64,
    p: usize,
    /// Xᵀ V₀⁻¹ X (p × p), Xᵀ V₀⁻¹ y, yᵀ V₀⁻¹ y, log det V₀.
    pub(super) xvx: Vec<f64>,
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

    /// The sums of the fixed effects alone: rows `x` (n × p, row-major), responses `y` and
    /// prior weights `w` (V₀ = W⁻¹, no random effect).
    fn least_squares(x: &[f64], y: &[f64], w: Option<&[f64]>) -> Pieces {
        let (n, p) = (y.len(), x.len() / y.len().max(1));
        let mut s = Pieces::zero(p);
        s.n = n as f64;
        for (i, yi) in y.iter().enumerate() {
            let (row, wi) = (&x[i * p..(i + 1) * p], w.map_or(1.0, |w| w[i]));
            for j in 0..p {
                s.xvy[j] += wi * row[j] * yi;
                for k in 0..p {
                    s.xvx[j * p + k] += wi * row[j] * row[k];
                }
            }
            s.yvy += wi * yi * yi;
            s.log_det -= wi.ln();
        }
        s
    }

    /// The criterion with β and σ at their maximising values: (value, β̂, σ̂²).
    fn profiled(&self, criterion: Criterion) -> Result<(f64, Vec<f64>, f64)> {
        let (beta, rss, log_det_x) = self.gls()?;
        let df = match criterion {
            Criterion::Ml => self.n,
            Criterion::Reml => self.n - self.p as f64,
        };
        let s2 = rss / df;
        // rss comes by subtraction: below y's own size times rounding, it is zero.
        if rss <= 1e-13 * self.yvy || !s2.is_finite() {
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

/// The closed form's criterion of the fixed effects alone (no random effect: V₀ = W⁻¹), β and
/// σ at their maximising values: R's `logLik(lm(…), REML = …)` of rows `x` (n × p), responses
/// `y` and prior weights `w`.
pub(in crate::glmm) fn least_squares_criterion(
    x: &[f64],
    y: &[f64],
    w: Option<&[f64]>,
    criterion: Criterion,
) -> Result<f64> {
    Ok(Pieces::least_squares(x, y, w).profiled(criterion)?.0)
}

impl Glmm {
    /// Where the variance parameters ψ sit in θ: after β, before log σ.
    fn psi_range(&self) -> std::ops::Range<usize> {
        self.p..self.theta_len() - 1
    }

    /// θ with the terms' factors made relative to σ: Λ = L/σ.
    pub(super) fn relative(&self, theta: &[f64]) -> Vec<f64> {
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
    pub(super) fn gaussian_pieces(&self, rel: &[f64]) -> Result<Pieces> {
        let factors = self.factors(rel);
        let mut sums = self.sum_over_points(
            || Pieces::zero(self.p),
            Pieces::add,
            |c| self.gaussian_point_pieces(&factors, c),
        )?;
        sums.add(self.gaussian_cross());
        Ok(sums)
    }

    /// One point's sums, by Woodbury's identity in its latent dimension: with A = Z_c Λ and
    /// M = I + AᵀA = L Lᵀ, V₀⁻¹ = I − A M⁻¹ Aᵀ and det V₀ = det M. Prior weights W enter as
    /// rows scaled by √w (V₀ = W⁻¹ + ZΛΛᵀZᵀ = W^−½ (I + ÃÃᵀ) W^−½, so det V₀ = det M / det W);
    /// without weights the scaling is compiled out. The terms without Λ (XᵀWX, XᵀWy, yᵀWy,
    /// −log det W) are [`Glmm::gaussian_cross`]'s, taken once; these are the rest.
    fn gaussian_point_pieces(&self, factors: &[Vec<f64>], c: usize) -> Result<Pieces> {
        match self.weighted {
            true => self.point_pieces::<true>(factors, c),
            false => self.point_pieces::<false>(factors, c),
        }
    }

    /// The closed form's sums over every point that do not depend on θ (XᵀWX, XᵀWy, yᵀWy,
    /// −log det W and n), over the points in fixed pieces taken in order, made at the first
    /// call and kept with the model ([`ThetaFree`]).
    fn gaussian_cross(&self) -> &Pieces {
        self.gaussian_cross.0.get_or_init(|| {
            let sums = self.sum_over_points(
                || Pieces::zero(self.p),
                Pieces::add,
                |c| Ok(self.cross_pieces(c)),
            );
            sums.expect("the cross products are sums of products: they do not fail")
        })
    }

    /// Point `c`'s terms of [`Glmm::gaussian_cross`]: its rows' least-squares sums.
    fn cross_pieces(&self, c: usize) -> Pieces {
        let (p, r) = (self.p, self.points[c].rows.clone());
        let w = self.weighted.then(|| &self.trials[r.clone()]);
        Pieces::least_squares(&self.x[r.start * p..r.end * p], &self.y[r], w)
    }

    /// [`Glmm::gaussian_point_pieces`], the rows scaled by their weights' roots where `WEIGHTED`.
    fn point_pieces<const WEIGHTED: bool>(&self, factors: &[Vec<f64>], c: usize) -> Result<Pieces> {
        let (p, rows, dim) = (self.p, self.points[c].rows.clone(), self.points[c].dim);
        let a = self.point_design(factors, c);
        let mut m = vec![0.0; dim * dim];
        (0..dim).for_each(|k| m[k * dim + k] = 1.0);
        let mut atx = vec![0.0; p * dim]; // column j of AᵀX at [j*dim..]
        let mut aty = vec![0.0; dim];
        let mut out = Pieces::zero(p);
        let (mut scaled, mut log_w) = (vec![0.0; if WEIGHTED { p } else { 0 }], 0.0);
        for (ai, i) in a.iter().zip(rows) {
            let row = &self.x[i * p..(i + 1) * p];
            let (sw, xi) = match WEIGHTED {
                true => {
                    let sw = self.row_weight(i, &mut log_w);
                    scaled.iter_mut().zip(row).for_each(|(s, v)| *s = v * sw);
                    (sw, &scaled[..])
                }
                false => (1.0, row),
            };
            let yi = self.y[i] * sw;
            for &(k, ak) in ai {
                let ak = ak * sw;
                aty[k] += ak * yi;
                for j in 0..p {
                    atx[j * dim + k] += ak * xi[j];
                }
                for &(l, al) in ai {
                    m[k * dim + l] += ak * (al * sw);
                }
            }
        }
        let f = Factor::cholesky(&m, dim).ok_or_else(|| not_finite(c))?;
        out.log_det = f.log_det();
        f.solve_lower(&mut aty);
        atx.chunks_mut(dim.max(1))
            .for_each(|col| f.solve_lower(col));
        let dot = |u: &[f64], v: &[f64]| u.iter().zip(v).map(|(a, b)| a * b).sum::<f64>();
        out.yvy = -dot(&aty, &aty);
        for j in 0..p {
            let wj = &atx[j * dim..(j + 1) * dim];
            out.xvy[j] = -dot(wj, &aty);
            for k in 0..p {
                out.xvx[j * p + k] = -dot(wj, &atx[k * dim..(k + 1) * dim]);
            }
        }
        Ok(out)
    }

    /// The observed information of an ML fit at θ̂ (whose closed-form sums at its relative
    /// factors are `pieces`), using that ℓ is quadratic in β at any φ = (ψ, log σ): β's block
    /// XᵀV₀⁻¹X/σ², β's cross terms with φ by central differences of ∇βℓ = XᵀV₀⁻¹(y − Xβ)/σ²
    /// (closed form at each φ), φ's block by second differences of ℓ in φ, β held; all in θ's
    /// units. The closed form is taken O(k²) times for φ's k entries, not O((p + k)²).
    fn gaussian_ml_information(&self, theta: &[f64], pieces: &Pieces) -> Result<Vec<Vec<f64>>> {
        let (p, k) = (self.p, theta.len());
        let units = self.theta_units(theta);
        let (beta, phi_units) = (&theta[..p], &units[p..]);
        let with_phi = |phi: &[f64]| {
            let mut th = theta.to_vec();
            th[p..].copy_from_slice(phi);
            th
        };
        let ml = |phi: &[f64]| self.gaussian_log_likelihood(&with_phi(phi));
        let phi_block = negated(Glmm::hessian_in_units(ml, &theta[p..], phi_units)?);
        let grad_beta = |u: &[f64]| -> Result<Vec<f64>> {
            let th = with_phi(&from_units(u, phi_units));
            let at = self.gaussian_pieces(&self.relative(&th))?;
            let scale = (-2.0 * th[k - 1]).exp();
            Ok((0..p)
                .map(|j| {
                    let xb: f64 = (0..p).map(|l| at.xvx[j * p + l] * beta[l]).sum();
                    scale * (at.xvy[j] - xb)
                })
                .collect())
        };
        // Row a: ∂(∇βℓ)/∂ of φ's entry a in its units.
        let cross = central_jacobian(grad_beta, &to_units(&theta[p..], phi_units))?;
        let s2 = (2.0 * theta[k - 1]).exp();
        let mut info = vec![vec![0.0; k]; k];
        for (j, row) in info.iter_mut().enumerate().take(p) {
            (0..p).for_each(|l| row[l] = pieces.xvx[j * p + l] / s2);
        }
        for (a, row) in cross.iter().enumerate() {
            for (j, v) in row.iter().enumerate() {
                let v = -v / phi_units[a].0;
                info[p + a][j] = v;
                info[j][p + a] = v;
            }
        }
        for (a, row) in phi_block.iter().enumerate() {
            info[p + a][p..].copy_from_slice(row);
        }
        Ok(info)
    }

    /// θ with ψ's relative factors, β = 0 and log σ = 0: the closed form's argument, in which
    /// the factors' ratios to their scales are those of the absolute θ.
    fn relative_theta(&self, psi: &[f64]) -> Vec<f64> {
        let mut rel = vec![0.0; self.theta_len()];
        rel[self.psi_range()].copy_from_slice(psi);
        rel
    }

    /// ψ ↦ −(profiled criterion)/n, for BFGS by central differences.
    fn profiled_objective(&self, psi: &[f64], criterion: Criterion) -> Result<f64> {
        let rel = self.relative_theta(psi);
        let (v, _, _) = self.gaussian_pieces(&rel)?.profiled(criterion)?;
        Ok(-v / self.y.len() as f64)
    }

    /// ℓ(θ) in closed form.
    pub(in crate::glmm) fn gaussian_log_likelihood(&self, theta: &[f64]) -> Result<f64> {
        let pieces = self.gaussian_pieces(&self.relative(theta))?;
        Ok(pieces.ml(&theta[..self.p], theta[self.theta_len() - 1]))
    }

    pub(super) fn fit_gaussian(&self, settings: &ExactSettings, start: &[f64]) -> Result<ExactFit> {
        let criterion = settings.criterion;
        let psi0 = self.relative(start)[self.psi_range()].to_vec();
        // A trial ψ where the closed form cannot be computed (variances so far apart that
        // XᵀV₀⁻¹X loses its rank in rounding) is stepped back from; a fault of the data itself
        // stands at the start.
        let units = &self.units_with(1.0)[self.psi_range()];
        let at = |phi: &[f64]| self.profiled_objective(&from_units(phi, units), criterion);
        let mut objective = |phi: &[f64]| Ok((at(phi)?, central_gradient(at, phi)?));
        let r = self.minimize_in_units(
            &mut objective,
            (&psi0, units),
            Some((&|psi: &[f64]| self.relative_theta(psi), self.p)),
            (GTOL, settings.max_iter),
        )?;
        let rel = self.relative_theta(&r.x);
        let pieces = self.gaussian_pieces(&rel)?;
        let (_, beta, s2) = pieces.profiled(criterion)?;
        let log_sigma = 0.5 * s2.ln();
        let theta = self.absolute(&r.x, &beta, log_sigma);
        let ml = |th: &[f64]| self.gaussian_log_likelihood(th);
        let log_likelihood = ml(&theta)?;
        let (information, reml) = match criterion {
            Criterion::Ml => (self.gaussian_ml_information(&theta, &pieces)?, None),
            Criterion::Reml => {
                // The variance parameters' block from the REML criterion; β's from GLS, as lmer.
                let p = self.p;
                let reml_at = |var: &[f64]| -> Result<f64> {
                    let mut th = theta.clone();
                    th[p..].copy_from_slice(var);
                    let pieces = self.gaussian_pieces(&self.relative(&th))?;
                    pieces.reml(th[self.theta_len() - 1])
                };
                let units = &self.theta_units(&theta)[p..];
                let var_block = negated(Glmm::hessian_in_units(reml_at, &theta[p..], units)?);
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
            covariance: Vec::new(),
            se: Vec::new(),
            singular: false,
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
        }
        .with_errors(self))
    }
}
