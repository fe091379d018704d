//! Fitting a model with automated EM and measuring the fit against the quadrature MLE: shared by
//! this crate's tests of `EmSettings::default()` and, by path, by `sagd-apps`'s test of the same
//! defaults on E1's model.
#![allow(dead_code)]

use sagd::em::information::Polished;
use sagd::em::{maximum_likelihood, AutomatedEm, EmEvent, EmSettings, EmTrace};
use sagd::model::LatentModel;
use sagd::quadrature::{log_likelihood, GaussHermite};
use sagd::run::Control;

/// Runs EM from θ₀ with `settings`, collecting the back-off events.
pub fn run<M: LatentModel<f64>>(
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

/// The error a polished estimate may carry by what its polish reports, per coordinate: the last
/// step's Monte Carlo error; the Newton step that the answer's own information still sees (where
/// it was taken at the answer: where the score's control is exact, a Gaussian model's, the Monte
/// Carlo error falls to 1e-12-1e-9 and what Newton's last step left, 1e-9-1e-6, is most of the
/// error); and the floor of the control's central differences in θ, O(h²) with h = 1e-4 (1 +
/// |θ|), at ten times its order.
pub fn reported_error(polished: &Polished) -> Vec<f64> {
    let info = &polished.information;
    let at_answer = info.theta == polished.estimate;
    (0..polished.estimate.len())
        .map(|j| {
            let left = if at_answer {
                info.newton_step[j].abs()
            } else {
                0.0
            };
            polished.mc_se[j] + left + 1e-7 * (1.0 + polished.estimate[j].abs()).powi(2)
        })
        .collect()
}

/// ℓ(MLE) − ℓ(estimate) by quadrature, and the MLE.
pub fn gap<M: LatentModel<f64>>(model: &M, estimate: &[f64], start: &[f64]) -> (f64, Vec<f64>) {
    let gh = GaussHermite::new(100);
    let mle = maximum_likelihood(model, start, &gh).unwrap();
    // The gradient of ℓ at the MLE, relative to the number of points.
    assert!(mle.grad_max < 1e-6 * model.n_data() as f64, "MLE: {mle:?}");
    let l = log_likelihood(model, estimate, &gh).unwrap();
    (-mle.f - l, mle.x)
}

/// Fits `model` from θ₀ with `EmSettings::default()` and checks the answer against the MLE: the
/// log-likelihood gap below 0.05, and the error within 4 of what the polish reports of it
/// ([`reported_error`]).
pub fn fits_with_the_defaults<M: LatentModel<f64>>(
    name: &str,
    model: &M,
    theta0: &[f64],
    mle_start: &[f64],
) {
    fits_with_the_defaults_from_seed(name, model, theta0, mle_start, 1);
}

/// [`fits_with_the_defaults`] with the run's seed.
pub fn fits_with_the_defaults_from_seed<M: LatentModel<f64>>(
    name: &str,
    model: &M,
    theta0: &[f64],
    mle_start: &[f64],
    seed: u64,
) {
    let (trace, backoffs) = run(model, EmSettings::default(), theta0, seed);
    assert_eq!(trace.polish_error, None);
    let answer = trace.final_estimate();
    assert_eq!(answer.status, sagd::em::EstimateStatus::Polished);
    let (estimate, se) = (answer.estimate, answer.se);
    let (g, mle) = gap(model, estimate, mle_start);
    let reported = reported_error(trace.polished.as_ref().expect("polished"));
    let err = (0..mle.len())
        .map(|j| (estimate[j] - mle[j]).abs() / reported[j])
        .fold(0.0, f64::max);
    eprintln!(
        "{name}, seed {seed}: {} M-steps (rule met: {}, handed over at rate {:?}), estimate {estimate:.4?} ± {se:.4?} (Monte Carlo), MLE {mle:.4?}, gap {g:.5}, max |error|/se {err:.2}, back-offs {backoffs}, Langevin steps {:.4?}",
        trace.msteps.len(),
        trace.converged,
        trace.handover_rate,
        trace.msteps.iter().map(|m| m.step_size.unwrap_or(f64::NAN)).collect::<Vec<_>>()
    );
    assert!(g < 0.05, "{name}, seed {seed}: log-likelihood gap {g}");
    assert!(
        err < 4.0,
        "{name}, seed {seed}: |estimate - MLE| / se = {err}"
    );
}
