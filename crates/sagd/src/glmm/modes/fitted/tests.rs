//! Each observation's fit against the levels' effects it is made of, the modes' own equations,
//! the families' densities and R's quantiles.

use statrs::distribution::{Binomial, Discrete, Poisson};

use super::super::super::{Design, Family, Glmm, RandomTerm};
use super::FittedValues;

/// 24 rows in an order the model stores otherwise (its groups interleaved): correlated slopes by
/// `a` (4 levels) and intercepts by `b` nested in them (8 levels), an offset, and for the
/// binomial family 1 to 5 trials a row.
fn nested(family: Family) -> (Glmm, Vec<f64>, Vec<RandomTerm>, Vec<f64>) {
    let n = 24;
    let x: Vec<f64> = (0..n).flat_map(|i| [1.0, (i as f64 * 0.9).cos()]).collect();
    let trials: Vec<f64> = (0..n).map(|i| (1 + i % 5) as f64).collect();
    let y: Vec<f64> = (0..n)
        .map(|i| match family {
            Family::Gaussian => (i as f64 * 1.7).sin() * 2.0,
            Family::Poisson => ((i * 7) % 6) as f64,
            Family::Binomial => ((i * 5) % 6).min(1 + i % 5) as f64,
        })
        .collect();
    let offset: Vec<f64> = (0..n).map(|i| 0.1 * (i % 3) as f64).collect();
    let terms = vec![
        RandomTerm {
            group: (0..n).map(|i| i % 4).collect(),
            z: (0..n).flat_map(|i| [1.0, (i as f64 * 0.5).sin()]).collect(),
            correlated: true,
        },
        RandomTerm {
            group: (0..n).map(|i| 2 * (i % 4) + (i / 4) % 2).collect(),
            z: vec![1.0; n],
            correlated: false,
        },
    ];
    let m = Glmm::with_offset(
        family,
        y.clone(),
        x,
        terms.clone(),
        (family == Family::Binomial).then(|| trials.clone()),
        offset.clone(),
    )
    .unwrap();
    (m, y, terms, offset)
}

/// θ: β = (0.3, −0.4), a's sds 0.8 and 0.5 with L₂₁ = 0.3, b's sd 0.6, σ = 0.7 (Gaussian).
fn theta(family: Family) -> Vec<f64> {
    let mut t = vec![0.3, -0.4, 0.8f64.ln(), 0.5f64.ln(), 0.3, 0.6f64.ln()];
    if family == Family::Gaussian {
        t.push(0.7f64.ln());
    }
    t
}

#[test]
fn each_row_s_fit_is_its_offset_fixed_part_and_its_levels_modes() {
    for family in [Family::Gaussian, Family::Poisson, Family::Binomial] {
        let (m, y, terms, offset) = nested(family);
        let th = theta(family);
        let f = m.fitted_values(&th).unwrap();
        let re = m.random_effects(&th).unwrap();
        for i in 0..y.len() {
            let fixed = th[0] + th[1] * (i as f64 * 0.9).cos();
            let random: f64 = terms
                .iter()
                .zip(&re)
                .map(|(t, levels)| {
                    let q = t.z.len() / y.len();
                    let b = &levels[t.group[i]];
                    (0..q).map(|k| t.z[i * q + k] * b[k].value).sum::<f64>()
                })
                .sum();
            let eta = offset[i] + fixed + random;
            assert!((f.eta[i] - eta).abs() < 1e-12, "{family:?} row {i}");
            let (mean, response) = match family {
                Family::Gaussian => (eta, y[i] - eta),
                Family::Poisson => (eta.exp(), y[i] - eta.exp()),
                Family::Binomial => {
                    let p = 1.0 / (1.0 + (-eta).exp());
                    (p, y[i] / (1 + i % 5) as f64 - p)
                }
            };
            assert!((f.mean[i] - mean).abs() < 1e-12, "{family:?} row {i}");
            assert!(
                (f.response[i] - response).abs() < 1e-12,
                "{family:?} row {i}"
            );
        }
    }
}

