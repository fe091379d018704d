//! The estimators, training and Adam's step on the GPU against the CPU: E2's estimators on the
//! same minibatch and through the training job, what every training check shares, and one Adam
//! step to the bit.

use super::*;

/// One estimator's agreement between the engines after `updates` updates from the same
/// parameters and noise: ‖gpu − cpu‖ / ‖cpu‖ of the decoder's and encoder's gradients, and the
/// losses.
#[derive(Clone, Debug, Serialize)]
pub struct EstimatorCheck {
    /// Which estimator and data.
    pub estimator: String,
    /// Updates compared (each from the CPU's parameters after the same Adam steps).
    pub updates: usize,
    /// Largest relative error of the decoder gradient over the updates.
    pub g_dec: f64,
    /// Largest relative error of the encoder gradient (0 where not trained).
    pub g_enc: f64,
    /// Largest relative difference of the losses.
    pub loss: f64,
}

/// E2's estimators of [`check_estimators`]: d = 1 and 100, then the other laws.
pub(super) fn e2_estimators(seed: u64, ordinal: usize) -> sagd::error::Result<Vec<EstimatorCheck>> {
    let mut out = Vec::new();
    for (d, hidden, n) in [(1usize, 64usize, 1000usize), (100, 256, 500)] {
        out.extend(check_e2_estimators((d, hidden, n), seed, ordinal)?);
    }
    out.extend(check_laws(seed, ordinal)?);
    Ok(out)
}

/// SAGD's chains made deterministic, so that both engines follow them to rounding: BAOAB with a
/// friction of 1e-30 and momenta starting at zero.
fn deterministic_chains() -> sagd_nn::train::LangevinChains {
    use sagd::langevin::{LangevinSettings, Momentum, Scheme};
    sagd_nn::train::LangevinChains {
        langevin: LangevinSettings {
            scheme: Scheme::Baoab,
            gamma: 1e-30,
        },
        initial_momentum: Momentum::Zero,
        ..sagd_nn::train::LangevinChains::default()
    }
}

/// E2's part of [`check_estimators`] and [`check_training`] alone: its estimators (d = 1 and 100,
/// and the other laws) and its training, without E3's, whose networks take many minutes where
/// the device is the CPU's stand-in (`scripts/gpu_on_cpu.sh`, which CI runs).
pub fn check_e2(
    seed: u64,
    ordinal: usize,
) -> sagd::error::Result<(Vec<EstimatorCheck>, Vec<TrainingCheck>)> {
    Ok((
        e2_estimators(seed, ordinal)?,
        check_e2_training(seed, ordinal)?,
    ))
}

/// E2's estimators under the backend's other laws, on data wider than the latent: a VAE of 2
/// latent dimensions and 12 values per point, 300 points simulated under each of Bernoulli,
/// Poisson and N(h, 0.5²); the ELBO, IWAE with 8 samples and SAGD's deterministic chains (as
/// [`check_estimators`]'), the full batch on both engines.
fn check_laws(seed: u64, ordinal: usize) -> sagd::error::Result<Vec<EstimatorCheck>> {
    use sagd_nn::likelihood::{Bernoulli, Gaussian, Poisson};
    let (d, px, n) = (2usize, 12usize, 300usize);
    let vae = Vae {
        d,
        dec: Sequential::mlp(&[d, 32, 32, px], Activation::Tanh),
        enc: Sequential::mlp(&[px, 32, 2 * d], Activation::Softplus),
    };
    let params = vae.init(seed);
    let batch: Vec<usize> = (0..n).collect();
    // Each point's values from its latent: a_j · z through the law's link.
    let mut normals = sagd::rng::Seed::new(seed).stream("law data").normals();
    let mut z = vec![0.0f32; n * (d + px)];
    normals.fill(&mut z);
    let link = |i: usize, j: usize| {
        let (zi, e) = (&z[i * (d + px)..i * (d + px) + d], z[i * (d + px) + d + j]);
        (zi[0] * (j as f32 / 6.0 - 1.0) + zi[1] * 0.5, e)
    };
    let points = |value: &dyn Fn(f32, f32) -> f32| -> Vec<f32> {
        (0..n * px)
            .map(|e| {
                let (a, noise) = link(e / px, e % px);
                value(a, noise)
            })
            .collect()
    };
    let binary = points(&|a, e| f32::from(e < a));
    let counts = points(&|a, e| (1.5 + a + 0.3 * e).exp().round());
    let real = points(&|a, e| a + 0.5 * e);
    let mut out = Vec::new();
    out.extend(law_cases(
        "bernoulli",
        Bernoulli,
        (&vae, &params),
        &binary,
        &batch,
        (seed, ordinal),
    )?);
    out.extend(law_cases(
        "poisson",
        Poisson,
        (&vae, &params),
        &counts,
        &batch,
        (seed, ordinal),
    )?);
    let gaussian = Gaussian::new(0.5)?;
    out.extend(law_cases(
        "gaussian sd 0.5",
        gaussian,
        (&vae, &params),
        &real,
        &batch,
        (seed, ordinal),
    )?);
    Ok(out)
}

