//! The GLMM's own tests, and the small models other rooms of `glmm` test on.

use super::*;
use crate::metric::Factor;
use crate::model::check_gradients;

/// n responses of the family and a design with an intercept and a covariate.
fn responses(family: Family, n: usize) -> (Vec<f64>, Vec<f64>) {
    let y = (0..n)
        .map(|i| match family {
            Family::Gaussian => (i as f64 * 0.7).sin() * 2.0,
            Family::Poisson => (i % 5) as f64,
            Family::Binomial => (i % 4) as f64,
        })
        .collect();
    let x = (0..n).flat_map(|i| [1.0, (i as f64 * 0.3).cos()]).collect();
    (y, x)
}

fn small(family: Family) -> Glmm {
    let n = 12;
    let (y, x) = responses(family, n);
    let z: Vec<f64> = (0..n).flat_map(|i| [1.0, i as f64 / n as f64]).collect();
    let group: Vec<usize> = (0..n).map(|i| i % 3).collect();
    let trials = (family == Family::Binomial).then(|| vec![4.0; n]);
    Glmm::new(family, y, x, &group, z, trials).unwrap()
}

/// Two terms over 24 rows: effects by `a` (4 levels; design `za`, correlated or not) and by
/// `b` (design `zb`), crossed (b with 3 levels: one point) or nested (b's levels within a's:
/// 4 points).
fn two_factor(family: Family, nested: bool, za: Vec<f64>, correlated: bool, zb: Vec<f64>) -> Glmm {
    let n = 24;
    let (y, x) = responses(family, n);
    let a = RandomTerm {
        group: (0..n).map(|i| i % 4).collect(),
        z: za,
        correlated,
    };
    let b = RandomTerm {
        group: (0..n)
            .map(|i| {
                if nested {
                    2 * (i % 4) + (i / 4) % 2
                } else {
                    i % 3
                }
            })
            .collect(),
        z: zb,
        correlated: false,
    };
    let trials = (family == Family::Binomial).then(|| vec![4.0; n]);
    Glmm::with_terms(family, y, x, vec![a, b], trials).unwrap()
}

/// Two terms: correlated slopes by `a` (4 levels) crossed with intercepts by `b` (3 levels)
/// over 24 rows (one point), or nested (b's levels within a's: 4 points).
pub(in crate::glmm) fn two_terms(family: Family, nested: bool) -> Glmm {
    let slopes = (0..24)
        .flat_map(|i| [1.0, (i as f64 * 0.5).sin()])
        .collect();
    two_factor(family, nested, slopes, true, vec![1.0; 24])
}

/// Scalar effects only: intercepts by `a` (4 levels) crossed with a scaled effect by `b` (3
/// levels) over 24 rows (one point), or nested (4 points).
fn scalar_terms(family: Family, nested: bool) -> Glmm {
    let scaled = (0..24).map(|i| 0.5 + (i as f64 * 0.7).cos()).collect();
    two_factor(family, nested, vec![1.0; 24], false, scaled)
}

/// The family's models of every shape above: one term of correlated slopes, and two terms of
/// correlated slopes or of scalar effects, crossed and nested.
fn every_shape(family: Family) -> [Glmm; 5] {
    [
        small(family),
        two_terms(family, false),
        two_terms(family, true),
        scalar_terms(family, false),
        scalar_terms(family, true),
    ]
}

/// Term by term over the rows gives the linear predictors row by row gives, bit for bit, with
/// an offset or without.
#[test]
fn scalar_effects_term_by_term_give_the_rows_bits() {
    for (nested, offset) in [(false, false), (true, false), (false, true), (true, true)] {
        let mut m = scalar_terms(Family::Poisson, nested);
        if offset {
            m.offset = (0..m.n_obs()).map(|i| (i as f64 * 0.9).cos()).collect();
        }
        let theta: Vec<f64> = (0..m.theta_dim()).map(|k| 0.37 * k as f64 - 0.3).collect();
        let factors = m.factors(&theta);
        for c in &m.points {
            let u: Vec<f64> = (0..c.dim).map(|k| (k as f64 * 2.1).sin()).collect();
            let (mut by_rows, mut by_terms) = (vec![0.0; c.rows.len()], vec![1.0; c.rows.len()]);
            m.etas_by_rows(&theta[..m.p], &factors, c.rows.clone(), &u, &mut by_rows);
            m.etas_by_terms(&theta[..m.p], &factors, c.rows.clone(), &u, &mut by_terms);
            let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert_eq!(
                bits(&by_rows),
                bits(&by_terms),
                "nested {nested}, offset {offset}"
            );
        }
    }
}

