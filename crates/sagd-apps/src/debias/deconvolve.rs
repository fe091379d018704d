//! Deconvolution of a user's data: X = Z + N(0, σ²) observed, the law of Z estimated by each
//! method's decoder. There is no true π, so the methods are compared by their log-likelihood on
//! observations held out of the fit ([`super::choose`]).

use std::collections::BTreeMap;

use sagd::error::{Result, SagdError};
use serde::{Deserialize, Serialize};

use super::choose::{compare, HeldOut};
use super::eval::log_likelihood_points_1d;
use super::replicate::{fit, Replication, RunOptions};
use super::E2Settings;
use sagd::rng::{ChainRng, Seed};
use sagd_nn::vae::Vae;

/// How far from the median, in noise standard deviations, an observation may lie (the networks
/// overflow in f32 between 300 and 600 on the spec's shapes).
pub const MAX_NOISE_SDS: f64 = 200.0;

/// The probabilities of the reported quantiles.
pub const QUANTILE_PROBS: [f64; 9] = [0.01, 0.05, 0.1, 0.25, 0.5, 0.75, 0.9, 0.95, 0.99];

/// Quantiles of one fitted latent distribution.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Quantiles {
    /// Probabilities.
    pub p: Vec<f64>,
    /// Quantiles of Z at them (in the data's units).
    pub q: Vec<f64>,
}

/// The result of a deconvolution.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Deconvolution {
    /// The settings run (n and the batch size from the data).
    pub settings: E2Settings,
    /// Observations fitted (the held-out ones excluded).
    pub n: usize,
    /// The noise standard deviation σ.
    pub noise_sd: f64,
    /// Per fitted model (`pretrained` and each method): quantiles of Z.
    pub quantiles: BTreeMap<String, Quantiles>,
    /// Per fitted model: mean log-likelihood per observation of the training part of
    /// (X − median)/σ (unit-noise scale; in-sample, so it favours the models that fit noise).
    pub loglik_per_point_scaled_data: BTreeMap<String, Option<f64>>,
    /// The fitted models compared on the held-out observations (none when nothing was held out).
    pub held_out: Option<HeldOut>,
    /// Per fitted model: draws of Z in the data's units, sorted.
    #[serde(skip)]
    pub samples: BTreeMap<String, Vec<f64>>,
    /// Per fitted model: draws of Z in the data's units, in draw order (for a CSV of samples).
    #[serde(skip)]
    pub draws: BTreeMap<String, Vec<f64>>,
    /// The fit itself (timings, diagnostics, traces; on the X/σ scale).
    pub fit: Replication,
}

/// Fits the unit-noise model to (X − median)/σ from `seed` and maps the latent draws back. A
/// fraction `holdout` of the observations (chosen at random from `seed`; 0: none) is left out of
/// the fit and scores the fitted models.
pub fn deconvolve(
    s: &E2Settings,
    x: &[f64],
    noise_sd: f64,
    holdout: f64,
    seed: u64,
    opts: &RunOptions,
    progress: &(dyn Fn(&str, usize, usize) + Sync),
) -> Result<Deconvolution> {
    let n_test = check_input(s, x, noise_sd, holdout)?;
    let (center, scaled) = centred(x, noise_sd)?;
    let (scaled, scaled_test) = split(&scaled, n_test, Seed::new(seed).stream("holdout").get());
    let s = E2Settings {
        n: scaled.len(),
        batch_size: s.batch_size.min(scaled.len()),
        ..s.clone()
    };
    s.validate()?;
    let opts = RunOptions {
        keep_samples: true,
        ..opts.clone()
    };
    let rep = fit(&s, None, scaled, seed, &opts, progress)?;
    let held_out = (!scaled_test.is_empty()).then(|| {
        let vae = Vae::new(1, s.hidden);
        let per_point = rep
            .decoders
            .iter()
            .map(|(k, dec)| (k.clone(), log_likelihood_points_1d(&vae, dec, &scaled_test)))
            .collect();
        compare(&per_point)
    });
    let (quantiles, samples, draws) = latent_laws(&rep.samples, center, noise_sd);
    let loglik_per_point_scaled_data = rep
        .methods
        .iter()
        .map(|(k, v)| (k.clone(), v.eval.loglik))
        .chain(std::iter::once((
            "pretrained".to_string(),
            rep.pretrained.loglik,
        )))
        .collect();
    Ok(Deconvolution {
        n: s.n,
        settings: s,
        noise_sd,
        quantiles,
        loglik_per_point_scaled_data,
        held_out,
        samples,
        draws,
        fit: rep,
    })
}

