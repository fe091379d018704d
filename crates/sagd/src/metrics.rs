//! Distances between a sample and a distribution with a closed-form CDF: the Kolmogorov-Smirnov
//! distance D = sup |F̂ − F| and the 1-Wasserstein distance W = ∫ |F̂ − F| dz, both computed exactly
//! (no grid): F̂ is constant between order statistics, and on each such interval ∫ (F − c) comes from
//! G(z) = ∫_{−∞}^z F, with the one crossing of F and c, if any, found by the exact quantile.

use rand::Rng;
use rand_distr::{Distribution, Exp, StandardNormal};
use rayon::prelude::*;
use serde::{Deserialize, Serialize};
use statrs::distribution::{ContinuousCDF, Normal};
use statrs::function::erf::erfc;

const INV_SQRT_2PI: f64 = 0.398_942_280_401_432_7;

/// The latent distributions of the debiased-VAE experiments.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum Law {
    /// A finite mixture of normals (one component: a normal).
    Mixture {
        /// (weight, mean, standard deviation) per component.
        components: Vec<(f64, f64, f64)>,
    },
    /// The exponential distribution with this mean.
    Exponential {
        /// The mean β.
        mean: f64,
    },
}

fn phi_cdf(s: f64) -> f64 {
    0.5 * erfc(-s / std::f64::consts::SQRT_2)
}

fn phi_pdf(s: f64) -> f64 {
    INV_SQRT_2PI * (-0.5 * s * s).exp()
}

impl Law {
    /// N(mean, sd²).
    pub fn normal(mean: f64, sd: f64) -> Self {
        Law::Mixture {
            components: vec![(1.0, mean, sd)],
        }
    }

    /// The CDF F.
    pub fn cdf(&self, t: f64) -> f64 {
        match self {
            Law::Mixture { components } => components
                .iter()
                .map(|(w, m, s)| w * phi_cdf((t - m) / s))
                .sum(),
            Law::Exponential { mean } => {
                if t > 0.0 {
                    -(-t / mean).exp_m1()
                } else {
                    0.0
                }
            }
        }
    }

    /// The density.
    pub fn pdf(&self, t: f64) -> f64 {
        match self {
            Law::Mixture { components } => components
                .iter()
                .map(|(w, m, s)| w * phi_pdf((t - m) / s) / s)
                .sum(),
            Law::Exponential { mean } => {
                if t >= 0.0 {
                    (-t / mean).exp() / mean
                } else {
                    0.0
                }
            }
        }
    }

    /// G(t) = ∫_{−∞}^t F = E (t − X)⁺.
    pub fn g(&self, t: f64) -> f64 {
        match self {
            Law::Mixture { components } => components
                .iter()
                .map(|(w, m, s)| {
                    let z = (t - m) / s;
                    w * s * (phi_pdf(z) + z * phi_cdf(z))
                })
                .sum(),
            Law::Exponential { mean } => {
                if t > 0.0 {
                    t + mean * (-t / mean).exp_m1()
                } else {
                    0.0
                }
            }
        }
    }

    /// H(t) = ∫_t^∞ (1 − F) = E (X − t)⁺.
    pub fn h(&self, t: f64) -> f64 {
        match self {
            Law::Mixture { components } => components
                .iter()
                .map(|(w, m, s)| {
                    let z = (t - m) / s;
                    w * s * (phi_pdf(z) - z * phi_cdf(-z))
                })
                .sum(),
            Law::Exponential { mean } => {
                if t > 0.0 {
                    mean * (-t / mean).exp()
                } else {
                    mean - t
                }
            }
        }
    }

    /// The quantile F⁻¹(p), p in (0, 1).
    pub fn quantile(&self, p: f64) -> f64 {
        match self {
            Law::Exponential { mean } => -mean * (-p).ln_1p(),
            Law::Mixture { components } if components.len() == 1 => {
                let (_, m, s) = components[0];
                Normal::new(m, s)
                    .map(|n| n.inverse_cdf(p))
                    .unwrap_or(f64::NAN)
            }
            Law::Mixture { components } => {
                let lo0 = components
                    .iter()
                    .map(|(_, m, s)| m - 40.0 * s)
                    .fold(f64::INFINITY, f64::min);
                let hi0 = components
                    .iter()
                    .map(|(_, m, s)| m + 40.0 * s)
                    .fold(f64::NEG_INFINITY, f64::max);
                let (mut lo, mut hi) = (lo0, hi0);
                for _ in 0..200 {
                    let mid = 0.5 * (lo + hi);
                    if mid <= lo || mid >= hi {
                        break;
                    }
                    if self.cdf(mid) < p {
                        lo = mid;
                    } else {
                        hi = mid;
                    }
                }
                0.5 * (lo + hi)
            }
        }
    }

    /// The mean.
    pub fn mean(&self) -> f64 {
        match self {
            Law::Mixture { components } => components.iter().map(|(w, m, _)| w * m).sum(),
            Law::Exponential { mean } => *mean,
        }
    }

    /// One draw.
    pub fn sample<R: Rng + ?Sized>(&self, rng: &mut R) -> f64 {
        match self {
            Law::Exponential { mean } => Exp::new(1.0 / mean)
                .map(|e| e.sample(rng))
                .unwrap_or(f64::NAN),
            Law::Mixture { components } => {
                let u: f64 = rand::RngExt::random(rng);
                let mut acc = 0.0;
                let mut pick = components[components.len() - 1];
                for c in components {
                    acc += c.0;
                    if u < acc {
                        pick = *c;
                        break;
                    }
                }
                let z: f64 = StandardNormal.sample(rng);
                pick.1 + pick.2 * z
            }
        }
    }
}

