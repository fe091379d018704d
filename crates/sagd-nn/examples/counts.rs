//! Your own likelihood: a VAE of counts, X_j | U ~ Poisson(e^{h_θ(U)_j}), pre-trained by the ELBO
//! and refined by SAGD through the same estimators and training job as the paper's Gaussian
//! VAE, the likelihood given once where the estimators are built ([`Estimator::on_with`]). A law
//! of your own is one `impl Likelihood` of a few lines, as [`Poisson`] is.
//!
//! The data are 1000 points of four counts driven by one latent z ~ N(0, 1), with rates
//! e^{a_j + b_j z} that reach the hundreds; with one latent dimension the model's log-likelihood
//! log p(x) = log ∫ Π_j Poisson(x_j; e^{h_θ(u)_j}) N(u; 0, 1) du is computed exactly (a fine grid
//! in u) on the training points after each phase (what maximum likelihood maximises, so a fit may
//! pass the law that made the data), and compared with a control that trains by the ELBO for as
//! many more updates, and with that law.
//!
//! Run: `cargo run --release -p sagd-nn --example counts` (add `-- --device cuda` on a machine
//! with an NVIDIA GPU: the CUDA backend computes the Poisson law too, so the same program trains
//! there).

use rand::SeedableRng;
use rand_distr::{Distribution, Poisson as PoissonLaw, StandardNormal};
use rand_xoshiro::Xoshiro256PlusPlus;
use sagd::optim::Averaging;
use sagd::run::{Identity, Runner};
use sagd_nn::likelihood::Poisson;
use sagd_nn::math::Activation;
use sagd_nn::train::{Estimator, LangevinChains, TrainSettings, Training};
use sagd_nn::vae::{Vae, VaeParams};
use sagd_nn::{Device, Layer, Sequential, Workspace};

type Error = Box<dyn std::error::Error>;

/// Counts per point, and the law that makes them: log-rate a_j + b_j z.
const P: usize = 4;
const A: [f64; P] = [0.5, 1.5, 3.0, 4.0];
const B: [f64; P] = [0.9, -0.6, 0.4, 0.7];

