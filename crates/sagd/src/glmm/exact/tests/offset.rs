//! Offsets (lme4's `offset(…)`): a known part of each row's linear predictor, against a
//! likelihood integrated by brute force and against the same data without it.

use super::*;
use crate::glmm::LN_2PI;
use statrs::function::gamma::ln_gamma;

/// Poisson counts with a random intercept (sd 0.5) over exposures t_i from 0.2 to 20: y_i near
/// t_i e^{0.3 + 0.4 x_i + b_g}. Returns y, the design (intercept, x), the groups and log t.
#[allow(clippy::type_complexity)]
fn exposures(groups: usize, per: usize) -> (Vec<f64>, Vec<f64>, Vec<usize>, Vec<f64>) {
    let mut s = NormalStream::new(8);
    let b: Vec<f64> = (0..groups).map(|_| 0.5 * s.draw()).collect();
    let n = groups * per;
    let x: Vec<f64> = (0..n)
        .flat_map(|i| [1.0, ((i * 5) % 9) as f64 / 4.0 - 1.0])
        .collect();
    let log_t: Vec<f64> = (0..n)
        .map(|i| (0.2f64).ln() + 4.6 * ((i * 7) % 13) as f64 / 12.0)
        .collect();
    let y = (0..n)
        .map(|i| {
            let rate = (log_t[i] + 0.3 + 0.4 * x[2 * i + 1] + b[i / per]).exp();
            (rate * (0.75 + 0.5 * (s.draw() * 0.5).tanh().abs())).round()
        })
        .collect();
    (y, x, (0..n).map(|i| i / per).collect(), log_t)
}

#[test]
fn an_offset_is_part_of_the_linear_predictor() {
    let (y, x, g, log_t) = exposures(12, 6);
    let n = y.len();
    let m = Glmm::with_offset(
        Family::Poisson,
        y.clone(),
        x.clone(),
        vec![RandomTerm {
            group: g.clone(),
            z: vec![1.0; n],
            correlated: false,
        }],
        None,
        log_t.clone(),
    )
    .unwrap();
    // ℓ by the trapezoid rule on u ∈ [−12, 12] (20 001 points), each group's integral of
    // Π_i Pois(y_i; e^{o_i + x_iβ + σu}) φ(u), in log space from its largest term.
    let brute = |theta: &[f64]| {
        let sd = theta[2].exp();
        (0..12)
            .map(|grp| {
                let logs: Vec<f64> = (0..=20_000)
                    .map(|k| {
                        let u = -12.0 + 24.0 * k as f64 / 20_000.0;
                        let rows = (0..n).filter(|&i| g[i] == grp);
                        let lp: f64 = rows
                            .map(|i| {
                                let eta = log_t[i] + theta[0] + theta[1] * x[2 * i + 1] + sd * u;
                                y[i] * eta - eta.exp() - ln_gamma(y[i] + 1.0)
                            })
                            .sum();
                        lp - 0.5 * u * u - 0.5 * LN_2PI
                    })
                    .collect();
                let top = logs.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                let inner: f64 = logs
                    .iter()
                    .enumerate()
                    .map(|(k, l)| if k == 0 || k == 20_000 { 0.5 } else { 1.0 } * (l - top).exp())
                    .sum();
                top + (inner * 24.0 / 20_000.0).ln()
            })
            .sum::<f64>()
    };
    for theta in [[0.3, 0.4, 0.5f64.ln()], [-0.2, 0.9, 0.2f64.ln()]] {
        let l = m.log_likelihood(&theta, 0).unwrap();
        let b = brute(&theta);
        assert!(
            (l.value - b).abs() < 1e-8,
            "θ {theta:?}: {} vs {b}",
            l.value
        );
    }
    let fit = m.fit_exact(&ExactSettings::default()).unwrap();
    assert!(fit.converged && (fit.theta[0] - 0.3).abs() < 0.4, "{fit:?}");
}

