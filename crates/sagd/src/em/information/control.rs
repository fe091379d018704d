//! A control variate for the score, from Stein's identity: for any smooth φ, the posterior mean
//! of ∇·φ + φᵀ∇z log π is zero, so subtracting it from each draw's ∇θ log p leaves the score's
//! estimate unbiased whatever φ is. With φ_k(z) = −A⁻¹(b_k + ½ C_k (z − m)), where m is the
//! posterior mode, A its precision (the chains' metric), b_k = ∂θ_k ∇z log p and
//! C_k = ∂θ_k ∇²z log p there, the draw's control is
//!
//! S_k(z) = −½ tr(A⁻¹C_k) − b_kᵀ w − ½ (z − m)ᵀ C_k w,  w = A⁻¹ ∇z log π(z),
//!
//! which is ∇θ_k log p − its mean exactly where the posterior is Gaussian and ∇θ log p quadratic
//! in z (a linear-Gaussian state space: the score's spread falls from 18 to 10⁻⁸), and most of
//! its spread where the posterior is nearly so. The chains' steps already give ∇z log π at every
//! draw, so a draw's control costs two triangular solves and a pass over the envelope.
//!
//! b_k and C_k come from central differences in θ of the gradient and of the Hessian at m. Where
//! the problem gives its Hessian in closed form ([`Problem::neg_hessian`]: a GLMM's), that is a
//! pass per point at each shifted θ; otherwise the Hessians are taken on the metric's envelope
//! with its columns coloured (columns that share no row moved at once), so a tridiagonal
//! precision costs three pairs of evaluations, not d, and a dense one 2d + 1.

use rayon::prelude::*;

use crate::error::{LogpError, Result, SagdError};
use crate::metric::{closed_form_each, copies_target, curvature_step, Factor, Metric};
use crate::model::Problem;

/// The most work (Σ over points of the colouring's and the inverse's operations) spent on the
/// control; beyond it the draws go without (a dense metric on a latent of thousands).
const CONTROL_WORK: usize = 1 << 26;

/// [`CONTROL_WORK`] where the problem gives its Hessians in closed form: no colouring, and only
/// the inverses on the envelopes (a dense latent of about 800 coordinates, a second of work)
/// count.
const CLOSED_FORM_CONTROL_WORK: usize = 1 << 30;

/// Each point's control for each coordinate of θ.
pub(super) struct ScoreControl {
    d: usize,
    p: usize,
    /// b_k per point: points × p × d.
    slope: Vec<f64>,
    /// C_k per point on its factor's envelope (lower triangle, the factor's layout): [point][k].
    curvature: Vec<Vec<Vec<f64>>>,
    /// −½ tr(A⁻¹C_k) per point: points × p.
    offset: Vec<f64>,
}

/// Point `factor`'s columns in groups that share no row of its (symmetric) envelope, greedily,
/// and the work that took; `None` when it would pass `budget`.
fn colour_columns(factor: &Factor, budget: usize) -> Option<(Vec<Vec<usize>>, usize)> {
    let (d, start) = (factor.dim(), factor.start());
    let mut rows: Vec<Vec<usize>> = (0..d).map(|i| vec![i]).collect();
    for i in 0..d {
        for j in start[i]..i {
            rows[i].push(j);
            rows[j].push(i);
        }
    }
    let work: usize = rows.iter().map(|r| r.len() * r.len()).sum();
    if work > budget {
        return None;
    }
    let mut colour = vec![usize::MAX; d];
    let mut groups: Vec<Vec<usize>> = Vec::new();
    let mut taken = Vec::new();
    for j in 0..d {
        taken.clear();
        taken.resize(groups.len(), false);
        for &i in &rows[j] {
            for &k in &rows[i] {
                if colour[k] != usize::MAX {
                    taken[colour[k]] = true;
                }
            }
        }
        let c = taken.iter().position(|t| !t).unwrap_or(groups.len());
        if c == groups.len() {
            groups.push(Vec::new());
        }
        groups[c].push(j);
        colour[j] = c;
    }
    Some((groups, work))
}

