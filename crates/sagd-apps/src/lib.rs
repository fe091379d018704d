//! # sagd-apps — the paper's applications
//!
//! Each application is a composition of the algorithm (`sagd`) and, for the neural ones, the
//! engine (`sagd-nn`): typed settings whose `Default` is the paper's experiment as the project's
//! specification makes it exact, a `run` that drives the one runner, and a `Serialize` result with
//! the tables and figure series computed here, so the command-line tool only fills settings and
//! draws.
//!
//! * [`e1`]: automated EM on the Gamma-sigmoid model beside exact gradient ascent and the MLE
//!   (Figure 1).
//! * [`debias`]: the debiased VAE — Table 1, Figure 2 — and the deconvolution of a user's data.
//! * [`mnist`]: E3, the SAGD-refined generator on MNIST, on the CPU engine or the GPU.
//! * `gpu_check` (deprecated): the GPU engine against the CPU engine on these experiments'
//!   networks, estimators and training; it leaves the library for `sagd bench gpu` and its test.

#![warn(missing_docs)]

pub mod debias;
pub mod e1;
#[deprecated(
    note = "the GPU's agreement checks leave the library in the next release: run `sagd bench gpu` \
            (or the test `gpu_check` with --include-ignored)"
)]
#[doc(hidden)]
pub mod gpu_check;
mod laps;
pub mod mnist;

/// How E2's and E3's seeds are split into their parts' streams, in the keys of their checkpoints
/// and cached pre-trainings: a run saved under another split is not resumed or reused. "named":
/// by [`sagd::rng::Seed::stream`] (before, by numbered parts and offsets).
pub const SEED_STREAMS: &str = "named";
