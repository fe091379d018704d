//! Data and evaluation of E2: simulated observations X = Z + N(0, I), draws of Z = h(U), and the
//! distances D and W of the fitted latent distribution to π.

use rand_distr::{Distribution, StandardNormal};
use rayon::prelude::*;
use sagd::metrics::{ks_w1, Law};
use sagd::parallel::piece_rows;
use sagd::rng::{NormalStream, Seed};
use serde::{Deserialize, Serialize};

use sagd_nn::vae::Vae;
use sagd_nn::Workspace;

/// The density at `x` of X = Z + N(0, sd²) when Z is the discrete law `atoms` ((value, mass)
/// pairs): Σ m φ((x − z)/sd)/sd. A law with a density enters as the cells of a quadrature.
pub(crate) fn noisy_density(x: f64, atoms: &[(f64, f64)], sd: f64) -> f64 {
    let sum: f64 = atoms
        .iter()
        .map(|(z, m)| m * (-0.5 * ((x - z) / sd).powi(2)).exp())
        .sum();
    sum / (sd * (2.0 * std::f64::consts::PI).sqrt())
}

/// How well Z = h(U) matches π.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Evaluation {
    /// Kolmogorov-Smirnov distance (mean over coordinates).
    #[serde(rename = "D")]
    pub ks: f64,
    /// 1-Wasserstein distance (mean over coordinates).
    #[serde(rename = "W")]
    pub w1: f64,
    /// Standard error of D over coordinates (p > 1).
    #[serde(
        rename = "D_se_coord",
        skip_serializing_if = "Option::is_none",
        default
    )]
    pub ks_se: Option<f64>,
    /// Standard error of W over coordinates (p > 1).
    #[serde(
        rename = "W_se_coord",
        skip_serializing_if = "Option::is_none",
        default
    )]
    pub w1_se: Option<f64>,
    /// Mean log-likelihood of the data under the fitted model (1-D, trapezoid rule in u).
    pub loglik: Option<f64>,
    /// Mean of Z.
    pub z_mean: f64,
    /// Standard deviation of Z.
    pub z_sd: f64,
    /// Non-finite draws.
    pub nonfinite: usize,
}

/// The seeds of a replication's parts, derived from its seed.
#[deprecated(note = "a replication's parts take named streams: sagd::rng::Seed::stream")]
pub fn part_seed(seed: u64, part: u64) -> u64 {
    sagd::rng::stream_seed(seed, part)
}

/// n draws of Z with p independent coordinates from π, and X = Z + N(0, I) (row-major n × p).
pub fn simulate(law: &Law, n: usize, p: usize, seed: u64) -> (Vec<f64>, Vec<f64>) {
    let mut rng = Seed::new(seed).stream("data").rng();
    let z: Vec<f64> = (0..n * p).map(|_| law.sample(&mut rng)).collect();
    let x = z
        .iter()
        .map(|zi| {
            let e: f64 = StandardNormal.sample(&mut rng);
            zi + e
        })
        .collect();
    (z, x)
}

/// Mean log p(x_i; θ) = log ∫ N(x_i; h(u), 1) φ(u) du, trapezoid rule on [−9, 9] (1-D).
pub fn log_likelihood_1d(vae: &Vae, dec: &[f32], x: &[f64]) -> f64 {
    let per_point = log_likelihood_points_1d(vae, dec, x);
    let total: f64 = per_point.iter().sum();
    total / x.len() as f64
}

/// log p(x_i; θ) of every observation (1-D), as [`log_likelihood_1d`] computes it.
pub fn log_likelihood_points_1d(vae: &Vae, dec: &[f32], x: &[f64]) -> Vec<f64> {
    let g = 8001;
    let step = 18.0 / (g - 1) as f64;
    let u: Vec<f32> = (0..g).map(|k| (-9.0 + step * k as f64) as f32).collect();
    let mut ws = Workspace::default();
    vae.dec.forward(dec, &u, g, &mut ws);
    let h = ws.output();
    let half_ln_2pi = 0.5 * (2.0 * std::f64::consts::PI).ln();
    let lw: Vec<f64> = (0..g)
        .map(|k| {
            let uk = u[k] as f64;
            let end = if k == 0 || k == g - 1 {
                std::f64::consts::LN_2
            } else {
                0.0
            };
            step.ln() - end - 0.5 * uk * uk - half_ln_2pi
        })
        .collect();
    // One log-sum-exp per data point, in parallel.
    x.par_iter()
        .map_init(
            || vec![0.0f64; g],
            |terms, xi| {
                for k in 0..g {
                    let r = xi - h[k] as f64;
                    terms[k] = lw[k] - 0.5 * r * r - half_ln_2pi;
                }
                let m = terms.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                m + terms.iter().map(|t| (t - m).exp()).sum::<f64>().ln()
            },
        )
        .collect()
}

/// Z = h(U) for m draws U ~ N(0, I) from `seed` (row-major m × p).
pub fn generate(vae: &Vae, dec: &[f32], m: usize, seed: u64) -> Vec<f64> {
    let d = vae.d;
    let mut s = NormalStream::new(seed);
    let mut u = vec![0.0f32; m * d];
    s.fill(&mut u);
    // Pieces of rows through the decoder in parallel: a row's value does not depend on its piece.
    let mut out = vec![0.0f64; m * d];
    let rows = piece_rows(m, 256, 2048);
    u.par_chunks(rows * d)
        .zip(out.par_chunks_mut(rows * d))
        .for_each_init(Workspace::default, |ws, (ui, oi)| {
            vae.dec.forward(dec, ui, ui.len() / d, ws);
            oi.iter_mut()
                .zip(ws.output())
                .for_each(|(o, v)| *o = *v as f64);
        });
    out
}

/// Mean and population standard deviation (of the m draws of Z).
fn mean_pop_sd(v: &[f64]) -> (f64, f64) {
    let n = v.len().max(1) as f64;
    let m = v.iter().sum::<f64>() / n;
    (
        m,
        (v.iter().map(|x| (x - m).powi(2)).sum::<f64>() / n).sqrt(),
    )
}

/// D and W of the fitted decoder against π (per coordinate, averaged), the mean log-likelihood
/// (p = 1), and the draws.
pub fn evaluate(
    vae: &Vae,
    dec: &[f32],
    law: &Law,
    x: &[f64],
    m: usize,
    seed: u64,
) -> (Evaluation, Vec<f64>) {
    let d = vae.d;
    let z = generate(vae, dec, m, seed);
    let per: Vec<(f64, f64)> = (0..d)
        .into_par_iter()
        .map(|j| {
            let col: Vec<f64> = z.iter().skip(j).step_by(d).copied().collect();
            ks_w1(&col, law)
        })
        .collect();
    let ds: Vec<f64> = per.iter().map(|p| p.0).collect();
    let ws: Vec<f64> = per.iter().map(|p| p.1).collect();
    // Standard error over coordinates (sample sd / √p).
    let se = |v: &[f64]| (d > 1).then(|| sagd::diagnostics::mean_sd(v).1 / (d as f64).sqrt());
    let finite: Vec<f64> = z.iter().cloned().filter(|v| v.is_finite()).collect();
    let (mean, sd) = mean_pop_sd(&finite);
    let e = Evaluation {
        ks: mean_pop_sd(&ds).0,
        w1: mean_pop_sd(&ws).0,
        ks_se: se(&ds),
        w1_se: se(&ws),
        loglik: (d == 1).then(|| log_likelihood_1d(vae, dec, x)),
        z_mean: mean,
        z_sd: sd,
        nonfinite: z.len() - finite.len(),
    };
    (e, z)
}
