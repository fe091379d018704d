//! The dense products of the engine's layers: C = A·B with a register-tiled kernel (6 rows × 64
//! columns of C in registers) that reads A through strides and B by contiguous rows, so none of
//! the layers' three products (forward, ∂/∂input, ∂/∂W) packs its operands. On the E2 shapes this
//! replaced `matrixmultiply`, whose packing took a third of its time (see `benches/engine.rs`).
//!
//! Every element of C is one fused multiply-add chain over the reduction index in order, started
//! from zero, then finished by the [`Epilogue`]: the same bits on every instruction set.

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
    assert!(
        ldc >= n && c.len() >= (m - 1) * ldc + n,
        "gemm: C too short"
    );
    match ep {
        Epilogue::Bias(bias) => assert!(bias.len() >= n, "gemm: bias too short"),
        Epilogue::Scale(s) => assert!(s.len() >= (m - 1) * ldc + n, "gemm: scale too short"),
        _ => {}
    }
    if k > 0 {
        assert!(
            a.data.len() > (m - 1) * a.rows + (k - 1) * a.cols,
            "gemm: A too short"
        );
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
    let wide = wide_kernel();
    let mut acc = [[0.0f32; NR]; MR];
    for j0 in (0..n).step_by(NR) {
        let w = NR.min(n - j0);
        let bp = &b[j0..];
        for i0 in (0..m).step_by(MR) {
            let rows = MR.min(m - i0);
            let a0 = a.data.get(i0 * a.rows..).unwrap_or(&[]);
            debug_assert!(k == 0 || a0.len() > (rows - 1) * a.rows + (k - 1) * a.cols);
            // SAFETY: the asserts above bound every index the kernels read: rows·rs + k·cs within
            // A, k rows of w columns within B (the kernel masks the rest).
            #[cfg(target_arch = "x86_64")]
            if wide {
                let t = avx512::Tile { i0, j0, w, ldc };
                unsafe {
                    match rows {
                        6 => avx512::tile::<6>(k, a0, a, bp, ldb, c, t, ep),
                        5 => avx512::tile::<5>(k, a0, a, bp, ldb, c, t, ep),
                        4 => avx512::tile::<4>(k, a0, a, bp, ldb, c, t, ep),
                        3 => avx512::tile::<3>(k, a0, a, bp, ldb, c, t, ep),
                        2 => avx512::tile::<2>(k, a0, a, bp, ldb, c, t, ep),
                        _ => avx512::tile::<1>(k, a0, a, bp, ldb, c, t, ep),
                    }
                }
                continue;
            }
            let _ = wide;
            for (i, acc_i) in acc[..rows].iter_mut().enumerate() {
                let ai = a0.get(i * a.rows..).unwrap_or(&[]);
                tile_row(k, ai, a.cols, bp, ldb, &mut acc_i[..w]);
            }
            finish(&acc[..rows], i0, j0, w, c, ldc, ep);
        }
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

/// A large product by `matrixmultiply`, which packs its operands into cache-sized blocks: the tile
/// kernel streams all of B for every six rows of A, which leaves it waiting on memory once B
/// outgrows the cache (measured: `benches/engine.rs`, `e3_batch200`). Deterministic for given
/// shapes (one thread, fixed blocking), so the passes' fixed pieces keep results independent of
/// the number of threads.
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
    let beta = match ep {
        Epilogue::Add => 1.0,
        Epilogue::Bias(bias) => {
            for i in 0..m {
                c[i * ldc..i * ldc + n].copy_from_slice(&bias[..n]);
            }
            1.0
        }
        Epilogue::Store | Epilogue::Scale(_) => 0.0,
    };
    // SAFETY: the callers asserted that A holds (m−1)·rows + (k−1)·cols, B (k−1)·rows +
    // (n−1)·cols and C (m−1)·ldc + n elements; the strides below are those.
    unsafe {
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
            c.as_mut_ptr(),
            ldc as isize,
            1,
        );
    }
    if let Epilogue::Scale(s) = ep {
        for i in 0..m {
            let at = i * ldc;
            c[at..at + n]
                .iter_mut()
                .zip(&s[at..at + n])
                .for_each(|(c, s)| *c *= s);
        }
    }
}

