//! The chains' mass matrix, as a linear change of variables per data point.
//!
//! Underdamped Langevin dynamics with mass matrix A is plain Langevin dynamics in the coordinates
//! u = Lᵀ(z − m), A = L Lᵀ: log π_u(u) = log π(m + L⁻ᵀu) + const and ∇_u = L⁻¹ ∇_z. So a
//! preconditioner needs no change to any integrator: [`Preconditioned`] wraps the problem, the
//! chains run on u, and every reader of their states maps them back with [`Preconditioned::to_z`].
//! With A the posterior's precision, u is a standard normal whatever the posterior's scales and
//! correlations, and one Langevin step size serves every direction.
//!
//! A is adapted per data point at the start of every M-step: Newton ascent to the posterior mode
//! (preconditioned by the last M-step's A, so that it rarely needs a new Hessian), then A = −∇²log π
//! at the mode by central differences of the gradient. A dense A is stored and factored in
//! envelope (skyline) form: a state-space model's tridiagonal precision costs O(d) per step, not
//! O(d²). Measured on a 300-long latent AR(1) series: see docs/guide.md.

use serde::{Deserialize, Serialize};

use crate::error::{LogpError, Result};
use crate::model::Problem;

mod factor;
mod settle;
#[cfg(test)]
pub(crate) mod test_target;

pub use factor::Factor;
pub(crate) use settle::{
    closed_form_each, copies_target, curvature_step, row_target, stacked_shifts,
};
use settle::{curvatures, settle_together};

/// Which mass matrix the chains use.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Preconditioner {
    /// None: the chains run on z itself (the paper's).
    #[default]
    Identity,
    /// The diagonal of the posterior's precision at its mode: scales, not correlations.
    Diagonal,
    /// The posterior's precision at its mode (its envelope): scales and correlations.
    Dense,
    /// Dense while every point's matrix fits in [`DENSE_BUDGET`] values in all and the latent has
    /// at most [`DENSE_MAX_DIM`] coordinates; diagonal beyond.
    Auto,
}

/// The most latent coordinates for which [`Preconditioner::Auto`] uses a dense matrix (its
/// Hessian takes 2d gradient evaluations per point and M-step).
#[doc(hidden)]
pub const DENSE_MAX_DIM: usize = 1000;

/// The most stored values (points × d(d+1)/2) for which [`Preconditioner::Auto`] is dense.
#[doc(hidden)]
pub const DENSE_BUDGET: usize = 1 << 23;

impl Preconditioner {
    /// The name as the command line spells it.
    pub fn name(self) -> &'static str {
        match self {
            Preconditioner::Identity => "identity",
            Preconditioner::Diagonal => "diagonal",
            Preconditioner::Dense => "dense",
            Preconditioner::Auto => "auto",
        }
    }

    /// Whether the chains need a metric at all.
    pub fn is_identity(self) -> bool {
        self == Preconditioner::Identity
    }

    /// Whether `points` points of dimension `d` get a dense matrix.
    fn dense(self, points: usize, d: usize) -> bool {
        match self {
            Preconditioner::Dense => true,
            Preconditioner::Auto => {
                d <= DENSE_MAX_DIM && points.saturating_mul(d * (d + 1) / 2) <= DENSE_BUDGET
            }
            _ => false,
        }
    }
}

impl std::str::FromStr for Preconditioner {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        [
            Preconditioner::Identity,
            Preconditioner::Diagonal,
            Preconditioner::Dense,
            Preconditioner::Auto,
        ]
        .into_iter()
        .find(|p| p.name() == s.trim().to_ascii_lowercase())
        .ok_or_else(|| {
            format!("unknown preconditioner `{s}`: use identity, diagonal, dense or auto")
        })
    }
}

/// Every point's change of variables z = m + L⁻ᵀu.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[doc(hidden)]
pub struct Metric {
    dim: usize,
    /// m, one row per point: the posterior modes where A was taken.
    shift: Vec<f64>,
    factors: Vec<Factor>,
    /// Whether the factors hold whole Hessians (their envelopes then hold every entry that is
    /// not zero), not only their diagonals.
    #[serde(default)]
    dense: bool,
}

impl Metric {
    /// The number of points.
    pub fn points(&self) -> usize {
        self.factors.len()
    }

    /// The modes the metric was taken at (one row per point).
    pub fn modes(&self) -> &[f64] {
        &self.shift
    }

    /// Point `p`'s factor L (A = L Lᵀ).
    pub(crate) fn factor(&self, p: usize) -> &Factor {
        &self.factors[p]
    }

    /// Whether the factors hold whole Hessians: their envelopes then cover every entry of the
    /// posteriors' precisions that is not zero where they were taken.
    pub(crate) fn is_dense(&self) -> bool {
        self.dense
    }

