//! Criterion benchmarks of a derived gradient against the latent's length: log p(x, z; θ) of the
//! state-space model (`tests/common/state_space.rs`, O(T) per evaluation) with ∇z by forward-mode
//! dual numbers (four lanes per evaluation, as `Derived` takes below `REVERSE_FROM`), by reverse
//! mode (`Rev::gradient`, as `Derived` takes from it) and written by hand. Sets `REVERSE_FROM`.

#[path = "../tests/common/state_space.rs"]
mod state_space;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use num_dual::DualSVec64;
use sagd::model::{LatentModel, LogJoint, Rev};
use state_space::{Analytic, StateSpace};

/// ∇z by dual numbers, four directions per evaluation.
fn forward(model: &StateSpace, theta: &[f64], z: &[f64], out: &mut [f64]) -> f64 {
    let th: Vec<DualSVec64<4>> = theta.iter().map(|&a| DualSVec64::from_re(a)).collect();
    let mut x: Vec<DualSVec64<4>> = z.iter().map(|&a| DualSVec64::from_re(a)).collect();
    let mut value = 0.0;
    for c in (0..z.len()).step_by(4) {
        let end = (c + 4).min(z.len());
        for (k, j) in (c..end).enumerate() {
            x[j] = DualSVec64::from_re(z[j]).derivative(k);
        }
        let y = model.log_joint(&th, 0, &x);
        value = y.re;
        for (k, j) in (c..end).enumerate() {
            out[j] = y.eps.0.as_ref().map_or(0.0, |e| e[k]);
            x[j] = DualSVec64::from_re(z[j]);
        }
    }
    value
}

fn gradients(c: &mut Criterion) {
    let theta = [0.9f64.atanh(), 0.5f64.ln(), 0.5f64.ln()];
    let mut group = c.benchmark_group("derived_gradient");
    for len in [4usize, 8, 16, 32, 100, 300, 1000] {
        let model = StateSpace::simulate(1, len, &theta, 3);
        let z = model.x[0].clone();
        let mut out = vec![0.0; len];
        group.throughput(Throughput::Elements(len as u64));
        group.bench_with_input(BenchmarkId::new("forward", len), &len, |b, _| {
            b.iter(|| forward(&model, &theta, &z, &mut out))
        });
        let th: Vec<Rev> = theta.iter().map(|&a| Rev::constant(a)).collect();
        group.bench_with_input(BenchmarkId::new("reverse", len), &len, |b, _| {
            b.iter(|| Rev::gradient(&z, |zr| model.log_joint(&th, 0, zr), &mut out))
        });
        let hand = Analytic(model.clone());
        let mut logp = [0.0];
        group.bench_with_input(BenchmarkId::new("by_hand", len), &len, |b, _| {
            b.iter(|| hand.log_joint(&theta, &[0], &z, &mut logp, &mut out))
        });
    }
    group.finish();
}

criterion_group!(benches, gradients);
criterion_main!(benches);