/// (D, W) of a sample against `law`. Non-finite values make both infinite.
pub fn ks_w1(sample: &[f64], law: &Law) -> (f64, f64) {
    if sample.is_empty() || sample.iter().any(|v| !v.is_finite()) {
        return (f64::INFINITY, f64::INFINITY);
    }
    // In parallel, each value computed as the sequential loop would and the sums taken in
    // order: the same bits for any number of threads.
    let mut z = sample.to_vec();
    z.par_sort_unstable_by(f64::total_cmp);
    let m = z.len();
    let mf = m as f64;
    let f: Vec<f64> = z.par_iter().map(|t| law.cdf(*t)).collect();
    let g: Vec<f64> = z.par_iter().map(|t| law.g(*t)).collect();
    let mut d: f64 = 0.0;
    for (i, fi) in f.iter().enumerate() {
        d = d.max((i + 1) as f64 / mf - fi).max(fi - i as f64 / mf);
    }
    // W: the two tails, then each interval [z_i, z_{i+1}] where F̂ = c = (i+1)/m.
    let terms: Vec<f64> = (0..m - 1)
        .into_par_iter()
        .map(|i| {
            let (a, b, c) = (z[i], z[i + 1], (i + 1) as f64 / mf);
            if b <= a {
                0.0
            } else if f[i] < c && c < f[i + 1] {
                let q = law.quantile(c).clamp(a, b);
                let gq = law.g(q);
                (c * (q - a) - (gq - g[i])) + ((g[i + 1] - gq) - c * (b - q))
            } else {
                ((g[i + 1] - g[i]) - c * (b - a)).abs()
            }
        })
        .collect();
    // An empty interval's term is 0, which adds nothing.
    let w = terms.iter().fold(g[0] + law.h(z[m - 1]), |w, t| w + t);
    (d, w)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn trapezoid_w1(sample: &[f64], law: &Law) -> f64 {
        let mut z = sample.to_vec();
        z.sort_by(f64::total_cmp);
        let (lo, hi) = (
            z[0].min(law.quantile(1e-12)) - 1.0,
            z[z.len() - 1].max(law.quantile(1.0 - 1e-12)) + 1.0,
        );
        let n = 2_000_001;
        let h = (hi - lo) / (n - 1) as f64;
        let mut j = 0;
        let mut total = 0.0;
        let mut prev = 0.0;
        for k in 0..n {
            let t = lo + h * k as f64;
            while j < z.len() && z[j] <= t {
                j += 1;
            }
            let v = (j as f64 / z.len() as f64 - law.cdf(t)).abs();
            if k > 0 {
                total += 0.5 * h * (v + prev);
            }
            prev = v;
        }
        total
    }

    #[test]
    fn g_and_h_are_the_integrals_of_the_cdf() {
        for law in [
            Law::normal(1.0, 0.5),
            Law::Exponential { mean: 2.0 },
            Law::Mixture {
                components: vec![(0.4, 0.0, 0.5), (0.6, 3.0, 0.5)],
            },
        ] {
            for t in [-1.0, 0.3, 2.5] {
                let h = 1e-5;
                let dg = (law.g(t + h) - law.g(t - h)) / (2.0 * h);
                assert!((dg - law.cdf(t)).abs() < 1e-8, "{law:?} G' at {t}");
                let dh = (law.h(t + h) - law.h(t - h)) / (2.0 * h);
                assert!((dh + 1.0 - law.cdf(t)).abs() < 1e-8, "{law:?} H' at {t}");
                assert!(
                    (law.g(t) - law.h(t) - (t - law.mean())).abs() < 1e-12,
                    "G − H = t − E X"
                );
                let p = law.cdf(t);
                if p > 1e-9 && p < 1.0 - 1e-9 {
                    assert!(
                        (law.quantile(p) - t).abs() < 1e-7,
                        "{law:?} quantile at {p}"
                    );
                }
            }
        }
    }

    #[test]
    fn quantile_samples_have_the_closed_form_distances() {
        // z_i = F⁻¹((i − ½)/m): D = 1/(2m) exactly; W against a fine trapezoid rule.
        let m = 2000;
        for law in [
            Law::normal(1.0, 0.5),
            Law::Exponential { mean: 2.0 },
            Law::Mixture {
                components: vec![(0.4, 0.0, 0.5), (0.6, 3.0, 0.5)],
            },
        ] {
            let z: Vec<f64> = (1..=m)
                .map(|i| law.quantile((i as f64 - 0.5) / m as f64))
                .collect();
            let (d, w) = ks_w1(&z, &law);
            assert!((d - 0.5 / m as f64).abs() < 1e-9, "{law:?}: D = {d}");
            let wt = trapezoid_w1(&z, &law);
            assert!((w - wt).abs() < 1e-6, "{law:?}: W = {w}, trapezoid {wt}");
            // A shifted sample: W = |shift| for a location shift of the quantiles, approximately.
            let zs: Vec<f64> = z.iter().map(|v| v + 0.3).collect();
            let (_, w2) = ks_w1(&zs, &law);
            assert!((w2 - trapezoid_w1(&zs, &law)).abs() < 1e-6);
            assert!((w2 - 0.3).abs() < 0.01, "{w2}");
        }
        assert_eq!(
            ks_w1(&[1.0, f64::NAN], &Law::normal(0.0, 1.0)).0,
            f64::INFINITY
        );
    }
}
