//! The numbers behind Figure 2: on a common grid, the density of the data, the true π (when
//! known), and a histogram of each fitted model's draws of Z; and behind a deconvolution's
//! predictive check: the observations' histogram and the density of X that each fitted model
//! implies. Drawing them is the caller's job.

use sagd::metrics::Law;

use super::eval::noisy_density;
use serde::{Deserialize, Serialize};

/// Grid points of the density curves.
const GRID: usize = 300;
/// Histogram bins.
const BINS: usize = 60;

/// Figure 2's series for one data set.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DensitySeries {
    /// The plotted range of z.
    pub lo: f64,
    /// The plotted range of z.
    pub hi: f64,
    /// Grid of the curves.
    pub grid: Vec<f64>,
    /// Density of the observations on the grid: π convolved with N(0, 1) when π is known, else a
    /// Gaussian kernel estimate (Silverman's bandwidth).
    pub data_density: Vec<f64>,
    /// π's density on the grid, when known.
    pub true_density: Option<Vec<f64>>,
    /// Width of the histogram bins, starting at `lo`.
    pub bin_width: f64,
    /// Per sample: the histogram as a density (non-finite draws count in the total only).
    pub histograms: Vec<Vec<f64>>,
}

fn quantile_sorted(v: &[f64], p: f64) -> f64 {
    v[((p * v.len() as f64) as usize).min(v.len() - 1)]
}

impl DensitySeries {
    /// The series for observations `x` (not empty), π if known, and the samples of Z.
    pub fn new(law: Option<&Law>, x: &[f64], samples: &[&[f64]]) -> Self {
        let mut xs = x.to_vec();
        xs.sort_by(f64::total_cmp);
        let (mut lo, mut hi) = (quantile_sorted(&xs, 0.002), quantile_sorted(&xs, 0.998));
        for s in samples {
            let mut z: Vec<f64> = s.iter().cloned().filter(|v| v.is_finite()).collect();
            z.sort_by(f64::total_cmp);
            if !z.is_empty() {
                lo = lo.min(quantile_sorted(&z, 0.001));
                hi = hi.max(quantile_sorted(&z, 0.999));
            }
        }
        let pad = 0.05 * (hi - lo).max(1e-6);
        let (lo, hi) = (lo - pad, hi + pad);
        let grid: Vec<f64> = (0..=GRID)
            .map(|k| lo + (hi - lo) * k as f64 / GRID as f64)
            .collect();
        let data_density = match law {
            Some(law) => convolved_density(law, &grid, lo, hi),
            None => kernel_density(&xs, &grid),
        };
        let bin_width = (hi - lo) / BINS as f64;
        let histograms = samples
            .iter()
            .map(|s| {
                let mut h = vec![0.0; BINS];
                for v in s.iter().filter(|v| v.is_finite()) {
                    let b = ((v - lo) / bin_width).floor();
                    if b >= 0.0 && (b as usize) < BINS {
                        h[b as usize] += 1.0;
                    }
                }
                h.iter()
                    .map(|c| c / (s.len().max(1) as f64 * bin_width))
                    .collect()
            })
            .collect();
        let true_density = law.map(|l| grid.iter().map(|g| l.pdf(*g)).collect());
        DensitySeries {
            lo,
            hi,
            grid,
            data_density,
            true_density,
            bin_width,
            histograms,
        }
    }

    /// The largest value of any series (for a common y axis).
    pub fn max_density(&self) -> f64 {
        self.histograms
            .iter()
            .flatten()
            .chain(&self.data_density)
            .chain(self.true_density.iter().flatten())
            .cloned()
            .fold(0.0f64, f64::max)
    }
}

/// Draws of Z per fitted model behind a predictive density: evenly spaced among the sorted
/// draws (their quantiles), enough for a curve that no eye tells from the full sample's.
const PREDICTIVE_DRAWS: usize = 4000;

