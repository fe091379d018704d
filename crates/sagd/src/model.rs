//! What the algorithm needs to know about a model.
//!
//! * [`LogDensity`]: a batch of targets for the chains, one row per chain, with gradients written
//!   into caller buffers (no allocation per step).
//! * [`Problem`]: Algorithm 1's objective F(θ) = E_π f(θ; ξ): the chains' target (which may be
//!   anchored at a parameter, as in EM) and ∇θ f.
//! * [`LatentModel`]: the paper's applications: log p(x, z; θ) with ∇z (drives the sampler) and ∇θ
//!   (drives the update). [`MaximumLikelihood`] turns one into a [`Problem`].

use crate::error::LogpError;
use crate::real::{sum_map, Real};

mod check;
mod derived;
mod reverse;

pub use check::{check_gradients, GradientCheck, Worst};
pub use derived::{Derived, LogJoint, Scalar, REVERSE_FROM};
pub use reverse::Rev;

/// Log densities of a batch of chains, with gradients.
///
/// Row `r` of a batch (a slice of `dim()` values) is chain `first_row + r`. Chains may have different
/// targets (a latent-variable posterior has one per data point), but each row's value must depend
/// only on that row. A row whose value cannot be computed gets a non-finite log density: the sampler
/// turns it into a divergence of that chain and recovers it.
pub trait LogDensity<T: Real>: Sync {
    /// The dimension of one chain.
    fn dim(&self) -> usize;

    /// Writes log π(x_r) (up to a constant) into `logp[r]` and ∇ log π(x_r) into row `r` of `grad`.
    fn logp_grad(
        &self,
        first_row: usize,
        x: &[T],
        logp: &mut [T],
        grad: &mut [T],
    ) -> Result<(), LogpError>;

    /// The length of the output that [`LogDensity::logp_grad_aux`] computes beside the gradient
    /// (0: none).
    fn aux_len(&self) -> usize {
        0
    }

    /// [`LogDensity::logp_grad`], and adds what the same pass gives beside it into `aux` (of
    /// [`LogDensity::aux_len`] values; for a latent posterior: Σ_r ∇θ f at the rows). Kernels
    /// return it with the step that computed it, so that nothing leaves the target by a side door.
    fn logp_grad_aux(
        &self,
        first_row: usize,
        x: &[T],
        logp: &mut [T],
        grad: &mut [T],
        aux: &mut [T],
    ) -> Result<(), LogpError> {
        let _ = aux;
        self.logp_grad(first_row, x, logp, grad)
    }
}

/// The objective of Algorithm 1, F(θ) = E_{ξ~π}[f(θ; ξ)], minimised over θ.
///
/// `n_chains` chains of dimension `chain_dim` estimate the expectation; the gradient estimate is the
/// average of ∇θ f over chains and over the Langevin states of an update. The chains target
/// `log_target(anchor, ·)`, where the anchor is either the current θ or a fixed parameter (see
/// [`crate::solver::Anchor`]).
pub trait Problem<T: Real>: Sync {
    /// The number of parameters.
    fn theta_dim(&self) -> usize;
    /// The number of chains.
    fn n_chains(&self) -> usize;
    /// The dimension of one chain's state ξ.
    fn chain_dim(&self) -> usize;
    /// log π(ξ_r) and its gradient in ξ for the chains `first_row..`, with π taken at `anchor`.
    fn log_target(
        &self,
        anchor: &[T],
        first_row: usize,
        xi: &[T],
        logp: &mut [T],
        grad: &mut [T],
    ) -> Result<(), LogpError>;
    /// Adds Σ_r ∇θ f(θ; ξ_r) over the rows into `grad` (the solver averages).
    fn add_grad_f(
        &self,
        theta: &[T],
        first_row: usize,
        xi: &[T],
        grad: &mut [T],
    ) -> Result<(), LogpError>;

