//! Simulated GLMM data with one random intercept per group, for the tests that fit it.
#![allow(dead_code)]

use rand::SeedableRng;
use rand_distr::{Distribution, Normal, Poisson, StandardNormal};
use rand_xoshiro::Xoshiro256PlusPlus;
use sagd::glmm::{Family, Glmm};

/// 50 groups of 8 rows: η = 0.5 + 0.3 x + b_g, b_g ~ N(0, τ²), τ = 0.5 (1 for Bernoulli rows,
/// which say less about τ: at 0.5 some seeds put the maximum at τ = 0).
pub fn simulate(family: Family, seed: u64) -> Glmm {
    let tau = if family == Family::Binomial { 1.0 } else { 0.5 };
    let mut rng = Xoshiro256PlusPlus::seed_from_u64(seed);
    let (groups, per) = (50, 8);
    let b: Vec<f64> = (0..groups)
        .map(|_| {
            let z: f64 = StandardNormal.sample(&mut rng);
            tau * z
        })
        .collect();
    let mut x = Vec::new();
    let mut y = Vec::new();
    let mut g = Vec::new();
    for (j, bj) in b.iter().enumerate() {
        for _ in 0..per {
            let xi: f64 = StandardNormal.sample(&mut rng);
            let eta = 0.5 + 0.3 * xi + bj;
            y.push(match family {
                Family::Gaussian => eta + Normal::new(0.0, 0.8).unwrap().sample(&mut rng),
                Family::Poisson => Poisson::new(eta.exp()).unwrap().sample(&mut rng),
                Family::Binomial => {
                    let u: f64 = rand_distr::StandardUniform.sample(&mut rng);
                    f64::from(u8::from(u < 1.0 / (1.0 + (-eta).exp())))
                }
            });
            x.extend([1.0, xi]);
            g.push(j);
        }
    }
    let n = y.len();
    Glmm::new(family, y, x, &g, vec![1.0; n], None).unwrap()
}