/// A deconvolution's predictive check: the histogram of the observations and, per fitted
/// model, the density of X = Z + σ ε (ε ~ N(0, 1)) that its draws of Z imply, on one grid. A
/// model whose curve misses the histogram does not explain the data, whatever its π looks like.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PredictiveSeries {
    /// The plotted range of x: the observations' 0.2%-99.8% quantiles, widened by 5% and σ.
    pub lo: f64,
    /// The plotted range of x.
    pub hi: f64,
    /// Grid of the curves.
    pub grid: Vec<f64>,
    /// Width of the histogram's bins, starting at `lo`.
    pub bin_width: f64,
    /// The observations' histogram as a density (observations outside the range count in the
    /// total only).
    pub data_histogram: Vec<f64>,
    /// Per fitted model: (1/m) Σ_j φ((x − z_j)/σ)/σ on the grid, over the draws z_j.
    pub predictive: Vec<Vec<f64>>,
}

impl PredictiveSeries {
    /// The series for observations `x` (not empty) with noise standard deviation `noise_sd`,
    /// and each fitted model's draws of Z (sorted, as [`super::deconvolve::Deconvolution`]
    /// keeps them; non-finite draws are left out).
    pub fn new(x: &[f64], noise_sd: f64, samples: &[&[f64]]) -> Self {
        let mut xs = x.to_vec();
        xs.sort_by(f64::total_cmp);
        let (lo, hi) = (quantile_sorted(&xs, 0.002), quantile_sorted(&xs, 0.998));
        let pad = 0.05 * (hi - lo).max(1e-6) + noise_sd;
        let (lo, hi) = (lo - pad, hi + pad);
        let grid: Vec<f64> = (0..=GRID)
            .map(|k| lo + (hi - lo) * k as f64 / GRID as f64)
            .collect();
        let bin_width = (hi - lo) / BINS as f64;
        let mut data_histogram = vec![0.0; BINS];
        for v in &xs {
            let b = ((v - lo) / bin_width).floor();
            if b >= 0.0 && (b as usize) < BINS {
                data_histogram[b as usize] += 1.0 / (xs.len() as f64 * bin_width);
            }
        }
        let predictive = samples
            .iter()
            .map(|s| {
                let z: Vec<f64> = s.iter().cloned().filter(|v| v.is_finite()).collect();
                let step = z.len().div_ceil(PREDICTIVE_DRAWS).max(1);
                let z: Vec<f64> = z.iter().skip(step / 2).step_by(step).cloned().collect();
                let mass = 1.0 / z.len().max(1) as f64;
                let atoms: Vec<(f64, f64)> = z.iter().map(|zj| (*zj, mass)).collect();
                grid.iter()
                    .map(|g| noisy_density(*g, &atoms, noise_sd))
                    .collect()
            })
            .collect();
        PredictiveSeries {
            lo,
            hi,
            grid,
            bin_width,
            data_histogram,
            predictive,
        }
    }

    /// The largest value of any series (for a common y axis).
    pub fn max_density(&self) -> f64 {
        self.predictive
            .iter()
            .flatten()
            .chain(&self.data_histogram)
            .cloned()
            .filter(|v| v.is_finite())
            .fold(0.0f64, f64::max)
    }
}

/// The density of X = Z + N(0, 1) with Z ~ π on `grid`, by a Riemann sum over z.
fn convolved_density(law: &Law, grid: &[f64], lo: f64, hi: f64) -> Vec<f64> {
    let zs: Vec<f64> = (0..=4000)
        .map(|k| lo - 8.0 + (hi - lo + 16.0) * k as f64 / 4000.0)
        .collect();
    let dz = zs[1] - zs[0];
    let cells: Vec<(f64, f64)> = zs.iter().map(|z| (*z, law.pdf(*z) * dz)).collect();
    grid.iter()
        .map(|x| noisy_density(*x, &cells, 1.0))
        .collect()
}

