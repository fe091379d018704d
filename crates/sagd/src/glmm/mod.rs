//! Generalised linear mixed models, ready to fit: y_i | b ~ family(η_i) with
//! η_i = x_iᵀβ + Σ_t z_{t,i}ᵀ b_{t, g_t(i)}: one or several random-effect terms t (lme4's
//! `(Z_t | g_t)`), each with a vector b_{t,l} ~ N(0, Σ_t) per level l of its grouping factor —
//! Σ_t diagonal (independent effects, `(Z || g)`) or full (correlated) — for the Gaussian,
//! Poisson and binomial (Bernoulli) families.
//!
//! As a [`LatentModel`], a data point is a connected set of rows: rows that share a level of any
//! term, closed under sharing. With one grouping factor that is a group; with nested factors, a
//! top-level group; with crossed factors, usually the whole data set (one point with every
//! level's effects as its latent, which the mass matrix of [`crate::metric`] handles). Its latent
//! is u = (L_t⁻¹ b_{t,l}) over its levels, standard normal a priori (the non-centred form, whose
//! posteriors stay well scaled however small the effects), with Σ_t = L_t L_tᵀ; points with fewer
//! effects than the largest are padded with coordinates that only the prior sees. θ = (β; per
//! term, log diag L_t then, when correlated, L_t's lower off-diagonal row by row; log σ for the
//! Gaussian family). Gradients are written out, O(rows) per point. The log densities include
//! every constant (log y!, the binomial coefficients, 2π), so that log-likelihoods compare with
//! lme4's; [`Glmm::log_likelihood`] computes it.

mod checks;
mod exact;
mod family;
mod fit;
pub mod formula;
mod laplace;
mod likelihood;
mod summary;
mod terms;

pub use exact::{Criterion, ExactFit, ExactSettings, MAX_QUADRATURE_DIM};
pub use family::Family;
pub use fit::{
    FitSettings, Fitted, GlmmFit, Method, LAPLACE_START_MSTEPS, SINGULAR_NOTE, SINGULAR_SD,
};
pub use formula::{Design, Formula, Frame};
pub use laplace::LaplaceFit;
pub use likelihood::{LikelihoodMethod, MarginalLikelihood};
pub use summary::{Estimate, Summary, TermSummary};

use family::{ln_factorial, Rows, CHUNK};
pub use terms::RandomTerm;
use terms::{connected_rows, Component, Term};

use crate::error::{LogpError, Result};
use crate::model::LatentModel;

const LN_2PI: f64 = 1.837_877_066_409_345_5;

/// A GLMM's data, checked.
#[derive(Clone, Debug)]
pub struct Glmm {
    family: Family,
    y: Vec<f64>,
    /// Fixed-effects design, row-major n × p.
    x: Vec<f64>,
    p: usize,
    terms: Vec<Term>,
    /// Trials per row (binomial).
    trials: Vec<f64>,
    points: Vec<Component>,
    /// Row-major n × (number of terms): where the row's level of each term starts in its point's
    /// latent.
    slot: Vec<usize>,
    latent_dim: usize,
    /// Per point, Σ over its rows of the log density's constant part (log y!, binomial
    /// coefficients, 2π).
    row_constant: Vec<f64>,
}

impl Glmm {
    /// A GLMM of `y` (n values) on the fixed-effects design `x` (n × p, row-major) with one
    /// random-effect term: groups `group` (n indices 0..G, each used) and independent effects
    /// with design `z` (n × q, row-major). `trials` (binomial only, n values, default 1) are the
    /// numbers of trials behind each y. Errors name the input and the fix.
    pub fn new(
        family: Family,
        y: Vec<f64>,
        x: Vec<f64>,
        group: &[usize],
        z: Vec<f64>,
        trials: Option<Vec<f64>>,
    ) -> Result<Self> {
        let term = RandomTerm {
            group: group.to_vec(),
            z,
            correlated: false,
        };
        Glmm::with_terms(family, y, x, vec![term], trials)
    }

