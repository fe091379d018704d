//! Pre-trained networks kept on disk, keyed by everything that determines them.

use std::path::{Path, PathBuf};

use sagd::error::{Result, SagdError};
use sagd::run::{fnv1a, FNV_OFFSET};

use sagd_nn::Device;
use serde::Deserialize;

use super::E2Settings;
use sagd_nn::vae::{Vae, VaeParams};
use sagd_nn::Sequential;

/// Pre-trained networks saved under a name derived from everything that determines them: the
/// data, the seed and the pre-training settings. Pre-training is deterministic, so a replication
/// that reads them gives the same results as one that trains them.
pub(crate) struct PretrainedCache {
    pub(crate) path: PathBuf,
    key: serde_json::Value,
}

/// The cache file's format tag (inside the checksummed frame of [`sagd::run::write_framed`]).
const PRETRAINED_FORMAT: &str = "sagd-debias-pretrained/3";

impl PretrainedCache {
    pub(super) fn new(dir: &Path, s: &E2Settings, x: &[f32], seed: u64, device: Device) -> Self {
        let data_hash = fnv1a(FNV_OFFSET, x.iter().flat_map(|v| v.to_bits().to_le_bytes()));
        let mut key = serde_json::json!({
            "seed": seed, "n": s.n, "p": s.p, "hidden": s.hidden, "batch_size": s.batch_size,
            "pretrain_epochs": s.pretrain_epochs, "lr": s.lr, "data_fnv1a": format!("{data_hash:016x}"),
            "sagd_nn_version": env!("CARGO_PKG_VERSION"), "seed_streams": crate::SEED_STREAMS,
        });
        // A GPU's pre-training rounds differently: its networks are cached apart.
        if device != Device::Cpu {
            key["device"] = serde_json::json!(device.to_string());
        }
        PretrainedCache::keyed(
            dir,
            &format!("pretrained-p{}-h{}-s{seed}", s.p, s.hidden),
            key,
            data_hash,
        )
    }

    /// A cache file in `dir` named `{prefix}-{hash of the key and the data}.cache`, holding `key`.
    pub(crate) fn keyed(dir: &Path, prefix: &str, key: serde_json::Value, data_hash: u64) -> Self {
        let name_hash = fnv1a(data_hash, key.to_string().bytes());
        PretrainedCache {
            path: dir.join(format!("{prefix}-{name_hash:016x}.cache")),
            key,
        }
    }

    fn error(&self, what: &str) -> SagdError {
        SagdError::Cache {
            path: self.path.display().to_string(),
            problem: format!("{what}; delete it to pre-train again"),
        }
    }

    /// The saved networks and the pre-training's wall seconds, or None when nothing is saved.
    pub(crate) fn load(&self, vae: &Vae) -> Result<Option<(VaeParams, f64)>> {
        Ok(self.load_nets(&vae.dec, &vae.enc)?.map(|(p, t, _)| (p, t)))
    }

    /// [`PretrainedCache::load`] for any decoder and encoder, with the pre-training's learning
    /// curve where one was saved.
    pub(crate) fn load_nets(
        &self,
        dec: &Sequential,
        enc: &Sequential,
    ) -> Result<Option<(VaeParams, f64, Vec<f64>)>> {
        #[derive(Deserialize)]
        struct Saved {
            format: String,
            key: serde_json::Value,
            pretrain_time_s: f64,
            dec: serde_json::Value,
            enc: serde_json::Value,
            #[serde(default)]
            curve: Vec<f64>,
        }
        if !self.path.exists() {
            return Ok(None);
        }
        // The frame's checksum refuses any change to the file before its numbers are used.
        let body = sagd::run::read_framed(&self.path).map_err(|e| {
            self.error(&match e {
                SagdError::Checkpoint { problem, .. } => {
                    problem.replace("checkpoint", "cache file")
                }
                other => other.to_string(),
            })
        })?;
        let saved: Saved = serde_json::from_slice(&body)
            .map_err(|e| self.error(&format!("not a pre-trained cache file ({e})")))?;
        if saved.format != PRETRAINED_FORMAT || saved.key != self.key {
            return Err(self.error("saved for other data or settings"));
        }
        let params = VaeParams {
            dec: dec
                .from_saved(saved.dec)
                .map_err(|e| self.error(&e.to_string()))?,
            enc: enc
                .from_saved(saved.enc)
                .map_err(|e| self.error(&e.to_string()))?,
        };
        Ok(Some((params, saved.pretrain_time_s, saved.curve)))
    }

    /// Writes the networks (whole or not at all: a temporary file, then a rename).
    pub(crate) fn save(&self, vae: &Vae, p: &VaeParams, time_s: f64) -> Result<()> {
        self.save_nets(&vae.dec, &vae.enc, p, time_s, &[])
    }

    /// [`PretrainedCache::save`] for any decoder and encoder, with the pre-training's learning
    /// curve (so that a run reading the cache reports the curve a run training them would).
    pub(crate) fn save_nets(
        &self,
        dec: &Sequential,
        enc: &Sequential,
        p: &VaeParams,
        time_s: f64,
        curve: &[f64],
    ) -> Result<()> {
        let v = serde_json::json!({
            "format": PRETRAINED_FORMAT, "key": self.key, "pretrain_time_s": time_s,
            "dec": dec.to_saved(&p.dec), "enc": enc.to_saved(&p.enc), "curve": curve,
        });
        if let Some(dir) = self.path.parent() {
            std::fs::create_dir_all(dir).map_err(|e| self.error(&format!("cannot write ({e})")))?;
        }
        sagd::run::write_framed(&self.path, v.to_string().as_bytes())
    }
}