/// [`check_laws`]' estimators under one law.
fn law_cases<L: sagd_nn::likelihood::Likelihood + Copy + 'static>(
    law: &str,
    lik: L,
    (vae, params): (&Vae, &VaeParams),
    x: &[f32],
    batch: &[usize],
    (seed, ordinal): (u64, usize),
) -> sagd::error::Result<Vec<EstimatorCheck>> {
    use sagd_nn::train::Estimator;
    let deterministic = deterministic_chains();
    let cases = [
        ("vae", Estimator::Bound { k: 1 }),
        ("iwae k = 8", Estimator::Bound { k: 8 }),
        (
            "sagd chains (deterministic)",
            Estimator::Sagd(deterministic),
        ),
    ];
    let mut out = Vec::new();
    for (what, estimator) in cases {
        let mut cpu = estimator.on_with(Device::Cpu, vae, lik, x, seed)?;
        let mut gpu = estimator.on_with(Device::Cuda(ordinal), vae, lik, x, seed)?;
        let name = format!("{what}, {law}, d = 2, 12 values per point");
        out.push(compare(name, &mut *cpu, &mut *gpu, params, batch)?);
    }
    Ok(out)
}

/// E2's VAE, IWAE and deterministic SAGD chains on `n` simulated points of dimension `d`, with a
/// VAE of `hidden` units: the full batch on both engines.
fn check_e2_estimators(
    (d, hidden, n): (usize, usize, usize),
    seed: u64,
    ordinal: usize,
) -> sagd::error::Result<Vec<EstimatorCheck>> {
    use crate::debias::simulate;
    use sagd::langevin::{LangevinSettings, Scheme};
    use sagd::metrics::Law;
    use sagd_nn::train::{ChainSchedule, Estimator, LangevinChains};
    let vae = Vae::new(d, hidden);
    let law = Law::Exponential { mean: 2.0 };
    let (_, x) = simulate(&law, n, d, seed);
    let x: Vec<f32> = x.iter().map(|v| *v as f32).collect();
    let params = vae.init(seed);
    let batch: Vec<usize> = (0..n).collect();
    let deterministic = deterministic_chains();
    // The chain options on the paper's chains: refreshes (the third update starts again from the
    // encoder), two chains per point, and δ_t, K_t = 5, 10, 15 (so the device's buffers grow).
    let schedule = ChainSchedule {
        decay: 0.5,
        growth: 1.0,
        updates: 3,
    };
    // The other schemes, as deterministic at γ → 0: every operation of the program (Euler's
    // kick on the start's gradient, OBABO's and BAOAB's on the new one, UBU's exact flows) as the
    // GPU's chains place it from the core's instructions.
    let scheme = |scheme| LangevinChains {
        langevin: LangevinSettings {
            scheme,
            gamma: 1e-30,
        },
        ..deterministic
    };
    let chain_cases = [
        ("", deterministic),
        (", euler", scheme(Scheme::Euler)),
        (", obabo", scheme(Scheme::Obabo)),
        (", ubu", scheme(Scheme::Ubu)),
        (
            ", refresh every 2",
            LangevinChains {
                refresh_every: Some(2),
                ..deterministic
            },
        ),
        (
            ", 2 chains per point",
            LangevinChains {
                chains_per_point: Some(2),
                ..deterministic
            },
        ),
        (
            ", schedule",
            LangevinChains {
                schedule: Some(schedule),
                ..deterministic
            },
        ),
    ];
    let mut cases = vec![
        (format!("vae, d = {d}"), Estimator::Bound { k: 1 }),
        (format!("iwae k = 50, d = {d}"), Estimator::Bound { k: 50 }),
    ];
    for (what, chains) in chain_cases {
        let name = format!("sagd chains (deterministic{what}), d = {d}");
        cases.push((name, Estimator::Sagd(chains)));
    }
    let mut out = Vec::new();
    for (name, estimator) in cases {
        let mut cpu = estimator.on(Device::Cpu, &vae, &x, seed)?;
        let mut gpu = estimator.on(Device::Cuda(ordinal), &vae, &x, seed)?;
        out.push(compare(name, &mut *cpu, &mut *gpu, &params, &batch)?);
    }
    Ok(out)
}

