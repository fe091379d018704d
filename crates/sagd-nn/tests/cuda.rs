//! The CUDA backend, what can be checked without a GPU: devices parse and print. The unit tests of
//! `cuda` check the kernels: every one loaded is defined in `kernels.cu` and launched with as many
//! arguments as it takes, and they compile with NVRTC where its library is found. Its agreement
//! with the CPU engine on the experiments' networks is `sagd-apps`'s `gpu_check` test; on
//! networks a user might build, this file's ignored tests (a GPU, or `scripts/gpu_on_cpu.sh`),
//! with every GPU estimator's training reproduced to the bit from its seed.

#[path = "common/architectures.rs"]
mod architectures;

use architectures::{random_net, Draw};
use sagd::optim::Averaging;
use sagd::run::{fnv1a, Identity, Runner, FNV_OFFSET};
use sagd_nn::bernoulli::{BernoulliEstimator, BernoulliVae, Chains, Objective};
use sagd_nn::cuda::{Gpu, GpuWorkspace};
use sagd_nn::likelihood::{Bernoulli, Poisson, UnitGaussian};
use sagd_nn::math::Activation;
use sagd_nn::train::{
    AdamStep, ChainSchedule, Estimator, GradientEstimator, HmcChains, LangevinChains,
    TrainSettings, Training,
};
use sagd_nn::vae::{Vae, VaeParams};
use sagd_nn::{Device, Layer, Sequential, Workspace};

#[test]
fn devices_parse_and_print() {
    assert_eq!("cpu".parse::<Device>(), Ok(Device::Cpu));
    assert_eq!("CUDA".parse::<Device>(), Ok(Device::Cuda(0)));
    assert_eq!("cuda:2".parse::<Device>(), Ok(Device::Cuda(2)));
    assert!("tpu"
        .parse::<Device>()
        .unwrap_err()
        .contains("use cpu, cuda or cuda:N"));
    assert!("cuda:x".parse::<Device>().is_err());
    for d in [Device::Cpu, Device::Cuda(0), Device::Cuda(3)] {
        assert_eq!(d.to_string().parse::<Device>(), Ok(d));
    }
}

/// The GPU estimators moved beside the CPU's (`sagd_nn::train`); their old paths stay, deprecated,
/// for a release.
#[test]
#[allow(deprecated)]
fn the_gpu_estimators_old_paths_still_compile() {
    let _bound = sagd_nn::cuda::GpuBoundEstimator::new;
    let _sagd = sagd_nn::cuda::GpuChainEstimator::sagd;
    let _hmc = sagd_nn::cuda::GpuChainEstimator::hmc;
    let _step: sagd_nn::train::AdamStep = sagd_nn::cuda::AdamStep {
        lr: 1e-3,
        beta1: 0.9,
        beta2: 0.999,
        eps: 1e-8,
        t: (1, 1),
    };
}

/// ‖a − b‖ / ‖b‖.
fn rel_err(a: &[f32], b: &[f32]) -> f64 {
    let (num, den) = a.iter().zip(b).fold((0.0f64, 0.0f64), |(n, d), (x, y)| {
        (n + ((x - y) as f64).powi(2), d + (*y as f64).powi(2))
    });
    (num / den.max(f64::MIN_POSITIVE)).sqrt()
}

