//! The parametric bootstrap: new responses from the fitted model, each fitted again the way the
//! model was (lme4's `bootMer(fit, FUN, nsim)`, whose replicates `confint(fit, method = "boot")`
//! turns into percentile intervals), and the model refitted to a response of one's own (lme4's
//! `refit(fit, newresp)`).

use std::ops::Range;

use rayon::prelude::*;

use super::{checks, FitSettings, Fitted, Glmm, GlmmFit, Summary};
use crate::em::EstimateStatus;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::error::{invalid, LogpError, Result, SagdError};
use crate::rng::Seed;
use crate::run::Control;

impl Glmm {
    /// The same model of a new response `y`, one value per row in the order the rows were given
    /// (lme4's `refit(fit, newresp)` fits it): the design, groups, trials and offset kept. Refused
    /// by name where `y` is not one value per row, not finite, outside the family's support or
    /// all at its edge (every count 0, every trial a success or every one a failure), as the
    /// data were.
    pub fn with_response(&self, y: &[f64]) -> Result<Glmm> {
        let n = self.n_obs();
        if y.len() != n {
            return Err(invalid(
                "y",
                format!("{} values", y.len()),
                &format!("give one response per row of the model ({n})"),
            ));
        }
        let mut stored = vec![0.0; n];
        for (k, v) in stored.iter_mut().enumerate() {
            let i = self.given_row(k);
            let shift = self.response_shift_at(i);
            if !y[i].is_finite() || !self.family.admits(y[i] - shift, self.trials[k]) {
                return Err(invalid(
                    "y",
                    format!("{} at row {i}", y[i]),
                    "give finite responses in the family's support: Poisson counts 0, 1, 2, …; \
                     binomial successes between 0 and the row's trials",
                ));
            }
            *v = y[i] - shift;
        }
        if let Some(what) = checks::at_the_edge(self.family, &stored, &self.trials) {
            return Err(invalid(
                "y",
                what.into(),
                "such a response has no maximum: its intercept runs off to ±∞",
            ));
        }
        let mut m = self.clone();
        m.y = stored;
        m.row_constant = m.row_constants();
        Ok(m)
    }

    /// The parametric bootstrap at θ̂ = `theta` (a fit's estimate): `draws` responses drawn from
    /// the model there ([`Glmm::simulate`] with every level's effects drawn afresh, from `seed`),
    /// each fitted again under `settings` (the fit's own method; an exact fit starts at θ̂), one
    /// result per draw in order: the refit, or why it failed (a response at its edge, an exact
    /// fit that did not converge, an EM fit whose polish failed). Each refit's own draws (EM's
    /// chains) come from a stream of `seed` for that draw, so the replicates are the same on any
    /// number of threads. `on_refit` is called after each draw's refit (a progress bar's tick);
    /// once it says [`Control::Stop`], the draws not yet refitted are left so, each with an
    /// error that says it was stopped.
    pub fn bootstrap(
        &self,
        theta: &[f64],
        settings: &FitSettings,
        (draws, seed): (usize, u64),
        on_refit: &(dyn Fn() -> Control + Sync),
    ) -> Result<Vec<Result<GlmmFit>>> {
        let part = self.bootstrap_draws(theta, settings, (0..draws, seed), on_refit)?;
        Ok(stopped_as_errors(part))
    }

    /// The draws `draws` of [`Glmm::bootstrap`] from `seed` (of any number of them: draw d is
    /// the same response, refitted alike, whatever the range), one entry per draw of the range
    /// in order; `None` where a [`Control::Stop`] of `on_refit` left the draw not begun. A long
    /// bootstrap runs in parts this way and keeps each part's refits: a run stopped between
    /// them goes on where it stopped and ends with the replicates of one uninterrupted run.
    pub fn bootstrap_draws(
        &self,
        theta: &[f64],
        settings: &FitSettings,
        (draws, seed): (Range<usize>, u64),
        on_refit: &(dyn Fn() -> Control + Sync),
    ) -> Result<Vec<Option<Result<GlmmFit>>>> {
        self.over_draws(theta, (draws, seed), on_refit, |y, seed| {
            self.refit(theta, settings, y, seed)
        })
    }

