//! The HMC kernel on Gaussian targets: exact moments (Metropolis removes the discretisation bias),
//! acceptance near 1 for small steps and lower for large ones, energy change reported.

mod common;

use common::mean_se;
use sagd::hmc::HmcSettings;
use sagd::langevin::{ChainSet, Momentum};
use sagd::model::IsoGaussian;

fn run(step: f64, l: usize, steps: usize) -> (Vec<f64>, Vec<f64>, f64, f64) {
    let (mean, sd) = (1.5, 0.7);
    let target = IsoGaussian { dim: 2, mean, sd };
    let k = HmcSettings {
        step_size: step,
        n_leapfrog: l,
    }
    .kernel::<f64>()
    .unwrap();
    let n = 1000;
    let mut chains = ChainSet::<f64>::new(n, 2, 21);
    chains
        .init(&target, &[mean, mean], Momentum::Normal)
        .unwrap();
    chains.burn_in(&target, &k, 100).unwrap();
    let mut m1 = vec![0.0; n];
    let mut m2 = vec![0.0; n];
    let (mut acc, mut dh) = (0.0, 0.0);
    for _ in 0..steps {
        let info = chains.step(&target, &k).unwrap();
        acc += info.acceptance.unwrap() / steps as f64;
        dh += info.energy_change.unwrap().abs() / steps as f64;
        for c in 0..n {
            let x = chains.position(c);
            m1[c] += (x[0] + x[1]) / (2 * steps) as f64;
            m2[c] += ((x[0] - mean).powi(2) + (x[1] - mean).powi(2)) / (2 * steps) as f64;
        }
    }
    (m1, m2, acc, dh)
}

#[test]
fn hmc_has_the_exact_moments_and_high_acceptance_for_small_steps() {
    let (m1, m2, acc, dh) = run(0.05, 5, 1000);
    let (mu, se) = mean_se(&m1);
    let (var, se_v) = mean_se(&m2);
    assert!((mu - 1.5).abs() < 5.0 * se, "mean {mu} ± {se}");
    assert!((var - 0.49).abs() < 5.0 * se_v, "var {var} ± {se_v}");
    assert!(acc > 0.995, "acceptance {acc}");
    assert!(dh < 1e-3, "energy change {dh}");
}

#[test]
fn hmc_with_large_steps_rejects_but_stays_exact() {
    // εw = 1.3/0.7 ≈ 1.86 < 2: stable leapfrog with a large energy error.
    let (m1, m2, acc, _) = run(1.3, 3, 1000);
    let (mu, se) = mean_se(&m1);
    let (var, se_v) = mean_se(&m2);
    assert!(acc < 0.9, "acceptance {acc}");
    assert!((mu - 1.5).abs() < 5.0 * se, "mean {mu} ± {se}");
    assert!((var - 0.49).abs() < 5.0 * se_v, "var {var} ± {se_v}");
}
