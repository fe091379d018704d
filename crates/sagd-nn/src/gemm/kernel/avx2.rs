//! The AVX2 + FMA tiles: 6 × 16, and 12 × 8 for the last 8 columns or fewer; and the 8 × 8
//! register transpose that packs a layer's weights.

use super::{Carried, Epilogue, Strided, Tile, NR};
use std::arch::x86_64::*;

/// Columns j0..j0 + w (at most [`super::NR`]) of C ← A·B (the chains started `from`): 16
/// columns at a time (8 for the last 8 or fewer), in tiles of 6 rows (12 for 8 columns), the
/// last rows in smaller tiles.
///
/// # Safety
/// As [`super::columns`], on a CPU with AVX2 and FMA.
#[allow(clippy::too_many_arguments)]
#[target_feature(enable = "avx2,fma")]
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
        let at = (j0 + col, width);
        let from = from.right(col);
        if width > 8 {
            rows_of::<6, 2>(m, k, a, bs, ldb, at, c, ldc, ep, from);
        } else {
            rows_of::<12, 1>(m, k, a, bs, ldb, at, c, ldc, ep, from);
        }
        col += width;
    }
}

super::rows_of!("avx2,fma", 8);

/// The 8 × 8 block of 8 rows `src` (rows `lds` apart) written transposed into 8 rows at
/// `dst` (`ldd` apart): in-lane unpacks of pairs, then shuffles of quads, then the 128-bit
/// halves exchanged.
///
/// # Safety
/// The CPU has AVX2; `src` holds 8 values at each of 0, lds, …, 7·lds and `dst` at 0, ldd,
/// …, 7·ldd.
#[target_feature(enable = "avx2")]
pub unsafe fn transpose8(src: *const f32, lds: usize, dst: *mut f32, ldd: usize) {
    let r: [__m256; 8] = std::array::from_fn(|i| _mm256_loadu_ps(src.add(i * lds)));
    // t[2p] = (a0 b0 a1 b1 | a4 b4 a5 b5) for rows a, b = 2p, 2p + 1; t[2p + 1] the 2, 3, 6, 7s.
    let t: [__m256; 8] = std::array::from_fn(|i| {
        let (a, b) = (r[i / 2 * 2], r[i / 2 * 2 + 1]);
        if i % 2 == 0 {
            _mm256_unpacklo_ps(a, b)
        } else {
            _mm256_unpackhi_ps(a, b)
        }
    });
    // u[4q + c] = column c (and c + 4) of rows 4q..4q + 4.
    let u: [__m256; 8] = std::array::from_fn(|i| {
        let (q, c) = (i / 4, i % 4);
        let (a, b) = (t[4 * q + c / 2], t[4 * q + 2 + c / 2]);
        if c % 2 == 0 {
            _mm256_shuffle_ps::<0x44>(a, b)
        } else {
            _mm256_shuffle_ps::<0xEE>(a, b)
        }
    });
    for c in 0..4 {
        _mm256_storeu_ps(
            dst.add(c * ldd),
            _mm256_permute2f128_ps::<0x20>(u[c], u[4 + c]),
        );
        _mm256_storeu_ps(
            dst.add((c + 4) * ldd),
            _mm256_permute2f128_ps::<0x31>(u[c], u[4 + c]),
        );
    }
}

/// R rows × 8·V columns of A·B in V·R ymm registers (lanes past the width read as zeros,
/// never written), finished into C by `ep`.
#[allow(clippy::too_many_arguments)]
#[target_feature(enable = "avx2,fma")]
unsafe fn tile<const R: usize, const V: usize>(
    k: usize,
    a0: &[f32],
    a: Strided<'_>,
    b: &[f32],
    ldb: usize,
    c: *mut f32,
    Tile {
        i0,
        j0,
        w,
        ldc,
        from,
    }: Tile,
    ep: Epilogue<'_>,
) {
    let (ap, bp) = (a0.as_ptr(), b.as_ptr());
    let masks: [__m256i; V] = std::array::from_fn(|v| {
        let d = w.saturating_sub(8 * v).min(8) as i32;
        _mm256_cmpgt_epi32(
            _mm256_set1_epi32(d),
            _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7),
        )
    });
    let whole = w == 8 * V;
    let mut acc = [[_mm256_setzero_ps(); V]; R];
    if !from.0.is_null() {
        for (i, acc_i) in acc.iter_mut().enumerate() {
            for (v, c) in acc_i.iter_mut().enumerate() {
                let p = from.0.add((i0 + i) * NR + 8 * v);
                *c = if whole {
                    _mm256_loadu_ps(p)
                } else {
                    _mm256_maskload_ps(p, masks[v])
                };
            }
        }
    }
    for r in 0..k {
        let row = bp.add(r * ldb);
        let bv: [__m256; V] = std::array::from_fn(|v| {
            if whole {
                _mm256_loadu_ps(row.add(8 * v))
            } else {
                _mm256_maskload_ps(row.add(8 * v), masks[v])
            }
        });
        for (i, acc_i) in acc.iter_mut().enumerate() {
            let av = _mm256_broadcast_ss(&*ap.add(i * a.rows + r * a.cols));
            for (c, b) in acc_i.iter_mut().zip(bv) {
                *c = _mm256_fmadd_ps(av, b, *c);
            }
        }
    }
    // The AVX-512 kernel's epilogue, lane for lane: the same operations, so the same bits.
    let zero = _mm256_setzero_ps();
    for (i, acc_i) in acc.into_iter().enumerate() {
        let at = (i0 + i) * ldc + j0;
        for (v, ab) in acc_i.into_iter().enumerate() {
            let (col, mask) = (8 * v, masks[v]);
            if 8 * v >= w {
                break;
            }
            let load = |p: *const f32| {
                if whole {
                    _mm256_loadu_ps(p)
                } else {
                    _mm256_maskload_ps(p, mask)
                }
            };
            let dst = c.add(at + col);
            let out = match ep {
                Epilogue::Store => ab,
                Epilogue::Add => _mm256_add_ps(load(dst), ab),
                Epilogue::Bias(bias) => _mm256_add_ps(ab, load(bias.as_ptr().add(j0 + col))),
                Epilogue::BiasRelu(bias) => {
                    _mm256_max_ps(_mm256_add_ps(ab, load(bias.as_ptr().add(j0 + col))), zero)
                }
                Epilogue::Positive(p) => {
                    let on = _mm256_cmp_ps::<_CMP_GT_OQ>(load(p.as_ptr().add(at + col)), zero);
                    _mm256_mul_ps(ab, _mm256_and_ps(on, _mm256_set1_ps(1.0)))
                }
                Epilogue::Scale(s) => _mm256_mul_ps(ab, load(s.as_ptr().add(at + col))),
            };
            if whole {
                _mm256_storeu_ps(dst, out);
            } else {
                _mm256_maskstore_ps(dst, mask, out);
            }
        }
    }
}
