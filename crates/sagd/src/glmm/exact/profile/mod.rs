//! Profile-likelihood confidence intervals of an exact fit (lme4's `confint(fit)`, whose default
//! method is the profile): each parameter's interval is where the likelihood maximised over the
//! others stays within χ²₁(level)/2 of its maximum, on the exact likelihood the fit maximised.

use statrs::distribution::{ContinuousCDF, Normal};

use super::quadrature::ProductRule;
use super::{central_gradient, from_units, to_units, Criterion, ExactFit, GTOL, NEAR_BOUNDARY};
use crate::error::{invalid, Result};
use crate::glmm::{Family, Glmm, LikelihoodMethod};
use crate::optim::bfgs;
use coords::Coords;

mod coords;

/// How far out (in units of θ_j's Wald standard error, or of θ_j itself where it has none) a
/// profile is followed before its end is taken to be unbounded.
const FARTHEST: f64 = 60.0;

/// The most profile points on one side of an estimate.
const MAX_POINTS: usize = 60;

/// Where a variance factor the profile's maximisation leaves near 0 is tried again from: this
/// share of its scale.
const TRIED_FROM: f64 = 0.3;

/// ℓ and its gradient at θ in its units, φ.
type LogLik<'a> = Box<dyn FnMut(&[f64]) -> Result<(f64, Vec<f64>)> + 'a>;

impl Glmm {
    /// Profile-likelihood confidence intervals at `level` (e.g. 0.95), one per place of θ: for
    /// every β_j and log σ (Gaussian) their own; in the place of each term's log L_aa, the log
    /// of effect a's sd; in the place of a correlated term's L_a0, the correlation of effect a
    /// with the term's first effect (on its own scale, −1 to 1); `None` in the places L_ab,
    /// b ≥ 1, of terms of 3 or more correlated effects (those correlations are not one
    /// coordinate of the parametrisation profiled), and in all but the first sd's of a
    /// correlated term whose correlations lie at ±1. Each interval is where the profile
    /// ℓ_p = max over the rest of ℓ falls χ²₁(level)/2 below ℓ(θ̂), the rest being θ's other
    /// entries, with each correlated term's taken as its effects' log sds and the Fisher
    /// transforms of its canonical partial correlations. e^v gives an sd's or σ's ends. A log sd
    /// whose profile never falls that far towards 0 has −∞ as its lower end (the sd's interval
    /// reaches 0), a correlation whose profile never falls that far has ±1, and an end not
    /// reached within 60 standard errors is ±∞. lme4's `confint(fit)` profiles the same
    /// quantities, glmer's on Laplace's approximation and with a spline between its profile's
    /// points; this is the exact likelihood of `fit` (quadrature with its nodes, or the
    /// Gaussian closed form). `fit` must be this model's maximum-likelihood fit
    /// ([`Glmm::fit_exact`]).
    pub fn profile_intervals(&self, fit: &ExactFit, level: f64) -> Result<Vec<Option<[f64; 2]>>> {
        if !(level > 0.0 && level < 1.0) {
            return Err(invalid(
                "level",
                level.to_string(),
                "give the intervals' coverage between 0 and 1, e.g. 0.95",
            ));
        }
        if fit.criterion == Criterion::Reml {
            return Err(invalid(
                "criterion",
                "reml".into(),
                "profile intervals are of the likelihood: refit by maximum likelihood",
            ));
        }
        self.check_theta(&fit.theta)?;
        let z = Normal::new(0.0, 1.0)
            .expect("the standard normal")
            .inverse_cdf(0.5 + 0.5 * level);
        let theta_units = self.theta_units(&fit.theta);
        // Each correlated term's sds and correlations with its first effect as coordinates.
        let coords = Coords::new(self, &fit.theta, &theta_units);
        let units = &coords.units;
        let psi_hat = to_units(&coords.psi(&fit.theta), units);
        let se = coords.psi_se(&fit.theta, (&fit.se, &fit.covariance));
        let mut loglik: LogLik<'_> =
            Box::new(coords.loglik(self.loglik_in_units(fit, theta_units.clone())));
        let top = loglik(&psi_hat)?.0;
        let mut out = vec![None; fit.theta.len()];
        for j in self.profiled_entries(&coords) {
            let se = se[j] / units[j].0;
            let step = if se.is_finite() && se > 0.0 { se } else { 1.0 };
            let profile = Profile {
                model: self,
                coords: &coords,
                at: j,
                top,
                psi_hat: &psi_hat,
            };
            // Back to ψ (±∞ stays), a correlation on its own scale.
            let mut end = |side: f64| {
                let v = from_units(&[profile.end(&mut loglik, side * z, step)], &units[j..=j])[0];
                if coords.is_correlation(j) {
                    v.tanh()
                } else {
                    v
                }
            };
            out[j] = Some([end(-1.0), end(1.0)]);
        }
        Ok(out)
    }

