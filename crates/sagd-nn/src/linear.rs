//! Linear layers' products: the GEMM operands over row-major data, wide weights packed once per
//! parameter value, the forward product with its fused epilogue, and the parameter and input
//! gradients (added, written over, or kept as per-piece terms).

use crate::gemm::{gemm, Epilogue, Panels, Strided};
use crate::math;

/// Wᵀ of a Linear layer, kept while W stays the same: a chain's many evaluations at one θ
/// transpose it once.
#[derive(Clone, Debug, Default)]
pub(crate) struct Transposed {
    w: Vec<f32>,
    transposed: Vec<f32>,
}

/// A row-major matrix with `cols` columns, as the A operand of [`gemm`].
pub(crate) fn by_rows(data: &[f32], cols: usize) -> Strided<'_> {
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

/// Weights per Linear layer from which [`Sequential::pack`](crate::net::Sequential::pack) packs it: E3's 1024 × 3136 layers,
/// not E2's (at most 64 × 64), whose products stay on unpacked weights.
pub(crate) const PACK_MIN_WEIGHTS: usize = 1 << 18;

/// A wide Linear layer's W packed for its two products with a batch.
#[derive(Clone, Debug)]
pub(crate) struct PackedLayer {
    /// Wᵀ (inp × out), for y = x Wᵀ + b.
    pub(crate) forward: Panels,
    /// W (out × inp), for ∂L/∂x = g W, when packed for backward passes.
    pub(crate) input_grad: Option<Panels>,
}

/// The wide Linear layers' weights of one parameter vector, packed once
/// ([`Sequential::pack`](crate::net::Sequential::pack)) for the many passes of a minibatch at those parameters (SAGD's chains
/// evaluate the generator ten times per chain at one θ). The products then give the same bits
/// as on unpacked weights with fewer rows.
#[derive(Clone, Debug, Default)]
pub struct PackedWeights {
    pub(crate) layers: Vec<Option<PackedLayer>>,
}

impl PackedWeights {
    /// Layer `i`'s packed weights, if it has them.
    pub(crate) fn layer(&self, i: usize) -> Option<&PackedLayer> {
        self.layers.get(i).and_then(Option::as_ref)
    }
}

/// y = x Wᵀ, finished by `ep` (Store, Bias or BiasRelu). A width-1 output is a row of dot
/// products, cheaper by hand than as a product with one column. `wt` keeps Wᵀ between calls.
pub(crate) fn linear_forward(
    x: &[f32],
    w: &[f32],
    ep: Epilogue<'_>,
    y: &mut [f32],
    (inp, out): (usize, usize),
    wt: &mut Transposed,
) {
    let rows = y.len() / out;
    let tile = out != 1 && rows * inp * out < crate::gemm::PACKED_MIN;
    let wt = if tile { wt.of(w, (inp, out)) } else { &[] };
    linear_forward_with(x, w, wt, ep, y, (inp, out));
}

impl Transposed {
    /// Wᵀ by rows (inp × out) of W (out × inp), made again only when W changed (for inp = 1, W
    /// is its own transpose): what the tile kernel reads, B by contiguous rows.
    pub(crate) fn of<'a>(&'a mut self, w: &'a [f32], (inp, out): (usize, usize)) -> &'a [f32] {
        if inp == 1 {
            return w;
        }
        // Bitwise, without an early exit, so that the comparison runs in vector registers.
        let same = self.w.len() == w.len()
            && self
                .w
                .iter()
                .zip(w)
                .fold(0u32, |acc, (a, b)| acc | (a.to_bits() ^ b.to_bits()))
                == 0;
        if !same {
            self.w.clear();
            self.w.extend_from_slice(w);
            self.transposed.resize(inp * out, 0.0);
            // In 16 × 16 tiles: a wide W transposed element by element misses the cache on
            // every write.
            const T: usize = 16;
            for j0 in (0..out).step_by(T) {
                for r0 in (0..inp).step_by(T) {
                    let r1 = (r0 + T).min(inp);
                    for j in j0..(j0 + T).min(out) {
                        let column = self.transposed[r0 * out + j..].iter_mut().step_by(out);
                        for (t, v) in column.zip(&w[j * inp + r0..j * inp + r1]) {
                            *t = *v;
                        }
                    }
                }
            }
        }
        &self.transposed[..]
    }
}

sagd::vectorized! {
    /// [`linear_forward`] with Wᵀ made beforehand ([`Transposed::of`]; read only by the tile
    /// kernel's products, so any slice for a width-1 output or a product of at least
    /// [`PACKED_MIN`](crate::gemm::PACKED_MIN) multiply-adds): how a convolution's chunks, side by
    /// side, share one transpose.
    pub(crate) fn linear_forward_with(
        x: &[f32],
        w: &[f32],
        wt: &[f32],
        ep: Epilogue<'_>,
        y: &mut [f32],
        dims: (usize, usize),
    ) {
        let (inp, out) = dims;
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
        gemm(rows, out, inp, by_rows(x, inp), wt, out, y, out, ep);
    }
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
/// ([`Sequential::add_param_grads`](crate::net::Sequential::add_param_grads)) instead of each pass summing into a copy of all of them.
#[derive(Clone, Debug, Default)]
pub struct ParamTerms {
    pub(crate) x: Vec<Vec<f32>>,
    pub(crate) g: Vec<Vec<f32>>,
    /// A transposed convolution's ∂L/∂output, which its bias's gradient sums.
    pub(crate) gb: Vec<Vec<f32>>,
}

/// Tasks per Linear layer of [`Sequential::add_param_grads`](crate::net::Sequential::add_param_grads) (16: the 1-D networks offer over 64
/// pieces of work), each of at least [`MIN_TILE`] output units.
pub(crate) const TILES_PER_LAYER: usize = 16;

/// The fewest output units per task of [`Sequential::add_param_grads`](crate::net::Sequential::add_param_grads).
pub(crate) const MIN_TILE: usize = 4;

/// Where a backward pass puts ∂L/∂params.
pub enum ParamGrads<'a> {
    /// Nowhere (∂L/∂input only).
    Skip,
    /// Added into this vector.
    Add(&'a mut [f32]),
    /// Written into this vector, every element overwritten (no zeroing beforehand: the same bits
    /// as `Add` into zeros).
    Set(&'a mut [f32]),
    /// Kept as terms, for [`Sequential::add_param_grads`](crate::net::Sequential::add_param_grads) (the same bits as `Add` for Linear
    /// layers and for convolutions whose windows fit one chunk; a convolution over more images
    /// sums its chunks in another order).
    Keep(&'a mut ParamTerms),
}

sagd::vectorized! {
    /// dx = g W, finished by `below`: Store, or the derivative of the activation below the layer
    /// (Scale by it, or Positive for a ReLU's output). A width-1 input is a column of dot products,
    /// by hand.
    pub(crate) fn linear_input_grad(
        g: &[f32],
        w: &[f32],
        dx: &mut [f32],
        dims: (usize, usize),
        below: Epilogue<'_>,
    ) {
        let (inp, out) = dims;
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
