//! The GPU engine against the CPU engine: every layer of the experiments' networks forward and
//! backward on fresh random inputs, and their speed.

use std::time::Instant;

use sagd::rng::NormalStream;
use serde::Serialize;

use super::{Gpu, GpuResult, GpuWorkspace};
use crate::math::Activation;
use crate::mnist::experiment::{E3Estimator, Objective};
use crate::mnist::model::{Chains, E3};
use crate::net::{Layer, Sequential, Workspace};
use crate::train::GradientEstimator;
use crate::vae::Vae;
use crate::vae::VaeParams;
use crate::Device;

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
    let mnist = E3::new(20);
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
        let s = seed.wrapping_add(1000 * k as u64);
        let params = net.init(s);
        let x = normals(rows * net.input_dim(), s ^ 1);
        let dout = normals(rows * net.output_dim(), s ^ 2);
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

/// The GPU estimators against the CPU's on simulated E2 data (1-D and 100-D): VAE, IWAE with the
/// same noise, and SAGD's chains with a friction of 1e-30 and momenta starting at zero (so that
/// the dynamics, and hence both engines, are deterministic to rounding: 50 burn-in and 10 steps
/// per update). HMC draws its momenta and Metropolis uniforms from each engine's own streams, so
/// it is compared in law (Table 1), not here. Then E3's passes on synthetic images: the VAE and
/// SAGD's stochastic chains, whose noise both engines read from the same host stream.
pub fn check_estimators(seed: u64, ordinal: usize) -> sagd::error::Result<Vec<EstimatorCheck>> {
    use crate::debias::simulate;
    use crate::train::{BoundEstimator, ChainEstimator, LangevinChains};
    use sagd::langevin::{LangevinSettings, Momentum, Scheme};
    use sagd::metrics::Law;
    let mut out = Vec::new();
    for (d, hidden, n) in [(1usize, 64usize, 1000usize), (100, 256, 500)] {
        let vae = Vae::new(d, hidden);
        let law = Law::Exponential { mean: 2.0 };
        let (_, x) = simulate(&law, n, d, seed);
        let x: Vec<f32> = x.iter().map(|v| *v as f32).collect();
        let params = vae.init(seed);
        let batch: Vec<usize> = (0..n).collect();
        let deterministic = LangevinChains {
            langevin: LangevinSettings {
                scheme: Scheme::Baoab,
                gamma: 1e-30,
            },
            initial_momentum: Momentum::Zero,
            ..LangevinChains::default()
        };
        type Pair<'a> = (
            Box<dyn GradientEstimator + 'a>,
            Box<dyn GradientEstimator + 'a>,
        );
        let cases: Vec<(String, Pair<'_>)> = vec![
            (
                format!("vae, d = {d}"),
                (
                    Box::new(BoundEstimator::new(&vae, &x, 1, seed)),
                    Box::new(super::GpuBoundEstimator::new(
                        Gpu::open(ordinal)?,
                        &vae,
                        &x,
                        1,
                        seed,
                    )),
                ),
            ),
            (
                format!("iwae k = 50, d = {d}"),
                (
                    Box::new(BoundEstimator::new(&vae, &x, 50, seed)),
                    Box::new(super::GpuBoundEstimator::new(
                        Gpu::open(ordinal)?,
                        &vae,
                        &x,
                        50,
                        seed,
                    )),
                ),
            ),
            (
                format!("sagd chains (deterministic), d = {d}"),
                (
                    Box::new(ChainEstimator::sagd(&vae, &x, &deterministic, seed)?),
                    Box::new(super::GpuChainEstimator::sagd(
                        Gpu::open(ordinal)?,
                        &vae,
                        &x,
                        &deterministic,
                        seed,
                    )?),
                ),
            ),
        ];
        for (name, (mut cpu, mut gpu)) in cases {
            out.push(compare(name, &mut *cpu, &mut *gpu, &params, &batch)?);
        }
    }
    // E3 on 400 synthetic grey images (strokes of varying intensity): the VAE's ELBO, and SAGD's
    // chains (the spec's Euler and BAOAB) with the same binarisations and noise on both sides.
    let model = E3::new(20);
    let images = synthetic_images(400);
    let params = model.init(seed);
    let batch: Vec<usize> = (0..200).collect();
    let baoab = Chains {
        scheme: Scheme::Baoab,
        ..Chains::default()
    };
    for (name, objective) in [
        ("E3 vae, batch 200".to_string(), Objective::Vae),
        (
            "E3 sagd euler, 20 chains x 5 steps".into(),
            Objective::Sagd(Chains::default()),
        ),
        (
            "E3 sagd baoab, 20 chains x 5 steps".into(),
            Objective::Sagd(baoab),
        ),
    ] {
        let mut cpu = E3Estimator::new(&model, &images, objective, seed);
        let mut gpu = E3Estimator::on(Device::Cuda(ordinal), &model, &images, objective, seed)?;
        out.push(compare(name, &mut cpu, &mut gpu, &params, &batch)?);
    }
    Ok(out)
}

