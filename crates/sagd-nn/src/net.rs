//! Layers and networks: Linear and activations in a `Sequential`, parameters in a flat vector.

use std::path::Path;

use rand::SeedableRng;
use rand_xoshiro::Xoshiro256PlusPlus;
use serde::{Deserialize, Serialize};

use crate::conv::{
    channel_sums, conv_backward, conv_forward, conv_out_side, conv_t_backward, conv_t_forward,
    conv_t_out_side, ConvBuffers, Windows,
};
use crate::gemm::{gemm, gemm_panels, Epilogue, Panels, Strided};
use crate::math::{self, Activation};

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

/// Wᵀ of a Linear layer, kept while W stays the same: a chain's many evaluations at one θ
/// transpose it once.
#[derive(Clone, Debug, Default)]
pub(crate) struct Transposed {
    w: Vec<f32>,
    transposed: Vec<f32>,
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

/// A row-major matrix with `cols` columns, as the A operand of [`gemm`].
fn by_rows(data: &[f32], cols: usize) -> Strided<'_> {
    Strided {
        data,
        rows: cols,
        cols: 1,
    }
}

/// The transpose of a row-major matrix with `cols` columns, as the A operand of [`gemm`].
fn by_cols(data: &[f32], cols: usize) -> Strided<'_> {
    Strided {
        data,
        rows: 1,
        cols,
    }
}

/// Weights per Linear layer from which [`Sequential::pack`] packs it: E3's 1024 × 3136 layers,
/// not E2's (at most 64 × 64), whose products stay on unpacked weights.
const PACK_MIN_WEIGHTS: usize = 1 << 18;

/// A wide Linear layer's W packed for its two products with a batch.
#[derive(Clone, Debug)]
struct PackedLayer {
    /// Wᵀ (inp × out), for y = x Wᵀ + b.
    forward: Panels,
    /// W (out × inp), for ∂L/∂x = g W, when packed for backward passes.
    input_grad: Option<Panels>,
}

/// The wide Linear layers' weights of one parameter vector, packed once
/// ([`Sequential::pack`]) for the many passes of a minibatch at those parameters (SAGD's chains
/// evaluate the generator ten times per chain at one θ). The products then give the same bits
/// as on unpacked weights with fewer rows.
#[derive(Clone, Debug, Default)]
pub struct PackedWeights {
    layers: Vec<Option<PackedLayer>>,
}

impl PackedWeights {
    /// Layer `i`'s packed weights, if it has them.
    fn layer(&self, i: usize) -> Option<&PackedLayer> {
        self.layers.get(i).and_then(Option::as_ref)
    }
}

/// y = x Wᵀ, finished by `ep` (Store, Bias or BiasRelu). A width-1 output is a row of dot
/// products, cheaper by hand than as a product with one column. `wt` keeps Wᵀ between calls.
#[multiversion::multiversion(targets("x86_64+avx512f+avx512dq+avx512vl+fma", "x86_64+avx2+fma"))]
pub(crate) fn linear_forward(
    x: &[f32],
    w: &[f32],
    ep: Epilogue<'_>,
    y: &mut [f32],
    (inp, out): (usize, usize),
    wt: &mut Transposed,
) {
    let rows = y.len() / out;
    if out == 1 {
        let (b0, relu) = match ep {
            Epilogue::Bias(b) => (b[0], false),
            Epilogue::BiasRelu(b) => (b[0], true),
            _ => (0.0, false),
        };
        for (yr, xr) in y.iter_mut().zip(x.chunks_exact(inp)) {
            let v = b0 + dot(xr, w);
            *yr = if relu { math::relu(v) } else { v };
        }
        return;
    }
    if rows * inp * out >= crate::gemm::PACKED_MIN {
        crate::gemm::gemm_wt(rows, out, inp, by_rows(x, inp), w, y, out, ep);
        return;
    }
    // Wᵀ by rows (inp × out), so that the kernel reads B by contiguous rows (for inp = 1, W is
    // already its own transpose).
    let wt = if inp == 1 {
        w
    } else {
        // Bitwise, without an early exit, so that the comparison runs in vector registers.
        let same = wt.w.len() == w.len()
            && wt
                .w
                .iter()
                .zip(w)
                .fold(0u32, |acc, (a, b)| acc | (a.to_bits() ^ b.to_bits()))
                == 0;
        if !same {
            wt.w.clear();
            wt.w.extend_from_slice(w);
            wt.transposed.resize(inp * out, 0.0);
            // In 16 × 16 tiles: a wide W transposed element by element misses the cache on
            // every write.
            const T: usize = 16;
            for j0 in (0..out).step_by(T) {
                for r0 in (0..inp).step_by(T) {
                    let r1 = (r0 + T).min(inp);
                    for j in j0..(j0 + T).min(out) {
                        let column = wt.transposed[r0 * out + j..].iter_mut().step_by(out);
                        for (t, v) in column.zip(&w[j * inp + r0..j * inp + r1]) {
                            *t = *v;
                        }
                    }
                }
            }
        }
        &wt.transposed[..]
    };
    gemm(rows, out, inp, by_rows(x, inp), wt, out, y, out, ep);
}

