//! # sagd-nn — a small CPU neural-network engine and the debiased VAE
//!
//! The neural models of the paper run on an engine of our own (the Rust tensor frameworks measured two to four times slower than PyTorch on these small batched networks): every
//! layer has an explicit forward pass that keeps what the backward pass needs, and a backward pass
//! that returns the gradient with respect to its input and, when asked, its parameters (skipped during
//! Langevin steps, which need only ∇u). Parameters live in one flat `f32` vector per network, so that
//! the core crate's optimisers, checkpoints and `LatentModel` trait apply unchanged.

#![warn(missing_docs)]

pub mod debias;
pub mod gemm;
pub mod math;
pub mod net;
pub mod train;
pub mod vae;

pub use math::Activation;
pub use net::{Layer, SavedError, Sequential, Workspace, WorkspacePool, CHUNK_ROWS};