/// Three updates of the two estimators from the same parameters, each followed by the same plain
/// step (so that the next update sees new θ), and their largest disagreements.
pub(super) fn compare(
    name: String,
    cpu: &mut dyn GradientEstimator,
    gpu: &mut dyn GradientEstimator,
    params: &VaeParams,
    batch: &[usize],
) -> sagd::error::Result<EstimatorCheck> {
    let mut p = params.clone();
    let (mut worst_d, mut worst_e, mut worst_l) = (0.0f64, 0.0f64, 0.0f64);
    let updates = 3;
    for _ in 0..updates {
        let (mut cd, mut ce) = (vec![0.0f32; p.dec.len()], vec![0.0f32; p.enc.len()]);
        let (mut gd, mut ge) = (cd.clone(), ce.clone());
        let lc = cpu.estimate(&p, batch, &mut cd, &mut ce)?;
        let lg = gpu.estimate(&p, batch, &mut gd, &mut ge)?;
        worst_d = worst_d.max(rel_err(&gd, &cd));
        if cpu.trains_encoder() {
            worst_e = worst_e.max(rel_err(&ge, &ce));
        }
        worst_l = worst_l.max((lg - lc).abs() / lc.abs().max(1e-30));
        for (t, g) in p.dec.iter_mut().zip(&cd) {
            *t -= 1e-3 * g.signum();
        }
        for (t, g) in p.enc.iter_mut().zip(&ce) {
            *t -= 1e-3 * g.signum();
        }
    }
    Ok(EstimatorCheck {
        estimator: name,
        updates,
        g_dec: worst_d,
        g_enc: worst_e,
        loss: worst_l,
    })
}

/// Training on the GPU, where the device takes the whole update (Adam's moments there too),
/// against the CPU engine's, from the same initial networks and draws: E3's phases, and E2's
/// estimators whose draws both engines share.
#[derive(Clone, Debug, Serialize)]
pub struct TrainingCheck {
    /// Which phase.
    pub phase: String,
    /// Updates taken on each engine.
    pub updates: usize,
    /// Parameters compared (the encoder's only where trained).
    pub params: usize,
    /// ‖Δθ_gpu − Δθ_cpu‖ / ‖Δθ_cpu‖ of the moves θ − θ₀.
    pub rel_err: f64,
    /// The same between two CPU runs whose initial parameters differ by one unit in the last
    /// place in every third: how far rounding alone carries here (Adam moves a parameter by
    /// about the rate whatever its gradient's size, and ReLU kinks flip, so this varies by
    /// orders of magnitude with the draw: reported, not a bound).
    pub rounding_floor: f64,
}

