//! The random effects given the data against closed forms, Gaussian posteriors and fine grids.

use super::super::{Family, RandomTerm};
use super::*;
use crate::linalg::spd_inverse;

/// The Gaussian posterior of every effect in b-space, densely: b ~ N(0, G) with y | b ~
/// N(Xβ + Z b, σ² I), so Prec = G⁻¹ + ZᵀZ/σ² and mean = Prec⁻¹ Zᵀ(y − Xβ)/σ². `z` holds the
/// rows of Z (n × m), `g` G (m × m).
fn dense_posterior(
    y: &[f64],
    fixed: &[f64],
    z: &[Vec<f64>],
    g: &[Vec<f64>],
    s2: f64,
) -> (Vec<f64>, Vec<Vec<f64>>) {
    let m = g.len();
    let mut prec = spd_inverse(g).unwrap();
    let mut v = vec![0.0; m];
    for ((zi, yi), fi) in z.iter().zip(y).zip(fixed) {
        for a in 0..m {
            v[a] += zi[a] * (yi - fi) / s2;
            for b in 0..m {
                prec[a][b] += zi[a] * zi[b] / s2;
            }
        }
    }
    let cov = spd_inverse(&prec).unwrap();
    let mean = (0..m)
        .map(|a| (0..m).map(|b| cov[a][b] * v[b]).sum())
        .collect();
    (mean, cov)
}

fn close(e: &Estimate, value: f64, sd: f64) {
    assert!((e.value - value).abs() < 1e-9, "{e:?} against {value}");
    assert!((e.se - sd).abs() < 1e-9, "{e:?} against sd {sd}");
}

/// A random-intercept model of `y` by `group` with an intercept as its only fixed effect.
pub(super) fn intercepts(family: Family, y: &[f64], group: &[usize]) -> Glmm {
    let ones = vec![1.0; y.len()];
    Glmm::new(family, y.to_vec(), ones.clone(), group, ones, None).unwrap()
}

#[test]
fn gaussian_intercepts_are_the_shrunken_group_means() {
    // Groups of 1 to 4 rows: b_g = τ²/(τ² + σ²/n_g) (ȳ_g − μ), Var = 1/(1/τ² + n_g/σ²).
    let sizes = [1usize, 2, 3, 4];
    let group: Vec<usize> = (0..4).flat_map(|g| vec![g; sizes[g]]).collect();
    let n = group.len();
    let y: Vec<f64> = (0..n).map(|i| (i as f64 * 1.3).sin() * 2.0 + 1.0).collect();
    let m = intercepts(Family::Gaussian, &y, &group);
    let (mu, tau, sigma) = (0.7, 0.9f64, 0.6f64);
    let re = m.random_effects(&[mu, tau.ln(), sigma.ln()]).unwrap();
    assert_eq!((re.len(), re[0].len(), re[0][0].len()), (1, 4, 1));
    for (g, &ng) in sizes.iter().enumerate() {
        let rows: Vec<f64> = (0..n).filter(|&i| group[i] == g).map(|i| y[i]).collect();
        let mean = rows.iter().sum::<f64>() / ng as f64;
        let (t2, s2) = (tau * tau, sigma * sigma);
        let value = t2 / (t2 + s2 / ng as f64) * (mean - mu);
        close(&re[0][g][0], value, (1.0 / t2 + ng as f64 / s2).powf(-0.5));
    }
}