impl ScoreControl {
    /// The control at `theta` for the points of `metric` (taken at `theta`), with ∇z log p from
    /// `problem` (the model's coordinates, rows 0.. being the points), θ's differences `steps`.
    /// `None` where the metric holds only diagonals, the work would be too large, or log p is
    /// not finite near a mode: the draws then go without.
    pub(super) fn at<P: Problem<f64> + ?Sized>(
        problem: &P,
        metric: &Metric,
        theta: &[f64],
        steps: &[f64],
    ) -> Result<Option<Self>> {
        let (points, p) = (metric.points(), theta.len());
        let modes = metric.modes();
        let d = modes.len() / points.max(1);
        if !metric.is_dense() || d == 0 || p == 0 {
            return Ok(None);
        }
        // C_k from the problem's Hessians in closed form at θ ± h_k e_k where it has them (a
        // pass per point and shifted θ), else from central differences of ∇z, the columns
        // coloured; b_k from ∇z at the modes either way.
        let sources = match closed_form_hessians(problem, metric, theta, steps)? {
            Some(h) if inverses_within(metric, d, CLOSED_FORM_CONTROL_WORK) => {
                Curvatures::Closed(h)
            }
            Some(_) => return Ok(None),
            None => match colours_within_budget(metric, d) {
                Some(colours) => Curvatures::Coloured(colours),
                None => return Ok(None),
            },
        };
        let (copies, states) = match &sources {
            Curvatures::Coloured(colours) => shifted_copies(modes, colours, d),
            Curvatures::Closed(_) => (1, modes.to_vec()),
        };
        let Some(grads) =
            gradients_at_shifted_theta(problem, theta, steps, (points, copies), &states)?
        else {
            return Ok(None);
        };
        let values = points * d;
        let copy = |a: usize, c: usize, q: usize| &grads[a][c * values + q * d..][..d];
        let mut slope = vec![0.0; points * p * d];
        let mut curvature = Vec::with_capacity(points);
        let mut offset = vec![0.0; points * p];
        for q in 0..points {
            let f = metric.factor(q);
            let start = f.start();
            let inverse = f.inverse_on_envelope();
            let mut per_k = Vec::with_capacity(p);
            for k in 0..p {
                let (up, down) = (2 * k, 2 * k + 1);
                let h = 2.0 * steps[k];
                let b = &mut slope[(q * p + k) * d..(q * p + k + 1) * d];
                for ((v, u), w) in b.iter_mut().zip(copy(up, 0, q)).zip(copy(down, 0, q)) {
                    *v = (u - w) / h;
                }
                let mut c = vec![0.0; f.stored()];
                match &sources {
                    Curvatures::Closed(hessians) => {
                        // ∂θ_k ∇²z log p = −∂θ_k of the negative Hessians.
                        let (hu, hd) = (&hessians[up][q], &hessians[down][q]);
                        for i in 0..d {
                            for j in start[i]..=i {
                                c[f.index(i, j)] = -(hu[i * d + j] - hd[i * d + j]) / h;
                            }
                        }
                    }
                    Curvatures::Coloured(colours) => {
                        for (colour, columns) in colours[q].iter().enumerate() {
                            let (cu, cd) = (1 + 2 * colour, 2 + 2 * colour);
                            let (uu, ud) = (copy(up, cu, q), copy(up, cd, q));
                            let (du, dd) = (copy(down, cu, q), copy(down, cd, q));
                            for &j in columns {
                                let eps = 2.0 * curvature_step(modes[q * d + j]);
                                // Column j of ∂θ_k ∇²z log p: rows i with (i, j) in the envelope.
                                let entry =
                                    |i: usize| ((uu[i] - ud[i]) - (du[i] - dd[i])) / (eps * h);
                                for i in j..d {
                                    if start[i] <= j {
                                        let weight = if i == j { 1.0 } else { 0.5 };
                                        c[f.index(i, j)] += weight * entry(i);
                                    }
                                }
                                for i in start[j]..j {
                                    c[f.index(j, i)] += 0.5 * entry(i);
                                }
                            }
                        }
                    }
                }
                let trace = envelope_trace(f, &inverse, &c);
                offset[q * p + k] = -0.5 * trace;
                per_k.push(c);
            }
            curvature.push(per_k);
        }
        Ok(Some(ScoreControl {
            d,
            p,
            slope,
            curvature,
            offset,
        }))
    }

