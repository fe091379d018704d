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
