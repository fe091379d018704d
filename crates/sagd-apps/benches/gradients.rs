//! Derived (dual-number) against hand-written gradients on the Gamma-sigmoid model of E1: log p
//! with ∇z, and ∇θ, over 200 data points, one thread.

use criterion::{criterion_group, criterion_main, Criterion};
use sagd::model::{Derived, LatentModel};
use sagd_apps::e1::GammaSigmoid;

fn gradients(c: &mut Criterion) {
    let (model, z) = GammaSigmoid::simulate(200, 1.0, 0.5, 1).expect("valid settings");
    let derived = Derived(model.clone());
    let data: Vec<usize> = (0..200).collect();
    let theta = [0.9, 0.6];
    let (mut lp, mut gz, mut gt) = (vec![0.0; 200], vec![0.0; 200], vec![0.0; 2]);
    let mut g = c.benchmark_group("gamma_sigmoid_200_points");
    g.bench_function("log_joint_and_grad_z/hand", |b| {
        b.iter(|| LatentModel::log_joint(&model, &theta, &data, &z, &mut lp, &mut gz))
    });
    g.bench_function("log_joint_and_grad_z/derived", |b| {
        b.iter(|| derived.log_joint(&theta, &data, &z, &mut lp, &mut gz))
    });
    g.bench_function("grad_theta/hand", |b| {
        b.iter(|| model.add_grad_theta(&theta, &data, &z, &mut gt))
    });
    g.bench_function("grad_theta/derived", |b| {
        b.iter(|| derived.add_grad_theta(&theta, &data, &z, &mut gt))
    });
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().measurement_time(std::time::Duration::from_secs(2)).warm_up_time(std::time::Duration::from_millis(500));
    targets = gradients
}
criterion_main!(benches);
