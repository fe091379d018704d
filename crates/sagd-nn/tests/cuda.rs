//! The CUDA backend, what can be checked without a GPU: devices parse and print. The unit tests of
//! `cuda` check the kernels: every one loaded is defined in `kernels.cu` and launched with as many
//! arguments as it takes, and they compile with NVRTC where its library is found. Its agreement
//! with the CPU engine on the experiments' networks is `sagd-apps`'s `gpu_check` test; on
//! networks a user might build, this file's ignored test (a GPU, or `scripts/gpu_on_cpu.sh`).

#[path = "common/architectures.rs"]
mod architectures;

use architectures::{random_net, Draw};
use sagd_nn::cuda::{Gpu, GpuWorkspace};
use sagd_nn::math::Activation;
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
        let smooth = |l: &Layer| match *l {
            Layer::Act {
                act: Activation::Relu,
            } => Layer::Act {
                act: Activation::Softplus,
            },
            other => other,
        };
        let net = Sequential::new(random_net(seed).layers().iter().map(smooth).collect());
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
            // Poisoned: an element the GPU never writes stays NaN and fails below.
            let (mut dp_d, mut dx_d) = (up(&vec![f32::NAN; p.len()]), up(&vec![f32::NAN; x.len()]));
            gpu.zero(&mut dp_d).expect("zero");
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