    /// The entries of θ whose places are profiled (see [`Glmm::profile_intervals`]): every
    /// β_j, log σ, each effect's log sd, and each correlation with a term's first effect; of a
    /// correlated term at the boundary (a correlation of ±1), its first sd alone.
    fn profiled_entries(&self, coords: &Coords) -> Vec<usize> {
        let mut entries: Vec<usize> = (0..self.p).collect();
        for t in &self.terms {
            let block = t.theta_at..t.theta_at + t.n_params();
            if t.correlated && !coords.is_reparametrised(t.theta_at) {
                entries.push(t.theta_at);
            } else {
                entries.extend(block.filter(|&j| coords.profiled(j)));
            }
        }
        if self.family == Family::Gaussian {
            entries.push(self.theta_len() - 1);
        }
        entries
    }

    /// ℓ and ∇ℓ in θ's `units` by the method `fit` was made with: quadrature with its nodes (the
    /// gradient by Fisher's identity), or the Gaussian closed form (its gradient by central
    /// differences).
    fn loglik_in_units<'a>(&'a self, fit: &ExactFit, units: Vec<(f64, f64)>) -> LogLik<'a> {
        match fit.method {
            LikelihoodMethod::Quadrature => {
                let rule = ProductRule::new(self.latent_dim, fit.nodes);
                let mut modes: Vec<Vec<f64>> =
                    self.points.iter().map(|c| vec![0.0; c.dim]).collect();
                Box::new(move |phi: &[f64]| {
                    let theta = from_units(phi, &units);
                    let (v, g) = self.quadrature_value_grad(&theta, &rule, &mut modes)?;
                    Ok((v, g.iter().zip(&units).map(|(g, u)| g * u.0).collect()))
                })
            }
            _ => Box::new(move |phi: &[f64]| {
                let ml = |phi: &[f64]| self.gaussian_log_likelihood(&from_units(phi, &units));
                Ok((ml(phi)?, central_gradient(ml, phi)?))
            }),
        }
    }
}

/// One entry's profile: the model and its coordinates (ψ, [`Coords`]), the entry's place, ℓ
/// at the estimate and the estimate in ψ's units.
struct Profile<'m> {
    model: &'m Glmm,
    coords: &'m Coords,
    at: usize,
    top: f64,
    psi_hat: &'m [f64],
}

