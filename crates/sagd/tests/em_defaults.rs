//! Automated EM with no step size to guess: `EmSettings::default()` (Newton M-steps, the Langevin
//! step from the posteriors) on models whose curvatures differ by orders of magnitude, each against
//! its maximum-likelihood estimate by quadrature; and the back-off of a non-finite update under the
//! paper's fixed α, where that α is far too large.

use rand::SeedableRng;
use rand_distr::{Distribution, Poisson, StandardNormal};
use rand_xoshiro::Xoshiro256PlusPlus;

mod common;
use common::em::{fits_with_the_defaults_from_seed, gap, run};
use sagd::em::{EmSettings, StopRule};
use sagd::langevin::Scheme;
use sagd::model::{Derived, LogJoint, Scalar};

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

#[test]
fn the_defaults_fit_poisson_counts_in_the_hundreds() {
    // Rates around e^5.5 ≈ 245: Q's curvature in a is ~250 per point, so the paper's α = 0.2
    // is ~100 times too large, and the posteriors of z have sd ≈ 0.13. EM itself is slow here
    // (most of the information about b is missing): polishing finishes the job.
    let model = poisson(200, 5.5, 0.4, 3);
    let mean = model.0.x.iter().sum::<f64>() / 200.0;
    assert!(mean > 200.0);
    // From the log of the mean count, and not from b = 0: ℓ is even in b (z and −z are equally
    // likely), so b = 0 is a saddle that EM leaves only as fast as noise pushes it. From b = 1,
    // ℓ is convex in b (no Newton step): with steps sized by the complete-data information
    // alone, seeds 2 and 3 ended their polish 47 nats below the maximum.
    for seed in 1..=3 {
        fits_with_the_defaults_from_seed("Poisson", &model, &[mean.ln(), 1.0], &[5.0, 0.5], seed);
    }
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

/// The defaults cut to one M-step and a polish of at most `steps` Newton steps.
fn one_mstep_then_newton_steps(steps: usize) -> EmSettings {
    let mut settings = EmSettings {
        max_msteps: 1,
        stopping: None,
        ..EmSettings::default()
    };
    if let Some(p) = settings.polish.as_mut() {
        p.max_steps = steps;
    }
    settings
}

#[test]
fn a_polish_that_cannot_succeed_says_so_and_leaves_em_s_estimate_marked() {
    // One M-step from b = 0, where ℓ (even in b) has a saddle, and a polish allowed a single
    // Newton step: its information is not positive definite there, on every attempt. The run
    // reports EM's estimate as such, with the attempts and why.
    let model = poisson(200, 1.0, 0.5, 3);
    let (trace, _) = run(&model, one_mstep_then_newton_steps(1), &[1.0, 0.0], 1);
    let answer = trace.final_estimate();
    match answer.status {
        sagd::em::EstimateStatus::PolishFailed(why) => {
            assert!(why.contains("failed 3 times"), "{why}");
            assert_eq!(trace.polish_attempts, sagd::em::POLISH_ATTEMPTS);
        }
        other => panic!(
            "expected a failed polish, got {other:?} at {:?}",
            answer.estimate
        ),
    }
    assert_eq!(answer.estimate, &trace.estimate[..]);
}

#[test]
fn a_polish_that_runs_out_of_steps_says_so() {
    // Counts in the hundreds from b = 1, one M-step, and a polish of two Newton steps: about
    // 80 nats below the maximum, two steps cannot reach it. The answer is the polish's, and
    // its warning says that its gap estimate never fell below the tolerance.
    let model = poisson(200, 5.5, 0.4, 3);
    let mean = model.0.x.iter().sum::<f64>() / 200.0;
    let (trace, _) = run(&model, one_mstep_then_newton_steps(2), &[mean.ln(), 1.0], 1);
    let pol = trace
        .polished
        .as_ref()
        .expect("the polish returns its estimate");
    assert!(!pol.converged, "gaps {:?}", pol.gaps);
    let warning = pol.se_warning.as_deref().unwrap_or_default();
    assert!(warning.contains("used its 2 Newton steps"), "{warning:?}");
}
