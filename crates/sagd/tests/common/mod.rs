//! Closed forms for the tests: on a 1-D Gaussian target N(0, 1/w²) every scheme is a linear
//! recursion in (ξ, ρ, c) — c the position at which the cached gradient was taken — driven by
//! Gaussian noise, so its means and covariances follow exactly from the kernel's coefficient table.
#![allow(dead_code)]

pub mod em;
pub mod glmm;
pub mod state_space;

use sagd::langevin::Kernel;

pub type M3 = [[f64; 3]; 3];

pub fn mat_mul(a: &M3, b: &M3) -> M3 {
    let mut c = [[0.0; 3]; 3];
    for i in 0..3 {
        for j in 0..3 {
            c[i][j] = (0..3).map(|k| a[i][k] * b[k][j]).sum();
        }
    }
    c
}

pub fn transpose(a: &M3) -> M3 {
    let mut t = [[0.0; 3]; 3];
    for i in 0..3 {
        for j in 0..3 {
            t[i][j] = a[j][i];
        }
    }
    t
}

pub fn identity() -> M3 {
    [[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]]
}

/// One transition as W' = A W + noise with covariance Q, for target precision `w2` (∇log π = −w2·ξ).
pub fn linear_map(kernel: &Kernel<f64>, w2: f64) -> (M3, M3) {
    let mut a = identity();
    let mut q = [[0.0; 3]; 3];
    let mut apply = |m: M3, cols: &[[f64; 3]]| {
        a = mat_mul(&m, &a);
        q = mat_mul(&mat_mul(&m, &q), &transpose(&m));
        for c in cols {
            for i in 0..3 {
                for j in 0..3 {
                    q[i][j] += c[i] * c[j];
                }
            }
        }
    };
    for (name, c) in kernel.table() {
        match name {
            "drift" => apply([[1.0, c[0], 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]], &[]),
            "kick" => apply(
                [[1.0, 0.0, 0.0], [0.0, c[0], -c[1] * w2], [0.0, 0.0, 1.0]],
                &[[0.0, c[2], 0.0]],
            ),
            "ou" => {
                let (decay, drift, v1, x1, x2) = (c[0], c[1], c[2], c[3], c[4]);
                apply(
                    [[1.0, drift, 0.0], [0.0, decay, 0.0], [0.0, 0.0, 1.0]],
                    &[[x1, v1, 0.0], [x2, 0.0, 0.0]],
                )
            }
            "gradient" => apply([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [1.0, 0.0, 0.0]], &[]),
            other => panic!("unexpected op {other}"),
        }
    }
    (a, q)
}

/// Σ' = A Σ Aᵀ + Q.
pub fn propagate(a: &M3, q: &M3, s: &M3) -> M3 {
    let mut n = mat_mul(&mat_mul(a, s), &transpose(a));
    for i in 0..3 {
        for j in 0..3 {
            n[i][j] += q[i][j];
        }
    }
    n
}

/// The stationary covariance of the recursion (by doubling: Σ = Σ_k A^k Q A^kᵀ).
pub fn stationary(a: &M3, q: &M3) -> M3 {
    let mut s = *q;
    let mut ak = *a;
    for _ in 0..60 {
        s = propagate(&ak, &s, &s);
        ak = mat_mul(&ak, &ak);
    }
    s
}

/// Exact stationary (Var ξ, Var ρ) of `kernel` on N(·, 1/w2).
pub fn stationary_var(kernel: &Kernel<f64>, w2: f64) -> (f64, f64) {
    let (a, q) = linear_map(kernel, w2);
    let s = stationary(&a, &q);
    (s[0][0], s[1][1])
}

/// Mean and standard error of per-chain values (independent chains: the exact MC error).
pub fn mean_se(v: &[f64]) -> (f64, f64) {
    let n = v.len() as f64;
    let m = v.iter().sum::<f64>() / n;
    let var = v.iter().map(|x| (x - m).powi(2)).sum::<f64>() / (n - 1.0);
    (m, (var / n).sqrt())
}

pub mod problems;