impl Profile<'_> {
    /// The profile ℓ at φ_j = `value`: the others maximised from `rest` (left at their
    /// maximum), and again with each variance factor left near 0 started from
    /// [`TRIED_FROM`] of its scale, the higher maximum kept. (In log L_aa the pull of a
    /// variance away from 0 fades as L_aa², so a maximisation started at a boundary, as a
    /// singular fit's, stays there where moving θ_j has taken the maximum away from it.)
    fn at(&self, loglik: &mut LogLik<'_>, value: f64, rest: &mut Vec<f64>) -> Result<f64> {
        let (mut best, mut x) = (self.maximised(loglik, value, rest)?, rest.clone());
        let mut psi = x.clone();
        psi.insert(self.at, value);
        let theta = self.coords.theta(&from_units(&psi, &self.coords.units));
        for (k, ratio) in self.model.factor_ratios(&theta) {
            if k == self.at || ratio >= NEAR_BOUNDARY {
                continue;
            }
            let mut start = x.clone();
            start[k - usize::from(k > self.at)] += (TRIED_FROM / ratio).ln();
            // A start from which ℓ cannot be followed is no better.
            match self.maximised(loglik, value, &mut start) {
                Ok(v) if v > best => (best, x) = (v, start),
                _ => {}
            }
        }
        *rest = x;
        Ok(best)
    }

    /// The profile ℓ at φ_j = `value` as BFGS finds it from `rest` (left at its maximum).
    fn maximised(&self, loglik: &mut LogLik<'_>, value: f64, rest: &mut Vec<f64>) -> Result<f64> {
        let j = self.at;
        let full = |x: &[f64]| {
            let mut phi = x.to_vec();
            phi.insert(j, value);
            phi
        };
        if rest.is_empty() {
            return Ok(loglik(&full(rest))?.0);
        }
        let scale = self.top.abs().max(1.0);
        let objective = |x: &[f64]| -> Result<(f64, Vec<f64>)> {
            let (v, mut g) = loglik(&full(x))?;
            g.remove(j);
            Ok((-v / scale, g.iter().map(|g| -g / scale).collect()))
        };
        let r = bfgs::minimize_where_defined(objective, rest, GTOL, 500)?;
        *rest = r.x;
        Ok(-r.f * scale)
    }

    /// The signed root of the profile's deviance at φ_j = `value`: sign(value − φ̂_j) √(2 (ℓ(θ̂)
    /// − ℓ_p)), the others maximised from `rest`; infinite where ℓ cannot be computed there
    /// (rates that overflow, a mode not found): the profile has fallen off.
    fn signed_root(&self, loglik: &mut LogLik<'_>, value: f64, rest: &mut Vec<f64>) -> f64 {
        let mut tried = rest.clone();
        let drop = match self.at(loglik, value, &mut tried) {
            Ok(v) => {
                *rest = tried;
                (self.top - v).max(0.0)
            }
            Err(_) => f64::INFINITY,
        };
        (2.0 * drop).sqrt().copysign(value - self.psi_hat[self.at])
    }

    /// Where the signed root reaches `target` (±z) on its side, from φ̂_j in steps of about
    /// `step` (the Wald standard error in units), by the secant rule once the end is
    /// bracketed; ±∞ where it does not within [`FARTHEST`] steps.
    fn end(&self, loglik: &mut LogLik<'_>, target: f64, step: f64) -> f64 {
        let j = self.at;
        let centre = self.psi_hat[j];
        let mut rest = self.psi_hat.to_vec();
        rest.remove(j);
        // (φ_j, signed root − target) at the estimate and at the Wald end.
        let mut lo = (centre, -target);
        let t = centre + target * step;
        let mut hi = (t, self.signed_root(loglik, t, &mut rest) - target);
        let mut points = 1;
        // Outwards until the end is bracketed, each step at most twice the last.
        while hi.1 * target < 0.0 {
            let slope = (hi.1 - lo.1) / (hi.0 - lo.0);
            let reach = (hi.0 - lo.0).abs() * 2.0;
            // g rises with φ_j on either side; where the two points do not show it, step out.
            let secant = if slope > 0.0 {
                -hi.1 / slope
            } else {
                reach * target.signum()
            };
            let next = hi.0 + secant.clamp(-reach, reach);
            if (next - centre).abs() > FARTHEST * step || points >= MAX_POINTS {
                return f64::INFINITY.copysign(target);
            }
            lo = hi;
            hi = (next, self.signed_root(loglik, next, &mut rest) - target);
            points += 1;
        }
        // Between lo (short of the end) and hi (past it): regula falsi, Illinois' variant.
        let mut kept = 0i8;
        while points < MAX_POINTS && (hi.0 - lo.0).abs() > 1e-9 * step {
            // Halfway where the far end fell off the computable range.
            let t = if hi.1.is_finite() {
                hi.0 - hi.1 * (hi.0 - lo.0) / (hi.1 - lo.1)
            } else {
                0.5 * (lo.0 + hi.0)
            };
            let g = self.signed_root(loglik, t, &mut rest) - target;
            points += 1;
            if g.abs() < 1e-7 {
                return t;
            }
            if g * target < 0.0 {
                lo = (t, g);
                if kept == -1 {
                    hi.1 *= 0.5;
                }
                kept = -1;
            } else {
                hi = (t, g);
                if kept == 1 {
                    lo.1 *= 0.5;
                }
                kept = 1;
            }
        }
        match hi.1.is_finite() {
            true => hi.0 - hi.1 * (hi.0 - lo.0) / (hi.1 - lo.1),
            false => lo.0,
        }
    }
}