    /// Whether [`Problem::log_target_and_grad_f`] computes ∇θ f in the same pass as the target
    /// (cheaper than [`Problem::add_grad_f`] afterwards).
    fn fuses_grad_f(&self) -> bool {
        false
    }

    /// Whether a call costs much more than the rows it evaluates (a model in Python): passes that
    /// would cut the rows into parallel pieces then hand them all over in one call.
    fn calls_are_costly(&self) -> bool {
        false
    }

    /// [`Problem::add_grad_f`] over `copies` states of the same rows `first_row..`, stacked in
    /// `xi` (copies × rows × chain_dim): the states of K steps in one call. The default makes
    /// one call per copy.
    fn add_grad_f_copies(
        &self,
        theta: &[T],
        first_row: usize,
        copies: usize,
        xi: &[T],
        grad: &mut [T],
    ) -> Result<(), LogpError> {
        for x in xi.chunks(xi.len() / copies.max(1)) {
            self.add_grad_f(theta, first_row, x, grad)?;
        }
        Ok(())
    }

    /// [`Problem::log_target`] at `copies` states of the same rows `first_row..`, stacked in `xi`
    /// (copies × rows × chain_dim), `logp` and `grad` stacked alike: the shifted states of a
    /// Hessian's columns in one call. The default makes one call per copy.
    fn log_target_copies(
        &self,
        anchor: &[T],
        first_row: usize,
        copies: usize,
        xi: &[T],
        logp: &mut [T],
        grad: &mut [T],
    ) -> Result<(), LogpError> {
        let (per, rows) = (xi.len() / copies.max(1), logp.len() / copies.max(1));
        for ((x, l), g) in xi
            .chunks(per.max(1))
            .zip(logp.chunks_mut(rows.max(1)))
            .zip(grad.chunks_mut(per.max(1)))
        {
            self.log_target(anchor, first_row, x, l, g)?;
        }
        Ok(())
    }

    /// −∇²ξ log π of chain `row` at `xi` (one chain's state), π taken at `anchor`:
    /// chain_dim² values, row-major, where the problem has them in closed form. `None` (the
    /// default): the passes that need the curvature (the chains' metric, the score's control
    /// variate) take central differences of the gradient instead, 2 · chain_dim evaluations.
    fn neg_hessian(&self, anchor: &[T], row: usize, xi: &[T]) -> Option<Result<Vec<T>, LogpError>> {
        let _ = (anchor, row, xi);
        None
    }

    /// [`Problem::log_target`] with π taken at θ, and adds Σ_r ∇θ f(θ; ξ_r) at the same rows into
    /// `grad_f`. The default makes two calls.
    #[allow(clippy::too_many_arguments)]
    fn log_target_and_grad_f(
        &self,
        theta: &[T],
        first_row: usize,
        xi: &[T],
        logp: &mut [T],
        grad: &mut [T],
        grad_f: &mut [T],
    ) -> Result<(), LogpError> {
        self.log_target(theta, first_row, xi, logp, grad)?;
        self.add_grad_f(theta, first_row, xi, grad_f)
    }
}

/// A latent-variable model p(x, z; θ): data points x_i, latents z_i, parameters θ.
pub trait LatentModel<T: Real>: Sync {
    /// The number of data points.
    fn n_data(&self) -> usize;
    /// The dimension of one data point's latent z_i.
    fn latent_dim(&self) -> usize;
    /// The number of parameters.
    fn theta_dim(&self) -> usize;
    /// For each row r: log p(x_i, z_r; θ) with i = `data[r]`, into `logp[r]`, and ∇z into row r of
    /// `grad_z`.
    fn log_joint(
        &self,
        theta: &[T],
        data: &[usize],
        z: &[T],
        logp: &mut [T],
        grad_z: &mut [T],
    ) -> Result<(), LogpError>;
    /// Adds Σ_r ∇θ log p(x_i, z_r; θ), i = `data[r]`, into `grad_theta`.
    fn add_grad_theta(
        &self,
        theta: &[T],
        data: &[usize],
        z: &[T],
        grad_theta: &mut [T],
    ) -> Result<(), LogpError>;

