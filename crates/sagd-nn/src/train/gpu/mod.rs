//! The estimators on a GPU, over the CUDA backend ([`crate::cuda`]): the bounds' and the chains'
//! [`GradientEstimator`](super::GradientEstimator)s, each the CPU's twin beside it in [`super`]
//! step for step, driven by the same [`Training`](super::Training) job.

mod bound;
mod chains;
mod state;

pub(crate) use bound::BoundPass;
pub use bound::GpuBoundEstimator;
pub use chains::GpuChainEstimator;
pub(crate) use state::{last_pass, on_host, placed, DeviceState, Grads, OnDevice};
