//! The applications on the CUDA backend: E3 on a GPU that is not there fails clearly, and the GPU
//! agrees with the CPU engine where a GPU is found (elsewhere that part is skipped, saying why).

use sagd_apps::gpu_check::{check_adam, check_estimators, check_networks, check_training};
use sagd_nn::cuda::{Gpu, GpuError};
use sagd_nn::Device;

#[test]
fn e3_on_a_gpu_that_is_not_there_is_a_clear_error() {
    use sagd_apps::mnist::experiment::{E3Estimator, Objective};
    use sagd_apps::mnist::model::E3;
    if Gpu::open(0).is_ok() {
        eprintln!("skipped: a GPU is here");
        return;
    }
    let m = E3::new(20);
    let images = vec![0u8; 2 * 784];
    match E3Estimator::on(Device::Cuda(0), &m, &images, Objective::Vae, 1) {
        Ok(_) => panic!("opened a GPU that Gpu::open could not"),
        Err(e) => assert!(e.to_string().contains("CUDA"), "{e}"),
    }
}

#[test]
fn the_gpu_agrees_with_the_cpu_or_the_check_is_skipped_with_the_reason() {
    let gpu = match Gpu::open(0) {
        Ok(gpu) => gpu,
        Err(e) => {
            // No GPU here (CI): opening must fail with a clear error, never a panic.
            assert!(
                matches!(e, GpuError::Library { .. } | GpuError::NoDevice(_)),
                "{e}"
            );
            assert!(
                e.to_string().contains("run on the CPU") || e.to_string().contains("nvidia-smi")
            );
            eprintln!("skipped: {e}");
            return;
        }
    };
    for c in check_networks(&gpu, 5).unwrap() {
        assert!(c.all_finite, "{c:?}");
        assert!(c.output.max(c.dparams).max(c.dx) < 1e-4, "{c:?}");
    }
    for c in check_estimators(5, 0).unwrap() {
        assert!(c.g_dec.max(c.g_enc).max(c.loss) < 1e-3, "{c:?}");
    }
    let adam = check_adam(&gpu, 5).unwrap();
    assert_eq!((adam.theta, adam.m, adam.v), (0.0, 0.0, 0.0), "{adam:?}");
    for c in check_training(5, 0).unwrap() {
        // The plumbing fails by O(1); rounding spreads the moves by up to about 1e-2.
        assert!(c.rel_err < 0.05, "{c:?}");
    }
}
