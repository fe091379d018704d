//! Automated EM on a model whose one data point carries a long correlated latent: a linear-Gaussian
//! state-space model (a latent AR(1) series observed with noise), checked against its exact
//! log-likelihood by the Kalman filter. Prints the fit, the gap to the maximum, the standard errors
//! against the observed-information reference, and the time.
//!
//! Run: `cargo run --release -p sagd --example state_space -- [T] [seed] [derived|analytic]`
//! (defaults: T = 300, seed 1, derived: gradients by `Derived`, as a new model gets them), or
//! `-- dims` for a table of the time per M-step against T (10, 100, 1000), with each
//! preconditioner and both kinds of gradients.

#[path = "../tests/common/state_space.rs"]
mod state_space;

use std::time::Instant;

use sagd::em::{AutomatedEm, EmEvent, EmSettings};
use sagd::metric::Preconditioner;
use sagd::model::{Derived, LatentModel};
use sagd::run::Control;
use state_space::{Analytic, StateSpace};

fn fit<M: LatentModel<f64>>(model: &M, data: &StateSpace, truth: &[f64], seed: u64) {
    let (mle, lmax) = data.maximum(truth);
    let start = Instant::now();
    let mut em_secs = 0.0;
    let trace = AutomatedEm::new(model, EmSettings::default())
        .run(&[0.0, 0.0, 0.0], seed, None, &mut |e| {
            if let EmEvent::MStepDone(_) = e {
                em_secs = start.elapsed().as_secs_f64();
            }
            Control::Continue
        })
        .expect("the fit runs");
    let secs = start.elapsed().as_secs_f64();
    let answer = trace.final_estimate();
    let gap = lmax - data.kalman_log_likelihood(answer.estimate);
    println!(
        "M-steps {}  polish attempts {}  status {:?}  gap {gap:.4} nats  {secs:.1} s (EM {em_secs:.1} s)",
        trace.msteps.len(),
        trace.polish_attempts,
        answer.status
    );
    println!(
        "estimate {:.4?} ± {:.4?} (Monte Carlo)",
        answer.estimate, answer.se
    );
    println!("MLE      {mle:.4?}");
    if let Some(p) = &trace.polished {
        println!(
            "polish: gaps {:.4?}, {} draws per chain, information at {:.4?}",
            p.gaps, p.information.draws, p.information.theta
        );
        println!("se       {:.4?}", p.information.se);
        println!(
            "  ±      {:.4?}  (chains' R-hat {:.3?}; warning: {:?})",
            p.information.se_error, p.information.chain_rhat, p.se_warning
        );
    }
    // The reference where the information was taken (else at the MLE).
    let at = trace
        .polished
        .as_ref()
        .map_or(&mle, |p| &p.information.theta);
    println!("se (ref) {:.4?}", data.reference_se(at));
}

/// Seconds per M-step of `model` over three M-steps of the defaults with `preconditioner`.
fn per_mstep<M: LatentModel<f64>>(model: &M, preconditioner: Preconditioner) -> f64 {
    let mut settings = EmSettings {
        max_msteps: 3,
        stopping: None,
        polish: None,
        preconditioner,
        ..EmSettings::default()
    };
    settings.sagd.burn_in = 100;
    let start = Instant::now();
    AutomatedEm::new(model, settings)
        .run(&[0.0, 0.0, 0.0], 1, None, &mut |_| Control::Continue)
        .expect("the fit runs");
    start.elapsed().as_secs_f64() / 3.0
}

fn dims_table(truth: &[f64]) {
    println!("| T | gradients | identity | diagonal | dense |");
    println!("|---|---|---|---|---|");
    for len in [10, 100, 1000] {
        let data = StateSpace::simulate(1, len, truth, 101);
        for kind in ["by hand", "derived"] {
            let row: Vec<String> = [
                Preconditioner::Identity,
                Preconditioner::Diagonal,
                Preconditioner::Dense,
            ]
            .into_iter()
            .map(|p| {
                let secs = if kind == "by hand" {
                    per_mstep(&Analytic(data.clone()), p)
                } else {
                    per_mstep(&Derived(data.clone()), p)
                };
                format!("{secs:.3} s")
            })
            .collect();
            println!("| {len} | {kind} | {} |", row.join(" | "));
        }
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let len = args.first().and_then(|a| a.parse().ok()).unwrap_or(300);
    let seed = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(1);
    let truth = [0.9f64.atanh(), 0.5f64.ln(), 0.5f64.ln()];
    if args.first().map(String::as_str) == Some("dims") {
        return dims_table(&truth);
    }
    let data = StateSpace::simulate(1, len, &truth, 100 + seed);
    match args.get(2).map(String::as_str) {
        Some("analytic") => fit(&Analytic(data.clone()), &data, &truth, seed),
        _ => fit(&Derived(data.clone()), &data, &truth, seed),
    }
}
