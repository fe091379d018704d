//! Satterthwaite's degrees of freedom against their closed forms in balanced designs: the
//! intercept of a one-way model has G − 1 (REML) or G (ML), the slope of a covariate that varies
//! only within groups N − G − 1 (REML) or N − G (ML), the residual strata's own degrees of
//! freedom; the standard errors and p-values follow.

use super::*;
use statrs::distribution::{ContinuousCDF, StudentsT};

/// y_ij = 1 + 0.3 x_j + b_i + e_ij in `groups` groups of 5, x_j = −2 … 2 in every group (so
/// that x varies within groups alone), b ~ N(0, 0.8²), e ~ N(0, 0.5²).
fn within(groups: usize, seed: u64) -> Glmm {
    let per = 5;
    let mut s = NormalStream::new(seed);
    let b: Vec<f64> = (0..groups).map(|_| 0.8 * s.draw()).collect();
    let n = groups * per;
    let x = |i: usize| (i % per) as f64 - 2.0;
    let y = (0..n)
        .map(|i| 1.0 + 0.3 * x(i) + b[i / per] + 0.5 * s.draw())
        .collect();
    let design = (0..n).flat_map(|i| [1.0, x(i)]).collect();
    let g: Vec<usize> = (0..n).map(|i| i / per).collect();
    Glmm::new(Family::Gaussian, y, design, &g, vec![1.0; n], None).unwrap()
}

fn tests_of(m: &Glmm, criterion: Criterion) -> (ExactFit, Vec<(f64, f64, f64)>) {
    let settings = ExactSettings {
        criterion,
        ..Default::default()
    };
    let fit = m.fit_exact(&settings).unwrap();
    let tests = m.satterthwaite(&fit.theta, &fit.covariance).unwrap();
    (fit, tests)
}

#[test]
fn balanced_designs_have_their_strata_s_degrees_of_freedom() {
    let (g, per) = (12, 5);
    let n = g * per;
    for (criterion, lost) in [(Criterion::Reml, 1.0), (Criterion::Ml, 0.0)] {
        // The intercept's stratum: the G group means; the slope's: the N − G contrasts within
        // groups; REML's criterion gives each one fewer for its fixed effect.
        let (fit, tests) = tests_of(&one_way(g, per, 5), criterion);
        let (se, df, p) = tests[0];
        assert!((df - (g as f64 - lost)).abs() < 1e-5, "{criterion:?}: {df}");
        // Given the variances, Var(μ̂) = (σ_b² + σ²/n)/G: the fit's own standard error.
        assert!((se / fit.se[0] - 1.0).abs() < 1e-6, "{se} vs {}", fit.se[0]);
        let t = fit.theta[0] / se;
        let law = StudentsT::new(0.0, 1.0, df).unwrap();
        assert!((p / (2.0 * law.sf(t.abs())) - 1.0).abs() < 1e-12);
        let (_, tests) = tests_of(&within(g, 7), criterion);
        let slope = tests[1].1;
        let want = (n - g) as f64 - lost;
        assert!((slope - want).abs() < 1e-5 * want, "{criterion:?}: {slope}");
    }
}

#[test]
fn satterthwaite_is_the_gaussian_family_s() {
    let m = intercepts(Family::Poisson, 10, 6, 1);
    let theta = m.start().to_vec();
    let k = theta.len();
    let e = m.satterthwaite(&theta, &vec![vec![0.0; k]; k]).unwrap_err();
    assert!(e.to_string().contains("Gaussian"), "{e}");
    let m = one_way(6, 4, 1);
    let theta = m.start().to_vec();
    let e = m.satterthwaite(&theta, &[]).unwrap_err();
    assert!(e.to_string().contains("covariance"), "{e}");
}