    /// A GLMM with any number of random-effect terms (crossed or nested grouping factors,
    /// correlated or independent effects); see [`Glmm::new`] for the rest.
    pub fn with_terms(
        family: Family,
        y: Vec<f64>,
        x: Vec<f64>,
        terms: Vec<RandomTerm>,
        trials: Option<Vec<f64>>,
    ) -> Result<Self> {
        let n = y.len();
        let checks::Checked { p, levels, trials } = checks::data(family, &y, &x, &terms, trials)?;
        // The points, and where each (term, level) sits in its point's latent.
        let set = connected_rows(&terms, &levels, n);
        let n_points = set.iter().max().map_or(0, |m| m + 1);
        let mut points = vec![
            Component {
                rows: Vec::new(),
                dim: 0
            };
            n_points
        ];
        for (i, &c) in set.iter().enumerate() {
            points[c].rows.push(i);
        }
        let n_terms = terms.len();
        let mut slot = vec![0; n * n_terms];
        for (t, term) in terms.iter().enumerate() {
            let q = term.z.len() / n;
            let mut at = vec![usize::MAX; levels[t]];
            for (i, &l) in term.group.iter().enumerate() {
                if at[l] == usize::MAX {
                    let c = &mut points[set[i]];
                    at[l] = c.dim;
                    c.dim += q;
                }
                slot[i * n_terms + t] = at[l];
            }
        }
        let latent_dim = points.iter().map(|c| c.dim).max().unwrap_or(0);
        let row_constant = points
            .iter()
            .map(|c| {
                c.rows
                    .iter()
                    .map(|&i| match family {
                        Family::Gaussian => -0.5 * LN_2PI,
                        Family::Poisson => -ln_factorial(y[i]),
                        Family::Binomial => {
                            ln_factorial(trials[i])
                                - ln_factorial(y[i])
                                - ln_factorial(trials[i] - y[i])
                        }
                    })
                    .sum::<f64>()
            })
            .collect();
        let mut theta_at = p;
        let terms = terms
            .into_iter()
            .map(|term| {
                let q = term.z.len() / n;
                let kept = Term {
                    z: term.z,
                    q,
                    correlated: term.correlated && q > 1,
                    theta_at,
                };
                theta_at += kept.n_params();
                kept
            })
            .collect();
        Ok(Glmm {
            family,
            y,
            x,
            p,
            terms,
            trials,
            points,
            slot,
            latent_dim,
            row_constant,
        })
    }

    /// The observations n.
    pub fn n_obs(&self) -> usize {
        self.y.len()
    }

    /// The fixed effects' count p.
    pub fn n_fixed(&self) -> usize {
        self.p
    }

    /// Per random-effect term, its effects' count q and whether they are correlated.
    pub fn terms(&self) -> Vec<(usize, bool)> {
        self.terms.iter().map(|t| (t.q, t.correlated)).collect()
    }

    /// The family.
    pub fn family(&self) -> Family {
        self.family
    }

    /// A starting θ: β from the mean response on the link scale (intercept where the first
    /// column of X is constant), every effect's sd 0.5 and no correlation, σ the response's sd.
    pub fn start(&self) -> Vec<f64> {
        let n = self.y.len() as f64;
        let mean = self.y.iter().sum::<f64>() / n;
        let mut th = vec![0.0; self.theta_len()];
        let intercept = (0..self.y.len()).all(|i| self.x[i * self.p] == 1.0);
        if intercept && self.p > 0 {
            th[0] = match self.family {
                Family::Gaussian => mean,
                Family::Poisson => mean.max(1e-3).ln(),
                Family::Binomial => {
                    let m = self.trials.iter().sum::<f64>() / n;
                    let r = (mean / m).clamp(1e-3, 1.0 - 1e-3);
                    (r / (1.0 - r)).ln()
                }
            };
        }
        for t in &self.terms {
            th[t.theta_at..t.theta_at + t.q].fill(0.5f64.ln());
        }
        if self.family == Family::Gaussian {
            let var = self.y.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / n;
            th[self.theta_len() - 1] = 0.5 * var.max(1e-12).ln();
        }
        th
    }

    fn theta_len(&self) -> usize {
        let random: usize = self.terms.iter().map(Term::n_params).sum();
        self.p + random + usize::from(self.family == Family::Gaussian)
    }

    /// 1/σ² (Gaussian) or 0, and log σ (or 0).
    fn scale(&self, theta: &[f64]) -> (f64, f64) {
        if self.family == Family::Gaussian {
            let log_sigma = theta[self.theta_len() - 1];
            ((-2.0 * log_sigma).exp(), log_sigma)
        } else {
            (0.0, 0.0)
        }
    }

