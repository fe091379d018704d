//! Laplace's approximation to a GLMM's likelihood, and its maximum: glmer's estimate with one
//! node (`nAGQ = 1`). Not an answer sagd reports as the MLE, but a start that leaves the exact
//! fit only the distance between the two, which is small wherever Laplace is nearly right.

use rayon::prelude::*;

use super::exact::{central_gradient, from_units};
use super::{Glmm, LN_2PI};
use crate::error::Result;

/// The smallest log of a random-effect scale a Laplace start may give: Laplace's maximum is
/// often on the boundary (a scale of 0) where the exact one is not, and a chain's posterior at
/// a scale of e⁻¹⁰ has nothing for the polish's score to measure.
const LOG_SCALE_FLOOR: f64 = -3.0;

/// BFGS iterations of the Laplace fit at most; it is a start, so it stops short of a long
/// crawl along a flat ridge.
const MAX_ITER: usize = 200;

/// Laplace's maximum: its estimate and the approximate log-likelihood there.
#[derive(Clone, Debug, PartialEq)]
pub struct LaplaceFit {
    /// θ maximising Laplace's approximation (on [`Glmm`]'s internal scale).
    pub theta: Vec<f64>,
    /// The approximation's value there (glmer's `logLik` with `nAGQ = 1`).
    pub log_likelihood: f64,
}

impl Glmm {
    /// Laplace's approximation to ℓ(θ): Σ over points of log p(y_c, û_c) + (d_c/2) log 2π −
    /// ½ log det H_c at each point's posterior mode û_c with H_c the curvature there, each
    /// mode's Newton search started at `modes` (updated).
    fn laplace_value(&self, theta: &[f64], modes: &mut [Vec<f64>]) -> Result<f64> {
        let factors = self.factors(theta);
        let parts = modes
            .par_iter_mut()
            .enumerate()
            .map(|(c, mode)| {
                let lap = self.laplace_warm(theta, &factors, c, mode)?;
                let d = self.points[c].dim;
                let lp = self.point_terms(theta, &factors, c, &lap.mode, d, |_, _, _| {});
                Ok(lp + 0.5 * d as f64 * LN_2PI - 0.5 * lap.curvature.log_det())
            })
            .collect::<Result<Vec<f64>>>()?;
        Ok(parts.iter().sum())
    }

    /// Maximises Laplace's approximation to the likelihood by BFGS (its gradient by central
    /// differences, every mode warm-started) from [`Glmm::start`]: lme4's `glmer` estimate with
    /// `nAGQ = 1`, to compare with or to start an exact fit from.
    pub fn fit_laplace(&self) -> Result<LaplaceFit> {
        let mut modes: Vec<Vec<f64>> = self.points.iter().map(|c| vec![0.0; c.dim]).collect();
        let n = self.y.len() as f64;
        let start = self.start();
        // A trial step far out (large counts make the first, steepest-descent step long), where
        // the rates overflow and a mode cannot be found, is stepped back from.
        let units = self.units_with(1.0);
        let at = |phi: &[f64], modes: &mut Vec<Vec<f64>>| {
            self.laplace_value(&from_units(phi, &units), modes)
        };
        let r = self.minimize_in_units(
            &mut |phi: &[f64]| {
                let v = at(phi, &mut modes)?;
                let g = central_gradient(|x| at(x, &mut modes.clone()), phi)?;
                Ok((-v / n, g.iter().map(|g| -g / n).collect()))
            },
            (&start, &units),
            None,
            (1e-7, MAX_ITER),
        )?;
        let log_likelihood = self.laplace_value(&r.x, &mut modes)?;
        Ok(LaplaceFit {
            theta: r.x,
            log_likelihood,
        })
    }

    /// Where EM and the polish start: Laplace's maximum with each random-effect scale at least
    /// e⁻³, or [`Glmm::start`] when Laplace's fit fails.
    pub fn laplace_start(&self) -> Vec<f64> {
        self.laplace_maximum_start()
            .unwrap_or_else(|_| self.start())
    }