/// The GPU's forward and backward passes (parameters and input) of 40 random networks of the
/// engine's layers (`common/architectures.rs`) on 1, 37 and 300 rows, against the CPU engine's:
/// a user's own network runs on the GPU with no GPU code of its own. ReLU is softplus here (the
/// two engines round pre-activations differently, and one that crosses the kink changes its
/// gradient by O(1); the experiments' ReLU networks are `gpu_check`'s).
#[test]
#[ignore = "needs an NVIDIA GPU (or scripts/gpu_on_cpu.sh): run with --include-ignored"]
fn random_networks_on_a_gpu_match_the_cpu_engine() {
    let gpu = Gpu::open(0).unwrap_or_else(|e| panic!("no GPU to check: {e}"));
    for seed in 0..40u64 {
        let net = smoothed(&random_net(seed));
        let p = net.init(seed);
        for rows in [1usize, 37, 300] {
            let mut r = Draw(1000 * seed + rows as u64);
            let x = r.values(rows * net.input_dim());
            let dout = r.values(rows * net.output_dim());
            let mut ws = Workspace::default();
            net.forward(&p, &x, rows, &mut ws);
            let out = ws.output().to_vec();
            let (mut dp, mut dx) = (vec![0.0f32; p.len()], vec![0.0f32; x.len()]);
            net.backward(&p, &mut ws, &dout, Some(&mut dp), Some(&mut dx));

            let up = |v: &[f32]| gpu.upload(v).expect("upload");
            let (p_d, x_d, dout_d) = (up(&p), up(&x), up(&dout));
            // The input's gradient poisoned: an element the GPU never writes stays NaN and fails
            // below; the parameters' is added into zeros.
            let mut dx_d = up(&vec![f32::NAN; x.len()]);
            let mut dp_d = gpu.zeros(p.len()).expect("zeros");
            let mut gws = GpuWorkspace::default();
            net.forward_gpu(&gpu, &p_d, &x_d, rows, &mut gws)
                .expect("forward");
            let out_g = gpu
                .download(gws.output().expect("forward ran"))
                .expect("download");
            net.backward_gpu(
                &gpu,
                &p_d,
                &mut gws,
                &dout_d,
                Some(&mut dp_d),
                Some(&mut dx_d),
            )
            .expect("backward");
            let case = format!("{:?}, {rows} rows", net.layers());
            for (what, g, c) in [
                ("output", out_g[..out.len()].to_vec(), &out),
                (
                    "parameter gradient",
                    gpu.download(&dp_d).expect("download"),
                    &dp,
                ),
                (
                    "input gradient",
                    gpu.download(&dx_d).expect("download"),
                    &dx,
                ),
            ] {
                let err = rel_err(&g, c);
                assert!(err < 1e-4, "{case}: {what} {err}");
            }
        }
    }
}

/// `net` with softplus for ReLU: the same shapes, no kinks for the engines to round across.
fn smoothed(net: &Sequential) -> Sequential {
    let smooth = |l: &Layer| match *l {
        Layer::Act {
            act: Activation::Relu,
        } => Layer::Act {
            act: Activation::Softplus,
        },
        other => other,
    };
    Sequential::new(net.layers().iter().map(smooth).collect())
}

/// A VAE of 1-3 latent dimensions and 1-12 data values per point around two random networks
/// (ReLU as softplus): the decoder d → (one) → px, the encoder px → (the other) → 2d, each
/// joined to its ends by a Linear layer and tanh.
fn random_vae(seed: u64) -> Vae {
    let mut r = Draw(seed);
    let (d, px) = (1 + r.below(3), 1 + r.below(12));
    let tanh = Layer::Act {
        act: Activation::Tanh,
    };
    let between = |net: Sequential, inp: usize, out: usize| {
        let mut layers = vec![
            Layer::Linear {
                inp,
                out: net.input_dim(),
            },
            tanh,
        ];
        layers.extend_from_slice(net.layers());
        layers.extend([
            tanh,
            Layer::Linear {
                inp: net.output_dim(),
                out,
            },
        ]);
        Sequential::new(layers)
    };
    Vae {
        d,
        dec: between(smoothed(&random_net(seed)), d, px),
        enc: between(smoothed(&random_net(seed + 5000)), px, 2 * d),
    }
}

