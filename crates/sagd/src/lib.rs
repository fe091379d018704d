//! # sagd — Stochastic Approximate Gradient Descent
//!
//! Minimises F(θ) = E_{ξ~π}[f(θ; ξ)] when π is known only up to a constant, by building each
//! gradient from a short underdamped Langevin chain (Qiu and Wang, AAAI 2020, Algorithm 1), with the
//! schedules for the Langevin step δ_t, the chain length K_t and the learning rate α_t that come
//! with the paper's convergence theorems.
//!
//! ```text
//! model (log p(x, z; θ) and its gradients)          model.rs
//!   → sampler (underdamped Langevin chains on z)    langevin/, hmc.rs
//!     → gradient estimate (chain average of ∇θ f)   solver.rs
//!       → update (transform, projection, averaging) optim/ (UpdateRule)
//!         → observers (history, checkpoints)        run/ (Solver, Runner)
//! ```
//!
//! Every iterative job is a [`run::Solver`] driven by the one [`run::Runner`]: Algorithm 1 on a
//! [`model::Problem`] ([`solver::Sagd::on`]), automated EM ([`em::EmSolver`]), and, in `sagd-nn`,
//! network training. This crate holds no experiment: the paper's applications, with their
//! settings as defaults, live in `sagd-apps`.
//!
//! # Example: the mean of a distribution known up to a constant
//!
//! F(θ) = E_π ‖θ − ξ‖²/2 is minimised at θ* = E_π ξ. With π = N(3, 1) and Theorem 3's schedules:
//!
//! ```
//! use sagd::prelude::*;
//!
//! /// f(θ; ξ) = ‖θ − ξ‖²/2 with π = N(3, I₂): one chain.
//! struct Mean;
//! impl Problem<f64> for Mean {
//!     fn theta_dim(&self) -> usize { 2 }
//!     fn n_chains(&self) -> usize { 1 }
//!     fn chain_dim(&self) -> usize { 2 }
//!     fn log_target(&self, _a: &[f64], _r: usize, xi: &[f64], lp: &mut [f64], g: &mut [f64])
//!         -> Result<(), LogpError> {
//!         lp[0] = -0.5 * xi.iter().map(|x| (x - 3.0).powi(2)).sum::<f64>();
//!         for (gi, x) in g.iter_mut().zip(xi) { *gi = 3.0 - x; }
//!         Ok(())
//!     }
//!     fn add_grad_f(&self, th: &[f64], _r: usize, xi: &[f64], g: &mut [f64])
//!         -> Result<(), LogpError> {
//!         for ((gi, t), x) in g.iter_mut().zip(th).zip(xi) { *gi += t - x; }
//!         Ok(())
//!     }
//! }
//!
//! let settings = SagdSettings {
//!     schedules: Schedules::theorem3(0.2, 2.0, 1.0),
//!     langevin: LangevinSettings { scheme: Scheme::Baoab, gamma: 1.0 },
//!     ..Default::default()
//! };
//! let solver = Sagd::new(settings);
//! let mut state = solver.init(&Mean, &[0.0, 0.0], &[0.0, 0.0], 42).unwrap();
//! Runner::new(solver.on(&Mean, 200)).run(&mut state).unwrap();
//! assert!(state.theta_avg().iter().all(|t| (t - 3.0).abs() < 0.3));
//! ```

#![warn(missing_docs)]

#[doc(hidden)]
pub mod bench;
// Which kernels this CPU runs: for the workspace's reports and benches, not a model's user.
#[doc(hidden)]
pub mod cpu;
pub mod diagnostics;
pub mod em;
pub mod error;
pub mod glmm;
pub mod hmc;
pub(crate) mod lanes;
pub mod langevin;
pub(crate) mod linalg;
pub mod metric;
#[doc(hidden)]
pub mod metrics;
pub mod model;
pub mod optim;
#[doc(hidden)]
pub mod parallel;
pub mod quadrature;
// `Real` is the prelude's (one trait; the path stays for programs that name it).
#[doc(hidden)]
pub mod real;
#[doc(hidden)]
pub mod rng;
pub mod run;
pub mod schedule;
pub mod share;
pub mod solver;

/// The names most programs need.
pub mod prelude {
    pub use crate::em::{
        louis_information, polish, AutomatedEm, EmEvent, EmSettings, EstimateStatus, PolishSettings,
    };
    pub use crate::error::{LogpError, Result, SagdError};
    pub use crate::hmc::HmcSettings;
    pub use crate::langevin::{
        ChainSet, Kernel, LangevinSettings, LangevinStep, Momentum, Scheme, StepInfo,
    };
    pub use crate::model::{
        Derived, LatentModel, LogDensity, LogJoint, MaximumLikelihood, Problem, Scalar,
    };
    pub use crate::optim::{Averaging, Optimizer, Projection, UpdateRule};
    pub use crate::real::Real;
    pub use crate::run::{Control, History, Observer, Outcome, Runner, Solver};
    pub use crate::schedule::{LengthSchedule, Schedule, Schedules};
    pub use crate::solver::{Anchor, IterInfo, Sagd, SagdSettings, SagdState};
}
