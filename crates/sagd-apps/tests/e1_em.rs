//! Automated EM on the paper's Gamma-sigmoid model (E1) against exact gradient ascent and the
//! maximum-likelihood estimate, both by quadrature; the quadrature against brute force.

use sagd::em::{exact_gd, maximum_likelihood, AutomatedEm, EmSettings, StopRule};
use sagd::langevin::Scheme;
use sagd::quadrature::{
    expected_grad, log_likelihood, log_likelihood_trapezoid, posterior_rule, GaussHermite,
};
use sagd::run::Control;
use sagd_apps::e1::GammaSigmoid;

#[path = "../../sagd/tests/common/em.rs"]
mod em_common;

fn data() -> GammaSigmoid {
    GammaSigmoid::simulate(100, 2.0, 0.5, 1).unwrap().0
}

#[test]
fn quadrature_agrees_with_brute_force() {
    let m = data();
    let gh = GaussHermite::new(100);
    for theta in [[0.0, 1.0], [2.0, 0.5], [1.7, 0.9], [-0.5, 2.5], [3.0, -1.0]] {
        let q = log_likelihood(&m, &theta, &gh).unwrap();
        let r = log_likelihood_trapezoid(&m, &theta, -14.0, 14.0, 28_001).unwrap();
        assert!((q - r).abs() < 1e-8, "θ = {theta:?}: {q} vs {r}");
        // Fisher's identity against a central difference of ℓ.
        let rule = posterior_rule(&m, &theta, &gh).unwrap();
        let g = expected_grad(&m, &theta, &rule, 1.0).unwrap();
        for k in 0..2 {
            let h = 1e-5;
            let (mut tp, mut tm) = (theta, theta);
            tp[k] += h;
            tm[k] -= h;
            let fd = (log_likelihood(&m, &tp, &gh).unwrap()
                - log_likelihood(&m, &tm, &gh).unwrap())
                / (2.0 * h);
            assert!(
                (g[k] - fd).abs() < 1e-5 * (1.0 + fd.abs()),
                "∂ℓ/∂θ{k} at {theta:?}: {} vs {fd}",
                g[k]
            );
        }
    }
}

fn endpoint(m: &GammaSigmoid, scheme: Scheme, seed: u64) -> Vec<f64> {
    let mut st = EmSettings::paper_e1();
    st.sagd.langevin.scheme = scheme;
    AutomatedEm::new(m, st)
        .run(&[0.0, 1.0], seed, None, &mut |_| Control::Continue)
        .unwrap()
        .estimate
}

fn dist(a: &[f64], b: &[f64]) -> f64 {
    ((a[0] - b[0]).powi(2) + (a[1] - b[1]).powi(2)).sqrt()
}

#[test]
fn three_msteps_of_sagd_track_exact_gradient_ascent() {
    // E1 with the paper's settings, 8 chain seeds on one data set: each SAGD endpoint against the
    // exact-GD endpoint, and the mean endpoint's offset against the spread over seeds. The paper's
    // Euler scheme leaves a discretisation bias of about 1.5 spreads in b (posterior variance slightly
    // inflated); BAOAB, at the same cost, removes most of it.
    let m = data();
    let gh = GaussHermite::new(100);
    let exact = exact_gd(&m, &[0.0, 1.0], 3, 100, 0.2, &gh).unwrap();
    let ex_end = exact.last().unwrap().clone();
    let ll_ex = log_likelihood(&m, &ex_end, &gh).unwrap();
    for (scheme, max_offset) in [(Scheme::Euler, 2.0), (Scheme::Baoab, 1.0)] {
        let ends: Vec<Vec<f64>> = (0..8).map(|s| endpoint(&m, scheme, s)).collect();
        let mean: Vec<f64> = (0..2)
            .map(|j| ends.iter().map(|e| e[j]).sum::<f64>() / 8.0)
            .collect();
        let spread = (ends.iter().map(|e| dist(e, &mean).powi(2)).sum::<f64>() / 7.0).sqrt();
        let offset = dist(&mean, &ex_end);
        let d: Vec<f64> = ends.iter().map(|e| dist(e, &ex_end)).collect();
        let gaps: Vec<f64> = ends
            .iter()
            .map(|e| (ll_ex - log_likelihood(&m, e, &gh).unwrap()).abs())
            .collect();
        println!("{scheme:?}: exact {ex_end:?}, mean SAGD {mean:?}, offset {offset:.4}, spread {spread:.4}, distances {d:.3?}, |ℓ gaps| {gaps:.3?}");
        assert!(
            offset < max_offset * spread,
            "{scheme:?}: offset {offset} vs spread {spread}"
        );
        assert!(d.iter().all(|x| *x < 4.0 * spread), "{scheme:?}: {d:?}");
        assert!(gaps.iter().all(|g| *g < 0.5), "{scheme:?}: {gaps:?}");
    }
}

