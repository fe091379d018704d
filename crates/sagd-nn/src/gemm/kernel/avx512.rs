//! The AVX-512F tiles: 6 × 64, and 24 × 16 or 12 × 32 for narrow products; and the 16 × 16
//! register transpose that packs a layer's weights.

use super::{Carried, Epilogue, Strided, Tile, NR};
use std::arch::x86_64::*;

/// The 16 × 16 block of 16 rows `src` (rows `lds` apart) written transposed into 16 rows
/// at `dst` (`ldd` apart): three rounds of in-lane unpacks, then two of 128-bit lane shuffles.
///
/// # Safety
/// The CPU has AVX-512F; `src` holds 16 values at each of 0, lds, …, 15·lds and `dst` at
/// 0, ldd, …, 15·ldd.
#[target_feature(enable = "avx512f")]
pub unsafe fn transpose16(src: *const f32, lds: usize, dst: *mut f32, ldd: usize) {
    let r: [__m512; 16] = std::array::from_fn(|i| _mm512_loadu_ps(src.add(i * lds)));
    // Pairs of rows interleaved: t[2i] = (a0 b0 a1 b1 | a4 b4 a5 b5 | …), t[2i+1] the odds.
    let t: [__m512; 16] = std::array::from_fn(|i| {
        let (a, b) = (r[i / 2 * 2], r[i / 2 * 2 + 1]);
        if i % 2 == 0 {
            _mm512_unpacklo_ps(a, b)
        } else {
            _mm512_unpackhi_ps(a, b)
        }
    });
    // Quads: u[4q + c] holds column c (mod 4) of rows 4q..4q + 4, in each 128-bit lane.
    let u: [__m512; 16] = std::array::from_fn(|i| {
        let (q, c) = (i / 4, i % 4);
        let (a, b) = (
            _mm512_castps_pd(t[4 * q + c / 2]),
            _mm512_castps_pd(t[4 * q + 2 + c / 2]),
        );
        _mm512_castpd_ps(if c % 2 == 0 {
            _mm512_unpacklo_pd(a, b)
        } else {
            _mm512_unpackhi_pd(a, b)
        })
    });
    for c in 0..4 {
        // Lanes 0 and 2, then 1 and 3, of rows 0-3 with 4-7 and of 8-11 with 12-15.
        let v0 = _mm512_shuffle_f32x4::<0x88>(u[c], u[4 + c]);
        let v1 = _mm512_shuffle_f32x4::<0xDD>(u[c], u[4 + c]);
        let w0 = _mm512_shuffle_f32x4::<0x88>(u[8 + c], u[12 + c]);
        let w1 = _mm512_shuffle_f32x4::<0xDD>(u[8 + c], u[12 + c]);
        _mm512_storeu_ps(dst.add(c * ldd), _mm512_shuffle_f32x4::<0x88>(v0, w0));
        _mm512_storeu_ps(dst.add((c + 8) * ldd), _mm512_shuffle_f32x4::<0xDD>(v0, w0));
        _mm512_storeu_ps(dst.add((c + 4) * ldd), _mm512_shuffle_f32x4::<0x88>(v1, w1));
        _mm512_storeu_ps(
            dst.add((c + 12) * ldd),
            _mm512_shuffle_f32x4::<0xDD>(v1, w1),
        );
    }
}

super::rows_of!("avx512f", 16);

/// R rows × 16·V columns of A·B in V·R zmm registers, finished into C by `ep` (masked to
/// the tile's width, at most 16·V); `a0` starts at the tile's first row, `b` at its first
/// column.
///
/// # Safety
/// The CPU has AVX-512F; `a0` holds index (R−1)·rows + (k−1)·cols, `b` holds (k−1)·ldb + w
/// elements, and C (and the epilogue's slice) hold the tile's rows and columns.
#[allow(clippy::too_many_arguments)]
#[target_feature(enable = "avx512f")]
pub unsafe fn tile<const R: usize, const V: usize>(
    k: usize,
    a0: &[f32],
    a: Strided<'_>,
    b: &[f32],
    ldb: usize,
    c: *mut f32,
    t: Tile,
    ep: Epilogue<'_>,
) {
    let (ap, bp) = (a0.as_ptr(), b.as_ptr());
    // Columns past the tile's width are masked off (read as zeros, never touched).
    let masks: [__mmask16; V] = std::array::from_fn(|v| match t.w.saturating_sub(16 * v) {
        0 => 0,
        d if d >= 16 => 0xffff,
        d => (1u16 << d) - 1,
    });
    let mut acc = [[_mm512_setzero_ps(); V]; R];
    if !t.from.0.is_null() {
        for (i, acc_i) in acc.iter_mut().enumerate() {
            for (v, c) in acc_i.iter_mut().enumerate() {
                *c = _mm512_maskz_loadu_ps(masks[v], t.from.0.add((t.i0 + i) * NR + 16 * v));
            }
        }
    }
    for r in 0..k {
        let row = bp.add(r * ldb);
        let bv: [__m512; V] =
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
            let dst = c.add(at + col);
            let out = match ep {
                Epilogue::Store => ab,
                Epilogue::Add => _mm512_add_ps(_mm512_maskz_loadu_ps(mask, dst), ab),
                Epilogue::Bias(bias) => _mm512_add_ps(
                    ab,
                    _mm512_maskz_loadu_ps(mask, bias.as_ptr().add(t.j0 + col)),
                ),
                Epilogue::BiasRelu(bias) => _mm512_max_ps(
                    _mm512_add_ps(
                        ab,
                        _mm512_maskz_loadu_ps(mask, bias.as_ptr().add(t.j0 + col)),
                    ),
                    _mm512_setzero_ps(),
                ),
                Epilogue::Positive(p) => {
                    let p = _mm512_maskz_loadu_ps(mask, p.as_ptr().add(at + col));
                    let on = _mm512_cmp_ps_mask::<_CMP_GT_OQ>(p, _mm512_setzero_ps());
                    _mm512_mul_ps(ab, _mm512_maskz_mov_ps(on, _mm512_set1_ps(1.0)))
                }
                Epilogue::Scale(s) => {
                    _mm512_mul_ps(ab, _mm512_maskz_loadu_ps(mask, s.as_ptr().add(at + col)))
                }
            };
            _mm512_mask_storeu_ps(dst, mask, out);
        }
    }
}
