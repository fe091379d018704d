//! Layers and networks: Linear and activations in a `Sequential`, parameters in a flat vector.

use std::path::Path;

use rand::SeedableRng;
use rand_xoshiro::Xoshiro256PlusPlus;
use serde::{Deserialize, Serialize};

use crate::conv::{
    channel_sums, conv_backward, conv_forward, conv_out_side, conv_t_backward, conv_t_forward,
    conv_t_out_side, ConvBuffers, Windows,
};
use crate::gemm::{gemm_panels, Epilogue, Panels, Strided};
use crate::math::{self, Activation};

mod pass;
mod saved;

use crate::linear::Transposed;
pub use crate::linear::{PackedWeights, ParamGrads, ParamTerms};
pub use saved::SavedError;

/// One layer.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum Layer {
    /// y = x Wᵀ + b, W of shape (out, inp) row-major, then b: inp·out + out parameters.
    Linear {
        /// Input width.
        inp: usize,
        /// Output width.
        out: usize,
    },
    /// An elementwise activation.
    Act {
        /// Which.
        act: Activation,
    },
    /// A 2-D convolution (PyTorch's `Conv2d`) on square images stored channels-last (a row is
    /// side·side·c_in values, pixel by pixel): W of shape (c_out, k, k, c_in) row-major, then b.
    Conv {
        /// Input channels.
        c_in: usize,
        /// Output channels.
        c_out: usize,
        /// Input side.
        side: usize,
        /// Kernel side.
        k: usize,
        /// Stride.
        stride: usize,
        /// Zero padding on each side.
        pad: usize,
    },
    /// A transposed convolution (PyTorch's `ConvTranspose2d`), the adjoint of [`Layer::Conv`]'s
    /// map from input to output, channels-last: W of shape (k, k, c_out, c_in) row-major, then b.
    ConvT {
        /// Input channels.
        c_in: usize,
        /// Output channels.
        c_out: usize,
        /// Input side.
        side: usize,
        /// Kernel side.
        k: usize,
        /// Stride.
        stride: usize,
        /// Zero padding on each side.
        pad: usize,
    },
}

impl Layer {
    /// Input and output widths of a layer with parameters (`None` for an activation).
    pub fn widths(&self) -> Option<(usize, usize)> {
        match *self {
            Layer::Linear { inp, out } => Some((inp, out)),
            Layer::Act { .. } => None,
            Layer::Conv {
                c_in, c_out, side, ..
            } => {
                let o = self.windows()?.small;
                Some((side * side * c_in, o * o * c_out))
            }
            Layer::ConvT {
                c_in, c_out, side, ..
            } => {
                let o = self.windows()?.big;
                Some((side * side * c_in, o * o * c_out))
            }
        }
    }

    /// The number of parameters: W, then b.
    pub fn n_params(&self) -> usize {
        match *self {
            Layer::Linear { inp, out } => inp * out + out,
            Layer::Act { .. } => 0,
            Layer::Conv { c_in, c_out, k, .. } | Layer::ConvT { c_in, c_out, k, .. } => {
                k * k * c_in * c_out + c_out
            }
        }
    }

    /// The windows a convolution slides over (its input's for `Conv`, its output's for `ConvT`).
    pub(crate) fn windows(&self) -> Option<Windows> {
        match *self {
            Layer::Conv {
                c_in,
                side,
                k,
                stride,
                pad,
                ..
            } => Some(Windows {
                big: side,
                small: conv_out_side(side, k, stride, pad),
                k,
                stride,
                pad,
                channels: c_in,
            }),
            Layer::ConvT {
                c_out,
                side,
                k,
                stride,
                pad,
                ..
            } => Some(Windows {
                big: conv_t_out_side(side, k, stride, pad),
                small: side,
                k,
                stride,
                pad,
                channels: c_out,
            }),
            _ => None,
        }
    }

    /// The weights' fan-in in PyTorch's initial law (its `ConvTranspose2d` counts c_out·k·k).
    fn fan_in(&self) -> usize {
        match *self {
            Layer::Linear { inp, .. } => inp,
            Layer::Act { .. } => 1,
            Layer::Conv { c_in, k, .. } => c_in * k * k,
            Layer::ConvT { c_out, k, .. } => c_out * k * k,
        }
    }
}

