//! Convolutions as products on the engine's GEMM: square images stored channels-last (a row is
//! H·W·C values, pixel by pixel), square kernels, zero padding.
//!
//! Both layers are a Linear layer on *patches*: gathering, for each of the small grid's positions,
//! the k × k × C window of the big image it sees (im2col), or scattering such windows back with
//! sums (its adjoint, col2im). A convolution gathers its input's windows and multiplies them by W
//! (c_out × k·k·c_in); a transposed convolution multiplies each input pixel by W (k·k·c_out × c_in)
//! and scatters the windows into its output. Their backward passes swap gather and scatter.

use std::cell::RefCell;

use rayon::prelude::*;

use crate::gemm::Epilogue;
use crate::linear::{linear_forward_with, linear_input_grad, linear_param_grad, Transposed};

/// The windows of a convolution: a kernel of side `k` slides with `stride` over a `big` × `big`
/// image of `channels` channels padded by `pad`, visiting `small` × `small` positions.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Windows {
    /// Side of the image the kernel slides over.
    pub big: usize,
    /// Positions per side.
    pub small: usize,
    /// Kernel side.
    pub k: usize,
    /// Stride.
    pub stride: usize,
    /// Zero padding on each side.
    pub pad: usize,
    /// Channels of the big image.
    pub channels: usize,
}

impl Windows {
    /// Values per window: k·k·channels.
    pub fn width(&self) -> usize {
        self.k * self.k * self.channels
    }

    /// Values per big image.
    pub fn image(&self) -> usize {
        self.big * self.big * self.channels
    }

    /// Windows per image.
    pub fn count(&self) -> usize {
        self.small * self.small
    }

    /// For window (oy, ox) and kernel offset (ky, kx): where it reads in the big image, if inside.
    #[inline(always)]
    fn source(&self, o: usize, kk: usize) -> Option<usize> {
        let y = (o / self.small * self.stride + kk / self.k).checked_sub(self.pad)?;
        let x = (o % self.small * self.stride + kk % self.k).checked_sub(self.pad)?;
        (y < self.big && x < self.big).then_some((y * self.big + x) * self.channels)
    }

    /// [`Windows::source`] of every cell (window by window, kernel offset by offset), [`OUTSIDE`]
    /// in the padding: computed once per call, not once per image and cell (a one-channel
    /// layer's cells are single values, cheaper to copy than to locate).
    fn sources(&self) -> Vec<usize> {
        let kk = self.k * self.k;
        (0..self.count() * kk)
            .map(|cell| self.source(cell / kk, cell % kk).unwrap_or(OUTSIDE))
            .collect()
    }

    /// im2col: every window of every image in `img` (images × [`Windows::image`]) into `out`
    /// (images·count × width), zeros outside the image.
    pub fn gather(&self, img: &[f32], out: &mut Vec<f32>) {
        let (c, w) = (self.channels, self.width());
        let images = img.len() / self.image();
        out.resize(images * self.count() * w, 0.0);
        let sources = self.sources();
        for (src, dst) in img
            .chunks_exact(self.image())
            .zip(out.chunks_exact_mut(self.count() * w))
        {
            for (cell, &at) in dst.chunks_exact_mut(c).zip(&sources) {
                match src.get(at..at + c) {
                    Some(v) => cell.iter_mut().zip(v).for_each(|(d, v)| *d = *v),
                    None => cell.fill(0.0),
                }
            }
        }
    }

    /// col2im, the adjoint of [`Windows::gather`]: `img` = Σ of the windows in `cols` at their
    /// places (overwritten, not added to).
    pub fn scatter(&self, cols: &[f32], img: &mut [f32]) {
        let (c, w) = (self.channels, self.width());
        img.fill(0.0);
        let sources = self.sources();
        for (src, dst) in cols
            .chunks_exact(self.count() * w)
            .zip(img.chunks_exact_mut(self.image()))
        {
            for (cell, &at) in src.chunks_exact(c).zip(&sources) {
                if let Some(d) = dst.get_mut(at..at + c) {
                    d.iter_mut().zip(cell).for_each(|(d, v)| *d += v);
                }
            }
        }
    }
}

/// A cell of [`Windows::sources`] in the padding: past any image, so that slicing there fails.
const OUTSIDE: usize = usize::MAX / 2;

/// Side of a convolution's output: (side + 2·pad − k)/stride + 1.
pub fn conv_out_side(side: usize, k: usize, stride: usize, pad: usize) -> usize {
    (side + 2 * pad).saturating_sub(k) / stride.max(1) + 1
}