#[test]
fn gradients_match_central_differences() {
    for family in [Family::Gaussian, Family::Poisson, Family::Binomial] {
        for m in every_shape(family) {
            let theta: Vec<f64> = (0..m.theta_dim()).map(|k| 0.1 * k as f64 - 0.2).collect();
            let z: Vec<f64> = (0..m.n_data() * m.latent_dim())
                .map(|k| (k as f64 * 1.3).sin())
                .collect();
            let check = check_gradients(&m, &theta, &z, 1e-6).unwrap();
            assert!(check.worst_error() < 1e-6, "{family:?}: {check:?}");
        }
    }
}

/// The closed-form −∇²z log p of every point is the central difference of `log_joint`'s ∇z, for
/// every family and shape (the difference's own error is O(h²) of the third derivative: 1e-6
/// of the entries' scale).
#[test]
fn the_closed_form_curvature_is_the_gradient_s_central_difference() {
    for family in [Family::Gaussian, Family::Poisson, Family::Binomial] {
        for m in every_shape(family) {
            let (d, h) = (m.latent_dim(), 1e-5);
            let theta: Vec<f64> = (0..m.theta_dim()).map(|k| 0.1 * k as f64 - 0.2).collect();
            for i in 0..m.n_data() {
                let z: Vec<f64> = (0..d).map(|k| (k as f64 * 1.3 + i as f64).sin()).collect();
                let closed = m
                    .neg_hessian_z(&theta, i, &z)
                    .expect("closed form")
                    .unwrap();
                let grad = |z: &[f64]| {
                    let (mut lp, mut g) = ([0.0], vec![0.0; d]);
                    m.log_joint(&theta, &[i], z, &mut lp, &mut g).unwrap();
                    g
                };
                let scale = closed.iter().fold(1.0f64, |a, v| a.max(v.abs()));
                for j in 0..d {
                    let (mut up, mut down) = (z.clone(), z.clone());
                    up[j] += h;
                    down[j] -= h;
                    let (gu, gd) = (grad(&up), grad(&down));
                    for k in 0..d {
                        let fd = -(gu[k] - gd[k]) / (2.0 * h);
                        assert!(
                            (closed[k * d + j] - fd).abs() < 1e-6 * scale,
                            "{family:?}, point {i}, ({k}, {j}): {} against {fd}",
                            closed[k * d + j]
                        );
                    }
                }
            }
        }
    }
}

/// The fused pass gives `log_joint`'s log densities and ∇z and `add_grad_theta`'s ∇θ, bit for
/// bit (the information's draws take their θ-gradients from it).
#[test]
fn the_fused_pass_gives_the_separate_passes_bits() {
    let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    for family in [Family::Gaussian, Family::Poisson, Family::Binomial] {
        for m in [
            small(family),
            two_terms(family, false),
            scalar_terms(family, true),
        ] {
            let theta: Vec<f64> = (0..m.theta_dim()).map(|k| 0.1 * k as f64 - 0.2).collect();
            let (n, d, p) = (m.n_data(), m.latent_dim(), m.theta_dim());
            let z: Vec<f64> = (0..n * d).map(|k| (k as f64 * 1.3).sin()).collect();
            let data: Vec<usize> = (0..n).collect();
            let (mut lp, mut gz, mut gt) = (vec![0.0; n], vec![0.0; n * d], vec![0.5; p]);
            m.log_joint(&theta, &data, &z, &mut lp, &mut gz).unwrap();
            m.add_grad_theta(&theta, &data, &z, &mut gt).unwrap();
            let (mut lf, mut gzf, mut gtf) = (vec![0.0; n], vec![0.0; n * d], vec![0.5; p]);
            m.log_joint_and_grad_theta(&theta, &data, &z, &mut lf, &mut gzf, &mut gtf)
                .unwrap();
            assert!(m.fuses_grad_theta());
            assert_eq!(bits(&lp), bits(&lf), "{family:?}");
            assert_eq!(bits(&gz), bits(&gzf), "{family:?}");
            assert_eq!(bits(&gt), bits(&gtf), "{family:?}");
        }
    }
}

