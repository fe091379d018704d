//! Convergence diagnostics over chains: rank-normalised split R-hat and effective sample sizes
//! (Vehtari, Gelman, Simpson, Carpenter and Bürkner 2021, as in Stan and ArviZ), and summaries of
//! the kernels' step information.
//!
//! Draws are given per chain: `draws[m][i]` is the i-th draw of chain m (a scalar quantity).

use statrs::distribution::{ContinuousCDF, Normal};

use crate::langevin::StepInfo;

/// Splits each chain into halves (dropping the middle draw of odd lengths).
fn split(draws: &[Vec<f64>]) -> Vec<Vec<f64>> {
    let mut out = Vec::with_capacity(2 * draws.len());
    for c in draws {
        let h = c.len() / 2;
        out.push(c[..h].to_vec());
        out.push(c[c.len() - h..].to_vec());
    }
    out
}

/// Replaces every draw by the normal score of its pooled rank (ties share their average rank).
fn rank_normalise(chains: &[Vec<f64>]) -> Vec<Vec<f64>> {
    let mut all: Vec<(f64, usize, usize)> = Vec::new();
    for (m, c) in chains.iter().enumerate() {
        for (i, v) in c.iter().enumerate() {
            all.push((*v, m, i));
        }
    }
    // Equal draws share one score whatever their order, so the sort need not be stable.
    all.sort_unstable_by(|a, b| a.0.total_cmp(&b.0));
    let s = all.len() as f64;
    let normal = Normal::standard();
    let mut out: Vec<Vec<f64>> = chains.iter().map(|c| vec![0.0; c.len()]).collect();
    let mut i = 0;
    while i < all.len() {
        let mut j = i;
        while j + 1 < all.len() && all[j + 1].0 == all[i].0 {
            j += 1;
        }
        let rank = (i + j) as f64 / 2.0 + 1.0;
        let z = normal.inverse_cdf((rank - 0.375) / (s + 0.25));
        for a in &all[i..=j] {
            out[a.1][a.2] = z;
        }
        i = j + 1;
    }
    out
}

/// The mean and the sample standard deviation (n − 1 in the denominator; 0 for fewer than two
/// values). The workspace's tables share it; it is no part of the method's API.
#[doc(hidden)]
pub fn mean_sd(v: &[f64]) -> (f64, f64) {
    let n = v.len() as f64;
    let m = v.iter().sum::<f64>() / n;
    let var = if v.len() > 1 {
        v.iter().map(|x| (x - m).powi(2)).sum::<f64>() / (n - 1.0)
    } else {
        0.0
    };
    (m, var.sqrt())
}

fn mean(x: &[f64]) -> f64 {
    x.iter().sum::<f64>() / x.len() as f64
}

/// (W, var⁺): mean within-chain variance and the pooled variance estimate.
fn variances(chains: &[Vec<f64>]) -> (f64, f64) {
    let m = chains.len() as f64;
    let n = chains[0].len() as f64;
    let means: Vec<f64> = chains.iter().map(|c| mean(c)).collect();
    let grand = mean(&means);
    let b = n / (m - 1.0) * means.iter().map(|x| (x - grand).powi(2)).sum::<f64>();
    let w = chains
        .iter()
        .zip(&means)
        .map(|(c, mu)| c.iter().map(|x| (x - mu).powi(2)).sum::<f64>() / (n - 1.0))
        .sum::<f64>()
        / m;
    (w, (n - 1.0) / n * w + b / n)
}

fn rhat_of(chains: &[Vec<f64>]) -> f64 {
    let (w, var_plus) = variances(chains);
    (var_plus / w).sqrt()
}

/// Effective sample size of chains already prepared (split, possibly normalised), by Geyer's
/// initial monotone sequence over the multi-chain autocorrelation.
fn ess_of(chains: &[Vec<f64>]) -> f64 {
    let m = chains.len();
    let n = chains[0].len();
    let (_, var_plus) = variances(chains);
    if var_plus.is_nan() || var_plus <= 0.0 {
        return f64::NAN;
    }
    let means: Vec<f64> = chains.iter().map(|c| mean(c)).collect();
    let w_biased: f64 = chains
        .iter()
        .zip(&means)
        .map(|(c, mu)| c.iter().map(|x| (x - mu).powi(2)).sum::<f64>() / n as f64)
        .sum::<f64>()
        / m as f64;
    let rho = |t: usize| -> f64 {
        let acov: f64 = chains
            .iter()
            .zip(&means)
            .map(|(c, mu)| {
                (0..n - t)
                    .map(|i| (c[i] - mu) * (c[i + t] - mu))
                    .sum::<f64>()
                    / n as f64
            })
            .sum::<f64>()
            / m as f64;
        1.0 - (w_biased - acov) / var_plus
    };
    let mut sum = 0.0;
    let mut prev_pair = f64::INFINITY;
    let mut t = 0;
    while t + 1 < n {
        let pair = rho(t) + rho(t + 1);
        if pair < 0.0 {
            break;
        }
        let pair = pair.min(prev_pair);
        sum += pair;
        prev_pair = pair;
        t += 2;
    }
    let tau = (-1.0 + 2.0 * sum).max(1.0 / ((m * n) as f64).log10().max(1.0));
    (m * n) as f64 / tau
}