fn main() {
    if let Err(e) = run() {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}

/// Both phases, the control, and the log-likelihood per point after each.
fn run() -> Result<(), Error> {
    let device = match std::env::args().skip(1).collect::<Vec<_>>().as_slice() {
        [] => Device::Cpu,
        [flag, value] if flag == "--device" => value.parse()?,
        _ => return Err("usage: counts [--device cpu|cuda|cuda:N]".into()),
    };
    let x = simulate(1000, 5);
    let linear = |inp, out| Layer::Linear { inp, out };
    let act = |act| Layer::Act { act };
    // The decoder gives a log-rate per count; the encoder reads the counts.
    let vae = Vae {
        d: 1,
        dec: Sequential::new(vec![
            linear(1, 32),
            act(Activation::Tanh),
            linear(32, 32),
            act(Activation::Tanh),
            linear(32, P),
        ]),
        enc: Sequential::new(vec![
            linear(P, 32),
            act(Activation::Softplus),
            linear(32, 2),
        ]),
    };
    let full_batch = |epochs, averaging| TrainSettings {
        epochs,
        batch_size: x.len() / P,
        lr: 1e-3,
        lr_decay: 0.0,
        averaging,
    };
    let train = |estimator, x: &[f32], start, settings: &TrainSettings| {
        train(&vae, estimator, device, x, start, settings)
    };
    let pre = train(
        Estimator::Bound { k: 1 },
        &x,
        vae.init(1),
        &full_batch(3000, Averaging::None),
    )?;
    println!("{device}: log-likelihood per point, exact");
    println!(
        "  after the ELBO's 3000 updates          {:.4}",
        log_likelihood(&vae, &pre.dec, &x)
    );
    let more = full_batch(1000, Averaging::Tail { fraction: 0.5 });
    let control = train(Estimator::Bound { k: 1 }, &x, pre.clone(), &more)?;
    println!(
        "  the ELBO's 1000 more (the control)     {:.4}",
        log_likelihood(&vae, &control.dec, &x)
    );
    // SAGD refines the decoder alone, on persistent chains of its posterior p(u | x; θ)
    // started from the encoder's draws.
    let chains = Estimator::Sagd(LangevinChains::default());
    let sagd = train(chains, &x, pre, &more)?;
    println!(
        "  SAGD's 1000                            {:.4}",
        log_likelihood(&vae, &sagd.dec, &x)
    );
    println!(
        "  the law that made the data             {:.4}",
        true_log_likelihood(&x)
    );
    Ok(())
}

/// `n` points of [`P`] counts: z ~ N(0, 1), x_j ~ Poisson(e^{a_j + b_j z}).
fn simulate(n: usize, seed: u64) -> Vec<f32> {
    let mut rng = Xoshiro256PlusPlus::seed_from_u64(seed);
    let mut x = Vec::with_capacity(n * P);
    for _ in 0..n {
        let z: f64 = StandardNormal.sample(&mut rng);
        for j in 0..P {
            let rate = (A[j] + B[j] * z).exp();
            let law = PoissonLaw::new(rate).expect("a positive rate");
            x.push(law.sample(&mut rng) as f32);
        }
    }
    x
}

/// The networks trained from `start` by `estimator` on `device`, as `settings` say, under the
/// Poisson likelihood.
fn train(
    vae: &Vae,
    estimator: Estimator,
    device: Device,
    x: &[f32],
    start: VaeParams,
    settings: &TrainSettings,
) -> Result<VaeParams, Error> {
    let mut est = estimator.on_with(device, vae, Poisson, x, 11)?;
    let job = Training::new(vae, &mut *est, settings, x.len() / P, Identity::new())?;
    let mut state = job.init(start, 3);
    let mut runner = Runner::new(job);
    runner.run(&mut state)?;
    Ok(runner.solver.finish(&state))
}

/// log x! by its sum of logs (the counts are at most a few hundred).
fn ln_factorial(x: f32) -> f64 {
    (2..=x as u64).map(|k| (k as f64).ln()).sum()
}

/// The mean over points of log ∫ p(x | u) N(u; 0, 1) du, with p(x | u) the product of the counts'
/// Poisson laws at log-rates `log_rates` (a row per node of `grid`): a sum over a grid of step
/// 1/200 on [−8, 8] (the narrowest posteriors, of the largest counts, have sds near 0.05, ten
/// steps; the prior's mass past 8 is below e^−32).
fn mean_log_marginal(x: &[f32], log_rates: &[f64], grid: &[f64]) -> f64 {
    let step = grid[1] - grid[0];
    let log_prior: Vec<f64> = grid
        .iter()
        .map(|u| -0.5 * u * u - 0.5 * (2.0 * std::f64::consts::PI).ln() + step.ln())
        .collect();
    let total: f64 = x
        .chunks_exact(P)
        .map(|point| {
            let constant: f64 = point.iter().map(|&c| ln_factorial(c)).sum();
            let terms: Vec<f64> = log_rates
                .chunks_exact(P)
                .zip(&log_prior)
                .map(|(h, lp)| {
                    let lik: f64 = (0..P).map(|j| point[j] as f64 * h[j] - h[j].exp()).sum();
                    lik + lp
                })
                .collect();
            let m = terms.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            m + terms.iter().map(|t| (t - m).exp()).sum::<f64>().ln() - constant
        })
        .sum();
    total / (x.len() / P) as f64
}

/// The grid of [`mean_log_marginal`].
fn grid() -> Vec<f64> {
    (0..=3200).map(|i| -8.0 + i as f64 / 200.0).collect()
}

/// The model's exact log-likelihood per point, the decoder run once over the grid.
fn log_likelihood(vae: &Vae, dec: &[f32], x: &[f32]) -> f64 {
    let grid = grid();
    let u: Vec<f32> = grid.iter().map(|&u| u as f32).collect();
    let mut ws = Workspace::default();
    vae.dec.forward(dec, &u, u.len(), &mut ws);
    let h: Vec<f64> = ws.output().iter().map(|&h| h as f64).collect();
    mean_log_marginal(x, &h, &grid)
}

/// The same under the law that made the data.
fn true_log_likelihood(x: &[f32]) -> f64 {
    let grid = grid();
    let h: Vec<f64> = grid
        .iter()
        .flat_map(|z| (0..P).map(move |j| A[j] + B[j] * z))
        .collect();
    mean_log_marginal(x, &h, &grid)
}
