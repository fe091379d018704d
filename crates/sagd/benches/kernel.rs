//! Criterion benchmarks of one chain step on a standard Gaussian target, per integrator and
//! dimension, and of the normal generator. `sagd bench kernel` prints the same measurements as a
//! JSON table (ns per chain-step per dimension).

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use sagd::langevin::{ChainSet, LangevinSettings, Momentum, Scheme};
use sagd::model::IsoGaussian;
use sagd::rng::NormalStream;

fn steps(c: &mut Criterion) {
    let mut group = c.benchmark_group("chain_step");
    for dim in [10usize, 100, 1000, 10000] {
        group.throughput(Throughput::Elements(dim as u64));
        for scheme in Scheme::ALL {
            let target = IsoGaussian {
                dim,
                mean: 0.0,
                sd: 1.0,
            };
            let kernel = LangevinSettings { scheme, gamma: 1.0 }
                .kernel::<f64>(0.1)
                .unwrap();
            let mut chains = ChainSet::<f64>::new(1, dim, 1);
            chains
                .init(&target, &vec![0.5; dim], Momentum::Normal)
                .unwrap();
            group.bench_with_input(BenchmarkId::new(scheme.name(), dim), &dim, |b, _| {
                b.iter(|| chains.step(&target, &kernel).unwrap())
            });
        }
    }
    group.finish();
}

fn noise(c: &mut Criterion) {
    let mut group = c.benchmark_group("normal_fill");
    for dim in [1000usize, 10000] {
        group.throughput(Throughput::Elements(dim as u64));
        let mut s = NormalStream::new(1);
        let mut buf = vec![0.0; dim];
        group.bench_with_input(BenchmarkId::from_parameter(dim), &dim, |b, _| {
            b.iter(|| s.fill(&mut buf))
        });
    }
    group.finish();
}

criterion_group!(benches, steps, noise);
criterion_main!(benches);