    /// The parametric bootstrap's likelihood-ratio test of this model, the null, at its
    /// estimate `theta` against `alt`, a larger model of the same rows that nests it, at its
    /// estimate `alt_theta` (pbkrtest's `PBmodcomp(alt, null)`): `draws` responses drawn from the
    /// null at `theta`, each fitted by both models under `settings` (each exact fit started at
    /// its estimate), and its statistic 2 (ℓ_alt − ℓ_null) per draw, or why a refit failed;
    /// draws, streams and `on_refit` as [`Glmm::bootstrap`]'s. The test's p-value is the share
    /// of the statistics at or above the data's, (1 + #{T* ≥ T}) / (1 + draws that succeeded).
    /// Unlike the chi-square law of `anova`, it holds where the null puts a variance at 0, on
    /// its boundary. Refused where the models do not share their family, rows and response, or
    /// `settings` asks for REML (whose criterion does not compare models).
    pub fn bootstrap_lrt(
        &self,
        theta: &[f64],
        (alt, alt_theta): (&Glmm, &[f64]),
        settings: &FitSettings,
        (draws, seed): (usize, u64),
        on_refit: &(dyn Fn() -> Control + Sync),
    ) -> Result<Vec<Result<f64>>> {
        let alt = (alt, alt_theta);
        let part = self.bootstrap_lrt_draws(theta, alt, settings, (0..draws, seed), on_refit)?;
        Ok(stopped_as_errors(part))
    }

    /// The draws `draws` of [`Glmm::bootstrap_lrt`]'s test from `seed`, one entry per draw of
    /// the range, `None` where a stop left it not begun, as [`Glmm::bootstrap_draws`] gives
    /// [`Glmm::bootstrap`]'s.
    pub fn bootstrap_lrt_draws(
        &self,
        theta: &[f64],
        (alt, alt_theta): (&Glmm, &[f64]),
        settings: &FitSettings,
        (draws, seed): (Range<usize>, u64),
        on_refit: &(dyn Fn() -> Control + Sync),
    ) -> Result<Vec<Option<Result<f64>>>> {
        if settings.exact.criterion == super::Criterion::Reml {
            return Err(invalid(
                "reml",
                "in a likelihood-ratio test".into(),
                "fit both models by maximum likelihood (REML's criteria do not compare models)",
            ));
        }
        if alt.family != self.family || alt.given_response() != self.given_response() {
            return Err(invalid(
                "alt",
                format!("a {:?} model of {} rows", alt.family, alt.n_obs()),
                &format!(
                    "compare models of the same family and response: this one is a {:?} model \
                     of {} rows",
                    self.family,
                    self.n_obs()
                ),
            ));
        }
        alt.check_theta(alt_theta)?;
        let alt_seeds = Seed::new(seed).stream("bootstrap alternative refits");
        self.over_draws(theta, (draws, seed), on_refit, |y, s| {
            let null = self.refit(theta, settings, y, s)?;
            let alt_seed = alt_seeds.index(s).get();
            let larger = alt.refit(alt_theta, settings, y, alt_seed)?;
            Ok(2.0 * (larger.log_likelihood.value - null.log_likelihood.value))
        })
    }

    /// Each of the responses `draws` drawn from the model at `theta` (from `seed`, each where it
    /// is refitted: the draws are never all held at once) through `each`, with the seed of its
    /// own refits; `on_refit` after each, its Stop leaving the rest not begun (`None`). A
    /// response that cannot be drawn fails the whole bootstrap, as [`Glmm::simulate`] fails.
    fn over_draws<T: Send>(
        &self,
        theta: &[f64],
        (draws, seed): (Range<usize>, u64),
        on_refit: &(dyn Fn() -> Control + Sync),
        each: impl Fn(&[f64], u64) -> Result<T> + Sync,
    ) -> Result<Vec<Option<Result<T>>>> {
        let simulator = self.simulator(theta, seed, false)?;
        let refits = Seed::new(seed).stream("bootstrap refits");
        let stopped = AtomicBool::new(false);
        draws
            .into_par_iter()
            .map(|d| {
                if stopped.load(Ordering::Relaxed) {
                    return Ok(None);
                }
                let y = simulator.draw(d)?;
                let refit = each(&y, refits.index(d as u64).get());
                if let Control::Stop = on_refit() {
                    stopped.store(true, Ordering::Relaxed);
                }
                Ok(Some(refit.map_err(|e| SagdError::Context {
                    what: format!("bootstrap draw {d}"),
                    cause: Box::new(e),
                })))
            })
            .collect()
    }

    /// The response in the order the rows were given (the Gaussian's offset added back).
    fn given_response(&self) -> Vec<f64> {
        let mut y = vec![0.0; self.n_obs()];
        for (k, v) in self.y.iter().enumerate() {
            let i = self.given_row(k);
            y[i] = v + self.response_shift_at(i);
        }
        y
    }