    /// Adds Σ_r w_r ∇θ log p(x_i, z_r; θ) (quadrature, importance weights). The default calls
    /// [`LatentModel::add_grad_theta`] row by row; models may do better.
    fn add_weighted_grad_theta(
        &self,
        theta: &[T],
        data: &[usize],
        z: &[T],
        weights: &[T],
        grad_theta: &mut [T],
    ) -> Result<(), LogpError> {
        let d = self.latent_dim();
        let mut g = vec![T::zero(); grad_theta.len()];
        for (r, w) in weights.iter().enumerate() {
            g.iter_mut().for_each(|v| *v = T::zero());
            self.add_grad_theta(theta, &data[r..r + 1], &z[r * d..(r + 1) * d], &mut g)?;
            for (o, v) in grad_theta.iter_mut().zip(&g) {
                *o += *w * *v;
            }
        }
        Ok(())
    }

    /// Whether [`LatentModel::log_joint_and_grad_theta`] shares one pass between ∇z and ∇θ.
    fn fuses_grad_theta(&self) -> bool {
        false
    }

    /// The size of θ_j's own unit: the polish's differences in θ_j step by a fraction of this
    /// plus |θ_j|. A coefficient of a covariate in large units moves the model as much in a
    /// much smaller step, and steps of the usual size there overflow its rates. 1 (the
    /// default) for every entry.
    fn theta_scale(&self, j: usize) -> f64 {
        let _ = j;
        1.0
    }

    /// Whether a call costs much more than the rows it evaluates (a model in Python): passes that
    /// would cut the rows into parallel pieces then hand them all over in one call.
    fn calls_are_costly(&self) -> bool {
        false
    }

    /// −∇²z log p(x_i, z; θ) of data point `i` at `z`: latent_dim² values, row-major, where the
    /// model has them in closed form (a GLMM: the prior's precision plus each row's weight times
    /// its design's outer product). `None` (the default): central differences of ∇z serve, 2 ·
    /// latent_dim calls' worth of rows; see [`Problem::neg_hessian`].
    fn neg_hessian_z(&self, theta: &[T], i: usize, z: &[T]) -> Option<Result<Vec<T>, LogpError>> {
        let _ = (theta, i, z);
        None
    }

    /// [`LatentModel::log_joint`], and adds Σ_r ∇θ log p(x_i, z_r; θ) at the same rows into
    /// `grad_theta`. The default makes two calls; models whose ∇z and ∇θ come from one backward
    /// pass (a neural decoder) do better.
    fn log_joint_and_grad_theta(
        &self,
        theta: &[T],
        data: &[usize],
        z: &[T],
        logp: &mut [T],
        grad_z: &mut [T],
        grad_theta: &mut [T],
    ) -> Result<(), LogpError> {
        self.log_joint(theta, data, z, logp, grad_z)?;
        self.add_grad_theta(theta, data, z, grad_theta)
    }
}

/// Maximum likelihood for a [`LatentModel`] as an SAGD [`Problem`]: F(θ) = −(1/n) Σ_i E log p(x_i, Z_i; θ)
/// with Z_i ~ p(z | x_i; anchor), `chains_per_point` chains per data point.
///
/// Chain `r` belongs to data point `r % n`. Anchored at θ_k this is the M-step objective −Q(θ; θ_k)/n of
/// EM; anchored at the current θ its gradient is the log-likelihood's (Fisher's identity).
pub struct MaximumLikelihood<'a, M> {
    model: &'a M,
    rows: Vec<usize>,
}