    /// The values stored in all factors.
    pub fn stored(&self) -> usize {
        self.factors.iter().map(Factor::stored).sum()
    }

    /// z = m + L⁻ᵀu for the chains `first_row..` (chain r belongs to point r % points).
    pub fn to_z(&self, first_row: usize, u: &[f64], z: &mut [f64]) {
        let d = self.dim.max(1);
        for (r, (ur, zr)) in u.chunks_exact(d).zip(z.chunks_exact_mut(d)).enumerate() {
            let p = (first_row + r) % self.points();
            zr.copy_from_slice(ur);
            self.factors[p].solve_upper(zr);
            for (v, m) in zr.iter_mut().zip(&self.shift[p * d..(p + 1) * d]) {
                *v += m;
            }
        }
    }

    /// u = Lᵀ(z − m) for the chains `first_row..`.
    pub fn to_u(&self, first_row: usize, z: &[f64], u: &mut [f64]) {
        let d = self.dim.max(1);
        let mut dz = vec![0.0; d];
        for (r, (zr, ur)) in z.chunks_exact(d).zip(u.chunks_exact_mut(d)).enumerate() {
            let p = (first_row + r) % self.points();
            for ((v, a), m) in dz.iter_mut().zip(zr).zip(&self.shift[p * d..(p + 1) * d]) {
                *v = a - m;
            }
            self.factors[p].mul_upper(&dz, ur);
        }
    }

    /// The metric of the same kind at `anchor` with its modes at `shift` (one row per point)
    /// instead of found: each point's precision taken there.
    pub(crate) fn carried<P: Problem<f64> + ?Sized>(
        &self,
        problem: &P,
        anchor: &[f64],
        shift: Vec<f64>,
    ) -> Result<Metric> {
        let d = self.dim.max(1);
        let factors = curvatures(
            problem,
            anchor,
            &shift,
            d,
            &vec![true; self.points()],
            self.dense,
        )?
        .into_iter()
        .zip(&self.factors)
        .map(|(f, old)| f.unwrap_or_else(|| old.clone()))
        .collect();
        Ok(Metric {
            dim: self.dim,
            shift,
            factors,
            dense: self.dense,
        })
    }

    /// ∇_u = L⁻¹ ∇_z in place, for the chains `first_row..`.
    fn grad_to_u(&self, first_row: usize, g: &mut [f64]) {
        let d = self.dim.max(1);
        for (r, gr) in g.chunks_exact_mut(d).enumerate() {
            self.factors[(first_row + r) % self.points()].solve_lower(gr);
        }
    }
}

/// A [`Problem`] whose chains run on u = Lᵀ(z − m), point by point (see the module docs); with
/// no metric set, the problem itself, bit for bit.
#[doc(hidden)]
pub struct Preconditioned<P> {
    /// The problem in the model's coordinates.
    pub inner: P,
    points: usize,
    metric: Option<Metric>,
}

impl<P: Problem<f64>> Preconditioned<P> {
    /// `inner`, whose chain r belongs to point r % `points`, with no metric yet.
    pub fn new(inner: P, points: usize) -> Self {
        Preconditioned {
            inner,
            points: points.max(1),
            metric: None,
        }
    }

    /// The metric in use.
    pub fn metric(&self) -> Option<&Metric> {
        self.metric.as_ref()
    }

    /// Sets the metric (`None`: the identity).
    pub fn set_metric(&mut self, metric: Option<Metric>) {
        self.metric = metric;
    }

    /// `copies` stacked states of the chains `first_row..` in the model's coordinates.
    fn copies_to_z(&self, first_row: usize, copies: usize, xi: &[f64]) -> Vec<f64> {
        let per = xi.len() / copies.max(1);
        xi.chunks(per.max(1))
            .flat_map(|x| self.to_z(first_row, x))
            .collect()
    }

    /// The chains' states `first_row..` in the model's coordinates.
    pub fn to_z(&self, first_row: usize, xi: &[f64]) -> Vec<f64> {
        match &self.metric {
            None => xi.to_vec(),
            Some(m) => {
                let mut z = vec![0.0; xi.len()];
                m.to_z(first_row, xi, &mut z);
                z
            }
        }
    }

