//! The CUDA backend, what can be checked without a GPU: devices parse and print, and every kernel
//! the backend loads is defined in its source (the unit tests of `cuda` also compile the kernels
//! with NVRTC where its library is found). Its agreement with the CPU engine on the
//! experiments' networks is `sagd-apps`'s `gpu_check` test.

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

#[test]
fn every_kernel_the_backend_loads_is_in_its_source() {
    let src = include_str!("../src/cuda/kernels.cu");
    let module = include_str!("../src/cuda/mod.rs");
    let list = module
        .split("const KERNELS")
        .nth(1)
        .and_then(|s| s.split("];").next())
        .expect("the KERNELS list");
    let names: Vec<&str> = list.split('"').skip(1).step_by(2).collect();
    assert!(names.len() >= 18, "{names:?}");
    for name in names {
        assert!(
            src.contains(&format!("extern \"C\" __global__ void {name}(")),
            "kernel {name} is loaded but not defined in kernels.cu"
        );
    }
}