impl<'a, M> MaximumLikelihood<'a, M> {
    /// The problem for `model` with `chains_per_point` chains per data point.
    pub fn new<T: Real>(model: &'a M, chains_per_point: usize) -> Self
    where
        M: LatentModel<T>,
    {
        let n = model.n_data();
        let rows = (0..n * chains_per_point.max(1)).map(|r| r % n).collect();
        MaximumLikelihood { model, rows }
    }

    /// The model.
    pub fn model(&self) -> &M {
        self.model
    }
}

impl<T: Real, M: LatentModel<T>> Problem<T> for MaximumLikelihood<'_, M> {
    fn theta_dim(&self) -> usize {
        self.model.theta_dim()
    }
    fn n_chains(&self) -> usize {
        self.rows.len()
    }
    fn chain_dim(&self) -> usize {
        self.model.latent_dim()
    }
    fn log_target(
        &self,
        anchor: &[T],
        first_row: usize,
        xi: &[T],
        logp: &mut [T],
        grad: &mut [T],
    ) -> Result<(), LogpError> {
        let data = &self.rows[first_row..first_row + logp.len()];
        self.model.log_joint(anchor, data, xi, logp, grad)
    }
    fn add_grad_f(
        &self,
        theta: &[T],
        first_row: usize,
        xi: &[T],
        grad: &mut [T],
    ) -> Result<(), LogpError> {
        let d = self.model.latent_dim().max(1);
        let rows = xi.len() / d;
        let data = &self.rows[first_row..first_row + rows];
        // f = −log p: g − Σ∇log p = −(−g + Σ∇log p), without a scratch buffer.
        grad.iter_mut().for_each(|v| *v = -*v);
        let res = self.model.add_grad_theta(theta, data, xi, grad);
        grad.iter_mut().for_each(|v| *v = -*v);
        res
    }
    fn fuses_grad_f(&self) -> bool {
        self.model.fuses_grad_theta()
    }
    fn calls_are_costly(&self) -> bool {
        self.model.calls_are_costly()
    }
    fn add_grad_f_copies(
        &self,
        theta: &[T],
        first_row: usize,
        copies: usize,
        xi: &[T],
        grad: &mut [T],
    ) -> Result<(), LogpError> {
        let d = self.model.latent_dim().max(1);
        let rows = xi.len() / d / copies.max(1);
        let one = &self.rows[first_row..first_row + rows];
        let data: Vec<usize> = (0..copies).flat_map(|_| one.iter().copied()).collect();
        grad.iter_mut().for_each(|v| *v = -*v);
        let res = self.model.add_grad_theta(theta, &data, xi, grad);
        grad.iter_mut().for_each(|v| *v = -*v);
        res
    }
    fn log_target_copies(
        &self,
        anchor: &[T],
        first_row: usize,
        copies: usize,
        xi: &[T],
        logp: &mut [T],
        grad: &mut [T],
    ) -> Result<(), LogpError> {
        let rows = logp.len() / copies.max(1);
        let one = &self.rows[first_row..first_row + rows];
        let data: Vec<usize> = (0..copies).flat_map(|_| one.iter().copied()).collect();
        self.model.log_joint(anchor, &data, xi, logp, grad)
    }
    fn neg_hessian(&self, anchor: &[T], row: usize, xi: &[T]) -> Option<Result<Vec<T>, LogpError>> {
        self.model.neg_hessian_z(anchor, *self.rows.get(row)?, xi)
    }
    fn log_target_and_grad_f(
        &self,
        theta: &[T],
        first_row: usize,
        xi: &[T],
        logp: &mut [T],
        grad: &mut [T],
        grad_f: &mut [T],
    ) -> Result<(), LogpError> {
        let data = &self.rows[first_row..first_row + logp.len()];
        grad_f.iter_mut().for_each(|v| *v = -*v);
        let res = self
            .model
            .log_joint_and_grad_theta(theta, data, xi, logp, grad, grad_f);
        grad_f.iter_mut().for_each(|v| *v = -*v);
        res
    }
}

/// The chains' target of a [`Problem`] at a given anchor, as a [`LogDensity`].
#[doc(hidden)]
pub struct AnchoredTarget<'a, T, P: ?Sized> {
    /// The problem.
    pub problem: &'a P,
    /// The parameter at which π is taken.
    pub anchor: &'a [T],
}

