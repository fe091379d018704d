//! Numerical integration over a one-dimensional latent variable: Gauss-Hermite rules centred and
//! scaled on each data point's posterior (by a Laplace fit), the marginal log-likelihood
//! ℓ(θ) = Σ_i log ∫ p(x_i, z; θ) dz, its gradient by Fisher's identity, and a trapezoid rule on a
//! wide grid as an independent reference.
//!
//! For the smooth, unimodal, Gaussian-tailed posteriors of the EM example a centred rule of 64 nodes
//! agrees with a 28001-point trapezoid rule to about 1e-12 (tested).

use crate::error::{Result, SagdError};
use crate::model::LatentModel;

/// The Gauss-Hermite rule ∫ f(t) e^{−t²} dt ≈ Σ_j w_j f(t_j), exact for polynomials of degree < 2n.
#[derive(Clone, Debug, PartialEq)]
pub struct GaussHermite {
    /// Nodes t_j, ascending.
    pub nodes: Vec<f64>,
    /// Weights w_j.
    pub weights: Vec<f64>,
}

impl GaussHermite {
    /// The n-node rule (n ≥ 1), by Newton's method on the orthonormal Hermite recurrence.
    pub fn new(n: usize) -> Self {
        let n = n.max(1);
        let mut nodes = vec![0.0; n];
        let mut weights = vec![0.0; n];
        let pi_m4 = std::f64::consts::PI.powf(-0.25);
        let nf = n as f64;
        // Orthonormal h_n(z) and h_n'(z) = √(2n) h_{n−1}(z).
        let eval = |z: f64| -> (f64, f64) {
            let (mut p1, mut p2) = (pi_m4, 0.0);
            for j in 1..=n {
                let jf = j as f64;
                let p3 = p2;
                p2 = p1;
                p1 = z * (2.0 / jf).sqrt() * p2 - ((jf - 1.0) / jf).sqrt() * p3;
            }
            (p1, (2.0 * nf).sqrt() * p2)
        };
        let half = n.div_ceil(2);
        let mut found: Vec<f64> = Vec::with_capacity(half);
        for i in 0..half {
            // Starting points for the largest roots first (asymptotic estimates), then extrapolation.
            let mut z = match i {
                0 => (2.0 * nf + 1.0).sqrt() - 1.85575 * (2.0 * nf + 1.0).powf(-1.0 / 6.0),
                1 => found[0] - 1.14 * nf.powf(0.426) / found[0],
                2 => 1.86 * found[1] - 0.86 * found[0],
                3 => 1.91 * found[2] - 0.91 * found[1],
                _ => 2.0 * found[i - 1] - found[i - 2],
            };
            let mut dp = 1.0;
            for _ in 0..100 {
                let (p, d) = eval(z);
                dp = d;
                let step = p / d;
                z -= step;
                if step.abs() <= 1e-15 * z.abs().max(1.0) {
                    break;
                }
            }
            let (_, d) = eval(z);
            dp = if d.is_finite() { d } else { dp };
            found.push(z);
            nodes[n - 1 - i] = z;
            nodes[i] = -z;
            weights[i] = 2.0 / (dp * dp);
            weights[n - 1 - i] = weights[i];
        }
        if n % 2 == 1 {
            nodes[n / 2] = 0.0;
        }
        GaussHermite { nodes, weights }
    }
}

/// Per-data-point quadrature of a posterior p(z | x_i; θ) ∝ p(x_i, z; θ), z one-dimensional.
#[derive(Clone, Debug, PartialEq)]
#[doc(hidden)]
pub struct PosteriorRule {
    /// Nodes, row-major: data point i has nodes `[i*m, (i+1)*m)`.
    pub nodes: Vec<f64>,
    /// Normalised posterior weights at the nodes (each data point's sum to 1).
    pub weights: Vec<f64>,
    /// log ∫ p(x_i, z; θ) dz per data point.
    pub log_marginal: Vec<f64>,
    /// Nodes per data point.
    pub m: usize,
}

impl PosteriorRule {
    /// ℓ(θ) = Σ_i log ∫ p(x_i, z; θ) dz.
    pub fn log_likelihood(&self) -> f64 {
        self.log_marginal.iter().sum()
    }

    /// The data index of every node (for a model's batched calls).
    pub fn data_index(&self) -> Vec<usize> {
        (0..self.nodes.len()).map(|r| r / self.m).collect()
    }
}

fn log_sum_exp(v: &[f64]) -> f64 {
    let m = v.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
    if !m.is_finite() {
        return m;
    }
    m + v.iter().map(|x| (x - m).exp()).sum::<f64>().ln()
}

