//! Kenward and Roger's tests against their closed forms in balanced designs, where they are
//! exact: β̂'s adjusted covariance is the fit's own, a one-way model's intercept has G − 1
//! degrees of freedom and a within-groups slope N − G − 1, and a balanced split plot's F test of
//! its between-subjects factor is the classical ANOVA's, unscaled, on a − 1 and S − a degrees of
//! freedom. Against pbkrtest on unbalanced data: crates/sagd-cli/tests/glmm_ddf.rs.

use super::satterthwaite::{split_plot, within};
use super::*;

fn reml(m: &Glmm) -> ExactFit {
    let settings = ExactSettings {
        criterion: Criterion::Reml,
        ..Default::default()
    };
    m.fit_exact(&settings).unwrap()
}

#[test]
fn balanced_designs_have_their_strata_s_degrees_of_freedom() {
    let (g, per) = (12, 5);
    let m = one_way(g, per, 5);
    let fit = reml(&m);
    let (se, df, _) = m.kenward_roger_tests(&fit.theta, &[]).unwrap().0[0];
    assert!((df - (g - 1) as f64).abs() < 1e-6, "{df}");
    // Var(μ̂) = (σ_b² + σ²/n)/G is linear in the variances: no adjustment.
    assert!((se / fit.se[0] - 1.0).abs() < 1e-6, "{se} vs {}", fit.se[0]);
    let m = within(g, 7);
    let fit = reml(&m);
    let (se, df, _) = m.kenward_roger_tests(&fit.theta, &[]).unwrap().0[1];
    let want = (g * per - g - 1) as f64;
    assert!((df - want).abs() < 1e-6 * want, "{df}");
    assert!((se / fit.se[1] - 1.0).abs() < 1e-6, "{se} vs {}", fit.se[1]);
}

/// The split plot's F test of A is Satterthwaite's (the classical one there, checked in
/// satterthwaite.rs), with Kenward and Roger's scaling 1.
#[test]
fn a_split_plot_s_f_test_is_the_classical_anova_s() {
    use crate::glmm::Formula;
    let (levels, per, obs) = (3, 4, 5);
    let frame = split_plot(levels, per, obs);
    let formula = Formula::parse("y ~ A + (1 | g)").unwrap();
    let m = (formula.design(&frame).unwrap())
        .glmm(Family::Gaussian)
        .unwrap();
    let fit = reml(&m);
    let l = formula.type3_contrasts(&frame).unwrap().remove(0).1;
    let hypotheses = std::slice::from_ref(&l);
    let (f, q, ddf, p) = m.kenward_roger_tests(&fit.theta, hypotheses).unwrap().1[0];
    let classical = m
        .satterthwaite_tests(&fit.theta, &fit.covariance, hypotheses)
        .unwrap()
        .1[0];
    assert_eq!(q, levels - 1);
    assert!((ddf - (levels * per - levels) as f64).abs() < 1e-5, "{ddf}");
    assert!(
        (f / classical.0 - 1.0).abs() < 1e-6,
        "{f} vs {}",
        classical.0
    );
    assert!(
        (p / classical.3 - 1.0).abs() < 1e-5,
        "{p} vs {}",
        classical.3
    );
}

#[test]
fn kenward_roger_is_an_unweighted_gaussian_model_s() {
    let m = intercepts(Family::Poisson, 10, 6, 1);
    let e = m.kenward_roger_tests(&m.start().to_vec(), &[]).unwrap_err();
    assert!(e.to_string().contains("Gaussian"), "{e}");
    let m = one_way(6, 4, 1);
    let theta = m.start().to_vec();
    let weighted = m.clone().with_weights(&[2.0; 24]).unwrap();
    let e = weighted.kenward_roger_tests(&theta, &[]).unwrap_err();
    assert!(e.to_string().contains("weighted"), "{e}");
    let e = m
        .kenward_roger_tests(&theta, &[vec![vec![1.0, 0.0]]])
        .unwrap_err();
    assert!(e.to_string().contains("hypotheses"), "{e}");
}