impl<T: Real, P: Problem<T> + ?Sized> LogDensity<T> for AnchoredTarget<'_, T, P> {
    fn dim(&self) -> usize {
        self.problem.chain_dim()
    }
    fn logp_grad(
        &self,
        first_row: usize,
        x: &[T],
        logp: &mut [T],
        grad: &mut [T],
    ) -> Result<(), LogpError> {
        self.problem
            .log_target(self.anchor, first_row, x, logp, grad)
    }
    /// ∇θ f at the anchor, when the problem computes it in the same pass.
    fn aux_len(&self) -> usize {
        if self.problem.fuses_grad_f() {
            self.problem.theta_dim()
        } else {
            0
        }
    }
    fn logp_grad_aux(
        &self,
        first_row: usize,
        x: &[T],
        logp: &mut [T],
        grad: &mut [T],
        aux: &mut [T],
    ) -> Result<(), LogpError> {
        self.problem
            .log_target_and_grad_f(self.anchor, first_row, x, logp, grad, aux)
    }
}

/// An independent Gaussian target N(mean, sd²) in every coordinate, for every chain: the closed-form
/// target of tests and benchmarks.
#[derive(Clone, Debug)]
#[doc(hidden)]
pub struct IsoGaussian {
    /// Dimension of one chain.
    pub dim: usize,
    /// Mean of every coordinate.
    pub mean: f64,
    /// Standard deviation of every coordinate.
    pub sd: f64,
}

impl<T: Real> LogDensity<T> for IsoGaussian {
    fn dim(&self) -> usize {
        self.dim
    }
    #[inline]
    fn logp_grad(
        &self,
        _first_row: usize,
        x: &[T],
        logp: &mut [T],
        grad: &mut [T],
    ) -> Result<(), LogpError> {
        let prec = T::of(1.0 / (self.sd * self.sd));
        let mean = T::of(self.mean);
        let half = T::of(0.5);
        for ((xr, gr), lp) in x
            .chunks_exact(self.dim)
            .zip(grad.chunks_exact_mut(self.dim))
            .zip(logp.iter_mut())
        {
            for (xi, gi) in xr.iter().zip(gr.iter_mut()) {
                *gi = -prec * (*xi - mean);
            }
            let m = mean.f64();
            *lp = -half * prec * T::of(sum_map(xr, |v| (v - m) * (v - m)));
        }
        Ok(())
    }
}

/// A Gaussian target N(mean, Σ) given by its precision matrix P = Σ⁻¹ (row-major), for every chain.
#[derive(Clone, Debug)]
#[doc(hidden)]
pub struct Gaussian {
    /// The mean.
    pub mean: Vec<f64>,
    /// The precision matrix, row-major, symmetric positive definite.
    pub precision: Vec<f64>,
}

impl<T: Real> LogDensity<T> for Gaussian {
    fn dim(&self) -> usize {
        self.mean.len()
    }
    fn logp_grad(
        &self,
        _first_row: usize,
        x: &[T],
        logp: &mut [T],
        grad: &mut [T],
    ) -> Result<(), LogpError> {
        let d = self.mean.len();
        let mut dx = vec![0.0; d];
        for ((xr, gr), lp) in x
            .chunks_exact(d)
            .zip(grad.chunks_exact_mut(d))
            .zip(logp.iter_mut())
        {
            for j in 0..d {
                dx[j] = xr[j].f64() - self.mean[j];
            }
            let mut quad = 0.0;
            for i in 0..d {
                let pi = &self.precision[i * d..(i + 1) * d];
                let g: f64 = pi.iter().zip(&dx).map(|(a, b)| a * b).sum();
                gr[i] = T::of(-g);
                quad += dx[i] * g;
            }
            *lp = T::of(-0.5 * quad);
        }
        Ok(())
    }
}
