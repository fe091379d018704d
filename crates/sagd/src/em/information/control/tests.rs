//! The score's control variate against closed forms: the colouring of banded and dense
//! envelopes, the closed-form curvatures against the differences', and the corrected score on
//! Gaussian posteriors.

use super::*;
use crate::metric::test_target::{tridiagonal, GaussianTarget};
use crate::metric::{Preconditioned, Preconditioner};

/// The columns of a tridiagonal envelope take three colours, a dense one d.
#[test]
fn banded_envelopes_take_few_colours() {
    let d = 12;
    let f = Factor::cholesky(&tridiagonal(d), d).unwrap();
    let (groups, _) = colour_columns(&f, usize::MAX).unwrap();
    assert_eq!(groups.len(), 3);
    let dense: Vec<f64> = (0..d * d)
        .map(|k| if k % (d + 1) == 0 { d as f64 } else { 0.5 })
        .collect();
    let f = Factor::cholesky(&dense, d).unwrap();
    assert_eq!(colour_columns(&f, usize::MAX).unwrap().0.len(), d);
    assert!(colour_columns(&f, 10).is_none());
}

/// z ~ N(μ(θ), P(θ)⁻¹) with P tridiagonal, P_tt = e^θ₀ + 1, P_t,t+1 = −θ₁/2, μ_t = θ₂ · t/d:
/// log p is quadratic in z, so the control is ∇θ log p less its mean, exactly; each draw's
/// corrected score is the closed form to rounding.
fn precision(d: usize, th: &[f64]) -> Vec<f64> {
    let mut a = vec![0.0; d * d];
    for i in 0..d {
        a[i * d + i] = th[0].exp() + 1.0;
        if i > 0 {
            a[i * d + i - 1] = -0.5 * th[1];
            a[(i - 1) * d + i] = -0.5 * th[1];
        }
    }
    a
}

fn quadratic(d: usize) -> GaussianTarget {
    GaussianTarget {
        d,
        p: 3,
        parts: Box::new(move |th: &[f64]| {
            let mean = (0..d).map(|t| th[2] * t as f64 / d as f64).collect();
            (mean, precision(d, th))
        }),
    }
}

/// [`quadratic`] with its negative Hessian, the precision, in closed form.
struct ClosedForm(GaussianTarget);

impl Problem<f64> for ClosedForm {
    fn theta_dim(&self) -> usize {
        self.0.theta_dim()
    }
    fn n_chains(&self) -> usize {
        self.0.n_chains()
    }
    fn chain_dim(&self) -> usize {
        self.0.chain_dim()
    }
    fn log_target(
        &self,
        anchor: &[f64],
        first_row: usize,
        xi: &[f64],
        logp: &mut [f64],
        grad: &mut [f64],
    ) -> std::result::Result<(), LogpError> {
        self.0.log_target(anchor, first_row, xi, logp, grad)
    }
    fn add_grad_f(
        &self,
        theta: &[f64],
        first_row: usize,
        xi: &[f64],
        grad: &mut [f64],
    ) -> std::result::Result<(), LogpError> {
        self.0.add_grad_f(theta, first_row, xi, grad)
    }
    fn neg_hessian(
        &self,
        anchor: &[f64],
        _row: usize,
        _xi: &[f64],
    ) -> Option<std::result::Result<Vec<f64>, LogpError>> {
        Some(Ok((self.0.parts)(anchor).1))
    }
}

const TH: [f64; 3] = [0.3, 0.8, 1.5];

/// `problem`'s dense metric at [`TH`] from a chain at 0.2, and its control there.
fn metric_and_control<P: Problem<f64>>(problem: P, d: usize) -> (Metric, ScoreControl) {
    let mut pre = Preconditioned::new(problem, 1);
    pre.adapt(&TH, &vec![0.2; d], Preconditioner::Dense)
        .unwrap();
    let metric = pre.metric().unwrap().clone();
    let steps: Vec<f64> = TH.iter().map(|t| 1e-4 * (1.0 + t.abs())).collect();
    let control = ScoreControl::at(&pre.inner, &metric, &TH, &steps)
        .unwrap()
        .expect("a dense metric gets a control");
    (metric, control)
}

