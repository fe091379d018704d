//! Where networks are trained.

use crate::cuda::{Gpu, GpuError};

/// Where networks are trained: the CPU engine (the default) or a CUDA GPU.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Device {
    /// The CPU engine, on the thread pool.
    #[default]
    Cpu,
    /// CUDA device number N.
    Cuda(usize),
}

impl std::fmt::Display for Device {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Device::Cpu => f.write_str("cpu"),
            Device::Cuda(0) => f.write_str("cuda"),
            Device::Cuda(i) => write!(f, "cuda:{i}"),
        }
    }
}

impl std::str::FromStr for Device {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let t = s.trim().to_ascii_lowercase();
        match t.as_str() {
            "cpu" => Ok(Device::Cpu),
            "cuda" | "gpu" => Ok(Device::Cuda(0)),
            _ => t
                .strip_prefix("cuda:")
                .and_then(|i| i.parse().ok())
                .map(Device::Cuda)
                .ok_or_else(|| format!("unknown device `{s}`: use cpu, cuda or cuda:N")),
        }
    }
}

impl Device {
    /// Checks that the device can be used (opens the GPU: the libraries, the device, the
    /// kernels), so that a missing one stops a command before any work.
    pub fn ready(self) -> Result<(), GpuError> {
        match self {
            Device::Cpu => Ok(()),
            Device::Cuda(i) => Gpu::open(i).map(|_| ()),
        }
    }
}
