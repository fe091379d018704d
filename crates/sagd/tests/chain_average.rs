//! Theorem 2: the chain average φ̂ = (1/K) Σ_k φ(ξ_k) of the Euler scheme has bias O(1/(Kδ) + δ) and
//! mean squared error O(1/(Kδ) + δ²). On a Gaussian target started off-centre both are known exactly
//! (the chain is a linear Gaussian recursion); a Monte Carlo run checks the implementation against the
//! exact values, and the exact values show the rates.
//!
//! Target N(0, 1), γ = 1, ξ₀ = 3, ρ₀ = 0, φ(ξ) = ξ² (so φ̄ = 1), states after each step.

mod common;

use common::{linear_map, mat_mul, mean_se, propagate, stationary, M3};
use sagd::langevin::{ChainSet, LangevinSettings, Momentum, Scheme};
use sagd::model::IsoGaussian;

fn kernel(delta: f64) -> sagd::langevin::Kernel<f64> {
    LangevinSettings {
        scheme: Scheme::Euler,
        gamma: 1.0,
    }
    .kernel(delta)
    .unwrap()
}

/// Exact (E φ̂ − 1, Var φ̂) for K steps of size δ.
fn exact(delta: f64, k: usize) -> (f64, f64) {
    let (a, q) = linear_map(&kernel(delta), 1.0);
    let mut m = [3.0, 0.0, 3.0];
    let mut s: M3 = [[0.0; 3]; 3];
    let mut means = Vec::with_capacity(k);
    let mut covs = Vec::with_capacity(k);
    for _ in 0..k {
        m = [
            (0..3).map(|j| a[0][j] * m[j]).sum(),
            (0..3).map(|j| a[1][j] * m[j]).sum(),
            (0..3).map(|j| a[2][j] * m[j]).sum(),
        ];
        s = propagate(&a, &q, &s);
        means.push(m[0]);
        covs.push(s);
    }
    let kf = k as f64;
    let mean_phi = (0..k)
        .map(|i| covs[i][0][0] + means[i] * means[i])
        .sum::<f64>()
        / kf;
    // Cov(ξ_j², ξ_l²) = 2C² + 4 m_j m_l C with C = Cov(ξ_j, ξ_l) = (A^{l−j} Σ_j)[0][0].
    let mut var = 0.0;
    for j in 0..k {
        let mut p = covs[j];
        for l in j..k {
            let c = p[0][0];
            let cov = 2.0 * c * c + 4.0 * means[j] * means[l] * c;
            var += if l == j { cov } else { 2.0 * cov };
            p = mat_mul(&a, &p);
        }
    }
    (mean_phi - 1.0, var / (kf * kf))
}

#[test]
fn monte_carlo_matches_the_exact_bias_and_mse() {
    let (delta, k, n) = (0.1, 200, 20_000);
    let (bias, var) = exact(delta, k);
    let mse = var + bias * bias;
    let target = IsoGaussian {
        dim: 1,
        mean: 0.0,
        sd: 1.0,
    };
    let mut chains = ChainSet::<f64>::new(n, 1, 17);
    chains.init(&target, &[3.0], Momentum::Zero).unwrap();
    let kern = kernel(delta);
    let mut phi = vec![0.0; n];
    for _ in 0..k {
        chains.step(&target, &kern).unwrap();
        for (p, x) in phi.iter_mut().zip(chains.positions()) {
            *p += x * x / k as f64;
        }
    }
    let err: Vec<f64> = phi.iter().map(|p| p - 1.0).collect();
    let sq: Vec<f64> = err.iter().map(|e| e * e).collect();
    let (b, se_b) = mean_se(&err);
    let (m, se_m) = mean_se(&sq);
    assert!(
        (b - bias).abs() < 5.0 * se_b,
        "bias {b} ± {se_b}, exact {bias}"
    );
    assert!(
        (m - mse).abs() < 5.0 * se_m,
        "mse {m} ± {se_m}, exact {mse}"
    );
}

#[test]
fn bias_and_mse_fall_at_the_rates_of_theorem_2() {
    // The stationary bias is first order in δ.
    let stat = |d: f64| {
        let (a, q) = linear_map(&kernel(d), 1.0);
        stationary(&a, &q)[0][0] - 1.0
    };
    let (b1, b2) = (stat(0.02), stat(0.01));
    assert!(
        (b1 / b2 - 2.0).abs() < 0.05,
        "stationary bias ratio {}",
        b1 / b2
    );

    // At fixed δ the remaining bias falls as 1/(Kδ): K·(bias − bias_∞) settles.
    let delta = 0.05;
    let b_inf = stat(delta);
    let r = |k: usize| (exact(delta, k).0 - b_inf) * k as f64 * delta;
    let (r1, r2) = (r(800), r(1600));
    assert!(
        (r1 / r2 - 1.0).abs() < 0.05,
        "transient bias ×Kδ: {r1} vs {r2}"
    );

    // The variance falls as 1/(Kδ), with a constant that does not depend on δ as δ → 0.
    let v = |d: f64, k: usize| exact(d, k).1 * k as f64 * d;
    let (v1, v2) = (v(0.05, 800), v(0.05, 1600));
    assert!((v1 / v2 - 1.0).abs() < 0.1, "variance ×Kδ: {v1} vs {v2}");
    let (v3, v4) = (v(0.02, 2000), v(0.01, 4000));
    assert!(
        (v3 / v4 - 1.0).abs() < 0.1,
        "variance ×Kδ across δ: {v3} vs {v4}"
    );

    // Over a grid where each term dominates somewhere, bias/(1/(Kδ) + δ) and
    // mse/(1/(Kδ) + δ²) stay within a narrow band: the bounds hold with their stated shape.
    let mut rb: Vec<f64> = Vec::new();
    let mut rm: Vec<f64> = Vec::new();
    for d in [0.01, 0.02, 0.05, 0.1] {
        for k in [100, 400, 1600] {
            let (b, var) = exact(d, k);
            let kd = k as f64 * d;
            rb.push(b.abs() / (1.0 / kd + d));
            rm.push((var + b * b) / (1.0 / kd + d * d));
        }
    }
    let spread = |v: &[f64]| {
        v.iter().cloned().fold(0.0, f64::max) / v.iter().cloned().fold(f64::INFINITY, f64::min)
    };
    println!("bias ratios {rb:?}\nmse ratios {rm:?}");
    assert!(spread(&rb) < 6.0, "bias ratios {rb:?}");
    assert!(spread(&rm) < 15.0, "mse ratios {rm:?}");
}