#[test]
fn poisson_modes_solve_their_score_with_the_curvature_s_sd() {
    let n = 30;
    let group: Vec<usize> = (0..n).map(|i| i % 5).collect();
    let x: Vec<f64> = (0..n).flat_map(|i| [1.0, (i as f64 * 0.4).cos()]).collect();
    let y: Vec<f64> = (0..n).map(|i| ((i * 7) % 6) as f64).collect();
    let m = Glmm::new(
        Family::Poisson,
        y.clone(),
        x.clone(),
        &group,
        vec![1.0; n],
        None,
    )
    .unwrap();
    let (beta, tau) = ([0.4, 0.3], 0.5f64);
    let re = m.random_effects(&[beta[0], beta[1], tau.ln()]).unwrap();
    for (g, level) in re[0].iter().enumerate() {
        let b = level[0].value;
        // d/db [Σ y η − e^η] − b/τ² and −d²/db² at the mode.
        let (mut score, mut curvature) = (-b / (tau * tau), 1.0 / (tau * tau));
        for i in (0..n).filter(|&i| group[i] == g) {
            let mu = (beta[0] * x[2 * i] + beta[1] * x[2 * i + 1] + b).exp();
            score += y[i] - mu;
            curvature += mu;
        }
        assert!(score.abs() < 1e-8, "level {g}: score {score}");
        assert!((level[0].se - curvature.powf(-0.5)).abs() < 1e-9);
    }
}

/// E[b] and sd(b) of a density exp(log_p(b)) on a line, by the trapezoid rule on a window
/// of ±15 sds of Laplace's around the mode with 30001 points: spectrally accurate for a
/// smooth density that decays as a Gaussian's.
fn line_moments(log_p: impl Fn(f64) -> f64, mode: f64, sd: f64) -> (f64, f64) {
    let n = 30001;
    let h = 30.0 * sd / (n - 1) as f64;
    let b: Vec<f64> = (0..n).map(|k| mode - 15.0 * sd + k as f64 * h).collect();
    let lp: Vec<f64> = b.iter().map(|&b| log_p(b)).collect();
    let top = lp.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
    let w: Vec<f64> = lp.iter().map(|l| (l - top).exp()).collect();
    let total: f64 = w.iter().sum();
    let mean = b.iter().zip(&w).map(|(b, w)| b * w).sum::<f64>() / total;
    let var = b
        .iter()
        .zip(&w)
        .map(|(b, w)| (b - mean).powi(2) * w)
        .sum::<f64>()
        / total;
    (mean, var.sqrt())
}

#[test]
fn poisson_conditional_means_are_the_posterior_s_moments() {
    // Groups of 1 to 4 rows with small counts: the posterior is skewed, so its mean lies
    // well away from its mode.
    let sizes = [1usize, 2, 3, 4, 2];
    let group: Vec<usize> = (0..5).flat_map(|g| vec![g; sizes[g]]).collect();
    let n = group.len();
    let xs: Vec<f64> = (0..n).map(|i| (i as f64 * 0.8).sin()).collect();
    let x: Vec<f64> = xs.iter().flat_map(|&x| [1.0, x]).collect();
    let y: Vec<f64> = (0..n).map(|i| ((i * 5) % 4) as f64).collect();
    let m = Glmm::new(Family::Poisson, y.clone(), x, &group, vec![1.0; n], None).unwrap();
    let (beta, tau) = ([-0.3, 0.4], 1.2f64);
    let theta = [beta[0], beta[1], tau.ln()];
    let means = m.conditional_means(&theta).unwrap();
    let modes = m.random_effects(&theta).unwrap();
    let mut largest_gap = 0.0f64;
    for (g, (mean, mode)) in means[0].iter().zip(&modes[0]).enumerate() {
        let log_p = |b: f64| {
            let rows = (0..n).filter(|&i| group[i] == g);
            let lik: f64 = rows
                .map(|i| {
                    let eta = beta[0] + beta[1] * xs[i] + b;
                    y[i] * eta - eta.exp()
                })
                .sum();
            lik - 0.5 * b * b / (tau * tau)
        };
        let (value, sd) = line_moments(log_p, mode[0].value, mode[0].se);
        // 100 adaptive nodes against the trapezoid: to 1e-9 of the sd.
        assert!(
            (mean[0].value - value).abs() < 1e-9 * sd,
            "{g}: {mean:?} against {value}"
        );
        assert!(
            (mean[0].se - sd).abs() < 1e-9 * sd,
            "{g}: {mean:?} against sd {sd}"
        );
        largest_gap = largest_gap.max((value - mode[0].value).abs() / sd);
    }
    assert!(
        largest_gap > 0.05,
        "means and modes {largest_gap} sds apart"
    );
}

