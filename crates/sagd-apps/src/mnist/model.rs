//! E3's model: sagd-nn's VAE of binary images ([`sagd_nn::bernoulli`]) with the spec's networks
//! ([`super::e3`]), and its passes on either device. Its items keep the names E3's code has
//! always used here.

pub use sagd_nn::bernoulli::{
    binarise, binarise_with, encode, generate, held_out, sagd_batch, sagd_batch_continued,
    sagd_noise_blocks, sagd_noise_len, uniforms, vae_batch, BatchInfo, BernoulliVae, Buffers,
    Carried, Chains, HeldOut, Scratch, FINAL_PIECES, PIECES, SUB_ROWS,
};

/// E3's model: the VAE of binary images, with [`super::e3`]'s networks.
pub type E3 = BernoulliVae;