    /// Adapts the metric at `anchor` from the chains' states `xi` (all chains, in the current
    /// coordinates), and returns the chains' new states: every chain at its point's mode (u = 0).
    /// With [`Preconditioner::Identity`], nothing changes and `None` comes back.
    pub fn adapt(
        &mut self,
        anchor: &[f64],
        xi: &[f64],
        kind: Preconditioner,
    ) -> Result<Option<Vec<f64>>> {
        if kind.is_identity() {
            return Ok(None);
        }
        let d = self.inner.chain_dim().max(1);
        let z = self.to_z(0, &xi[..self.points * d]);
        let dense = kind.dense(self.points, d);
        let previous = self.metric.take();
        let (modes, factors) =
            settle_together(&self.inner, anchor, &z, d, previous.as_ref(), dense)?;
        self.metric = Some(Metric {
            dim: d,
            shift: modes,
            factors,
            dense,
        });
        Ok(Some(vec![0.0; xi.len()]))
    }
}

impl<P: Problem<f64>> Problem<f64> for Preconditioned<P> {
    fn theta_dim(&self) -> usize {
        self.inner.theta_dim()
    }
    fn n_chains(&self) -> usize {
        self.inner.n_chains()
    }
    fn chain_dim(&self) -> usize {
        self.inner.chain_dim()
    }
    fn log_target(
        &self,
        anchor: &[f64],
        first_row: usize,
        xi: &[f64],
        logp: &mut [f64],
        grad: &mut [f64],
    ) -> std::result::Result<(), LogpError> {
        let Some(m) = &self.metric else {
            return self.inner.log_target(anchor, first_row, xi, logp, grad);
        };
        let z = self.to_z(first_row, xi);
        self.inner.log_target(anchor, first_row, &z, logp, grad)?;
        m.grad_to_u(first_row, grad);
        Ok(())
    }
    fn add_grad_f(
        &self,
        theta: &[f64],
        first_row: usize,
        xi: &[f64],
        grad: &mut [f64],
    ) -> std::result::Result<(), LogpError> {
        if self.metric.is_none() {
            return self.inner.add_grad_f(theta, first_row, xi, grad);
        }
        let z = self.to_z(first_row, xi);
        self.inner.add_grad_f(theta, first_row, &z, grad)
    }
    fn fuses_grad_f(&self) -> bool {
        self.inner.fuses_grad_f()
    }
    fn calls_are_costly(&self) -> bool {
        self.inner.calls_are_costly()
    }
    fn add_grad_f_copies(
        &self,
        theta: &[f64],
        first_row: usize,
        copies: usize,
        xi: &[f64],
        grad: &mut [f64],
    ) -> std::result::Result<(), LogpError> {
        if self.metric.is_none() {
            return self
                .inner
                .add_grad_f_copies(theta, first_row, copies, xi, grad);
        }
        let z = self.copies_to_z(first_row, copies, xi);
        self.inner
            .add_grad_f_copies(theta, first_row, copies, &z, grad)
    }
    fn log_target_copies(
        &self,
        anchor: &[f64],
        first_row: usize,
        copies: usize,
        xi: &[f64],
        logp: &mut [f64],
        grad: &mut [f64],
    ) -> std::result::Result<(), LogpError> {
        let Some(m) = &self.metric else {
            return self
                .inner
                .log_target_copies(anchor, first_row, copies, xi, logp, grad);
        };
        let (per, z) = (
            xi.len() / copies.max(1),
            self.copies_to_z(first_row, copies, xi),
        );
        self.inner
            .log_target_copies(anchor, first_row, copies, &z, logp, grad)?;
        for g in grad.chunks_mut(per.max(1)) {
            m.grad_to_u(first_row, g);
        }
        Ok(())
    }
    fn log_target_and_grad_f(
        &self,
        theta: &[f64],
        first_row: usize,
        xi: &[f64],
        logp: &mut [f64],
        grad: &mut [f64],
        grad_f: &mut [f64],
    ) -> std::result::Result<(), LogpError> {
        let Some(m) = &self.metric else {
            return self
                .inner
                .log_target_and_grad_f(theta, first_row, xi, logp, grad, grad_f);
        };
        let z = self.to_z(first_row, xi);
        self.inner
            .log_target_and_grad_f(theta, first_row, &z, logp, grad, grad_f)?;
        m.grad_to_u(first_row, grad);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::test_target::{tridiagonal, GaussianTarget};
    use super::*;

    #[test]
    fn the_envelope_factor_solves_and_multiplies() {
        let d = 6;
        let mut a = tridiagonal(d);
        a[5 * d + 1] = 0.3; // a longer row
        a[d + 5] = 0.3;
        let f = Factor::cholesky(&a, d).unwrap();
        assert_eq!(f.stored(), 1 + 2 + 2 + 2 + 2 + 5);
        // L Lᵀ x = A x for a test vector: Lᵀx, then L(Lᵀx) by solving back.
        let x: Vec<f64> = (0..d).map(|i| (i as f64 * 0.7).sin()).collect();
        let ax: Vec<f64> = (0..d)
            .map(|i| (0..d).map(|j| a[i * d + j] * x[j]).sum())
            .collect();
        let mut y = ax.clone();
        f.solve_lower(&mut y);
        let mut ltx = vec![0.0; d];
        f.mul_upper(&x, &mut ltx);
        for (a, b) in y.iter().zip(&ltx) {
            assert!((a - b).abs() < 1e-12, "{y:?} vs {ltx:?}");
        }
        f.solve_upper(&mut y);
        for (a, b) in y.iter().zip(&x) {
            assert!((a - b).abs() < 1e-12);
        }
        assert!(Factor::cholesky(&[1.0, 2.0, 2.0, 1.0], 2).is_none());
    }

    /// Stacked copies in one call give each copy's own call's numbers, bit for bit, with and
    /// without a metric (the costly problems' Hessians and posterior scales go this way).
    #[test]
    fn stacked_copies_give_each_copy_s_numbers() {
        let (d, points, copies) = (5, 3, 4);
        let mut pre = Preconditioned::new(
            GaussianTarget::fixed(
                (0..d).map(|i| i as f64 * 0.4 - 1.0).collect(),
                tridiagonal(d),
            ),
            points,
        );
        let xi: Vec<f64> = (0..copies * points * d)
            .map(|i| (i as f64 * 0.9).sin())
            .collect();
        for adapt in [false, true] {
            if adapt {
                pre.adapt(&[], &vec![0.5; points * d], Preconditioner::Dense)
                    .unwrap();
            }
            let (mut lp, mut g) = (vec![0.0; copies * points], vec![0.0; xi.len()]);
            pre.log_target_copies(&[], 0, copies, &xi, &mut lp, &mut g)
                .unwrap();
            for c in 0..copies {
                let x = &xi[c * points * d..(c + 1) * points * d];
                let (mut l1, mut g1) = (vec![0.0; points], vec![0.0; points * d]);
                pre.log_target(&[], 0, x, &mut l1, &mut g1).unwrap();
                assert_eq!(&lp[c * points..(c + 1) * points], &l1[..], "adapt {adapt}");
                assert_eq!(&g[c * points * d..(c + 1) * points * d], &g1[..]);
            }
        }
    }

    #[test]
    fn on_a_gaussian_the_chains_coordinates_are_standard_normal() {
        // From a start far off, the adapted metric puts the mode at μ and makes the target in u
        // exactly N(0, I): log π_u(u) = −|u|²/2 + const, so ∇_u = −u, for dense and diagonal
        // alike on a diagonal precision, and for dense on a correlated one.
        let d = 20;
        let mean: Vec<f64> = (0..d).map(|i| (i as f64 * 0.3).cos() * 3.0).collect();
        for correlated in [true, false] {
            let mut precision = tridiagonal(d);
            if !correlated {
                (0..d * d)
                    .filter(|k| k % (d + 1) != 0)
                    .for_each(|k| precision[k] = 0.0);
            }
            let kinds: &[Preconditioner] = if correlated {
                &[Preconditioner::Dense, Preconditioner::Auto]
            } else {
                &[Preconditioner::Dense, Preconditioner::Diagonal]
            };
            // One point (settled alone), and 20 (settled together, in lockstep).
            for (points, &kind) in [1, 20]
                .into_iter()
                .flat_map(|n| kinds.iter().map(move |k| (n, k)))
            {
                let mut pre = Preconditioned::new(
                    GaussianTarget::fixed(mean.clone(), precision.clone()),
                    points,
                );
                let u0 = pre
                    .adapt(&[], &vec![-5.0; points * d], kind)
                    .unwrap()
                    .unwrap();
                assert_eq!(u0, vec![0.0; points * d]);
                let m = pre.metric().unwrap();
                for (a, b) in m.modes().iter().zip(mean.iter().cycle()) {
                    assert!(
                        (a - b).abs() < 1e-8,
                        "{kind:?}, {points}: mode {a} vs mean {b}"
                    );
                }
                let u: Vec<f64> = (0..points * d).map(|i| (i as f64 * 1.7).sin()).collect();
                let (mut lp, mut g) = (vec![0.0; points], vec![0.0; points * d]);
                pre.log_target(&[], 0, &u, &mut lp, &mut g).unwrap();
                for (gi, ui) in g.iter().zip(&u) {
                    assert!(
                        (gi + ui).abs() < 1e-6,
                        "{kind:?}, {points}: ∇u {gi} vs −u {}",
                        -ui
                    );
                }
                // And back: to_u(to_z(u)) = u.
                let z = pre.to_z(0, &u);
                let mut back = vec![0.0; points * d];
                m.to_u(0, &z, &mut back);
                for (a, b) in back.iter().zip(&u) {
                    assert!((a - b).abs() < 1e-12);
                }
            }
        }
    }
}
