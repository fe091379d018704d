//! Problems with known optima over a non-Gaussian π: independent logistic coordinates.
#![allow(dead_code)]

use sagd::error::LogpError;
use sagd::model::Problem;

/// log(2 cosh y), stably.
fn log2cosh(y: f64) -> f64 {
    y.abs() + (-2.0 * y.abs()).exp().ln_1p()
}

/// Which f(θ; ξ).
#[derive(Clone, Copy)]
pub enum Loss {
    /// ‖θ − ξ‖²/2: convex, minimised at E ξ = μ.
    Square,
    /// Σ (1 − cos(θ_j − ξ_j)): nonconvex, minimised at μ (π symmetric about μ).
    Cosine,
}

/// π = Π_j Logistic(μ_j, s): mean μ, E cos(ξ_j − μ_j) = πs / sinh(πs).
pub struct LogisticProblem {
    pub mu: Vec<f64>,
    pub s: f64,
    pub n_chains: usize,
    pub loss: Loss,
}

impl LogisticProblem {
    pub fn new(mu: Vec<f64>, s: f64, n_chains: usize, loss: Loss) -> Self {
        LogisticProblem {
            mu,
            s,
            n_chains,
            loss,
        }
    }

    /// E cos(ξ_j − μ_j).
    pub fn mean_cos(&self) -> f64 {
        let a = std::f64::consts::PI * self.s;
        a / a.sinh()
    }

    /// The exact gradient ∇F(θ).
    pub fn exact_grad(&self, theta: &[f64]) -> Vec<f64> {
        match self.loss {
            Loss::Square => theta.iter().zip(&self.mu).map(|(t, m)| t - m).collect(),
            Loss::Cosine => theta
                .iter()
                .zip(&self.mu)
                .map(|(t, m)| self.mean_cos() * (t - m).sin())
                .collect(),
        }
    }
}

impl Problem<f64> for LogisticProblem {
    fn theta_dim(&self) -> usize {
        self.mu.len()
    }
    fn n_chains(&self) -> usize {
        self.n_chains
    }
    fn chain_dim(&self) -> usize {
        self.mu.len()
    }
    fn log_target(
        &self,
        _a: &[f64],
        _r: usize,
        xi: &[f64],
        lp: &mut [f64],
        g: &mut [f64],
    ) -> Result<(), LogpError> {
        let d = self.mu.len();
        for ((x, g), lp) in xi
            .chunks_exact(d)
            .zip(g.chunks_exact_mut(d))
            .zip(lp.iter_mut())
        {
            let mut acc = 0.0;
            for j in 0..d {
                let half = 0.5 * (x[j] - self.mu[j]) / self.s;
                acc -= 2.0 * log2cosh(half);
                g[j] = -half.tanh() / self.s;
            }
            *lp = acc;
        }
        Ok(())
    }
    fn add_grad_f(
        &self,
        theta: &[f64],
        _r: usize,
        xi: &[f64],
        g: &mut [f64],
    ) -> Result<(), LogpError> {
        let d = self.mu.len();
        for x in xi.chunks_exact(d) {
            for j in 0..d {
                g[j] += match self.loss {
                    Loss::Square => theta[j] - x[j],
                    Loss::Cosine => (theta[j] - x[j]).sin(),
                };
            }
        }
        Ok(())
    }
}