/// E[b] and sd(b), b = L u, of a density exp(log_p(u)) in D dimensions, by the product
/// trapezoid rule on a cube of ±`half` around the mode `centre` with `k` points a side
/// (log-concave, so the mode's log density is the largest: one pass).
fn grid_moments<const D: usize>(
    l: [[f64; D]; D],
    centre: [f64; D],
    (half, k): (f64, usize),
    log_p: impl Fn(&[f64; D]) -> f64,
) -> ([f64; D], [f64; D]) {
    let (h, top) = (2.0 * half / (k - 1) as f64, log_p(&centre));
    let (mut total, mut sum, mut sq) = (0.0, [0.0; D], [[0.0; D]; D]);
    for flat in 0..k.pow(D as u32) {
        let mut u = [0.0; D];
        let mut rest = flat;
        for (a, u) in u.iter_mut().enumerate() {
            *u = centre[a] - half + (rest % k) as f64 * h;
            rest /= k;
        }
        let w = (log_p(&u) - top).exp();
        total += w;
        for a in 0..D {
            sum[a] += w * u[a];
            (0..D).for_each(|b| sq[a][b] += w * u[a] * u[b]);
        }
    }
    let mean_u = sum.map(|s| s / total);
    let cov_u = |a: usize, b: usize| sq[a][b] / total - mean_u[a] * mean_u[b];
    let mut mean_b = [0.0; D];
    let mut sd_b = [0.0; D];
    for e in 0..D {
        mean_b[e] = (0..D).map(|a| l[e][a] * mean_u[a]).sum();
        let var: f64 = (0..D)
            .flat_map(|a| (0..D).map(move |b| (a, b)))
            .map(|(a, b)| l[e][a] * cov_u(a, b) * l[e][b])
            .sum();
        sd_b[e] = var.sqrt();
    }
    (mean_b, sd_b)
}

/// u's mode from b's (the `value`s of `mode`): b = L u, L lower-triangular.
fn u_of<const D: usize>(l: [[f64; D]; D], mode: &[Estimate]) -> [f64; D] {
    let mut u = [0.0; D];
    for e in 0..D {
        let known: f64 = (0..e).map(|a| l[e][a] * u[a]).sum();
        u[e] = (mode[e].value - known) / l[e][e];
    }
    u
}

/// Each effect's mean and sd in `got` within `tol` of its sd of the reference's (level `g`).
fn agree<const D: usize>(got: &[Estimate], (value, sd): ([f64; D], [f64; D]), tol: f64, g: usize) {
    for e in 0..D {
        let ok = (got[e].value - value[e]).abs() < tol * sd[e]
            && (got[e].se - sd[e]).abs() < tol * sd[e];
        assert!(ok, "{g}/{e}: {:?} against {value:?}, sds {sd:?}", got[e]);
    }
}

