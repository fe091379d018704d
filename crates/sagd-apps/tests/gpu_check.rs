//! The applications on the CUDA backend: E3 on a GPU that is not there fails clearly, and the GPU
//! agrees with the CPU engine (an ignored test: it needs a GPU, and `--include-ignored`).

// The checks' library module is deprecated (it moves to `sagd bench gpu` next release).
#![allow(deprecated)]
use sagd_apps::gpu_check::{
    check_adam, check_e2, check_e3_small, check_estimators, check_networks, check_training,
    EstimatorCheck, TrainingCheck,
};
use sagd_nn::cuda::{Gpu, GpuError};
use sagd_nn::Device;

/// E3 on `Device::Cuda(0)` starts where a GPU opens, and fails with an error naming CUDA where
/// none does (CI): a test of either machine, never a silent skip.
#[test]
fn e3_on_the_gpu_starts_or_fails_clearly() {
    use sagd_apps::mnist::experiment::{E3Estimator, Objective};
    let m = sagd_apps::mnist::e3(20);
    let images = vec![0u8; 2 * 784];
    let e3 = E3Estimator::on(Device::Cuda(0), &m, &images, Objective::Vae, 1);
    match Gpu::open(0) {
        Ok(_) => assert!(e3.is_ok(), "a GPU opened, but E3 could not start on it"),
        Err(open) => {
            // No GPU: opening fails with a clear error, never a panic, and so does E3.
            assert!(
                matches!(open, GpuError::Library { .. } | GpuError::NoDevice(_)),
                "{open}"
            );
            assert!(
                open.to_string().contains("run on the CPU")
                    || open.to_string().contains("nvidia-smi")
            );
            match e3 {
                Ok(_) => panic!("opened a GPU that Gpu::open could not"),
                Err(e) => assert!(e.to_string().contains("CUDA"), "{e}"),
            }
        }
    }
}

/// The GPU against the CPU engine: networks, estimators, Adam and training. Ignored where no
/// GPU is (so that the tally does not count it as passed there); on a machine with an NVIDIA GPU
/// run `cargo test --release -p sagd-apps --test gpu_check -- --include-ignored`, or the
/// binary's `sagd gpu-check`.
#[test]
#[ignore = "needs an NVIDIA GPU: run with --include-ignored where there is one"]
fn the_gpu_agrees_with_the_cpu() {
    networks_and_adam_agree();
    agree(
        &check_estimators(5, 0).unwrap(),
        &check_training(5, 0).unwrap(),
    );
}

/// Every network within 1e-4 and finite on GPU 0, and Adam's step the host's to the bit.
fn networks_and_adam_agree() {
    let gpu = Gpu::open(0).unwrap_or_else(|e| panic!("no GPU to check: {e}"));
    for c in check_networks(&gpu, 5).unwrap() {
        assert!(c.all_finite, "{c:?}");
        assert!(c.output.max(c.dparams).max(c.dx) < 1e-4, "{c:?}");
    }
    let adam = check_adam(&gpu, 5).unwrap();
    assert_eq!((adam.theta, adam.m, adam.v), (0.0, 0.0, 0.0), "{adam:?}");
}

/// Every estimator within 1e-3 of the CPU's, and training's moves within 0.05.
fn agree(estimators: &[EstimatorCheck], training: &[TrainingCheck]) {
    for c in estimators {
        assert!(c.g_dec.max(c.g_enc).max(c.loss) < 1e-3, "{c:?}");
    }
    for c in training {
        // The plumbing fails by O(1); rounding spreads the moves by up to about 1e-2.
        assert!(c.rel_err < 0.05, "{c:?}");
    }
}

/// E2's part of [`the_gpu_agrees_with_the_cpu`] (every network, E2's estimators and training,
/// Adam): what CI runs on the CPU's stand-in for a GPU (`scripts/gpu_on_cpu.sh`), where E3's
/// networks would take too long. Ignored where no GPU is, as that test.
#[test]
#[ignore = "needs an NVIDIA GPU (or scripts/gpu_on_cpu.sh): run with --include-ignored"]
fn e2_on_a_gpu_matches_the_cpu_engine() {
    networks_and_adam_agree();
    let (estimators, training) = check_e2(5, 0).unwrap();
    agree(&estimators, &training);
}

/// E3's passes and training on a small convolutional VAE of 8 × 8 images (every scheme, chains
/// that persist, the VAE; the device taking Adam's steps): what CI runs of E3 on the CPU's
/// stand-in for a GPU (`scripts/gpu_on_cpu.sh`). Ignored where no GPU is, as the others.
#[test]
#[ignore = "needs an NVIDIA GPU (or scripts/gpu_on_cpu.sh): run with --include-ignored"]
fn e3_on_a_gpu_matches_the_cpu_engine_on_small_images() {
    let (estimators, training) = check_e3_small(5, 0).unwrap();
    agree(&estimators, &training);
}