/// dW += gᵀ x and db += Σ_rows g for the output units j0..j0 + db.len() (those rows of W, in
/// `dw`), or dW = gᵀ x and db = Σ_rows g with `ep` = Store (the same bits as adding into zeros).
/// Every element is the same fused multiply-add chain over the rows whatever the range, so a
/// layer's gradient cut into ranges computed apart has the same bits.
pub(crate) fn linear_param_grad(
    g: &[f32],
    x: &[f32],
    dw: &mut [f32],
    db: &mut [f32],
    (inp, out): (usize, usize),
    j0: usize,
    ep: Epilogue<'_>,
) {
    let rows = g.len() / out;
    let n = db.len();
    let g = &g[j0..];
    if inp == 1 {
        // W is out × 1: its gradient as one row, xᵀ g.
        gemm(1, n, rows, by_cols(x, 1), g, out, dw, n, ep);
    } else {
        gemm(n, inp, rows, by_cols(g, out), x, inp, dw, inp, ep);
    }
    // db = 1ᵀ g: a stride-0 A reads the one 1.
    let ones = Strided {
        data: &[1.0],
        rows: 0,
        cols: 0,
    };
    gemm(1, n, rows, ones, g, out, db, n, ep);
}

/// What a backward pass leaves for ∂L/∂params when the products are deferred
/// ([`ParamGrads::Keep`]): per Linear layer, its input and the gradient at its output,
/// for the pass's rows. The products of many passes then run in parallel over the parameters
/// ([`Sequential::add_param_grads`]) instead of each pass summing into a copy of all of them.
#[derive(Clone, Debug, Default)]
pub struct ParamTerms {
    x: Vec<Vec<f32>>,
    g: Vec<Vec<f32>>,
    /// A transposed convolution's ∂L/∂output, which its bias's gradient sums.
    gb: Vec<Vec<f32>>,
}

/// Tasks per Linear layer of [`Sequential::add_param_grads`] (16: the 1-D networks offer over 64
/// pieces of work), each of at least [`MIN_TILE`] output units.
const TILES_PER_LAYER: usize = 16;

/// The fewest output units per task of [`Sequential::add_param_grads`].
const MIN_TILE: usize = 4;

