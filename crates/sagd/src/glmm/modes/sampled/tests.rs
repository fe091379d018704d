//! The sampled conditional means against exact ones: a fine grid, quadrature and Gaussian
//! posteriors, each mean within its Monte Carlo error.

use super::super::super::exact::ProductRule;
use super::super::super::{Family, RandomTerm};
use super::super::tests::intercepts;
use super::*;

/// The largest |z| of `sampled`'s means against `exact`'s, in their Monte Carlo errors, after
/// checking each mean within 4.5 of them and each sd within 5 of its own error (sd / √(2 ESS),
/// a near-normal posterior's).
fn within_mc_error(sampled: &SampledMeans, exact: &[Vec<Vec<Estimate>>]) -> f64 {
    let mut worst = 0.0f64;
    for (t, levels) in exact.iter().enumerate() {
        for (lev, effects) in levels.iter().enumerate() {
            for (e, want) in effects.iter().enumerate() {
                let (got, mcse) = (sampled.effects[t][lev][e], sampled.mcse[t][lev][e]);
                let z = (got.value - want.value) / mcse;
                let ess = (got.se / mcse).powi(2);
                let sd_error = want.se / (2.0 * ess).sqrt();
                assert!(
                    z.abs() < 4.5,
                    "{t}/{lev}/{e}: {got:?} ± {mcse} against {want:?}"
                );
                assert!(
                    (got.se - want.se).abs() < 5.0 * sd_error,
                    "{t}/{lev}/{e}: sd {} against {} (± {sd_error})",
                    got.se,
                    want.se
                );
                worst = worst.max(z.abs());
            }
        }
    }
    worst
}

#[test]
fn sampled_means_of_nested_counts_are_the_quadrature_s() {
    let n = 40;
    let group: Vec<usize> = (0..n).map(|i| i % 10).collect();
    let y: Vec<f64> = (0..n).map(|i| ((i * 7) % 5) as f64).collect();
    let m = intercepts(Family::Poisson, &y, &group);
    let theta = [0.3, 0.8f64.ln()];
    let s = m.conditional_means_sampled(&theta, 4000, 7).unwrap();
    let worst = within_mc_error(&s, &m.conditional_means(&theta).unwrap());
    assert!(
        worst > 0.1,
        "z-scores of at most {worst}: the errors are too wide"
    );
    assert!(s.max_rhat < 1.01 && s.min_ess > 1000.0, "{s:?}");
    assert!((0.6..=0.95).contains(&s.acceptance), "{s:?}");
}

#[test]
fn sampled_means_of_crossed_binary_effects_are_a_fine_grid_s() {
    // Intercepts by a (3 levels) crossed with intercepts by b (2) on 12 binary rows under wide
    // priors: one point of 5 effects with a skewed posterior (its means a fifth of an sd and
    // more from its modes), integrated by the conditional means' own product rule with 20
    // nodes a side (checked against 16); the sampler is not told it is small.
    let n = 12;
    let (ga, gb): (Vec<usize>, Vec<usize>) = (0..n).map(|i| (i % 3, (i / 3) % 2)).unzip();
    let y: Vec<f64> = (0..n).map(|i| f64::from(i % 3 != 0 || i == 6)).collect();
    let x: Vec<f64> = (0..n).flat_map(|i| [1.0, (i as f64 * 0.8).cos()]).collect();
    let term = |group| RandomTerm {
        group,
        z: vec![1.0; n],
        correlated: false,
    };
    let m = Glmm::with_terms(Family::Binomial, y, x, vec![term(ga), term(gb)], None).unwrap();
    let theta = [0.1, 0.4, 2.0f64.ln(), 1.5f64.ln()];
    let by_rule = |nodes| {
        let rule = ProductRule::new(5, nodes);
        m.given_data(&theta, |factors, c| {
            let lap = m.laplace(&theta, factors, c, None)?;
            m.quadrature_moments(&theta, factors, c, &lap, &rule)
        })
        .unwrap()
    };
    let (fine, coarse) = (by_rule(20), by_rule(16));
    let modes = m.random_effects(&theta).unwrap();
    let mut gap = 0.0f64;
    let all = |e: &[Vec<Vec<Estimate>>]| e.iter().flatten().flatten().copied().collect::<Vec<_>>();
    for ((f, c), mode) in all(&fine).iter().zip(all(&coarse)).zip(all(&modes)) {
        assert!((f.value - c.value).abs() < 1e-5 * f.se && (f.se - c.se).abs() < 1e-5 * f.se);
        gap = gap.max((f.value - mode.value).abs() / f.se);
    }
    assert!(gap > 0.2, "means and modes {gap} sds apart");
    let s = m.conditional_means_sampled(&theta, 4000, 3).unwrap();
    within_mc_error(&s, &fine);
    assert!(s.max_rhat < 1.01, "{s:?}");
    // The modes are many Monte Carlo errors away: the check above tells them from the means.
    let sampled = all(&s.effects);
    let mcse: Vec<f64> = s.mcse.iter().flatten().flatten().copied().collect();
    let z = (sampled[0].value - all(&modes)[0].value) / mcse[0];
    assert!(
        z.abs() > 10.0,
        "the first effect's mode is {z} errors from its sampled mean"
    );
}

