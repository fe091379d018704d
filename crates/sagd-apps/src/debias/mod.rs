//! The debiased VAE, the paper's second application (experiment E2: Table 1 and Figure 2), and
//! the deconvolution of a user's data with the same models. Settings are typed here, with the
//! spec's values as defaults and the paper's cases as presets ([`Case`]), validated once
//! ([`E2Settings::validate`]); [`run_table`] and [`deconvolve`] return typed, serialisable results
//! with their summaries (Table 1 statistics beside the paper's numbers, the figure's series).

pub(crate) mod cache;
pub mod choose;
mod deconvolve;
mod eval;
pub mod figure;
pub mod npmle;
mod preset;
mod replicate;
mod table;

pub use deconvolve::{deconvolve, Deconvolution};
#[allow(deprecated)]
pub use eval::part_seed;
pub use eval::{
    evaluate, generate, log_likelihood_1d, log_likelihood_points_1d, simulate, Evaluation,
};
pub use preset::{schedule, SagdPreset, SagdPresetValues};
pub use replicate::{fit, replicate, MethodResult, Replication, RunOptions, TracePoint};
pub use table::{paper, run_table, Summary, Table1, PAPER_METHODS};

use sagd::error::{Result, SagdError};
use sagd::hmc::HmcSettings;
use sagd::langevin::Scheme;
use sagd::metrics::Law;
use serde::{Deserialize, Serialize};

use sagd_nn::train::{HmcChains, LangevinChains};

/// The fine-tuning methods of Table 1.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Method {
    /// The evidence lower bound, one reparameterised sample (encoder and decoder).
    Vae,
    /// The importance-weighted bound with k samples (encoder and decoder).
    Iwae,
    /// Decoder only; HMC chains from an encoder draw at every update.
    Hmc,
    /// Decoder only; persistent underdamped Langevin chains (SAGD), with this crate's scheme and
    /// averaging ([`MethodSettings::sagd`], [`MethodSettings::sagd_average`]).
    Sagd,
    /// SAGD as the paper ran it: the same chains with the paper's Euler scheme, the last iterate
    /// and the fine-tuning learning rate ([`MethodSettings::sagd_paper`]).
    #[serde(rename = "sagd-paper")]
    SagdPaper,
}

impl Method {
    /// All, in table order.
    pub const ALL: [Method; 5] = [
        Method::Vae,
        Method::Iwae,
        Method::Hmc,
        Method::Sagd,
        Method::SagdPaper,
    ];

    /// The name as the command line spells it.
    pub fn name(self) -> &'static str {
        match self {
            Method::Vae => "vae",
            Method::Iwae => "iwae",
            Method::Hmc => "hmc",
            Method::Sagd => "sagd",
            Method::SagdPaper => "sagd-paper",
        }
    }

    /// The name in tables and legends.
    pub fn label(self) -> &'static str {
        match self {
            Method::Vae => "VAE",
            Method::Iwae => "IWAE",
            Method::Hmc => "HMC",
            Method::Sagd => "SAGD",
            Method::SagdPaper => "SAGD, paper's variant",
        }
    }

    /// The paper's method whose Table 1 column this one is compared with.
    pub fn paper_column(self) -> Method {
        match self {
            Method::SagdPaper => Method::Sagd,
            m => m,
        }
    }

    /// What this method runs with `m`: its integrator, averaging and chain settings, for the
    /// headings of tables.
    pub fn describe(self, s: &E2Settings) -> String {
        let m = &s.method;
        let chains = |c: &LangevinChains| {
            format!(
                "δ = {}, K = {}, γ = {}, {} burn-in steps",
                c.step_size, c.steps, c.langevin.gamma, c.burn_in
            )
        };
        match self {
            Method::Vae => "the ELBO, one sample".into(),
            Method::Iwae => format!("k = {}", m.iwae_k),
            Method::Hmc => {
                let h = m.hmc();
                format!(
                    "L = {}, step {}, {} transitions per update",
                    h.hmc.n_leapfrog, h.hmc.step_size, h.transitions
                )
            }
            Method::Sagd => {
                let avg = if m.sagd_average > 0.0 {
                    format!(
                        "the average of the last {}% of its iterates",
                        (100.0 * m.sagd_average).round()
                    )
                } else {
                    "the last iterate".into()
                };
                let lr = match s.sagd_lr {
                    Some(lr) => format!(", learning rate {lr}"),
                    None => String::new(),
                };
                let scheme = scheme_label(m.sagd.langevin.scheme);
                format!("{scheme}, {avg}; {}{lr}", chains(&m.sagd))
            }
            Method::SagdPaper => format!(
                "Euler (the paper's), the last iterate; {}",
                chains(&m.sagd_paper())
            ),
        }
    }
}

