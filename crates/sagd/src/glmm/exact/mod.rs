//! Fits by the exact marginal likelihood, where it can be computed to rounding, as lme4 does:
//! the Gaussian family by its closed form with β and σ profiled out (maximum likelihood or REML,
//! lmer's criteria), and the other families with at most [`MAX_QUADRATURE_DIM`] effects per point
//! by adaptive Gauss-Hermite quadrature at each point's posterior mode (glmer's nAGQ, extended to
//! correlated effects by a product rule), maximised by BFGS with the gradient from Fisher's
//! identity at the same nodes. Standard errors come from the observed information, by central
//! differences of the exact log-likelihood (or of its exact gradient). Models with larger points
//! (crossed non-Gaussian designs, long latents) are fitted by automated EM.

mod gaussian;
mod kenward_roger;
mod profile;
mod quadrature;
mod satterthwaite;
mod woodbury;
pub(super) use gaussian::{least_squares_criterion, ThetaFree};
pub(super) use quadrature::{NodeScratch, ProductRule};
pub(super) use satterthwaite::{t_tail, unit};
#[cfg(test)]
mod tests;

use rayon::prelude::*;
use serde::{Deserialize, Serialize};

use super::{column_rms, Family, Glmm, LikelihoodMethod};
use crate::error::{Result, SagdError};
use crate::linalg::spd_inverse;
use crate::optim::bfgs::{self, BfgsResult};

/// The most effects per point that [`Glmm::fit_exact`] integrates by quadrature.
pub const MAX_QUADRATURE_DIM: usize = 3;

/// Nodes per dimension by the points' dimension (1, 2, 3): 25 as glmer's largest nAGQ.
pub(super) const DEFAULT_NODES: [usize; MAX_QUADRATURE_DIM] = [25, 15, 9];

/// Points per piece of a parallel pass: sums are taken piece by piece in order, so the result is
/// the same bits on any number of threads.
pub(super) const POINTS_PER_PIECE: usize = 256;

impl Glmm {
    /// The sum over the model's points of `point(c)`, the points in fixed pieces of
    /// [`POINTS_PER_PIECE`] each summed in order and the pieces then added in order: the same
    /// bits on any number of threads. `zero` is the empty sum, `add` adds one sum into another.
    pub(super) fn sum_over_points<S: Send>(
        &self,
        zero: impl Fn() -> S + Sync,
        add: impl Fn(&mut S, &S) + Sync,
        point: impl Fn(usize) -> Result<S> + Sync,
    ) -> Result<S> {
        let points: Vec<usize> = (0..self.points.len()).collect();
        let parts = points
            .par_chunks(POINTS_PER_PIECE)
            .map(|chunk| {
                let mut sum = zero();
                for &c in chunk {
                    add(&mut sum, &point(c)?);
                }
                Ok(sum)
            })
            .collect::<Result<Vec<_>>>()?;
        let mut total = zero();
        parts.iter().for_each(|s| add(&mut total, s));
        Ok(total)
    }
}

/// A diagonal factor below this share of its scale is at its boundary (lme4's `isSingular`
/// tolerance).
const AT_BOUNDARY: f64 = 1e-4;

/// A diagonal factor the fit leaves below this share of its scale is tried at its boundary.
pub(super) const NEAR_BOUNDARY: f64 = 0.1;

/// Where a factor tried at its boundary is put: this share of its scale.
const TRIED_AT: f64 = 1e-6;

/// BFGS's tolerance on the objective's gradient (ℓ over the observations).
const GTOL: f64 = 1e-9;

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
    /// The covariance of θ̂: the information's inverse without the parameters at a boundary
    /// (an sd at 0, a correlation at ±1), whose rows and columns are NaN.
    pub covariance: Vec<Vec<f64>>,
    /// √diag of `covariance` (NaN at a boundary, or throughout if the information of the other
    /// parameters is not positive definite).
    pub se: Vec<f64>,
    /// Whether a random-effect covariance is singular at θ̂ (lme4's "boundary (singular) fit"):
    /// an sd at 0 or a correlation at ±1, where a simpler model fits as well.
    pub singular: bool,
    /// BFGS iterations.
    pub iterations: usize,
    /// Whether BFGS met its tolerance or no representable step could improve ℓ.
    pub converged: bool,
    /// max |∂ℓ/∂ψ| at the end, on BFGS's scale (ℓ divided by the observations).
    pub grad_max: f64,
}