    /// The model fitted under `settings` (an exact fit started at `theta`) to the response `y`,
    /// its own draws from `seed`: the fit, or why it failed or did not converge.
    fn refit(
        &self,
        theta: &[f64],
        settings: &FitSettings,
        y: &[f64],
        seed: u64,
    ) -> Result<GlmmFit> {
        let model = self.with_response(y)?;
        let mut s = settings.clone();
        s.exact.start = Some(theta.to_vec());
        s.seed = seed;
        let refit = model.fit(&s, &mut |_| Control::Continue)?;
        let failed = match &refit.fitted {
            Fitted::Exact(e) if !e.converged => Some(format!(
                "the exact fit stopped unconverged after {} iterations",
                e.iterations
            )),
            Fitted::Em(t) => match &t.final_estimate().status {
                EstimateStatus::PolishFailed(why) => Some(format!("the polish failed ({why})")),
                _ => None,
            },
            _ => None,
        };
        match failed {
            Some(why) => Err(SagdError::Model(LogpError::Fatal(format!(
                "{why}: this draw is left out of the intervals (more draws, or another seed, \
                 make up for it)"
            )))),
            None => Ok(refit),
        }
    }
}

/// A whole bootstrap's draws, each that a stop left not begun an error that says so.
fn stopped_as_errors<T>(part: Vec<Option<Result<T>>>) -> Vec<Result<T>> {
    part.into_iter()
        .enumerate()
        .map(|(d, r)| {
            r.unwrap_or_else(|| {
                let why = format!("stopped on request before draw {d} was refitted");
                Err(SagdError::Model(LogpError::Fatal(why)))
            })
        })
        .collect()
}