/// The exact fit of `family`'s [`intercepts`] data with every row's offset `c`, and without.
fn with_and_without(family: Family, c: f64) -> (ExactFit, ExactFit) {
    let base = intercepts(family, 30, 6, 3);
    let n = base.n_obs();
    let term = RandomTerm {
        group: (0..n).map(|i| i / 6).collect(),
        z: vec![1.0; n],
        correlated: false,
    };
    let trials = (family == Family::Binomial).then(|| vec![5.0; n]);
    let shifted = Glmm::with_offset(
        family,
        base.y.clone(),
        base.x.clone(),
        vec![term],
        trials,
        vec![c; n],
    )
    .unwrap();
    let s = ExactSettings::default();
    (shifted.fit_exact(&s).unwrap(), base.fit_exact(&s).unwrap())
}

#[test]
fn a_constant_offset_moves_only_the_intercept() {
    // η = c + β₀ + …: the maximum has β₀ less by c, everything else and ℓ as without it (to
    // BFGS's tolerance, about 1e-7, and ℓ's rounding).
    for family in [Family::Poisson, Family::Binomial] {
        let (shifted, base) = with_and_without(family, 1.7);
        assert!(shifted.converged && base.converged);
        assert!(
            (shifted.log_likelihood - base.log_likelihood).abs() < 1e-9,
            "{family:?}"
        );
        assert!(
            (shifted.theta[0] + 1.7 - base.theta[0]).abs() < 1e-5,
            "{family:?}"
        );
        for (a, b) in shifted.theta[1..].iter().zip(&base.theta[1..]) {
            assert!(
                (a - b).abs() < 1e-5,
                "{family:?}: {:?} vs {:?}",
                shifted.theta,
                base.theta
            );
        }
        for (a, b) in shifted.se.iter().zip(&base.se) {
            assert!(
                (a - b).abs() < 1e-4 * b,
                "{family:?}: {:?} vs {:?}",
                shifted.se,
                base.se
            );
        }
    }
}

#[test]
fn a_gaussian_offset_is_the_response_less_it() {
    let base = one_way(20, 5, 4);
    let n = base.n_obs();
    let offset: Vec<f64> = (0..n).map(|i| (i as f64 * 0.31).sin() * 3.0).collect();
    let g: Vec<usize> = (0..n).map(|i| i / 5).collect();
    let term = || {
        vec![RandomTerm {
            group: g.clone(),
            z: vec![1.0; n],
            correlated: false,
        }]
    };
    let y_plus: Vec<f64> = base.y.iter().zip(&offset).map(|(y, o)| y + o).collect();
    let with = Glmm::with_offset(
        Family::Gaussian,
        y_plus.clone(),
        vec![1.0; n],
        term(),
        None,
        offset.clone(),
    )
    .unwrap();
    let less: Vec<f64> = y_plus.iter().zip(&offset).map(|(y, o)| y - o).collect();
    let without = Glmm::with_terms(Family::Gaussian, less, vec![1.0; n], term(), None).unwrap();
    let s = ExactSettings::default();
    let (a, b) = (with.fit_exact(&s).unwrap(), without.fit_exact(&s).unwrap());
    assert_eq!(a.theta, b.theta);
    assert_eq!(a.log_likelihood.to_bits(), b.log_likelihood.to_bits());
}

#[test]
fn an_offset_of_another_length_or_not_finite_is_named() {
    let (y, x, g, log_t) = exposures(4, 5);
    let term = || {
        vec![RandomTerm {
            group: g.clone(),
            z: vec![1.0; 20],
            correlated: false,
        }]
    };
    let err = |o: Vec<f64>| {
        Glmm::with_offset(Family::Poisson, y.clone(), x.clone(), term(), None, o)
            .unwrap_err()
            .to_string()
    };
    assert!(err(log_t[..19].to_vec()).contains("19 values for 20 observations"));
    let mut bad = log_t.clone();
    bad[7] = f64::NEG_INFINITY;
    let e = err(bad);
    assert!(e.contains("offset") && e.contains("at row 7"), "{e}");
}