impl std::fmt::Display for Method {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Method {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        Method::ALL
            .into_iter()
            .find(|m| m.name() == s.trim().to_ascii_lowercase())
            .ok_or_else(|| format!("unknown method `{s}`: use vae, iwae, hmc, sagd or sagd-paper"))
    }
}

/// The cases of Table 1.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Case {
    /// π = N(1, 0.5²).
    Normal,
    /// π = exponential with mean 2.
    #[default]
    Exp,
    /// π = 0.4 N(0, 0.5²) + 0.6 N(3, 0.5²).
    Mixture,
    /// p = 100 independent exponential coordinates, n = 10000, minibatches of 500.
    Highdim,
}

impl Case {
    /// All, in table order.
    pub const ALL: [Case; 4] = [Case::Normal, Case::Exp, Case::Mixture, Case::Highdim];

    /// The name as the command line spells it.
    pub fn name(self) -> &'static str {
        match self {
            Case::Normal => "normal",
            Case::Exp => "exp",
            Case::Mixture => "mixture",
            Case::Highdim => "highdim",
        }
    }

    /// The true latent law (of each coordinate).
    pub fn law(self) -> Law {
        match self {
            Case::Normal => Law::normal(1.0, 0.5),
            Case::Mixture => Law::Mixture {
                components: vec![(0.4, 0.0, 0.5), (0.6, 3.0, 0.5)],
            },
            Case::Exp | Case::Highdim => Law::Exponential { mean: 2.0 },
        }
    }

    /// The settings `sagd debias --dist CASE` runs: the spec's for the 1-D cases; for highdim the
    /// paper's 10000 + 1000 epochs with `paper`, else a small default (500 + 50 epochs) that
    /// finishes in minutes on 2 cores.
    pub fn settings(self, paper: bool) -> E2Settings {
        let spec = E2Settings::default();
        match self {
            Case::Highdim => E2Settings {
                n: 10_000,
                p: 100,
                hidden: 256,
                batch_size: 500,
                pretrain_epochs: if paper { 10_000 } else { 500 },
                finetune_epochs: if paper { 1000 } else { 50 },
                // With the paper's 20000 minibatch updates the likelihood rewards drifting towards
                // the data points; a smaller step keeps SAGD near its best (docs/guide.md).
                sagd_lr: paper.then_some(HIGHDIM_PAPER_SAGD_LR),
                ..spec
            },
            _ => spec,
        }
    }

    /// How the preset relates to the paper, for reports.
    pub fn profile(self, paper: bool) -> &'static str {
        match (self, paper) {
            (Case::Highdim, true) => "the paper's settings (--paper-settings)",
            (Case::Highdim, false) => {
                "the small default for 2 cores (--paper-settings runs the paper's 10000 + 1000 epochs)"
            }
            _ => "the paper's settings (SAGD's scheme and averaging are named with the methods)",
        }
    }
}

impl std::fmt::Display for Case {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Case {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        Case::ALL
            .into_iter()
            .find(|c| c.name() == s.trim().to_ascii_lowercase())
            .ok_or_else(|| format!("unknown case `{s}`: use normal, exp, mixture or highdim"))
    }
}

/// A scheme as tables name it: Euler, OBABO, BAOAB, UBU.
fn scheme_label(s: Scheme) -> String {
    match s {
        Scheme::Euler => "Euler".into(),
        other => other.name().to_uppercase(),
    }
}

/// SAGD's Adam learning rate in the high-dimensional case with the paper's settings.
pub const HIGHDIM_PAPER_SAGD_LR: f64 = 1e-4;

/// Settings of the fine-tuning methods: experiment E2's, except that SAGD integrates with BAOAB
/// and returns the average of its last half of iterates (measured better over 30 replications;
/// see docs/guide.md).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MethodSettings {
    /// IWAE's importance samples k.
    pub iwae_k: usize,
    /// SAGD's chains.
    pub sagd: LangevinChains,
    /// SAGD returns the average of its iterates over this final fraction of the updates (0: the
    /// last iterate; Algorithm 1 averages all of them).
    pub sagd_average: f64,
    /// SAGD's learning rate decays as (1 + t)^−this along its updates (0: constant).
    #[serde(default)]
    pub sagd_lr_decay: f64,
    /// HMC's leapfrog steps per proposal L.
    pub hmc_leapfrog: usize,
    /// HMC's leapfrog step; `None`: SAGD's δ (the paper: the same step size).
    pub hmc_step_size: Option<f64>,
    /// HMC's transitions per update; `None`: SAGD's K (the paper: the same chain length).
    pub hmc_transitions: Option<usize>,
}

