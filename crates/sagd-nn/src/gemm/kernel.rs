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

/// [`super::columns`] on the scalar row loop: each row of a tile's columns by [`tile_row`].
///
/// # Safety
/// As [`super::columns`].
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn row_loop(
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
    let mut acc = [[0.0f32; NR]; MR];
    for i0 in (0..m).step_by(MR) {
        let rows = MR.min(m - i0);
        let a0 = a.data.get(i0 * a.rows..).unwrap_or(&[]);
        debug_assert!(k == 0 || a0.len() > (rows - 1) * a.rows + (k - 1) * a.cols);
        for (i, acc_i) in acc[..rows].iter_mut().enumerate() {
            let ai = a0.get(i * a.rows..).unwrap_or(&[]);
            let acc_i = &mut acc_i[..w];
            if from.0.is_null() {
                acc_i.fill(0.0);
            } else {
                acc_i.copy_from_slice(std::slice::from_raw_parts(from.0.add((i0 + i) * NR), w));
            }
            tile_row(k, ai, a.cols, b, ldb, acc_i);
        }
        // SAFETY: the tile's elements of C are the caller's.
        finish(&acc[..rows], i0, j0, w, c, ldc, ep);
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
pub(super) mod avx2;

#[cfg(target_arch = "x86_64")]
pub(super) mod avx512;

#[cfg(target_arch = "aarch64")]
pub(super) mod neon;
