//! The dense products of the engine's layers: C = A·B with a register-tiled kernel (6 rows × 64
//! columns of C in registers) that reads A through strides and B by contiguous rows, so none of
//! the layers' three products (forward, ∂/∂input, ∂/∂W) packs its operands. On the E2 shapes this
//! replaced `matrixmultiply`, whose packing took a third of its time (see `benches/engine.rs`).
//!
//! Every element of C is one fused multiply-add chain over the reduction index in order, started
//! from zero, then finished by the [`Epilogue`]: the same bits on every instruction set. The
//! kernels themselves are in `kernel.rs`.

mod kernel;

#[cfg(test)]
use kernel::FORCED;
#[cfg(target_arch = "x86_64")]
use kernel::{avx2, avx512};
use kernel::{kernel_capability, Carried};
use sagd::cpu::Capability;

/// Columns of C per tile: four 16-lane vectors.
const NR: usize = 64;
/// Rows of C per tile: 6 × 4 accumulators leave registers for B's row and A's broadcast.
const MR: usize = 6;

/// How a finished tile of A·B lands in C.
#[derive(Clone, Copy, Debug)]
pub enum Epilogue<'a> {
    /// c = ab.
    Store,
    /// c += ab.
    Add,
    /// c = ab + bias_j.
    Bias(&'a [f32]),
    /// c = ab · s_(i·ldc + j): the derivative of the activation below a layer, in its backward pass.
    Scale(&'a [f32]),
    /// c = max(ab + bias_j, 0): a layer and the ReLU above it in one pass.
    BiasRelu(&'a [f32]),
    /// c = ab · 1(p_(i·ldc + j) > 0): the derivative of a ReLU below a layer, from the ReLU's output
    /// p (multiplied by 1 or 0, the same bits as [`Epilogue::Scale`] by the derivative).
    Positive(&'a [f32]),
}

/// Checks C (m × n, row stride `ldc`), the epilogue's slice and A (m × k) against the shapes,
/// for m, n ≥ 1.
#[allow(clippy::too_many_arguments)]
fn check(
    m: usize,
    n: usize,
    k: usize,
    a: Strided<'_>,
    c: &[f32],
    ldc: usize,
    ep: Epilogue<'_>,
    what: &str,
) {
    assert!(
        ldc >= n && c.len() >= (m - 1) * ldc + n,
        "{what}: C too short"
    );
    match ep {
        Epilogue::Bias(b) | Epilogue::BiasRelu(b) => {
            assert!(b.len() >= n, "{what}: bias too short")
        }
        Epilogue::Scale(s) | Epilogue::Positive(s) => {
            assert!(s.len() >= (m - 1) * ldc + n, "{what}: scale too short")
        }
        Epilogue::Store | Epilogue::Add => {}
    }
    if k > 0 {
        assert!(
            a.data.len() > (m - 1) * a.rows + (k - 1) * a.cols,
            "{what}: A too short"
        );
    }
}

/// A matrix read through strides: element (i, r) is `data[i·rows + r·cols]`.
#[derive(Clone, Copy, Debug)]
pub struct Strided<'a> {
    /// The elements.
    pub data: &'a [f32],
    /// Stride between rows.
    pub rows: usize,
    /// Stride between columns.
    pub cols: usize,
}

/// C (m × n, row stride `ldc`) ← A (m × k) · B (k × n, row stride `ldb`), finished by `ep`.
///
/// # Panics
/// If a slice is too short for the shapes and strides (a bug in the caller, not bad input).
#[allow(clippy::too_many_arguments)]
pub fn gemm(
    m: usize,
    n: usize,
    k: usize,
    a: Strided<'_>,
    b: &[f32],
    ldb: usize,
    c: &mut [f32],
    ldc: usize,
    ep: Epilogue<'_>,
) {
    if m == 0 || n == 0 {
        return;
    }
    check(m, n, k, a, c, ldc, ep, "gemm");
    if k > 0 {
        assert!(
            ldb >= n && b.len() >= (k - 1) * ldb + n,
            "gemm: B too short"
        );
    }
    if k > 0 && m * n * k >= PACKED_MIN {
        let b = Strided {
            data: b,
            rows: ldb,
            cols: 1,
        };
        packed(m, n, k, a, b, c, ldc, ep);
        return;
    }
    let wide = kernel_capability();
    for j0 in (0..n).step_by(NR) {
        let w = NR.min(n - j0);
        // SAFETY: C holds (m−1)·ldc + n elements (asserted), and nothing else touches it.
        unsafe {
            columns(
                m,
                k,
                a,
                &b[j0..],
                ldb,
                (j0, w),
                c.as_mut_ptr(),
                ldc,
                ep,
                wide,
                Carried::ZERO,
            )
        };
    }
}

/// Columns j0..j0 + w (at most [`NR`]) of C ← A·B, tile by tile down the rows, where `b` starts at
/// B's column j0 (rows `ldb` apart), each element's chain started `from`.
///
/// # Safety
/// `c` points at C, whose rows 0..m hold columns j0..j0 + w at `i·ldc + j`, which nothing else
/// reads or writes meanwhile; `from`, where not null, holds rows 0..m of w columns.
#[allow(clippy::too_many_arguments)]
unsafe fn columns(
    m: usize,
    k: usize,
    a: Strided<'_>,
    b: &[f32],
    ldb: usize,
    (j0, w): (usize, usize),
    c: *mut f32,
    ldc: usize,
    ep: Epilogue<'_>,
    wide: Capability,
    from: Carried,
) {
    #[cfg(target_arch = "x86_64")]
    match wide {
        // Narrow columns (a convolution's 16 or 32 channels) in one or two vectors with more
        // rows per tile, so that the 24 accumulators stay in use.
        Capability::Avx512 => {
            let at = (j0, w);
            match w {
                0..=16 => avx512::rows_of::<24, 1>(m, k, a, b, ldb, at, c, ldc, ep, from),
                17..=32 => avx512::rows_of::<12, 2>(m, k, a, b, ldb, at, c, ldc, ep, from),
                _ => avx512::rows_of::<MR, 4>(m, k, a, b, ldb, at, c, ldc, ep, from),
            }
            return;
        }
        Capability::Avx2 => {
            avx2::columns(m, k, a, b, ldb, (j0, w), c, ldc, ep, from);
            return;
        }
        Capability::Portable => {}
    }
    let _ = wide;
    #[cfg(target_arch = "aarch64")]
    if kernel::neon_tiles() {
        kernel::neon::columns(m, k, a, b, ldb, (j0, w), c, ldc, ep, from);
        return;
    }
    kernel::row_loop(m, k, a, b, ldb, (j0, w), c, ldc, ep, from);
}

/// B (k × n) packed once in panels of [`NR`] columns, each k contiguous rows of NR values (the
/// last panel padded with zeros): the weights of a wide layer, packed once per parameter value
/// and then read by every product of a pass at that value. `matrixmultiply` packs B again on
/// every call, which costs as much as a 100-row product's arithmetic on E3's 1024 × 3136 layer.
#[derive(Clone, Debug, Default)]
pub struct Panels {
    k: usize,
    n: usize,
    data: Vec<f32>,
}

impl Panels {
    /// Packs B (k × n, read through strides) into these panels, reusing their memory; the
    /// panels side by side on rayon's threads.
    pub fn pack(&mut self, b: Strided<'_>, k: usize, n: usize) {
        use rayon::prelude::*;
        if k > 0 {
            assert!(
                n > 0 && b.data.len() > (k - 1) * b.rows + (n - 1) * b.cols,
                "Panels::pack: B too short"
            );
        }
        (self.k, self.n) = (k, n);
        self.data.resize(n.div_ceil(NR) * k * NR, 0.0);
        #[cfg(target_arch = "x86_64")]
        let wide = kernel_capability();
        self.data
            .par_chunks_mut((k * NR).max(1))
            .enumerate()
            .for_each(|(p, panel)| {
                let (j0, w) = (p * NR, NR.min(n - p * NR));
                if b.cols == 1 {
                    for (r, row) in panel.chunks_exact_mut(NR).enumerate() {
                        let at = r * b.rows + j0;
                        row[..w].copy_from_slice(&b.data[at..at + w]);
                    }
                    return;
                }
                // B read down its columns: 16 rows at a time, so that the writes stay in a few
                // kilobytes while each column's 16 values are read in one line.
                const T: usize = 16;
                for r0 in (0..k).step_by(T) {
                    let r1 = (r0 + T).min(k);
                    let rows = &mut panel[r0 * NR..r1 * NR];
                    #[cfg_attr(not(target_arch = "x86_64"), allow(unused_mut))]
                    let mut j = 0;
                    // Whole 16 × 16 blocks (8 × 8 on AVX2) of B with unit row stride,
                    // transposed in registers.
                    #[cfg(target_arch = "x86_64")]
                    if wide == Capability::Avx2 && b.rows == 1 && r1 - r0 == T {
                        while j + 8 <= w {
                            for h in [0, 8] {
                                let at = (j0 + j) * b.cols + r0 + h;
                                assert!(b.data.len() >= at + 7 * b.cols + 8);
                                // SAFETY: AVX2 is present (`wide`); the 8 reads of 8 values
                                // from `at`, `b.cols` apart, are in B (asserted), and the 8
                                // writes of 8 values at columns j.. of the block's rows h..h + 8
                                // in `rows`.
                                unsafe {
                                    avx2::transpose8(
                                        b.data.as_ptr().add(at),
                                        b.cols,
                                        rows.as_mut_ptr().add(h * NR + j),
                                        NR,
                                    )
                                };
                            }
                            j += 8;
                        }
                    }
                    #[cfg(target_arch = "x86_64")]
                    if wide == Capability::Avx512 && b.rows == 1 && r1 - r0 == T {
                        while j + T <= w {
                            let at = (j0 + j) * b.cols + r0;
                            assert!(b.data.len() >= at + (T - 1) * b.cols + T);
                            // SAFETY: AVX-512F is present (`wide`); the 16 reads of 16 values
                            // from `at`, `b.cols` apart, are in B (asserted), and the 16 writes
                            // of 16 values at columns j.. of the block's 16 rows in `rows`.
                            unsafe {
                                avx512::transpose16(
                                    b.data.as_ptr().add(at),
                                    b.cols,
                                    rows.as_mut_ptr().add(j),
                                    NR,
                                )
                            };
                            j += T;
                        }
                    }
                    for j in j..w {
                        let at = (j0 + j) * b.cols;
                        for (r, v) in rows[j..].iter_mut().step_by(NR).enumerate() {
                            *v = b.data[at + (r0 + r) * b.rows];
                        }
                    }
                }
            });
    }
}

/// C (m × n, row stride `ldc`) ← A (m × k) · B for B packed in [`Panels`], finished by `ep`:
/// the same bits as [`gemm`]'s tile kernel on unpacked B. Large products run their panels in
/// blocks fixed by the shapes, side by side on rayon's threads (each element of C in one block).
/// Each panel runs [`PANEL_ROWS`] rows of k at a time down all of A's rows, so that this much
/// of the panel stays in the core's nearer caches while A's rows pass; the chains' sums are
/// carried between these steps ([`Carried`]), so the bits are those of the uncut product.
///
/// # Panics
/// If a slice is too short for the shapes and strides.
pub fn gemm_panels(
    m: usize,
    a: Strided<'_>,
    b: &Panels,
    c: &mut [f32],
    ldc: usize,
    ep: Epilogue<'_>,
) {
    let (n, k) = (b.n, b.k);
    if m == 0 || n == 0 {
        return;
    }
    check(m, n, k, a, c, ldc, ep, "gemm_panels");
    let wide = kernel_capability();
    let panels = n.div_ceil(NR);
    let blocks = (m * n * k / BLOCK_MACS).clamp(1, MAX_BLOCKS.min(panels));
    let per = panels.div_ceil(blocks);
    let cp = CPtr(c.as_mut_ptr());
    let run = |p0: usize| {
        let mut sums = vec![0.0f32; if k > PANEL_ROWS { m * NR } else { 0 }];
        for p in p0..(p0 + per).min(panels) {
            let (j0, w) = (p * NR, NR.min(n - p * NR));
            let mut r0 = 0;
            loop {
                let kc = PANEL_ROWS.min(k - r0);
                let (first, last) = (r0 == 0, r0 + kc >= k);
                let a = Strided {
                    data: &a.data[(r0 * a.cols).min(a.data.len())..],
                    ..a
                };
                let bp = &b.data[p * k * NR + r0 * NR..];
                let from = if first {
                    Carried::ZERO
                } else {
                    Carried(sums.as_ptr())
                };
                // SAFETY: the blocks write disjoint columns of C (their panels'), inside the
                // (m−1)·ldc + n elements asserted above; `sums` is this block's, m rows of NR,
                // and each tile reads its own rows of it before it writes them.
                unsafe {
                    if last {
                        columns(m, kc, a, bp, NR, (j0, w), cp.at(0), ldc, ep, wide, from);
                    } else {
                        let s = sums.as_mut_ptr();
                        columns(m, kc, a, bp, NR, (0, w), s, NR, Epilogue::Store, wide, from);
                    }
                }
                if last {
                    break;
                }
                r0 += kc;
            }
        }
    };
    in_blocks(panels, per, run);
}

/// Rows of k per step of a panel product (64 KB of a panel): on E3's 100 × 3136 · 3136 × 1024
/// product with the AVX2 tiles, 84-88 GFLOP/s on one core against 65-78 uncut (128 rows: 79-81,
/// 64: 69-71); the AVX-512 tiles unchanged at 102-106 (2-core AMD EPYC, Zen 4).
const PANEL_ROWS: usize = 256;

/// `run(start)` for the blocks start = 0, per, 2·per, … below `len`, side by side on rayon's
/// threads (on this one when there is one block).
fn in_blocks(len: usize, per: usize, run: impl Fn(usize) + Send + Sync) {
    if per >= len {
        run(0);
    } else {
        use rayon::prelude::*;
        (0..len)
            .step_by(per.max(1))
            .collect::<Vec<_>>()
            .into_par_iter()
            .for_each(run);
    }
}

/// Multiply-adds from which a product goes to [`packed`]: E3's convolutions and wide layers over a
/// batch (hundreds of millions), not E2's pieces (at most tens of millions), whose results stay
/// those of the tile kernel.
pub const PACKED_MIN: usize = 1 << 26;

/// C (m × n) ← A · Wᵀ for W (n × k) row-major, finished by `ep`, for products of at least
/// [`PACKED_MIN`] multiply-adds: W is read in place through strides (no transposed copy).
///
/// # Panics
/// If a slice is too short for the shapes and strides, or the product is smaller.
#[allow(clippy::too_many_arguments)]
pub fn gemm_wt(
    m: usize,
    n: usize,
    k: usize,
    a: Strided<'_>,
    w: &[f32],
    c: &mut [f32],
    ldc: usize,
    ep: Epilogue<'_>,
) {
    assert!(m * n * k >= PACKED_MIN && k > 0, "gemm_wt: a small product");
    assert!(
        a.data.len() > (m - 1) * a.rows + (k - 1) * a.cols && w.len() >= n * k,
        "gemm_wt: A or W too short"
    );
    assert!(
        ldc >= n && c.len() >= (m - 1) * ldc + n,
        "gemm_wt: C too short"
    );
    let b = Strided {
        data: w,
        rows: 1,
        cols: k,
    };
    packed(m, n, k, a, b, c, ldc, ep);
}

/// Multiply-adds per block of a large product: blocks are cut by the shapes alone (at most
/// [`MAX_BLOCKS`]), never by the threads, and every element of C is computed whole inside one
/// block, so a product has the same bits however many threads share its blocks.
const BLOCK_MACS: usize = 1 << 23;
/// Most blocks one product is cut into: enough for 16 threads.
const MAX_BLOCKS: usize = 16;

/// C's pointer, shared by the blocks of one product, which write disjoint elements.
#[derive(Clone, Copy)]
struct CPtr(*mut f32);
// SAFETY: the blocks of one product write disjoint elements of C (see `packed`).
unsafe impl Send for CPtr {}
unsafe impl Sync for CPtr {}

impl CPtr {
    /// The pointer (a method, so that closures capture the whole `CPtr`).
    fn at(&self, i: usize) -> *mut f32 {
        self.0.wrapping_add(i)
    }
}

/// A large product by `matrixmultiply`, which packs its operands into cache-sized blocks: the tile
/// kernel streams all of B for every six rows of A, which leaves it waiting on memory once B
/// outgrows the cache (measured: `benches/engine.rs`, `e3_batch200`). C is cut into blocks of
/// columns (or of rows, when C is taller than wide: the cut that packs the smaller operand again
/// per block), run side by side on rayon's threads; each element's sum over k runs in one
/// block, in `matrixmultiply`'s fixed order, so the bits depend on the shapes only.
#[allow(clippy::too_many_arguments)]
fn packed(
    m: usize,
    n: usize,
    k: usize,
    a: Strided<'_>,
    b: Strided<'_>,
    c: &mut [f32],
    ldc: usize,
    ep: Epilogue<'_>,
) {
    let blocks = (m * n * k / BLOCK_MACS).clamp(1, MAX_BLOCKS);
    let by_columns = n >= m;
    let side = if by_columns { n } else { m };
    // Whole kernel widths per block (16 columns or 8 rows), so no block ends in a masked tile
    // that an uncut product would not have.
    let align = if by_columns { 16 } else { 8 };
    let per = side.div_ceil(blocks).div_ceil(align) * align;
    let cp = CPtr(c.as_mut_ptr());
    let run = |at: usize| {
        let len = per.min(side - at);
        // SAFETY: the callers asserted that A holds (m−1)·rows + (k−1)·cols, B (k−1)·rows +
        // (n−1)·cols and C (m−1)·ldc + n elements; a block reads A's rows (or B's columns)
        // at..at + len and writes only C's elements in those rows (or columns), which no other
        // block writes.
        unsafe {
            if by_columns {
                let b = Strided {
                    data: &b.data[at * b.cols..],
                    ..b
                };
                let ep = ep.columns_from(at);
                packed_block(m, len, k, a, b, cp.at(at), ldc, ep);
            } else {
                let a = Strided {
                    data: &a.data[at * a.rows..],
                    ..a
                };
                let ep = ep.rows_from(at * ldc);
                packed_block(len, n, k, a, b, cp.at(at * ldc), ldc, ep);
            }
        }
    };
    in_blocks(side, per, run);
}

impl<'a> Epilogue<'a> {
    /// The epilogue of the block of C that starts at column `j0`.
    fn columns_from(self, j0: usize) -> Self {
        match self {
            Epilogue::Bias(b) => Epilogue::Bias(&b[j0..]),
            Epilogue::BiasRelu(b) => Epilogue::BiasRelu(&b[j0..]),
            Epilogue::Scale(s) => Epilogue::Scale(&s[j0..]),
            Epilogue::Positive(s) => Epilogue::Positive(&s[j0..]),
            ep => ep,
        }
    }

    /// The epilogue of the block of C that starts at element `at` (a row's first).
    fn rows_from(self, at: usize) -> Self {
        match self {
            Epilogue::Scale(s) => Epilogue::Scale(&s[at..]),
            Epilogue::Positive(s) => Epilogue::Positive(&s[at..]),
            ep => ep,
        }
    }
}

/// One block of [`packed`]: C (m × n at `c`, row stride `ldc`) ← A · B, finished by `ep`.
///
/// # Safety
/// A and B hold the elements their strides reach for these shapes, `c` the (m−1)·ldc + n
/// elements from it, which nothing else reads or writes meanwhile.
#[allow(clippy::too_many_arguments)]
unsafe fn packed_block(
    m: usize,
    n: usize,
    k: usize,
    a: Strided<'_>,
    b: Strided<'_>,
    c: *mut f32,
    ldc: usize,
    ep: Epilogue<'_>,
) {
    let row = |i: usize| std::slice::from_raw_parts_mut(c.add(i * ldc), n);
    let beta = match ep {
        Epilogue::Add => 1.0,
        Epilogue::Bias(bias) | Epilogue::BiasRelu(bias) => {
            for i in 0..m {
                row(i).copy_from_slice(&bias[..n]);
            }
            1.0
        }
        Epilogue::Store | Epilogue::Scale(_) | Epilogue::Positive(_) => 0.0,
    };
    matrixmultiply::sgemm(
        m,
        k,
        n,
        1.0,
        a.data.as_ptr(),
        a.rows as isize,
        a.cols as isize,
        b.data.as_ptr(),
        b.rows as isize,
        b.cols as isize,
        beta,
        c,
        ldc as isize,
        1,
    );
    for i in 0..m {
        let at = i * ldc;
        match ep {
            Epilogue::Scale(s) => row(i)
                .iter_mut()
                .zip(&s[at..at + n])
                .for_each(|(c, s)| *c *= s),
            Epilogue::Positive(p) => row(i)
                .iter_mut()
                .zip(&p[at..at + n])
                .for_each(|(c, p)| *c *= crate::math::relu_slope(*p)),
            Epilogue::BiasRelu(_) => row(i).iter_mut().for_each(|c| *c = crate::math::relu(*c)),
            _ => break,
        }
    }
}

#[cfg(test)]
mod tests;