/// Correlated effects z_i = (1, x_i, x_i²)[..D] on groups of `per` rows: the exact means and
/// sds against [`grid_moments`]' (to 1e-9 of each sd in 2 dimensions, 5e-7 in 3: the rules'
/// largest errors there are 6e-14 with 30 nodes a side and 9.4e-8 with 16), and the largest
/// |mean − mode| / sd.
fn correlated_against_grid<const D: usize>(
    family: Family,
    (groups, per): (usize, usize),
    l: [[f64; D]; D],
    (half, k): (f64, usize),
) -> f64 {
    let n = groups * per;
    let group: Vec<usize> = (0..n).map(|i| i / per).collect();
    let xs: Vec<f64> = (0..n).map(|i| (i as f64 * 1.1).cos()).collect();
    let row = |i: usize| -> [f64; D] { std::array::from_fn(|a| xs[i].powi(a as i32)) };
    let trials = 3.0;
    let y: Vec<f64> = (0..n).map(|i| ((i * 7) % 4) as f64).collect();
    let z: Vec<f64> = (0..n).flat_map(row).collect();
    let terms = vec![RandomTerm {
        group: group.clone(),
        z: z.clone(),
        correlated: true,
    }];
    let binomial = family == Family::Binomial;
    let t = binomial.then(|| vec![trials; n]);
    let m = Glmm::with_terms(family, y.clone(), z, terms, t).unwrap();
    // θ: β (0.1, −0.2, …), log diag L, L's off-diagonal row by row.
    let beta: [f64; D] = std::array::from_fn(|a| [0.1, -0.2, 0.15][a]);
    let mut theta: Vec<f64> = beta.to_vec();
    theta.extend((0..D).map(|a| l[a][a].ln()));
    theta.extend((1..D).flat_map(|a| (0..a).map(move |b| l[a][b])));
    let means = m.conditional_means(&theta).unwrap();
    let modes = m.random_effects(&theta).unwrap();
    let tol = if D < 3 { 1e-9 } else { 5e-7 };
    let mut largest_gap = 0.0f64;
    for (g, (mean, mode)) in means[0].iter().zip(&modes[0]).enumerate() {
        let rows: Vec<usize> = (0..n).filter(|&i| group[i] == g).collect();
        let b_of = |u: &[f64; D]| -> [f64; D] {
            std::array::from_fn(|e| (0..=e).map(|a| l[e][a] * u[a]).sum())
        };
        let log_p = |u: &[f64; D]| {
            let b = b_of(u);
            let lik: f64 = rows
                .iter()
                .map(|&i| {
                    let zi = row(i);
                    let eta: f64 = (0..D).map(|a| (beta[a] + b[a]) * zi[a]).sum();
                    if binomial {
                        y[i] * eta - trials * eta.exp().ln_1p()
                    } else {
                        y[i] * eta - eta.exp()
                    }
                })
                .sum();
            lik - 0.5 * u.iter().map(|v| v * v).sum::<f64>()
        };
        let (value, sd) = grid_moments(l, u_of(l, mode), (half, k), log_p);
        agree(mean, (value, sd), tol, g);
        for e in 0..D {
            largest_gap = largest_gap.max((value[e] - mode[e].value).abs() / sd[e]);
        }
    }
    largest_gap
}

#[test]
fn correlated_conditional_means_match_a_fine_grid() {
    // Posterior sds in u are at most 1 (log-concave likelihoods), so ±8 holds all but
    // e^−32 of the mass, and steps of 0.05 and 0.1 leave the trapezoid's error far below.
    let l2 = [[0.9, 0.0], [0.4, 0.5]];
    let gap = correlated_against_grid(Family::Binomial, (4, 5), l2, (8.0, 321));
    assert!(gap > 0.02, "binomial: means and modes {gap} sds apart");
    let l3 = [[0.8, 0.0, 0.0], [0.3, 0.5, 0.0], [-0.2, 0.1, 0.4]];
    let gap = correlated_against_grid(Family::Poisson, (3, 4), l3, (8.0, 161));
    assert!(gap > 0.02, "poisson: means and modes {gap} sds apart");
}

#[test]
fn gaussian_means_are_the_modes_and_crossed_counts_are_refused() {
    let n = 12;
    let group: Vec<usize> = (0..n).map(|i| i % 3).collect();
    let y: Vec<f64> = (0..n).map(|i| (i % 4) as f64).collect();
    let ones = vec![1.0; n];
    let m = Glmm::new(
        Family::Gaussian,
        y.clone(),
        ones.clone(),
        &group,
        ones.clone(),
        None,
    );
    let theta = [0.5, 0.2, -0.1];
    let m = m.unwrap();
    assert_eq!(
        m.conditional_means(&theta).unwrap(),
        m.random_effects(&theta).unwrap()
    );
    let crossed = vec![
        RandomTerm {
            group: group.clone(),
            z: ones.clone(),
            correlated: false,
        },
        RandomTerm {
            group: (0..n).map(|i| i % 4).collect(),
            z: ones.clone(),
            correlated: false,
        },
    ];
    let m = Glmm::with_terms(Family::Poisson, y, ones, crossed, None).unwrap();
    let err = m
        .conditional_means(&[0.1, -0.5, -0.5])
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("at most 3 effects") && err.contains("modes"),
        "{err}"
    );
    assert!(m.random_effects(&[0.1, -0.5, -0.5]).is_ok());
}

