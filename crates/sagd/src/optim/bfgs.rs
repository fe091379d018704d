//! BFGS with a backtracking (Armijo) line search, for small smooth problems with exact gradients:
//! the EM example's direct maximisation of the log-likelihood.

use crate::error::Result;

/// The outcome of [`minimize`].
#[derive(Clone, Debug, PartialEq)]
pub struct BfgsResult {
    /// The minimiser found.
    pub x: Vec<f64>,
    /// f there.
    pub f: f64,
    /// max |∂f/∂x_j| there.
    pub grad_max: f64,
    /// Iterations taken.
    pub iterations: usize,
    /// Whether the gradient fell below the tolerance, or f cannot resolve a better point.
    pub converged: bool,
}

/// Roundings of f within which a full quasi-Newton step's gain is lost.
const FLAT: f64 = 4.0;

/// Minimises f from `x0` until max |∇f| ≤ `gtol` or `max_iter` iterations, or until no
/// representable step lowers f and a full step would gain less than f's rounding (also
/// `converged`: the minimum as closely as f resolves it). `f` returns the value
/// and the gradient.
pub fn minimize(
    mut f: impl FnMut(&[f64]) -> Result<(f64, Vec<f64>)>,
    x0: &[f64],
    gtol: f64,
    max_iter: usize,
) -> Result<BfgsResult> {
    let n = x0.len();
    let mut x = x0.to_vec();
    let (mut fx, mut g) = f(&x)?;
    let mut h = vec![0.0; n * n];
    for i in 0..n {
        h[i * n + i] = 1.0;
    }
    let gmax = |g: &[f64]| g.iter().fold(0.0f64, |m, v| m.max(v.abs()));
    let identity = |h: &mut [f64]| {
        h.iter_mut()
            .enumerate()
            .for_each(|(k, v)| *v = if k % (n + 1) == 0 { 1.0 } else { 0.0 });
    };
    let mut it = 0;
    // Whether H is the identity (steepest descent), which a failed search restarts from.
    let mut fresh = true;
    while it < max_iter && gmax(&g) > gtol {
        it += 1;
        let mut p: Vec<f64> = (0..n)
            .map(|i| -(0..n).map(|j| h[i * n + j] * g[j]).sum::<f64>())
            .collect();
        let mut slope: f64 = p.iter().zip(&g).map(|(a, b)| a * b).sum();
        if slope >= 0.0 {
            // Not a descent direction: restart from steepest descent.
            identity(&mut h);
            fresh = true;
            p = g.iter().map(|v| -v).collect();
            slope = -g.iter().map(|v| v * v).sum::<f64>();
        }
        let found = line_search(&mut f, &x, fx, &p, slope)?;
        let (x_new, f_new, g_new) = match found {
            Ok(next) => next,
            Err(resolved) if resolved || fresh => {
                return Ok(BfgsResult {
                    grad_max: gmax(&g),
                    x,
                    f: fx,
                    iterations: it,
                    converged: gmax(&g) <= gtol || resolved,
                });
            }
            Err(_) => {
                // H has gone astray (a flat direction, as a variance going to zero, grows
                // its entries while the gradient is at f's noise): once more from steepest
                // descent.
                identity(&mut h);
                fresh = true;
                continue;
            }
        };
        fresh = false;
        let s: Vec<f64> = x_new.iter().zip(&x).map(|(a, b)| a - b).collect();
        let y: Vec<f64> = g_new.iter().zip(&g).map(|(a, b)| a - b).collect();
        inverse_hessian_update(&mut h, &s, &y);
        x = x_new;
        fx = f_new;
        g = g_new;
    }
    let converged = gmax(&g) <= gtol;
    Ok(BfgsResult {
        grad_max: gmax(&g),
        x,
        f: fx,
        iterations: it,
        converged,
    })
}

/// [`minimize`] of an f that cannot be evaluated everywhere: a trial point where f fails (far
/// out, where a model's rates overflow and a latent mode cannot be found) counts as +∞, no
/// better than any, so the line search steps back from it; an error at `x0` stands.
pub(crate) fn minimize_where_defined(
    mut f: impl FnMut(&[f64]) -> Result<(f64, Vec<f64>)>,
    x0: &[f64],
    gtol: f64,
    max_iter: usize,
) -> Result<BfgsResult> {
    let objective = |x: &[f64]| match f(x) {
        Err(_) if x != x0 => Ok((f64::INFINITY, vec![f64::NAN; x.len()])),
        done => done,
    };
    minimize(objective, x0, gtol, max_iter)
}

