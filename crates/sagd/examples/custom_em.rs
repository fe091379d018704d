//! Automated EM on your own latent-variable model: a Poisson regression with a random effect,
//! X_i | Z_i ~ Poisson(exp(a + b·Z_i)), Z_i ~ N(0, 1), θ = (a, b). Write log p(x_i, z; θ) once,
//! generic over the number type (`LogJoint`); `Derived` supplies its gradients in z and θ (checked
//! here against central differences). Hand it to `AutomatedEm` with the default settings (no step
//! size to choose), which ends with `polish` (Newton steps on ℓ with the score and Louis' observed
//! information) and the standard errors, and compare with the maximum-likelihood estimate by
//! quadrature (possible here because z is one-dimensional).
//!
//! Run: `cargo run --release -p sagd --example custom_em`

use rand::SeedableRng;
use rand_distr::{Distribution, Poisson, StandardNormal};
use rand_xoshiro::Xoshiro256PlusPlus;
use sagd::em::{maximum_likelihood, AutomatedEm, EmEvent, EmSettings};
use sagd::model::{check_gradients, Derived, LogJoint, Scalar};
use sagd::quadrature::{log_likelihood, GaussHermite};
use sagd::run::Control;

/// Counts x_i with log-normal rates.
struct PoissonRandomEffect {
    x: Vec<f64>,
    /// log x_i! for the normalising constant (it matters for the log-likelihood, not the estimate).
    log_fact: Vec<f64>,
}

impl PoissonRandomEffect {
    fn new(x: Vec<f64>) -> Self {
        let log_fact = x
            .iter()
            .map(|k| (1..=*k as u64).map(|j| (j as f64).ln()).sum())
            .collect();
        PoissonRandomEffect { x, log_fact }
    }
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
    /// log p(x_i, z; θ) = x_i η − e^η − log x_i! − z²/2 − ½ log 2π, η = a + b z.
    fn log_joint<S: Scalar>(&self, th: &[S], i: usize, z: &[S]) -> S {
        let eta = th[0] + th[1] * z[0];
        eta * self.x[i] - eta.exp() - self.log_fact[i] - z[0] * z[0] * 0.5 - 0.918_938_533_204_672_8
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // Simulated data at θ = (1, 0.5).
    let mut rng = Xoshiro256PlusPlus::seed_from_u64(7);
    let x: Vec<f64> = (0..200)
        .map(|_| {
            let z: f64 = StandardNormal.sample(&mut rng);
            Poisson::new((1.0 + 0.5 * z).exp())
                .map(|p| p.sample(&mut rng))
                .unwrap_or(0.0)
        })
        .collect();
    let model = Derived(PoissonRandomEffect::new(x));
    // The derived gradients against central differences, at a point of the parameter space.
    let z0 = vec![0.3; model.0.n_data()];
    println!("{}", check_gradients(&model, &[0.5, 0.2], &z0, 1e-5)?);

    // The defaults for a model of one's own: no learning rate or Langevin step to choose. Newton
    // M-steps, the Langevin step from the posteriors' curvature, EM until its stopping rule, then
    // Newton steps on ℓ itself (`polish`) with the score and Louis' observed information.
    // Starting from b = 0 would be a poor choice: ℓ is even in b, so b = 0 is a saddle.
    let trace =
        AutomatedEm::new(&model, EmSettings::default()).run(&[0.0, 1.0], 1, None, &mut |e| {
            if let EmEvent::BackOff(b) = e {
                eprintln!("backed off: {}", b.reason);
            }
            Control::Continue
        })?;

    let gh = GaussHermite::new(100);
    println!(
        "automated EM: {} M-steps, its stopping rule met: {}; EM's estimate a = {:.4}, b = {:.4}, log-likelihood {:.4}",
        trace.msteps.len(),
        trace.converged,
        trace.estimate[0],
        trace.estimate[1],
        log_likelihood(&model, &trace.estimate, &gh)?
    );
    let pol = trace
        .polished
        .as_ref()
        .ok_or_else(|| trace.polish_error.clone().unwrap_or_default())?;
    let info = &pol.information;
    println!(
        "polished  a = {:.4}, b = {:.4}  (Monte Carlo se {:.4?}), log-likelihood {:.4}, gap estimates {:.4?}, converged: {}",
        pol.estimate[0],
        pol.estimate[1],
        pol.mc_se,
        log_likelihood(&model, &pol.estimate, &gh)?,
        pol.gaps,
        pol.converged
    );
    println!(
        "standard errors a: {:.4}, b: {:.4}; 95% Wald intervals {:.3?}",
        info.se[0], info.se[1], info.wald95
    );
    // Possible here because z is one-dimensional: the MLE by quadrature.
    let mle = maximum_likelihood(&model, &pol.estimate, &gh)?;
    println!(
        "MLE       a = {:.4}, b = {:.4}, log-likelihood {:.4}",
        mle.x[0], mle.x[1], -mle.f
    );
    Ok(())
}