#[test]
fn automated_em_reaches_the_mle() {
    // Tolerance: in log-likelihood, ℓ(θ_MLE) − ℓ(θ̂) < 0.05, i.e. a likelihood-ratio statistic below
    // 0.1: far inside the MLE's own 95% confidence region (2Δℓ < 5.99), so the Monte Carlo and
    // discretisation error is negligible against the estimate's statistical error. With BAOAB, whose
    // discretisation bias is negligible here, the estimate is also within 4 Monte Carlo standard
    // errors (plus 0.01) of the MLE in each coordinate.
    let m = data();
    let gh = GaussHermite::new(100);
    let exact = exact_gd(&m, &[0.0, 1.0], 3, 100, 0.2, &gh).unwrap();
    let mle = maximum_likelihood(&m, exact.last().unwrap(), &gh).unwrap();
    assert!(mle.converged, "{mle:?}");
    for scheme in [Scheme::Euler, Scheme::Baoab] {
        let mut settings = EmSettings {
            max_msteps: 60,
            stopping: Some(StopRule::default()),
            ..EmSettings::paper_e1()
        };
        settings.sagd.langevin.scheme = scheme;
        for seed in 0..2 {
            let tr = AutomatedEm::new(&m, settings.clone())
                .run(&[0.0, 1.0], seed, None, &mut |_| Control::Continue)
                .unwrap();
            let gap = -mle.f - log_likelihood(&m, &tr.estimate, &gh).unwrap();
            println!(
                "{scheme:?} seed {seed}: converged {} after {} M-steps, estimate {:?} ± {:?}, MLE {:?}, ℓ gap {gap:.4}",
                tr.converged,
                tr.msteps.len(),
                tr.estimate,
                tr.estimate_se,
                mle.x
            );
            assert!(tr.converged);
            assert!((0.0..0.05).contains(&gap), "ℓ gap {gap}");
            if scheme == Scheme::Baoab {
                for j in 0..2 {
                    assert!(
                        (tr.estimate[j] - mle.x[j]).abs() < 4.0 * tr.estimate_se[j] + 0.01,
                        "coordinate {j}"
                    );
                }
            }
        }
    }
}

#[test]
fn an_interrupted_em_run_resumes_to_the_same_result() {
    let paper = EmSettings {
        max_msteps: 8,
        stopping: Some(StopRule::default()),
        ..EmSettings::paper_e1()
    };
    resumes(paper, 257);
    // The defaults: Newton M-steps, chains from the modes with the step from their curvature
    // (kept in the checkpoint), and the polish after the M-steps.
    let defaults = EmSettings {
        max_msteps: 4,
        ..EmSettings::default()
    };
    resumes(defaults, 123);
}

/// Stops a run after `stop_at` updates, resumes it from its checkpoint, and checks the result
/// against an uninterrupted run; then that other settings, seeds and starts are refused.
fn resumes(settings: EmSettings, stop_at: usize) {
    let m = data();
    let whole = AutomatedEm::new(&m, settings.clone())
        .run(&[0.0, 1.0], 4, None, &mut |_| Control::Continue)
        .unwrap();

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("em.ckpt");
    let mut em = AutomatedEm::new(&m, settings.clone());
    em.checkpoint = Some((path.clone(), 40));
    let mut updates = 0;
    // Stop in the middle of the third M-step, between two checkpoints.
    let part = em
        .run(&[0.0, 1.0], 4, None, &mut |ev| {
            if let sagd::em::EmEvent::Update { .. } = ev {
                updates += 1;
            }
            if updates == stop_at {
                Control::Stop
            } else {
                Control::Continue
            }
        })
        .unwrap();
    assert!(part.interrupted);
    assert_eq!(part.path.len(), stop_at + 1);
    let resumed = em
        .run(&[0.0, 1.0], 4, Some(&path), &mut |_| Control::Continue)
        .unwrap();
    // Compared as printed: a damped step's gap is NaN, which `==` never equals.
    assert_eq!(format!("{resumed:?}"), format!("{whole:?}"));

    // Other settings are refused.
    let other = AutomatedEm::new(
        &m,
        EmSettings {
            updates_per_mstep: settings.updates_per_mstep + 1,
            ..settings
        },
    );
    let err = other
        .run(&[0.0, 1.0], 4, Some(&path), &mut |_| Control::Continue)
        .unwrap_err()
        .to_string();
    assert!(err.contains("other settings"), "{err}");
    // So is another seed or another start.
    for (theta0, seed) in [([0.0, 1.0], 5), ([0.1, 1.0], 4)] {
        let err = em
            .run(&theta0, seed, Some(&path), &mut |_| Control::Continue)
            .unwrap_err()
            .to_string();
        assert!(err.contains("other settings or data"), "{err}");
    }
}