/// The metric and the control from the closed-form Hessians are those of central
/// differences of the gradient (exact for a quadratic log p, to their rounding: the
/// differences of differences lose about eight digits of the curvature's slope C_k).
#[test]
fn the_closed_form_control_is_the_differences_control() {
    let d = 8;
    let (fm, fc) = metric_and_control(quadratic(d), d);
    let (cm, cc) = metric_and_control(ClosedForm(quadratic(d)), d);
    let close = |a: &[f64], b: &[f64], tol: f64, what: &str| {
        let scale = a.iter().fold(1.0f64, |m, v| m.max(v.abs()));
        for (x, y) in a.iter().zip(b) {
            assert!((x - y).abs() < tol * scale, "{what}: {x} against {y}");
        }
    };
    let (fi, ci) = (
        fm.factor(0).inverse_on_envelope(),
        cm.factor(0).inverse_on_envelope(),
    );
    close(&fi, &ci, 1e-8, "the metric's inverse");
    close(fm.modes(), cm.modes(), 1e-8, "the modes");
    close(&fc.slope, &cc.slope, 1e-6, "b_k");
    close(&fc.offset, &cc.offset, 1e-4, "tr(A⁻¹C_k)");
    for k in 0..3 {
        close(&fc.curvature[0][k], &cc.curvature[0][k], 1e-4, "C_k");
    }
}

#[test]
fn on_a_gaussian_posterior_the_corrected_score_is_its_mean_at_every_draw() {
    let d = 8;
    corrected_score_is_its_mean(quadratic(d), d);
    corrected_score_is_its_mean(ClosedForm(quadratic(d)), d);
}

/// Each draw's score less `problem`'s control is the score's mean, on [`quadratic`].
fn corrected_score_is_its_mean<P: Problem<f64>>(problem: P, d: usize) {
    let model = quadratic(d);
    let th = TH;
    let (metric, control) = metric_and_control(problem, d);
    let metric = &metric;
    // The score's mean: E ∂θ log p = −½ tr(P⁻¹ ∂P) for θ₀, θ₁ (the mean term is zero) and 0
    // for θ₂ (E of a linear function of z − μ).
    let a = precision(d, &th);
    let inverse = crate::linalg::spd_inverse(
        &(0..d)
            .map(|i| a[i * d..(i + 1) * d].to_vec())
            .collect::<Vec<_>>(),
    )
    .unwrap();
    let (mut dp0, mut dp1) = (0.0, 0.0);
    for i in 0..d {
        dp0 += inverse[i][i] * th[0].exp();
        if i > 0 {
            dp1 += 2.0 * inverse[i][i - 1] * -0.5;
        }
    }
    let mean = [-0.5 * dp0, -0.5 * dp1, 0.0];
    for draw in 0..5 {
        let z: Vec<f64> = (0..d)
            .map(|t| (t as f64 * 1.3 + draw as f64).sin() * 2.0)
            .collect();
        let (_, gz) = model.log_p(&th, &z);
        let mut gu = gz.clone();
        let mut u = vec![0.0; d];
        metric.to_u(0, &z, &mut u);
        metric.factor(0).solve_lower(&mut gu);
        // ∇θ log p by central differences.
        let score: Vec<f64> = (0..3)
            .map(|k| {
                let (mut up, mut down) = (th.to_vec(), th.to_vec());
                up[k] += 1e-6;
                down[k] -= 1e-6;
                (model.log_p(&up, &z).0 - model.log_p(&down, &z).0) / 2e-6
            })
            .collect();
        let s = control.rows(metric, &z, &gu);
        for k in 0..3 {
            let corrected = score[k] - s[k];
            assert!(
                (corrected - mean[k]).abs() < 1e-5 * (1.0 + score[k].abs()),
                "draw {draw}, θ{k}: {corrected} against {} (raw {})",
                mean[k],
                score[k]
            );
        }
    }
}
