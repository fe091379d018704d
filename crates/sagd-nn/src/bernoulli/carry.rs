//! Chains that persist between an image's visits (`Chains::refresh_every`): each image's chains
//! kept where its last visit left them, restarted from the encoder every `refresh_every`-th visit.

use serde::{Deserialize, Serialize};

use super::{Carried, Chains};

/// Every training image's chains (C per image, d values each) where its last visit left them,
/// and its visits so far: part of the estimator's checkpointed state. Empty until chains persist.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub(super) struct ChainStore {
    visits: Vec<u64>,
    u: Vec<f32>,
    rho: Vec<f32>,
}

impl ChainStore {
    /// The chains of the minibatch `batch` (of `images` training images) for a pass: an image's
    /// continue on every visit but the `refresh_every`-th ones (its first among them), which start
    /// afresh from the encoder.
    pub(super) fn carried(
        &mut self,
        images: usize,
        batch: &[usize],
        chains: &Chains,
        d: usize,
    ) -> Carried {
        let (per_image, b) = (chains.per_image, batch.len());
        if self.visits.len() != images {
            *self = ChainStore {
                visits: vec![0; images],
                u: vec![0.0; images * per_image * d],
                rho: vec![0.0; images * per_image * d],
            };
        }
        let refresh = chains.refresh_every.unwrap_or(1).max(1) as u64;
        let mut out = Carried {
            from: vec![false; per_image * b],
            u: vec![0.0; per_image * b * d],
            rho: vec![0.0; per_image * b * d],
        };
        for (image, row, at) in slots(batch, per_image, d) {
            if self.visits[image].is_multiple_of(refresh) {
                continue;
            }
            out.from[row] = true;
            out.u[row * d..(row + 1) * d].copy_from_slice(&self.u[at..at + d]);
            out.rho[row * d..(row + 1) * d].copy_from_slice(&self.rho[at..at + d]);
        }
        out
    }

    /// Keeps the chains a pass over `batch` left in `last` and counts the images' visits.
    pub(super) fn keep(&mut self, batch: &[usize], chains: &Chains, d: usize, last: &Carried) {
        for &image in batch {
            self.visits[image] += 1;
        }
        for (_, row, at) in slots(batch, chains.per_image, d) {
            self.u[at..at + d].copy_from_slice(&last.u[row * d..(row + 1) * d]);
            self.rho[at..at + d].copy_from_slice(&last.rho[row * d..(row + 1) * d]);
        }
    }
}

/// Each chain of the minibatch `batch` (C = `per_image` per image): its image, its row in the
/// pass (chain c of the batch's i-th image is row c·b + i) and where the store keeps it.
fn slots(
    batch: &[usize],
    per_image: usize,
    d: usize,
) -> impl Iterator<Item = (usize, usize, usize)> + '_ {
    let b = batch.len();
    batch.iter().enumerate().flat_map(move |(i, &image)| {
        (0..per_image).map(move |c| (image, c * b + i, (image * per_image + c) * d))
    })
}