impl ExactFit {
    /// The covariance, standard errors and singularity at θ̂, from the information and the
    /// parameters at a boundary.
    fn with_errors(mut self, model: &Glmm) -> Self {
        let boundary = model.boundary(&self.theta);
        self.covariance = covariance(&self.information, &boundary);
        self.se = (0..self.theta.len())
            .map(|j| self.covariance[j][j].sqrt())
            .collect();
        self.singular = boundary.iter().any(|b| *b);
        self
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

    /// Each diagonal factor of θ's covariances, log L_aa: its place in θ and L_aa over its
    /// scale, the term's largest sd (or, with one effect, σ for the Gaussian family and 1
    /// otherwise), every effect on η's scale (times its column's root mean square, so that a
    /// slope's covariate in other units does not move it).
    pub(super) fn factor_ratios(&self, theta: &[f64]) -> Vec<(usize, f64)> {
        let factors = self.factors(theta);
        let unit = if self.family == Family::Gaussian {
            theta[self.theta_len() - 1].exp()
        } else {
            1.0
        };
        let mut out = Vec::new();
        for ((t, l), rms) in self.terms.iter().zip(&factors).zip(self.effect_rms()) {
            let q = t.q;
            let sd = |a: usize| rms[a] * (0..=a).map(|b| l[a * q + b].powi(2)).sum::<f64>().sqrt();
            let scale = if q == 1 {
                unit
            } else {
                (0..q).map(sd).fold(0.0, f64::max)
            };
            out.extend((0..q).map(|a| (t.theta_at + a, rms[a] * l[a * q + a] / scale)));
        }
        out
    }

    /// Which parameters of θ sit at a boundary of the covariances: log L_aa where L_aa is below
    /// [`AT_BOUNDARY`] of its scale ([`Glmm::factor_ratios`]): an sd at 0, or, with L_ab beside
    /// it, a correlation at ±1.
    fn boundary(&self, theta: &[f64]) -> Vec<bool> {
        let mut at = vec![false; theta.len()];
        for (j, ratio) in self.factor_ratios(theta) {
            at[j] = ratio < AT_BOUNDARY;
        }
        at
    }

    /// BFGS's minimum `fit` of `f` (−ℓ/n, or the profiled criterion, over x: θ's entries from
    /// `shift` on, as `theta_of` makes θ from x), with each diagonal factor that stopped below
    /// [`NEAR_BOUNDARY`] of its scale (and above [`TRIED_AT`]) tried at the boundary, smallest
    /// first: put at [`TRIED_AT`] of its scale, the rest minimised again from there, and kept
    /// where f is no higher. In log L_aa the pull of a variance towards 0 fades as L_aa², so
    /// BFGS stops short of a maximum that lies on the boundary, where lme4's bounded optimiser
    /// lands.
    fn settle_at_boundary(
        &self,
        f: &mut impl FnMut(&[f64]) -> Result<(f64, Vec<f64>)>,
        fit: BfgsResult,
        (theta_of, shift): (impl Fn(&[f64]) -> Vec<f64>, usize),
        max_iter: usize,
    ) -> Result<BfgsResult> {
        let mut best = fit;
        let mut iterations = best.iterations;
        let mut tried = Vec::new();
        loop {
            let next = self
                .factor_ratios(&theta_of(&best.x))
                .into_iter()
                .filter(|(j, r)| *r > TRIED_AT && *r < NEAR_BOUNDARY && !tried.contains(j))
                .min_by(|a, b| a.1.total_cmp(&b.1));
            let Some((j, ratio)) = next else { break };
            tried.push(j);
            let mut x = best.x.clone();
            x[j - shift] += (TRIED_AT / ratio).ln();
            let at_boundary = bfgs::minimize_where_defined(&mut *f, &x, GTOL, max_iter)?;
            iterations += at_boundary.iterations;
            // No higher to within f's rounding.
            if at_boundary.f <= best.f + 4.0 * f64::EPSILON * best.f.abs().max(1.0) {
                best = at_boundary;
            }
        }
        best.iterations = iterations;
        Ok(best)
    }
}

/// θ of an optimiser's x, and x's place in θ ([`Glmm::settle_at_boundary`]).
type Settle<'a> = (&'a dyn Fn(&[f64]) -> Vec<f64>, usize);