impl Default for MethodSettings {
    fn default() -> Self {
        MethodSettings {
            iwae_k: 50,
            sagd: LangevinChains::default(),
            sagd_average: 0.5,
            sagd_lr_decay: 0.0,
            hmc_leapfrog: 5,
            hmc_step_size: None,
            hmc_transitions: None,
        }
    }
}

impl MethodSettings {
    /// SAGD's chains as the paper ran them: these chains with the paper's Euler scheme.
    pub fn sagd_paper(&self) -> LangevinChains {
        let mut c = self.sagd;
        c.langevin.scheme = Scheme::Euler;
        c
    }

    /// Whether [`Method::Sagd`] runs as the paper did (the Euler scheme, the last iterate).
    pub fn sagd_is_papers(&self) -> bool {
        self.sagd.langevin.scheme == Scheme::Euler && self.sagd_average == 0.0
    }

    /// HMC's chains, with SAGD's δ and K where HMC's own are not set.
    pub fn hmc(&self) -> HmcChains {
        HmcChains {
            hmc: HmcSettings {
                step_size: self.hmc_step_size.unwrap_or(self.sagd.step_size),
                n_leapfrog: self.hmc_leapfrog,
            },
            transitions: self.hmc_transitions.unwrap_or(self.sagd.steps),
        }
    }
}

/// Settings of one E2 run (defaults: the spec's 1-D experiment; [`Case::settings`] for the
/// others).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct E2Settings {
    /// Data points n.
    pub n: usize,
    /// Dimension p of Z, U and X (1 for the 1-D cases; coordinates independent).
    pub p: usize,
    /// Hidden width of both networks.
    pub hidden: usize,
    /// Minibatch size (n or more: full batch, where an epoch is one update).
    pub batch_size: usize,
    /// VAE pre-training epochs.
    pub pretrain_epochs: usize,
    /// Fine-tuning epochs per method.
    pub finetune_epochs: usize,
    /// Adam's learning rate for pre-training.
    pub lr: f64,
    /// Adam's learning rate for fine-tuning.
    pub finetune_lr: f64,
    /// SAGD's learning rate, where it differs from `finetune_lr`.
    #[serde(default)]
    pub sagd_lr: Option<f64>,
    /// Evaluation draws m.
    pub m: usize,
    /// The methods to run.
    pub methods: Vec<Method>,
    /// Their settings.
    pub method: MethodSettings,
}

impl Default for E2Settings {
    fn default() -> Self {
        E2Settings {
            n: 1000,
            p: 1,
            hidden: 64,
            batch_size: 1000,
            pretrain_epochs: 5000,
            finetune_epochs: 1000,
            lr: 1e-3,
            finetune_lr: 1e-3,
            sagd_lr: None,
            m: 100_000,
            methods: Method::ALL[..4].to_vec(),
            method: MethodSettings::default(),
        }
    }
}