fn check_1d<M: LatentModel<f64>>(model: &M) -> Result<()> {
    if model.latent_dim() == 1 {
        Ok(())
    } else {
        Err(SagdError::InvalidSetting {
            name: "latent_dim",
            value: model.latent_dim().to_string(),
            fix: "quadrature integrates one-dimensional latents only; use SAGD for the others"
                .into(),
        })
    }
}

fn model_err(e: crate::error::LogpError) -> SagdError {
    SagdError::Model(e)
}

/// Mode and Laplace scale of each posterior: Newton's method on ∂z log p with a finite-difference
/// second derivative, falling back to the mean and sd on a coarse grid where Newton does not settle.
fn centres<M: LatentModel<f64>>(model: &M, theta: &[f64]) -> Result<(Vec<f64>, Vec<f64>)> {
    let n = model.n_data();
    let data: Vec<usize> = (0..n).collect();
    let mut z = vec![0.0; n];
    let mut lp = vec![0.0; n];
    let mut g = vec![0.0; n];
    let (mut gp, mut gm, mut zp, mut zm) = (vec![0.0; n], vec![0.0; n], vec![0.0; n], vec![0.0; n]);
    let h = 1e-5;
    let mut curv = vec![0.0; n];
    let mut done = vec![false; n];
    for _ in 0..60 {
        model
            .log_joint(theta, &data, &z, &mut lp, &mut g)
            .map_err(model_err)?;
        for i in 0..n {
            zp[i] = z[i] + h;
            zm[i] = z[i] - h;
        }
        model
            .log_joint(theta, &data, &zp, &mut lp, &mut gp)
            .map_err(model_err)?;
        model
            .log_joint(theta, &data, &zm, &mut lp, &mut gm)
            .map_err(model_err)?;
        let mut all = true;
        for i in 0..n {
            let c = (gp[i] - gm[i]) / (2.0 * h);
            curv[i] = c;
            if done[i] {
                continue;
            }
            let step = if c < 0.0 && c.is_finite() {
                -g[i] / c
            } else {
                g[i].signum() * 0.5
            };
            let step = step.clamp(-2.0, 2.0);
            z[i] += step;
            if step.abs() < 1e-10 {
                done[i] = true;
            } else {
                all = false;
            }
        }
        if all {
            break;
        }
    }
    let mut sd: Vec<f64> = curv.iter().map(|c| (-1.0 / c).sqrt()).collect();
    let bad: Vec<usize> = (0..n)
        .filter(|&i| !done[i] || !sd[i].is_finite() || !z[i].is_finite())
        .collect();
    if !bad.is_empty() {
        let grid: Vec<f64> = (0..=2400).map(|k| -12.0 + 0.01 * k as f64).collect();
        for &i in &bad {
            let rows = vec![i; grid.len()];
            let mut lpg = vec![0.0; grid.len()];
            let mut gg = vec![0.0; grid.len()];
            model
                .log_joint(theta, &rows, &grid, &mut lpg, &mut gg)
                .map_err(model_err)?;
            let lse = log_sum_exp(&lpg);
            let w: Vec<f64> = lpg.iter().map(|v| (v - lse).exp()).collect();
            let m: f64 = w.iter().zip(&grid).map(|(w, z)| w * z).sum();
            let v: f64 = w.iter().zip(&grid).map(|(w, z)| w * (z - m).powi(2)).sum();
            z[i] = m;
            sd[i] = v.sqrt().max(1e-3);
        }
    }
    Ok((z, sd))
}

/// The posterior-centred Gauss-Hermite rule of every data point at θ: nodes z_ij = μ_i + √2 σ_i t_j
/// with μ_i, σ_i the Laplace fit of p(z | x_i; θ).
#[doc(hidden)]
pub fn posterior_rule<M: LatentModel<f64>>(
    model: &M,
    theta: &[f64],
    gh: &GaussHermite,
) -> Result<PosteriorRule> {
    check_1d(model)?;
    let (mu, sd) = centres(model, theta)?;
    let n = model.n_data();
    let m = gh.nodes.len();
    let mut nodes = vec![0.0; n * m];
    let mut logw = vec![0.0; n * m];
    for i in 0..n {
        let sc = std::f64::consts::SQRT_2 * sd[i];
        for j in 0..m {
            let t = gh.nodes[j];
            nodes[i * m + j] = mu[i] + sc * t;
            logw[i * m + j] = sc.ln() + gh.weights[j].ln() + t * t;
        }
    }
    let data: Vec<usize> = (0..n * m).map(|r| r / m).collect();
    let mut lp = vec![0.0; n * m];
    let mut g = vec![0.0; n * m];
    model
        .log_joint(theta, &data, &nodes, &mut lp, &mut g)
        .map_err(model_err)?;
    let mut weights = vec![0.0; n * m];
    let mut log_marginal = vec![0.0; n];
    for i in 0..n {
        let row: Vec<f64> = (0..m).map(|j| logw[i * m + j] + lp[i * m + j]).collect();
        let lse = log_sum_exp(&row);
        log_marginal[i] = lse;
        for j in 0..m {
            weights[i * m + j] = (row[j] - lse).exp();
        }
    }
    Ok(PosteriorRule {
        nodes,
        weights,
        log_marginal,
        m,
    })
}

