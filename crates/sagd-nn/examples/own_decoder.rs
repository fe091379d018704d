//! Your own networks, debiased by SAGD on the CPU or on a GPU, with no GPU code of your own: a
//! decoder and an encoder of the engine's layers (here Tanh and ReLU, widths of your choosing)
//! are pre-trained by the ELBO, then the decoder is refined by SAGD's chains on its posterior,
//! both through the same training job. The device is chosen once, where the estimators are built
//! ([`Estimator::on`]).
//!
//! The data are a deconvolution's: x = z + ε, z from a law with two bumps and ε ~ N(0, 1); the
//! decoder h maps u ~ N(0, 1) to z, so the model's log-likelihood log p(x) = log ∫ N(x; h(u), 1)
//! N(u; 0, 1) du is computed exactly (Gauss-Hermite quadrature) after each phase.
//!
//! Run: `cargo run --release -p sagd-nn --example own_decoder` (add `-- --device cuda` on a
//! machine with an NVIDIA GPU and CUDA 13's libraries).

use rand::SeedableRng;
use rand_distr::{Distribution, StandardNormal};
use rand_xoshiro::Xoshiro256PlusPlus;
use sagd::optim::Averaging;
use sagd::quadrature::GaussHermite;
use sagd::run::{Identity, Runner};
use sagd_nn::math::Activation;
use sagd_nn::train::{Estimator, LangevinChains, TrainSettings, Training};
use sagd_nn::vae::{Vae, VaeParams};
use sagd_nn::{Device, Layer, Sequential, Workspace};

type Error = Box<dyn std::error::Error>;

fn main() {
    if let Err(e) = run() {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}

/// Both phases on the device the command line names, and the log-likelihood after each.
fn run() -> Result<(), Error> {
    let device = device_flag()?;
    let x = simulate(1000, 7);
    // Your networks: any of the engine's layers, in any widths (d = 1 in and out here).
    let linear = |inp, out| Layer::Linear { inp, out };
    let act = |act| Layer::Act { act };
    let vae = Vae {
        d: 1,
        dec: Sequential::new(vec![
            linear(1, 48),
            act(Activation::Tanh),
            linear(48, 48),
            act(Activation::Relu),
            linear(48, 1),
        ]),
        enc: Sequential::new(vec![
            linear(1, 32),
            act(Activation::Softplus),
            linear(32, 2),
        ]),
    };
    let full_batch = |epochs, lr, averaging| TrainSettings {
        epochs,
        batch_size: x.len(),
        lr,
        lr_decay: 0.0,
        averaging,
    };
    let elbo = full_batch(3000, 1e-3, Averaging::None);
    let pre = train(
        &vae,
        Estimator::Bound { k: 1 },
        device,
        &x,
        vae.init(1),
        &elbo,
    )?;
    println!(
        "{device}: after the ELBO's 3000 updates, log-likelihood per point {:.4}",
        log_likelihood(&vae, &pre.dec, &x)
    );
    // SAGD refines the decoder alone, on chains of the posterior p(u | x; θ), from the encoder's
    // draws; the returned θ averages the last half of its iterates.
    let chains = Estimator::Sagd(LangevinChains::default());
    let refine = full_batch(1000, 1e-3, Averaging::Tail { fraction: 0.5 });
    let sagd = train(&vae, chains, device, &x, pre, &refine)?;
    println!(
        "{device}: after SAGD's 1000 updates, log-likelihood per point {:.4}",
        log_likelihood(&vae, &sagd.dec, &x)
    );
    println!(
        "the law that made the data: log-likelihood per point {:.4}",
        true_log_likelihood(&x)
    );
    Ok(())
}

/// `--device cpu|cuda|cuda:N` from the command line (the CPU without it).
fn device_flag() -> Result<Device, Error> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.as_slice() {
        [] => Ok(Device::Cpu),
        [flag, value] if flag == "--device" => Ok(value.parse()?),
        _ => Err("usage: own_decoder [--device cpu|cuda|cuda:N]".into()),
    }
}

/// `n` points x = z + ε: z = ±2 + N(0, 0.5²) with equal odds, ε ~ N(0, 1).
fn simulate(n: usize, seed: u64) -> Vec<f32> {
    let mut rng = Xoshiro256PlusPlus::seed_from_u64(seed);
    (0..n)
        .map(|i| {
            let bump = if i % 2 == 0 { 2.0 } else { -2.0 };
            let (bump_noise, e): (f64, f64) = (
                StandardNormal.sample(&mut rng),
                StandardNormal.sample(&mut rng),
            );
            (bump + 0.5 * bump_noise + e) as f32
        })
        .collect()
}

/// The mean log-likelihood of the points under the law that made them: x ~ ½ N(2, 1.25) +
/// ½ N(−2, 1.25).
fn true_log_likelihood(x: &[f32]) -> f64 {
    let var = 1.25f64;
    let normal = |x: f64, mean: f64| {
        (-(x - mean).powi(2) / (2.0 * var)).exp() / (2.0 * std::f64::consts::PI * var).sqrt()
    };
    let total: f64 = x
        .iter()
        .map(|&xi| (0.5 * normal(xi as f64, 2.0) + 0.5 * normal(xi as f64, -2.0)).ln())
        .sum();
    total / x.len() as f64
}

/// The networks trained from `start` by `estimator` on `device`, as `settings` say.
fn train(
    vae: &Vae,
    estimator: Estimator,
    device: Device,
    x: &[f32],
    start: VaeParams,
    settings: &TrainSettings,
) -> Result<VaeParams, Error> {
    let mut est = estimator.on(device, vae, x, 11)?;
    let job = Training::new(vae, &mut *est, settings, x.len(), Identity::new())?;
    let mut state = job.init(start, 3);
    let mut runner = Runner::new(job);
    runner.run(&mut state)?;
    Ok(runner.solver.finish(&state))
}

/// The mean of log p(x) = log ∫ N(x; h_θ(u), 1) N(u; 0, 1) du over the points, by 60-node
/// Gauss-Hermite quadrature in u (h evaluated once per node).
fn log_likelihood(vae: &Vae, dec: &[f32], x: &[f32]) -> f64 {
    let gh = GaussHermite::new(60);
    let u: Vec<f32> = gh
        .nodes
        .iter()
        .map(|t| (std::f64::consts::SQRT_2 * t) as f32)
        .collect();
    let mut ws = Workspace::default();
    vae.dec.forward(dec, &u, u.len(), &mut ws);
    let h = ws.output();
    // ∫ f(u) N(u; 0, 1) du = Σ_j w_j f(√2 t_j) / √π, and N(x; h, 1)'s constant: per node, once.
    let log_w: Vec<f64> = gh
        .weights
        .iter()
        .map(|w| w.ln() - 0.5 * std::f64::consts::PI.ln() - 0.5 * (2.0 * std::f64::consts::PI).ln())
        .collect();
    let total: f64 = x
        .iter()
        .map(|&xi| {
            // log Σ_j exp(log w_j − ½ (x − h_j)²), summed in log space.
            let terms: Vec<f64> = log_w
                .iter()
                .zip(h)
                .map(|(lw, hj)| {
                    let r = (xi - hj) as f64;
                    lw - 0.5 * r * r
                })
                .collect();
            let m = terms.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            m + terms.iter().map(|t| (t - m).exp()).sum::<f64>().ln()
        })
        .sum();
    total / x.len() as f64
}
