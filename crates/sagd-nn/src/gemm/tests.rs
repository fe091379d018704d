//! The products against their definition, on every shape, epilogue and kernel path.
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
        // Narrow columns: one vector (24-row tiles), two (12-row tiles), with remainders.
        (61, 16, 9),
        (53, 20, 17),
        (30, 33, 12),
        // NEON's last strips of 12 and 8 columns.
        (11, 28, 9),
        (17, 24, 5),
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
            for ep in every_epilogue(&bias, &s) {
                let mut c = c0.clone();
                gemm(m, n, k, sa, &b, ldb, &mut c, ldc, ep);
                // The narrower kernels give the same bits (on a CPU that has them).
                for path in [Capability::Avx2, Capability::Portable] {
                    let mut c2 = c0.clone();
                    FORCED.with(|p| p.set(Some(path)));
                    gemm(m, n, k, sa, &b, ldb, &mut c2, ldc, ep);
                    FORCED.with(|p| p.set(None));
                    assert!(
                        c.iter().zip(&c2).all(|(x, y)| x.to_bits() == y.to_bits()),
                        "{m}×{n}×{k} {ep:?}: {path:?}"
                    );
                }
                // On aarch64, the NEON tiles give the scalar row loop's bits.
                #[cfg(target_arch = "aarch64")]
                {
                    let mut c2 = c0.clone();
                    kernel::ROW_LOOP.with(|r| r.set(true));
                    gemm(m, n, k, sa, &b, ldb, &mut c2, ldc, ep);
                    kernel::ROW_LOOP.with(|r| r.set(false));
                    assert!(
                        c.iter().zip(&c2).all(|(x, y)| x.to_bits() == y.to_bits()),
                        "{m}×{n}×{k} {ep:?}: NEON against the row loop"
                    );
                }
                for i in 0..m {
                    for j in 0..n {
                        let ab = want[i * n + j];
                        let expect = match ep {
                            Epilogue::Store => ab,
                            Epilogue::Add => ab + c0[i * ldc + j] as f64,
                            Epilogue::Bias(_) => ab + bias[j] as f64,
                            Epilogue::Scale(_) => ab * s[i * ldc + j] as f64,
                            Epilogue::BiasRelu(_) => (ab + bias[j] as f64).max(0.0),
                            Epilogue::Positive(_) => {
                                if s[i * ldc + j] > 0.0 {
                                    ab
                                } else {
                                    0.0
                                }
                            }
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

/// Every epilogue, with these bias and scale slices.
fn every_epilogue<'a>(bias: &'a [f32], s: &'a [f32]) -> [Epilogue<'a>; 6] {
    [
        Epilogue::Store,
        Epilogue::Add,
        Epilogue::Bias(bias),
        Epilogue::Scale(s),
        Epilogue::BiasRelu(bias),
        Epilogue::Positive(s),
    ]
}

/// A (m × k), B (k × n), a bias (n), a scale and a starting C (m × n), filled.
fn operands(m: usize, n: usize, k: usize) -> [Vec<f32>; 5] {
    [
        fill(m * k, 1),
        fill(k * n, 2),
        fill(n, 3),
        fill(m * n, 4),
        fill(m * n, 5),
    ]
}

/// A row-major matrix with `cols` columns.
fn by_rows(data: &[f32], cols: usize) -> Strided<'_> {
    Strided {
        data,
        rows: cols,
        cols: 1,
    }
}

/// A deterministic fill in [−1, 1).
fn fill(n: usize, seed: usize) -> Vec<f32> {
    (0..n)
        .map(|i| (((i + seed) as f32 * 0.618).fract() - 0.5) * 2.0)
        .collect()
}

#[test]
fn packed_panels_give_the_tile_kernels_bits() {
    // Partial panels, odd row counts, and a product large enough to run in blocks.
    // k beyond PANEL_ROWS, whole and cut, carries the chains between steps.
    for &(m, n, k) in &[
        (7, 64, 64),
        (13, 100, 37),
        (6, 130, 5),
        (300, 700, 400),
        (9, 70, 600),
    ] {
        let [a, b, bias, s, c0] = operands(m, n, k);
        let sa = by_rows(&a, k);
        for transposed in [false, true] {
            // B given as is, or as the transpose of an n × k matrix (a layer's W).
            let bt: Vec<f32> = (0..n * k).map(|i| b[(i % k) * n + i / k]).collect();
            let sb = if transposed {
                Strided {
                    data: &bt,
                    rows: 1,
                    cols: k,
                }
            } else {
                by_rows(&b, n)
            };
            let mut panels = Panels::default();
            panels.pack(sb, k, n);
            for ep in every_epilogue(&bias, &s) {
                let (mut want, mut got) = (c0.clone(), c0.clone());
                // The tile kernel itself, whatever the size.
                let wide = kernel_capability();
                for j0 in (0..n).step_by(NR) {
                    let w = NR.min(n - j0);
                    // SAFETY: `want` is m × n, B k × n.
                    unsafe {
                        columns(
                            m,
                            k,
                            sa,
                            &b[j0..],
                            n,
                            (j0, w),
                            want.as_mut_ptr(),
                            n,
                            ep,
                            wide,
                            Carried::ZERO,
                        )
                    };
                }
                gemm_panels(m, sa, &panels, &mut got, n, ep);
                assert!(
                    want.iter()
                        .zip(&got)
                        .all(|(x, y)| x.to_bits() == y.to_bits()),
                    "{m}×{n}×{k} {ep:?} transposed {transposed}"
                );
            }
        }
    }
}

#[test]
fn a_large_product_in_blocks_gives_the_bits_of_one_block() {
    // Cut by columns (wide C) and by rows (tall C), with every epilogue.
    for &(m, n, k) in &[(400, 520, 330), (900, 200, 400)] {
        assert!(m * n * k / BLOCK_MACS > 1);
        let [a, b, bias, s, c0] = operands(m, n, k);
        let (sa, sb) = (by_rows(&a, k), by_rows(&b, n));
        for ep in every_epilogue(&bias, &s) {
            let (mut one, mut cut) = (c0.clone(), c0.clone());
            // SAFETY: `one` is m × n.
            unsafe { packed_block(m, n, k, sa, sb, one.as_mut_ptr(), n, ep) };
            packed(m, n, k, sa, sb, &mut cut, n, ep);
            assert!(
                one.iter()
                    .zip(&cut)
                    .all(|(x, y)| x.to_bits() == y.to_bits()),
                "{m}×{n}×{k} {ep:?}"
            );
        }
    }
}