    /// Laplace's maximum with each random-effect scale at least e⁻³, or why Laplace's fit
    /// failed.
    pub(super) fn laplace_maximum_start(&self) -> Result<Vec<f64>> {
        let mut theta = self.fit_laplace()?.theta;
        for t in &self.terms {
            theta[t.theta_at..t.theta_at + t.q]
                .iter_mut()
                .for_each(|v| *v = v.max(LOG_SCALE_FLOOR));
        }
        Ok(theta)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::glmm::{ExactSettings, Family, RandomTerm};
    use crate::rng::NormalStream;

    /// Crossed factors a (`levels.0` levels, sd `sds.0`) and b (`levels.1`, sd `sds.1`), one row
    /// per pair, y from η = 0.3 + 0.5 x + a_g + b_h by `respond` (which draws its noise from the
    /// same stream).
    fn crossed_design(
        family: Family,
        seed: u64,
        levels: (usize, usize),
        sds: (f64, f64),
        respond: impl Fn(f64, &mut NormalStream) -> f64,
    ) -> Glmm {
        let mut s = NormalStream::new(seed);
        let a: Vec<f64> = (0..levels.0).map(|_| sds.0 * s.draw()).collect();
        let b: Vec<f64> = (0..levels.1).map(|_| sds.1 * s.draw()).collect();
        let (mut y, mut x, mut g, mut h) = (vec![], vec![], vec![], vec![]);
        for (i, ai) in a.iter().enumerate() {
            for (j, bj) in b.iter().enumerate() {
                let xi = s.draw();
                y.push(respond(0.3 + 0.5 * xi + ai + bj, &mut s));
                x.extend([1.0, xi]);
                g.push(i);
                h.push(j);
            }
        }
        let n = y.len();
        let term = |group| RandomTerm {
            group,
            z: vec![1.0; n],
            correlated: false,
        };
        Glmm::with_terms(family, y, x, vec![term(g), term(h)], None).unwrap()
    }

    /// y = 1 + 0.5 x + a_g + b_h + e: crossed Gaussian factors (sds 0.8, 0.5; e 0.6), or the
    /// same η through a Poisson.
    fn crossed(family: Family) -> Glmm {
        crossed_design(family, 3, (12, 9), (0.8, 0.5), |eta, s| match family {
            Family::Gaussian => eta + 0.6 * s.draw(),
            _ => (eta.exp() * (1.0 + 0.3 * s.draw()).max(0.0)).round(),
        })
    }

    /// Binary outcomes of crossed factors with large variances (sds 1.5, 1.2; 15 × 12 levels,
    /// one row per pair): where Laplace's approximation is biased. The outcome is a
    /// latent-variable draw (probit-like noise; fitted as logistic).
    fn binary_crossed() -> Glmm {
        crossed_design(Family::Binomial, 11, (15, 12), (1.5, 1.2), |eta, s| {
            f64::from(eta + 1.6 * s.draw() > 0.0)
        })
    }

    /// With a Gaussian response Laplace's approximation is exact: its maximum is lmer's.
    #[test]
    fn laplace_is_exact_for_the_gaussian_family() {
        let m = crossed(Family::Gaussian);
        let exact = m.fit_exact(&ExactSettings::default()).unwrap();
        let lap = m.fit_laplace().unwrap();
        assert!(
            (lap.log_likelihood - exact.log_likelihood).abs() < 1e-8,
            "{} vs {}",
            lap.log_likelihood,
            exact.log_likelihood
        );
        for (a, b) in lap.theta.iter().zip(&exact.theta) {
            assert!((a - b).abs() < 1e-4, "{:?} vs {:?}", lap.theta, exact.theta);
        }
    }

    /// On counts the fit is a maximum of the approximation, and the approximation is within a
    /// fraction of a nat of the exact (importance-sampled) likelihood there.
    #[test]
    fn the_poisson_laplace_fit_is_its_maximum() {
        is_laplace_s_maximum(&crossed(Family::Poisson));
    }

    /// Counts in the hundreds (η raised by 4.2): BFGS's first step, along a gradient of
    /// hundreds, lands where the rates overflow and no mode can be found. The line search steps
    /// back from there; the fit failed there before, and the exact fit started from the
    /// built-in start instead, 70 times slower.
    #[test]
    fn a_laplace_fit_of_counts_in_the_hundreds_is_its_maximum() {
        let m = crossed_design(Family::Poisson, 5, (12, 9), (0.6, 0.4), |eta, s| {
            ((eta + 4.2).exp() * (1.0 + 0.05 * s.draw()))
                .round()
                .max(0.0)
        });
        assert!(m.y.iter().sum::<f64>() / m.y.len() as f64 > 50.0);
        is_laplace_s_maximum(&m);
    }

    /// `m`'s Laplace fit is a maximum of the approximation (every coordinate 0.01 either side
    /// is lower), within half a nat and 4 Monte Carlo errors of the exact likelihood there.
    fn is_laplace_s_maximum(m: &Glmm) {
        let lap = m.fit_laplace().unwrap();
        let mut modes: Vec<Vec<f64>> = m.points.iter().map(|c| vec![0.0; c.dim]).collect();
        for j in 0..lap.theta.len() {
            for h in [-0.01, 0.01] {
                let mut th = lap.theta.clone();
                th[j] += h;
                assert!(m.laplace_value(&th, &mut modes).unwrap() < lap.log_likelihood);
            }
        }
        let exact = m.log_likelihood_sampled(&lap.theta, 4000, 1).unwrap();
        assert!(
            (exact.value - lap.log_likelihood).abs() < 0.5 + 4.0 * exact.se,
            "{} vs {exact:?}",
            lap.log_likelihood
        );
    }

    /// `Method::Auto` polishes Laplace's maximum with no M-step, and ends at the likelihood that
    /// EM from its own start reaches, above Laplace's: on binary crossed data the exact
    /// log-likelihoods (importance-sampled with the same draws, so that their differences carry
    /// far less noise than either) within the polish's 0.01-nat tolerance plus twice the
    /// sampler's error of EM's, and Laplace's maximum below both.
    #[test]
    fn auto_polishes_laplace_s_maximum_to_em_s_likelihood() {
        use crate::glmm::{FitSettings, Fitted, Method};
        let m = binary_crossed();
        let go = |method| {
            let s = FitSettings {
                method,
                ..FitSettings::default()
            };
            m.fit(&s, &mut |_| crate::run::Control::Continue).unwrap()
        };
        let auto = go(Method::Auto);
        let Fitted::Em(t) = &auto.fitted else {
            panic!("crossed binary data are fitted by the chains")
        };
        assert!(t.msteps.is_empty() && t.em_resumed.is_none());
        assert!(t.polished.as_ref().expect("polished").converged);
        let em = go(Method::Em);
        let at = |theta: &[f64]| m.log_likelihood_sampled(theta, 20_000, 5).unwrap();
        let (a, b, l) = (at(&auto.theta), at(&em.theta), at(&m.laplace_start()));
        eprintln!("auto {a:?}\nem {b:?}\nlaplace {l:?}");
        let tol = 0.01 + 2.0 * a.se.max(b.se);
        assert!(a.value > b.value - tol, "auto {a:?} against EM's {b:?}");
        assert!(
            l.value < a.value.min(b.value),
            "Laplace's {l:?} is not below"
        );
    }

    /// A polish that fails after Laplace's short start (here every attempt: no steps between
    /// draws) leaves EM to run on from there, and says so.
    #[test]
    fn a_failed_polish_after_laplace_s_start_lets_em_run_on() {
        use crate::em::EstimateStatus;
        use crate::glmm::{FitSettings, Fitted, LAPLACE_START_MSTEPS};
        let m = crossed(Family::Poisson);
        let mut s = FitSettings::default();
        if let Some(p) = s.em.polish.as_mut() {
            p.louis.thin = 0;
        }
        let fit = m.fit(&s, &mut |_| crate::run::Control::Continue).unwrap();
        let Fitted::Em(t) = &fit.fitted else {
            panic!("crossed counts are fitted by EM")
        };
        let why = t.em_resumed.as_deref().expect("EM ran on");
        assert!(why.contains("Laplace's start failed"), "{why}");
        assert!(t.msteps.len() > LAPLACE_START_MSTEPS);
        assert!(matches!(
            t.final_estimate().status,
            EstimateStatus::PolishFailed(_)
        ));
    }
}