impl Glmm {
    /// Each entry of θ's unit and origin at `theta` ([`Glmm::units_with`] of σ there for the
    /// Gaussian family, 1 otherwise).
    pub(super) fn theta_units(&self, theta: &[f64]) -> Vec<(f64, f64)> {
        let eta_unit = if self.family == Family::Gaussian {
            theta[self.theta_len() - 1].exp()
        } else {
            1.0
        };
        self.units_with(eta_unit)
    }

    /// Each entry of θ's unit and origin, so that (θ_j − origin_j)/unit_j reads the same on the
    /// data in other units: β_j in units of η over x_j's root mean square, a factor's
    /// off-diagonal entries of row a in units of η over z_a's, its log L_aa less the log of
    /// that unit, where η's unit is `eta_unit` (and log σ, Gaussian, less its log). With
    /// `eta_unit` 1, the Gaussian's ψ (factors relative to σ) in its entries of θ.
    pub(super) fn units_with(&self, eta_unit: f64) -> Vec<(f64, f64)> {
        let mut units = vec![(1.0, 0.0); self.theta_len()];
        for (j, u) in units[..self.p].iter_mut().enumerate() {
            *u = (eta_unit / column_rms(&self.x, self.p, j), 0.0);
        }
        for (t, rms) in self.terms.iter().zip(self.effect_rms()) {
            let row_unit: Vec<f64> = rms.iter().map(|r| eta_unit / r).collect();
            for (a, &unit) in row_unit.iter().enumerate() {
                units[t.theta_at + a] = (1.0, unit.ln());
            }
            let off = (1..t.q).flat_map(|a| (0..a).map(move |_| a));
            for (k, a) in off.enumerate().take(t.n_params() - t.q) {
                units[t.theta_at + t.q + k] = (row_unit[a], 0.0);
            }
        }
        if self.family == Family::Gaussian {
            units[self.theta_len() - 1] = (1.0, eta_unit.ln());
        }
        units
    }

    /// BFGS's minimum of `f` over x in `units` (f and its gradient taken at φ = x in those
    /// units), from `x0`, then, where `settle` gives θ of x and x's place in θ, each variance
    /// factor left near 0 tried at the boundary ([`Glmm::settle_at_boundary`]); the minimum
    /// back in x. Steps and differences of one size in φ fit data in any units.
    pub(super) fn minimize_in_units(
        &self,
        f: &mut impl FnMut(&[f64]) -> Result<(f64, Vec<f64>)>,
        (x0, units): (&[f64], &[(f64, f64)]),
        settle: Option<Settle<'_>>,
        (gtol, max_iter): (f64, usize),
    ) -> Result<BfgsResult> {
        let phi0 = to_units(x0, units);
        let mut r = bfgs::minimize_where_defined(&mut *f, &phi0, gtol, max_iter)?;
        if let Some((theta_of, shift)) = settle {
            let theta_of = |phi: &[f64]| theta_of(&from_units(phi, units));
            r = self.settle_at_boundary(&mut *f, r, (theta_of, shift), max_iter)?;
        }
        r.x = from_units(&r.x, units);
        Ok(r)
    }

    /// ∇²f at `x` by central differences in `units` (θ's, [`Glmm::theta_units`], or those of
    /// its entries that x holds), taken back to θ: data in other units give the same standard
    /// errors in those units, where steps of one size in θ itself are far too long or short for
    /// entries in a response's or a covariate's units.
    fn hessian_in_units(
        f: impl Fn(&[f64]) -> Result<f64>,
        x: &[f64],
        units: &[(f64, f64)],
    ) -> Result<Vec<Vec<f64>>> {
        let h = central_hessian(|phi| f(&from_units(phi, units)), &to_units(x, units))?;
        Ok(back_from_units(h, units))
    }

    /// The Jacobian of the gradient g at θ (row j is ∂g/∂θ_j) by central differences in θ's
    /// units, as [`Glmm::hessian_in_units`].
    fn jacobian_in_units(
        &self,
        g: impl Fn(&[f64]) -> Result<Vec<f64>> + Sync,
        theta: &[f64],
    ) -> Result<Vec<Vec<f64>>> {
        let units = self.theta_units(theta);
        let scaled = |phi: &[f64]| -> Result<Vec<f64>> {
            let grad = g(&from_units(phi, &units))?;
            Ok(grad.iter().zip(&units).map(|(v, u)| v * u.0).collect())
        };
        let jac = central_jacobian(scaled, &to_units(theta, &units))?;
        Ok(back_from_units(jac, &units))
    }
}