#[test]
fn at_the_mode_each_level_s_residuals_balance_its_effect() {
    // A random intercept b_g = τ u_g: its mode solves τ Σ_{i∈g} ∂ℓ_i/∂η − u_g = 0, so
    // Σ_{i∈g} ∂ℓ_i/∂η = b_g / τ², with ∂ℓ/∂η = (y − η)/σ², y − μ and m (y/m − p) by family.
    for family in [Family::Gaussian, Family::Poisson, Family::Binomial] {
        let n = 30;
        let group: Vec<usize> = (0..n).map(|i| (i * 7) % 5).collect();
        let trials: Vec<f64> = (0..n).map(|i| (1 + i % 4) as f64).collect();
        let y: Vec<f64> = (0..n)
            .map(|i| match family {
                Family::Gaussian => (i as f64).sqrt() - 2.0,
                Family::Poisson => ((i * 3) % 7) as f64,
                Family::Binomial => ((i * 3) % 7).min(1 + i % 4) as f64,
            })
            .collect();
        let x: Vec<f64> = (0..n).flat_map(|i| [1.0, i as f64 / n as f64]).collect();
        let binomial = (family == Family::Binomial).then(|| trials.clone());
        let m = Glmm::new(family, y, x, &group, vec![1.0; n], binomial).unwrap();
        let (tau, sigma) = (0.8f64, 0.9f64);
        let mut th = vec![0.2, 0.5, tau.ln()];
        if family == Family::Gaussian {
            th.push(sigma.ln());
        }
        let f = m.fitted_values(&th).unwrap();
        let re = m.random_effects(&th).unwrap();
        for (g, b) in re[0].iter().enumerate() {
            let score: f64 = (0..n)
                .filter(|&i| group[i] == g)
                .map(|i| match family {
                    Family::Gaussian => f.response[i] / (sigma * sigma),
                    Family::Poisson => f.response[i],
                    Family::Binomial => trials[i] * f.response[i],
                })
                .sum();
            let want = b[0].value / (tau * tau);
            assert!(
                (score - want).abs() < 1e-8 * (1.0 + want.abs()),
                "{family:?} level {g}: {score} against {want}"
            );
        }
    }
}

#[test]
fn residuals_are_the_families_pearson_and_deviance_ones() {
    for family in [Family::Gaussian, Family::Poisson, Family::Binomial] {
        let (m, y, ..) = nested(family);
        let th = theta(family);
        let f = m.fitted_values(&th).unwrap();
        for (i, &yi) in y.iter().enumerate() {
            let (mu, r) = (f.mean[i], f.response[i]);
            let trials = (1 + i % 5) as u64;
            // The response's sd and the row's deviance from the families' own densities:
            // 2 (log p(y | y) − log p(y | μ)).
            let (sd, dev) = match family {
                Family::Gaussian => (0.7, r * r),
                Family::Poisson => {
                    let k = yi as u64;
                    let lp = |rate: f64| match rate > 0.0 {
                        true => Poisson::new(rate).unwrap().ln_pmf(k),
                        false => 0.0,
                    };
                    (mu.sqrt(), 2.0 * (lp(yi) - lp(mu)))
                }
                Family::Binomial => {
                    let k = yi as u64;
                    let lp = |p: f64| Binomial::new(p, trials).unwrap().ln_pmf(k);
                    let sd = (mu * (1.0 - mu) / trials as f64).sqrt();
                    (sd, 2.0 * (lp(yi / trials as f64) - lp(mu)))
                }
            };
            assert!((f.pearson[i] - r / sd).abs() < 1e-12, "{family:?} row {i}");
            let d = f.deviance[i];
            assert!(
                (d * d - dev).abs() < 1e-9 && (d == 0.0 || d.signum() == r.signum()),
                "{family:?} row {i}: {d} against ±√{dev}"
            );
        }
    }
}

#[test]
fn pearson_quantiles_are_r_s_type_seven() {
    let (m, ..) = nested(Family::Poisson);
    let mut f = m.fitted_values(&theta(Family::Poisson)).unwrap();
    // R: quantile(c(3, 1, 4, 1, 5, 9, 2, 6)) is 1, 1.75, 3.5, 5.25, 9.
    f.pearson = vec![3.0, 1.0, 4.0, 1.0, 5.0, 9.0, 2.0, 6.0];
    assert_eq!(f.pearson_quantiles(), Some([1.0, 1.75, 3.5, 5.25, 9.0]));
    f.pearson = vec![2.5];
    assert_eq!(f.pearson_quantiles(), Some([2.5; 5]));
    f.pearson.clear();
    assert_eq!(f.pearson_quantiles(), None);
}

#[test]
fn a_theta_of_another_length_is_refused() {
    let (m, ..) = nested(Family::Poisson);
    assert!(m.fitted_values(&[0.0; 3]).is_err());
}