#[test]
fn check_gradients_passes_the_gamma_sigmoid_model_and_names_a_wrong_derivative() {
    use sagd::error::LogpError;
    use sagd::model::{check_gradients, LatentModel};
    let (model, z) = GammaSigmoid::simulate(50, 1.0, 0.5, 3).unwrap();
    let theta = [0.8, 0.3];
    let report = check_gradients(&model, &theta, &z, 1e-5).unwrap();
    assert!(report.passes(1e-6), "{report}");

    // The same model with ∂/∂b off by 1%: the report must point at θ coordinate 1.
    struct Wrong<'a>(&'a GammaSigmoid);
    impl LatentModel<f64> for Wrong<'_> {
        fn n_data(&self) -> usize {
            self.0.n_data()
        }
        fn latent_dim(&self) -> usize {
            1
        }
        fn theta_dim(&self) -> usize {
            2
        }
        fn log_joint(
            &self,
            theta: &[f64],
            data: &[usize],
            z: &[f64],
            logp: &mut [f64],
            grad_z: &mut [f64],
        ) -> Result<(), LogpError> {
            self.0.log_joint(theta, data, z, logp, grad_z)
        }
        fn add_grad_theta(
            &self,
            theta: &[f64],
            data: &[usize],
            z: &[f64],
            grad_theta: &mut [f64],
        ) -> Result<(), LogpError> {
            let mut g = [0.0; 2];
            self.0.add_grad_theta(theta, data, z, &mut g)?;
            grad_theta[0] += g[0];
            grad_theta[1] += 1.01 * g[1];
            Ok(())
        }
    }
    let bad = check_gradients(&Wrong(&model), &theta, &z, 1e-5).unwrap();
    assert!(!bad.passes(1e-4), "{bad}");
    assert_eq!(bad.theta.unwrap().coordinate, 1, "{bad}");
    assert!(bad.z.unwrap().error < 1e-6, "{bad}");
    assert!(bad.to_string().contains("coordinate 1"), "{bad}");
}

#[test]
fn derived_gradients_equal_the_hand_written_ones() {
    use sagd::model::{check_gradients, Derived, LatentModel};
    let (model, z) = GammaSigmoid::simulate(200, 1.0, 0.5, 11).unwrap();
    let derived = Derived(model.clone());
    let data: Vec<usize> = (0..200).collect();
    for theta in [[1.0, 0.5], [-0.7, 2.0], [3.0, -1.5]] {
        let (mut lp_h, mut gz_h) = (vec![0.0; 200], vec![0.0; 200]);
        let (mut lp_d, mut gz_d) = (vec![0.0; 200], vec![0.0; 200]);
        LatentModel::log_joint(&model, &theta, &data, &z, &mut lp_h, &mut gz_h).unwrap();
        derived
            .log_joint(&theta, &data, &z, &mut lp_d, &mut gz_d)
            .unwrap();
        let (mut gt_h, mut gt_d) = (vec![0.0; 2], vec![0.0; 2]);
        model.add_grad_theta(&theta, &data, &z, &mut gt_h).unwrap();
        derived
            .add_grad_theta(&theta, &data, &z, &mut gt_d)
            .unwrap();
        let close = |a: &[f64], b: &[f64]| {
            a.iter()
                .zip(b)
                .all(|(x, y)| (x - y).abs() <= 1e-11 * x.abs().max(y.abs()).max(1.0))
        };
        assert!(close(&lp_h, &lp_d), "log p at {theta:?}");
        assert!(close(&gz_h, &gz_d), "∇z at {theta:?}");
        assert!(
            close(&gt_h, &gt_d),
            "∇θ at {theta:?}: {gt_h:?} against {gt_d:?}"
        );
        assert!(check_gradients(&derived, &theta, &z, 1e-5)
            .unwrap()
            .passes(1e-6));
    }
}

#[test]
fn the_likelihood_at_the_shape_bound_is_its_limit_as_a_grows() {
    // Data from the model and data beyond its mean's bound of 10 (x in [12, 20)).
    let above = GammaSigmoid::new((0..30).map(|i| 12.0 + 0.27 * i as f64).collect()).unwrap();
    let gh = GaussHermite::new(100);
    for m in [data(), above] {
        let bound = m.loglik_at_shape_bound();
        for b in [-1.5, 0.0, 0.7] {
            // σ(40 + bZ) is 1 to 15 digits over every node that carries weight.
            let l = log_likelihood(&m, &[40.0, b], &gh).unwrap();
            assert!(
                (l - bound).abs() < 1e-9 * bound.abs(),
                "b = {b}: {l} vs {bound}"
            );
        }
    }
}

#[test]
fn the_defaults_fit_the_gamma_sigmoid_model() {
    let (model, _) = GammaSigmoid::simulate(100, 2.0, 0.5, 1).unwrap();
    em_common::fits_with_the_defaults("Gamma-sigmoid", &model, &[0.0, 1.0], &[2.0, 0.5]);
}
