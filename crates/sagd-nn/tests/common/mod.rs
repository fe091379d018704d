//! What the engine's integration tests share.

use sagd::model::LatentModel;

/// A posterior's ∇u (from `log_joint`) and ∇θ (from `add_grad_theta`) at the latents `u` of the
/// points `rows`, against central differences of step `h` of its log density summed over them:
/// each within `tol` · (1 + |difference|). `what` names the case in a failure.
pub fn check_posterior_gradients<M: LatentModel<f32> + ?Sized>(
    what: &str,
    post: &M,
    theta: &[f32],
    (rows, u): (&[usize], &[f32]),
    (h, tol): (f32, f64),
) {
    let n = rows.len();
    let total = |th: &[f32], uu: &[f32]| -> f64 {
        let (mut l, mut g) = (vec![0.0f32; n], vec![0.0f32; uu.len()]);
        post.log_joint(th, rows, uu, &mut l, &mut g).unwrap();
        l.iter().map(|v| *v as f64).sum()
    };
    let central = |f: &dyn Fn(f32) -> f64| (f(h) - f(-h)) / (2.0 * h as f64);
    let (mut lp, mut gu) = (vec![0.0f32; n], vec![0.0f32; u.len()]);
    post.log_joint(theta, rows, u, &mut lp, &mut gu).unwrap();
    for r in 0..u.len() {
        let fd = central(&|s| {
            let mut moved = u.to_vec();
            moved[r] += s;
            total(theta, &moved)
        });
        assert!(
            (gu[r] as f64 - fd).abs() < tol * (1.0 + fd.abs()),
            "{what}, ∂u[{r}]: {} vs {fd}",
            gu[r]
        );
    }
    let mut gt = vec![0.0f32; theta.len()];
    post.add_grad_theta(theta, rows, u, &mut gt).unwrap();
    for j in 0..theta.len() {
        let fd = central(&|s| {
            let mut moved = theta.to_vec();
            moved[j] += s;
            total(&moved, u)
        });
        assert!(
            (gt[j] as f64 - fd).abs() < tol * (1.0 + fd.abs()),
            "{what}, ∂θ[{j}]: {} vs {fd}",
            gt[j]
        );
    }
}