/// E2's estimators on a user's own networks and data, both engines from the same parameters and
/// draws: 12 random VAEs (`random_vae`) under the paper's Gaussian, Bernoulli and Poisson laws
/// (60 points simulated from the decoder's own shape), the ELBO, IWAE with 4 samples and SAGD's
/// chains made deterministic (BAOAB at a friction of 1e-30, momenta from zero), one update on
/// the whole data: the gradients and the loss within 1e-3 (`sagd bench gpu`'s tolerance).
#[test]
#[ignore = "needs an NVIDIA GPU (or scripts/gpu_on_cpu.sh): run with --include-ignored"]
fn random_vaes_estimate_on_a_gpu_as_on_the_cpu() {
    use sagd::langevin::{LangevinSettings, Momentum, Scheme};
    let deterministic = LangevinChains {
        langevin: LangevinSettings {
            scheme: Scheme::Baoab,
            gamma: 1e-30,
        },
        initial_momentum: Momentum::Zero,
        ..LangevinChains::default()
    };
    let estimators = [
        Estimator::Bound { k: 1 },
        Estimator::Bound { k: 4 },
        Estimator::Sagd(deterministic),
    ];
    for seed in 0..12u64 {
        let vae = random_vae(seed);
        let p = vae.init(seed);
        let n = 60;
        let mut r = Draw(seed + 9000);
        let z = r.values(n * vae.data_dim());
        let real: Vec<f32> = z.iter().map(|v| 2.0 * v).collect();
        let binary: Vec<f32> = z.iter().map(|v| f32::from(*v > 0.0)).collect();
        let counts: Vec<f32> = z.iter().map(|v| (3.0 * (v + 1.0)).round()).collect();
        let batch: Vec<usize> = (0..n).collect();
        for est in estimators {
            let cases: [(&str, &dyn Fn(Device) -> _); 3] = [
                ("gaussian", &|dev| {
                    est.on_with(dev, &vae, UnitGaussian, &real, 7)
                }),
                ("bernoulli", &|dev| {
                    est.on_with(dev, &vae, Bernoulli, &binary, 7)
                }),
                ("poisson", &|dev| {
                    est.on_with(dev, &vae, Poisson, &counts, 7)
                }),
            ];
            for (law, make) in cases {
                let mut grads = Vec::new();
                for dev in [Device::Cpu, Device::Cuda(0)] {
                    let mut e = make(dev).expect("the estimator");
                    let (mut gd, mut ge) = (vec![0.0f32; p.dec.len()], vec![0.0f32; p.enc.len()]);
                    let loss = e.estimate(&p, &batch, &mut gd, &mut ge).expect("estimate");
                    grads.push((gd, ge, loss));
                }
                let ((cd, ce, cl), (gd, ge, gl)) = (&grads[0], &grads[1]);
                let case = format!(
                    "{law}, {est:?}, {:?} / {:?}",
                    vae.dec.layers(),
                    vae.enc.layers()
                );
                let dec = rel_err(gd, cd);
                assert!(dec < 1e-3, "{case}: decoder's gradient {dec}");
                if matches!(est, Estimator::Bound { .. }) {
                    let enc = rel_err(ge, ce);
                    assert!(enc < 1e-3, "{case}: encoder's gradient {enc}");
                }
                assert!(
                    (gl - cl).abs() <= 1e-3 * cl.abs(),
                    "{case}: loss {gl} against {cl}"
                );
            }
        }
    }
}

/// FNV-1a over the bits of `values`: a fingerprint of a run's numbers.
fn fingerprint(values: impl IntoIterator<Item = u32>) -> u64 {
    fnv1a(FNV_OFFSET, values.into_iter().flat_map(u32::to_le_bytes))
}

/// Three epochs of training by `est` (sizes of the networks, `n` points in batches of `batch`)
/// from `start`: a line of fingerprints of the parameters returned, the last loss, the
/// diagnostics and the estimator's checkpointed state.
fn trained(
    est: &mut dyn GradientEstimator,
    sizes: (usize, usize),
    (n, batch): (usize, usize),
    averaging: Averaging,
    start: VaeParams,
) -> String {
    let s = TrainSettings {
        epochs: 3,
        batch_size: batch,
        lr: 1e-3,
        lr_decay: 0.0,
        averaging,
    };
    let job = Training::with_sizes(sizes, &mut *est, &s, n, None, Identity::new()).expect("job");
    let mut state = job.init(start, 3);
    let mut runner = Runner::new(job);
    runner.run(&mut state).expect("training");
    let p = runner.solver.finish(&state);
    let diagnostics = runner.solver.diagnostics().to_string();
    drop(runner);
    let saved = est.save_state().expect("state");
    format!(
        "decoder {:016x} encoder {:016x} loss {:016x} diagnostics {:016x} state {:016x}",
        fingerprint(p.dec.iter().map(|v| v.to_bits())),
        fingerprint(p.enc.iter().map(|v| v.to_bits())),
        fingerprint([
            state.loss.to_bits() as u32,
            (state.loss.to_bits() >> 32) as u32
        ]),
        fingerprint(diagnostics.bytes().map(u32::from)),
        fingerprint(saved.iter().map(|b| u32::from(*b))),
    )
}

/// The two ways a training job updates: on the device (plain Adam, last iterate) and on the
/// host (tail averaging).
const WAYS: [(&str, Averaging); 2] = [
    ("device", Averaging::None),
    ("host", Averaging::Tail { fraction: 0.5 }),
];

