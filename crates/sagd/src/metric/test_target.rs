//! A Gaussian target for the tests of the metric and of what is built on it.

use crate::error::LogpError;
use crate::model::Problem;

/// μ(θ) and P(θ) (row-major).
pub(crate) type Parts = Box<dyn Fn(&[f64]) -> (Vec<f64>, Vec<f64>) + Sync>;

/// Chains on N(μ(θ), P(θ)⁻¹) of dimension `d`, one per point, θ of length `p`.
pub(crate) struct GaussianTarget {
    pub(crate) d: usize,
    pub(crate) p: usize,
    pub(crate) parts: Parts,
}

/// A tridiagonal positive-definite matrix: 2.5 on the diagonal, −1 beside it.
pub(crate) fn tridiagonal(d: usize) -> Vec<f64> {
    let mut a = vec![0.0; d * d];
    for i in 0..d {
        a[i * d + i] = 2.5;
        if i > 0 {
            a[i * d + i - 1] = -1.0;
            a[(i - 1) * d + i] = -1.0;
        }
    }
    a
}

impl GaussianTarget {
    /// N(`mean`, `precision`⁻¹), with no parameter.
    pub(crate) fn fixed(mean: Vec<f64>, precision: Vec<f64>) -> Self {
        GaussianTarget {
            d: mean.len(),
            p: 0,
            parts: Box::new(move |_: &[f64]| (mean.clone(), precision.clone())),
        }
    }

    /// log p (up to its normalising constant) and ∇z log p at `z` under θ = `th`.
    pub(crate) fn log_p(&self, th: &[f64], z: &[f64]) -> (f64, Vec<f64>) {
        let (d, (mean, precision)) = (self.d, (self.parts)(th));
        let e: Vec<f64> = z.iter().zip(&mean).map(|(a, m)| a - m).collect();
        let pe: Vec<f64> = (0..d)
            .map(|i| (0..d).map(|j| precision[i * d + j] * e[j]).sum())
            .collect();
        let quad: f64 = e.iter().zip(&pe).map(|(x, y)| x * y).sum();
        (-0.5 * quad, pe.iter().map(|v| -v).collect())
    }
}

impl Problem<f64> for GaussianTarget {
    fn theta_dim(&self) -> usize {
        self.p
    }
    fn n_chains(&self) -> usize {
        1
    }
    fn chain_dim(&self) -> usize {
        self.d
    }
    fn log_target(
        &self,
        anchor: &[f64],
        _first_row: usize,
        xi: &[f64],
        logp: &mut [f64],
        grad: &mut [f64],
    ) -> std::result::Result<(), LogpError> {
        let d = self.d;
        for (r, (x, gr)) in xi.chunks_exact(d).zip(grad.chunks_exact_mut(d)).enumerate() {
            let (l, g) = self.log_p(anchor, x);
            logp[r] = l;
            gr.copy_from_slice(&g);
        }
        Ok(())
    }
    fn add_grad_f(
        &self,
        _theta: &[f64],
        _first_row: usize,
        _xi: &[f64],
        _grad: &mut [f64],
    ) -> std::result::Result<(), LogpError> {
        Ok(())
    }
}