impl Summary {
    /// The summary's estimates in θ's order, on the scales lme4 prints: β, then per term its
    /// effects' sds and, for correlated effects, their correlations row by row below the
    /// diagonal (ρ₁₀, ρ₂₀, ρ₂₁, …), then σ for the Gaussian family. The parametric bootstrap's
    /// intervals are the quantiles of these over the replicates.
    pub fn values(&self, terms: &[(usize, bool)]) -> Vec<f64> {
        let mut v: Vec<f64> = self.fixed.iter().map(|e| e.value).collect();
        for (t, &(q, correlated)) in self.random.iter().zip(terms) {
            v.extend(t.sd.iter().map(|e| e.value));
            if correlated {
                (1..q).for_each(|a| v.extend((0..a).map(|b| t.cor[a][b])));
            }
        }
        v.extend(self.sigma.as_ref().map(|s| s.value));
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::glmm::{ExactSettings, Family, Method, RandomTerm};

    /// A random intercept of 30 groups of 6 rows, the groups' rows interleaved (so that the
    /// model stores them in another order): Gaussian with β = (1, 0.5), sd 0.8, σ 0.6 and no
    /// offset, or Poisson counts with β = (0.3, 0.5), sd 0.5 and an exposure offset; the
    /// response as given.
    fn model(family: Family) -> (Glmm, Vec<f64>) {
        model_with(family, true)
    }

    /// [`model`]'s data, the fixed effects an intercept and x (`slope`) or the intercept alone.
    fn model_with(family: Family, slope: bool) -> (Glmm, Vec<f64>) {
        let (g, n) = (30, 180);
        let mut rng = crate::rng::Seed::new(7).stream("data").normals();
        let b: Vec<f64> = (0..g).map(|_| rng.draw()).collect();
        let (mut y, mut x, mut offset) = (Vec::new(), Vec::new(), Vec::new());
        let group: Vec<usize> = (0..n).map(|i| i % g).collect();
        let mut u = crate::rng::Seed::new(8).rng();
        for (i, &l) in group.iter().enumerate() {
            let xi = (i / g) as f64 / 6.0 - 0.5;
            x.extend(if slope { vec![1.0, xi] } else { vec![1.0] });
            let exposure = 1.0 + (i % 4) as f64;
            offset.push(f64::ln(exposure));
            y.push(match family {
                Family::Gaussian => 1.0 + 0.5 * xi + 0.8 * b[l] + 0.6 * rng.draw(),
                _ => {
                    let mean = exposure * (0.3 + 0.5 * xi + 0.5 * b[l]).exp();
                    rand_distr::Distribution::sample(
                        &rand_distr::Poisson::new(mean).unwrap(),
                        &mut u,
                    )
                }
            });
        }
        let term = RandomTerm {
            group,
            z: vec![1.0; n],
            correlated: false,
        };
        let offset = (family != Family::Gaussian).then_some(offset);
        let m = match offset {
            Some(o) => Glmm::with_offset(family, y.clone(), x, vec![term], None, o),
            None => Glmm::with_terms(family, y.clone(), x, vec![term], None),
        };
        (m.unwrap(), y)
    }

    fn go() -> Control {
        Control::Continue
    }

    fn exact() -> FitSettings {
        FitSettings {
            method: Method::Exact,
            exact: ExactSettings::default(),
            ..FitSettings::default()
        }
    }

    #[test]
    fn the_model_refitted_to_its_own_response_is_the_same_fit() {
        for family in [Family::Gaussian, Family::Poisson] {
            let (m, y) = model(family);
            assert!(!m.order.is_empty(), "the rows are stored in another order");
            let fit = m.fit(&exact(), &mut |_| Control::Continue).unwrap();
            let again = m.with_response(&y).unwrap();
            let refit = again.fit(&exact(), &mut |_| Control::Continue).unwrap();
            assert_eq!(fit.theta, refit.theta, "{family:?}");
            assert_eq!(fit.log_likelihood.value, refit.log_likelihood.value);
        }
    }

    #[test]
    fn bad_responses_are_named() {
        let (m, _) = model(Family::Poisson);
        let short = m.with_response(&[1.0; 3]).unwrap_err().to_string();
        assert!(short.contains("one response per row"), "{short}");
        let mut y = vec![1.0; m.n_obs()];
        y[4] = 2.5;
        let count = m.with_response(&y).unwrap_err().to_string();
        assert!(
            count.contains("2.5 at row 4") && count.contains("counts"),
            "{count}"
        );
        let zeros = m
            .with_response(&vec![0.0; m.n_obs()])
            .unwrap_err()
            .to_string();
        assert!(zeros.contains("0 in every row"), "{zeros}");
    }

    /// A stop asked after the first refit leaves every draw not yet begun unrefitted, each
    /// saying so; the refits under way when it came (one per thread) finish.
    #[test]
    fn a_stop_leaves_the_draws_not_begun() {
        let (m, _) = model(Family::Gaussian);
        let fit = m.fit(&exact(), &mut |_| Control::Continue).unwrap();
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(2)
            .build()
            .unwrap();
        let reps = pool
            .install(|| m.bootstrap(&fit.theta, &exact(), (40, 1), &|| Control::Stop))
            .unwrap();
        let stopped = reps
            .iter()
            .filter(|r| matches!(r, Err(e) if e.to_string().contains("stopped on request")))
            .count();
        let done = reps.iter().filter(|r| r.is_ok()).count();
        assert!(
            (1..=2).contains(&done) && done + stopped == 40,
            "{done} refitted, {stopped} stopped"
        );
    }

    /// A bootstrap run in parts (as a resumed run goes on) gives each draw's refit of the whole
    /// run, on any number of threads: the estimates and, for the test, the statistics.
    #[test]
    fn a_bootstrap_in_parts_is_the_whole_bootstrap() {
        let (m, _) = model(Family::Poisson);
        let (null, _) = model_with(Family::Poisson, false);
        let fit = m.fit(&exact(), &mut |_| Control::Continue).unwrap();
        let fit0 = null.fit(&exact(), &mut |_| Control::Continue).unwrap();
        let theta = |r: Result<GlmmFit>| r.unwrap().theta;
        let whole: Vec<Vec<f64>> = m
            .bootstrap(&fit.theta, &exact(), (12, 5), &go)
            .unwrap()
            .into_iter()
            .map(theta)
            .collect();
        let lrt = |r: std::ops::Range<usize>| -> Vec<f64> {
            let alt = (&m, &fit.theta[..]);
            let t = null.bootstrap_lrt_draws(&fit0.theta, alt, &exact(), (r, 5), &go);
            t.unwrap()
                .into_iter()
                .map(|t| t.unwrap().unwrap())
                .collect()
        };
        let one = rayon::ThreadPoolBuilder::new()
            .num_threads(1)
            .build()
            .unwrap();
        let parts: Vec<Vec<f64>> = [0..5, 5..12]
            .into_iter()
            .flat_map(|r| {
                one.install(|| m.bootstrap_draws(&fit.theta, &exact(), (r, 5), &go))
                    .unwrap()
            })
            .map(|r| theta(r.expect("not stopped")))
            .collect();
        assert_eq!(parts, whole);
        let tests = [lrt(0..12), [lrt(0..4), one.install(|| lrt(4..12))].concat()];
        assert_eq!(tests[0], tests[1]);
    }

    /// The bootstrap's likelihood-ratio statistics for a fixed effect at 0, an interior null,
    /// follow the chi-square law on 1 degree of freedom, as the test's theory says: their mean
    /// within 4 Monte Carlo errors (√2/√n) of 1, their share above its 95% quantile within 4
    /// errors of 0.05; none below 0 (beyond rounding), the larger model nesting the smaller.
    #[test]
    fn likelihood_ratios_of_an_interior_null_are_chi_square() {
        let (null, _) = model_with(Family::Gaussian, false);
        let (alt, _) = model_with(Family::Gaussian, true);
        let fit0 = null.fit(&exact(), &mut |_| Control::Continue).unwrap();
        let fit1 = alt.fit(&exact(), &mut |_| Control::Continue).unwrap();
        let t = null
            .bootstrap_lrt(&fit0.theta, (&alt, &fit1.theta), &exact(), (400, 2), &go)
            .unwrap();
        let t: Vec<f64> = t.into_iter().map(|r| r.unwrap()).collect();
        // The data's own test: chi-square on 1 degree of freedom, P(X > x) = erfc(√(x/2)).
        let (chisq, df, p) = fit1.likelihood_ratio(&fit0);
        let gain = fit1.log_likelihood.value - fit0.log_likelihood.value;
        assert_eq!((chisq, df), (2.0 * gain, 1));
        let erfc = statrs::function::erf::erfc((chisq / 2.0).sqrt());
        assert!((p.unwrap() - erfc).abs() < 1e-12, "{p:?} against {erfc}");
        assert_eq!(fit0.likelihood_ratio(&fit0).2, None);
        let n = t.len() as f64;
        let mean = t.iter().sum::<f64>() / n;
        assert!((mean - 1.0).abs() < 4.0 * (2.0 / n).sqrt(), "mean {mean}");
        let above = t.iter().filter(|&&v| v > 3.841_459).count() as f64 / n;
        assert!(
            (above - 0.05).abs() < 4.0 * (0.05 * 0.95 / n).sqrt(),
            "{above} above"
        );
        assert!(
            t.iter().all(|&v| v > -1e-6),
            "a larger model's likelihood is never lower"
        );
    }

    #[test]
    fn tests_of_other_data_or_by_reml_are_refused() {
        let (null, _) = model_with(Family::Gaussian, false);
        let (other, _) = model_with(Family::Poisson, true);
        let fit0 = null.fit(&exact(), &mut |_| Control::Continue).unwrap();
        let theta1 = other.start();
        let err = null
            .bootstrap_lrt(&fit0.theta, (&other, &theta1), &exact(), (10, 2), &go)
            .unwrap_err()
            .to_string();
        assert!(err.contains("same family and response"), "{err}");
        let mut reml = exact();
        reml.exact.criterion = crate::glmm::Criterion::Reml;
        let err = null
            .bootstrap_lrt(&fit0.theta, (&null, &fit0.theta), &reml, (10, 2), &go)
            .unwrap_err()
            .to_string();
        assert!(err.contains("maximum likelihood"), "{err}");
    }

    /// The replicates' spread of β̂ is its standard error: the sd of 200 replicates of the
    /// intercept and the slope within 4 of its Monte Carlo errors (sd/√(2·199), Gaussian
    /// replicates) of the fit's; the mean of β̂* within 4 errors of β̂ (the Gaussian MLE of β is
    /// unbiased); the same replicates on 1 thread and on 2.
    #[test]
    fn replicates_spread_as_the_standard_errors_say() {
        let (m, _) = model(Family::Gaussian);
        let fit = m.fit(&exact(), &mut |_| Control::Continue).unwrap();
        let reps = m.bootstrap(&fit.theta, &exact(), (200, 11), &go).unwrap();
        let thetas: Vec<Vec<f64>> = reps.into_iter().map(|r| r.unwrap().theta).collect();
        let one = rayon::ThreadPoolBuilder::new()
            .num_threads(1)
            .build()
            .unwrap()
            .install(|| m.bootstrap(&fit.theta, &exact(), (200, 11), &go).unwrap());
        let one: Vec<Vec<f64>> = one.into_iter().map(|r| r.unwrap().theta).collect();
        assert_eq!(thetas, one);
        let cov = fit.covariance.as_ref().unwrap();
        for j in 0..2 {
            let v: Vec<f64> = thetas.iter().map(|t| t[j]).collect();
            let n = v.len() as f64;
            let mean = v.iter().sum::<f64>() / n;
            let sd = (v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0)).sqrt();
            let se = cov[j][j].sqrt();
            let sd_err = se / (2.0 * (n - 1.0)).sqrt();
            assert!(
                (sd - se).abs() < 4.0 * sd_err,
                "β{j}: sd {sd} against se {se}"
            );
            assert!(
                (mean - fit.theta[j]).abs() < 4.0 * se / n.sqrt(),
                "β{j}: mean {mean}"
            );
        }
    }
}