/// A Gaussian kernel density estimate of sorted `xs` on `grid`.
fn kernel_density(xs: &[f64], grid: &[f64]) -> Vec<f64> {
    let n = xs.len() as f64;
    let mean = xs.iter().sum::<f64>() / n;
    let sd = (xs.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / n)
        .sqrt()
        .max(1e-9);
    let bw = 1.06 * sd * n.powf(-0.2);
    grid.iter()
        .map(|g| {
            xs.iter()
                .map(|x| (-0.5 * ((g - x) / bw).powi(2)).exp())
                .sum::<f64>()
                / (n * bw * (2.0 * std::f64::consts::PI).sqrt())
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn densities_integrate_to_one() {
        let law = Law::normal(1.0, 0.5);
        let x: Vec<f64> = (0..2000).map(|i| -3.0 + 8.0 * i as f64 / 1999.0).collect();
        let z: Vec<f64> = (0..4000).map(|i| 1.0 + (i as f64 / 3999.0 - 0.5)).collect();
        let s = DensitySeries::new(Some(&law), &x, &[&z]);
        let dx = s.grid[1] - s.grid[0];
        let area = |v: &[f64]| v.iter().sum::<f64>() * dx;
        // The plotted range holds nearly all of N(1, 1.25) and of π.
        assert!(
            (area(&s.data_density) - 1.0).abs() < 0.02,
            "{}",
            area(&s.data_density)
        );
        assert!((area(s.true_density.as_ref().unwrap()) - 1.0).abs() < 0.02);
        assert!((s.histograms[0].iter().sum::<f64>() * s.bin_width - 1.0).abs() < 1e-9);
        let kde = DensitySeries::new(None, &x, &[]);
        assert!((area(&kde.data_density) - 1.0).abs() < 0.05);
    }

    #[test]
    fn a_predictive_density_is_the_draws_convolved_with_the_noise() {
        // Two draws: the density is an equal mixture of N(−1, σ²) and N(2, σ²), exactly.
        let x: Vec<f64> = (0..1000).map(|i| -3.0 + 7.0 * i as f64 / 999.0).collect();
        let (sd, z) = (0.7, [-1.0, 2.0]);
        let s = PredictiveSeries::new(&x, sd, &[&z]);
        let phi = |v: f64| (-0.5 * v * v).exp() / (2.0 * std::f64::consts::PI).sqrt();
        for (g, p) in s.grid.iter().zip(&s.predictive[0]) {
            let want = 0.5 * (phi((g + 1.0) / sd) + phi((g - 2.0) / sd)) / sd;
            assert!((p - want).abs() < 1e-12, "{g}: {p} vs {want}");
        }
        // Uniform observations: a flat histogram at 1/7 inside their range, all of them counted.
        let dx = s.grid[1] - s.grid[0];
        assert!((s.predictive[0].iter().sum::<f64>() * dx - 1.0).abs() < 0.01);
        assert!((s.data_histogram.iter().sum::<f64>() * s.bin_width - 1.0).abs() < 1e-9);
        let inside: Vec<f64> = (0..BINS)
            .filter(|b| {
                let a = s.lo + *b as f64 * s.bin_width;
                a > -2.9 && a + s.bin_width < 3.9
            })
            .map(|b| s.data_histogram[b])
            .collect();
        assert!(
            inside.iter().all(|h| (h * 7.0 - 1.0).abs() < 0.15),
            "{inside:?}"
        );
        // Many draws are thinned to their quantiles: N(0, 1) draws give N(0, 1 + σ²).
        let z: Vec<f64> = (1..=40_000)
            .map(|i| Law::normal(0.0, 1.0).quantile(i as f64 / 40_001.0))
            .collect();
        let s = PredictiveSeries::new(&x, sd, &[&z]);
        let v = 1.0 + sd * sd;
        for (g, p) in s.grid.iter().zip(&s.predictive[0]) {
            let want = phi(g / v.sqrt()) / v.sqrt();
            assert!((p - want).abs() < 2e-3, "{g}: {p} vs {want}");
        }
    }
}
