//! A few seconds' measurement of this machine's speed on E2's and E3's kind of work, against the
//! same measurement on the machine the plan's unit costs were timed on, so that the plan's
//! estimate holds on a slower or faster CPU. Cached beside the pre-trained networks.

use std::path::Path;
use std::time::Instant;

use anyhow::{Context, Result};
use sagd_apps::debias::{replicate, Case, E2Settings, Method, RunOptions};
use sagd_apps::mnist::experiment::{time_phase, E3Settings, Objective};
use sagd_apps::mnist::{Mnist, Split};
use serde::{Deserialize, Serialize};

/// Seconds of the E2 workload ([`e2_seconds`]) on one thread of the machine the unit costs were
/// timed on (the 2-core Intel Xeon with AVX-512 of docs/results/reproduce-quick.md), idle, the
/// median of 5 (2026-11-28).
const REFERENCE_E2_S: f64 = 1.13;
/// The same for the E3 workload's seconds per minibatch ([`e3_seconds`]).
const REFERENCE_E3_S: f64 = 0.107;

/// The file of the cached measurement, in the pre-trained cache folder.
const FILE: &str = "calibration.json";

/// How many times the reference machine's time this machine takes for each kind of work (one
/// thread), and where that came from.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Speed {
    /// E2's networks (small dense layers, Langevin chains over them).
    pub e2: f64,
    /// E3's convolutional networks.
    pub e3: f64,
    /// The processor measured.
    pub cpu: String,
    /// The sagd that measured it and the kernels it ran (together they set the speed).
    pub version: String,
}

impl Speed {
    /// The cached measurement in `cache` when it is of this CPU and this sagd, else a new one
    /// (about two seconds), cached there when the folder can be written.
    pub fn here(cache: &Path) -> Result<(Speed, bool)> {
        let file = cache.join(FILE);
        let cpu = super::report::Machine::here(1).cpu;
        // The kernels' path is part of what was measured (SAGD_CPU_CAPABILITY narrows it).
        let version = format!(
            "{} ({})",
            env!("CARGO_PKG_VERSION"),
            sagd::cpu::capability().name()
        );
        if let Some(s) = std::fs::read(&file)
            .ok()
            .and_then(|b| serde_json::from_slice::<Speed>(&b).ok())
            .filter(|s| s.cpu == cpu && s.version == version && s.sane())
        {
            return Ok((s, true));
        }
        let one = rayon::ThreadPoolBuilder::new()
            .num_threads(1)
            .build()
            .context("calibration: a thread pool")?;
        let (e2, e3) =
            one.install(|| -> Result<(f64, f64)> { Ok((e2_seconds()?, e3_seconds()?)) })?;
        let s = Speed {
            e2: e2 / REFERENCE_E2_S,
            e3: e3 / REFERENCE_E3_S,
            cpu,
            version,
        };
        if std::fs::create_dir_all(cache).is_ok() {
            // A cache that cannot be written costs a remeasurement next time, nothing else.
            crate::output::write_atomic(&file, serde_json::to_vec_pretty(&s)?).ok();
        }
        Ok((s, false))
    }

    /// Factors a measurement can give: a timer or a stalled machine can give others.
    fn sane(&self) -> bool {
        [self.e2, self.e3]
            .iter()
            .all(|f| f.is_finite() && (0.05..=50.0).contains(f))
    }
}

/// Seconds of one small E2 replication (the normal case, n = 1000, 100 + 20 epochs, the paper's
/// four methods) on the current thread pool.
pub fn e2_seconds() -> Result<f64> {
    let s = E2Settings {
        pretrain_epochs: 100,
        finetune_epochs: 20,
        methods: Method::ALL[..4].to_vec(),
        m: 1000,
        ..Case::Normal.settings(false)
    };
    let t = Instant::now();
    replicate(
        &s,
        &Case::Normal.law(),
        7,
        &RunOptions::default(),
        &|_, _, _| {},
    )
    .context("calibration: E2's workload")?;
    Ok(t.elapsed().as_secs_f64())
}

/// Seconds per minibatch of E3's VAE (batches of 100 synthetic images), timed over 6 after a
/// first on the current thread pool.
pub fn e3_seconds() -> Result<f64> {
    let s = E3Settings {
        train_n: 700,
        batch_size: 100,
        eval_n: 10,
        ..E3Settings::default()
    };
    // Pixels from a fixed generator: the work does not depend on their values.
    let pixels = |n: usize| -> Vec<u8> {
        (0..n * 784)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
            .collect()
    };
    let data = Mnist {
        train: Split {
            images: pixels(s.train_n),
            labels: vec![0; s.train_n],
        },
        test: Split {
            images: pixels(s.eval_n),
            labels: vec![0; s.eval_n],
        },
    };
    let t = time_phase(&s, &data, Objective::Vae, 6, sagd_nn::Device::Cpu)
        .context("calibration: E3's workload")?;
    Ok(t.s_per_update)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The reference constants: `cargo test --release -p sagd-cli --bin sagd reference -- --ignored
    /// --nocapture` on an idle machine prints the medians of 5 of each workload on one thread.
    #[test]
    #[ignore = "a measurement for the constants, not a check"]
    fn reference() {
        let one = rayon::ThreadPoolBuilder::new()
            .num_threads(1)
            .build()
            .unwrap();
        let median = |f: fn() -> Result<f64>| {
            let mut v: Vec<f64> = (0..5).map(|_| one.install(f).unwrap()).collect();
            v.sort_by(f64::total_cmp);
            v[2]
        };
        say!(
            "E2 {:.4} s, E3 {:.4} s",
            median(e2_seconds),
            median(e3_seconds)
        );
    }
}
