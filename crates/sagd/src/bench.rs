//! Timing of the sampler's inner loop, shared by the `sagd bench kernel` command and the criterion
//! benchmarks: chain steps on a standard Gaussian target, one thread.

use std::time::Instant;

use serde::Serialize;

use rand::SeedableRng;
use rand_distr::{Distribution, StandardNormal};
use rand_xoshiro::Xoshiro256PlusPlus;

use crate::error::Result;
use crate::langevin::{ChainSet, LangevinSettings, Momentum, Scheme};
use crate::model::IsoGaussian;
use crate::real::Real;
use crate::rng::NormalStream;

/// One row of the kernel benchmark.
#[derive(Clone, Debug, Serialize)]
pub struct KernelTiming {
    /// The integrator; "noise" for normal generation alone; "naive-euler" for a plain loop with one
    /// `rand_distr` normal draw per coordinate (the baseline to beat).
    pub scheme: String,
    /// "f64" or "f32".
    pub precision: String,
    /// The chain dimension.
    pub dim: usize,
    /// Chain steps timed.
    pub steps: usize,
    /// Nanoseconds per chain-step per dimension: the best of the repeats.
    pub ns_per_step_dim: f64,
    /// Nanoseconds per chain-step per dimension: the median of the repeats.
    pub ns_per_step_dim_median: f64,
}

fn summarise(mut samples: Vec<f64>) -> (f64, f64) {
    samples.sort_by(f64::total_cmp);
    (samples[0], samples[samples.len() / 2])
}

/// Times `scheme` on one chain of dimension `dim` with γ = 1, δ = 0.1: `repeats` runs of enough
/// steps to touch about `work` coordinates each.
pub fn time_scheme<T: Real>(
    scheme: Scheme,
    dim: usize,
    work: usize,
    repeats: usize,
) -> Result<KernelTiming> {
    let target = IsoGaussian {
        dim,
        mean: 0.0,
        sd: 1.0,
    };
    let kernel = LangevinSettings { scheme, gamma: 1.0 }.kernel::<T>(0.1)?;
    let mut chains = ChainSet::<T>::new(1, dim, 1);
    chains.init(&target, &vec![T::of(0.5); dim], Momentum::Normal)?;
    let steps = (work / dim).max(10);
    chains.burn_in(&target, &kernel, steps / 10)?;
    let mut samples = Vec::with_capacity(repeats);
    for _ in 0..repeats.max(1) {
        let t0 = Instant::now();
        for _ in 0..steps {
            chains.step(&target, &kernel)?;
        }
        samples.push(t0.elapsed().as_nanos() as f64 / (steps * dim) as f64);
    }
    let (best, median) = summarise(samples);
    Ok(KernelTiming {
        scheme: scheme.name().into(),
        precision: precision::<T>().into(),
        dim,
        steps,
        ns_per_step_dim: best,
        ns_per_step_dim_median: median,
    })
}

fn precision<T: Real>() -> &'static str {
    if std::mem::size_of::<T>() == 4 {
        "f32"
    } else {
        "f64"
    }
}

/// The baseline: the paper's Euler step on N(0, I) as a plain loop with one `rand_distr` normal draw
/// (ziggurat over xoshiro256++) per coordinate.
pub fn time_naive_euler(dim: usize, work: usize, repeats: usize) -> KernelTiming {
    let (gamma, delta) = (1.0f64, 0.1f64);
    let mut rng = Xoshiro256PlusPlus::seed_from_u64(1);
    let mut x = vec![0.5f64; dim];
    let mut rho = vec![0.0f64; dim];
    let noise = (2.0 * gamma * delta).sqrt();
    let steps = (work / dim).max(10);
    let mut samples = Vec::with_capacity(repeats);
    for _ in 0..repeats.max(1) {
        let t0 = Instant::now();
        for _ in 0..steps {
            for (xi, ri) in x.iter_mut().zip(rho.iter_mut()) {
                let grad = -*xi;
                let eta: f64 = StandardNormal.sample(&mut rng);
                *xi += delta * *ri;
                *ri = (1.0 - gamma * delta) * *ri + delta * grad + noise * eta;
            }
        }
        samples.push(t0.elapsed().as_nanos() as f64 / (steps * dim) as f64);
    }
    std::hint::black_box(&x);
    let (best, median) = summarise(samples);
    KernelTiming {
        scheme: "naive-euler".into(),
        precision: "f64".into(),
        dim,
        steps,
        ns_per_step_dim: best,
        ns_per_step_dim_median: median,
    }
}

/// Times the normal generator alone, filling buffers of length `dim`.
pub fn time_noise(dim: usize, work: usize, repeats: usize) -> KernelTiming {
    let mut s = NormalStream::new(1);
    let mut buf = vec![0.0; dim];
    let steps = (work / dim).max(10);
    let mut samples = Vec::with_capacity(repeats);
    let mut sink = 0.0;
    for _ in 0..repeats.max(1) {
        let t0 = Instant::now();
        for _ in 0..steps {
            s.fill(&mut buf);
            sink += buf[0];
        }
        samples.push(t0.elapsed().as_nanos() as f64 / (steps * dim) as f64);
    }
    std::hint::black_box(sink);
    let (best, median) = summarise(samples);
    KernelTiming {
        scheme: "noise".into(),
        precision: "f64".into(),
        dim,
        steps,
        ns_per_step_dim: best,
        ns_per_step_dim_median: median,
    }
}
