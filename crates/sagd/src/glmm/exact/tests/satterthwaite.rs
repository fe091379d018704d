//! Satterthwaite's degrees of freedom against their closed forms in balanced designs: the
//! intercept of a one-way model has G − 1 (REML) or G (ML), the slope of a covariate that varies
//! only within groups N − G − 1 (REML) or N − G (ML), the residual strata's own degrees of
//! freedom; the standard errors and p-values follow.

use super::*;
use statrs::distribution::{ContinuousCDF, StudentsT};

/// y_ij = 1 + 0.3 x_j + b_i + e_ij in `groups` groups of 5, x_j = −2 … 2 in every group (so
/// that x varies within groups alone), b ~ N(0, 0.8²), e ~ N(0, 0.5²).
pub(super) fn within(groups: usize, seed: u64) -> Glmm {
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

/// A split plot: `levels` levels of A, `per` subjects in each, `obs` rows a subject; y with a
/// subject effect (sd 0.7) and A's level effects.
pub(super) fn split_plot(levels: usize, per: usize, obs: usize) -> crate::glmm::Frame {
    use crate::glmm::{Column, Frame};
    let mut s = NormalStream::new(11);
    let subjects = levels * per;
    let b: Vec<f64> = (0..subjects).map(|_| 0.7 * s.draw()).collect();
    let (mut y, mut a, mut g) = (Vec::new(), Vec::new(), Vec::new());
    for (subject, bs) in b.iter().enumerate() {
        for _ in 0..obs {
            let level = subject / per;
            y.push(0.4 * level as f64 + bs + s.draw());
            a.push(Some(format!("a{level}")));
            g.push(Some(format!("s{subject:02}")));
        }
    }
    let columns = vec![Column::Number(y), Column::Text(a), Column::Text(g)];
    Frame::new(vec!["y".into(), "A".into(), "g".into()], columns).unwrap()
}

/// In a balanced split plot the REML F test of the between-subjects factor is the classical
/// one: F = MS_A / MS_subjects(A) on a − 1 and S − a degrees of freedom; and a one-row test is
/// the t test squared, with its degrees of freedom and p-value.
#[test]
fn a_split_plot_s_f_test_is_the_classical_anova_s() {
    use crate::glmm::Formula;
    let (levels, per, obs) = (3, 4, 5);
    let frame = split_plot(levels, per, obs);
    let formula = Formula::parse("y ~ A + (1 | g)").unwrap();
    let m = formula
        .design(&frame)
        .unwrap()
        .glmm(Family::Gaussian)
        .unwrap();
    let (fit, tests) = tests_of(&m, Criterion::Reml);
    let contrasts = formula.type3_contrasts(&frame).unwrap();
    assert_eq!(contrasts.len(), 1);
    let (name, l) = &contrasts[0];
    assert_eq!((name.as_str(), l.len()), ("A", levels - 1));
    let (f, q, ddf, _) = m
        .satterthwaite_tests(&fit.theta, &fit.covariance, std::slice::from_ref(l))
        .unwrap()
        .1[0];
    let subjects = levels * per;
    assert_eq!(q, levels - 1);
    assert!((ddf - (subjects - levels) as f64).abs() < 1e-5, "{ddf}");
    // The classical F from the subjects' means.
    let y = &m.y;
    let mean = |r: std::ops::Range<usize>| y[r.clone()].iter().sum::<f64>() / r.len() as f64;
    let sub: Vec<f64> = (0..subjects)
        .map(|s| mean(s * obs..(s + 1) * obs))
        .collect();
    let lev: Vec<f64> = (0..levels)
        .map(|a| sub[a * per..(a + 1) * per].iter().sum::<f64>() / per as f64)
        .collect();
    let grand = lev.iter().sum::<f64>() / levels as f64;
    let ms_a = (obs * per) as f64 * lev.iter().map(|v| (v - grand).powi(2)).sum::<f64>()
        / (levels - 1) as f64;
    let ms_s = obs as f64
        * (0..subjects)
            .map(|s| (sub[s] - lev[s / per]).powi(2))
            .sum::<f64>()
        / (subjects - levels) as f64;
    assert!(
        (f / (ms_a / ms_s) - 1.0).abs() < 1e-6,
        "{f} vs {}",
        ms_a / ms_s
    );
    for (j, &(_, df, p)) in tests.iter().enumerate() {
        let mut row = vec![0.0; fit.theta.len() - 2];
        row[j] = 1.0;
        let (f1, q1, ddf1, p1) = m
            .satterthwaite_tests(&fit.theta, &fit.covariance, &[vec![row]])
            .unwrap()
            .1[0];
        let t = fit.theta[j] / tests[j].0;
        assert_eq!(q1, 1);
        assert!((f1 / (t * t) - 1.0).abs() < 1e-10 && (ddf1 / df - 1.0).abs() < 1e-10);
        assert!((p1 / p - 1.0).abs() < 1e-8, "{p1} vs {p}");
    }
}