#[test]
fn correlated_and_crossed_effects_are_the_gaussian_posterior() {
    // Correlated intercepts and slopes by `a` (3 levels) crossed with intercepts by `b` (4
    // levels): every row in one point, so the levels' places in its latent are all tested.
    let n = 24;
    let xs: Vec<f64> = (0..n).map(|i| (i as f64 * 0.7).sin()).collect();
    let (ga, gb): (Vec<usize>, Vec<usize>) = (0..n).map(|i| (i % 3, (i / 2) % 4)).unzip();
    let y: Vec<f64> = (0..n).map(|i| (i as f64 * 0.9).cos() + xs[i]).collect();
    let terms = vec![
        RandomTerm {
            group: ga.clone(),
            z: xs.iter().flat_map(|&x| [1.0, x]).collect(),
            correlated: true,
        },
        RandomTerm {
            group: gb.clone(),
            z: vec![1.0; n],
            correlated: false,
        },
    ];
    let x: Vec<f64> = xs.iter().flat_map(|&x| [1.0, x]).collect();
    let m = Glmm::with_terms(Family::Gaussian, y.clone(), x, terms, None).unwrap();
    // θ: β, log sd (a: intercept, slope), L[1,0], log sd (b), log σ.
    let theta = [
        0.2,
        0.5,
        0.6f64.ln(),
        0.3f64.ln(),
        0.1,
        0.4f64.ln(),
        0.5f64.ln(),
    ];
    let re = m.random_effects(&theta).unwrap();
    // b-space: a's levels (2 effects each) then b's; G block-diagonal.
    let l = [[0.6, 0.0], [0.1, 0.3]];
    let ga_cov = |r: usize, c: usize| (0..2).map(|k| l[r][k] * l[c][k]).sum::<f64>();
    let m_dim = 3 * 2 + 4;
    let mut g = vec![vec![0.0; m_dim]; m_dim];
    for lev in 0..3 {
        for (r, c) in [(0, 0), (0, 1), (1, 0), (1, 1)] {
            g[2 * lev + r][2 * lev + c] = ga_cov(r, c);
        }
    }
    (0..4).for_each(|lev| g[6 + lev][6 + lev] = 0.4 * 0.4);
    let z: Vec<Vec<f64>> = (0..n)
        .map(|i| {
            let mut row = vec![0.0; m_dim];
            row[2 * ga[i]] = 1.0;
            row[2 * ga[i] + 1] = xs[i];
            row[6 + gb[i]] = 1.0;
            row
        })
        .collect();
    let fixed: Vec<f64> = xs.iter().map(|x| 0.2 + 0.5 * x).collect();
    let (mean, cov) = dense_posterior(&y, &fixed, &z, &g, 0.25);
    for (lev, effects) in re[0].iter().enumerate() {
        for (e, got) in effects.iter().enumerate() {
            let k = 2 * lev + e;
            close(got, mean[k], cov[k][k].sqrt());
        }
    }
    for (lev, effects) in re[1].iter().enumerate() {
        let k = 6 + lev;
        close(&effects[0], mean[k], cov[k][k].sqrt());
    }
    assert_eq!((re[0].len(), re[1].len()), (3, 4));
    assert!(m.random_effects(&theta[..3]).is_err());
}