/// The 24 rows of [`nested`] as new data: its arrays in a [`Design`], with `group` in place of
/// each term's groups.
fn as_new(family: Family, group: impl Fn(usize, usize) -> usize) -> Design {
    let (_, y, terms, offset) = nested(family);
    let n = y.len();
    let terms: Vec<RandomTerm> = terms
        .into_iter()
        .enumerate()
        .map(|(t, term)| RandomTerm {
            group: (0..n).map(|i| group(t, term.group[i])).collect(),
            ..term
        })
        .collect();
    Design {
        y,
        trials: (family == Family::Binomial).then(|| (0..n).map(|i| (1 + i % 5) as f64).collect()),
        x: (0..n).flat_map(|i| [1.0, (i as f64 * 0.9).cos()]).collect(),
        x_names: vec!["(Intercept)".into(), "x".into()],
        term_names: Vec::new(),
        terms,
        n_obs: n,
        dropped: 0,
        response: "y".into(),
        rows: (0..n).collect(),
        offset: Some(offset),
    }
}

#[test]
fn predictions_on_the_fitted_rows_are_their_fit_and_unseen_levels_have_no_effect() {
    for family in [Family::Gaussian, Family::Poisson, Family::Binomial] {
        let (m, y, terms, offset) = nested(family);
        let th = theta(family);
        let fit = m.fitted_values(&th).unwrap();
        let same = m.predict(&th, &as_new(family, |_, g| g), true).unwrap();
        let columns = |f: &FittedValues| {
            [&f.eta, &f.mean, &f.response, &f.pearson, &f.deviance].map(|v| v.clone())
        };
        for (a, b) in columns(&fit).iter().zip(columns(&same)) {
            for (i, (u, v)) in a.iter().zip(&b).enumerate() {
                assert!(
                    (u - v).abs() < 1e-12 * (1.0 + u.abs()),
                    "{family:?} row {i}"
                );
            }
        }
        // Population level: the offset and the fixed part alone.
        let population = m.predict(&th, &as_new(family, |_, g| g), false).unwrap();
        let fixed = |i: usize| offset[i] + th[0] + th[1] * (i as f64 * 0.9).cos();
        for i in 0..y.len() {
            assert!(
                (population.eta[i] - fixed(i)).abs() < 1e-12,
                "{family:?} row {i}"
            );
        }
        // Without responses, no residuals.
        let mut blind = as_new(family, |_, g| g);
        blind.y.fill(f64::NAN);
        let blind = m.predict(&th, &blind, true).unwrap();
        assert_eq!(blind.eta, same.eta);
        for r in [&blind.response, &blind.pearson, &blind.deviance] {
            assert!(r.iter().all(|v| v.is_nan()), "{family:?}");
        }
        // The second term's levels unseen (numbered past its 8): the first term's effects alone.
        let unseen = m
            .predict(&th, &as_new(family, |t, g| g + 8 * t), true)
            .unwrap();
        let re = m.random_effects(&th).unwrap();
        for i in 0..y.len() {
            let b = &re[0][terms[0].group[i]];
            let z = &terms[0].z[2 * i..2 * i + 2];
            let eta = fixed(i) + z[0] * b[0].value + z[1] * b[1].value;
            assert!((unseen.eta[i] - eta).abs() < 1e-12, "{family:?} row {i}");
        }
    }
}

#[test]
fn new_rows_of_another_shape_are_refused_by_name() {
    let (m, ..) = nested(Family::Poisson);
    let th = theta(Family::Poisson);
    let mut new = as_new(Family::Poisson, |_, g| g);
    new.terms.pop();
    let e = m.predict(&th, &new, true).unwrap_err().to_string();
    assert!(e.contains("1 random-effect terms for the model's 2"), "{e}");
    assert!(e.contains("Formula::new_design"), "{e}");
    let mut new = as_new(Family::Poisson, |_, g| g);
    new.x.pop();
    let e = m.predict(&th, &new, true).unwrap_err().to_string();
    assert!(e.contains("47 fixed-effect values for 24 rows"), "{e}");
}

/// Σ_t z_{t,i} Σ_t z_{t,j}ᵀ over the terms whose level rows i and j share, under [`theta`]:
/// a's Σ = L Lᵀ with L = [[0.8, 0], [0.3, 0.5]], b's 0.6².
fn effects_cov(terms: &[RandomTerm], i: usize, j: usize) -> f64 {
    let sigma_a = [[0.64, 0.24], [0.24, 0.09 + 0.25]];
    let mut v = 0.0;
    if terms[0].group[i] == terms[0].group[j] {
        let (zi, zj) = (&terms[0].z[2 * i..2 * i + 2], &terms[0].z[2 * j..2 * j + 2]);
        for a in 0..2 {
            for b in 0..2 {
                v += zi[a] * sigma_a[a][b] * zj[b];
            }
        }
    }
    if terms[1].group[i] == terms[1].group[j] {
        v += 0.36 * terms[1].z[i] * terms[1].z[j];
    }
    v
}