/// Maximum likelihood's stacked copies of its rows in one call of the model give each
/// copy's own call's numbers.
#[test]
fn stacked_copies_of_the_rows_are_one_call_of_each() {
    use crate::model::{MaximumLikelihood, Problem};
    let m = small(Family::Binomial);
    let ml = MaximumLikelihood::new(&m, 2);
    let (rows, d, copies) = (ml.n_chains(), m.latent_dim(), 3);
    let theta: Vec<f64> = (0..m.theta_dim()).map(|k| 0.2 - 0.1 * k as f64).collect();
    let xi: Vec<f64> = (0..copies * rows * d)
        .map(|k| (k as f64 * 0.7).cos())
        .collect();
    let (mut lp, mut g) = (vec![0.0; copies * rows], vec![0.0; xi.len()]);
    ml.log_target_copies(&theta, 0, copies, &xi, &mut lp, &mut g)
        .unwrap();
    for c in 0..copies {
        let (mut l1, mut g1) = (vec![0.0; rows], vec![0.0; rows * d]);
        ml.log_target(
            &theta,
            0,
            &xi[c * rows * d..(c + 1) * rows * d],
            &mut l1,
            &mut g1,
        )
        .unwrap();
        assert_eq!(&lp[c * rows..(c + 1) * rows], &l1[..]);
        assert_eq!(&g[c * rows * d..(c + 1) * rows * d], &g1[..]);
    }
}

#[test]
fn points_are_the_sets_of_rows_that_share_a_level() {
    // One factor: point j is group j. Crossed: one point with 4·2 + 3 effects. Nested: a
    // point per level of a, with its 2 effects and its 2 sub-levels of b.
    let m = small(Family::Poisson);
    assert_eq!((m.n_data(), m.latent_dim()), (3, 2));
    // Its rows side by side in the model: rows 1, 4, 7 and 10 of the data, in that order.
    let (y, _) = responses(Family::Poisson, 12);
    let group_1: Vec<f64> = [1, 4, 7, 10].iter().map(|&i| y[i]).collect();
    assert_eq!(m.y[m.points[1].rows.clone()], group_1[..]);
    let crossed = two_terms(Family::Poisson, false);
    assert_eq!((crossed.n_data(), crossed.latent_dim()), (1, 11));
    let nested = two_terms(Family::Poisson, true);
    assert_eq!((nested.n_data(), nested.latent_dim()), (4, 4));
    assert_eq!(nested.theta_dim(), 2 + 3 + 1);
}

/// The rows given group by group or interleaved, each point sees its rows in the same order:
/// its log density and gradients have the same bits, and the start is the same θ.
#[test]
fn rows_in_any_order_give_each_point_the_same_bits() {
    for family in [Family::Gaussian, Family::Poisson, Family::Binomial] {
        let interleaved = small(family);
        // The same rows, group by group (each group's rows in their order).
        let n = 12;
        let order: Vec<usize> = (0..3).flat_map(|g| (g..n).step_by(3)).collect();
        let (y, x) = responses(family, n);
        let pick = |v: &[f64], w: usize| in_order(v, w, &order);
        let z: Vec<f64> = (0..n).flat_map(|i| [1.0, i as f64 / n as f64]).collect();
        let group: Vec<usize> = order.iter().map(|i| i % 3).collect();
        let trials = (family == Family::Binomial).then(|| vec![4.0; n]);
        let grouped = Glmm::new(
            family,
            pick(&y, 1),
            pick(&x, 2),
            &group,
            pick(&z, 2),
            trials,
        )
        .unwrap();
        let theta: Vec<f64> = (0..grouped.theta_dim())
            .map(|k| 0.2 * k as f64 - 0.3)
            .collect();
        let d = grouped.latent_dim();
        let u: Vec<f64> = (0..3 * d).map(|k| (k as f64 * 1.3).sin()).collect();
        let bits = |m: &Glmm| {
            let (mut lp, mut g, mut gt) = (vec![0.0; 3], vec![0.0; 3 * d], vec![0.0; theta.len()]);
            m.log_joint_and_grad_theta(&theta, &[0, 1, 2], &u, &mut lp, &mut g, &mut gt)
                .unwrap();
            lp.iter()
                .chain(&g)
                .chain(&gt)
                .map(|v| v.to_bits())
                .collect::<Vec<_>>()
        };
        assert_eq!(bits(&interleaved), bits(&grouped), "{family:?}");
        assert_eq!(
            interleaved.y, grouped.y,
            "{family:?}: stored group by group"
        );
    }
}

