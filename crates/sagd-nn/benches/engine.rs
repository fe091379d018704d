//! Criterion benchmarks of the engine's pieces on the E2 decoder's shapes (1 → 64 → 64 → 1,
//! softplus): one activation pass, and a forward and backward pass over one chunk of rows; and
//! the products alone on E2's and E3's widest shapes, in FLOP/s (`SAGD_CPU_CAPABILITY=avx2`
//! times the AVX2 path on an AVX-512 machine).

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use sagd_nn::math::{self, Activation};
use sagd_nn::{Layer, Sequential, Workspace, CHUNK_ROWS};

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

/// A linear layer's forward pass (the product and its bias) on one thread: E2's 64 → 64 layer
/// over a chunk of rows and E3's 3136 → 1024 layer over a minibatch of 200; throughput in
/// floating-point operations (2 per multiply-add).
fn products(c: &mut Criterion) {
    let mut group = c.benchmark_group(format!("linear_{}", sagd::cpu::capability().name()));
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(1)
        .build()
        .expect("a thread pool");
    for (m, k, n) in [(CHUNK_ROWS, 64, 64), (200, 3136, 1024)] {
        group.throughput(Throughput::Elements((2 * m * k * n) as u64));
        let net = Sequential::new(vec![Layer::Linear { inp: k, out: n }]);
        let params = net.init(1);
        let x: Vec<f32> = (0..m * k).map(|i| (i as f32 * 0.37).sin()).collect();
        let mut ws = Workspace::default();
        group.bench_function(format!("{m}x{k}x{n}"), |b| {
            b.iter(|| pool.install(|| net.forward(&params, &x, m, &mut ws)))
        });
    }
    group.finish();
}

criterion_group!(benches, activation, passes, products);
criterion_main!(benches);
