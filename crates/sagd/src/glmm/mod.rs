//! Generalised linear mixed models, ready to fit: y_i | b ~ family(η_i) with
//! η_i = x_iᵀβ + Σ_t z_{t,i}ᵀ b_{t, g_t(i)}: one or several random-effect terms t (lme4's
//! `(Z_t | g_t)`), each with a vector b_{t,l} ~ N(0, Σ_t) per level l of its grouping factor —
//! Σ_t diagonal (independent effects, `(Z || g)`) or full (correlated) — for the Gaussian,
//! Poisson and binomial (Bernoulli) families; η_i may carry a known offset o_i too
//! ([`Glmm::with_offset`], lme4's `offset(…)`).
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

mod bootstrap;
mod checks;
mod exact;
mod family;
mod fit;
#[doc(hidden)]
pub mod formula;
mod laplace;
mod likelihood;
mod modes;
#[doc(hidden)]
pub mod refits;
mod rows;
mod summary;
mod terms;

pub use exact::{Criterion, ExactFit, ExactSettings, MAX_QUADRATURE_DIM};
pub use family::Family;
pub use fit::{
    FitSettings, Fitted, GlmmFit, Method, LAPLACE_START_MSTEPS, SINGULAR_NOTE, SINGULAR_SD,
};
pub use formula::{Column, Design, Formula, Frame, TermNames};
pub use laplace::LaplaceFit;
pub use likelihood::{LikelihoodMethod, MarginalLikelihood};
pub use modes::{FittedValues, SampledMeans};
pub use summary::{Estimate, Summary, TermSummary};

use family::ln_factorial;
pub use terms::RandomTerm;
use terms::{Component, Layout, Term};

use crate::error::{invalid, LogpError, Result};
use crate::model::LatentModel;

const LN_2PI: f64 = 1.837_877_066_409_345_5;

