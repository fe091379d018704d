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

use rayon::prelude::*;
use serde::{Deserialize, Serialize};

use crate::error::{LogpError, Result, SagdError};
use crate::model::Problem;

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
pub const DENSE_MAX_DIM: usize = 1000;

/// The most stored values (points × d(d+1)/2) for which [`Preconditioner::Auto`] is dense.
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

/// A lower-triangular L with A = L Lᵀ, in envelope form: row i holds columns `start[i]..=i`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Factor {
    start: Vec<usize>,
    offset: Vec<usize>,
    vals: Vec<f64>,
}

impl Factor {
    /// The identity of dimension `d`.
    pub fn identity(d: usize) -> Self {
        Factor::diagonal(&vec![1.0; d])
    }

    /// L = diag(√a).
    fn diagonal(a: &[f64]) -> Self {
        Factor {
            start: (0..a.len()).collect(),
            offset: (0..a.len()).collect(),
            vals: a.iter().map(|v| v.sqrt()).collect(),
        }
    }

    /// The Cholesky factor of the symmetric `a` (d × d, row-major) within its envelope; `None`
    /// when `a` is not positive definite.
    fn cholesky(a: &[f64], d: usize) -> Option<Self> {
        let start: Vec<usize> = (0..d)
            .map(|i| (0..i).find(|&j| a[i * d + j] != 0.0).unwrap_or(i))
            .collect();
        let mut offset = Vec::with_capacity(d);
        let mut len = 0;
        for (i, s) in start.iter().enumerate() {
            offset.push(len);
            len += i - s + 1;
        }
        let mut f = Factor {
            start,
            offset,
            vals: vec![0.0; len],
        };
        for i in 0..d {
            for j in f.start[i]..=i {
                let from = f.start[i].max(f.start[j]);
                let s: f64 = (from..j).map(|k| f.at(i, k) * f.at(j, k)).sum();
                let v = a[i * d + j] - s;
                let l = if i == j {
                    if !(v > 0.0 && v.is_finite()) {
                        return None;
                    }
                    v.sqrt()
                } else {
                    v / f.at(j, j)
                };
                let o = f.offset[i] + j - f.start[i];
                f.vals[o] = l;
            }
        }
        Some(f)
    }

    fn at(&self, i: usize, j: usize) -> f64 {
        self.vals[self.offset[i] + j - self.start[i]]
    }

    /// The dimension.
    pub fn dim(&self) -> usize {
        self.start.len()
    }

    /// The values stored (d for a diagonal, the envelope for a dense matrix).
    pub fn stored(&self) -> usize {
        self.vals.len()
    }

    /// Solves L x = b in place.
    fn solve_lower(&self, b: &mut [f64]) {
        for i in 0..b.len() {
            let o = self.offset[i] - self.start[i];
            let s: f64 = (self.start[i]..i).map(|k| self.vals[o + k] * b[k]).sum();
            b[i] = (b[i] - s) / self.vals[o + i];
        }
    }

    /// Solves Lᵀ x = b in place.
    #[allow(clippy::needless_range_loop)] // envelope indices read clearer than iterators
    fn solve_upper(&self, b: &mut [f64]) {
        for i in (0..b.len()).rev() {
            let o = self.offset[i] - self.start[i];
            b[i] /= self.vals[o + i];
            let xi = b[i];
            for k in self.start[i]..i {
                b[k] -= self.vals[o + k] * xi;
            }
        }
    }

    /// out = Lᵀ x.
    #[allow(clippy::needless_range_loop)] // envelope indices read clearer than iterators
    fn mul_upper(&self, x: &[f64], out: &mut [f64]) {
        out.iter_mut().for_each(|v| *v = 0.0);
        for i in 0..x.len() {
            let o = self.offset[i] - self.start[i];
            for k in self.start[i]..=i {
                out[k] += self.vals[o + k] * x[i];
            }
        }
    }
}

