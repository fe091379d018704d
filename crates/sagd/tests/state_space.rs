//! Automated EM from `EmSettings::default()` on a model whose one data point carries a long
//! correlated latent — a 300-long latent AR(1) series observed with noise — against the exact
//! log-likelihood by the Kalman filter: the polished estimate at the maximum, never a silent
//! fallback, and standard errors within their own reported Monte Carlo error of the reference
//! (the observed information by differences of the exact log-likelihood, at the same θ).

mod common;
use common::state_space::{Analytic, StateSpace};
use sagd::em::{AutomatedEm, EmSettings, EmTrace, EstimateStatus};
use sagd::model::{Derived, LatentModel};
use sagd::run::Control;

const LEN: usize = 300;

fn truth() -> [f64; 3] {
    [0.9f64.atanh(), 0.5f64.ln(), 0.5f64.ln()]
}

fn fit<M: LatentModel<f64>>(model: &M, seed: u64) -> EmTrace {
    AutomatedEm::new(model, EmSettings::default())
        .run(&[0.0; 3], seed, None, &mut |_| Control::Continue)
        .unwrap()
}

#[test]
fn ten_seeds_of_a_long_correlated_latent_fit_to_the_maximum() {
    let mut near = 0;
    let mut se_ok = [0usize; 3];
    eprintln!("seed | gap (nats) | max |error|/se | se ± its error vs reference | M-steps | s");
    for seed in 0..10u64 {
        let data = StateSpace::simulate(1, LEN, &truth(), 100 + seed);
        let (mle, lmax) = data.maximum(&truth());
        let start = std::time::Instant::now();
        let trace = fit(&Analytic(data.clone()), seed);
        let secs = start.elapsed().as_secs_f64();
        let answer = trace.final_estimate();
        // Never EM's estimate in silence: polished, or the failure reported with it.
        assert_ne!(answer.status, EstimateStatus::Em, "seed {seed}");
        if let EstimateStatus::PolishFailed(why) = answer.status {
            eprintln!("seed {seed}: polish failed, reported: {why}");
            continue;
        }
        let gap = lmax - data.kalman_log_likelihood(answer.estimate);
        near += usize::from(gap < 0.05);
        let info = &trace.polished.as_ref().unwrap().information;
        assert_eq!(info.se_error.len(), 3);
        // Four chains on the one point, which agree.
        let rhat = info.chain_rhat.expect("several chains per point");
        assert!(
            rhat < sagd::em::CHAIN_RHAT_LIMIT,
            "seed {seed}: R-hat {rhat}"
        );
        // The reference where the information was taken (the last Newton point, within Monte
        // Carlo error of the maximum): the error reported is that of the se at this θ.
        let reference = data.reference_se(&info.theta);
        let err = (0..3)
            .map(|j| (answer.estimate[j] - mle[j]).abs() / answer.se[j])
            .fold(0.0, f64::max);
        let mut row = String::new();
        for j in 0..3 {
            // Within twice the reported error: a 95% interval, if the error is right.
            let ok = (info.se[j] - reference[j]).abs() <= 2.0 * info.se_error[j];
            se_ok[j] += usize::from(ok);
            row += &format!(
                " {:.4} ± {:.4} vs {:.4}{} |",
                info.se[j],
                info.se_error[j],
                reference[j],
                if ok { "" } else { " (out)" }
            );
        }
        eprintln!(
            "{seed} | {gap:.4} | {err:.2} |{row} {} | {secs:.1}",
            trace.msteps.len()
        );
    }
    assert!(near >= 9, "within 0.05 nats of the maximum in {near} of 10");
    for (j, ok) in se_ok.iter().enumerate() {
        assert!(
            *ok >= 8,
            "se of θ{j} within 2 reported errors in {ok} of 10"
        );
    }
}

#[test]
fn gradients_by_dual_numbers_give_the_fit_of_gradients_by_hand() {
    // The documented path (a `LogJoint` and `Derived`) against the same model's gradients
    // written out: the same numbers to rounding, so the same fit.
    let data = StateSpace::simulate(1, LEN, &truth(), 100);
    let by_hand = fit(&Analytic(data.clone()), 0);
    let derived = fit(&Derived(data), 0);
    let (a, b) = (by_hand.final_estimate(), derived.final_estimate());
    for j in 0..3 {
        assert!(
            (a.estimate[j] - b.estimate[j]).abs() < 1e-6,
            "{:?} vs {:?}",
            a.estimate,
            b.estimate
        );
    }
}