/// ‖Δb − Δa‖ / ‖Δa‖ of the moves from `p0` of the parameters `a` and `b` (the encoder's
/// only with `encoder`), and how many were compared.
fn moves_apart(a: &VaeParams, b: &VaeParams, p0: &VaeParams, encoder: bool) -> (f64, usize) {
    let mut pairs: Vec<((&f32, &f32), &f32)> = a.dec.iter().zip(&b.dec).zip(&p0.dec).collect();
    if encoder {
        pairs.extend(a.enc.iter().zip(&b.enc).zip(&p0.enc));
    }
    let (num, den) = pairs.iter().fold((0.0f64, 0.0f64), |(n, d), ((x, y), z)| {
        (
            n + ((*y - *x) as f64).powi(2),
            d + ((*x - *z) as f64).powi(2),
        )
    });
    ((num / den.max(f64::MIN_POSITIVE)).sqrt(), pairs.len())
}

/// `p` nudged by one unit in the last place in every third parameter.
fn nudged(p: &VaeParams) -> VaeParams {
    let mut q = p.clone();
    for v in q.dec.iter_mut().chain(q.enc.iter_mut()).step_by(3) {
        *v = f32::from_bits(v.to_bits() + 1);
    }
    q
}

/// The updates of a training check: 3 of minibatches of 100 of the `n` points at a rate of
/// 1e-3, through the training job (the device taking Adam's steps where `est` lends one).
pub(super) fn train_updates(
    est: &mut dyn GradientEstimator,
    sizes: (usize, usize),
    n: usize,
    start: &VaeParams,
    seed: u64,
) -> sagd::error::Result<VaeParams> {
    use sagd::optim::Averaging;
    use sagd::run::{Identity, Runner};
    use sagd_nn::train::{TrainSettings, Training};
    let settings = TrainSettings {
        epochs: 1,
        batch_size: 100,
        lr: 1e-3,
        lr_decay: 0.0,
        averaging: Averaging::None,
    };
    let updates = Some(TRAINING_UPDATES);
    let job = Training::with_sizes(sizes, est, &settings, n, updates, Identity::new())?;
    let mut st = job.init(start.clone(), seed);
    Runner::new(job).run(&mut st)?;
    Ok(st.params)
}

/// Updates each engine takes in a training check.
pub(super) const TRAINING_UPDATES: usize = 3;

/// One phase's training check: `train` from `p0` on the CPU and on GPU `ordinal`, and again on
/// the CPU from `p0` nudged (the rounding floor); the encoder's moves compared with `encoder`.
pub(super) fn training_check(
    phase: &str,
    encoder: bool,
    p0: &VaeParams,
    train: impl Fn(Device, &VaeParams) -> sagd::error::Result<VaeParams>,
    ordinal: usize,
) -> sagd::error::Result<TrainingCheck> {
    let cpu = train(Device::Cpu, p0)?;
    let cpu_nudged = train(Device::Cpu, &nudged(p0))?;
    let gpu = train(Device::Cuda(ordinal), p0)?;
    let (rel_err, params) = moves_apart(&cpu, &gpu, p0, encoder);
    let (rounding_floor, _) = moves_apart(&cpu, &cpu_nudged, p0, encoder);
    Ok(TrainingCheck {
        phase: phase.into(),
        updates: TRAINING_UPDATES,
        params,
        rel_err,
        rounding_floor,
    })
}

/// E2's estimators through the training job, 3 updates of minibatches of 100 of 1000 simulated
/// points (d = 1), on the CPU (the host's Adam) and on GPU `ordinal` (the device's, which the
/// job takes there for every estimator that lends it): the ELBO, IWAE with 50 samples (the same
/// noise on both engines) and SAGD's chains made deterministic as in [`check_estimators`].
pub(super) fn check_e2_training(
    seed: u64,
    ordinal: usize,
) -> sagd::error::Result<Vec<TrainingCheck>> {
    use crate::debias::simulate;
    use sagd::metrics::Law;
    use sagd_nn::train::Estimator;
    let (d, n) = (1, 1000);
    let vae = Vae::new(d, 64);
    let (_, x) = simulate(&Law::Exponential { mean: 2.0 }, n, d, seed);
    let x: Vec<f32> = x.iter().map(|v| *v as f32).collect();
    let p0 = vae.init(seed);
    let sizes = (vae.dec.n_params(), vae.enc.n_params());
    let cases = [
        ("E2 vae", Estimator::Bound { k: 1 }),
        ("E2 iwae k = 50", Estimator::Bound { k: 50 }),
        (
            "E2 sagd (deterministic)",
            Estimator::Sagd(deterministic_chains()),
        ),
    ];
    let mut out = Vec::new();
    for (phase, estimator) in cases {
        let train = |device, start: &VaeParams| {
            let mut est = estimator.on(device, &vae, &x, seed)?;
            train_updates(&mut *est, sizes, n, start, seed)
        };
        let encoder = matches!(estimator, Estimator::Bound { .. });
        out.push(training_check(phase, encoder, &p0, train, ordinal)?);
    }
    Ok(out)
}

