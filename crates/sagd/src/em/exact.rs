//! The exact references of a one-dimensional latent model: EM's updates with ∇Q by quadrature,
//! and the maximum-likelihood estimate by BFGS on the quadrature log-likelihood.

use super::*;

/// Exact gradient ascent: the same M-steps as automated EM (T updates of step α from θ_k), with
/// ∇Q(θ; θ_k)/n by posterior-centred Gauss-Hermite quadrature. Returns θ₀ and θ after every update.
/// One-dimensional latents only.
#[doc(hidden)]
pub fn exact_gd<M: LatentModel<f64>>(
    model: &M,
    theta0: &[f64],
    msteps: usize,
    updates_per_mstep: usize,
    alpha: f64,
    gh: &GaussHermite,
) -> Result<Vec<Vec<f64>>> {
    let n = model.n_data() as f64;
    let mut theta = theta0.to_vec();
    let mut path = vec![theta.clone()];
    for _ in 0..msteps {
        let rule = posterior_rule(model, &theta, gh)?;
        for _ in 0..updates_per_mstep {
            let g = expected_grad(model, &theta, &rule, n)?;
            for (t, gi) in theta.iter_mut().zip(&g) {
                *t += alpha * gi;
            }
            path.push(theta.clone());
        }
    }
    Ok(path)
}

/// The maximum-likelihood estimate by BFGS on ℓ(θ) (quadrature value, Fisher-identity gradient),
/// from `start`. The result's `f` is −ℓ at the optimum.
#[doc(hidden)]
pub fn maximum_likelihood<M: LatentModel<f64>>(
    model: &M,
    start: &[f64],
    gh: &GaussHermite,
) -> Result<BfgsResult> {
    let n = model.n_data() as f64;
    let mut r = bfgs::minimize(
        |th| {
            let rule = posterior_rule(model, th, gh)?;
            let g = expected_grad(model, th, &rule, n)?;
            Ok((-rule.log_likelihood() / n, g.iter().map(|v| -v).collect()))
        },
        start,
        1e-10,
        500,
    )?;
    r.f *= n;
    r.grad_max *= n;
    Ok(r)
}