/// log N(y; Xβ, σ²W⁻¹ + A Aᵀ) from the n × n covariance itself (W the prior weights, I
/// without).
fn dense_gaussian(m: &Glmm, theta: &[f64]) -> f64 {
    let factors = m.factors(theta);
    let (_, log_sigma) = m.scale(theta);
    let n = m.y.len();
    // Every point's effects in columns of their own.
    let dim = m.latent_dim * m.n_data();
    let mut a = vec![0.0; n * dim];
    for (c, point) in m.points.iter().enumerate() {
        for i in point.rows.clone() {
            m.row_design(&factors, i, |k, v| a[i * dim + c * m.latent_dim + k] += v);
        }
    }
    let mut cov = vec![0.0; n * n];
    for i in 0..n {
        for j in 0..n {
            cov[i * n + j] = (0..dim)
                .map(|k| a[i * dim + k] * a[j * dim + k])
                .sum::<f64>()
                + if i == j {
                    (2.0 * log_sigma).exp() / m.trials[i]
                } else {
                    0.0
                };
        }
    }
    let f = Factor::cholesky(&cov, n).unwrap();
    let mut r: Vec<f64> = (0..n)
        .map(|i| m.y[i] - m.fixed_part(&theta[..m.p], i))
        .collect();
    f.solve_lower(&mut r);
    -0.5 * n as f64 * LN_2PI - 0.5 * f.log_det() - 0.5 * r.iter().map(|v| v * v).sum::<f64>()
}

#[test]
fn the_gaussian_closed_form_is_the_dense_normal_density() {
    let m = two_terms(Family::Gaussian, false);
    let theta: Vec<f64> = (0..m.theta_dim()).map(|k| 0.1 * k as f64 - 0.2).collect();
    let l = m.log_likelihood(&theta, 0).unwrap();
    assert_eq!(l.method, LikelihoodMethod::Exact);
    let want = dense_gaussian(&m, &theta);
    assert!((l.value - want).abs() < 1e-9, "{} vs {want}", l.value);
    // And with one effect per point, the closed form is the quadrature.
    let one = small(Family::Gaussian);
    let one_q = Glmm::new(
        Family::Gaussian,
        one.y.clone(),
        one.x.clone(),
        &(0..12).map(|i| i % 3).collect::<Vec<_>>(),
        vec![1.0; 12],
        None,
    )
    .unwrap();
    let th = [0.3, -0.2, -0.4, 0.1];
    let q = one_q.log_likelihood(&th, 0).unwrap();
    assert_eq!(q.method, LikelihoodMethod::Quadrature);
    let want = dense_gaussian(&one_q, &th);
    assert!((q.value - want).abs() < 1e-8, "{} vs {want}", q.value);
}

