//! Automated EM on your own latent-variable model: a Poisson regression with a random effect,
//! X_i | Z_i ~ Poisson(exp(a + b·Z_i)), Z_i ~ N(0, 1), θ = (a, b). Implement `LatentModel` (log p(x, z; θ)
//! with its gradients in z and θ), hand it to `AutomatedEm`, and compare with the maximum-likelihood
//! estimate by quadrature (possible here because z is one-dimensional).
//!
//! Run: `cargo run --release -p sagd --example custom_em`

use rand::SeedableRng;
use rand_distr::{Distribution, Poisson, StandardNormal};
use rand_xoshiro::Xoshiro256PlusPlus;
use sagd::em::{maximum_likelihood, AutomatedEm, EmSettings, StopRule};
use sagd::error::LogpError;
use sagd::langevin::Scheme;
use sagd::model::LatentModel;
use sagd::quadrature::{log_likelihood, GaussHermite};
use sagd::run::Control;

/// Counts x_i with log-normal rates.
struct PoissonRandomEffect {
    x: Vec<f64>,
    /// log x_i! for the normalising constant.
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

impl LatentModel<f64> for PoissonRandomEffect {
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
    fn log_joint(
        &self,
        th: &[f64],
        data: &[usize],
        z: &[f64],
        logp: &mut [f64],
        grad_z: &mut [f64],
    ) -> Result<(), LogpError> {
        for (r, &i) in data.iter().enumerate() {
            let eta = th[0] + th[1] * z[r];
            let mu = eta.exp();
            logp[r] = self.x[i] * eta
                - mu
                - self.log_fact[i]
                - 0.5 * z[r] * z[r]
                - 0.918_938_533_204_672_8;
            grad_z[r] = (self.x[i] - mu) * th[1] - z[r];
        }
        Ok(())
    }
    fn add_grad_theta(
        &self,
        th: &[f64],
        data: &[usize],
        z: &[f64],
        g: &mut [f64],
    ) -> Result<(), LogpError> {
        for (r, &i) in data.iter().enumerate() {
            let resid = self.x[i] - (th[0] + th[1] * z[r]).exp();
            g[0] += resid;
            g[1] += resid * z[r];
        }
        Ok(())
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
    let model = PoissonRandomEffect::new(x);

    // The paper's E1 settings, BAOAB, a smaller step (the rates make the posteriors narrow), and the
    // Monte Carlo-aware stopping rule.
    let mut settings = EmSettings {
        max_msteps: 40,
        stopping: Some(StopRule::default()),
        ..EmSettings::paper_e1()
    };
    settings.sagd.langevin.scheme = Scheme::Baoab;
    settings.sagd.schedules.learning_rate = sagd::schedule::Schedule::constant(0.05);
    let trace =
        AutomatedEm::new(&model, settings).run(&[0.0, 0.0], 1, None, &mut |_| Control::Continue)?;

    let gh = GaussHermite::new(100);
    let mle = maximum_likelihood(&model, &trace.estimate, &gh)?;
    let ll = log_likelihood(&model, &trace.estimate, &gh)?;
    println!(
        "automated EM: {} M-steps, converged: {}",
        trace.msteps.len(),
        trace.converged
    );
    println!(
        "estimate  a = {:.4}, b = {:.4}  (± {:?}), log-likelihood {:.4}",
        trace.estimate[0], trace.estimate[1], trace.estimate_se, ll
    );
    println!(
        "MLE       a = {:.4}, b = {:.4}, log-likelihood {:.4}",
        mle.x[0], mle.x[1], -mle.f
    );
    Ok(())
}