fn usable(draws: &[Vec<f64>]) -> bool {
    !draws.is_empty()
        && draws
            .iter()
            .all(|c| c.len() >= 4 && c.len() == draws[0].len())
}

/// Rank-normalised split R-hat: the larger of the bulk and the folded (tail) versions. Values
/// above 1.01 say the chains have not mixed. NaN for fewer than 4 draws a chain or unequal lengths.
pub fn rhat(draws: &[Vec<f64>]) -> f64 {
    if !usable(draws) {
        return f64::NAN;
    }
    let s = split(draws);
    let bulk = rhat_of(&rank_normalise(&s));
    let all: Vec<f64> = s.iter().flatten().copied().collect();
    let med = median(&all);
    let folded: Vec<Vec<f64>> = s
        .iter()
        .map(|c| c.iter().map(|x| (x - med).abs()).collect())
        .collect();
    bulk.max(rhat_of(&rank_normalise(&folded)))
}

/// Bulk effective sample size: ESS of the rank-normalised split chains.
pub fn ess_bulk(draws: &[Vec<f64>]) -> f64 {
    if !usable(draws) {
        return f64::NAN;
    }
    ess_of(&rank_normalise(&split(draws)))
}

/// Effective sample size for the mean of the raw draws (split chains, not rank-normalised).
pub fn ess_mean(draws: &[Vec<f64>]) -> f64 {
    if !usable(draws) {
        return f64::NAN;
    }
    ess_of(&split(draws))
}

fn median(x: &[f64]) -> f64 {
    let mut v = x.to_vec();
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        0.5 * (v[n / 2 - 1] + v[n / 2])
    }
}

/// Totals and means over many steps of a kernel.
#[derive(Clone, Copy, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct StepSummary {
    /// Steps summarised.
    pub steps: usize,
    /// Divergent chain-steps in all.
    pub divergences: usize,
    /// Mean kinetic temperature.
    pub kinetic_temperature: f64,
    /// Mean acceptance probability (HMC).
    pub acceptance: Option<f64>,
    /// Mean energy change (HMC).
    pub energy_change: Option<f64>,
}

impl StepSummary {
    /// Summarises a sequence of step infos.
    pub fn of(infos: &[StepInfo]) -> Self {
        let n = infos.len().max(1) as f64;
        let avg = |f: &dyn Fn(&StepInfo) -> Option<f64>| -> Option<f64> {
            let v: Vec<f64> = infos.iter().filter_map(f).collect();
            (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
        };
        StepSummary {
            steps: infos.len(),
            divergences: infos.iter().map(|i| i.divergences).sum(),
            kinetic_temperature: infos.iter().map(|i| i.kinetic_temperature).sum::<f64>() / n,
            acceptance: avg(&|i| i.acceptance),
            energy_change: avg(&|i| i.energy_change),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::NormalStream;

    fn ar1(chains: usize, n: usize, phi: f64, seed: u64, shift: f64) -> Vec<Vec<f64>> {
        (0..chains)
            .map(|c| {
                let mut s = NormalStream::new(seed + c as u64);
                let mut x = 0.0;
                (0..n)
                    .map(|_| {
                        x = phi * x + (1.0 - phi * phi).sqrt() * s.draw();
                        x + if c == 0 { shift } else { 0.0 }
                    })
                    .collect()
            })
            .collect()
    }

    #[test]
    fn ess_of_independent_draws_is_near_n() {
        let d = ar1(4, 1000, 0.0, 1, 0.0);
        let e = ess_bulk(&d);
        // ESS of 4000 iid draws: the estimator's own spread is a few percent.
        assert!((e - 4000.0).abs() < 400.0, "ess {e}");
        assert!((rhat(&d) - 1.0).abs() < 0.01);
    }

    #[test]
    fn ess_of_ar1_matches_its_autocorrelation_time() {
        // AR(1) with φ = 0.9: τ = (1 + φ)/(1 − φ) = 19, so ESS ≈ 4 × 5000 / 19 ≈ 1053.
        let d = ar1(4, 5000, 0.9, 3, 0.0);
        let e = ess_mean(&d);
        assert!((e / 1053.0 - 1.0).abs() < 0.25, "ess {e}");
    }

    #[test]
    fn rhat_flags_a_shifted_chain() {
        let d = ar1(4, 1000, 0.5, 5, 1.0);
        assert!(rhat(&d) > 1.05, "rhat {}", rhat(&d));
        assert!(rhat(&[vec![1.0, 2.0]]).is_nan());
    }
}
