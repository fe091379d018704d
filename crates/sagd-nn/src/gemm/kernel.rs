//! The register-tiled kernels under the products: a portable tile row, the AVX2 tiles (6 × 16,
//! and 12 × 8 for narrow products) and the AVX-512 tiles (6 × 64, and 24 × 16 or 12 × 32 for
//! narrow products), chosen by [`sagd::cpu::capability`], and on aarch64 the NEON tiles (6 × 16,
//! 8 × 12, 12 × 8 and 12 × 4: NEON is in every aarch64 CPU, so they are its portable path). All
//! run every element of C as one fused multiply-add chain in the same order, so they give the
//! same bits.

use super::*;
use sagd::cpu::Capability;

#[cfg(test)]
thread_local! {
    /// Tests set this to run a narrower kernel than the CPU's.
    pub(super) static FORCED: std::cell::Cell<Option<Capability>> = const { std::cell::Cell::new(None) };
}

#[cfg(all(test, target_arch = "aarch64"))]
thread_local! {
    /// Tests set this to run the scalar row loop in place of the NEON tiles.
    pub(super) static ROW_LOOP: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Whether the portable path runs the NEON tiles: always, but in tests that ask for the scalar
/// row loop.
#[cfg(target_arch = "aarch64")]
pub(crate) fn neon_tiles() -> bool {
    #[cfg(test)]
    if ROW_LOOP.with(|r| r.get()) {
        return false;
    }
    true
}

/// The kernels' instruction set: the process's ([`sagd::cpu::capability`], which
/// `SAGD_CPU_CAPABILITY` narrows), or in tests the one a test forces.
pub(crate) fn kernel_capability() -> Capability {
    #[cfg(test)]
    if let Some(c) = FORCED.with(|p| p.get()) {
        return c.min(Capability::detected());
    }
    sagd::cpu::capability()
}

sagd::vectorized! {
    /// One row of a tile (its first `acc.len()` columns) added onto `acc`, portably: the same
    /// chains as the AVX-512 kernel, so the same bits (with hardware FMA where there is one:
    /// `mul_add` is a library call without it).
    pub(crate) fn tile_row(k: usize, a: &[f32], cs: usize, b: &[f32], ldb: usize, acc: &mut [f32]) {
        let w = acc.len();
        for r in 0..k {
            let av = a[r * cs];
            for (c, bv) in acc.iter_mut().zip(&b[r * ldb..r * ldb + w]) {
                *c = av.mul_add(*bv, *c);
            }
        }
    }
}

/// Writes the first `w` columns of a tile into C at (i0, j0).
///
/// # Safety
/// The tile's elements of C, at `c + (i0 + i)·ldc + j0 + j`, are the caller's alone.
pub(crate) unsafe fn finish(
    acc: &[[f32; NR]],
    i0: usize,
    j0: usize,
    w: usize,
    c: *mut f32,
    ldc: usize,
    ep: Epilogue<'_>,
) {
    for (i, acc_i) in acc.iter().enumerate() {
        let at = (i0 + i) * ldc + j0;
        let row = std::slice::from_raw_parts_mut(c.add(at), w);
        let acc_i = &acc_i[..w];
        match ep {
            Epilogue::Store => row.copy_from_slice(acc_i),
            Epilogue::Add => row.iter_mut().zip(acc_i).for_each(|(c, v)| *c += v),
            Epilogue::Bias(bias) => row
                .iter_mut()
                .zip(acc_i)
                .zip(&bias[j0..j0 + w])
                .for_each(|((c, v), b)| *c = v + b),
            Epilogue::BiasRelu(bias) => row
                .iter_mut()
                .zip(acc_i)
                .zip(&bias[j0..j0 + w])
                .for_each(|((c, v), b)| *c = crate::math::relu(v + b)),
            Epilogue::Positive(p) => row
                .iter_mut()
                .zip(acc_i)
                .zip(&p[at..at + w])
                .for_each(|((c, v), p)| *c = v * crate::math::relu_slope(*p)),
            Epilogue::Scale(s) => row
                .iter_mut()
                .zip(acc_i)
                .zip(&s[at..at + w])
                .for_each(|((c, v), s)| *c = v * s),
        }
    }
}

/// Where a tile lands in C: its first row and column, its width, C's row stride; and where its
/// accumulators start (null: from zero).
#[derive(Clone, Copy)]
pub(super) struct Tile {
    pub(super) i0: usize,
    pub(super) j0: usize,
    pub(super) w: usize,
    pub(super) ldc: usize,
    pub(super) from: Carried,
}

/// Where the accumulators of a product's tiles start: from zero (null), or from the sums of the
/// earlier rows of k, stored in a block whose rows are [`NR`] apart, starting at the call's
/// first column. Continuing a chain from its stored sum is the same chain (a store and load of
/// an f32 round nothing), so a product cut along k gives the bits of an uncut one.
#[derive(Clone, Copy)]
pub(crate) struct Carried(pub(crate) *const f32);

impl Carried {
    /// Chains that start from zero.
    pub(crate) const ZERO: Carried = Carried(std::ptr::null());

    /// The sums from `col` columns further right.
    ///
    /// # Safety
    /// Where not null, the block holds those columns.
    pub(crate) unsafe fn right(self, col: usize) -> Carried {
        if self.0.is_null() {
            self
        } else {
            Carried(self.0.add(col))
        }
    }
}

/// A vector kernel's `rows_of::<R, V>`, compiled for `$features` with `$lanes` lanes per
/// register: columns j0..j0 + w (at most `$lanes`·V) of C ← A·B down the rows, in the module's
/// `tile`s of R rows, the last rows in tiles of at most 6.
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
macro_rules! rows_of {
    ($features:literal, $lanes:literal) => {
        /// Columns j0..j0 + w of C ← A·B in tiles of R rows, the last rows in tiles of at most 6.
        ///
        /// # Safety
        /// As `gemm::columns`, on a CPU with these instructions.
        #[allow(clippy::too_many_arguments)]
        #[target_feature(enable = $features)]
        pub unsafe fn rows_of<const R: usize, const V: usize>(
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
            debug_assert!(w <= $lanes * V);
            let mut i0 = 0;
            while i0 < m {
                let a0 = a.data.get(i0 * a.rows..).unwrap_or(&[]);
                let t = Tile {
                    i0,
                    j0,
                    w,
                    ldc,
                    from,
                };
                // SAFETY: the callers' asserts bound every index the kernel reads: rows·rs +
                // k·cs within A, k rows of w columns within B (the kernel masks the rest); the
                // tile's elements of C are the caller's.
                let rows = if m - i0 >= R { R } else { (m - i0).min(6) };
                match rows {
                    r if r == R => tile::<R, V>(k, a0, a, b, ldb, c, t, ep),
                    6 => tile::<6, V>(k, a0, a, b, ldb, c, t, ep),
                    5 => tile::<5, V>(k, a0, a, b, ldb, c, t, ep),
                    4 => tile::<4, V>(k, a0, a, b, ldb, c, t, ep),
                    3 => tile::<3, V>(k, a0, a, b, ldb, c, t, ep),
                    2 => tile::<2, V>(k, a0, a, b, ldb, c, t, ep),
                    _ => tile::<1, V>(k, a0, a, b, ldb, c, t, ep),
                }
                i0 += rows;
            }
        }
    };
}
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
use rows_of;

#[cfg(target_arch = "x86_64")]
pub(super) mod avx2 {
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
}

#[cfg(target_arch = "x86_64")]
pub(super) mod avx512 {
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
}

#[cfg(target_arch = "aarch64")]
pub(super) mod neon {
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
                _ => super::super::row_loop(m, k, a, bs, ldb, (j0 + col, width), c, ldc, ep, from),
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
}
