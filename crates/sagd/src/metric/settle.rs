//! Where the metric comes from: each point's posterior mode by Newton ascent, and the negative
//! Hessian there — from the problem's closed form where it has one ([`Problem::neg_hessian`]),
//! else by central differences of the gradient, point by point, or for many points in lockstep
//! so that every evaluation takes all of them in a few calls.

use rayon::prelude::*;

use super::{Factor, Metric};
use crate::error::{LogpError, Result, SagdError};
use crate::model::Problem;

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

/// log π and ∇log π of `copies` stacked copies of the states of `rows` chains (None where not
/// finite): [`row_target`] for [`Problem::log_target_copies`].
pub(crate) fn copies_target<P: Problem<f64> + ?Sized>(
    problem: &P,
    anchor: &[f64],
    (rows, copies): (usize, usize),
    states: &[f64],
) -> Result<Option<(Vec<f64>, Vec<f64>)>> {
    let (mut lp, mut g) = (vec![0.0; copies * rows], vec![0.0; states.len()]);
    match problem.log_target_copies(anchor, 0, copies, states, &mut lp, &mut g) {
        Ok(()) if lp.iter().chain(&g).all(|v| v.is_finite()) => Ok(Some((lp, g))),
        Ok(()) | Err(LogpError::NonFinite) => Ok(None),
        Err(e) => Err(SagdError::Model(e)),
    }
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

/// Columns of the Hessians computed at once (in parallel) by [`curvatures`].
const COLUMNS_AT_ONCE: usize = 32;

/// The most values (copies × points × d) that one call of a costly problem evaluates for
/// [`curvatures`]: its columns' shifted states in as few calls as this allows.
const STACKED_VALUES: usize = 1 << 20;

/// Columns of the Hessians taken per chunk: [`COLUMNS_AT_ONCE`], fewer where the calls are costly
/// and the chunk's 2 · columns shifted copies of every point would pass [`STACKED_VALUES`].
fn columns_at_once<P: Problem<f64> + ?Sized>(problem: &P, points: usize, d: usize) -> usize {
    if problem.calls_are_costly() {
        (STACKED_VALUES / (2 * points * d).max(1)).clamp(1, COLUMNS_AT_ONCE)
    } else {
        COLUMNS_AT_ONCE
    }
}

/// The central differences' step in a coordinate at `z`.
pub(crate) fn curvature_step(z: f64) -> f64 {
    1e-4 * (1.0 + z.abs())
}

/// `x` (rows of `d` coordinates) with coordinate k of every row moved by `sign` times its
/// [`curvature_step`].
fn shifted(x: &[f64], d: usize, k: usize, sign: f64) -> Vec<f64> {
    let mut y = x.to_vec();
    for r in 0..x.len() / d.max(1) {
        y[r * d + k] += sign * curvature_step(x[r * d + k]);
    }
    y
}

/// [`shifted`] up, then down, for each k of `coords`, stacked: the 2 · |coords| copies that
/// [`Problem::log_target_copies`] evaluates in one call.
pub(crate) fn stacked_shifts(x: &[f64], d: usize, coords: &[usize]) -> Vec<f64> {
    coords
        .iter()
        .flat_map(|&k| [shifted(x, d, k, 1.0), shifted(x, d, k, -1.0)])
        .flatten()
        .collect()
}

/// `column(k, (lu, gu, ld, gd))` for each k of `chunk`, from log π and ∇log π of every point at
/// `z` with coordinate k moved up (lu, gu), then down, by its [`curvature_step`]. In parallel over
/// the columns, or, where the problem's calls are costly, all the chunk's shifted states in one
/// call (a row that is not finite then sends the chunk through the parallel path, which finds
/// it).
fn shifted_evaluations<P: Problem<f64> + ?Sized, R: Send>(
    problem: &P,
    anchor: &[f64],
    z: &[f64],
    d: usize,
    chunk: &[usize],
    column: impl Fn(usize, (&[f64], &[f64], &[f64], &[f64])) -> R + Sync,
) -> Result<Vec<R>> {
    let points = z.len() / d;
    if problem.calls_are_costly() {
        let copies = 2 * chunk.len();
        let y = stacked_shifts(z, d, chunk);
        if let Some((lp, g)) = copies_target(problem, anchor, (points, copies), &y)? {
            let (rows, values) = (points, points * d);
            return Ok(chunk
                .iter()
                .enumerate()
                .map(|(c, &k)| {
                    let (u, w) = (2 * c, 2 * c + 1);
                    column(
                        k,
                        (
                            &lp[u * rows..(u + 1) * rows],
                            &g[u * values..(u + 1) * values],
                            &lp[w * rows..(w + 1) * rows],
                            &g[w * values..(w + 1) * values],
                        ),
                    )
                })
                .collect());
        }
    }
    chunk
        .par_iter()
        .map(|&k| {
            let (lu, gu) = evaluate_points(problem, anchor, &shifted(z, d, k, 1.0), d)?;
            let (ld, gd) = evaluate_points(problem, anchor, &shifted(z, d, k, -1.0), d)?;
            Ok(column(k, (&lu, &gu, &ld, &gd)))
        })
        .collect()
}

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
    let per = crate::parallel::rows_per_piece(points, d, problem.calls_are_costly());
    let pieces = crate::share::map_chunks(z, per * d, |b, zb| {
        let rows = zb.len() / d;
        let (mut lp, mut g) = (vec![0.0; rows], vec![0.0; zb.len()]);
        match problem.log_target(anchor, b * per, zb, &mut lp, &mut g) {
            Ok(()) => {}
            Err(LogpError::NonFinite) => {
                for r in 0..rows {
                    let row = row_target(problem, anchor, b * per + r, &zb[r * d..(r + 1) * d])?;
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
    })?;
    let (lp, g): (Vec<Vec<f64>>, Vec<Vec<f64>>) = pieces.into_iter().unzip();
    Ok((lp.concat(), g.concat()))
}

/// The problem's negative Hessians in closed form ([`Problem::neg_hessian`]) for the requests
/// `0..n`, `ask(k)` asking for request k: the first alone, and `None` (nothing more asked) where
/// the problem has none or there is no request; the rest side by side unless its calls are
/// costly, in order. A problem that answers the first but not another is an error of the model.
pub(crate) fn closed_form_each<P: Problem<f64> + ?Sized>(
    problem: &P,
    n: usize,
    ask: impl Fn(usize) -> Option<std::result::Result<Vec<f64>, LogpError>> + Sync,
) -> Option<Vec<std::result::Result<Vec<f64>, LogpError>>> {
    if n == 0 {
        return None;
    }
    let first = ask(0)?;
    let rest = |k: usize| {
        ask(k).unwrap_or_else(|| {
            Err(LogpError::Fatal(format!(
                "the problem gave its curvature in closed form for its first request but not for request {k}"
            )))
        })
    };
    let mut all = vec![first];
    if problem.calls_are_costly() {
        all.extend((1..n).map(rest));
    } else {
        all.par_extend((1..n).into_par_iter().map(rest));
    }
    Some(all)
}

/// The factors A = −∇²log π of the points `which` at `z` from the problem's closed form
/// ([`closed_form_each`]), one evaluation a point where central differences take 2d of all of
/// them; `None` where the problem has none. A point whose curvature is not finite gets the
/// identity, as with differences.
fn closed_form_curvatures<P: Problem<f64> + ?Sized>(
    problem: &P,
    anchor: &[f64],
    z: &[f64],
    d: usize,
    which: &[bool],
    dense: bool,
) -> Option<Result<Vec<Option<Factor>>>> {
    let needed: Vec<usize> = (0..which.len()).filter(|&p| which[p]).collect();
    let hessians = closed_form_each(problem, needed.len(), |k| {
        let p = needed[k];
        problem.neg_hessian(anchor, p, &z[p * d..(p + 1) * d])
    })?;
    let factored: Vec<Result<Factor>> = hessians
        .into_par_iter()
        .map(|h| match h {
            Ok(h) if dense => Ok(factor_hessian(h, d, dense)),
            Ok(h) => Ok(factor_hessian(
                (0..d).map(|j| h[j * d + j]).collect(),
                d,
                dense,
            )),
            Err(LogpError::NonFinite) => Ok(Factor::identity(d)),
            Err(e) => Err(SagdError::Model(e)),
        })
        .collect();
    let mut factors = vec![None; which.len()];
    for (p, f) in needed.into_iter().zip(factored) {
        match f {
            Ok(f) => factors[p] = Some(f),
            Err(e) => return Some(Err(e)),
        }
    }
    Some(Ok(factors))
}

/// The factors A = −∇²log π of the points `which` at `z`, by central differences of the gradient:
/// coordinate k of every point moved at once, 2d evaluations of all points in all.
pub(super) fn curvatures<P: Problem<f64> + ?Sized>(
    problem: &P,
    anchor: &[f64],
    z: &[f64],
    d: usize,
    which: &[bool],
    dense: bool,
) -> Result<Vec<Option<Factor>>> {
    if let Some(factors) = closed_form_curvatures(problem, anchor, z, d, which, dense) {
        return factors;
    }
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
    // Columns in parallel, a chunk at a time (the chunk's columns of every point are held at
    // once), then added in column order: the same bits on any number of threads.
    for chunk in (0..d)
        .collect::<Vec<_>>()
        .chunks(columns_at_once(problem, points, d))
    {
        let columns = shifted_evaluations(
            problem,
            anchor,
            z,
            d,
            chunk,
            |k, (lu, gu, ld, gd)| -> Vec<Option<Vec<f64>>> {
                (0..points)
                    .map(|p| {
                        (which[p] && !lu[p].is_nan() && !ld[p].is_nan()).then(|| {
                            let step = curvature_step(z[p * d + k]);
                            let column = |j: usize| -(gu[p * d + j] - gd[p * d + j]) / (2.0 * step);
                            if dense {
                                (0..d).map(column).collect()
                            } else {
                                vec![column(k)]
                            }
                        })
                    })
                    .collect()
            },
        )?;
        for (&k, column) in chunk.iter().zip(columns) {
            for (p, c) in column.into_iter().enumerate().filter(|(p, _)| which[*p]) {
                let Some(c) = c else {
                    broken[p] = true;
                    continue;
                };
                if dense {
                    for (j, v) in c.into_iter().enumerate() {
                        h[p][j * d + k] += 0.5 * v;
                        h[p][k * d + j] += 0.5 * v;
                    }
                } else {
                    h[p][k] = c[0];
                }
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

/// Every point's mode and precision, from `z0`: Newton ascent preconditioned by `previous` (the
/// last M-step's factors), a new Hessian taken only when a full step fails to go up, then A at
/// the mode. The points go in lockstep: each step of every point's ascent takes one evaluation of
/// all points (a few calls of the model rather than one per point), and new Hessians are taken
/// together for the points that need one. Where log π is not finite at `z0`, a point keeps `z0`
/// and its previous factor (or the identity).
pub(super) fn settle_together<P: Problem<f64> + ?Sized>(
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
        let dirs = newton_directions(&factors, &g, d);
        for p in 0..points {
            let dec: f64 = (0..d).map(|j| g[p * d + j] * dirs[p][j]).sum();
            if dec.is_nan() || dec <= 1e-10 {
                active[p] = false;
            }
        }
        if !active.iter().any(|a| *a) {
            break;
        }
        let (t, moved) = line_searches(
            problem,
            anchor,
            d,
            &dirs,
            &active,
            (&mut z, &mut g, &mut lp),
        )?;
        // A stale metric that needed a line search gets a new Hessian; a fresh
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

/// Each point's Newton direction H⁻¹∇ from its factor.
fn newton_directions(factors: &[Factor], g: &[f64], d: usize) -> Vec<Vec<f64>> {
    (0..factors.len())
        .into_par_iter()
        .map(|p| {
            let mut dir = g[p * d..(p + 1) * d].to_vec();
            factors[p].solve_lower(&mut dir);
            factors[p].solve_upper(&mut dir);
            dir
        })
        .collect()
}

/// Every active point's backtracking search along its direction, all points' trial states in one
/// pass: a point moves (its state, gradient and target updated) at the first of steps 1, ½, …
/// (at most 30) where its target rises. Each point's last step, and whether it moved.
#[allow(clippy::type_complexity)]
fn line_searches<P: Problem<f64> + ?Sized>(
    problem: &P,
    anchor: &[f64],
    d: usize,
    dirs: &[Vec<f64>],
    active: &[bool],
    (z, g, lp): (&mut [f64], &mut [f64], &mut [f64]),
) -> Result<(Vec<f64>, Vec<bool>)> {
    let points = active.len();
    let mut t = vec![1.0; points];
    let mut pending = active.to_vec();
    let mut moved = vec![false; points];
    for _ in 0..30 {
        let mut y = z.to_vec();
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
    Ok((t, moved))
}