    /// The control of the posterior at `theta` + h e_j, this control and
    /// `metric` being θ's: each mode moved by h A⁻¹b_j (first order in h: no search, whose
    /// tolerance would show in a difference over h), the precision, b_k and C_k taken there.
    /// With θ's control alone, a run at θ + h e_j keeps [S(θ + h e_j) − S(θ)] / h in each draw's
    /// difference of scores, a function of the draw that the coupling does not cancel: at
    /// counts in the hundreds, nearly all of the information's noise. `None` where there is no
    /// control there.
    pub(super) fn carried<P: Problem<f64> + ?Sized>(
        &self,
        problem: &P,
        metric: &Metric,
        theta: &[f64],
        steps: &[f64],
        (j, h): (usize, f64),
    ) -> Result<Option<MovedControl>> {
        let (d, p) = (self.d, self.p);
        let mut shift = metric.modes().to_vec();
        let mut moved = vec![0.0; d];
        for (q, m) in shift.chunks_exact_mut(d).enumerate() {
            moved.copy_from_slice(&self.slope[(q * p + j) * d..(q * p + j + 1) * d]);
            let f = metric.factor(q);
            f.solve_lower(&mut moved);
            f.solve_upper(&mut moved);
            m.iter_mut().zip(&moved).for_each(|(a, v)| *a += h * v);
        }
        let mut at = theta.to_vec();
        at[j] += h;
        let there = metric.carried(problem, &at, shift)?;
        Ok(
            ScoreControl::at(problem, &there, &at, steps)?.map(|control| MovedControl {
                metric: there,
                control,
            }),
        )
    }

    /// The chains' states `u` (in the metric's coordinates, chain r belonging to point r % points)
    /// carried from the posterior at θ to the one at θ + h e_j, to first order in h: the mode
    /// moves by h A⁻¹b_j and the spread about it by (I + ½ h A⁻¹C_j), A's change being −h C_j.
    /// On a Gaussian posterior the carried states are its draws up to O(h²): chains coupled to
    /// θ's start where they would settle, with no transient for their differences to read.
    pub(super) fn transported(&self, metric: &Metric, j: usize, h: f64, u: &[f64]) -> Vec<f64> {
        let (d, p, points) = (self.d, self.p, metric.points());
        let mut out = u.to_vec();
        let (mut delta, mut v) = (vec![0.0; d], vec![0.0; d]);
        for (r, ur) in out.chunks_exact_mut(d).enumerate() {
            let q = r % points;
            let f = metric.factor(q);
            delta.copy_from_slice(ur);
            f.solve_upper(&mut delta);
            v.copy_from_slice(&self.slope[(q * p + j) * d..(q * p + j + 1) * d]);
            let (c, start) = (&self.curvature[q][j], f.start());
            for (i, &first) in start.iter().enumerate() {
                let o = f.index(i, first);
                for k in first..i {
                    let half = 0.5 * c[o + k - first];
                    v[i] += half * delta[k];
                    v[k] += half * delta[i];
                }
                v[i] += 0.5 * c[f.index(i, i)] * delta[i];
            }
            f.solve_lower(&mut v);
            ur.iter_mut().zip(&v).for_each(|(a, b)| *a += h * b);
        }
        out
    }

