//! MNIST (experiment E3): the data set. The four IDX files ship with the project in `data/mnist`
//! ([`shipped_dir`]); `--data DIR` reads any folder with the same four files, gzipped or not
//! (Fashion-MNIST has the same format). E3's networks ([`e3`]), and its run ([`experiment`]); the
//! model's passes on either device are sagd-nn's ([`sagd_nn::bernoulli`]).

pub mod experiment;
pub mod idx;
pub mod model;

/// E3's passes on the GPU, now [`sagd_nn::bernoulli::gpu`]'s (an application holds no device code).
#[deprecated(
    note = "E3's GPU passes moved to sagd-nn: use sagd_nn::bernoulli::gpu::{GpuPasses, Pass} \
            (the names GpuE3 and E3Pass leave in the next release)"
)]
#[doc(hidden)]
pub mod gpu {
    pub use sagd_nn::bernoulli::gpu::{GpuPasses as GpuE3, Pass as E3Pass};
}

use std::path::{Path, PathBuf};

pub use idx::IdxError;

use sagd_nn::math::Activation;
use sagd_nn::{Layer, Sequential};

/// Pixels per image side.
pub const SIDE: usize = 28;

/// Pixels per image.
pub const PIXELS: usize = SIDE * SIDE;

/// One split of the data: images (count × 784 bytes, row-major) and their labels.
#[derive(Clone, Debug, PartialEq)]
pub struct Split {
    /// The pixels, 0-255.
    pub images: Vec<u8>,
    /// The labels, 0-9.
    pub labels: Vec<u8>,
}

impl Split {
    /// The number of images.
    pub fn len(&self) -> usize {
        self.labels.len()
    }

    /// Whether there are no images.
    pub fn is_empty(&self) -> bool {
        self.labels.is_empty()
    }

    /// Image `i`'s pixels.
    pub fn image(&self, i: usize) -> &[u8] {
        &self.images[i * PIXELS..(i + 1) * PIXELS]
    }

    /// The first `n` images (all if fewer).
    pub fn head(&self, n: usize) -> Split {
        let n = n.min(self.len());
        Split {
            images: self.images[..n * PIXELS].to_vec(),
            labels: self.labels[..n].to_vec(),
        }
    }
}

/// The training and test splits.
#[derive(Clone, Debug, PartialEq)]
pub struct Mnist {
    /// 60000 images for MNIST.
    pub train: Split,
    /// 10000 images for MNIST.
    pub test: Split,
}

/// The folder of the MNIST files that ship with the project.
pub fn shipped_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../data/mnist")
}

/// `name` in `dir`, gzipped (`name.gz`) if that exists, else plain.
fn find(dir: &Path, name: &str) -> PathBuf {
    let gz = dir.join(format!("{name}.gz"));
    if gz.exists() {
        gz
    } else {
        dir.join(name)
    }
}

/// Reads one split: `{prefix}-images-idx3-ubyte` and `{prefix}-labels-idx1-ubyte` in `dir`.
fn read_split(dir: &Path, prefix: &str) -> Result<Split, IdxError> {
    let ip = find(dir, &format!("{prefix}-images-idx3-ubyte"));
    let lp = find(dir, &format!("{prefix}-labels-idx1-ubyte"));
    let images = idx::read(&ip, 3)?;
    let labels = idx::read(&lp, 1)?;
    if images.dims[1..] != [SIDE, SIDE] {
        return Err(IdxError::Mismatch {
            what: ip.display().to_string(),
            detail: format!(
                "images of {} × {} pixels; the networks take {SIDE} × {SIDE}",
                images.dims[1], images.dims[2]
            ),
        });
    }
    if images.dims[0] != labels.dims[0] {
        return Err(IdxError::Mismatch {
            what: format!("{} and {}", ip.display(), lp.display()),
            detail: format!(
                "{} images but {} labels: the two files are from different data sets",
                images.dims[0], labels.dims[0]
            ),
        });
    }
    Ok(Split {
        images: images.data,
        labels: labels.data,
    })
}

/// Reads the four files from `dir` (`train-*` and `t10k-*`, gzipped or not).
pub fn load(dir: &Path) -> Result<Mnist, IdxError> {
    Ok(Mnist {
        train: read_split(dir, "train")?,
        test: read_split(dir, "t10k")?,
    })
}