/// Side of a transposed convolution's output: (side − 1)·stride − 2·pad + k.
pub fn conv_t_out_side(side: usize, k: usize, stride: usize, pad: usize) -> usize {
    ((side.max(1) - 1) * stride + k).saturating_sub(2 * pad)
}

/// Floats of windows per chunk of images (512 KB): a layer gathers, multiplies and scatters a
/// chunk at a time, so its windows stay in the core's cache between the product and the
/// gather or scatter beside it, instead of a whole batch's (10 MB for 100 images in E3's first
/// transposed convolution) going out to memory and back. The chunks run side by side on rayon's
/// threads: a chunk's product is too small to split, and a pass of one piece of images (E3's
/// VAE runs two) would otherwise keep its convolutions on one core.
const CHUNK_FLOATS: usize = 1 << 17;

/// Images per chunk for these windows (fixed by the shapes, so the bits do not depend on the
/// threads).
fn chunk_images(win: &Windows) -> usize {
    (CHUNK_FLOATS / (win.count() * win.width()).max(1)).max(1)
}

/// Working buffers of a convolution layer's passes, reused between calls.
#[derive(Clone, Debug, Default)]
pub(crate) struct ConvBuffers {
    /// Per chunk of the last backward pass: its ∂W then ∂b, added in chunk order once every chunk
    /// has run ([`add_chunks`]).
    pub partials: Vec<Vec<f32>>,
    /// W's transpose for the forward product.
    pub wt: Transposed,
}

/// One chunk's windows and their gradients: a thread's, reused by every convolution it runs.
#[derive(Default)]
struct ChunkBuffers {
    /// A convolution's input windows, or a transposed convolution's product before the scatter.
    cols: Vec<f32>,
    /// ∂L/∂(the windows).
    dcols: Vec<f32>,
    /// A transposed convolution's ∂ of its bias-free product's bias, which is not used.
    scratch: Vec<f32>,
}

thread_local! {
    static CHUNK: RefCell<ChunkBuffers> = RefCell::new(ChunkBuffers::default());
}

/// `f` on this thread's chunk buffers, or on fresh ones while a chunk on this thread holds them
/// (a large product inside a chunk may run another chunk on its thread while it waits).
fn with_chunk<R>(f: impl FnOnce(&mut ChunkBuffers) -> R) -> R {
    CHUNK.with(|c| match c.try_borrow_mut() {
        Ok(mut bufs) => f(&mut bufs),
        Err(_) => f(&mut ChunkBuffers::default()),
    })
}

/// A backward pass's work per chunk: its index, its share of ∂L/∂x (if wanted) and its buffer
/// for ∂W, ∂b (if wanted).
type ChunkTask<'a> = (usize, Option<&'a mut [f32]>, Option<&'a mut Vec<f32>>);

/// The tasks of a backward pass over `chunks` chunks whose ∂L/∂x share `dx_per` values each:
/// `partials` sized to `params` floats per chunk when parameter gradients are wanted.
fn chunk_tasks<'a>(
    chunks: usize,
    dx: Option<&'a mut [f32]>,
    dx_per: usize,
    partials: &'a mut Vec<Vec<f32>>,
    params: Option<usize>,
) -> Vec<ChunkTask<'a>> {
    let mut dxs: Vec<Option<&mut [f32]>> = match dx {
        Some(dx) => dx.chunks_mut(dx_per.max(1)).map(Some).collect(),
        None => Vec::new(),
    };
    dxs.resize_with(chunks, || None);
    let mut parts: Vec<Option<&mut Vec<f32>>> = match params {
        Some(n) => {
            partials.resize_with(chunks, Vec::new);
            partials[..chunks]
                .iter_mut()
                .map(|p| {
                    p.resize(n, 0.0);
                    Some(p)
                })
                .collect()
        }
        None => Vec::new(),
    };
    parts.resize_with(chunks, || None);
    dxs.into_iter()
        .zip(parts)
        .enumerate()
        .map(|(c, (dx, part))| (c, dx, part))
        .collect()
}

/// `out` ← the chunks' parameter gradients `parts` added in chunk order, over `out` (`ep` =
/// Store) or onto it: the same bits as each chunk's product landing in `out` in turn, since each
/// product is summed from zero and added to what is there in one rounding.
fn add_chunks(parts: &[Vec<f32>], out: &mut [f32], ep: Epilogue<'_>) {
    let parts: Vec<&[f32]> = parts.iter().map(|p| &p[..out.len()]).collect();
    let rest = match (ep, parts.split_first()) {
        (Epilogue::Store, Some((first, rest))) => {
            out.copy_from_slice(first);
            rest
        }
        (Epilogue::Store, None) => {
            out.fill(0.0);
            &[]
        }
        _ => &parts[..],
    };
    sagd::parallel::add_parts(rest, out);
}