/// A stack of layers. It holds the shapes only; parameters are a flat slice passed to every call,
/// laid out layer after layer (each Linear: W row-major, then b).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Sequential {
    layers: Vec<Layer>,
    offsets: Vec<usize>,
    n_params: usize,
    inp: usize,
    out: usize,
}

/// Buffers of one forward pass, kept for the backward pass and reused between calls.
#[derive(Clone, Debug, Default)]
pub struct Workspace {
    rows: usize,
    acts: Vec<Vec<f32>>,
    derivs: Vec<Vec<f32>>,
    grad: Vec<f32>,
    grad2: Vec<f32>,
    /// Per layer: the W that `transposed` was made from, and its transpose.
    wt: Vec<Transposed>,
    /// Per layer: a convolution's windows and their gradients.
    conv: Vec<ConvBuffers>,
}

/// Rows per chunk of the parallel passes (the estimators' chunks and the chains' blocks) for
/// networks up to 64 wide: small enough for a chunk's activations to stay in a core's cache.
/// Wider networks take fewer rows per chunk ([`Sequential::chunk_rows`]).
pub const CHUNK_ROWS: usize = 512;

/// The fewest rows per piece of a parallel pass ([`Sequential::piece_rows`]).
pub const MIN_PIECE_ROWS: usize = 32;

/// Activations of the widest layer per chunk: [`CHUNK_ROWS`] rows of width 64.
const CHUNK_ACTIVATIONS: usize = CHUNK_ROWS * 64;

/// One set of buffers (a [`Workspace`] by default) per worker thread, kept between calls so that
/// each parallel pass reuses warm buffers. Which set a piece of work gets never changes its result.
#[derive(Debug)]
pub struct WorkspacePool<W = Workspace> {
    ws: Vec<std::sync::Mutex<W>>,
}

impl<W> Default for WorkspacePool<W> {
    fn default() -> Self {
        WorkspacePool { ws: Vec::new() }
    }
}

impl<W: Default> WorkspacePool<W> {
    /// Runs `f` on this thread's buffers (fresh ones if those are busy).
    pub fn with<R>(&self, f: impl FnOnce(&mut W) -> R) -> R {
        let i = rayon::current_thread_index().unwrap_or(0);
        match self.ws.get(i).map(|m| m.try_lock()) {
            Some(Ok(mut ws)) => f(&mut ws),
            _ => f(&mut W::default()),
        }
    }

    /// Makes room for `threads` threads' buffers.
    pub fn ensure(&mut self, threads: usize) {
        if self.ws.len() < threads {
            self.ws.resize_with(threads, Default::default);
        }
    }
}

impl Workspace {
    /// The output of the last forward pass (rows × out).
    pub fn output(&self) -> &[f32] {
        self.acts.last().map(|v| &v[..]).unwrap_or(&[])
    }
}

impl Sequential {
    /// A network from its layers. Consecutive widths must match (a convolution's width is its
    /// image's values: side·side·channels).
    pub fn new(layers: Vec<Layer>) -> Self {
        let mut offsets = Vec::with_capacity(layers.len());
        let mut n = 0;
        let mut width: Option<usize> = None;
        let mut inp = 0;
        for l in &layers {
            offsets.push(n);
            if let Some((i, out)) = l.widths() {
                assert!(
                    width.is_none_or(|w| w == i),
                    "{l:?}: input width {i} after width {width:?}"
                );
                if width.is_none() {
                    inp = i;
                }
                width = Some(out);
                n += l.n_params();
            }
        }
        Sequential {
            layers,
            offsets,
            n_params: n,
            inp,
            out: width.unwrap_or(0),
        }
    }

    /// An MLP: Linear layers of the given widths with `act` between them and a linear output.
    pub fn mlp(widths: &[usize], act: Activation) -> Self {
        let mut layers = Vec::new();
        for (i, w) in widths.windows(2).enumerate() {
            if i > 0 {
                layers.push(Layer::Act { act });
            }
            layers.push(Layer::Linear {
                inp: w[0],
                out: w[1],
            });
        }
        Sequential::new(layers)
    }

    /// The number of parameters.
    pub fn n_params(&self) -> usize {
        self.n_params
    }

    /// The input width.
    pub fn input_dim(&self) -> usize {
        self.inp
    }

