//! Networks a user might build, for the engine's tests on either device: random stacks of
//! convolutions, transposed convolutions, Linear layers and activations, fixed by a seed.

use sagd_nn::math::Activation;
use sagd_nn::{Layer, Sequential};

/// A small integer generator, so that the architectures are fixed by their seed.
pub struct Draw(pub u64);

impl Draw {
    /// A number in 0..n.
    pub fn below(&mut self, n: u64) -> usize {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((self.0 >> 33) % n) as usize
    }

    /// `n` values in [−1, 1].
    pub fn values(&mut self, n: usize) -> Vec<f32> {
        (0..n)
            .map(|_| self.below(2001) as f32 / 1000.0 - 1.0)
            .collect()
    }
}

/// A network of 2 to 5 weighted layers: from a flat input or an image of 1-3 channels 4, 6 or 8
/// pixels a side, each layer a convolution halving the side, a transposed convolution doubling
/// it, or a Linear layer (to a flat width or to an image), with a random activation between.
pub fn random_net(seed: u64) -> Sequential {
    let mut r = Draw(seed);
    let acts = [
        Activation::Relu,
        Activation::Tanh,
        Activation::Softplus,
        Activation::Sigmoid,
    ];
    let (k, stride, pad) = (4, 2, 1);
    let mut image = (r.below(2) == 0).then(|| (1 + r.below(3), [4, 6, 8][r.below(3)]));
    let mut width = match image {
        Some((c, side)) => c * side * side,
        None => 1 + r.below(20),
    };
    let depth = 2 + r.below(4);
    let mut layers = Vec::new();
    for i in 0..depth {
        let kind = r.below(3);
        let c_out = 1 + r.below(6);
        match image {
            Some((c_in, side)) if kind == 0 && side % 2 == 0 => {
                layers.push(Layer::Conv {
                    c_in,
                    c_out,
                    side,
                    k,
                    stride,
                    pad,
                });
                image = Some((c_out, side / 2));
            }
            Some((c_in, side)) if kind == 1 && side <= 8 => {
                layers.push(Layer::ConvT {
                    c_in,
                    c_out,
                    side,
                    k,
                    stride,
                    pad,
                });
                image = Some((c_out, side * 2));
            }
            _ if r.below(2) == 0 => {
                let (c, side) = (1 + r.below(4), [2, 4][r.below(2)]);
                layers.push(Layer::Linear {
                    inp: width,
                    out: c * side * side,
                });
                image = Some((c, side));
            }
            _ => {
                let out = 1 + r.below(40);
                layers.push(Layer::Linear { inp: width, out });
                image = None;
                width = out;
            }
        }
        if let Some((c, side)) = image {
            width = c * side * side;
        }
        if i + 1 < depth {
            layers.push(Layer::Act {
                act: acts[r.below(4)],
            });
        }
    }
    Sequential::new(layers)
}
