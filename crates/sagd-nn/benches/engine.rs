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

/// E3's networks over a batch of 200 on one thread: the generator's forward and backward (to its
/// parameters and its input, as a SAGD step needs), the encoder's forward and backward (to its
/// parameters).
fn e3_networks(c: &mut Criterion) {
    let mut group = c.benchmark_group("e3_batch200");
    group.sample_size(20);
    let rows = 200;
    for (name, net) in [
        ("generator", sagd_nn::mnist::generator(20)),
        ("encoder", sagd_nn::mnist::encoder(20)),
    ] {
        let params = net.init(1);
        let x: Vec<f32> = (0..rows * net.input_dim())
            .map(|i| (i as f32 * 0.37).sin())
            .collect();
        let dout = vec![0.01f32; rows * net.output_dim()];
        let mut ws = Workspace::default();
        let mut dp = vec![0.0f32; net.n_params()];
        let mut dx = vec![0.0f32; x.len()];
        group.bench_function(format!("{name}_forward"), |b| {
            b.iter(|| net.forward(&params, &x, rows, &mut ws))
        });
        group.bench_function(format!("{name}_forward_backward"), |b| {
            b.iter(|| {
                net.forward(&params, &x, rows, &mut ws);
                net.backward(&params, &mut ws, &dout, Some(&mut dp), Some(&mut dx));
            })
        });
    }
    group.finish();
}

/// One minibatch of E3's VAE training and of its SAGD refinement at the spec's sizes (200 images;
/// 20 chains of 5 steps each), on all threads: × 300 is an epoch of 60000 images.
fn e3_batches(c: &mut Criterion) {
    use sagd_nn::mnist::model::{sagd_batch, sagd_noise_len, vae_batch, Chains, E3};
    use sagd_nn::vae::VaeParams;
    let mut group = c.benchmark_group("e3_minibatch200");
    group.sample_size(10);
    let m = E3::new(20);
    let p = m.init(1);
    let b = 200;
    let x: Vec<f32> = (0..b * 784)
        .map(|i| ((i * 7919) % 3 == 0) as u8 as f32)
        .collect();
    let mut stream = sagd::rng::NormalStream::new(3);
    let mut eps = vec![0.0f32; b * 20];
    stream.fill(&mut eps);
    let mut pool = sagd_nn::mnist::model::Scratch::default();
    let mut g = VaeParams {
        dec: vec![0.0; p.dec.len()],
        enc: vec![0.0; p.enc.len()],
    };
    group.bench_function("vae", |bch| {
        bch.iter(|| vae_batch(&m, &p, &x, &eps, &mut g.dec, &mut g.enc, &mut pool))
    });
    let chains = Chains::default();
    let mut noise = vec![0.0f32; sagd_noise_len(&m, &chains, b)];
    stream.fill(&mut noise);
    group.bench_function("sagd", |bch| {
        bch.iter(|| sagd_batch(&m, &p, &x, &chains, &noise, &mut g.dec, &mut pool))
    });
    group.finish();
}

criterion_group!(benches, activation, passes, e3_networks, e3_batches);
criterion_main!(benches);
