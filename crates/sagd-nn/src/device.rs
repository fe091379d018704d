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

/// The GPU of the process `local_rank` places after the one that takes GPU `first`, of
/// `count`.
fn nth_gpu(first: usize, local_rank: usize, count: usize) -> usize {
    (first + local_rank) % count.max(1)
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
    /// The device of the process `local_rank` places from the first on its machine: the CPU
    /// stays the CPU; GPU N is the first process's, and the others take the GPUs after it in
    /// turn (one GPU per process while there are enough; a machine that shows each process only
    /// its own GPU gives every process GPU 0).
    pub fn for_process(self, local_rank: usize) -> Result<Device, GpuError> {
        match self {
            Device::Cuda(first) if local_rank > 0 => {
                Ok(Device::Cuda(nth_gpu(first, local_rank, Gpu::count()?)))
            }
            other => Ok(other),
        }
    }

    /// Checks that the device can be used (opens the GPU: the libraries, the device, the
    /// kernels), so that a missing one stops a command before any work.
    pub fn ready(self) -> Result<(), GpuError> {
        match self {
            Device::Cpu => Ok(()),
            Device::Cuda(i) => Gpu::open(i).map(|_| ()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn processes_on_a_machine_take_its_gpus_in_turn() {
        // Four processes, four GPUs, from GPU 0: one each.
        assert_eq!(
            (0..4).map(|r| nth_gpu(0, r, 4)).collect::<Vec<_>>(),
            [0, 1, 2, 3]
        );
        // More processes than GPUs share them in turn; starting at GPU 1 shifts the turn.
        assert_eq!(
            (0..5).map(|r| nth_gpu(1, r, 2)).collect::<Vec<_>>(),
            [1, 0, 1, 0, 1]
        );
        // Each process shown only its own GPU (e.g. by Slurm): GPU 0 for all.
        assert!((0..8).all(|r| nth_gpu(0, r, 1) == 0));
        // The first process, and the CPU, are unchanged without asking for a GPU count.
        assert_eq!(Device::Cuda(3).for_process(0).unwrap(), Device::Cuda(3));
        assert_eq!(Device::Cpu.for_process(5).unwrap(), Device::Cpu);
    }
}