    /// S(z) of every chain (chains × p): `z` every chain's state in the model's coordinates,
    /// `grad_u` its ∇log π in the chains' (∇_u = L⁻¹∇z), chain r belonging to point r % points.
    pub(super) fn rows(&self, metric: &Metric, z: &[f64], grad_u: &[f64]) -> Vec<f64> {
        let (d, p, points) = (self.d, self.p, metric.points());
        let modes = metric.modes();
        let mut out = vec![0.0; z.len() / d.max(1) * p];
        let (mut delta, mut w) = (vec![0.0; d], vec![0.0; d]);
        for (r, (zr, gr)) in z.chunks_exact(d).zip(grad_u.chunks_exact(d)).enumerate() {
            let q = r % points;
            let f = metric.factor(q);
            for ((v, a), m) in delta.iter_mut().zip(zr).zip(&modes[q * d..(q + 1) * d]) {
                *v = a - m;
            }
            w.copy_from_slice(gr);
            f.solve_upper(&mut w);
            let start = f.start();
            for (k, t) in out[r * p..(r + 1) * p].iter_mut().enumerate() {
                let b = &self.slope[(q * p + k) * d..(q * p + k + 1) * d];
                let c = &self.curvature[q][k];
                let linear: f64 = b.iter().zip(&w).map(|(x, y)| x * y).sum();
                let mut quadratic = 0.0;
                for i in 0..d {
                    let o = f.index(i, start[i]);
                    for j in start[i]..i {
                        quadratic += c[o + j - start[i]] * (delta[i] * w[j] + delta[j] * w[i]);
                    }
                    quadratic += c[f.index(i, i)] * delta[i] * w[i];
                }
                *t = self.offset[q * p + k] - linear - 0.5 * quadratic;
            }
        }
        out
    }
}

/// The control of a coupled run at θ + h e_j: its own posterior's, with the modes carried there
/// to first order in h ([`ScoreControl::carried`]).
pub(super) struct MovedControl {
    metric: Metric,
    control: ScoreControl,
}

impl MovedControl {
    /// Every chain's S (chains × p) as [`ScoreControl::rows`], the chains moving on `metric`
    /// (θ's).
    pub(super) fn rows(&self, metric: &Metric, z: &[f64], grad_u: &[f64]) -> Vec<f64> {
        let (d, points) = (self.control.d, metric.points());
        // ∇z = L ∇u, then into this metric's coordinates.
        let mut grad = vec![0.0; grad_u.len()];
        let mut gz = vec![0.0; d];
        for (r, (gu, g)) in grad_u
            .chunks_exact(d)
            .zip(grad.chunks_exact_mut(d))
            .enumerate()
        {
            metric.factor(r % points).mul_lower(gu, &mut gz);
            g.copy_from_slice(&gz);
            self.metric.factor(r % points).solve_lower(g);
        }
        self.control.rows(&self.metric, z, &grad)
    }
}

/// Where the control's C_k come from.
enum Curvatures {
    /// The problem's negative Hessians in closed form: [shifted θ][point].
    Closed(Vec<Vec<Vec<f64>>>),
    /// Central differences of ∇z, each point's columns in colours: [point][colour].
    Coloured(Vec<Vec<Vec<usize>>>),
}

/// The negative Hessians of every point at its mode, in closed form ([`closed_form_each`]), at
/// θ ± h_k e_k, k = 0..p (up, then down): [shifted θ][point]. `Ok(None)` where the problem has
/// no closed form or a Hessian is not finite.
fn closed_form_hessians<P: Problem<f64> + ?Sized>(
    problem: &P,
    metric: &Metric,
    theta: &[f64],
    steps: &[f64],
) -> Result<Option<Vec<Vec<Vec<f64>>>>> {
    let (points, p, modes) = (metric.points(), theta.len(), metric.modes());
    let d = modes.len() / points.max(1);
    let Some(all) = closed_form_each(problem, 2 * p * points, |k| {
        let (a, q) = (k / points, k % points);
        problem.neg_hessian(
            &shifted_theta(theta, steps, a),
            q,
            &modes[q * d..(q + 1) * d],
        )
    }) else {
        return Ok(None);
    };
    let mut hessians = vec![Vec::with_capacity(points); 2 * p];
    for (k, h) in all.into_iter().enumerate() {
        match h {
            Ok(h) => hessians[k / points].push(h),
            Err(LogpError::NonFinite) => return Ok(None),
            Err(e) => return Err(SagdError::Model(e)),
        }
    }
    Ok(Some(hessians))
}