/// ReLU, between all of E3's layers.
const RELU: Layer = Layer::Act {
    act: Activation::Relu,
};

/// E3's resampling layers: kernel 4, stride 2, padding 1, halving the side (`Conv`) or doubling it
/// (`ConvT`, with `up`).
fn resample(up: bool, c_in: usize, c_out: usize, side: usize) -> Layer {
    let (k, stride, pad) = (4, 2, 1);
    if up {
        Layer::ConvT {
            c_in,
            c_out,
            side,
            k,
            stride,
            pad,
        }
    } else {
        Layer::Conv {
            c_in,
            c_out,
            side,
            k,
            stride,
            pad,
        }
    }
}

/// E3's generator h_θ(u), images channels-last: FC d → 1024 → 7·7·64, ReLU after each;
/// transposed convolutions 64 → 32 (7 → 14), ReLU, and 32 → 1 (14 → 28), all of kernel 4,
/// stride 2, padding 1; 784 Bernoulli logits out.
pub fn generator(d: usize) -> Sequential {
    Sequential::new(vec![
        Layer::Linear { inp: d, out: 1024 },
        RELU,
        Layer::Linear {
            inp: 1024,
            out: 7 * 7 * 64,
        },
        RELU,
        resample(true, 64, 32, 7),
        RELU,
        resample(true, 32, 1, 14),
    ])
}

/// E3's model for latent dimension `d`: the VAE of binary images with [`generator`] and
/// [`encoder`] (which fit together for any `d`; `d` = 0 is refused when a run's settings are
/// checked).
pub fn e3(d: usize) -> model::E3 {
    model::E3 {
        d,
        gen: generator(d),
        enc: encoder(d),
    }
}

/// E3's encoder q_φ(u | x) = N(μ, diag e^(log σ²)): convolutions 1 → 32 (28 → 14) and 32 → 64
/// (14 → 7), kernel 4, stride 2, padding 1, ReLU after each; FC 7·7·64 → 1024, ReLU, → 2d
/// (μ, then log σ²).
pub fn encoder(d: usize) -> Sequential {
    Sequential::new(vec![
        resample(false, 1, 32, SIDE),
        RELU,
        resample(false, 32, 64, SIDE / 2),
        RELU,
        Layer::Linear {
            inp: 7 * 7 * 64,
            out: 1024,
        },
        RELU,
        Layer::Linear {
            inp: 1024,
            out: 2 * d,
        },
    ])
}

#[cfg(test)]
mod tests {
    use super::*;

    /// E3's networks fit together as sagd-nn's checks require, and the deprecated GPU names
    /// are the moved types.
    #[test]
    #[allow(deprecated)]
    fn e3_is_a_bernoulli_vae_and_the_old_gpu_names_resolve() {
        use std::any::TypeId;
        let m = e3(20);
        let checked = model::BernoulliVae::new(m.gen.clone(), m.enc.clone()).expect("they fit");
        assert_eq!((checked, m.pixels()), (m, PIXELS));
        assert_eq!(
            TypeId::of::<gpu::GpuE3>(),
            TypeId::of::<sagd_nn::bernoulli::gpu::GpuPasses>()
        );
        assert_eq!(
            TypeId::of::<gpu::E3Pass<'static>>(),
            TypeId::of::<sagd_nn::bernoulli::gpu::Pass<'static>>()
        );
    }

    #[test]
    fn the_networks_have_the_spec_shapes() {
        let (g, e) = (generator(20), encoder(20));
        assert_eq!((g.input_dim(), g.output_dim()), (20, PIXELS));
        assert_eq!((e.input_dim(), e.output_dim()), (PIXELS, 40));
        // PyTorch's parameter counts for the same layers.
        let linear = |i: usize, o: usize| i * o + o;
        let conv = |ci: usize, co: usize| ci * co * 16 + co;
        assert_eq!(
            g.n_params(),
            linear(20, 1024) + linear(1024, 3136) + conv(64, 32) + conv(32, 1)
        );
        assert_eq!(
            e.n_params(),
            conv(1, 32) + conv(32, 64) + linear(3136, 1024) + linear(1024, 40)
        );
    }
}