/// A GLMM's data, checked. Its rows are stored point by point (each point's rows side by
/// side, in the order given), so that a point's passes read them as slices.
#[derive(Clone, Debug)]
pub struct Glmm {
    family: Family,
    y: Vec<f64>,
    /// Fixed-effects design, row-major n × p.
    x: Vec<f64>,
    p: usize,
    terms: Vec<Term>,
    /// Trials per row (binomial), or prior weights (Gaussian: row i's variance σ²/wᵢ; 1 unless
    /// [`Glmm::with_weights`] gave them).
    trials: Vec<f64>,
    points: Vec<Component>,
    latent_dim: usize,
    /// Per point, Σ over its rows of the log density's constant part (log y!, binomial
    /// coefficients, 2π).
    row_constant: Vec<f64>,
    /// [`Glmm::start`], from the rows in the order given.
    start: Vec<f64>,
    /// Whether every term is a scalar effect (one column per factor), which the rows' passes
    /// take term by term.
    scalar_effects: bool,
    /// Each entry of θ's unit at the start ([`LatentModel::theta_scale`]).
    theta_scale: Vec<f64>,
    /// Each row's offset in η (lme4's `offset(…)`), in the rows' order; empty for none (the
    /// Gaussian family's is taken from y instead, which gives the same likelihood).
    offset: Vec<f64>,
    /// The Gaussian family's offset, in the order the rows were given (empty for none): added
    /// back to its fitted values.
    response_shift: Vec<f64>,
    /// The row of the data as given that each stored row holds; empty where they are the same.
    order: Vec<usize>,
    /// Whether [`Glmm::with_weights`] gave the Gaussian's rows prior weights (the closed form
    /// then scales its rows; without, it skips a root and a logarithm per row).
    weighted: bool,
    /// The Gaussian closed form's sums that do not depend on θ, made at their first use
    /// (`Glmm::gaussian_cross`); a clone starts without them.
    gaussian_cross: exact::ThetaFree,
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
        Glmm::build(family, y, x, terms, trials, None)
    }

    /// [`Glmm::with_terms`] with a known part of each row's linear predictor, lme4's
    /// `offset(…)`: η_i = o_i + x_iᵀβ + Σ_t z_{t,i}ᵀ b_{t, g_t(i)}, such as the log of an
    /// exposure under a Poisson rate. `offset` has one finite value per row of `y`.
    pub fn with_offset(
        family: Family,
        y: Vec<f64>,
        x: Vec<f64>,
        terms: Vec<RandomTerm>,
        trials: Option<Vec<f64>>,
        offset: Vec<f64>,
    ) -> Result<Self> {
        Glmm::build(family, y, x, terms, trials, Some(offset))
    }

    /// The same Gaussian model with prior weights `w`, one per row in the order the rows were
    /// given (lme4's `lmer(..., weights = w)`): row i's residual variance is σ²/wᵢ, as for the
    /// mean of wᵢ measurements. Refused by name for other families (a binomial's weights are its
    /// trials, which [`Glmm::weighted_proportions`] reads from lme4's proportions and weights; a
    /// Poisson's exposure is an offset) and unless each weight is positive and finite.
    pub fn with_weights(&self, w: &[f64]) -> Result<Glmm> {
        let n = self.n_obs();
        if self.family != Family::Gaussian {
            return Err(invalid(
                "weights",
                format!("for the {:?} family", self.family),
                "prior weights are the Gaussian family's: a binomial's weights are its trials \
                 (build the model from proportions and weights by Glmm::weighted_proportions, \
                 or from cbind(successes, failures)), a Poisson's exposure is an offset",
            ));
        }
        if w.len() != n {
            return Err(invalid(
                "weights",
                format!("{} values", w.len()),
                &format!("give one weight per row of the model ({n})"),
            ));
        }
        if let Some(i) = w.iter().position(|v| !(v.is_finite() && *v > 0.0)) {
            return Err(invalid(
                "weights",
                format!("{} at row {i}", w[i]),
                "give each row a positive, finite weight (its variance is σ²/weight)",
            ));
        }
        let mut m = self.clone();
        m.weighted = true;
        for (k, t) in m.trials.iter_mut().enumerate() {
            *t = w[self.given_row(k)];
        }
        m.row_constant = m.row_constants();
        Ok(m)
    }

    /// Per point, Σ over its stored rows of [`row_constant`] of their responses and trials:
    /// what a model made from another's with a new response or new weights carries.
    fn row_constants(&self) -> Vec<f64> {
        (self.points.iter())
            .map(|p| {
                (p.rows.clone())
                    .map(|k| row_constant(self.family, self.y[k], self.trials[k]))
                    .sum()
            })
            .collect()
    }

    fn build(
        family: Family,
        y: Vec<f64>,
        x: Vec<f64>,
        terms: Vec<RandomTerm>,
        trials: Option<Vec<f64>>,
        offset: Option<Vec<f64>>,
    ) -> Result<Self> {
        let n = y.len();
        let checks::Checked { p, levels, trials } = checks::data(family, &y, &x, &terms, trials)?;
        // The Gaussian reads its trials as prior weights: 1 here, whatever was given (trials
        // are the binomial's), until `with_weights` gives them.
        let trials = match family {
            Family::Gaussian => vec![1.0; n],
            _ => trials,
        };
        let offset = checks::offset(offset, n)?;
        // A Gaussian's offset moves its response: y − o given η has y's density given η + o.
        let (y, offset, response_shift) = match family {
            Family::Gaussian if !offset.is_empty() => (
                y.iter().zip(&offset).map(|(y, o)| y - o).collect(),
                Vec::new(),
                offset,
            ),
            _ => (y, offset, Vec::new()),
        };
        let layout = Layout::of(&terms, &levels, n);
        let row_constant = layout
            .point_rows
            .iter()
            .map(|rows| {
                rows.iter()
                    .map(|&i| row_constant(family, y[i], trials[i]))
                    .sum()
            })
            .collect();
        let order: Vec<usize> = layout.point_rows.concat();
        let (points, latent_dim) = layout.points();
        let mut terms = layout.into_terms(terms, p, n);
        let start = start_theta(family, (&y, &x, p, &trials), &offset, &terms);
        let scalar_effects = terms.iter().all(|t| t.q == 1);
        // Each point's rows side by side, in their order, so that a point's passes read them as
        // slices; a point sees its rows in the same order either way, so its terms have the
        // same bits (with the rows already in the points' order nothing moves).
        let (mut y, mut x, mut trials, mut offset) = (y, x, trials, offset);
        let reordered = order.iter().enumerate().any(|(k, &i)| k != i);
        if reordered {
            y = in_order(&y, 1, &order);
            x = in_order(&x, p, &order);
            trials = in_order(&trials, 1, &order);
            if !offset.is_empty() {
                offset = in_order(&offset, 1, &order);
            }
            for term in &mut terms {
                term.z = in_order(&term.z, term.q, &order);
                term.slot = in_order(&term.slot, 1, &order);
            }
        }
        let mut m = Glmm {
            family,
            y,
            x,
            p,
            terms,
            trials,
            points,
            latent_dim,
            row_constant,
            start,
            scalar_effects,
            theta_scale: Vec::new(),
            offset,
            response_shift,
            order: if reordered { order } else { Vec::new() },
            weighted: false,
            gaussian_cross: exact::ThetaFree::default(),
        };
        // The Gaussian's polish keeps steps of 1e-5 (1 + |θ_j|): its exact control variate
        // leaves the information's error at 1e-10, where the one-sided differences' bias
        // would show at other steps (its fits are exact unless EM is asked for).
        if family != Family::Gaussian {
            m.theta_scale = m.theta_units(&m.start).iter().map(|u| u.0).collect();
        }
        Ok(m)
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
    /// column of X is constant), every effect's sd 0.5 on η's scale (Gaussian: half the
    /// response's sd) over its column's root mean square, no correlation, σ the response's sd.
    pub fn start(&self) -> Vec<f64> {
        self.start.clone()
    }

    fn theta_len(&self) -> usize {
        theta_len(self.family, self.p, &self.terms)
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

    /// Whether every term is a scalar effect (one column per factor).
    fn scalar_effects(&self) -> bool {
        self.scalar_effects
    }

    /// The row of the data as given that stored row `k` holds.
    fn given_row(&self, k: usize) -> usize {
        self.order.get(k).copied().unwrap_or(k)
    }

    /// The Gaussian family's offset of row `i` as given, which its stored response is less
    /// (0 for other families and without an offset).
    fn response_shift_at(&self, i: usize) -> f64 {
        self.response_shift.get(i).copied().unwrap_or(0.0)
    }

    fn factors(&self, theta: &[f64]) -> Vec<Vec<f64>> {
        self.terms.iter().map(|t| t.factor(theta)).collect()
    }

    /// Per term, each effect's column's root mean square: what an sd of that effect is
    /// multiplied by on η's scale.
    fn effect_rms(&self) -> Vec<Vec<f64>> {
        let rms = |t: &Term| (0..t.q).map(|a| column_rms(&t.z, t.q, a)).collect();
        self.terms.iter().map(rms).collect()
    }
}

/// θ's length: β, each term's parameters, log σ (Gaussian).
fn theta_len(family: Family, p: usize, terms: &[Term]) -> usize {
    let random: usize = terms.iter().map(Term::n_params).sum();
    p + random + usize::from(family == Family::Gaussian)
}

/// [`Glmm::start`] from the responses, the fixed effects' design (p columns), the trials and
/// the offset (empty for none).
fn start_theta(
    family: Family,
    (y, x, p, trials): (&[f64], &[f64], usize, &[f64]),
    offset: &[f64],
    terms: &[Term],
) -> Vec<f64> {
    let n = y.len() as f64;
    let mean = y.iter().sum::<f64>() / n;
    let len = theta_len(family, p, terms);
    let mut th = vec![0.0; len];
    // With no fixed effects (`y ~ 0 + (1 | g)`) there is no first column to read.
    let intercept = p > 0 && (0..y.len()).all(|i| x[i * p] == 1.0);
    if intercept {
        th[0] = match family {
            Family::Gaussian => mean,
            // With an offset, the rate per unit of e^o: Σy / Σe^o.
            Family::Poisson if !offset.is_empty() => {
                // log of the mean e^o, from its largest term so that no e^o overflows.
                let top = offset.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                let rest = offset.iter().map(|o| (o - top).exp()).sum::<f64>() / n;
                mean.max(1e-3).ln() - top - rest.ln()
            }
            Family::Poisson => mean.max(1e-3).ln(),
            Family::Binomial => {
                let m = trials.iter().sum::<f64>() / n;
                let r = (mean / m).clamp(1e-3, 1.0 - 1e-3);
                let shift = offset.iter().sum::<f64>() / n;
                (r / (1.0 - r)).ln() - shift
            }
        };
    }
    // A Gaussian's effects on the response's scale (half its sd), so that the fit starts where it
    // would on the data in other units; the other families' on η's.
    let mut log_unit = 0.0;
    if family == Family::Gaussian {
        let var = y.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / n;
        log_unit = 0.5 * var.max(f64::MIN_POSITIVE).ln();
        th[len - 1] = log_unit;
    }
    // A slope's effect on the scale of its column: its sd over the column's root mean square.
    for t in terms {
        for a in 0..t.q {
            th[t.theta_at + a] = 0.5f64.ln() + log_unit - column_rms(&t.z, t.q, a).ln();
        }
    }
    th
}

/// The root mean square of column `col` of `m` (rows of `width`), or 1 where it is 0.
pub(super) fn column_rms(m: &[f64], width: usize, col: usize) -> f64 {
    let rows = m.len() / width.max(1);
    let sq: f64 = m
        .iter()
        .skip(col)
        .step_by(width.max(1))
        .map(|v| v * v)
        .sum();
    let rms = (sq / rows.max(1) as f64).sqrt();
    if rms > 0.0 && rms.is_finite() {
        rms
    } else {
        1.0
    }
}

/// The constant of one row's log-likelihood (its terms free of θ), as the family's density has it.
fn row_constant(family: Family, y: f64, trials: f64) -> f64 {
    match family {
        // A weight w makes the row's sd σ/√w: its density gains ½ ln w (0 at w = 1).
        Family::Gaussian => -0.5 * LN_2PI + 0.5 * trials.ln(),
        Family::Poisson => -ln_factorial(y),
        Family::Binomial => ln_factorial(trials) - ln_factorial(y) - ln_factorial(trials - y),
    }
}

/// The rows of `v` (`width` values each) in the order `order`.
fn in_order<T: Copy>(v: &[T], width: usize, order: &[usize]) -> Vec<T> {
    order
        .iter()
        .flat_map(|&i| &v[i * width..(i + 1) * width])
        .copied()
        .collect()
}

impl LatentModel<f64> for Glmm {
    fn n_data(&self) -> usize {
        self.points.len()
    }
    /// θ_j's unit (`units_with`): β_j over x_j's root mean square, a factor's off-diagonal
    /// entries of row a over z_a's, on η's scale (Gaussian: the response's sd); 1 for the logs.
    fn theta_scale(&self, j: usize) -> f64 {
        self.theta_scale.get(j).copied().unwrap_or(1.0)
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
    /// In closed form, one pass over the point's rows: I + Σ_r w_r a_r a_rᵀ, a_r = dη_r/du and
    /// w_r = −d²ℓ_r/dη².
    fn neg_hessian_z(
        &self,
        theta: &[f64],
        i: usize,
        z: &[f64],
    ) -> Option<std::result::Result<Vec<f64>, LogpError>> {
        if i >= self.points.len() || z.len() != self.latent_dim {
            return None;
        }
        let (factors, d) = (self.factors(theta), self.latent_dim);
        let design = self.point_design(&factors, i);
        let (mut grad, mut hess) = (vec![0.0; d], vec![0.0; d * d]);
        let lp = self.point_curvature(theta, &factors, i, z, &design, &mut grad, &mut hess);
        Some(if lp.is_finite() && hess.iter().all(|v| v.is_finite()) {
            Ok(hess)
        } else {
            Err(LogpError::NonFinite)
        })
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

#[cfg(test)]
pub(in crate::glmm) mod tests;