#[cfg(test)]
thread_local! {
    /// Tests set this to run the portable kernel on a machine with AVX-512.
    static PORTABLE: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Whether the AVX-512 kernel runs.
fn wide_kernel() -> bool {
    #[cfg(test)]
    if PORTABLE.with(|p| p.get()) {
        return false;
    }
    #[cfg(target_arch = "x86_64")]
    return std::arch::is_x86_feature_detected!("avx512f");
    #[cfg(not(target_arch = "x86_64"))]
    false
}

/// One row of a tile (its first `acc.len()` columns), portably: the same chains as the AVX-512
/// kernel, so the same bits (with hardware FMA where there is one: `mul_add` is a library call
/// without it).
#[multiversion::multiversion(targets("x86_64+avx2+fma"))]
fn tile_row(k: usize, a: &[f32], cs: usize, b: &[f32], ldb: usize, acc: &mut [f32]) {
    acc.fill(0.0);
    let w = acc.len();
    for r in 0..k {
        let av = a[r * cs];
        for (c, bv) in acc.iter_mut().zip(&b[r * ldb..r * ldb + w]) {
            *c = av.mul_add(*bv, *c);
        }
    }
}

/// Writes the first `w` columns of a tile into C at (i0, j0).
fn finish(
    acc: &[[f32; NR]],
    i0: usize,
    j0: usize,
    w: usize,
    c: &mut [f32],
    ldc: usize,
    ep: Epilogue<'_>,
) {
    for (i, acc_i) in acc.iter().enumerate() {
        let at = (i0 + i) * ldc + j0;
        let row = &mut c[at..at + w];
        let acc_i = &acc_i[..w];
        match ep {
            Epilogue::Store => row.copy_from_slice(acc_i),
            Epilogue::Add => row.iter_mut().zip(acc_i).for_each(|(c, v)| *c += v),
            Epilogue::Bias(bias) => row
                .iter_mut()
                .zip(acc_i)
                .zip(&bias[j0..j0 + w])
                .for_each(|((c, v), b)| *c = v + b),
            Epilogue::Scale(s) => row
                .iter_mut()
                .zip(acc_i)
                .zip(&s[at..at + w])
                .for_each(|((c, v), s)| *c = v * s),
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod avx512 {
    use super::{Epilogue, Strided};
    use std::arch::x86_64::*;

    /// Where a tile lands in C: its first row and column, its width, C's row stride.
    #[derive(Clone, Copy)]
    pub struct Tile {
        pub i0: usize,
        pub j0: usize,
        pub w: usize,
        pub ldc: usize,
    }

    /// R rows × 64 columns of A·B in 4·R zmm registers, finished into C by `ep` (masked to the
    /// tile's width); `a0` starts at the tile's first row, `b` at its first column.
    ///
    /// # Safety
    /// The CPU has AVX-512F; `a0` holds index (R−1)·rows + (k−1)·cols, `b` holds (k−1)·ldb + w
    /// elements, and C (and the epilogue's slice) hold the tile's rows and columns.
    #[allow(clippy::too_many_arguments)]
    #[target_feature(enable = "avx512f")]
    pub unsafe fn tile<const R: usize>(
        k: usize,
        a0: &[f32],
        a: Strided<'_>,
        b: &[f32],
        ldb: usize,
        c: &mut [f32],
        t: Tile,
        ep: Epilogue<'_>,
    ) {
        let mut acc = [[_mm512_setzero_ps(); 4]; R];
        let (ap, bp) = (a0.as_ptr(), b.as_ptr());
        // Columns past the tile's width are masked off (read as zeros, never touched).
        let masks: [__mmask16; 4] = std::array::from_fn(|v| match t.w.saturating_sub(16 * v) {
            0 => 0,
            d if d >= 16 => 0xffff,
            d => (1u16 << d) - 1,
        });
        for r in 0..k {
            let row = bp.add(r * ldb);
            let bv: [__m512; 4] =
                std::array::from_fn(|v| _mm512_maskz_loadu_ps(masks[v], row.add(16 * v)));
            for (i, acc_i) in acc.iter_mut().enumerate() {
                let av = _mm512_set1_ps(*ap.add(i * a.rows + r * a.cols));
                for (c, b) in acc_i.iter_mut().zip(bv) {
                    *c = _mm512_fmadd_ps(av, b, *c);
                }
            }
        }
        for (i, acc_i) in acc.into_iter().enumerate() {
            let at = (t.i0 + i) * t.ldc + t.j0;
            for (v, ab) in acc_i.into_iter().enumerate() {
                let (col, mask) = (16 * v, masks[v]);
                if mask == 0 {
                    break;
                }
                let dst = c.as_mut_ptr().add(at + col);
                let out = match ep {
                    Epilogue::Store => ab,
                    Epilogue::Add => _mm512_add_ps(_mm512_maskz_loadu_ps(mask, dst), ab),
                    Epilogue::Bias(bias) => _mm512_add_ps(
                        ab,
                        _mm512_maskz_loadu_ps(mask, bias.as_ptr().add(t.j0 + col)),
                    ),
                    Epilogue::Scale(s) => {
                        _mm512_mul_ps(ab, _mm512_maskz_loadu_ps(mask, s.as_ptr().add(at + col)))
                    }
                };
                _mm512_mask_storeu_ps(dst, mask, out);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The product by definition, in f64.
    fn reference(m: usize, n: usize, k: usize, a: Strided<'_>, b: &[f32], ldb: usize) -> Vec<f64> {
        let mut c = vec![0.0f64; m * n];
        for i in 0..m {
            for j in 0..n {
                for r in 0..k {
                    c[i * n + j] += a.data[i * a.rows + r * a.cols] as f64 * b[r * ldb + j] as f64;
                }
            }
        }
        c
    }

    #[test]
    fn every_shape_and_epilogue_matches_the_definition() {
        let val = |i: usize| ((i as f32 * 0.618).fract() - 0.5) * 2.0;
        for &(m, n, k) in &[
            (1, 1, 1),
            (7, 64, 64),
            (13, 100, 37),
            (6, 130, 5),
            (5, 3, 0),
            (512, 64, 64),
            // Large enough for the packed path.
            (400, 520, 330),
        ] {
            for transposed in [false, true] {
                let a: Vec<f32> = (0..m * k).map(val).collect();
                let sa = if transposed {
                    Strided {
                        data: &a,
                        rows: 1,
                        cols: m,
                    }
                } else {
                    Strided {
                        data: &a,
                        rows: k,
                        cols: 1,
                    }
                };
                let ldb = n + 3;
                let b: Vec<f32> = (0..k * ldb).map(|i| val(i + 7)).collect();
                let want = reference(m, n, k, sa, &b, ldb);
                let ldc = n + 1;
                let bias: Vec<f32> = (0..n).map(|i| val(i + 11)).collect();
                let s: Vec<f32> = (0..m * ldc).map(|i| val(i + 13)).collect();
                let c0: Vec<f32> = (0..m * ldc).map(|i| val(i + 17)).collect();
                for ep in [
                    Epilogue::Store,
                    Epilogue::Add,
                    Epilogue::Bias(&bias),
                    Epilogue::Scale(&s),
                ] {
                    let mut c = c0.clone();
                    gemm(m, n, k, sa, &b, ldb, &mut c, ldc, ep);
                    // The portable kernel gives the same bits.
                    let mut c2 = c0.clone();
                    PORTABLE.with(|p| p.set(true));
                    gemm(m, n, k, sa, &b, ldb, &mut c2, ldc, ep);
                    PORTABLE.with(|p| p.set(false));
                    assert!(c.iter().zip(&c2).all(|(x, y)| x.to_bits() == y.to_bits()));
                    for i in 0..m {
                        for j in 0..n {
                            let ab = want[i * n + j];
                            let expect = match ep {
                                Epilogue::Store => ab,
                                Epilogue::Add => ab + c0[i * ldc + j] as f64,
                                Epilogue::Bias(_) => ab + bias[j] as f64,
                                Epilogue::Scale(_) => ab * s[i * ldc + j] as f64,
                            };
                            let got = c[i * ldc + j] as f64;
                            assert!(
                                (got - expect).abs() <= 1e-5 * (1.0 + k as f64).sqrt(),
                                "{m}×{n}×{k} {ep:?} ({i},{j}): {got} vs {expect}"
                            );
                        }
                        // Padding columns of C stay untouched.
                        assert_eq!(c[i * ldc + n], c0[i * ldc + n]);
                    }
                }
            }
        }
    }
}
