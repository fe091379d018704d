//! # sagd-nn — the neural engine and the neural models it trains
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
//! * [`likelihood`]: the decoder's likelihood p(x | h), a parameter of the posterior and of every
//!   estimator (the paper's Gaussian by default; a Gaussian of known sd, Bernoulli, Poisson, or a user's
//!   own).
//! * [`train`]: one training job for every method, differing only in the gradient estimator.
//! * [`bernoulli`]: the VAE of binary images (E3's model, any networks) and its minibatch passes
//!   (ELBO, SAGD's chains, the held-out likelihood) on either device.
//! * [`cuda`]: the CUDA backend, the same networks on an NVIDIA GPU, loaded at run time; the
//!   estimators on it are [`train`]'s `Gpu*` twins of the CPU's.
//!
//! The paper's neural experiments (the debiased VAE, MNIST) are compositions of these parts in
//! `sagd-apps`, which holds their data, networks' shapes and runs, and no device code.

#![warn(missing_docs)]

pub mod bernoulli;
mod conv;
pub mod cuda;
mod device;
mod gemm;
pub mod likelihood;
mod linear;
pub mod math;
mod net;
mod program;
pub mod train;
pub mod vae;

pub use device::Device;
pub use net::{
    Layer, PackedWeights, ParamGrads, ParamTerms, SavedError, Sequential, Workspace, WorkspacePool,
    CHUNK_ROWS, MIN_PIECE_ROWS,
};