/// Three updates of the two estimators from the same parameters, each followed by the same plain
/// step (so that the next update sees new θ), and their largest disagreements.
fn compare(
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

/// E3's training on the GPU, where the device takes the whole update (Adam's moments there too),
/// against the CPU engine's, from the same initial networks and draws.
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

/// E3's VAE and SAGD phases, 3 updates each of minibatches of 200 synthetic images, on the
/// CPU (the host's Adam) and on GPU `ordinal` (the device's), with the CPU's own rounding floor.
pub fn check_training(seed: u64, ordinal: usize) -> sagd::error::Result<Vec<TrainingCheck>> {
    use crate::mnist::experiment::{train_phase_from, E3Settings};
    let images = synthetic_images(400);
    let s = E3Settings {
        train_n: 400,
        seed,
        ..E3Settings::default()
    };
    let model = E3::new(s.latent);
    let p0 = model.init(sagd::rng::stream_seed(seed, 3));
    let mut nudged = p0.clone();
    for v in nudged
        .dec
        .iter_mut()
        .chain(nudged.enc.iter_mut())
        .step_by(3)
    {
        *v = f32::from_bits(v.to_bits() + 1);
    }
    let none = |_: &str, _: usize, _: usize| {};
    let mut out = Vec::new();
    for objective in [Objective::Vae, Objective::Sagd(Chains::default())] {
        let updates = 3;
        let run = |start: &VaeParams, device| {
            train_phase_from(
                &s,
                &images,
                objective,
                updates,
                start.clone(),
                device,
                &none,
            )
        };
        let cpu = run(&p0, Device::Cpu)?;
        let cpu_nudged = run(&nudged, Device::Cpu)?;
        let gpu = run(&p0, Device::Cuda(ordinal))?;
        let encoder = objective == Objective::Vae;
        let (rel_err, params) = moves_apart(&cpu, &gpu, &p0, encoder);
        let (rounding_floor, _) = moves_apart(&cpu, &cpu_nudged, &p0, encoder);
        out.push(TrainingCheck {
            phase: match objective {
                Objective::Vae => "E3 vae".into(),
                Objective::Sagd(_) => "E3 sagd (euler)".into(),
            },
            updates,
            params,
            rel_err,
            rounding_floor,
        });
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
    let mut theta = normals(n, seed);
    let g: Vec<f32> = normals(n, seed ^ 3)
        .iter()
        .enumerate()
        .map(|(i, v)| v * 10f32.powi(i as i32 % 9 - 6))
        .collect();
    let mut st = rule.init(n, None);
    st.opt.m = normals(n, seed ^ 4)
        .iter()
        .map(|v| *v as f64 * 1e-3)
        .collect();
    st.opt.v = normals(n, seed ^ 5)
        .iter()
        .map(|v| (*v as f64 * 1e-3).powi(2))
        .collect();
    st.opt.count = 4;
    st.count = 4;
    let lr = 1e-3;
    let step = crate::train::AdamStep {
        lr,
        beta1,
        beta2,
        eps,
        t: (5, 5),
    };
    let mut th_d = gpu.upload(&theta)?;
    let g_d = gpu.upload(&g)?;
    let mut m_d = gpu
        .stream
        .clone_htod(&st.opt.m)
        .map_err(super::GpuError::from)?;
    let mut v_d = gpu
        .stream
        .clone_htod(&st.opt.v)
        .map_err(super::GpuError::from)?;
    super::e3::adam(gpu, &mut th_d, &g_d, &mut m_d, &mut v_d, n, step, 5)?;
    rule.apply(&mut st, &mut theta, &mut g.clone(), lr)?;
    let th_g = gpu.download(&th_d)?;
    let m_g = gpu.stream.clone_dtoh(&m_d).map_err(super::GpuError::from)?;
    let v_g = gpu.stream.clone_dtoh(&v_d).map_err(super::GpuError::from)?;
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

/// `n` grey 28 × 28 images of vertical strokes of varying place and intensity.
fn synthetic_images(n: usize) -> Vec<u8> {
    let px = crate::mnist::PIXELS;
    (0..n * px)
        .map(|i| {
            let (img, p) = (i / px, i % px);
            let (y, x) = (p / 28, p % 28);
            if (x + img) % 7 < 3 && (4..24).contains(&y) {
                (128 + (img * 13 + p) % 128) as u8
            } else {
                0
            }
        })
        .collect()
}