    /// The output width.
    pub fn output_dim(&self) -> usize {
        self.out
    }

    /// Rows per chunk of a parallel pass through this network: [`CHUNK_ROWS`] up to width 64,
    /// proportionally fewer for wider layers (128 rows at width 256), so that a minibatch of a
    /// wide network still splits into chunks for several threads. Fixed by the shape alone, so
    /// results never depend on the number of threads.
    pub fn chunk_rows(&self) -> usize {
        let widest = self.widest();
        (CHUNK_ACTIVATIONS / widest.max(1)).clamp(1, CHUNK_ROWS)
    }

    /// Rows per piece of a parallel pass over `n` rows through this network
    /// ([`sagd::parallel::piece_rows`]): about 64 pieces or more, but at least [`MIN_PIECE_ROWS`]
    /// (below which each piece's fixed costs, such as checking its layers' cached transposes, eat
    /// the parallel gain) and at most [`Sequential::chunk_rows`].
    pub fn piece_rows(&self, n: usize) -> usize {
        sagd::parallel::piece_rows(n, MIN_PIECE_ROWS, self.chunk_rows())
    }

    /// The widest layer's width (input or output).
    pub(crate) fn widest(&self) -> usize {
        self.layers
            .iter()
            .map(|l| {
                let (i, o) = l.widths().unwrap_or((1, 1));
                // A convolution also keeps its windows.
                let cols = l.windows().map_or(0, |w| w.count() * w.width());
                i.max(o).max(cols)
            })
            .max()
            .unwrap_or(1)
            .max(self.inp)
            .max(self.out)
    }

    /// Convolution `i`'s W, b and windows.
    fn conv_parts<'p>(&self, i: usize, params: &'p [f32]) -> (&'p [f32], &'p [f32], Windows) {
        let l = &self.layers[i];
        let (off, np) = (self.offsets[i], l.n_params());
        let c_out = match *l {
            Layer::Conv { c_out, .. } | Layer::ConvT { c_out, .. } => c_out,
            _ => 0,
        };
        let (w, b) = params[off..off + np].split_at(np - c_out);
        let win = l.windows().unwrap_or(Windows {
            big: 0,
            small: 0,
            k: 0,
            stride: 1,
            pad: 0,
            channels: 0,
        });
        (w, b, win)
    }

    /// Whether the last forward pass in `ws` left every value finite at `rows` among the values
    /// a backward pass reads there whatever the output's gradient: each layer's input of
    /// parameters (its W's gradient multiplies it) and each smooth activation's derivative. A
    /// row whose output gradient is 0 then adds exactly nothing, where 0 × ∞ would make every
    /// parameter's gradient NaN.
    pub(crate) fn rows_finite(&self, ws: &Workspace, rows: &[usize]) -> bool {
        let finite_at = |buf: &[f32]| {
            let width = buf.len() / ws.rows.max(1);
            rows.iter().all(|&r| {
                buf.get(r * width..(r + 1) * width)
                    .is_some_and(|v| v.iter().all(|x| x.is_finite()))
            })
        };
        self.layers.iter().enumerate().all(|(i, l)| match l {
            Layer::Act {
                act: Activation::Relu,
            } => true,
            Layer::Act { .. } => ws.derivs.get(i).is_some_and(|d| finite_at(d)),
            _ => ws.acts.get(i).is_some_and(|a| finite_at(a)),
        })
    }

    /// Where layer `i`'s parameters start in the flat vector.
    pub(crate) fn offset(&self, i: usize) -> usize {
        self.offsets[i]
    }

    /// The layers.
    pub fn layers(&self) -> &[Layer] {
        &self.layers
    }

    /// PyTorch's default initial law for its Linear and convolution layers: W and b uniform on
    /// ±1/√fan_in.
    pub fn init(&self, seed: u64) -> Vec<f32> {
        use rand::RngExt;
        let mut rng = Xoshiro256PlusPlus::seed_from_u64(seed);
        let mut p = vec![0.0f32; self.n_params];
        for (l, off) in self.layers.iter().zip(&self.offsets) {
            if l.n_params() > 0 {
                let bound = 1.0 / (l.fan_in() as f64).sqrt();
                for v in &mut p[*off..off + l.n_params()] {
                    *v = rng.random_range(-bound..bound) as f32;
                }
            }
        }
        p
    }
}