/// The data, the noise and the holdout checked against each other; the number of observations to
/// hold out.
fn check_input(s: &E2Settings, x: &[f64], noise_sd: f64, holdout: f64) -> Result<usize> {
    if x.len() < 2 {
        return Err(SagdError::InvalidSetting {
            name: "data",
            value: format!("{} observation(s)", x.len()),
            fix: "deconvolution needs at least 2 observations".into(),
        });
    }
    if !(noise_sd.is_finite() && noise_sd > 0.0) {
        return Err(SagdError::InvalidSetting {
            name: "noise_sd",
            value: noise_sd.to_string(),
            fix: "use the noise's standard deviation, a finite number > 0".into(),
        });
    }
    // Var X = Var Z + σ² ≥ σ²: a sample variance more than 4 of its own standard errors
    // (σ² √(2/(n−1)) when Z is constant) below σ² cannot come from noise this large: wrong units.
    let n = x.len() as f64;
    let mean = x.iter().sum::<f64>() / n;
    let var = x.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / (n - 1.0);
    if var < noise_sd * noise_sd * (1.0 - 4.0 * (2.0 / (n - 1.0)).sqrt()) {
        return Err(SagdError::InvalidSetting {
            name: "noise_sd",
            value: format!("{noise_sd}, against the data's own sd {:.4}", var.sqrt()),
            fix: "noise that large could not leave the observations this close together: give the noise's sd in the data's units".into(),
        });
    }
    if s.p != 1 {
        return Err(SagdError::InvalidSetting {
            name: "p",
            value: s.p.to_string(),
            fix: "deconvolution reads one column: use p = 1".into(),
        });
    }
    if !(0.0..=0.5).contains(&holdout) {
        return Err(SagdError::InvalidSetting {
            name: "holdout",
            value: holdout.to_string(),
            fix: "hold out a fraction between 0 (none) and 0.5 of the observations".into(),
        });
    }
    let n_test = (holdout * x.len() as f64).round() as usize;
    if holdout > 0.0 && (n_test < 2 || x.len() - n_test < 2) {
        return Err(SagdError::InvalidSetting {
            name: "holdout",
            value: format!("{holdout} of {} observations", x.len()),
            fix: "hold out at least 2 observations and keep 2 to fit, or use 0".into(),
        });
    }
    Ok(n_test)
}

/// The observations centred at their median and in units of the noise's sd, with that median.
fn centred(x: &[f64], noise_sd: f64) -> Result<(f64, Vec<f64>)> {
    // X − c = (Z − c) + noise for any c: fit the data centred at their median (the networks are
    // happiest near 0) and shift the latent draws back. An observation that stays hundreds of noise
    // standard deviations away is one the f32 networks cannot take (named by its place in the
    // data, before any is held out).
    let mut sorted = x.to_vec();
    sorted.sort_by(f64::total_cmp);
    let center = sorted[sorted.len() / 2];
    let scaled: Vec<f64> = x.iter().map(|v| (v - center) / noise_sd).collect();
    if let Some((i, v)) = scaled
        .iter()
        .enumerate()
        .find(|(_, v)| v.is_nan() || v.abs() > MAX_NOISE_SDS)
    {
        return Err(SagdError::InvalidSetting {
            name: "data",
            value: format!("observation {} = {}", i + 1, readable(x[i])),
            fix: format!(
                "it lies {} noise standard deviations from the median {}, beyond the {MAX_NOISE_SDS} that the networks can take: check the value, or give the noise's standard deviation in the data's units (--noise-sd)",
                readable(v.abs()),
                readable(center)
            ),
        });
    }
    Ok((center, scaled))
}

/// `v` as a message shows it: four decimals, or in scientific notation where that would be a
/// wall of digits or of zeros.
fn readable(v: f64) -> String {
    if v == 0.0 || (1e-3..1e6).contains(&v.abs()) {
        format!("{v:.4}")
    } else {
        format!("{v:.4e}")
    }
}

/// Per fitted model, by name.
type ByModel<T> = BTreeMap<String, T>;

/// Each fitted model's draws of Z back in the data's units, with their quantiles: (quantiles,
/// sorted draws, draws as drawn).
fn latent_laws(
    fitted: &ByModel<Vec<f64>>,
    center: f64,
    noise_sd: f64,
) -> (ByModel<Quantiles>, ByModel<Vec<f64>>, ByModel<Vec<f64>>) {
    let mut quantiles = BTreeMap::new();
    let mut samples = BTreeMap::new();
    let mut draws = BTreeMap::new();
    for (k, v) in fitted {
        let d: Vec<f64> = v.iter().map(|t| center + t * noise_sd).collect();
        let mut z = d.clone();
        z.sort_by(f64::total_cmp);
        let q = QUANTILE_PROBS
            .iter()
            .map(|p| z[((p * z.len() as f64) as usize).min(z.len() - 1)])
            .collect();
        quantiles.insert(
            k.clone(),
            Quantiles {
                p: QUANTILE_PROBS.to_vec(),
                q,
            },
        );
        samples.insert(k.clone(), z);
        draws.insert(k.clone(), d);
    }
    (quantiles, samples, draws)
}

/// The observations in two parts, `n_test` held out, drawn without replacement from `seed`; each
/// part keeps the data's order.
fn split(x: &[f64], n_test: usize, seed: u64) -> (Vec<f64>, Vec<f64>) {
    let mut order: Vec<usize> = (0..x.len()).collect();
    let mut rng = ChainRng::new(seed, 0);
    for i in 0..n_test {
        let j = i + ((rng.uniform() * (x.len() - i) as f64) as usize).min(x.len() - i - 1);
        order.swap(i, j);
    }
    let mut held = vec![false; x.len()];
    order[..n_test].iter().for_each(|&i| held[i] = true);
    let (mut train, mut test) = (Vec::new(), Vec::new());
    for (v, h) in x.iter().zip(held) {
        if h {
            test.push(*v);
        } else {
            train.push(*v);
        }
    }
    (train, test)
}
