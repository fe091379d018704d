//! Criterion benchmarks of the engine's pieces on the E2 decoder's shapes (1 → 64 → 64 → 1,
//! softplus): one activation pass, and a forward and backward pass over one chunk of rows.

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use sagd_nn::math::{self, Activation};
use sagd_nn::{Sequential, Workspace, CHUNK_ROWS};

fn activation(c: &mut Criterion) {
    let mut group = c.benchmark_group("activation");
    let n = CHUNK_ROWS * 64;
    group.throughput(Throughput::Elements(n as u64));
    let x: Vec<f32> = (0..n).map(|i| (i as f32 * 0.37).sin() * 4.0).collect();
    let (mut y, mut dy) = (vec![0.0; n], vec![0.0; n]);
    for act in [Activation::Softplus, Activation::Tanh, Activation::Relu] {
        group.bench_function(format!("{act:?}"), |b| {
            b.iter(|| math::forward(act, &x, &mut y, &mut dy))
        });
    }
    group.finish();
}

fn passes(c: &mut Criterion) {
    let mut group = c.benchmark_group("decoder_chunk");
    let net = Sequential::mlp(&[1, 64, 64, 1], Activation::Softplus);
    let params = net.init(1);
    let rows = CHUNK_ROWS;
    group.throughput(Throughput::Elements(rows as u64));
    let x: Vec<f32> = (0..rows).map(|i| (i as f32 * 0.11).sin() * 2.0).collect();
    let dout = vec![1.0f32; rows];
    let mut ws = Workspace::default();
    let mut dp = vec![0.0f32; net.n_params()];
    let mut dx = vec![0.0f32; rows];
    group.bench_function("forward", |b| {
        b.iter(|| net.forward(&params, &x, rows, &mut ws))
    });
    net.forward(&params, &x, rows, &mut ws);
    group.bench_function("backward_input", |b| {
        b.iter(|| net.backward(&params, &mut ws, &dout, None, Some(&mut dx)))
    });
    group.bench_function("backward_all", |b| {
        b.iter(|| net.backward(&params, &mut ws, &dout, Some(&mut dp), Some(&mut dx)))
    });
    group.finish();
}

criterion_group!(benches, activation, passes);
criterion_main!(benches);