/// Every point's change of variables z = m + L⁻ᵀu.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Metric {
    dim: usize,
    /// m, one row per point: the posterior modes where A was taken.
    shift: Vec<f64>,
    factors: Vec<Factor>,
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
        let inner = &self.inner;
        let (modes, factors) = if self.points >= TOGETHER {
            settle_together(inner, anchor, &z, d, previous.as_ref(), dense)?
        } else {
            let settled = (0..self.points)
                .into_par_iter()
                .map(|p| {
                    let prev = previous.as_ref().map(|m| &m.factors[p]);
                    settle_point(inner, anchor, p, &z[p * d..(p + 1) * d], prev, dense)
                })
                .collect::<Result<Vec<_>>>()?;
            let (modes, factors): (Vec<Vec<f64>>, Vec<Factor>) = settled.into_iter().unzip();
            (modes.concat(), factors)
        };
        self.metric = Some(Metric {
            dim: d,
            shift: modes,
            factors,
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
        let per = xi.len() / copies.max(1);
        let z: Vec<f64> = xi
            .chunks(per.max(1))
            .flat_map(|x| self.to_z(first_row, x))
            .collect();
        self.inner
            .add_grad_f_copies(theta, first_row, copies, &z, grad)
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

/// log π and ∇log π of chain `row` at `z` (None where not finite).
pub(crate) fn row_target<P: Problem<f64> + ?Sized>(
    problem: &P,
    anchor: &[f64],
    row: usize,
    z: &[f64],
) -> Result<Option<(f64, Vec<f64>)>> {
    let (mut lp, mut g) = ([0.0], vec![0.0; z.len()]);
    match problem.log_target(anchor, row, z, &mut lp, &mut g) {
        Ok(()) if lp[0].is_finite() && g.iter().all(|v| v.is_finite()) => Ok(Some((lp[0], g))),
        Ok(()) | Err(LogpError::NonFinite) => Ok(None),
        Err(e) => Err(SagdError::Model(e)),
    }
}

/// A = −∇²log π at `z` (central differences of the gradient, symmetrised), factored: the dense
/// matrix's envelope, or its diagonal, made positive definite where it is not (a shift λI, the
/// smallest of 10⁻⁸·s, 10⁻⁷·s, … with s the largest |A_jj|); the identity where nothing works.
fn curvature<P: Problem<f64> + ?Sized>(
    problem: &P,
    anchor: &[f64],
    row: usize,
    z: &[f64],
    dense: bool,
) -> Result<Factor> {
    let d = z.len();
    // Column k of the Hessian from the gradients at z ± step·e_k: columns in parallel, each
    // with its own position buffer, collected in order.
    let columns = (0..d)
        .into_par_iter()
        .map(|k| {
            let step = 1e-4 * (1.0 + z[k].abs());
            let mut y = z.to_vec();
            y[k] = z[k] + step;
            let up = row_target(problem, anchor, row, &y)?;
            y[k] = z[k] - step;
            let down = row_target(problem, anchor, row, &y)?;
            Ok(match (up, down) {
                (Some((_, gu)), Some((_, gd))) if dense => Some(
                    gu.iter()
                        .zip(&gd)
                        .map(|(a, b)| -(a - b) / (2.0 * step))
                        .collect::<Vec<f64>>(),
                ),
                (Some((_, gu)), Some((_, gd))) => Some(vec![-(gu[k] - gd[k]) / (2.0 * step)]),
                _ => None,
            })
        })
        .collect::<Result<Vec<Option<Vec<f64>>>>>()?;
    let mut h = vec![0.0; if dense { d * d } else { d }];
    for (k, column) in columns.into_iter().enumerate() {
        let Some(column) = column else {
            return Ok(Factor::identity(d));
        };
        if dense {
            for (j, v) in column.into_iter().enumerate() {
                h[j * d + k] += 0.5 * v;
                h[k * d + j] += 0.5 * v;
            }
        } else {
            h[k] = column[0];
        }
    }
    Ok(factor_hessian(h, d, dense))
}

/// A = the negative Hessian `h` (d × d row-major, or its diagonal), factored and made positive
/// definite where it is not (a shift λI, the smallest of 10⁻⁸·s, 10⁻⁷·s, … with s the largest
/// |A_jj|); the identity where nothing works.
fn factor_hessian(h: Vec<f64>, d: usize, dense: bool) -> Factor {
    let diag = |j: usize| if dense { h[j * d + j] } else { h[j] };
    let s = (0..d).map(|j| diag(j).abs()).fold(0.0f64, f64::max);
    if !(s > 0.0 && s.is_finite()) {
        return Factor::identity(d);
    }
    for k in 0..=16 {
        let lambda = if k == 0 { 0.0 } else { s * 10f64.powi(k - 9) };
        if dense {
            let mut a = h.clone();
            (0..d).for_each(|j| a[j * d + j] += lambda);
            if let Some(f) = Factor::cholesky(&a, d) {
                return f;
            }
        } else {
            let a: Vec<f64> = h.iter().map(|v| v + lambda).collect();
            if a.iter().all(|v| *v > 0.0 && v.is_finite()) {
                return Factor::diagonal(&a);
            }
        }
    }
    Factor::identity(d)
}

/// Points at least this many are settled together ([`settle_together`]): every evaluation of
/// the target takes all of them in a few calls, instead of one call per point.
const TOGETHER: usize = 16;

/// log π and ∇log π of the first chain of every point at `z` (points × d), in parallel pieces of
/// rows fixed by the shapes; a row whose target is not finite gets a NaN log density (a piece
/// that fails as a whole is evaluated row by row).
fn evaluate_points<P: Problem<f64> + ?Sized>(
    problem: &P,
    anchor: &[f64],
    z: &[f64],
    d: usize,
) -> Result<(Vec<f64>, Vec<f64>)> {
    let points = z.len() / d;
    let per = crate::em::mstep::rows_per_piece(points, d, problem.calls_are_costly());
    let pieces = z
        .par_chunks(per * d)
        .enumerate()
        .map(|(b, zb)| {
            let rows = zb.len() / d;
            let (mut lp, mut g) = (vec![0.0; rows], vec![0.0; zb.len()]);
            match problem.log_target(anchor, b * per, zb, &mut lp, &mut g) {
                Ok(()) => {}
                Err(LogpError::NonFinite) => {
                    for r in 0..rows {
                        let row =
                            row_target(problem, anchor, b * per + r, &zb[r * d..(r + 1) * d])?;
                        match row {
                            Some((l, gr)) => {
                                lp[r] = l;
                                g[r * d..(r + 1) * d].copy_from_slice(&gr);
                            }
                            None => lp[r] = f64::NAN,
                        }
                    }
                }
                Err(e) => return Err(SagdError::Model(e)),
            }
            for r in 0..rows {
                if !g[r * d..(r + 1) * d].iter().all(|v| v.is_finite()) {
                    lp[r] = f64::NAN;
                }
            }
            Ok((lp, g))
        })
        .collect::<Result<Vec<_>>>()?;
    let (lp, g): (Vec<Vec<f64>>, Vec<Vec<f64>>) = pieces.into_iter().unzip();
    Ok((lp.concat(), g.concat()))
}

/// The factors A = −∇²log π of the points `which` at `z`, by central differences of the gradient:
/// coordinate k of every point moved at once, 2d evaluations of all points in all.
fn curvatures<P: Problem<f64> + ?Sized>(
    problem: &P,
    anchor: &[f64],
    z: &[f64],
    d: usize,
    which: &[bool],
    dense: bool,
) -> Result<Vec<Option<Factor>>> {
    let points = which.len();
    let mut h: Vec<Vec<f64>> = (0..points)
        .map(|p| {
            vec![
                0.0;
                if which[p] {
                    if dense {
                        d * d
                    } else {
                        d
                    }
                } else {
                    0
                }
            ]
        })
        .collect();
    let mut broken = vec![false; points];
    for k in 0..d {
        let step: Vec<f64> = (0..points)
            .map(|p| 1e-4 * (1.0 + z[p * d + k].abs()))
            .collect();
        let shifted = |sign: f64| -> Vec<f64> {
            let mut y = z.to_vec();
            (0..points).for_each(|p| y[p * d + k] += sign * step[p]);
            y
        };
        let (lu, gu) = evaluate_points(problem, anchor, &shifted(1.0), d)?;
        let (ld, gd) = evaluate_points(problem, anchor, &shifted(-1.0), d)?;
        for p in (0..points).filter(|&p| which[p]) {
            if lu[p].is_nan() || ld[p].is_nan() {
                broken[p] = true;
                continue;
            }
            let column = |j: usize| -(gu[p * d + j] - gd[p * d + j]) / (2.0 * step[p]);
            if dense {
                for j in 0..d {
                    let v = column(j);
                    h[p][j * d + k] += 0.5 * v;
                    h[p][k * d + j] += 0.5 * v;
                }
            } else {
                h[p][k] = column(k);
            }
        }
    }
    Ok(h.into_par_iter()
        .enumerate()
        .map(|(p, hp)| {
            which[p].then(|| {
                if broken[p] {
                    Factor::identity(d)
                } else {
                    factor_hessian(hp, d, dense)
                }
            })
        })
        .collect())
}

/// [`settle_point`] for all points in lockstep: each step of every point's Newton ascent takes one
/// evaluation of all points (a few calls of the model rather than one per point), and new
/// Hessians are taken together for the points that need one.
fn settle_together<P: Problem<f64> + ?Sized>(
    problem: &P,
    anchor: &[f64],
    z0: &[f64],
    d: usize,
    previous: Option<&Metric>,
    dense: bool,
) -> Result<(Vec<f64>, Vec<Factor>)> {
    let points = z0.len() / d;
    let mut z = z0.to_vec();
    let (mut lp, mut g) = evaluate_points(problem, anchor, &z, d)?;
    // Points whose target is not finite where they are keep it, and their factor.
    let start_ok: Vec<bool> = lp.iter().map(|l| !l.is_nan()).collect();
    let previous: Option<Vec<Factor>> = previous
        .filter(|m| m.points() == points && m.dim == d)
        .map(|m| m.factors.clone());
    let need: Vec<bool> = (0..points)
        .map(|p| start_ok[p] && previous.is_none())
        .collect();
    let fresh_factors = curvatures(problem, anchor, &z, d, &need, dense)?;
    let mut factors: Vec<Factor> = (0..points)
        .map(|p| match (&fresh_factors[p], &previous) {
            (Some(f), _) => f.clone(),
            (None, Some(prev)) => prev[p].clone(),
            (None, None) => Factor::identity(d),
        })
        .collect();
    let mut fresh = need.clone();
    let mut active = start_ok.clone();
    for _ in 0..50 {
        // Each active point's Newton direction and decrement.
        let dirs: Vec<Vec<f64>> = (0..points)
            .into_par_iter()
            .map(|p| {
                let mut dir = g[p * d..(p + 1) * d].to_vec();
                factors[p].solve_lower(&mut dir);
                factors[p].solve_upper(&mut dir);
                dir
            })
            .collect();
        for p in 0..points {
            let dec: f64 = (0..d).map(|j| g[p * d + j] * dirs[p][j]).sum();
            if dec.is_nan() || dec <= 1e-10 {
                active[p] = false;
            }
        }
        if !active.iter().any(|a| *a) {
            break;
        }
        let mut t = vec![1.0; points];
        let mut pending = active.clone();
        let mut moved = vec![false; points];
        for _ in 0..30 {
            let mut y = z.clone();
            for p in (0..points).filter(|&p| pending[p]) {
                for j in 0..d {
                    y[p * d + j] = z[p * d + j] + t[p] * dirs[p][j];
                }
            }
            let (ly, gy) = evaluate_points(problem, anchor, &y, d)?;
            for p in 0..points {
                if !pending[p] {
                    continue;
                }
                if !ly[p].is_nan() && ly[p] > lp[p] {
                    z[p * d..(p + 1) * d].copy_from_slice(&y[p * d..(p + 1) * d]);
                    g[p * d..(p + 1) * d].copy_from_slice(&gy[p * d..(p + 1) * d]);
                    lp[p] = ly[p];
                    moved[p] = true;
                    pending[p] = false;
                } else {
                    t[p] *= 0.5;
                }
            }
            if !pending.iter().any(|a| *a) {
                break;
            }
        }
        // As settle_point: a stale metric that needed a line search gets a new Hessian; a fresh
        // one that cannot go up is at the mode.
        let mut need = vec![false; points];
        for p in 0..points {
            if !active[p] {
                continue;
            }
            if moved[p] && t[p] == 1.0 {
                fresh[p] = false;
            } else if !fresh[p] {
                need[p] = true;
            } else if !moved[p] {
                active[p] = false;
            } else {
                fresh[p] = false;
            }
        }
        if need.iter().any(|n| *n) {
            for (p, f) in curvatures(problem, anchor, &z, d, &need, dense)?
                .into_iter()
                .enumerate()
            {
                if let Some(f) = f {
                    factors[p] = f;
                    fresh[p] = true;
                }
            }
        }
    }
    // The metric at the modes.
    let need: Vec<bool> = (0..points).map(|p| start_ok[p] && !fresh[p]).collect();
    for (p, f) in curvatures(problem, anchor, &z, d, &need, dense)?
        .into_iter()
        .enumerate()
    {
        if let Some(f) = f {
            factors[p] = f;
        }
    }
    Ok((z, factors))
}

/// Point `point`'s mode and precision, from `z0`: Newton ascent preconditioned by `previous` (the
/// last M-step's factor), a new Hessian taken only when a full step fails to go up, then A at the
/// mode. Where log π is not finite at `z0`, the point keeps `z0` and `previous` (or the identity).
fn settle_point<P: Problem<f64> + ?Sized>(
    problem: &P,
    anchor: &[f64],
    point: usize,
    z0: &[f64],
    previous: Option<&Factor>,
    dense: bool,
) -> Result<(Vec<f64>, Factor)> {
    let d = z0.len();
    let mut z = z0.to_vec();
    let Some((mut lp, mut g)) = row_target(problem, anchor, point, &z)? else {
        let keep = previous.cloned().unwrap_or_else(|| Factor::identity(d));
        return Ok((z, keep));
    };
    let (mut factor, mut fresh) = match previous.filter(|f| f.dim() == d) {
        Some(f) => (f.clone(), false),
        None => (curvature(problem, anchor, point, &z, dense)?, true),
    };
    for _ in 0..50 {
        let mut dir = g.clone();
        factor.solve_lower(&mut dir);
        factor.solve_upper(&mut dir);
        // The squared Newton decrement: at a mode when it is tiny.
        let decrement: f64 = g.iter().zip(&dir).map(|(a, b)| a * b).sum();
        if decrement.is_nan() || decrement <= 1e-10 {
            break;
        }
        let mut t = 1.0;
        let mut moved = false;
        for _ in 0..30 {
            let y: Vec<f64> = z.iter().zip(&dir).map(|(a, v)| a + t * v).collect();
            if let Some((l, gy)) = row_target(problem, anchor, point, &y)? {
                if l > lp {
                    (z, lp, g) = (y, l, gy);
                    moved = true;
                    break;
                }
            }
            t *= 0.5;
        }
        if moved && t == 1.0 {
            fresh = false;
        } else if !fresh {
            // A stale metric that needs a line search: a new Hessian here.
            factor = curvature(problem, anchor, point, &z, dense)?;
            fresh = true;
        } else if !moved {
            break;
        } else {
            fresh = false;
        }
    }
    if !fresh {
        factor = curvature(problem, anchor, point, &z, dense)?;
    }
    Ok((z, factor))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A tridiagonal positive-definite matrix.
    fn tridiagonal(d: usize) -> Vec<f64> {
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

    /// Chains on N(μ, P⁻¹), P tridiagonal, one per point: a `Problem` with no parameter.
    struct TridiagonalGaussian {
        mean: Vec<f64>,
        precision: Vec<f64>,
    }

    impl Problem<f64> for TridiagonalGaussian {
        fn theta_dim(&self) -> usize {
            0
        }
        fn n_chains(&self) -> usize {
            1
        }
        fn chain_dim(&self) -> usize {
            self.mean.len()
        }
        fn log_target(
            &self,
            _anchor: &[f64],
            _first_row: usize,
            xi: &[f64],
            logp: &mut [f64],
            grad: &mut [f64],
        ) -> std::result::Result<(), LogpError> {
            let d = self.mean.len();
            for (r, (x, gr)) in xi.chunks_exact(d).zip(grad.chunks_exact_mut(d)).enumerate() {
                let dx: Vec<f64> = x.iter().zip(&self.mean).map(|(a, m)| a - m).collect();
                let mut quad = 0.0;
                for i in 0..d {
                    let g: f64 = (0..d).map(|j| self.precision[i * d + j] * dx[j]).sum();
                    gr[i] = -g;
                    quad += dx[i] * g;
                }
                logp[r] = -0.5 * quad;
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
                    TridiagonalGaussian {
                        mean: mean.clone(),
                        precision: precision.clone(),
                    },
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
