//! The GPU engine against the CPU engine: every layer of the experiments' networks forward and
//! backward on fresh random inputs, and their speed; the estimators, training and Adam's step in
//! the checks of `training.rs` (E2's, and what they share) and `images.rs` (E3's).

use std::time::Instant;

use sagd::rng::NormalStream;
use serde::Serialize;

use crate::mnist::experiment::{E3Estimator, Objective};
use crate::mnist::model::Chains;
use sagd_nn::bernoulli::BernoulliVae;
use sagd_nn::cuda::{Gpu, GpuError, GpuResult, GpuWorkspace};
use sagd_nn::math::Activation;
use sagd_nn::train::GradientEstimator;
use sagd_nn::vae::Vae;
use sagd_nn::vae::VaeParams;
use sagd_nn::Device;
use sagd_nn::{Layer, Sequential, Workspace};

mod images;
mod training;

pub use images::check_e3_small;
pub use training::{check_adam, check_e2, AdamCheck, EstimatorCheck, TrainingCheck};

/// The GPU estimators against the CPU's on simulated E2 data (1-D and 100-D), and under the
/// backend's other laws on data wider than the latent (Bernoulli, Poisson and Gaussian of sd
/// 0.5, 12 values per point from 2 latent dimensions): VAE, IWAE with the same noise, and
/// SAGD's chains with a friction of 1e-30 and momenta starting at zero (so that the dynamics,
/// and hence both engines, are deterministic to rounding: 50 burn-in and 10 steps per update).
/// HMC draws its momenta and Metropolis uniforms from each engine's own streams, so it is
/// compared in law (Table 1), not here. Then E3's passes on synthetic images: the VAE and SAGD's
/// stochastic chains, whose noise both engines read from the same host stream; and the same on
/// a small convolutional model ([`check_e3_small`]).
pub fn check_estimators(seed: u64, ordinal: usize) -> sagd::error::Result<Vec<EstimatorCheck>> {
    let mut out = training::e2_estimators(seed, ordinal)?;
    out.extend(images::check_e3_estimators(seed, ordinal)?);
    out.extend(images::e3_small_estimators(seed, ordinal)?);
    Ok(out)
}

/// E3's VAE and SAGD phases, 3 updates each of minibatches of 200 synthetic images, on the
/// CPU (the host's Adam) and on GPU `ordinal` (the device's), with the CPU's own rounding floor;
/// the same on a small convolutional model ([`check_e3_small`]); then E2's estimators through
/// the training job (the ELBO, IWAE and deterministic chains).
pub fn check_training(seed: u64, ordinal: usize) -> sagd::error::Result<Vec<TrainingCheck>> {
    let mut out = images::e3_training(seed, ordinal)?;
    out.extend(images::e3_small_training(seed, ordinal)?);
    out.extend(training::check_e2_training(seed, ordinal)?);
    Ok(out)
}

/// One network's agreement between the engines: ‖gpu − cpu‖ / ‖cpu‖ of each output.
#[derive(Clone, Debug, Serialize)]
pub struct NetworkCheck {
    /// Which network.
    pub network: String,
    /// Rows of the batch.
    pub rows: usize,
    /// Forward output.
    pub output: f64,
    /// Parameter gradient.
    pub dparams: f64,
    /// Input gradient.
    pub dx: f64,
    /// Every output element of the GPU was written and finite.
    pub all_finite: bool,
}

/// One network's forward + backward time.
#[derive(Clone, Debug, Serialize)]
pub struct NetworkTiming {
    /// Which network.
    pub network: String,
    /// Rows of the batch.
    pub rows: usize,
    /// Milliseconds per forward + backward (parameters and input) on the GPU, median of the
    /// repeats, stream synchronised.
    pub gpu_ms: f64,
    /// The same on the CPU engine, one thread, one pass over all rows.
    pub cpu_one_thread_ms: f64,
}

/// The experiments' networks and batch sizes: E2's 1-D decoder and encoder (full batch of 1000,
/// IWAE's 50000 rows), the high-dimensional pair (minibatch of 500), and E3's convolutional
/// generator and encoder (minibatch of 200; SAGD's chains of 100 images).
fn cases() -> Vec<(String, Sequential, usize)> {
    let one = Vae::new(1, 64);
    let high = Vae::new(100, 256);
    let mnist = crate::mnist::e3(20);
    vec![
        ("1-D decoder".into(), one.dec.clone(), 1000),
        ("1-D encoder".into(), one.enc.clone(), 1000),
        ("1-D decoder, IWAE rows".into(), one.dec, 50_000),
        ("high-dim decoder".into(), high.dec.clone(), 500),
        ("high-dim encoder".into(), high.enc, 500),
        ("high-dim decoder, 10000 chains".into(), high.dec, 10_000),
        ("E3 generator".into(), mnist.gen.clone(), 200),
        ("E3 encoder".into(), mnist.enc, 200),
        ("E3 generator, 2000 chains".into(), mnist.gen, 2000),
    ]
}

/// Timed CPU repeats of a case: the large ones take seconds a pass.
fn cpu_repeats(net: &Sequential, rows: usize, repeats: usize) -> usize {
    if net.n_params() * rows > 200_000_000 {
        repeats.min(2)
    } else {
        repeats.min(20)
    }
}

fn rel_err(gpu: &[f32], cpu: &[f32]) -> f64 {
    let (mut num, mut den) = (0.0f64, 0.0f64);
    for (g, c) in gpu.iter().zip(cpu) {
        num += (*g as f64 - *c as f64).powi(2);
        den += (*c as f64).powi(2);
    }
    if gpu.len() != cpu.len() {
        return f64::INFINITY;
    }
    (num / den.max(f64::MIN_POSITIVE)).sqrt()
}