#[test]
fn sampled_means_of_crossed_gaussian_effects_are_the_exact_posterior_s() {
    // 12 × 9 crossed intercepts with a covariate: one point of 21 effects whose posterior is
    // Gaussian, its exact moments the modes and curvature.
    let (na, nb) = (12, 9);
    let n = na * nb;
    let (ga, gb): (Vec<usize>, Vec<usize>) = (0..n).map(|i| (i / nb, i % nb)).unzip();
    let xs: Vec<f64> = (0..n).map(|i| (i as f64 * 0.37).sin()).collect();
    let y: Vec<f64> = (0..n)
        .map(|i| 1.0 + 0.5 * xs[i] + (ga[i] as f64 * 1.7).sin() + (i as f64 * 2.3).cos())
        .collect();
    let term = |group| RandomTerm {
        group,
        z: vec![1.0; n],
        correlated: false,
    };
    let x = xs.iter().flat_map(|&x| [1.0, x]).collect();
    let m = Glmm::with_terms(Family::Gaussian, y, x, vec![term(ga), term(gb)], None).unwrap();
    let theta = [1.0, 0.5, 0.8f64.ln(), 0.5f64.ln(), 0.6f64.ln()];
    let s = m.conditional_means_sampled(&theta, 1000, 11).unwrap();
    within_mc_error(&s, &m.random_effects(&theta).unwrap());
    assert_eq!((s.effects[0].len(), s.effects[1].len()), (na, nb));
    assert!(s.max_rhat < 1.01, "{s:?}");
}

#[test]
fn sampled_means_are_the_same_bits_on_any_number_of_threads() {
    let m = crate::glmm::tests::two_terms(Family::Binomial, false);
    let theta: Vec<f64> = (0..m.theta_len()).map(|k| 0.2 - 0.1 * k as f64).collect();
    let on = |threads| {
        rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .unwrap()
            .install(|| m.conditional_means_sampled(&theta, 100, 5).unwrap())
    };
    assert_eq!(on(1), on(3));
    let err = m.conditional_means_sampled(&theta, 10, 5).unwrap_err();
    assert!(err.to_string().contains("at least 20 draws"), "{err}");
}

/// 300 × 200 crossed Gaussian intercepts, one row a pair: one block of 500 effects, the sampled
/// means against the exact ones (the modes), with the spread of their z-scores and the time.
/// By hand: `cargo test --release -p sagd --lib sampled_means_at_scale -- --ignored --nocapture`.
#[test]
#[ignore = "a measurement of a minute: run by hand"]
fn sampled_means_at_scale() {
    let (na, nb) = (300, 200);
    let n = na * nb;
    let mut s = crate::rng::NormalStream::new(4);
    let (a, b): (Vec<f64>, Vec<f64>) = (
        (0..na).map(|_| 0.8 * s.draw()).collect(),
        (0..nb).map(|_| 0.5 * s.draw()).collect(),
    );
    let (ga, gb): (Vec<usize>, Vec<usize>) = (0..n).map(|i| (i / nb, i % nb)).unzip();
    let y: Vec<f64> = (0..n)
        .map(|i| 1.0 + a[ga[i]] + b[gb[i]] + 1.5 * s.draw())
        .collect();
    let term = |group| RandomTerm {
        group,
        z: vec![1.0; n],
        correlated: false,
    };
    let m = Glmm::with_terms(
        Family::Gaussian,
        y,
        vec![1.0; n],
        vec![term(ga), term(gb)],
        None,
    )
    .unwrap();
    let theta = [1.0, 0.8f64.ln(), 0.5f64.ln(), 1.5f64.ln()];
    let exact = m.random_effects(&theta).unwrap();
    let t = std::time::Instant::now();
    let sampled = m.conditional_means_sampled(&theta, 500, 1).unwrap();
    let seconds = t.elapsed().as_secs_f64();
    let worst = within_mc_error(&sampled, &exact);
    let z: Vec<f64> = exact
        .iter()
        .flatten()
        .flatten()
        .zip(sampled.effects.iter().flatten().flatten())
        .zip(sampled.mcse.iter().flatten().flatten())
        .map(|((e, s), mcse)| (s.value - e.value) / mcse)
        .collect();
    let rms = (z.iter().map(|z| z * z).sum::<f64>() / z.len() as f64).sqrt();
    let rel: f64 = sampled
        .mcse
        .iter()
        .flatten()
        .flatten()
        .zip(sampled.effects.iter().flatten().flatten())
        .map(|(m, e)| m / e.se)
        .fold(0.0, f64::max);
    eprintln!(
        "500 effects: {seconds:.1} s, largest |z| {worst:.2}, rms z {rms:.3}, largest mcse/sd \
         {rel:.4}, min ESS {:.0}, max R-hat {:.4}, acceptance {:.3}",
        sampled.min_ess, sampled.max_rhat, sampled.acceptance
    );
    assert!(
        (0.8..1.25).contains(&rms),
        "rms z {rms}: the errors are not the spread"
    );
}