#[test]
fn a_level_of_all_successes_under_a_wide_prior_has_its_tail_covered() {
    // 60 successes in 60 rows, τ = 3.6: the posterior's right tail is the prior's, wider than
    // Laplace's scale at the mode, and its mean half an sd above the mode (40 nodes leave 2.4e-6
    // of an sd, 100 nodes 5.4e-10).
    let (ones, mixed) = (60, 8);
    let group: Vec<usize> = (0..ones + mixed).map(|i| usize::from(i >= ones)).collect();
    let n = group.len();
    let y: Vec<f64> = (0..n)
        .map(|i| if i < ones { 1.0 } else { (i % 2) as f64 })
        .collect();
    let m = intercepts(Family::Binomial, &y, &group);
    let (beta, tau) = (0.1, 3.6f64);
    let means = m.conditional_means(&[beta, tau.ln()]).unwrap();
    let modes = m.random_effects(&[beta, tau.ln()]).unwrap();
    for g in 0..2 {
        let rows: Vec<usize> = (0..n).filter(|&i| group[i] == g).collect();
        let log_p = |b: f64| {
            let lik: f64 = rows
                .iter()
                .map(|&i| y[i] * (beta + b) - (beta + b).exp().ln_1p())
                .sum();
            lik - 0.5 * b * b / (tau * tau)
        };
        // The window ±15 τ: the prior's scale, not Laplace's.
        let (value, sd) = line_moments(log_p, modes[0][g][0].value, tau);
        let got = &means[0][g][0];
        assert!(
            (got.value - value).abs() < 1e-9 * sd,
            "{g}: {got:?} against {value}"
        );
        assert!(
            (got.se - sd).abs() < 1e-9 * sd,
            "{g}: {got:?} against sd {sd}"
        );
    }
}

#[test]
fn a_level_of_all_successes_with_a_slope_is_within_its_measured_error() {
    // The same tail with a correlated slope (sds 3 and 1 under L): 30 nodes a dimension leave
    // 2.9e-6 of an sd there (20 nodes 6.3e-5, 40 nodes 2.1e-7), and 1e-11 at the mixed level.
    let (ones, mixed) = (40, 10);
    let n = ones + mixed;
    let group: Vec<usize> = (0..n).map(|i| usize::from(i >= ones)).collect();
    let xs: Vec<f64> = (0..n).map(|i| (i as f64 * 1.3).sin()).collect();
    let y: Vec<f64> = (0..n)
        .map(|i| if i < ones { 1.0 } else { (i % 2) as f64 })
        .collect();
    let z: Vec<f64> = xs.iter().flat_map(|&x| [1.0, x]).collect();
    let terms = vec![RandomTerm {
        group: group.clone(),
        z: z.clone(),
        correlated: true,
    }];
    let m = Glmm::with_terms(Family::Binomial, y.clone(), z, terms, None).unwrap();
    let (l, beta) = ([[3.0, 0.0], [0.5, 1.0]], [0.1, 0.2]);
    let theta = [beta[0], beta[1], 3.0f64.ln(), 0.0, 0.5];
    let means = m.conditional_means(&theta).unwrap();
    let modes = m.random_effects(&theta).unwrap();
    for (g, tol) in [(0, 1e-5), (1, 1e-9)] {
        let rows: Vec<usize> = (0..n).filter(|&i| group[i] == g).collect();
        let log_p = |u: &[f64; 2]| {
            let b = [l[0][0] * u[0], l[1][0] * u[0] + l[1][1] * u[1]];
            let lik: f64 = rows
                .iter()
                .map(|&i| {
                    let eta = beta[0] + b[0] + (beta[1] + b[1]) * xs[i];
                    y[i] * eta - eta.exp().ln_1p()
                })
                .sum();
            lik - 0.5 * (u[0] * u[0] + u[1] * u[1])
        };
        let mode = &modes[0][g];
        let (value, sd) = grid_moments(l, u_of(l, mode), (10.0, 801), log_p);
        agree(&means[0][g], (value, sd), tol, g);
        if g == 0 {
            // Half an sd between the mode and the mean of the intercept.
            assert!((value[0] - mode[0].value) / sd[0] > 0.4);
        }
    }
}