/// Prior weights (row i's variance σ²/wᵢ): the closed form (two terms), the sums the exact fit
/// maximises and the rows' quadrature (one effect per point) each give the dense normal
/// density, the rows' gradients are their central differences, and weights of 1 give the
/// unweighted model's bits.
#[test]
fn weighted_gaussian_likelihoods_are_the_dense_density() {
    let weights = |m: &Glmm| -> Vec<f64> { (0..m.n_obs()).map(|i| 0.5 + (i % 4) as f64).collect() };
    let plain = two_terms(Family::Gaussian, false);
    let m = plain.with_weights(&weights(&plain)).unwrap();
    let theta: Vec<f64> = (0..m.theta_dim()).map(|k| 0.1 * k as f64 - 0.2).collect();
    let want = dense_gaussian(&m, &theta);
    let l = m.log_likelihood(&theta, 0).unwrap();
    assert!((l.value - want).abs() < 1e-9, "{} vs {want}", l.value);
    let pieces = m.gaussian_log_likelihood(&theta).unwrap();
    assert!((pieces - want).abs() < 1e-9, "{pieces} vs {want}");
    assert!((want - dense_gaussian(&plain, &theta)).abs() > 0.1);
    let z: Vec<f64> = (0..m.n_data() * m.latent_dim())
        .map(|k| (k as f64 * 1.3).sin())
        .collect();
    let check = check_gradients(&m, &theta, &z, 1e-6).unwrap();
    assert!(check.worst_error() < 1e-6, "{check:?}");
    let small = small(Family::Gaussian);
    let groups: Vec<usize> = (0..12).map(|i| i % 3).collect();
    let (y, x) = (small.y.clone(), small.x.clone());
    let one = Glmm::new(Family::Gaussian, y, x, &groups, vec![1.0; 12], None).unwrap();
    let one = one.with_weights(&weights(&one)).unwrap();
    let th = [0.3, -0.2, -0.4, 0.1];
    let q = one.log_likelihood(&th, 0).unwrap();
    assert_eq!(q.method, LikelihoodMethod::Quadrature);
    let want = dense_gaussian(&one, &th);
    assert!((q.value - want).abs() < 1e-8, "{} vs {want}", q.value);
    let ones = plain.with_weights(&vec![1.0; plain.n_obs()]).unwrap();
    let bits = |m: &Glmm| m.log_likelihood(&theta, 0).unwrap().value.to_bits();
    assert_eq!(bits(&ones), bits(&plain));
}

#[test]
fn weights_outside_the_gaussian_family_or_not_positive_are_refused() {
    let m = small(Family::Poisson);
    let err = m
        .with_weights(&vec![1.0; m.n_obs()])
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("Gaussian family") && err.contains("offset"),
        "{err}"
    );
    let g = small(Family::Gaussian);
    let err = g.with_weights(&[1.0; 2]).unwrap_err().to_string();
    assert!(err.contains("one weight per row"), "{err}");
    let mut w = vec![1.0; g.n_obs()];
    w[3] = 0.0;
    let err = g.with_weights(&w).unwrap_err().to_string();
    assert!(
        err.contains("0 at row 3") && err.contains("positive"),
        "{err}"
    );
}

#[test]
fn importance_sampling_agrees_with_the_exact_values_within_its_error() {
    // Against quadrature (Poisson, binomial: one effect per point) and the closed form
    // (Gaussian, crossed and nested): within 4 of the sampler's own standard errors, which
    // must be small (the proposal fits).
    let mut cases = Vec::new();
    for family in [Family::Poisson, Family::Binomial] {
        let m = small(family);
        let one = Glmm::new(
            family,
            m.y.clone(),
            m.x.clone(),
            &(0..12).map(|i| i % 3).collect::<Vec<_>>(),
            vec![1.0; 12],
            m.family.eq(&Family::Binomial).then(|| vec![4.0; 12]),
        )
        .unwrap();
        let th = [0.2, -0.3, -0.2];
        let exact = one.log_likelihood(&th, 0).unwrap().value;
        cases.push((one, th.to_vec(), exact));
    }
    for nested in [false, true] {
        let m = two_terms(Family::Gaussian, nested);
        let th: Vec<f64> = (0..m.theta_dim()).map(|k| 0.1 * k as f64 - 0.2).collect();
        let exact = m.log_likelihood(&th, 0).unwrap().value;
        cases.push((m, th, exact));
    }
    for (m, th, exact) in cases {
        let s = m.log_likelihood_sampled(&th, 4000, 7).unwrap();
        assert!(s.se > 0.0 && s.se < 0.02, "{s:?}");
        assert!((s.value - exact).abs() < 4.0 * s.se, "{s:?} vs {exact}");
        assert!(s.min_ess.unwrap() > 0.5, "{s:?}");
    }
}