/// Adam's step on the device against the host rule's on the same gradient and moments.
#[derive(Clone, Debug, Serialize)]
pub struct AdamCheck {
    /// Parameters stepped.
    pub params: usize,
    /// Largest |θ_gpu − θ_cpu| after the step (the kernel rounds as the host: 0 expected).
    pub theta: f64,
    /// Largest difference of the first moments.
    pub m: f64,
    /// Largest difference of the second moments.
    pub v: f64,
}

/// One Adam step (the fifth) on 100 000 random parameters with random gradients and moments,
/// on the device and by the host's [`UpdateRule`](sagd::optim::UpdateRule).
pub fn check_adam(gpu: &Gpu, seed: u64) -> sagd::error::Result<AdamCheck> {
    use sagd::optim::{Averaging, Optimizer, UpdateRule};
    let n = 100_000;
    let rule = UpdateRule::adam(Averaging::None);
    let Optimizer::Adam { beta1, beta2, eps } = rule.transform else {
        unreachable!("an Adam rule");
    };
    let streams = sagd::rng::Seed::new(seed);
    let mut theta = normals(n, streams.stream("theta").get());
    let g: Vec<f32> = normals(n, streams.stream("gradient").get())
        .iter()
        .enumerate()
        .map(|(i, v)| v * 10f32.powi(i as i32 % 9 - 6))
        .collect();
    let mut st = rule.init(n, None);
    st.opt.m = normals(n, streams.stream("m").get())
        .iter()
        .map(|v| *v as f64 * 1e-3)
        .collect();
    st.opt.v = normals(n, streams.stream("v").get())
        .iter()
        .map(|v| (*v as f64 * 1e-3).powi(2))
        .collect();
    st.opt.count = 4;
    st.count = 4;
    let lr = 1e-3;
    let step = sagd_nn::train::AdamStep {
        lr,
        beta1,
        beta2,
        eps,
        t: (5, 5),
    };
    let mut th_d = gpu.upload(&theta)?;
    let g_d = gpu.upload(&g)?;
    let mut m_d = gpu.stream.clone_htod(&st.opt.m).map_err(GpuError::from)?;
    let mut v_d = gpu.stream.clone_htod(&st.opt.v).map_err(GpuError::from)?;
    sagd_nn::cuda::adam(gpu, &mut th_d, &g_d, &mut m_d, &mut v_d, n, step, 5)?;
    rule.apply(&mut st, &mut theta, &mut g.clone(), lr)?;
    let th_g = gpu.download(&th_d)?;
    let m_g = gpu.stream.clone_dtoh(&m_d).map_err(GpuError::from)?;
    let v_g = gpu.stream.clone_dtoh(&v_d).map_err(GpuError::from)?;
    let worst = |a: &[f64], b: &[f64]| {
        a.iter()
            .zip(b)
            .map(|(x, y)| (x - y).abs())
            .fold(0.0f64, f64::max)
    };
    let th_h: Vec<f64> = theta.iter().map(|v| *v as f64).collect();
    let th_g: Vec<f64> = th_g.iter().map(|v| *v as f64).collect();
    Ok(AdamCheck {
        params: n,
        theta: worst(&th_g, &th_h),
        m: worst(&m_g, &st.opt.m),
        v: worst(&v_g, &st.opt.v),
    })
}
