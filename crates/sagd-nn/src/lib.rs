//! # sagd-nn — a small CPU neural-network engine and the debiased VAE
//!
//! The neural models of the paper run on an engine of our own (the Rust tensor frameworks
//! measured two to four times slower than PyTorch on these small batched networks): every layer
//! has an explicit forward pass that keeps what the backward pass needs, and a backward pass that
//! returns the gradient with respect to its input and, when asked, its parameters (skipped during
//! Langevin steps, which need only ∇u). Parameters live in one flat `f32` vector per network, so
//! that the core crate's update rule, runner and `LatentModel` trait apply unchanged.
//!
//! * The engine: [`Sequential`] networks of [`Layer`]s with their [`Workspace`]s, and the
//!   vectorised activations of [`math`].
//! * [`vae`]: the VAE's networks and the decoder's posterior as a `LatentModel`.
//! * [`train`]: one training job for every method, differing only in the gradient estimator.
//! * [`debias`]: the debiased-VAE application (Table 1, Figure 2, deconvolution).

#![warn(missing_docs)]

mod conv;
pub mod cuda;
pub mod debias;
mod device;
mod gemm;
pub mod math;
pub mod mnist;
mod net;
pub mod train;
pub mod vae;

pub use device::Device;
pub use net::{
    Layer, PackedWeights, ParamGrads, ParamTerms, SavedError, Sequential, Workspace, WorkspacePool,
    CHUNK_ROWS, MIN_PIECE_ROWS,
};
