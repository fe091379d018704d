//! The CUDA backend, what can be checked without a GPU: devices parse and print. The unit tests of
//! `cuda` check the kernels: every one loaded is defined in `kernels.cu` and launched with as many
//! arguments as it takes, and they compile with NVRTC where its library is found. Its agreement
//! with the CPU engine on the experiments' networks is `sagd-apps`'s `gpu_check` test.

use sagd_nn::Device;

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