/// The chains' schedule of the fingerprints: δ halved over 9 updates at the same K.
const SCHEDULE: Option<ChainSchedule> = Some(ChainSchedule {
    decay: 0.5,
    growth: 1.0,
    updates: 9,
});

/// Every GPU estimator's training, one line each: E2's (`e2_fingerprints`) and E3's
/// (`e3_fingerprints`).
fn gpu_training_fingerprints() -> Vec<String> {
    let mut lines = e2_fingerprints();
    lines.extend(e3_fingerprints());
    lines
}

/// E2's bounds and chains (HMC, SAGD, and SAGD with two chains per point, restarts and a
/// schedule) under the Gaussian and Bernoulli laws, on whole and minibatches, both ways.
fn e2_fingerprints() -> Vec<String> {
    let dev = Device::Cuda(0);
    let linear = |inp, out| Layer::Linear { inp, out };
    let act = |act| Layer::Act { act };
    let vae = Vae {
        d: 2,
        dec: Sequential::new(vec![linear(2, 16), act(Activation::Tanh), linear(16, 6)]),
        enc: Sequential::new(vec![
            linear(6, 12),
            act(Activation::Softplus),
            linear(12, 4),
        ]),
    };
    let n = 40;
    let real: Vec<f32> = (0..n * 6).map(|i| (i as f32 * 0.37).sin() * 2.0).collect();
    let binary: Vec<f32> = (0..n * 6)
        .map(|i| f32::from((i as f32 * 0.61).sin() > 0.1))
        .collect();
    let sizes = (vae.dec.n_params(), vae.enc.n_params());
    let sagd = LangevinChains {
        burn_in: 5,
        ..LangevinChains::default()
    };
    let options = LangevinChains {
        chains_per_point: Some(2),
        refresh_every: Some(3),
        schedule: SCHEDULE,
        ..sagd
    };
    let hmc = HmcChains {
        hmc: sagd::hmc::HmcSettings {
            step_size: 0.05,
            n_leapfrog: 3,
        },
        transitions: 3,
    };
    let mut lines = Vec::new();
    for (name, est) in [
        ("elbo", Estimator::Bound { k: 1 }),
        ("iwae", Estimator::Bound { k: 4 }),
        ("hmc", Estimator::Hmc(hmc)),
        ("sagd", Estimator::Sagd(sagd)),
        ("sagd-options", Estimator::Sagd(options)),
    ] {
        for (law, x) in [("gaussian", &real), ("bernoulli", &binary)] {
            for batch in [n, 16] {
                for (way, averaging) in WAYS {
                    let mut e = match law {
                        "gaussian" => est.on_with(dev, &vae, UnitGaussian, x, 5),
                        _ => est.on_with(dev, &vae, Bernoulli, x, 5),
                    }
                    .expect("the estimator");
                    let line = trained(&mut *e, sizes, (n, batch), averaging, vae.init(1));
                    lines.push(format!("E2 {name}, {law}, batch {batch}, {way}: {line}"));
                }
            }
        }
    }
    lines
}

/// E3's VAE and SAGD passes (fresh, persistent, OBABO with a schedule), both ways.
fn e3_fingerprints() -> Vec<String> {
    use sagd::langevin::Scheme;
    let dev = Device::Cuda(0);
    let linear = |inp, out| Layer::Linear { inp, out };
    let act = |act| Layer::Act { act };
    let gen = Sequential::new(vec![linear(3, 20), act(Activation::Relu), linear(20, 16)]);
    let enc = Sequential::new(vec![linear(16, 20), act(Activation::Relu), linear(20, 6)]);
    let m = BernoulliVae::new(gen, enc).expect("the networks fit");
    let images: Vec<u8> = (0..24 * 16).map(|i| (i * 37 % 256) as u8).collect();
    let sizes = (m.gen.n_params(), m.enc.n_params());
    let chains = Chains {
        per_image: 3,
        steps: 4,
        ..Chains::default()
    };
    let mut lines = Vec::new();
    for (name, objective) in [
        ("vae", Objective::Vae),
        ("sagd", Objective::Sagd(chains)),
        (
            "sagd-persistent",
            Objective::Sagd(Chains {
                refresh_every: Some(2),
                ..chains
            }),
        ),
        (
            "sagd-obabo-scheduled",
            Objective::Sagd(Chains {
                scheme: Scheme::Obabo,
                schedule: SCHEDULE,
                ..chains
            }),
        ),
    ] {
        for (way, averaging) in WAYS {
            let mut e = BernoulliEstimator::on(dev, &m, &images, objective, 7).expect("E3");
            let line = trained(&mut e, sizes, (24, 8), averaging, m.init(2));
            lines.push(format!("E3 {name}, {way}: {line}"));
        }
    }
    lines
}