/// ℓ(θ) by the posterior-centred rule.
pub fn log_likelihood<M: LatentModel<f64>>(
    model: &M,
    theta: &[f64],
    gh: &GaussHermite,
) -> Result<f64> {
    Ok(posterior_rule(model, theta, gh)?.log_likelihood())
}

/// (1/scale) Σ_i E_{rule}[∇θ log p(x_i, z; θ)]: with the rule taken at θ this is ∇ℓ(θ)/scale (Fisher's
/// identity); with a rule taken at θ_k it is ∇Q(θ; θ_k)/scale, the gradient of EM's M-step.
#[doc(hidden)]
pub fn expected_grad<M: LatentModel<f64>>(
    model: &M,
    theta: &[f64],
    rule: &PosteriorRule,
    scale: f64,
) -> Result<Vec<f64>> {
    let mut g = vec![0.0; model.theta_dim()];
    let w: Vec<f64> = rule.weights.iter().map(|w| w / scale).collect();
    model
        .add_weighted_grad_theta(theta, &rule.data_index(), &rule.nodes, &w, &mut g)
        .map_err(model_err)?;
    Ok(g)
}

/// ℓ(θ) by the trapezoid rule with `points` points on [lo, hi]: slow, independent of the centring,
/// and spectrally accurate for analytic integrands with Gaussian tails. The reference in tests.
#[doc(hidden)]
pub fn log_likelihood_trapezoid<M: LatentModel<f64>>(
    model: &M,
    theta: &[f64],
    lo: f64,
    hi: f64,
    points: usize,
) -> Result<f64> {
    check_1d(model)?;
    let h = (hi - lo) / (points - 1) as f64;
    let grid: Vec<f64> = (0..points).map(|k| lo + h * k as f64).collect();
    let mut total = 0.0;
    for i in 0..model.n_data() {
        let rows = vec![i; points];
        let mut lp = vec![0.0; points];
        let mut g = vec![0.0; points];
        model
            .log_joint(theta, &rows, &grid, &mut lp, &mut g)
            .map_err(model_err)?;
        lp[0] -= std::f64::consts::LN_2;
        lp[points - 1] -= std::f64::consts::LN_2;
        total += log_sum_exp(&lp) + h.ln();
    }
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gauss_hermite_integrates_polynomials_exactly() {
        let sqrt_pi = std::f64::consts::PI.sqrt();
        for n in [1usize, 2, 5, 20, 64, 150] {
            let gh = GaussHermite::new(n);
            // ∫ t^{2k} e^{−t²} dt = Γ(k + 1/2) = √π (2k−1)!!/2^k, exact for 2k ≤ 2n − 1.
            let mut moment = sqrt_pi;
            for k in 0..n.min(12) {
                let q: f64 = gh
                    .nodes
                    .iter()
                    .zip(&gh.weights)
                    .map(|(t, w)| w * t.powi(2 * k as i32))
                    .sum();
                assert!(
                    (q / moment - 1.0).abs() < 1e-12,
                    "n = {n}, k = {k}: {q} vs {moment}"
                );
                let odd: f64 = gh
                    .nodes
                    .iter()
                    .zip(&gh.weights)
                    .map(|(t, w)| w * t.powi(2 * k as i32 + 1))
                    .sum();
                assert!(odd.abs() < 1e-12 * moment.max(1.0), "odd moment {odd}");
                moment *= (2 * k + 1) as f64 / 2.0;
            }
        }
        // The 2-node rule: ±1/√2 with weights √π/2.
        let gh = GaussHermite::new(2);
        assert!((gh.nodes[1] - 0.5f64.sqrt()).abs() < 1e-15);
        assert!((gh.weights[0] - sqrt_pi / 2.0).abs() < 1e-15);
    }
}