/// The `a`-th of θ's shifts: θ + h_k e_k for a = 2k, θ − h_k e_k for a = 2k + 1.
fn shifted_theta(theta: &[f64], steps: &[f64], a: usize) -> Vec<f64> {
    let (k, mut t) = (a / 2, theta.to_vec());
    t[k] += if a.is_multiple_of(2) {
        steps[k]
    } else {
        -steps[k]
    };
    t
}

/// Whether the inverses on every point's envelope fit in `budget` operations.
fn inverses_within(metric: &Metric, d: usize, budget: usize) -> bool {
    let work: usize = (0..metric.points())
        .map(|q| d * 2 * metric.factor(q).stored())
        .sum();
    work <= budget
}

/// Each point's Hessian columns coloured on its factor's envelope, while their evaluations and
/// the inverses on the envelopes fit in [`CONTROL_WORK`]; `None` past it.
fn colours_within_budget(metric: &Metric, d: usize) -> Option<Vec<Vec<Vec<usize>>>> {
    let points = metric.points();
    let mut budget = CONTROL_WORK;
    let mut colours = Vec::with_capacity(points);
    for q in 0..points {
        let f = metric.factor(q);
        let (groups, work) = colour_columns(f, budget)?;
        budget -= work;
        let inverse_work = d * 2 * f.stored();
        if inverse_work > budget {
            return None;
        }
        budget -= inverse_work;
        colours.push(groups);
    }
    Some(colours)
}

/// The states whose gradients give the Hessians' columns: copy 0 at the modes; copies 1 + 2c and
/// 2 + 2c with colour c's columns moved up and down (every point's at once). The number of copies,
/// and the copies stacked.
fn shifted_copies(modes: &[f64], colours: &[Vec<Vec<usize>>], d: usize) -> (usize, Vec<f64>) {
    let n_colours = colours.iter().map(Vec::len).max().unwrap_or(0);
    let copies = 1 + 2 * n_colours;
    let mut states = Vec::with_capacity(copies * modes.len());
    states.extend_from_slice(modes);
    for c in 0..n_colours {
        for sign in [1.0, -1.0] {
            let mut y = modes.to_vec();
            for (q, groups) in colours.iter().enumerate() {
                for &j in groups.get(c).map_or(&[][..], Vec::as_slice) {
                    let v = &mut y[q * d + j];
                    *v += sign * curvature_step(*v);
                }
            }
            states.extend(y);
        }
    }
    (copies, states)
}

/// ∇z log p of every copy (`copies` of `points` rows' states) at θ ± h_k e_k, k = 0..p (up, then
/// down), one call per shifted θ (in parallel unless the model's calls are costly); `None` where
/// one is not finite.
fn gradients_at_shifted_theta<P: Problem<f64> + ?Sized>(
    problem: &P,
    theta: &[f64],
    steps: &[f64],
    (points, copies): (usize, usize),
    states: &[f64],
) -> Result<Option<Vec<Vec<f64>>>> {
    let p = theta.len();
    let anchors: Vec<Vec<f64>> = (0..2 * p).map(|a| shifted_theta(theta, steps, a)).collect();
    let evaluate = |anchor: &Vec<f64>| -> Result<Option<Vec<f64>>> {
        Ok(copies_target(problem, anchor, (points, copies), states)?.map(|(_, g)| g))
    };
    let grads: Vec<Option<Vec<f64>>> = if problem.calls_are_costly() {
        anchors.iter().map(evaluate).collect::<Result<_>>()?
    } else {
        anchors.par_iter().map(evaluate).collect::<Result<_>>()?
    };
    Ok(grads.into_iter().collect())
}

/// tr(A⁻¹C) for symmetric A⁻¹ and C stored on `f`'s envelope (lower triangle).
fn envelope_trace(f: &Factor, inverse: &[f64], c: &[f64]) -> f64 {
    let mut trace = 0.0;
    for (i, &first) in f.start().iter().enumerate() {
        for j in first..=i {
            let o = f.index(i, j);
            trace += if i == j { 1.0 } else { 2.0 } * inverse[o] * c[o];
        }
    }
    trace
}

#[cfg(test)]
mod tests;
