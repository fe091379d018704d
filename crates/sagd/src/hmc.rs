//! Hamiltonian Monte Carlo: L leapfrog steps from a fresh momentum, then a Metropolis test per chain.
//! It runs on the Langevin module's splitting code, so a chain set steps under either kernel, and
//! each step's [`crate::langevin::StepInfo`] carries the acceptance and energy change.

use serde::{Deserialize, Serialize};

use crate::error::{positive, Result, SagdError};
use crate::langevin::{Kernel, Op};
use crate::real::Real;

/// Settings of the HMC kernel.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct HmcSettings {
    /// The leapfrog step size ε.
    pub step_size: f64,
    /// Leapfrog steps per proposal (the paper's comparison uses L = 5).
    pub n_leapfrog: usize,
}

impl Default for HmcSettings {
    fn default() -> Self {
        HmcSettings {
            step_size: 0.02,
            n_leapfrog: 5,
        }
    }
}

impl HmcSettings {
    /// The kernel: ρ ~ N(0, I), L × (B(ε/2) A(ε) B(ε/2)), Metropolis.
    pub fn kernel<T: Real>(&self) -> Result<Kernel<T>> {
        positive(
            "step_size",
            self.step_size,
            "the leapfrog step size must be a finite number > 0",
        )?;
        if self.n_leapfrog == 0 {
            return Err(SagdError::InvalidSetting {
                name: "n_leapfrog",
                value: "0".into(),
                fix: "use at least one leapfrog step per proposal".into(),
            });
        }
        let half = T::of(self.step_size / 2.0);
        let kick = Op::Kick {
            decay: T::one(),
            grad: half,
            noise: T::zero(),
        };
        let mut ops = vec![Op::Refresh];
        for _ in 0..self.n_leapfrog {
            ops.extend([kick, Op::Drift(T::of(self.step_size)), Op::Gradient, kick]);
        }
        Ok(Kernel {
            ops,
            metropolis: true,
        })
    }
}