/// A block too large for its dense matrices is refused by name, before any is made.
#[test]
fn a_block_too_large_to_hold_dense_is_refused() {
    use super::super::kenward_roger::dense_block_fits;
    assert!(dense_block_fits(4000, 3).is_ok());
    let e = dense_block_fits(20_000, 3).unwrap_err().to_string();
    assert!(
        e.contains("20000 rows") && e.contains("Satterthwaite"),
        "{e}"
    );
    assert!(dense_block_fits(usize::MAX, 3).is_err());
}

/// lmerTest's least-squares means of a balanced split plot's between-subjects factor, by both
/// methods: each level's raw mean, with the classical standard error √(MS_subjects(A) / (per ·
/// obs)) on S − a degrees of freedom; a difference of two levels, √2 times it; and the Wald z
/// test's standard error is the fit's covariance's.
#[test]
fn a_split_plot_s_least_squares_means_are_the_classical_ones() {
    use crate::glmm::formula::pairwise_contrasts;
    use crate::glmm::Formula;
    let (levels, per, obs) = (3, 4, 5);
    let frame = split_plot(levels, per, obs);
    let y = frame
        .numbers_at("y", &(0..frame.n_rows()).collect::<Vec<_>>(), "response")
        .unwrap();
    let formula = Formula::parse("y ~ A + (1 | g)").unwrap();
    let m = (formula.design(&frame).unwrap())
        .glmm(Family::Gaussian)
        .unwrap();
    let fit = reml(&m);
    let (term, means) = formula.ls_means_contrasts(&frame).unwrap().remove(0);
    assert_eq!(term, "A");
    let rows: Vec<Vec<f64>> = means.iter().map(|(_, l)| l.clone()).collect();
    // The rows are subject-major: a level's per · obs rows, each subject's obs of them.
    let mean = |r: std::ops::Range<usize>| y[r.clone()].iter().sum::<f64>() / r.len() as f64;
    let (block, subjects) = (per * obs, levels * per);
    let ms_subjects = (0..subjects)
        .map(|s| {
            (mean(s * obs..(s + 1) * obs) - mean(s / per * block..(s / per + 1) * block)).powi(2)
        })
        .sum::<f64>()
        * obs as f64
        / (subjects - levels) as f64;
    let se = (ms_subjects / block as f64).sqrt();
    let df = (subjects - levels) as f64;
    let sat = m
        .satterthwaite_contrasts(&fit.theta, &fit.covariance, &rows)
        .unwrap();
    let kr = m.kenward_roger_contrasts(&fit.theta, &rows).unwrap();
    for (i, l) in rows.iter().enumerate() {
        let estimate: f64 = l.iter().zip(&fit.theta).map(|(a, b)| a * b).sum();
        assert!(
            (estimate - mean(i * block..(i + 1) * block)).abs() < 1e-9,
            "{i}"
        );
        for (what, (s, d, _)) in [("Satterthwaite", sat[i]), ("Kenward-Roger", kr[i])] {
            assert!((s / se - 1.0).abs() < 1e-6, "{what} {i}: {s} vs {se}");
            assert!((d - df).abs() < 1e-4, "{what} {i}: {d} vs {df}");
        }
    }
    let pairs: Vec<Vec<f64>> = pairwise_contrasts(&means)
        .into_iter()
        .map(|(_, l)| l)
        .collect();
    let (s, d, _) = m
        .satterthwaite_contrasts(&fit.theta, &fit.covariance, &pairs)
        .unwrap()[2];
    assert!(
        (s / (se * 2f64.sqrt()) - 1.0).abs() < 1e-6 && (d - df).abs() < 1e-4,
        "{s} {d}"
    );
    let wrong = m.satterthwaite_contrasts(&fit.theta, &fit.covariance, &[vec![1.0]]);
    assert!(wrong
        .unwrap_err()
        .to_string()
        .contains("a row of 1 values for the model's 3 fixed effects"));
}
