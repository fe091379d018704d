//! Criterion benchmarks of E3 (MNIST) on the engine: its networks over a batch of 200 on one
//! thread, and one minibatch of its VAE training and SAGD refinement on all threads.

use criterion::{criterion_group, criterion_main, Criterion};
use sagd_nn::Workspace;

/// E3's networks over a batch of 200 on one thread: the generator's forward and backward (to its
/// parameters and its input, as a SAGD step needs), the encoder's forward and backward (to its
/// parameters).
fn e3_networks(c: &mut Criterion) {
    let mut group = c.benchmark_group("e3_batch200");
    group.sample_size(20);
    let rows = 200;
    for (name, net) in [
        ("generator", sagd_apps::mnist::generator(20)),
        ("encoder", sagd_apps::mnist::encoder(20)),
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
    use sagd_apps::mnist::model::{sagd_batch, sagd_noise_len, vae_batch, Chains};
    use sagd_nn::vae::VaeParams;
    let mut group = c.benchmark_group("e3_minibatch200");
    group.sample_size(10);
    let m = sagd_apps::mnist::e3(20);
    let p = m.init(1);
    let b = 200;
    let x: Vec<f32> = (0..b * 784)
        .map(|i| ((i * 7919) % 3 == 0) as u8 as f32)
        .collect();
    let mut stream = sagd::rng::NormalStream::new(3);
    let mut eps = vec![0.0f32; b * 20];
    stream.fill(&mut eps);
    let mut pool = sagd_apps::mnist::model::Scratch::default();
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

criterion_group!(benches, e3_networks, e3_batches);
criterion_main!(benches);
