//! What E3 returns: learning curves, held-out evaluations and their paired differences.

use super::*;

/// One phase's learning curve: the loss of every update.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Curve {
    /// The phase.
    pub phase: String,
    /// The loss at each update (negative ELBO, or −log p(x | u) at the chains' states).
    pub loss: Vec<f64>,
}

/// A model's held-out log-likelihood over the evaluated test images.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Evaluation {
    /// Which parameters.
    pub model: String,
    /// Mean log p̂(x) per image (nats).
    pub log_px: f64,
    /// Its standard error over images.
    pub log_px_se: f64,
    /// Mean ELBO per image.
    pub elbo: f64,
    /// Mean effective sample size of the importance weights (of k).
    pub ess: f64,
    /// Per image.
    pub per_image: Vec<HeldOut>,
}

/// A paired difference of held-out log-likelihoods over the same images and draws.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Paired {
    /// "a − b".
    pub what: String,
    /// Mean difference per image (nats).
    pub mean: f64,
    /// Its standard error.
    pub se: f64,
}

impl Paired {
    pub(crate) fn of(a: &Evaluation, b: &Evaluation) -> Paired {
        let d: Vec<f64> = a
            .per_image
            .iter()
            .zip(&b.per_image)
            .map(|(x, y)| x.log_px - y.log_px)
            .collect();
        let (mean, sd) = sagd::diagnostics::mean_sd(&d);
        Paired {
            what: format!("{} − {}", a.model, b.model),
            mean,
            se: sd / (d.len().max(1) as f64).sqrt(),
        }
    }
}

/// Everything E3 computed.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct E3Result {
    /// The settings.
    pub settings: E3Settings,
    /// The pre-trained VAE (loaded from the cache when it was there).
    pub pretrained: VaeParams,
    /// The SAGD-refined generator (with the frozen encoder).
    pub sagd: VaeParams,
    /// The control: the VAE trained further by its ELBO for as many updates.
    pub control: VaeParams,
    /// Learning curves of the phases run now.
    pub curves: Vec<Curve>,
    /// Held-out log-likelihoods: pre-trained, SAGD, control.
    pub evaluations: Vec<Evaluation>,
    /// SAGD − pre-trained, control − pre-trained, SAGD − control.
    pub differences: Vec<Paired>,
    /// Whether the pre-trained VAE came from the cache.
    pub pretrained_cached: bool,
    /// Wall seconds per phase.
    pub timing_s: std::collections::BTreeMap<String, f64>,
    /// In a run split over processes: what this process exchanged in each phase.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub exchanged: std::collections::BTreeMap<String, sagd::share::Exchanged>,
}