/// Where a backward pass puts ∂L/∂params.
pub enum ParamGrads<'a> {
    /// Nowhere (∂L/∂input only).
    Skip,
    /// Added into this vector.
    Add(&'a mut [f32]),
    /// Written into this vector, every element overwritten (no zeroing beforehand: the same bits
    /// as `Add` into zeros).
    Set(&'a mut [f32]),
    /// Kept as terms, for [`Sequential::add_param_grads`] (the same bits as `Add` for Linear
    /// layers and for convolutions whose windows fit one chunk; a convolution over more images
    /// sums its chunks in another order).
    Keep(&'a mut ParamTerms),
}

/// dx = g W, finished by `below`: Store, or the derivative of the activation below the layer
/// (Scale by it, or Positive for a ReLU's output). A width-1 input is a column of dot products,
/// by hand.
#[multiversion::multiversion(targets("x86_64+avx512f+avx512dq+avx512vl+fma", "x86_64+avx2+fma"))]
pub(crate) fn linear_input_grad(
    g: &[f32],
    w: &[f32],
    dx: &mut [f32],
    (inp, out): (usize, usize),
    below: Epilogue<'_>,
) {
    let rows = g.len() / out;
    if inp == 1 {
        for (dr, gr) in dx.iter_mut().zip(g.chunks_exact(out)) {
            *dr = dot(gr, w);
        }
        match below {
            Epilogue::Scale(s) => math::scale(dx, s),
            Epilogue::Positive(y) => math::relu_backward(dx, y),
            _ => {}
        }
        return;
    }
    gemm(rows, inp, out, by_rows(g, out), w, inp, dx, inp, below);
}

/// Σ a_i b_i with eight partial sums (vectorises; fixed order).
#[inline(always)]
fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0.0f32; 8];
    let (ca, cb) = (a.chunks_exact(8), b.chunks_exact(8));
    let (ra, rb) = (ca.remainder(), cb.remainder());
    for (x, y) in ca.zip(cb) {
        for l in 0..8 {
            acc[l] = x[l].mul_add(y[l], acc[l]);
        }
    }
    for (l, (x, y)) in ra.iter().zip(rb).enumerate() {
        acc[l] = x.mul_add(*y, acc[l]);
    }
    ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]))
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

    /// Forward pass over `rows` inputs (rows × input_dim, row-major); the output is
    /// `ws.output()`.
    pub fn forward(&self, params: &[f32], x: &[f32], rows: usize, ws: &mut Workspace) {
        self.forward_packed(params, &PackedWeights::default(), x, rows, ws);
    }

    /// The wide Linear layers' weights of `params`, packed for [`Sequential::forward_packed`], and
    /// with `input_grad` for [`Sequential::backward_packed`]'s ∂L/∂x too, into `packed` (its
    /// memory reused; the panels packed side by side on rayon's threads).
    pub fn pack(&self, params: &[f32], input_grad: bool, packed: &mut PackedWeights) {
        packed.layers.resize_with(self.layers.len(), || None);
        for (i, (l, slot)) in self.layers.iter().zip(&mut packed.layers).enumerate() {
            let Layer::Linear { inp, out } = *l else {
                *slot = None;
                continue;
            };
            if inp * out < PACK_MIN_WEIGHTS {
                *slot = None;
                continue;
            }
            let w = &params[self.offsets[i]..self.offsets[i] + inp * out];
            let pl = slot.get_or_insert_with(|| PackedLayer {
                forward: Panels::default(),
                input_grad: None,
            });
            pl.forward.pack(
                Strided {
                    data: w,
                    rows: 1,
                    cols: inp,
                },
                inp,
                out,
            );
            match (input_grad, &mut pl.input_grad) {
                (true, Some(p)) => p.pack(by_rows(w, inp), out, inp),
                (true, none) => {
                    let mut p = Panels::default();
                    p.pack(by_rows(w, inp), out, inp);
                    *none = Some(p);
                }
                (false, g) => *g = None,
            }
        }
    }

    /// [`Sequential::forward`] with the wide layers' weights `packed` from these `params` by
    /// [`Sequential::pack`].
    pub fn forward_packed(
        &self,
        params: &[f32],
        packed: &PackedWeights,
        x: &[f32],
        rows: usize,
        ws: &mut Workspace,
    ) {
        debug_assert_eq!(params.len(), self.n_params);
        debug_assert_eq!(x.len(), rows * self.inp);
        ws.rows = rows;
        ws.acts.resize_with(self.layers.len() + 1, Vec::new);
        ws.wt.resize_with(self.layers.len(), Default::default);
        ws.derivs.resize_with(self.layers.len(), Vec::new);
        ws.conv.resize_with(self.layers.len(), Default::default);
        ws.acts[0].clear();
        ws.acts[0].extend_from_slice(x);
        // A Linear layer under a ReLU writes the ReLU's output itself, in its product's store.
        let mut fused = false;
        for (i, l) in self.layers.iter().enumerate() {
            if std::mem::take(&mut fused) {
                continue;
            }
            let relu_above = matches!(
                self.layers.get(i + 1),
                Some(Layer::Act {
                    act: Activation::Relu
                })
            );
            let (done, rest) = ws.acts.split_at_mut(i + 1);
            let xin = &done[i];
            let y = &mut rest[0];
            match *l {
                Layer::Linear { inp, out } => {
                    let off = self.offsets[i];
                    let w = &params[off..off + inp * out];
                    let b = &params[off + inp * out..off + inp * out + out];
                    // The ReLU's output, acts[i + 2], in place of the product's.
                    fused = relu_above;
                    let y = if fused { &mut rest[1] } else { y };
                    let ep = if fused {
                        Epilogue::BiasRelu(b)
                    } else {
                        Epilogue::Bias(b)
                    };
                    y.resize(rows * out, 0.0);
                    match packed.layer(i) {
                        Some(pl) => gemm_panels(rows, by_rows(xin, inp), &pl.forward, y, out, ep),
                        None => linear_forward(xin, w, ep, y, (inp, out), &mut ws.wt[i]),
                    }
                }
                Layer::Act {
                    act: Activation::Relu,
                } => {
                    y.resize(xin.len(), 0.0);
                    math::relu_forward(xin, y);
                }
                Layer::Act { act } => {
                    y.resize(xin.len(), 0.0);
                    let dy = &mut ws.derivs[i];
                    dy.resize(xin.len(), 0.0);
                    math::forward(act, xin, y, dy);
                }
                Layer::Conv { c_out, .. } => {
                    let (w, b, win) = self.conv_parts(i, params);
                    conv_forward(&win, xin, w, b, y, c_out, &mut ws.conv[i]);
                }
                Layer::ConvT { c_in, .. } => {
                    let (w, b, win) = self.conv_parts(i, params);
                    conv_t_forward(&win, xin, w, b, y, c_in, &mut ws.conv[i]);
                }
            }
        }
    }

    /// Backward pass after [`Sequential::forward`]: `dout` is ∂L/∂output (rows × output_dim).
    /// Adds ∂L/∂params into `dparams` if given, and writes ∂L/∂x into `dx` if given.
    pub fn backward(
        &self,
        params: &[f32],
        ws: &mut Workspace,
        dout: &[f32],
        dparams: Option<&mut [f32]>,
        dx: Option<&mut [f32]>,
    ) {
        let grads = match dparams {
            Some(dp) => ParamGrads::Add(dp),
            None => ParamGrads::Skip,
        };
        self.backward_with(params, ws, dout, grads, dx);
    }

    /// Floats a pass keeps per row with [`ParamGrads::Keep`]: each Linear layer's input and
    /// output widths, each convolution's windows and gradients.
    pub fn terms_per_row(&self) -> usize {
        self.layers
            .iter()
            .map(|l| match *l {
                Layer::Linear { inp, out } => inp + out,
                Layer::Act { .. } => 0,
                Layer::Conv { c_out, .. } => {
                    l.windows().map_or(0, |w| w.count() * (w.width() + c_out))
                }
                Layer::ConvT { c_in, .. } => l
                    .windows()
                    .map_or(0, |w| w.small * w.small * (c_in + w.width()) + w.image()),
            })
            .sum()
    }

    /// Adds ∂L/∂params of the kept passes `parts` into `dparams`, in parallel over groups of
    /// output units of each Linear layer, each summing the parts in order: the
    /// same bits for any number of threads, and as [`Sequential::backward`] on each part in turn.
    pub fn add_param_grads(&self, parts: &[&ParamTerms], dparams: &mut [f32]) {
        use rayon::prelude::*;
        /// Rows j0.. of layer i's W (and of its b, when the bias is the products' own), or the
        /// bias of a transposed convolution.
        enum Task<'a> {
            Rows(usize, usize, &'a mut [f32], Option<&'a mut [f32]>),
            Bias(usize, &'a mut [f32]),
        }
        let mut tasks: Vec<Task<'_>> = Vec::new();
        let mut rest = dparams;
        let mut at = 0;
        for (i, l) in self.layers.iter().enumerate() {
            let Some((inp, out)) = self.product_shape(l) else {
                continue;
            };
            let (_, tail) = std::mem::take(&mut rest).split_at_mut(self.offsets[i] - at);
            let (w, tail) = tail.split_at_mut(inp * out);
            let (b, tail) = tail.split_at_mut(l.n_params() - inp * out);
            rest = tail;
            at = self.offsets[i] + l.n_params();
            let tile = out.div_ceil(TILES_PER_LAYER).max(MIN_TILE);
            if let Layer::ConvT { .. } = l {
                for (k, dw) in w.chunks_mut(tile * inp).enumerate() {
                    tasks.push(Task::Rows(i, k * tile, dw, None));
                }
                tasks.push(Task::Bias(i, b));
            } else {
                for (k, (dw, db)) in w.chunks_mut(tile * inp).zip(b.chunks_mut(tile)).enumerate() {
                    tasks.push(Task::Rows(i, k * tile, dw, Some(db)));
                }
            }
        }
        tasks.into_par_iter().for_each(|task| match task {
            Task::Rows(i, j0, dw, db) => {
                let Some((inp, out)) = self.product_shape(&self.layers[i]) else {
                    return;
                };
                let mut scratch = Vec::new();
                let db = match db {
                    Some(db) => db,
                    None => {
                        scratch.resize(dw.len() / inp, 0.0);
                        &mut scratch[..]
                    }
                };
                for p in parts {
                    linear_param_grad(&p.g[i], &p.x[i], dw, db, (inp, out), j0, Epilogue::Add);
                }
            }
            Task::Bias(i, db) => {
                for p in parts {
                    channel_sums(&p.gb[i], db);
                }
            }
        });
    }

    /// The (inputs, outputs) of layer `l`'s product: a Linear layer's widths, a convolution's
    /// window and channels, a transposed convolution's channels and window.
    fn product_shape(&self, l: &Layer) -> Option<(usize, usize)> {
        match *l {
            Layer::Linear { inp, out } => Some((inp, out)),
            Layer::Act { .. } => None,
            Layer::Conv { c_out, .. } => Some((l.windows()?.width(), c_out)),
            Layer::ConvT { c_in, .. } => Some((c_in, l.windows()?.width())),
        }
    }

    /// [`Sequential::backward`] with ∂L/∂params skipped, added, or kept as terms that
    /// [`Sequential::add_param_grads`] adds later.
    pub fn backward_with(
        &self,
        params: &[f32],
        ws: &mut Workspace,
        dout: &[f32],
        sink: ParamGrads<'_>,
        dx: Option<&mut [f32]>,
    ) {
        self.backward_packed(params, &PackedWeights::default(), ws, dout, sink, dx);
    }

    /// [`Sequential::backward_with`] after [`Sequential::forward_packed`], with the same
    /// `packed` weights.
    pub fn backward_packed(
        &self,
        params: &[f32],
        packed: &PackedWeights,
        ws: &mut Workspace,
        dout: &[f32],
        mut sink: ParamGrads<'_>,
        dx: Option<&mut [f32]>,
    ) {
        if let ParamGrads::Keep(t) = &mut sink {
            t.x.resize_with(self.layers.len(), Vec::new);
            t.g.resize_with(self.layers.len(), Vec::new);
            t.gb.resize_with(self.layers.len(), Vec::new);
        }
        let rows = ws.rows;
        let Workspace {
            acts,
            derivs,
            grad,
            grad2,
            conv,
            ..
        } = ws;
        grad.clear();
        grad.extend_from_slice(dout);
        let need_dx = dx.is_some();
        // How the parameter products land: written over the sink, or added into it.
        let lands = match sink {
            ParamGrads::Set(_) => Epilogue::Store,
            _ => Epilogue::Add,
        };
        // An activation's derivative is applied by the Linear layer above it, in its product.
        let mut scaled = false;
        for (i, l) in self.layers.iter().enumerate().rev() {
            let xin = &acts[i];
            match *l {
                Layer::Linear { inp, out } => {
                    let off = self.offsets[i];
                    let w = &params[off..off + inp * out];
                    match &mut sink {
                        ParamGrads::Add(dp) | ParamGrads::Set(dp) => {
                            let (dw, db) = dp[off..off + inp * out + out].split_at_mut(inp * out);
                            linear_param_grad(grad, xin, dw, db, (inp, out), 0, lands);
                        }
                        ParamGrads::Keep(t) => {
                            t.x[i].clear();
                            t.x[i].extend_from_slice(&xin[..rows * inp]);
                            t.g[i].clear();
                            t.g[i].extend_from_slice(&grad[..rows * out]);
                        }
                        ParamGrads::Skip => {}
                    }
                    if i > 0 || need_dx {
                        // A ReLU's derivative comes from its output, this layer's input.
                        let below = match i.checked_sub(1).map(|j| &self.layers[j]) {
                            Some(Layer::Act {
                                act: Activation::Relu,
                            }) => Epilogue::Positive(xin),
                            Some(Layer::Act { .. }) => Epilogue::Scale(&derivs[i - 1][..]),
                            _ => Epilogue::Store,
                        };
                        scaled = !matches!(below, Epilogue::Store);
                        grad2.resize(rows * inp, 0.0);
                        match packed.layer(i).and_then(|pl| pl.input_grad.as_ref()) {
                            Some(panels) => {
                                gemm_panels(rows, by_rows(grad, out), panels, grad2, inp, below)
                            }
                            None => linear_input_grad(grad, w, grad2, (inp, out), below),
                        }
                        std::mem::swap(grad, grad2);
                    }
                }
                Layer::Act { act } => {
                    if !std::mem::take(&mut scaled) {
                        match act {
                            Activation::Relu => math::relu_backward(grad, &acts[i + 1]),
                            _ => math::scale(grad, &derivs[i]),
                        }
                    }
                }
                Layer::Conv { c_out, .. } | Layer::ConvT { c_out, .. } => {
                    let (w, _, win) = self.conv_parts(i, params);
                    let (off, np) = (self.offsets[i], l.n_params());
                    let buf = &mut conv[i];
                    let (in_w, out_w) = l.widths().unwrap_or((0, 0));
                    let (inp, g) = (rows * in_w, &grad[..rows * out_w]);
                    let want_dx = i > 0 || need_dx;
                    if want_dx {
                        grad2.resize(inp, 0.0);
                    }
                    let dx_buf = want_dx.then_some(&mut grad2[..inp]);
                    let (dwb, keep) = match &mut sink {
                        ParamGrads::Add(dp) | ParamGrads::Set(dp) => {
                            (Some((&mut dp[off..off + np], lands)), None)
                        }
                        ParamGrads::Keep(t) => (None, Some(&mut **t)),
                        ParamGrads::Skip => (None, None),
                    };
                    let x = &xin[..inp];
                    if let Layer::ConvT { c_in, .. } = *l {
                        conv_t_backward(&win, g, x, w, c_in, buf, dwb, dx_buf);
                        if let Some(t) = keep {
                            t.x[i].clear();
                            t.x[i].extend_from_slice(x);
                            win.gather(g, &mut t.g[i]);
                            t.gb[i].clear();
                            t.gb[i].extend_from_slice(g);
                        }
                    } else {
                        if let Some(t) = keep {
                            win.gather(x, &mut t.x[i]);
                            t.g[i].clear();
                            t.g[i].extend_from_slice(g);
                        }
                        conv_backward(&win, g, x, w, c_out, buf, dwb, dx_buf);
                    }
                    if want_dx {
                        std::mem::swap(grad, grad2);
                    }
                    scaled = false;
                }
            }
        }
        if let Some(dx) = dx {
            dx.copy_from_slice(&grad[..dx.len()]);
        }
    }

    /// Parameters as JSON: `{"format": "sagd-nn/1", "layers": [...], "params": [...]}`; f32 values
    /// are written in their shortest round-trip form, so reading them back gives the same bits.
    pub fn to_saved(&self, params: &[f32]) -> serde_json::Value {
        serde_json::json!({"format": "sagd-nn/1", "layers": self.layers, "params": params})
    }

    /// Parameters from [`Sequential::to_saved`]'s form, for a network of this shape.
    pub fn from_saved(&self, v: serde_json::Value) -> Result<Vec<f32>, SavedError> {
        #[derive(Deserialize)]
        struct Saved {
            format: String,
            layers: Vec<Layer>,
            params: Vec<f32>,
        }
        let s: Saved = serde_json::from_value(v).map_err(SavedError::NotParameters)?;
        if s.format != "sagd-nn/1" {
            return Err(SavedError::Format(s.format));
        }
        if s.layers != self.layers || s.params.len() != self.n_params {
            return Err(SavedError::Shape);
        }
        Ok(s.params)
    }

    /// Saves parameters as a file of [`Sequential::to_saved`]'s form.
    pub fn save(&self, params: &[f32], path: &Path) -> std::io::Result<()> {
        std::fs::write(path, self.to_saved(params).to_string())
    }

    /// Loads parameters saved by [`Sequential::save`] for a network of this shape.
    pub fn load(&self, path: &Path) -> Result<Vec<f32>, SavedError> {
        let at = |source: SavedError| SavedError::File {
            path: path.display().to_string(),
            source: Box::new(source),
        };
        let text = std::fs::read_to_string(path).map_err(|e| at(SavedError::Io(e)))?;
        let v = serde_json::from_str(&text).map_err(|e| at(SavedError::NotParameters(e)))?;
        self.from_saved(v).map_err(at)
    }
}

/// Why saved parameters cannot be used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SavedError {
    /// The file cannot be read.
    #[error("cannot be read: {0}")]
    Io(#[source] std::io::Error),
    /// Not a sagd-nn parameter set at all.
    #[error("not a sagd-nn parameter set: {0}")]
    NotParameters(#[source] serde_json::Error),
    /// Another format version.
    #[error("format {0}, this version reads sagd-nn/1: save the parameters again")]
    Format(String),
    /// Saved for another network.
    #[error("saved for another network shape: load it into the network it was saved from")]
    Shape,
    /// One of the above, in this file.
    #[error("{path}: {source}")]
    File {
        /// The file.
        path: String,
        /// What is wrong.
        #[source]
        source: Box<SavedError>,
    },
}