/// Same seed, same result on a GPU: every estimator's training (`gpu_training_fingerprints`)
/// twice, to the bit. The fingerprints printed (`--nocapture`) are also how a change to the GPU
/// host code shows that it computes what it did: under `scripts/gpu_on_cpu.sh`, whose driver is
/// deterministic, before and after.
#[test]
#[ignore = "needs an NVIDIA GPU (or scripts/gpu_on_cpu.sh): run with --include-ignored"]
fn gpu_training_gives_the_same_bits_from_the_same_seed() {
    let first = gpu_training_fingerprints();
    let again = gpu_training_fingerprints();
    for (a, b) in first.iter().zip(&again) {
        assert_eq!(a, b, "the same run twice");
        println!("fingerprint {a}");
    }
    assert_eq!(first.len(), 48, "40 of E2, 8 of E3");
}

/// The training job's steps on the device asked out of order are refused by name on every GPU
/// estimator, not run on stale parameters: a check or step of the kept gradient before any pass,
/// and a pass or step at the state held before one was loaded (also after a pass at the host's
/// parameters, which leaves none held).
#[test]
#[ignore = "needs an NVIDIA GPU (or scripts/gpu_on_cpu.sh): run with --include-ignored"]
fn the_gpu_refuses_training_steps_out_of_order() {
    let dev = Device::Cuda(0);
    let (vae, n) = (random_vae(3), 8);
    let x: Vec<f32> = (0..n * vae.data_dim()).map(|i| (i as f32).sin()).collect();
    let gen = Sequential::new(vec![Layer::Linear { inp: 2, out: 16 }]);
    let enc = Sequential::new(vec![Layer::Linear { inp: 16, out: 4 }]);
    let m = BernoulliVae::new(gen, enc).expect("the networks fit");
    let images: Vec<u8> = (0..n * 16).map(|i| (i * 53 % 256) as u8).collect();
    let hmc = HmcChains {
        hmc: sagd::hmc::HmcSettings::default(),
        transitions: 2,
    };
    let mut estimators: Vec<(&str, Box<dyn GradientEstimator + '_>, VaeParams)> = Vec::new();
    for (name, est) in [
        ("elbo", Estimator::Bound { k: 1 }),
        ("hmc", Estimator::Hmc(hmc)),
        ("sagd", Estimator::Sagd(LangevinChains::default())),
    ] {
        let e = est.on(dev, &vae, &x, 5).expect("the estimator");
        estimators.push((name, e, vae.init(1)));
    }
    for (name, objective) in [
        ("e3 vae", Objective::Vae),
        ("e3 sagd", Objective::Sagd(Chains::default())),
    ] {
        let e = BernoulliEstimator::on(dev, &m, &images, objective, 7).expect("E3");
        estimators.push((name, Box::new(e), m.init(2)));
    }
    let step = AdamStep {
        lr: 1e-3,
        beta1: 0.9,
        beta2: 0.999,
        eps: 1e-8,
        t: (1, 1),
    };
    for (name, e, p) in &mut estimators {
        let refused = |what: sagd::error::Result<()>, needs: &str| {
            let what = format!("{}", what.expect_err(name));
            assert!(what.contains(needs), "{name}: {what} should say {needs:?}");
        };
        let dp = e.device_params().expect("on the device");
        refused(dp.step(step), "before any pass");
        refused(dp.finite().map(|_| ()), "before any pass");
        refused(dp.gradient(&[0, 1]).map(|_| ()), "load it first");
        let mut g = (vec![0.0; p.dec.len()], vec![0.0; p.enc.len()]);
        e.estimate(p, &[0, 1], &mut g.0, &mut g.1).expect(name);
        let dp = e.device_params().expect("on the device");
        refused(dp.gradient(&[0, 1]).map(|_| ()), "load it first");
        refused(dp.step(step), "load it first");
    }
}