/// θ in its units ([`Glmm::units_with`]).
pub(super) fn to_units(theta: &[f64], units: &[(f64, f64)]) -> Vec<f64> {
    theta
        .iter()
        .zip(units)
        .map(|(v, (u, o))| (v - o) / u)
        .collect()
}

/// θ from its units.
pub(super) fn from_units(phi: &[f64], units: &[(f64, f64)]) -> Vec<f64> {
    phi.iter().zip(units).map(|(v, (u, o))| v * u + o).collect()
}

/// A matrix of second derivatives in θ's units taken back to θ.
fn back_from_units(m: Vec<Vec<f64>>, units: &[(f64, f64)]) -> Vec<Vec<f64>> {
    m.into_iter()
        .zip(units)
        .map(|(row, (uj, _))| {
            row.into_iter()
                .zip(units)
                .map(|(v, (ul, _))| v / (uj * ul))
                .collect()
        })
        .collect()
}

/// The step of a central difference at x.
fn step_at(x: f64) -> f64 {
    DIFF_STEP * x.abs().max(1.0)
}

/// ∇f by central differences.
pub(super) fn central_gradient(
    f: impl Fn(&[f64]) -> Result<f64> + Sync,
    x: &[f64],
) -> Result<Vec<f64>> {
    let rows = central_jacobian(|xs| Ok(vec![f(xs)?]), x)?;
    Ok(rows.into_iter().map(|r| r[0]).collect())
}

/// The Jacobian of a gradient g by central differences: row j is ∂g/∂x_j. The 2 · len(x)
/// evaluations run side by side (each is its own, so the bits do not depend on the threads), and
/// the first error in coordinate order is the one returned.
pub(super) fn central_jacobian(
    g: impl Fn(&[f64]) -> Result<Vec<f64>> + Sync,
    x: &[f64],
) -> Result<Vec<Vec<f64>>> {
    let pairs: Vec<_> = (0..x.len())
        .into_par_iter()
        .map(|j| {
            let at = |v: f64| {
                let mut xs = x.to_vec();
                xs[j] = v;
                g(&xs)
            };
            let h = step_at(x[j]);
            rayon::join(|| at(x[j] + h), || at(x[j] - h))
        })
        .collect();
    pairs
        .into_iter()
        .zip(x)
        .map(|((up, down), &xj)| {
            let (up, down, h) = (up?, down?, step_at(xj));
            Ok(up
                .iter()
                .zip(&down)
                .map(|(a, b)| (a - b) / (2.0 * h))
                .collect())
        })
        .collect()
}

/// ∇²f by central second differences of f's values (f exact to rounding).
pub(super) fn central_hessian(
    f: impl Fn(&[f64]) -> Result<f64>,
    x: &[f64],
) -> Result<Vec<Vec<f64>>> {
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

pub(super) fn symmetrised(m: Vec<Vec<f64>>) -> Vec<Vec<f64>> {
    (0..m.len())
        .map(|j| (0..m.len()).map(|l| 0.5 * (m[j][l] + m[l][j])).collect())
        .collect()
}

pub(super) fn negated(m: Vec<Vec<f64>>) -> Vec<Vec<f64>> {
    m.into_iter()
        .map(|r| r.into_iter().map(|v| -v).collect())
        .collect()
}

/// The covariance I⁻¹ of the parameters not at a boundary (NaN in the rows and columns of those
/// that are, whose likelihood is flat: an sd at 0 or a correlation at ±1), as lme4's standard
/// errors are conditional on such variance parameters; NaN throughout when even that is not
/// positive definite.
pub(super) fn covariance(info: &[Vec<f64>], boundary: &[bool]) -> Vec<Vec<f64>> {
    let kept: Vec<usize> = (0..info.len()).filter(|&j| !boundary[j]).collect();
    let reduced: Vec<Vec<f64>> = kept
        .iter()
        .map(|&j| kept.iter().map(|&l| info[j][l]).collect())
        .collect();
    let mut cov = vec![vec![f64::NAN; info.len()]; info.len()];
    if let Some(inv) = spd_inverse(&reduced) {
        for (a, &j) in kept.iter().enumerate() {
            for (b, &l) in kept.iter().enumerate() {
                cov[j][l] = inv[a][b];
            }
        }
    }
    cov
}