fn normals(n: usize, seed: u64) -> Vec<f32> {
    let mut v = vec![0.0f32; n];
    NormalStream::new(seed).fill(&mut v);
    v
}

/// `net` with softplus for ReLU: the same layers and shapes without kinks.
fn smoothed(net: &Sequential) -> Sequential {
    let layers = net
        .layers()
        .iter()
        .map(|l| match *l {
            Layer::Act {
                act: Activation::Relu,
            } => Layer::Act {
                act: Activation::Softplus,
            },
            other => other,
        })
        .collect();
    Sequential::new(layers)
}

/// Runs every network of the experiments (E2's decoder and encoder, 1-D and 100-D, and E3's pair,
/// at their batch sizes) on both engines with inputs drawn from `seed`, and compares. Beyond 1000
/// rows a ReLU network is checked with softplus in its place: rounding moves some of its
/// millions of pre-activations across the kink, which changes their gradients by O(1) in either
/// engine (on the CPU alone, a one-ulp change of a third of E3's generator weights moves ∂L/∂u
/// of 2000 rows by 1.6e-3 in norm, the first 200 rows by 5e-7).
pub fn check_networks(gpu: &Gpu, seed: u64) -> GpuResult<Vec<NetworkCheck>> {
    let mut out = Vec::new();
    for (k, (mut name, mut net, rows)) in cases().into_iter().enumerate() {
        let relu = net.layers().iter().any(|l| {
            *l == Layer::Act {
                act: Activation::Relu,
            }
        });
        if relu && rows > 1000 {
            net = smoothed(&net);
            name.push_str(" (softplus for ReLU)");
        }
        let s = sagd::rng::Seed::new(seed).index(k as u64);
        let params = net.init(s.stream("init").get());
        let x = normals(rows * net.input_dim(), s.stream("input").get());
        let dout = normals(rows * net.output_dim(), s.stream("output").get());
        let mut ws = Workspace::default();
        net.forward(&params, &x, rows, &mut ws);
        let y = ws.output().to_vec();
        let mut dp = vec![0.0f32; net.n_params()];
        let mut dx = vec![0.0f32; x.len()];
        net.backward(&params, &mut ws, &dout, Some(&mut dp), Some(&mut dx));

        let (p_d, x_d, dout_d) = (gpu.upload(&params)?, gpu.upload(&x)?, gpu.upload(&dout)?);
        let mut gws = GpuWorkspace::default();
        net.forward_gpu(gpu, &p_d, &x_d, rows, &mut gws)?;
        let y_g = match gws.output() {
            Some(o) => gpu.download(o)?[..y.len()].to_vec(),
            None => Vec::new(),
        };
        // Poisoned outputs: an element the GPU never writes stays NaN.
        let mut dp_d = gpu.upload(&vec![0.0f32; dp.len()])?;
        let mut dx_d = gpu.upload(&vec![f32::NAN; dx.len()])?;
        net.backward_gpu(
            gpu,
            &p_d,
            &mut gws,
            &dout_d,
            Some(&mut dp_d),
            Some(&mut dx_d),
        )?;
        let (dp_g, dx_g) = (gpu.download(&dp_d)?, gpu.download(&dx_d)?);
        let all_finite = y_g.iter().chain(&dp_g).chain(&dx_g).all(|v| v.is_finite());
        out.push(NetworkCheck {
            network: name,
            rows,
            output: rel_err(&y_g, &y),
            dparams: rel_err(&dp_g, &dp),
            dx: rel_err(&dx_g, &dx),
            all_finite,
        });
    }
    Ok(out)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

/// Times forward + backward of the same networks on both engines, `repeats` times each.
pub fn time_networks(gpu: &Gpu, repeats: usize) -> GpuResult<Vec<NetworkTiming>> {
    let mut out = Vec::new();
    for (name, net, rows) in cases() {
        let params = net.init(7);
        let x = normals(rows * net.input_dim(), 8);
        let dout = normals(rows * net.output_dim(), 9);
        let (p_d, x_d, dout_d) = (gpu.upload(&params)?, gpu.upload(&x)?, gpu.upload(&dout)?);
        let mut dp_d = gpu.zeros(net.n_params())?;
        let mut dx_d = gpu.zeros(x.len())?;
        let mut gws = GpuWorkspace::default();
        let mut gpu_ms = Vec::new();
        // The first pass allocates and warms up; it is not timed.
        for r in 0..=repeats {
            gpu.synchronize()?;
            let t = Instant::now();
            net.forward_gpu(gpu, &p_d, &x_d, rows, &mut gws)?;
            net.backward_gpu(
                gpu,
                &p_d,
                &mut gws,
                &dout_d,
                Some(&mut dp_d),
                Some(&mut dx_d),
            )?;
            gpu.synchronize()?;
            if r > 0 {
                gpu_ms.push(t.elapsed().as_secs_f64() * 1e3);
            }
        }
        let mut ws = Workspace::default();
        let mut dp = vec![0.0f32; net.n_params()];
        let mut dx = vec![0.0f32; x.len()];
        let mut cpu_ms = Vec::new();
        for r in 0..=cpu_repeats(&net, rows, repeats) {
            let t = Instant::now();
            net.forward(&params, &x, rows, &mut ws);
            net.backward(&params, &mut ws, &dout, Some(&mut dp), Some(&mut dx));
            if r > 0 {
                cpu_ms.push(t.elapsed().as_secs_f64() * 1e3);
            }
        }
        out.push(NetworkTiming {
            network: name,
            rows,
            gpu_ms: median(gpu_ms),
            cpu_one_thread_ms: median(cpu_ms),
        });
    }
    Ok(out)
}