/// 40 rows in 4 groups, an intercept and x = i/10; `y(i)` the responses.
fn forty(family: Family, y: impl Fn(usize) -> f64) -> Glmm {
    let n = 40;
    let x = (0..n).flat_map(|i| [1.0, i as f64 / 10.0]).collect();
    let group: Vec<usize> = (0..n).map(|i| i % 4).collect();
    Glmm::new(
        family,
        (0..n).map(y).collect(),
        x,
        &group,
        vec![1.0; n],
        None,
    )
    .unwrap()
}

#[test]
fn separated_responses_are_named_and_others_are_not() {
    let exact = ExactSettings::default();
    // y = 1 exactly where x ≥ 2: the maximum runs off to infinity along β.
    let separated = forty(Family::Binomial, |i| (i >= 20) as u8 as f64);
    let fit = separated.fit_exact(&exact).unwrap();
    let said = separated
        .separation(&fit.theta)
        .expect("separation is named");
    assert!(
        said.contains("numerically 0 or 1") && said.contains("of 40 observations"),
        "{said}"
    );
    // Overlapping responses, and counts with events everywhere: a finite maximum, no warning.
    let mixed = forty(Family::Binomial, |i| ((i * 7) % 3 == 0) as u8 as f64);
    let fit = mixed.fit_exact(&exact).unwrap();
    assert_eq!(mixed.separation(&fit.theta), None, "{:?}", fit.theta);
    let counts = forty(Family::Poisson, |i| (1 + i % 3) as f64);
    let fit = counts.fit_exact(&exact).unwrap();
    assert_eq!(counts.separation(&fit.theta), None, "{:?}", fit.theta);
    // A rate of 0 where the fixed effects alone reach it; the Gaussian has no edge.
    let mut theta = fit.theta.clone();
    theta[1] = -40.0;
    let said = counts.separation(&theta).expect("rates at 0 are named");
    assert!(said.contains("rates numerically 0"), "{said}");
    let gaussian = forty(Family::Gaussian, |i| i as f64);
    assert_eq!(gaussian.separation(&[0.0, -1e6, 0.0, 0.0]), None);
}

/// Two effects of one grouping factor with proportional columns have variances the data
/// cannot tell apart (only their sum): refused by name, across terms and within one; the same
/// columns under other groups, and other columns under the same groups, are models.
#[test]
fn one_effect_twice_for_a_grouping_factor_is_refused() {
    let n = 24;
    let y: Vec<f64> = (0..n).map(|i| ((i * 7) % 5) as f64).collect();
    let g: Vec<usize> = (0..n).map(|i| i / 6).collect();
    let h: Vec<usize> = (0..n).map(|i| i % 3).collect();
    let x: Vec<f64> = (0..n).map(|i| (i as f64 * 0.9).sin()).collect();
    let term = |group: &[usize], z: Vec<f64>, correlated| RandomTerm {
        group: group.to_vec(),
        z,
        correlated,
    };
    let fit = |terms| Glmm::with_terms(Family::Poisson, y.clone(), vec![1.0; n], terms, None);
    let refused = |terms| fit(terms).unwrap_err().to_string();
    let e = refused(vec![
        term(&g, vec![1.0; n], false),
        term(&g, vec![1.0; n], false),
    ]);
    assert!(
        e.contains("column 0 of Z in random-effect term 1") && e.contains("term 2"),
        "{e}"
    );
    assert!(e.contains("proportional"), "{e}");
    // (1 + c | g) with c = 2 in every row.
    let e = refused(vec![term(&g, [1.0, 2.0].repeat(n), true)]);
    assert!(
        e.contains("column 0 of Z in random-effect term 1") && e.contains("column 1"),
        "{e}"
    );
    // (1 | g) + (0 + x | g) and (1 | g) + (1 | h) are models.
    assert!(fit(vec![
        term(&g, vec![1.0; n], false),
        term(&g, x.clone(), false)
    ])
    .is_ok());
    assert!(fit(vec![
        term(&g, vec![1.0; n], false),
        term(&h, vec![1.0; n], false)
    ])
    .is_ok());
}