/// Convolution forward: y (images × small²·c_out) = windows(x) · Wᵀ + b, chunk by chunk.
pub(crate) fn conv_forward(
    win: &Windows,
    x: &[f32],
    w: &[f32],
    b: &[f32],
    y: &mut Vec<f32>,
    c_out: usize,
    buf: &mut ConvBuffers,
) {
    let (inp, per, out) = (win.width(), chunk_images(win), win.count() * c_out);
    y.resize(x.len() / win.image() * out, 0.0);
    let wt = buf.wt.of(w, (inp, c_out));
    x.par_chunks(per * win.image())
        .zip(y.par_chunks_mut(per * out))
        .for_each(|(xc, yc)| {
            with_chunk(|cb| {
                win.gather(xc, &mut cb.cols);
                linear_forward_with(&cb.cols, w, wt, Epilogue::Bias(b), yc, (inp, c_out));
            })
        });
}

/// Convolution backward from ∂L/∂y `g` at the input `x`: ∂W, ∂b into `dwb` if given (W then b;
/// added, or written over with its epilogue `Store`), and ∂L/∂x into `dx` if given (its images
/// overwritten). The windows are gathered again, a chunk at a time, rather than kept from the
/// forward pass.
#[allow(clippy::too_many_arguments)]
pub(crate) fn conv_backward(
    win: &Windows,
    g: &[f32],
    x: &[f32],
    w: &[f32],
    c_out: usize,
    buf: &mut ConvBuffers,
    dwb: Option<(&mut [f32], Epilogue<'_>)>,
    dx: Option<&mut [f32]>,
) {
    let (inp, per, out) = (win.width(), chunk_images(win), win.count() * c_out);
    let (xs, gs) = (per * win.image(), per * out);
    let chunks = x.len().div_ceil(xs.max(1));
    let params = dwb.as_ref().map(|_| inp * c_out + c_out);
    let tasks = chunk_tasks(chunks, dx, xs, &mut buf.partials, params);
    tasks.into_par_iter().for_each(|(c, dx, part)| {
        let xc = &x[c * xs..((c + 1) * xs).min(x.len())];
        let gc = &g[c * gs..((c + 1) * gs).min(g.len())];
        with_chunk(|cb| {
            if let Some(part) = part {
                win.gather(xc, &mut cb.cols);
                let (dw, db) = part.split_at_mut(inp * c_out);
                linear_param_grad(gc, &cb.cols, dw, db, (inp, c_out), 0, Epilogue::Store);
            }
            if let Some(dx) = dx {
                cb.dcols.resize(gc.len() / c_out * inp, 0.0);
                linear_input_grad(gc, w, &mut cb.dcols, (inp, c_out), Epilogue::Store);
                win.scatter(&cb.dcols, dx);
            }
        })
    });
    if let Some((dwb, ep)) = dwb {
        add_chunks(&buf.partials[..chunks], dwb, ep);
    }
}

/// Transposed convolution forward: y = scatter(x · Wᵀ) + b per channel, x (images × small²·c_in),
/// W (k·k·c_out × c_in), y (images × big²·c_out), chunk by chunk.
pub(crate) fn conv_t_forward(
    win: &Windows,
    x: &[f32],
    w: &[f32],
    b: &[f32],
    y: &mut Vec<f32>,
    c_in: usize,
    buf: &mut ConvBuffers,
) {
    let (out, per, small) = (win.width(), chunk_images(win), win.count() * c_in);
    y.resize(x.len() / small * win.image(), 0.0);
    let wt = buf.wt.of(w, (c_in, out));
    x.par_chunks(per * small)
        .zip(y.par_chunks_mut(per * win.image()))
        .for_each(|(xc, yc)| {
            with_chunk(|cb| {
                cb.cols.resize(xc.len() / c_in * out, 0.0);
                linear_forward_with(xc, w, wt, Epilogue::Store, &mut cb.cols, (c_in, out));
                win.scatter(&cb.cols, yc);
            });
            for px in yc.chunks_exact_mut(win.channels) {
                for (v, bias) in px.iter_mut().zip(b) {
                    *v += bias;
                }
            }
        });
}

/// Transposed convolution backward from ∂L/∂y `g`: ∂W, ∂b into `dwb` if given (added, or written
/// over with its epilogue `Store`), ∂L/∂x into `dx` if given.
#[allow(clippy::too_many_arguments)]
pub(crate) fn conv_t_backward(
    win: &Windows,
    g: &[f32],
    x: &[f32],
    w: &[f32],
    c_in: usize,
    buf: &mut ConvBuffers,
    dwb: Option<(&mut [f32], Epilogue<'_>)>,
    dx: Option<&mut [f32]>,
) {
    let (out, per, small) = (win.width(), chunk_images(win), win.count() * c_in);
    let (xs, gs) = (per * small, per * win.image());
    let chunks = x.len().div_ceil(xs.max(1));
    let params = dwb.as_ref().map(|_| out * c_in);
    let tasks = chunk_tasks(chunks, dx, xs, &mut buf.partials, params);
    tasks.into_par_iter().for_each(|(c, dx, part)| {
        let xc = &x[c * xs..((c + 1) * xs).min(x.len())];
        let gc = &g[c * gs..((c + 1) * gs).min(g.len())];
        with_chunk(|cb| {
            win.gather(gc, &mut cb.dcols);
            if let Some(part) = part {
                cb.scratch.resize(out, 0.0);
                let (dw, db) = (&mut part[..], &mut cb.scratch);
                linear_param_grad(&cb.dcols, xc, dw, db, (c_in, out), 0, Epilogue::Store);
            }
            if let Some(dx) = dx {
                linear_input_grad(&cb.dcols, w, dx, (c_in, out), Epilogue::Store);
            }
        })
    });
    if let Some((dwb, ep)) = dwb {
        let (dw, db) = dwb.split_at_mut(out * c_in);
        add_chunks(&buf.partials[..chunks], dw, ep);
        if matches!(ep, Epilogue::Store) {
            db.fill(0.0);
        }
        channel_sums(g, db);
    }
}

/// db[c] += Σ over pixels of g[.., c] (channels-last rows), in pixel order.
pub(crate) fn channel_sums(g: &[f32], db: &mut [f32]) {
    for px in g.chunks_exact(db.len()) {
        for (d, v) in db.iter_mut().zip(px) {
            *d += v;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scatter_is_the_adjoint_of_gather() {
        // ⟨gather(a), b⟩ = ⟨a, scatter(b)⟩ on an odd geometry with padding.
        let win = Windows {
            big: 7,
            small: conv_out_side(7, 3, 2, 1),
            k: 3,
            stride: 2,
            pad: 1,
            channels: 2,
        };
        assert_eq!(win.small, 4);
        let a: Vec<f32> = (0..2 * win.image())
            .map(|i| ((i * 37) % 11) as f32 - 5.0)
            .collect();
        let mut ga = Vec::new();
        win.gather(&a, &mut ga);
        let b: Vec<f32> = (0..ga.len()).map(|i| ((i * 13) % 7) as f32 - 3.0).collect();
        let mut sb = vec![0.0; a.len()];
        win.scatter(&b, &mut sb);
        let lhs: f64 = ga.iter().zip(&b).map(|(x, y)| (*x * *y) as f64).sum();
        let rhs: f64 = a.iter().zip(&sb).map(|(x, y)| (*x * *y) as f64).sum();
        assert_eq!(lhs, rhs);
    }

    #[test]
    fn a_small_convolution_by_hand() {
        // One 3 × 3 single-channel image, a 2 × 2 kernel, stride 1, no padding: each output is
        // the window's weighted sum plus the bias.
        let win = Windows {
            big: 3,
            small: 2,
            k: 2,
            stride: 1,
            pad: 0,
            channels: 1,
        };
        let x = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0];
        let w = [1.0, 0.0, 0.0, -1.0];
        let mut y = Vec::new();
        let mut buf = ConvBuffers::default();
        conv_forward(&win, &x, &w, &[0.5], &mut y, 1, &mut buf);
        // x[i][j] − x[i+1][j+1] = −4 everywhere.
        assert_eq!(y, vec![-3.5; 4]);
        // The transposed convolution of a single 1 at the centre of a 2 × 2 input paints the
        // kernel: with stride 1, no padding, output 3 × 3.
        let twin = Windows {
            big: 3,
            small: 2,
            k: 2,
            stride: 1,
            pad: 0,
            channels: 1,
        };
        let mut yt = Vec::new();
        conv_t_forward(
            &twin,
            &[0.0, 0.0, 0.0, 1.0],
            &w,
            &[0.0],
            &mut yt,
            1,
            &mut buf,
        );
        assert_eq!(yt, vec![0.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, -1.0]);
    }
}
