//! SAGD's named settings for E2's fine-tuning (`sagd debias --sagd-preset`, Python's
//! `sagd.deconvolve(preset=…)`): one table, read by both.

use std::fmt;
use std::str::FromStr;

use sagd::error::SagdError;
use sagd_nn::train::{ChainSchedule, LangevinChains};
use serde::{Deserialize, Serialize};

use super::E2Settings;

/// SAGD's named settings: the paper's chains and four variants measured over Table 1's 30
/// replications (`docs/results/table1.md`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum SagdPreset {
    /// δ = 0.02 and K = 10 fixed, a constant learning rate.
    #[default]
    Default,
    /// Theorem 3's chains, cost-matched: δ_t = 0.1/√(1 + t), K_t ∝ 1 + t.
    Theorem3,
    /// A decaying learning rate, 5e-3/√(1 + t) (Theorem 3's α_t).
    Decay,
    /// The chains started again from the encoder every 20 updates (24% more Langevin steps).
    Refresh,
    /// Refresh's chains, two per data point (2.5 times the default's Langevin steps).
    Refresh2,
}

/// What a [`SagdPreset`] sets.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SagdPresetValues {
    /// The Langevin step δ (at the start of the run, with a schedule).
    pub delta: f64,
    /// δ_t = δ/(1 + t)^this (0: constant).
    pub delta_decay: f64,
    /// K_t grows as (1 + t)^this, cost-matched (0: K fixed).
    pub k_growth: f64,
    /// SAGD's learning rate, where the preset sets one.
    pub lr: Option<f64>,
    /// The learning rate decays as (1 + t)^−this (0: constant).
    pub lr_decay: f64,
    /// Chains started again from the encoder every this many updates.
    pub refresh_every: Option<usize>,
    /// Chains per data point.
    pub chains_per_point: Option<usize>,
}

impl SagdPreset {
    /// Every preset, in the order the help lists them.
    pub const ALL: [SagdPreset; 5] = [
        SagdPreset::Default,
        SagdPreset::Theorem3,
        SagdPreset::Decay,
        SagdPreset::Refresh,
        SagdPreset::Refresh2,
    ];

    /// Its name on the command line and in Python.
    pub fn name(self) -> &'static str {
        match self {
            SagdPreset::Default => "default",
            SagdPreset::Theorem3 => "theorem3",
            SagdPreset::Decay => "decay",
            SagdPreset::Refresh => "refresh",
            SagdPreset::Refresh2 => "refresh2",
        }
    }

    /// One line on what it sets.
    pub fn describe(self) -> &'static str {
        match self {
            SagdPreset::Default => "δ = 0.02 and K = 10 fixed, a constant learning rate",
            SagdPreset::Theorem3 => "Theorem 3's chains, cost-matched: δ_t = 0.1/√(1 + t), K_t ∝ 1 + t",
            SagdPreset::Decay => "a decaying learning rate, 5e-3/√(1 + t) (Theorem 3's α_t)",
            SagdPreset::Refresh => "the chains started again from the encoder every 20 updates (24% more Langevin steps)",
            SagdPreset::Refresh2 => "refresh's chains, two per data point (2.5 times the default's Langevin steps)",
        }
    }

    /// Its values.
    pub fn values(self) -> SagdPresetValues {
        match self {
            SagdPreset::Default => SagdPresetValues {
                delta: LangevinChains::default().step_size,
                delta_decay: 0.0,
                k_growth: 0.0,
                lr: None,
                lr_decay: 0.0,
                refresh_every: None,
                chains_per_point: None,
            },
            SagdPreset::Theorem3 => SagdPresetValues {
                delta: 0.1,
                delta_decay: 0.5,
                k_growth: 1.0,
                ..SagdPreset::Default.values()
            },
            SagdPreset::Decay => SagdPresetValues {
                lr: Some(5e-3),
                lr_decay: 0.5,
                ..SagdPreset::Default.values()
            },
            SagdPreset::Refresh => SagdPresetValues {
                refresh_every: Some(20),
                ..SagdPreset::Default.values()
            },
            SagdPreset::Refresh2 => SagdPresetValues {
                chains_per_point: Some(2),
                ..SagdPreset::Refresh.values()
            },
        }
    }

    /// Sets SAGD's chains and learning rate in `s` to these values. A learning rate `s` already
    /// has for SAGD (a case's own) stays; HMC keeps the paper's δ where the preset changes SAGD's.
    pub fn apply(self, s: &mut E2Settings) {
        let v = self.values();
        let base = LangevinChains::default().step_size;
        let m = &mut s.method;
        m.sagd.step_size = v.delta;
        m.sagd.schedule = schedule(v.delta_decay, v.k_growth);
        m.sagd.refresh_every = v.refresh_every;
        m.sagd.chains_per_point = v.chains_per_point;
        m.sagd_lr_decay = v.lr_decay;
        if v.delta != base {
            m.hmc_step_size = m.hmc_step_size.or(Some(base));
        }
        s.sagd_lr = s.sagd_lr.or(v.lr);
    }
}

/// The chains' schedule for these exponents: none where both are 0 (the run's updates are filled
/// in when the phase is set up).
pub fn schedule(delta_decay: f64, k_growth: f64) -> Option<ChainSchedule> {
    (delta_decay != 0.0 || k_growth != 0.0).then_some(ChainSchedule {
        decay: delta_decay,
        growth: k_growth,
        updates: 0,
    })
}

impl fmt::Display for SagdPreset {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for SagdPreset {
    type Err = SagdError;

    fn from_str(s: &str) -> Result<Self, SagdError> {
        SagdPreset::ALL
            .into_iter()
            .find(|p| p.name() == s)
            .ok_or_else(|| SagdError::InvalidSetting {
                name: "SAGD preset",
                value: s.to_string(),
                fix: format!(
                    "use one of {}",
                    SagdPreset::ALL.map(SagdPreset::name).join(", ")
                ),
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_read_back_and_unknown_ones_are_named() {
        for p in SagdPreset::ALL {
            assert_eq!(p.name().parse::<SagdPreset>().unwrap(), p);
        }
        let e = "refresh3".parse::<SagdPreset>().unwrap_err().to_string();
        assert!(e.contains("refresh3") && e.contains("refresh2"), "{e}");
    }

    #[test]
    fn the_default_preset_leaves_the_settings_as_they_are() {
        let mut s = E2Settings::default();
        SagdPreset::Default.apply(&mut s);
        assert_eq!(
            serde_json::to_value(&s).unwrap(),
            serde_json::to_value(E2Settings::default()).unwrap()
        );
        let mut t = E2Settings::default();
        SagdPreset::Refresh2.apply(&mut t);
        assert_eq!(t.method.sagd.refresh_every, Some(20));
        assert_eq!(t.method.sagd.chains_per_point, Some(2));
    }
}
