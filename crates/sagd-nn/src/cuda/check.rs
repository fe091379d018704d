//! The GPU engine against the CPU engine: every layer of the experiments' networks forward and
//! backward on fresh random inputs, and their speed.

use std::time::Instant;

use sagd::rng::NormalStream;
use serde::Serialize;

use super::{Gpu, GpuResult, GpuWorkspace};
use crate::net::{Sequential, Workspace};
use crate::vae::Vae;

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
/// IWAE's 50000 rows) and the high-dimensional pair (minibatch of 500).
fn cases() -> Vec<(String, Sequential, usize)> {
    let one = Vae::new(1, 64);
    let high = Vae::new(100, 256);
    vec![
        ("1-D decoder".into(), one.dec.clone(), 1000),
        ("1-D encoder".into(), one.enc.clone(), 1000),
        ("1-D decoder, IWAE rows".into(), one.dec, 50_000),
        ("high-dim decoder".into(), high.dec.clone(), 500),
        ("high-dim encoder".into(), high.enc, 500),
        ("high-dim decoder, 10000 chains".into(), high.dec, 10_000),
    ]
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

/// Runs every network of the experiments (E2's decoder and encoder, 1-D and 100-D, at their batch
/// sizes) on both engines with inputs drawn from `seed`, and compares.
pub fn check_networks(gpu: &Gpu, seed: u64) -> GpuResult<Vec<NetworkCheck>> {
    let mut out = Vec::new();
    for (k, (name, net, rows)) in cases().into_iter().enumerate() {
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
        for r in 0..=repeats.min(20) {
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
/// it is compared in law (Table 1), not here.
pub fn check_estimators(seed: u64, ordinal: usize) -> sagd::error::Result<Vec<EstimatorCheck>> {
    use crate::debias::simulate;
    use crate::train::{BoundEstimator, ChainEstimator, GradientEstimator, LangevinChains};
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
            let mut p = params.clone();
            let (mut worst_d, mut worst_e, mut worst_l) = (0.0f64, 0.0f64, 0.0f64);
            let updates = 3;
            for _ in 0..updates {
                let (mut cd, mut ce) = (vec![0.0f32; p.dec.len()], vec![0.0f32; p.enc.len()]);
                let (mut gd, mut ge) = (cd.clone(), ce.clone());
                let lc = cpu.estimate(&p, &batch, &mut cd, &mut ce)?;
                let lg = gpu.estimate(&p, &batch, &mut gd, &mut ge)?;
                worst_d = worst_d.max(rel_err(&gd, &cd));
                if cpu.trains_encoder() {
                    worst_e = worst_e.max(rel_err(&ge, &ce));
                }
                worst_l = worst_l.max((lg - lc).abs() / lc.abs().max(1e-30));
                // A plain gradient step, the same on both sides: the next update sees new θ.
                for (t, g) in p.dec.iter_mut().zip(&cd) {
                    *t -= 1e-3 * g.signum();
                }
                for (t, g) in p.enc.iter_mut().zip(&ce) {
                    *t -= 1e-3 * g.signum();
                }
            }
            out.push(EstimatorCheck {
                estimator: name,
                updates,
                g_dec: worst_d,
                g_enc: worst_e,
                loss: worst_l,
            });
        }
    }
    Ok(out)
}