    /// Calls `each(column, value)` for the non-zero entries of dη_i/du: Σ_a z_a L_ab at the
    /// b-th effect of the row's level of each term.
    fn row_design(&self, factors: &[Vec<f64>], i: usize, mut each: impl FnMut(usize, f64)) {
        let n_terms = self.terms.len();
        for (t, term) in self.terms.iter().enumerate() {
            let (q, l) = (term.q, &factors[t]);
            let zi = &term.z[i * q..(i + 1) * q];
            let at = self.slot[i * n_terms + t];
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

    /// x_iᵀβ for every row of point `c`.
    fn fixed_part(&self, beta: &[f64], i: usize) -> f64 {
        let xi = &self.x[i * self.p..(i + 1) * self.p];
        xi.iter().zip(beta).map(|(a, b)| a * b).sum::<f64>()
    }

    /// For point `c` at latent `u`: log p(y_c, u; θ) (with `prior_dim` coordinates of u in the
    /// prior), and through `each` every row's (i, dℓ/dη, −d²ℓ/dη²).
    fn point_terms(
        &self,
        theta: &[f64],
        factors: &[Vec<f64>],
        c: usize,
        u: &[f64],
        prior_dim: usize,
        mut each: impl FnMut(usize, f64, f64),
    ) -> f64 {
        let (inv_var, log_sigma) = self.scale(theta);
        let rows = &self.points[c].rows;
        let mut lp = self.row_constant[c]
            - 0.5 * prior_dim as f64 * LN_2PI
            - 0.5 * u[..prior_dim].iter().map(|v| v * v).sum::<f64>()
            - rows.len() as f64 * log_sigma;
        // The rows' linear predictors a chunk at a time, then the family's terms over the chunk
        // in vector lanes.
        let mut chunk = Rows::new();
        let scalar = self.scalar_effects();
        for block in rows.chunks(CHUNK) {
            chunk.len = block.len();
            for (j, &i) in block.iter().enumerate() {
                chunk.y[j] = self.y[i];
                chunk.m[j] = self.trials[i];
            }
            let eta = &mut chunk.eta[..block.len()];
            if scalar {
                self.etas_by_terms(&theta[..self.p], factors, block, u, eta);
            } else {
                self.etas_by_rows(&theta[..self.p], factors, block, u, eta);
            }
            lp += chunk.evaluate(self.family, inv_var);
            for (j, &i) in block.iter().enumerate() {
                each(i, chunk.d[j], chunk.w[j]);
            }
        }
        lp
    }

    /// The linear predictors x_iᵀβ + Σ_t z_it L_t u of `rows` into `eta`, row by row over every
    /// term's effects ([`Glmm::row_design`]).
    fn etas_by_rows(
        &self,
        beta: &[f64],
        factors: &[Vec<f64>],
        rows: &[usize],
        u: &[f64],
        eta: &mut [f64],
    ) {
        for (e, &i) in eta.iter_mut().zip(rows) {
            let mut v = self.fixed_part(beta, i);
            self.row_design(factors, i, |k, a| v += a * u[k]);
            *e = v;
        }
    }

    /// [`Glmm::etas_by_rows`] where every term is a scalar effect (intercepts, crossed or
    /// nested), term by term over the rows: each row's operations are the same in the same
    /// order, so the bits are the same, without `row_design`'s loops within a row.
    fn etas_by_terms(
        &self,
        beta: &[f64],
        factors: &[Vec<f64>],
        rows: &[usize],
        u: &[f64],
        eta: &mut [f64],
    ) {
        let n_terms = self.terms.len();
        for (e, &i) in eta.iter_mut().zip(rows) {
            *e = self.fixed_part(beta, i);
        }
        for (t, term) in self.terms.iter().enumerate() {
            let l = factors[t][0];
            for (e, &i) in eta.iter_mut().zip(rows) {
                *e += term.z[i] * l * u[self.slot[i * n_terms + t]];
            }
        }
    }

    /// Whether every term is a scalar effect (one column per factor), which the rows' passes
    /// take term by term.
    fn scalar_effects(&self) -> bool {
        self.terms.iter().all(|t| t.q == 1)
    }

    fn factors(&self, theta: &[f64]) -> Vec<Vec<f64>> {
        self.terms.iter().map(|t| t.factor(theta)).collect()
    }
}

impl LatentModel<f64> for Glmm {
    fn n_data(&self) -> usize {
        self.points.len()
    }
    fn latent_dim(&self) -> usize {
        self.latent_dim
    }
    fn theta_dim(&self) -> usize {
        self.theta_len()
    }
    fn log_joint(
        &self,
        theta: &[f64],
        data: &[usize],
        z: &[f64],
        logp: &mut [f64],
        grad_z: &mut [f64],
    ) -> std::result::Result<(), LogpError> {
        self.log_joint_with(theta, data, z, logp, grad_z, None)
    }
    /// ∇θ comes from the same pass over the rows as ∇z (the rows' derivatives in η serve
    /// both), with the same operations in the same order as [`LatentModel::add_grad_theta`]'s.
    fn fuses_grad_theta(&self) -> bool {
        true
    }
    fn log_joint_and_grad_theta(
        &self,
        theta: &[f64],
        data: &[usize],
        z: &[f64],
        logp: &mut [f64],
        grad_z: &mut [f64],
        grad_theta: &mut [f64],
    ) -> std::result::Result<(), LogpError> {
        self.log_joint_with(theta, data, z, logp, grad_z, Some(grad_theta))
    }
    fn add_grad_theta(
        &self,
        theta: &[f64],
        data: &[usize],
        z: &[f64],
        grad: &mut [f64],
    ) -> std::result::Result<(), LogpError> {
        let d = self.latent_dim;
        let factors = self.factors(theta);
        let mut g = vec![0.0; grad.len()];
        for (r, &c) in data.iter().enumerate() {
            g.iter_mut().for_each(|v| *v = 0.0);
            self.point_grad_theta(theta, &factors, c, &z[r * d..(r + 1) * d], d, &mut g);
            if g.iter().any(|v| !v.is_finite()) {
                return Err(LogpError::NonFinite);
            }
            grad.iter_mut().zip(&g).for_each(|(o, v)| *o += v);
        }
        Ok(())
    }
}

impl Glmm {
    /// [`LatentModel::log_joint`], and, with `grad_theta`, adds Σ_r ∇θ log p into it (each row's
    /// sum taken alone and then added, as [`LatentModel::add_grad_theta`] does).
    fn log_joint_with(
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
        // Scalar effects: each row's loadings z_it L_t straight from the terms, as
        // `row_design` gives them.
        let scalar = self.scalar_effects();
        let n_terms = self.terms.len();
        let (inv_var, _) = self.scale(theta);
        let mut gt = vec![0.0; if grad_theta.is_some() { theta.len() } else { 0 }];
        for (r, &c) in data.iter().enumerate() {
            let u = &z[r * d..(r + 1) * d];
            let g = &mut grad_z[r * d..(r + 1) * d];
            g.iter_mut().zip(u).for_each(|(g, u)| *g = -u);
            gt.iter_mut().for_each(|v| *v = 0.0);
            let fused = !gt.is_empty();
            let lp = self.point_terms(theta, &factors, c, u, d, |i, dl, _| {
                if scalar {
                    for (t, term) in self.terms.iter().enumerate() {
                        g[self.slot[i * n_terms + t]] += dl * (term.z[i] * factors[t][0]);
                    }
                } else {
                    self.row_design(&factors, i, |k, a| g[k] += dl * a);
                }
                if fused {
                    self.add_row_grad_theta(&factors, i, dl, u, inv_var, &mut gt);
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

    /// For point `c` at latent `u` (its first `prior_dim` coordinates in the prior): adds
    /// ∇θ log p(y_c, u; θ) to `g` and returns log p(y_c, u; θ).
    fn point_grad_theta(
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
        let (p, n_terms) = (self.p, self.terms.len());
        let last = g.len() - 1;
        let xi = &self.x[i * p..(i + 1) * p];
        g[..p].iter_mut().zip(xi).for_each(|(o, v)| *o += dl * v);
        for (t, term) in self.terms.iter().enumerate() {
            let (q, l) = (term.q, &factors[t]);
            let zi = &term.z[i * q..(i + 1) * q];
            let ut = &u[self.slot[i * n_terms + t]..][..q];
            let at = term.theta_at;
            for a in 0..q {
                // d/d log L_aa of z_a L_aa u_a.
                g[at + a] += dl * zi[a] * l[a * q + a] * ut[a];
            }
            if term.correlated {
                let mut k = at + q;
                for (a, za) in zi.iter().enumerate().skip(1) {
                    for ub in &ut[..a] {
                        g[k] += dl * za * ub;
                        k += 1;
                    }
                }
            }
        }
        if self.family == Family::Gaussian {
            // d/d log σ of −log σ − e²/(2σ²): −1 + e²/σ², with e = dl·σ².
            let e = dl / inv_var;
            g[last] += -1.0 + e * e * inv_var;
        }
    }
}

#[cfg(test)]
pub(in crate::glmm) mod tests {
    use super::*;
    use crate::metric::Factor;
    use crate::model::check_gradients;

    /// n responses of the family and a design with an intercept and a covariate.
    fn responses(family: Family, n: usize) -> (Vec<f64>, Vec<f64>) {
        let y = (0..n)
            .map(|i| match family {
                Family::Gaussian => (i as f64 * 0.7).sin() * 2.0,
                Family::Poisson => (i % 5) as f64,
                Family::Binomial => (i % 4) as f64,
            })
            .collect();
        let x = (0..n).flat_map(|i| [1.0, (i as f64 * 0.3).cos()]).collect();
        (y, x)
    }

    fn small(family: Family) -> Glmm {
        let n = 12;
        let (y, x) = responses(family, n);
        let z: Vec<f64> = (0..n).flat_map(|i| [1.0, i as f64 / n as f64]).collect();
        let group: Vec<usize> = (0..n).map(|i| i % 3).collect();
        let trials = (family == Family::Binomial).then(|| vec![4.0; n]);
        Glmm::new(family, y, x, &group, z, trials).unwrap()
    }

    /// Two terms over 24 rows: effects by `a` (4 levels; design `za`, correlated or not) and by
    /// `b` (design `zb`), crossed (b with 3 levels: one point) or nested (b's levels within a's:
    /// 4 points).
    fn two_factor(
        family: Family,
        nested: bool,
        za: Vec<f64>,
        correlated: bool,
        zb: Vec<f64>,
    ) -> Glmm {
        let n = 24;
        let (y, x) = responses(family, n);
        let a = RandomTerm {
            group: (0..n).map(|i| i % 4).collect(),
            z: za,
            correlated,
        };
        let b = RandomTerm {
            group: (0..n)
                .map(|i| {
                    if nested {
                        2 * (i % 4) + (i / 4) % 2
                    } else {
                        i % 3
                    }
                })
                .collect(),
            z: zb,
            correlated: false,
        };
        let trials = (family == Family::Binomial).then(|| vec![4.0; n]);
        Glmm::with_terms(family, y, x, vec![a, b], trials).unwrap()
    }

    /// Two terms: correlated slopes by `a` (4 levels) crossed with intercepts by `b` (3 levels)
    /// over 24 rows (one point), or nested (b's levels within a's: 4 points).
    pub(in crate::glmm) fn two_terms(family: Family, nested: bool) -> Glmm {
        let slopes = (0..24)
            .flat_map(|i| [1.0, (i as f64 * 0.5).sin()])
            .collect();
        two_factor(family, nested, slopes, true, vec![1.0; 24])
    }

    /// Scalar effects only: intercepts by `a` (4 levels) crossed with a scaled effect by `b` (3
    /// levels) over 24 rows (one point), or nested (4 points).
    fn scalar_terms(family: Family, nested: bool) -> Glmm {
        let scaled = (0..24).map(|i| 0.5 + (i as f64 * 0.7).cos()).collect();
        two_factor(family, nested, vec![1.0; 24], false, scaled)
    }

    /// Term by term over the rows gives the linear predictors row by row gives, bit for bit.
    #[test]
    fn scalar_effects_term_by_term_give_the_rows_bits() {
        for nested in [false, true] {
            let m = scalar_terms(Family::Poisson, nested);
            let theta: Vec<f64> = (0..m.theta_dim()).map(|k| 0.37 * k as f64 - 0.3).collect();
            let factors = m.factors(&theta);
            for c in &m.points {
                let u: Vec<f64> = (0..c.dim).map(|k| (k as f64 * 2.1).sin()).collect();
                let (mut by_rows, mut by_terms) =
                    (vec![0.0; c.rows.len()], vec![1.0; c.rows.len()]);
                m.etas_by_rows(&theta[..m.p], &factors, &c.rows, &u, &mut by_rows);
                m.etas_by_terms(&theta[..m.p], &factors, &c.rows, &u, &mut by_terms);
                let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                assert_eq!(bits(&by_rows), bits(&by_terms), "nested {nested}");
            }
        }
    }

    #[test]
    fn gradients_match_central_differences() {
        for family in [Family::Gaussian, Family::Poisson, Family::Binomial] {
            for m in [
                small(family),
                two_terms(family, false),
                two_terms(family, true),
                scalar_terms(family, false),
                scalar_terms(family, true),
            ] {
                let theta: Vec<f64> = (0..m.theta_dim()).map(|k| 0.1 * k as f64 - 0.2).collect();
                let z: Vec<f64> = (0..m.n_data() * m.latent_dim())
                    .map(|k| (k as f64 * 1.3).sin())
                    .collect();
                let check = check_gradients(&m, &theta, &z, 1e-6).unwrap();
                assert!(check.worst_error() < 1e-6, "{family:?}: {check:?}");
            }
        }
    }

    /// The fused pass gives `log_joint`'s log densities and ∇z and `add_grad_theta`'s ∇θ, bit for
    /// bit (the information's draws take their θ-gradients from it).
    #[test]
    fn the_fused_pass_gives_the_separate_passes_bits() {
        let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        for family in [Family::Gaussian, Family::Poisson, Family::Binomial] {
            for m in [
                small(family),
                two_terms(family, false),
                scalar_terms(family, true),
            ] {
                let theta: Vec<f64> = (0..m.theta_dim()).map(|k| 0.1 * k as f64 - 0.2).collect();
                let (n, d, p) = (m.n_data(), m.latent_dim(), m.theta_dim());
                let z: Vec<f64> = (0..n * d).map(|k| (k as f64 * 1.3).sin()).collect();
                let data: Vec<usize> = (0..n).collect();
                let (mut lp, mut gz, mut gt) = (vec![0.0; n], vec![0.0; n * d], vec![0.5; p]);
                m.log_joint(&theta, &data, &z, &mut lp, &mut gz).unwrap();
                m.add_grad_theta(&theta, &data, &z, &mut gt).unwrap();
                let (mut lf, mut gzf, mut gtf) = (vec![0.0; n], vec![0.0; n * d], vec![0.5; p]);
                m.log_joint_and_grad_theta(&theta, &data, &z, &mut lf, &mut gzf, &mut gtf)
                    .unwrap();
                assert!(m.fuses_grad_theta());
                assert_eq!(bits(&lp), bits(&lf), "{family:?}");
                assert_eq!(bits(&gz), bits(&gzf), "{family:?}");
                assert_eq!(bits(&gt), bits(&gtf), "{family:?}");
            }
        }
    }

    /// Maximum likelihood's stacked copies of its rows in one call of the model give each
    /// copy's own call's numbers.
    #[test]
    fn stacked_copies_of_the_rows_are_one_call_of_each() {
        use crate::model::{MaximumLikelihood, Problem};
        let m = small(Family::Binomial);
        let ml = MaximumLikelihood::new(&m, 2);
        let (rows, d, copies) = (ml.n_chains(), m.latent_dim(), 3);
        let theta: Vec<f64> = (0..m.theta_dim()).map(|k| 0.2 - 0.1 * k as f64).collect();
        let xi: Vec<f64> = (0..copies * rows * d)
            .map(|k| (k as f64 * 0.7).cos())
            .collect();
        let (mut lp, mut g) = (vec![0.0; copies * rows], vec![0.0; xi.len()]);
        ml.log_target_copies(&theta, 0, copies, &xi, &mut lp, &mut g)
            .unwrap();
        for c in 0..copies {
            let (mut l1, mut g1) = (vec![0.0; rows], vec![0.0; rows * d]);
            ml.log_target(
                &theta,
                0,
                &xi[c * rows * d..(c + 1) * rows * d],
                &mut l1,
                &mut g1,
            )
            .unwrap();
            assert_eq!(&lp[c * rows..(c + 1) * rows], &l1[..]);
            assert_eq!(&g[c * rows * d..(c + 1) * rows * d], &g1[..]);
        }
    }

    #[test]
    fn points_are_the_sets_of_rows_that_share_a_level() {
        // One factor: point j is group j. Crossed: one point with 4·2 + 3 effects. Nested: a
        // point per level of a, with its 2 effects and its 2 sub-levels of b.
        let m = small(Family::Poisson);
        assert_eq!((m.n_data(), m.latent_dim()), (3, 2));
        assert!(m.points[1].rows.iter().all(|i| i % 3 == 1));
        let crossed = two_terms(Family::Poisson, false);
        assert_eq!((crossed.n_data(), crossed.latent_dim()), (1, 11));
        let nested = two_terms(Family::Poisson, true);
        assert_eq!((nested.n_data(), nested.latent_dim()), (4, 4));
        assert_eq!(nested.theta_dim(), 2 + 3 + 1);
    }

    /// log N(y; Xβ, σ²I + A Aᵀ) from the n × n covariance itself.
    fn dense_gaussian(m: &Glmm, theta: &[f64]) -> f64 {
        let factors = m.factors(theta);
        let (_, log_sigma) = m.scale(theta);
        let n = m.y.len();
        // Every point's effects in columns of their own.
        let dim = m.latent_dim * m.n_data();
        let mut a = vec![0.0; n * dim];
        for (c, point) in m.points.iter().enumerate() {
            for &i in &point.rows {
                m.row_design(&factors, i, |k, v| a[i * dim + c * m.latent_dim + k] += v);
            }
        }
        let mut cov = vec![0.0; n * n];
        for i in 0..n {
            for j in 0..n {
                cov[i * n + j] = (0..dim)
                    .map(|k| a[i * dim + k] * a[j * dim + k])
                    .sum::<f64>()
                    + if i == j { (2.0 * log_sigma).exp() } else { 0.0 };
            }
        }
        let f = Factor::cholesky(&cov, n).unwrap();
        let mut r: Vec<f64> = (0..n)
            .map(|i| m.y[i] - m.fixed_part(&theta[..m.p], i))
            .collect();
        f.solve_lower(&mut r);
        -0.5 * n as f64 * LN_2PI - 0.5 * f.log_det() - 0.5 * r.iter().map(|v| v * v).sum::<f64>()
    }

    #[test]
    fn the_gaussian_closed_form_is_the_dense_normal_density() {
        let m = two_terms(Family::Gaussian, false);
        let theta: Vec<f64> = (0..m.theta_dim()).map(|k| 0.1 * k as f64 - 0.2).collect();
        let l = m.log_likelihood(&theta, 0).unwrap();
        assert_eq!(l.method, LikelihoodMethod::Exact);
        let want = dense_gaussian(&m, &theta);
        assert!((l.value - want).abs() < 1e-9, "{} vs {want}", l.value);
        // And with one effect per point, the closed form is the quadrature.
        let one = small(Family::Gaussian);
        let one_q = Glmm::new(
            Family::Gaussian,
            one.y.clone(),
            one.x.clone(),
            &(0..12).map(|i| i % 3).collect::<Vec<_>>(),
            vec![1.0; 12],
            None,
        )
        .unwrap();
        let th = [0.3, -0.2, -0.4, 0.1];
        let q = one_q.log_likelihood(&th, 0).unwrap();
        assert_eq!(q.method, LikelihoodMethod::Quadrature);
        let want = dense_gaussian(&one_q, &th);
        assert!((q.value - want).abs() < 1e-8, "{} vs {want}", q.value);
    }

    #[test]
    fn importance_sampling_agrees_with_the_exact_values_within_its_error() {
        // Against quadrature (Poisson, binomial: one effect per point) and the closed form
        // (Gaussian, crossed and nested): within 4 of the sampler's own standard errors, which
        // must be small (the proposal fits).
        let mut cases = Vec::new();
        for family in [Family::Poisson, Family::Binomial] {
            let m = small(family);
            let one = Glmm::new(
                family,
                m.y.clone(),
                m.x.clone(),
                &(0..12).map(|i| i % 3).collect::<Vec<_>>(),
                vec![1.0; 12],
                m.family.eq(&Family::Binomial).then(|| vec![4.0; 12]),
            )
            .unwrap();
            let th = [0.2, -0.3, -0.2];
            let exact = one.log_likelihood(&th, 0).unwrap().value;
            cases.push((one, th.to_vec(), exact));
        }
        for nested in [false, true] {
            let m = two_terms(Family::Gaussian, nested);
            let th: Vec<f64> = (0..m.theta_dim()).map(|k| 0.1 * k as f64 - 0.2).collect();
            let exact = m.log_likelihood(&th, 0).unwrap().value;
            cases.push((m, th, exact));
        }
        for (m, th, exact) in cases {
            let s = m.log_likelihood_sampled(&th, 4000, 7).unwrap();
            assert!(s.se > 0.0 && s.se < 0.02, "{s:?}");
            assert!((s.value - exact).abs() < 4.0 * s.se, "{s:?} vs {exact}");
            assert!(s.min_ess.unwrap() > 0.5, "{s:?}");
        }
    }
}