/// The draws' mean and variance of row `i`.
fn moments(sims: &[Vec<f64>], i: usize) -> (f64, f64) {
    let n = sims.len() as f64;
    let mean = sims.iter().map(|y| y[i]).sum::<f64>() / n;
    let var = sims.iter().map(|y| (y[i] - mean).powi(2)).sum::<f64>() / (n - 1.0);
    (mean, var)
}

#[test]
fn simulated_responses_have_the_model_s_moments() {
    let draws = 4000;
    let fixed = |i: usize, offset: &[f64]| offset[i] + 0.3 - 0.4 * (i as f64 * 0.9).cos();
    // Gaussian: y_i ~ N(o_i + x_iβ, Σ-part + σ²), rows sharing a level covary.
    let (m, _, terms, offset) = nested(Family::Gaussian);
    let sims = m
        .simulate(&theta(Family::Gaussian), draws, 7, false)
        .unwrap();
    for i in 0..24 {
        let var = effects_cov(&terms, i, i) + 0.49;
        let (mean, v) = moments(&sims, i);
        // Five Monte Carlo errors: of the mean √(var/N); of the variance var √(2/N).
        assert!(
            (mean - fixed(i, &offset)).abs() < 5.0 * (var / draws as f64).sqrt(),
            "row {i}"
        );
        assert!(
            (v - var).abs() < 5.0 * var * (2.0 / draws as f64).sqrt(),
            "row {i}: {v} vs {var}"
        );
    }
    // Rows 0 and 8 share a's level 0 and b's level 0.
    let c = effects_cov(&terms, 0, 8);
    let (m0, m8) = (moments(&sims, 0).0, moments(&sims, 8).0);
    let cov = sims.iter().map(|y| (y[0] - m0) * (y[8] - m8)).sum::<f64>() / (draws - 1) as f64;
    let sd = ((effects_cov(&terms, 0, 0) + 0.49) * (effects_cov(&terms, 8, 8) + 0.49)).sqrt();
    assert!(
        (cov - c).abs() < 5.0 * sd / (draws as f64).sqrt(),
        "{cov} vs {c}"
    );
    // Poisson: E y_i = exp(o_i + x_iβ + Var(η_i)/2).
    let (m, _, terms, offset) = nested(Family::Poisson);
    let sims = m
        .simulate(&theta(Family::Poisson), draws, 7, false)
        .unwrap();
    for i in 0..24 {
        let s2 = effects_cov(&terms, i, i);
        let mean = (fixed(i, &offset) + s2 / 2.0).exp();
        let var = mean + mean * mean * (s2.exp() - 1.0);
        let got = moments(&sims, i).0;
        assert!(
            (got - mean).abs() < 5.0 * (var / draws as f64).sqrt(),
            "row {i}"
        );
        assert!(sims.iter().all(|y| y[i] >= 0.0 && y[i].fract() == 0.0));
    }
    // Binomial, the levels held at their modes: successes m_i p_i on average, p_i the fit's.
    let (m, ..) = nested(Family::Binomial);
    let th = theta(Family::Binomial);
    let sims = m.simulate(&th, draws, 7, true).unwrap();
    let p = m.fitted_values(&th).unwrap().mean;
    for i in 0..24 {
        let trials = (1 + i % 5) as f64;
        let (mean, var) = (trials * p[i], trials * p[i] * (1.0 - p[i]));
        let got = moments(&sims, i).0;
        assert!(
            (got - mean).abs() < 5.0 * (var / draws as f64).sqrt(),
            "row {i}"
        );
        assert!(sims.iter().all(|y| (0.0..=trials).contains(&y[i])));
    }
}

#[test]
fn simulations_are_the_seed_s_on_any_number_of_threads() {
    let (m, ..) = nested(Family::Poisson);
    let th = theta(Family::Poisson);
    let on = |threads: usize, seed: u64| {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .unwrap();
        pool.install(|| m.simulate(&th, 6, seed, false).unwrap())
    };
    assert_eq!(on(1, 3), on(2, 3));
    assert_ne!(on(2, 3), on(2, 4));
    // A draw's values do not depend on how many draws are asked for.
    assert_eq!(on(2, 3)[..2], m.simulate(&th, 2, 3, false).unwrap()[..]);
}