impl E2Settings {
    /// Checks every setting; the error names it and says what to use.
    pub fn validate(&self) -> Result<()> {
        let at_least_one = |name: &'static str, v: usize| {
            if v == 0 {
                Err(SagdError::InvalidSetting {
                    name,
                    value: "0".into(),
                    fix: "use at least 1".into(),
                })
            } else {
                Ok(())
            }
        };
        let m = &self.method;
        for (name, v) in [
            ("n", self.n),
            ("p", self.p),
            ("hidden", self.hidden),
            ("batch_size", self.batch_size),
            ("m", self.m),
            ("iwae_k", m.iwae_k),
            ("sagd steps K", m.sagd.steps),
            ("hmc leapfrog steps L", m.hmc_leapfrog),
            ("hmc transitions", m.hmc().transitions),
        ] {
            at_least_one(name, v)?;
        }
        if !(m.sagd_lr_decay.is_finite() && m.sagd_lr_decay >= 0.0) {
            return Err(SagdError::InvalidSetting {
                name: "sagd_lr_decay",
                value: m.sagd_lr_decay.to_string(),
                fix: "use an exponent ≥ 0 (0: a constant learning rate)".into(),
            });
        }
        if self.methods.is_empty() {
            return Err(SagdError::InvalidSetting {
                name: "methods",
                value: "none".into(),
                fix: "name at least one of vae, iwae, hmc, sagd, sagd-paper".into(),
            });
        }
        for (name, v) in [
            ("lr", self.lr),
            ("finetune_lr", self.finetune_lr),
            ("sagd_lr", self.sagd_lr.unwrap_or(self.finetune_lr)),
        ] {
            if !(v.is_finite() && v > 0.0) {
                return Err(SagdError::InvalidSetting {
                    name,
                    value: v.to_string(),
                    fix: "use a finite learning rate > 0".into(),
                });
            }
        }
        if !(0.0..=1.0).contains(&m.sagd_average) {
            return Err(SagdError::InvalidSetting {
                name: "sagd_average",
                value: m.sagd_average.to_string(),
                fix: "use a fraction in [0, 1] (0: the last iterate)".into(),
            });
        }
        // SAGD's chain settings and their number (they run on every data point at once) are
        // refused before the pre-training, not after it.
        m.sagd.validate()?;
        let chains = self.n.saturating_mul(m.sagd.chains_per_point.unwrap_or(1));
        sagd::langevin::check_chains_fit(chains, self.p, 4, "sagd chains_per_point")?;
        m.hmc().hmc.kernel::<f32>().map(|_| ())
    }

    /// The cost of one update of `phase` ("pretrain" or a method's name) in pre-training
    /// updates, for progress bars and estimates: measured on the spec's shapes, IWAE and HMC cost
    /// about 20 and SAGD about 6 (they scale with k, L·K and K).
    pub fn update_cost(&self, phase: &str) -> u64 {
        let m = &self.method;
        let hmc = m.hmc();
        let cost = match phase.parse::<Method>() {
            Ok(Method::Iwae) => 0.4 * m.iwae_k as f64,
            Ok(Method::Hmc) => 0.4 * (hmc.hmc.n_leapfrog * hmc.transitions) as f64,
            Ok(Method::Sagd | Method::SagdPaper) => 0.6 * m.sagd.steps as f64,
            _ => 1.0,
        };
        cost.round().max(1.0) as u64
    }

    /// The work of one replication on `n` points, in pre-training updates (see
    /// [`E2Settings::update_cost`]).
    pub fn replication_work(&self, n: usize) -> u64 {
        let per_epoch = n.div_ceil(self.batch_size.clamp(1, n.max(1))) as u64;
        let ft: u64 = self
            .methods
            .iter()
            .map(|m| self.update_cost(m.name()))
            .sum();
        (self.pretrain_epochs as u64 + self.finetune_epochs as u64 * ft) * per_epoch
    }

    /// The settings that differ from `preset`, as `name = value` (nested names joined by dots).
    pub fn overrides(&self, preset: &E2Settings) -> Vec<String> {
        fn walk(path: &str, a: &serde_json::Value, b: &serde_json::Value, out: &mut Vec<String>) {
            match (a, b) {
                (serde_json::Value::Object(x), serde_json::Value::Object(y)) => {
                    for (k, v) in x {
                        let p = if path.is_empty() {
                            k.clone()
                        } else {
                            format!("{path}.{k}")
                        };
                        walk(&p, v, y.get(k).unwrap_or(&serde_json::Value::Null), out);
                    }
                }
                _ if a != b => out.push(format!("{path} = {a}")),
                _ => {}
            }
        }
        let mut out = Vec::new();
        if let (Ok(a), Ok(b)) = (serde_json::to_value(self), serde_json::to_value(preset)) {
            walk("", &a, &b, &mut out);
        }
        out
    }

    /// The settings that differ from the paper's for `case`, beside SAGD's own scheme, averaging
    /// and learning rate (which [`Method::SagdPaper`] runs as the paper did): empty when this
    /// run's numbers are comparable with the paper's Table 1.
    pub fn differs_from_paper(&self, case: Case) -> Vec<String> {
        let mut paper = case.settings(true);
        paper.methods.clone_from(&self.methods);
        paper.sagd_lr = self.sagd_lr;
        paper.method.sagd.langevin.scheme = self.method.sagd.langevin.scheme;
        paper.method.sagd_average = self.method.sagd_average;
        self.overrides(&paper)
    }

    /// SAGD's settings that differ from the paper's (scheme, averaging, learning rate).
    pub fn sagd_differs_from_paper(&self) -> Vec<String> {
        let mut out = Vec::new();
        if self.method.sagd.langevin.scheme != Scheme::Euler {
            out.push(format!(
                "SAGD integrates with {} (the paper: Euler)",
                scheme_label(self.method.sagd.langevin.scheme)
            ));
        }
        if self.method.sagd_average > 0.0 {
            out.push(format!(
                "SAGD returns the average of its last {}% of iterates (the paper: the last iterate)",
                (100.0 * self.method.sagd_average).round()
            ));
        }
        if let Some(lr) = self.sagd_lr {
            out.push(format!(
                "SAGD's learning rate is {lr} (the paper: {})",
                self.finetune_lr
            ));
        }
        out
    }

    /// SAGD's learning rate.
    pub fn sagd_lr(&self) -> f64 {
        self.sagd_lr.unwrap_or(self.finetune_lr)
    }
}