/// The first of steps 1, ½, ¼, … along `p` from `x` that lowers f by Armijo's rule (1e-4 of the
/// slope): the point, f and ∇f there. `Err(resolved)` where no shorter step can lower f by a
/// detectable amount: `resolved` where even a full step would gain within a few roundings of f
/// (the minimum as closely as f can tell it), otherwise the search failed. (Accepting a step that
/// leaves x where it is would spin to `max_iter`.)
#[allow(clippy::type_complexity)]
fn line_search(
    f: &mut impl FnMut(&[f64]) -> Result<(f64, Vec<f64>)>,
    x: &[f64],
    fx: f64,
    p: &[f64],
    slope: f64,
) -> Result<std::result::Result<(Vec<f64>, f64, Vec<f64>), bool>> {
    let mut step = 1.0;
    loop {
        let xt: Vec<f64> = x.iter().zip(p).map(|(a, b)| a + step * b).collect();
        let ulp = f64::EPSILON * fx.abs().max(1.0);
        if xt == x || step < 1e-20 || -step * slope <= ulp {
            return Ok(Err(-slope <= FLAT * ulp));
        }
        let (ft, gt) = f(&xt)?;
        if ft.is_finite() && ft <= fx + 1e-4 * step * slope {
            return Ok(Ok((xt, ft, gt)));
        }
        step *= 0.5;
    }
}

/// BFGS's update of the inverse Hessian `h` (n × n, row-major) from the step `s` and the change
/// of gradient `y`: H ← (I − ρ s yᵀ) H (I − ρ y sᵀ) + ρ s sᵀ, ρ = 1/sᵀy; skipped where sᵀy ≤ 0.
fn inverse_hessian_update(h: &mut [f64], s: &[f64], y: &[f64]) {
    let n = s.len();
    let sy: f64 = s.iter().zip(y).map(|(a, b)| a * b).sum();
    if sy > 1e-300 {
        let rho = 1.0 / sy;
        let hy: Vec<f64> = (0..n)
            .map(|i| (0..n).map(|j| h[i * n + j] * y[j]).sum())
            .collect();
        let yhy: f64 = y.iter().zip(&hy).map(|(a, b)| a * b).sum();
        for i in 0..n {
            for j in 0..n {
                h[i * n + j] +=
                    -rho * (hy[i] * s[j] + s[i] * hy[j]) + (rho * rho * yhy + rho) * s[i] * s[j];
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_minimum_of_rosenbrock() {
        let r = minimize(
            |x| {
                let (a, b) = (x[0], x[1]);
                let f = (1.0 - a).powi(2) + 100.0 * (b - a * a).powi(2);
                Ok((
                    f,
                    vec![
                        -2.0 * (1.0 - a) - 400.0 * a * (b - a * a),
                        200.0 * (b - a * a),
                    ],
                ))
            },
            &[-1.2, 1.0],
            1e-10,
            500,
        )
        .unwrap();
        assert!(r.converged, "{r:?}");
        assert!(
            (r.x[0] - 1.0).abs() < 1e-8 && (r.x[1] - 1.0).abs() < 1e-8,
            "{r:?}"
        );
    }

    #[test]
    fn stops_where_f_cannot_resolve_a_better_point() {
        // f = 1000 + ‖x − 1‖², its gradient off by 1e-9 (as a quadrature's is, at its
        // resolution): near x = 1 no move changes f (its rounding is 1e-13) and the gradient
        // never reaches a tolerance of 0. The search must end there, converged, instead of
        // spinning to max_iter on steps that leave f (and soon x) where they are.
        let mut calls = 0;
        let r = minimize(
            |x| {
                calls += 1;
                let f = 1000.0 + x.iter().map(|v| (v - 1.0).powi(2)).sum::<f64>();
                Ok((f, x.iter().map(|v| 2.0 * (v - 1.0) + 1e-9).collect()))
            },
            &[3.0, -2.0],
            0.0,
            500,
        )
        .unwrap();
        assert!(r.converged, "{r:?}");
        assert!(r.iterations < 50 && calls < 200, "{r:?}, {calls} calls");
        assert!(r.x.iter().all(|v| (v - 1.0).abs() < 1e-6), "{r:?}");
    }
}
