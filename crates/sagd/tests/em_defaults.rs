//! Automated EM with no step size to guess: `EmSettings::default()` (Newton M-steps, the Langevin
//! step from the posteriors) on models whose curvatures differ by orders of magnitude, each against
//! its maximum-likelihood estimate by quadrature; and the back-off of a non-finite update under the
//! paper's fixed α, where that α is far too large.

use rand::SeedableRng;
use rand_distr::{Distribution, Poisson, StandardNormal};
use rand_xoshiro::Xoshiro256PlusPlus;
use sagd::em::gamma_sigmoid::GammaSigmoid;
use sagd::em::{maximum_likelihood, AutomatedEm, EmEvent, EmSettings, EmTrace, StopRule};
use sagd::langevin::Scheme;
use sagd::model::{Derived, LatentModel, LogJoint, Scalar};
use sagd::quadrature::{log_likelihood, GaussHermite};
use sagd::run::Control;

/// X_i | Z_i ~ Poisson(exp(a + b Z_i)), Z_i ~ N(0, 1), θ = (a, b).
struct PoissonRandomEffect {
    x: Vec<f64>,
}

impl LogJoint for PoissonRandomEffect {
    fn n_data(&self) -> usize {
        self.x.len()
    }
    fn latent_dim(&self) -> usize {
        1
    }
    fn theta_dim(&self) -> usize {
        2
    }
    fn log_joint<S: Scalar>(&self, th: &[S], i: usize, z: &[S]) -> S {
        // log x! is left out: a constant in θ.
        let eta = th[0] + th[1] * z[0];
        eta * self.x[i] - eta.exp() - z[0] * z[0] * 0.5
    }
}

/// n counts at θ = (a, b).
fn poisson(n: usize, a: f64, b: f64, seed: u64) -> Derived<PoissonRandomEffect> {
    let mut rng = Xoshiro256PlusPlus::seed_from_u64(seed);
    let x = (0..n)
        .map(|_| {
            let z: f64 = StandardNormal.sample(&mut rng);
            Poisson::new((a + b * z).exp()).unwrap().sample(&mut rng)
        })
        .collect();
    Derived(PoissonRandomEffect { x })
}

/// Runs EM from θ₀ with `settings`, collecting the back-off events.
fn run<M: LatentModel<f64>>(
    model: &M,
    settings: EmSettings,
    theta0: &[f64],
    seed: u64,
) -> (EmTrace, usize) {
    let mut events = 0;
    let trace = AutomatedEm::new(model, settings)
        .run(theta0, seed, None, &mut |e| {
            if let EmEvent::BackOff(_) = e {
                events += 1;
            }
            Control::Continue
        })
        .unwrap();
    (trace, events)
}

/// ℓ(MLE) − ℓ(estimate) by quadrature, and the MLE.
fn gap<M: LatentModel<f64>>(model: &M, estimate: &[f64], start: &[f64]) -> (f64, Vec<f64>) {
    let gh = GaussHermite::new(100);
    let mle = maximum_likelihood(model, start, &gh).unwrap();
    // The gradient of ℓ at the MLE, relative to the number of points.
    assert!(mle.grad_max < 1e-6 * model.n_data() as f64, "MLE: {mle:?}");
    let l = log_likelihood(model, estimate, &gh).unwrap();
    (-mle.f - l, mle.x)
}

/// Fits `model` from θ₀ with `EmSettings::default()` and checks the answer against the MLE: the
/// log-likelihood gap below 0.05, and the error within 4 of the polished estimate's own Monte
/// Carlo standard errors.
fn fits_with_the_defaults<M: LatentModel<f64>>(
    name: &str,
    model: &M,
    theta0: &[f64],
    mle_start: &[f64],
) {
    let (trace, backoffs) = run(model, EmSettings::default(), theta0, 1);
    assert_eq!(trace.polish_error, None);
    let (estimate, se) = trace.final_estimate();
    let (g, mle) = gap(model, estimate, mle_start);
    let err = (0..mle.len())
        .map(|j| (estimate[j] - mle[j]).abs() / se[j])
        .fold(0.0, f64::max);
    eprintln!(
        "{name}: {} M-steps (rule met: {}), estimate {estimate:.4?} ± {se:.4?} (Monte Carlo), MLE {mle:.4?}, gap {g:.5}, max |error|/se {err:.2}, back-offs {backoffs}, Langevin steps {:.4?}",
        trace.msteps.len(),
        trace.converged,
        trace.msteps.iter().map(|m| m.step_size.unwrap_or(f64::NAN)).collect::<Vec<_>>()
    );
    assert!(g < 0.05, "{name}: log-likelihood gap {g}");
    assert!(err < 4.0, "{name}: |estimate - MLE| / se = {err}");
}

#[test]
fn the_defaults_fit_poisson_counts_in_the_hundreds() {
    // Rates around e^5.5 ≈ 245: Q's curvature in a is ~250 per point, so the paper's α = 0.2
    // is ~100 times too large, and the posteriors of z have sd ≈ 0.13. EM itself is slow here
    // (most of the information about b is missing): polishing finishes the job.
    let model = poisson(200, 5.5, 0.4, 3);
    let mean = model.0.x.iter().sum::<f64>() / 200.0;
    assert!(mean > 200.0);
    // From the log of the mean count, and not from b = 0: ℓ is even in b (z and −z are equally
    // likely), so b = 0 is a saddle that EM leaves only as fast as noise pushes it.
    fits_with_the_defaults("Poisson", &model, &[mean.ln(), 1.0], &[5.0, 0.5]);
}

#[test]
fn the_defaults_fit_the_gamma_sigmoid_model() {
    let (model, _) = GammaSigmoid::simulate(100, 2.0, 0.5, 1).unwrap();
    fits_with_the_defaults("Gamma-sigmoid", &model, &[0.0, 1.0], &[2.0, 0.5]);
}

#[test]
fn a_non_finite_update_is_backed_off_and_reported() {
    // Rates around e^2.5 ≈ 12: Q's curvature in a is ~12 per point, so the paper's α = 0.2 makes
    // gradient steps oscillate with growing amplitude until the model overflows. Each non-finite
    // update restarts its M-step with α halved; once α is small enough, EM converges.
    let model = poisson(200, 2.5, 0.4, 3);
    let mut settings = EmSettings {
        max_msteps: 30,
        stopping: Some(StopRule::default()),
        ..EmSettings::paper_e1()
    };
    settings.sagd.langevin.scheme = Scheme::Baoab;
    settings.sagd.schedules.step_size = sagd::schedule::Schedule::constant(0.05);
    let (trace, events) = run(&model, settings, &[2.0, 0.5], 1);
    let (g, _) = gap(&model, &trace.estimate, &[2.5, 0.4]);
    eprintln!(
        "back-offs at (M-step, update): {:?}; {} M-steps, rule met {}, gap {g:.5}",
        trace
            .backoffs
            .iter()
            .map(|b| (b.mstep, b.update))
            .collect::<Vec<_>>(),
        trace.msteps.len(),
        trace.converged
    );
    assert!(!trace.backoffs.is_empty());
    assert_eq!(events, trace.backoffs.len());
    let last = trace.backoffs.last().unwrap();
    assert_eq!(last.step_factor, 0.5f64.powi(trace.backoffs.len() as i32));
    assert!(trace.converged);
    assert!(g < 0.05, "log-likelihood gap {g}");
}
