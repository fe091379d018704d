//! The NEON tiles of aarch64: 6 × 16, then 8 × 12, 12 × 8 or 12 × 4 for a last narrow strip;
//! the last 1-3 columns on the scalar row loop.

use super::{finish, Carried, Epilogue, Strided, Tile, NR};
use std::arch::aarch64::*;

/// Columns j0..j0 + w (at most [`super::NR`]) of C ← A·B (the chains started `from`): 16
/// columns at a time in tiles of 6 rows; a last strip of 12, 8 or 4 columns in taller
/// tiles; the last 1-3 columns by the scalar row loop (the same chains, so the same bits).
///
/// # Safety
/// As [`super::columns`].
#[allow(clippy::too_many_arguments)]
pub unsafe fn columns(
    m: usize,
    k: usize,
    a: Strided<'_>,
    b: &[f32],
    ldb: usize,
    (j0, w): (usize, usize),
    c: *mut f32,
    ldc: usize,
    ep: Epilogue<'_>,
    from: Carried,
) {
    let mut col = 0;
    while col < w {
        let width = (w - col).min(16);
        let bs = b.get(col..).unwrap_or(&[]);
        let from = from.right(col);
        let strip = width / 4 * 4;
        let at = (j0 + col, strip);
        match strip / 4 {
            4 => rows_of::<6, 4>(m, k, a, bs, ldb, at, c, ldc, ep, from),
            3 => rows_of::<8, 3>(m, k, a, bs, ldb, at, c, ldc, ep, from),
            2 => rows_of::<12, 2>(m, k, a, bs, ldb, at, c, ldc, ep, from),
            1 => rows_of::<12, 1>(m, k, a, bs, ldb, at, c, ldc, ep, from),
            _ => super::row_loop(m, k, a, bs, ldb, (j0 + col, width), c, ldc, ep, from),
        }
        col += if strip > 0 { strip } else { width };
    }
}

super::rows_of!("neon", 4);

/// R rows × 4·V columns of A·B in V·R q registers (the tile exactly 4·V wide), finished into
/// C by the portable epilogue.
///
/// # Safety
/// `a0` holds index (R−1)·rows + (k−1)·cols, `b` holds (k−1)·ldb + 4·V elements, `from`
/// (where not null) the tile's rows of 4·V sums, and C (and the epilogue's slice) the
/// tile's rows and columns.
#[allow(clippy::too_many_arguments)]
#[target_feature(enable = "neon")]
unsafe fn tile<const R: usize, const V: usize>(
    k: usize,
    a0: &[f32],
    a: Strided<'_>,
    b: &[f32],
    ldb: usize,
    c: *mut f32,
    t: Tile,
    ep: Epilogue<'_>,
) {
    debug_assert_eq!(t.w, 4 * V);
    let (ap, bp) = (a0.as_ptr(), b.as_ptr());
    let mut acc = [[vdupq_n_f32(0.0); V]; R];
    if !t.from.0.is_null() {
        for (i, acc_i) in acc.iter_mut().enumerate() {
            for (v, c) in acc_i.iter_mut().enumerate() {
                *c = vld1q_f32(t.from.0.add((t.i0 + i) * NR + 4 * v));
            }
        }
    }
    for r in 0..k {
        let row = bp.add(r * ldb);
        let bv: [float32x4_t; V] = std::array::from_fn(|v| vld1q_f32(row.add(4 * v)));
        for (i, acc_i) in acc.iter_mut().enumerate() {
            let av = vld1q_dup_f32(ap.add(i * a.rows + r * a.cols));
            for (c, b) in acc_i.iter_mut().zip(bv) {
                *c = vfmaq_f32(*c, av, b);
            }
        }
    }
    let mut out = [[0.0f32; NR]; R];
    for (o, acc_i) in out.iter_mut().zip(acc) {
        for (v, ab) in acc_i.into_iter().enumerate() {
            vst1q_f32(o.as_mut_ptr().add(4 * v), ab);
        }
    }
    finish(&out, t.i0, t.j0, t.w, c, t.ldc, ep);
}
