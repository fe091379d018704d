//! The exact fits against closed forms and the other exact references.

use super::quadrature::ProductRule;
use super::*;
use crate::glmm::RandomTerm;
use crate::quadrature::GaussHermite;
use crate::rng::NormalStream;

mod kenward_roger;
mod offset;
mod profile;
mod satterthwaite;
mod uneven;
mod units;

/// y_ij = 1 + b_i + e_ij, b ~ N(0, 0.8²), e ~ N(0, 0.5²): `groups` balanced groups of `per`.
fn one_way(groups: usize, per: usize, seed: u64) -> Glmm {
    let mut s = NormalStream::new(seed);
    let b: Vec<f64> = (0..groups).map(|_| 0.8 * s.draw()).collect();
    let n = groups * per;
    let y = (0..n).map(|i| 1.0 + b[i / per] + 0.5 * s.draw()).collect();
    let g: Vec<usize> = (0..n).map(|i| i / per).collect();
    Glmm::new(Family::Gaussian, y, vec![1.0; n], &g, vec![1.0; n], None).unwrap()
}

/// Counts or successes with a random intercept (sd 0.6) and a covariate.
fn intercepts(family: Family, groups: usize, per: usize, seed: u64) -> Glmm {
    intercepts_at(0.3, family, groups, per, seed)
}

/// [`intercepts`] with the fixed intercept `level`.
fn intercepts_at(level: f64, family: Family, groups: usize, per: usize, seed: u64) -> Glmm {
    let mut s = NormalStream::new(seed);
    let b: Vec<f64> = (0..groups).map(|_| 0.6 * s.draw()).collect();
    let n = groups * per;
    let x: Vec<f64> = (0..n)
        .flat_map(|i| [1.0, ((i * 7) % 11) as f64 / 5.0 - 1.0])
        .collect();
    let trials = 5.0;
    let y = (0..n)
        .map(|i| {
            let eta = level + 0.4 * x[2 * i + 1] + b[i / per];
            // A deterministic draw near the mean keeps the data fixed without a Poisson sampler.
            let u = (s.draw() * 0.5).tanh() * 0.5 + 0.5;
            match family {
                Family::Poisson => (eta.exp() * (0.5 + u)).round(),
                _ => (trials / (1.0 + (-eta).exp()) * (0.5 + u))
                    .round()
                    .min(trials),
            }
        })
        .collect();
    let g: Vec<usize> = (0..n).map(|i| i / per).collect();
    let t = (family == Family::Binomial).then(|| vec![trials; n]);
    Glmm::new(family, y, x, &g, vec![1.0; n], t).unwrap()
}

/// Poisson counts with correlated random intercepts and slopes.
fn slopes(groups: usize, per: usize) -> Glmm {
    slopes_in(groups, per, 1.0)
}

/// [`slopes`] with the covariate in units `x_unit` times the first.
fn slopes_in(groups: usize, per: usize, x_unit: f64) -> Glmm {
    let counts = |eta: f64, e: f64| {
        let mean = eta.exp();
        (mean + mean.sqrt() * e).round().max(0.0)
    };
    slopes_with(
        Family::Poisson,
        (5, groups, per),
        (0.5, [0.5, 0.3]),
        x_unit,
        counts,
    )
}

/// Correlated random intercepts and slopes (sds `sd`, correlation 0.6) of `groups` groups of
/// `per` rows, drawn from the stream `seed`: x ~ N(0, 1) (in units `x_unit` times its first
/// in the design), η = `beta0` + b₀ + (0.3 + b₁) x, and each row's response `y(η, a normal
/// draw)`.
fn slopes_with(
    family: Family,
    (seed, groups, per): (u64, usize, usize),
    (beta0, sd): (f64, [f64; 2]),
    x_unit: f64,
    y: impl Fn(f64, f64) -> f64,
) -> Glmm {
    let mut s = NormalStream::new(seed);
    let n = groups * per;
    let x: Vec<f64> = (0..n).map(|_| s.draw()).collect();
    let b: Vec<(f64, f64)> = (0..groups)
        .map(|_| {
            let (e1, e2) = (s.draw(), s.draw());
            (sd[0] * e1, sd[1] * (0.6 * e1 + 0.8 * e2))
        })
        .collect();
    let y = (0..n)
        .map(|i| {
            let (b0, b1) = b[i / per];
            y(beta0 + b0 + (0.3 + b1) * x[i], s.draw())
        })
        .collect();
    let xs: Vec<f64> = x.iter().flat_map(|&v| [1.0, v * x_unit]).collect();
    let term = RandomTerm {
        group: (0..n).map(|i| i / per).collect(),
        z: xs.clone(),
        correlated: true,
    };
    Glmm::with_terms(family, y, xs, vec![term], None).unwrap()
}

#[test]
fn balanced_one_way_fits_are_the_anova_estimates() {
    // ML and REML of the balanced one-way model in closed form (Searle, Casella and
    // McCulloch 1992, ch. 3): σ̂² = MSW; σ̂_b² = (MSB − MSW)/n (REML) or
    // ((1 − 1/G)·MSB − MSW)/n (ML); μ̂ = ȳ, its se √(MSB/(nG)) under REML.
    let (g, n) = (30, 6);
    let m = one_way(g, n, 3);
    let y = &m.y;
    let mean = y.iter().sum::<f64>() / (g * n) as f64;
    let means: Vec<f64> = (0..g)
        .map(|i| y[i * n..(i + 1) * n].iter().sum::<f64>() / n as f64)
        .collect();
    let ssw: f64 = (0..g * n).map(|i| (y[i] - means[i / n]).powi(2)).sum();
    let ssb: f64 = means.iter().map(|v| n as f64 * (v - mean).powi(2)).sum();
    let (msw, msb) = (ssw / (g * (n - 1)) as f64, ssb / (g - 1) as f64);
    for (criterion, sb2) in [
        (Criterion::Reml, (msb - msw) / n as f64),
        (
            Criterion::Ml,
            ((1.0 - 1.0 / g as f64) * msb - msw) / n as f64,
        ),
    ] {
        let fit = m
            .fit_exact(&ExactSettings {
                criterion,
                ..Default::default()
            })
            .unwrap();
        assert!(fit.converged, "{fit:?}");
        let th = &fit.theta;
        assert!(
            (th[0] - mean).abs() < 1e-8,
            "{criterion:?}: {th:?} vs {mean}"
        );
        assert!(
            (th[1].exp().powi(2) / sb2 - 1.0).abs() < 1e-6,
            "{criterion:?}: {th:?}"
        );
        assert!(
            (th[2].exp().powi(2) / msw - 1.0).abs() < 1e-6,
            "{criterion:?}: {th:?}"
        );
        // μ̂'s standard error: Var = (σ_b² + σ²/n)/G at the estimates (under REML,
        // MSB/(nG)); the same form under ML, where the information's cross terms vanish.
        let want = ((sb2 + msw / n as f64) / g as f64).sqrt();
        assert!(
            (fit.se[0] / want - 1.0).abs() < 1e-5,
            "{criterion:?}: {:?}",
            fit.se
        );
        assert_eq!(fit.reml.is_some(), criterion == Criterion::Reml);
    }
}

#[test]
fn the_gaussian_fit_is_the_maximum_of_the_closed_form() {
    // Crossed correlated slopes × intercepts (one point of 11 effects) and nested terms (the
    // model tests' data): the fit's ℓ is the closed form's (tested against the dense normal
    // density there) and no step of 1e-3 along any coordinate raises it.
    for nested in [false, true] {
        let m = crate::glmm::tests::two_terms(Family::Gaussian, nested);
        let fit = m.fit_exact(&ExactSettings::default()).unwrap();
        assert!(fit.converged, "{fit:?}");
        let at = |th: &[f64]| m.log_likelihood(th, 0).unwrap().value;
        assert!((at(&fit.theta) - fit.log_likelihood).abs() < 1e-9);
        for j in 0..fit.theta.len() {
            for s in [-1e-3, 1e-3] {
                let mut th = fit.theta.clone();
                th[j] += s;
                assert!(
                    at(&th) <= fit.log_likelihood + 1e-9,
                    "nested {nested}, θ[{j}]"
                );
            }
        }
    }
}

#[test]
fn quadrature_fits_are_the_one_dimensional_maximum() {
    // Against the generic 1-D maximum of `em::maximum_likelihood` (40 Gauss-Hermite nodes,
    // finite-difference centring): the same maximum, the same log-likelihood.
    for family in [Family::Poisson, Family::Binomial] {
        let m = intercepts(family, 40, 8, 2);
        let fit = m.fit_exact(&ExactSettings::default()).unwrap();
        assert!(fit.converged && fit.quadrature_error < 1e-8, "{fit:?}");
        let reference =
            crate::em::maximum_likelihood(&m, &m.start(), &GaussHermite::new(40)).unwrap();
        assert!(
            (-reference.f - fit.log_likelihood).abs() < 1e-8,
            "{family:?}: {fit:?}"
        );
        for (a, b) in fit.theta.iter().zip(&reference.x) {
            assert!(
                (a - b).abs() < 1e-5,
                "{family:?}: {:?} vs {:?}",
                fit.theta,
                reference.x
            );
        }
        let quad = m.log_likelihood(&fit.theta, 0).unwrap();
        assert_eq!(quad.method, LikelihoodMethod::Quadrature);
        assert!((quad.value - fit.log_likelihood).abs() < 1e-8);
        assert!(fit.se.iter().all(|s| s.is_finite() && *s > 0.0), "{fit:?}");
    }
}

#[test]
fn counts_in_the_hundreds_of_thousands_fit_their_maximum() {
    // Counts near e^12: a first, steepest-descent BFGS step goes so far that the rates overflow
    // and a point's mode cannot be found. The line search steps back from it (it stopped the
    // fit before). The maximum is the generic 1-D one, as above, whose own BFGS starts from
    // the fit (from `Glmm::start` its steps overflow the same way) and moves off any point that
    // is not its maximum.
    let m = intercepts_at(12.0, Family::Poisson, 12, 10, 4);
    assert!(m.y.iter().cloned().fold(0.0, f64::max) > 1e5);
    let fit = m.fit_exact(&ExactSettings::default()).unwrap();
    assert!(fit.converged, "{fit:?}");
    let reference = crate::em::maximum_likelihood(&m, &fit.theta, &GaussHermite::new(40)).unwrap();
    // ℓ ≈ −6·10⁵ sums rows of 10⁶: the same to 12 digits, a few of its roundings.
    assert!(
        (-reference.f - fit.log_likelihood).abs() < 1e-12 * fit.log_likelihood.abs(),
        "{fit:?} vs {reference:?}"
    );
    for (a, b) in fit.theta.iter().zip(&reference.x) {
        assert!((a - b).abs() < 1e-6, "{:?} vs {:?}", fit.theta, reference.x);
    }
}

/// ℓ(θ) by the product rule of `nodes` per dimension, after checking its gradient (Fisher's
/// identity at the nodes) against central differences of the same rule's ℓ to 1e-5.
fn gradient_is_the_rule_s_own(m: &Glmm, theta: &[f64], nodes: usize) -> f64 {
    let rule = ProductRule::new(m.latent_dim, nodes);
    let mut modes: Vec<Vec<f64>> = m.points.iter().map(|c| vec![0.0; c.dim]).collect();
    let (value, grad) = m.quadrature_value_grad(theta, &rule, &mut modes).unwrap();
    let fd = central_gradient(
        |th| {
            let mut modes = modes.clone();
            Ok(m.quadrature_value_grad(th, &rule, &mut modes)?.0)
        },
        theta,
    )
    .unwrap();
    for (a, b) in grad.iter().zip(&fd) {
        assert!(
            (a - b).abs() < 1e-5 * a.abs().max(1.0),
            "{:?}: {grad:?} vs {fd:?}",
            m.family
        );
    }
    value
}

#[test]
fn correlated_slopes_by_product_quadrature() {
    // Two effects per point: ℓ by the 15² rule agrees with importance sampling within 4 of
    // its errors; the Fisher-identity gradient is ℓ's own (central differences of ℓ).
    let m = slopes(30, 8);
    let theta = vec![0.4, 0.25, -0.6, -1.1, 0.1];
    let value = gradient_is_the_rule_s_own(&m, &theta, 15);
    let sampled = m.log_likelihood_sampled(&theta, 20_000, 4).unwrap();
    assert!(
        (sampled.value - value).abs() < 4.0 * sampled.se,
        "{sampled:?} vs {value}"
    );
    assert!(sampled.se < 0.02, "{sampled:?}");
    let fit = m.fit_exact(&ExactSettings::default()).unwrap();
    assert!(fit.converged && fit.quadrature_error < 1e-6, "{fit:?}");
    assert!(fit.se.iter().all(|s| s.is_finite() && *s > 0.0), "{fit:?}");
}

/// Three effects a point in two terms, correlated (1 + x | g) and independent (w || g), under
/// `family`: 20 groups of 6 rows.
fn three_effects(family: Family) -> Glmm {
    let (groups, per) = (20, 6);
    let n = groups * per;
    let mut s = NormalStream::new(9);
    let (x, w): (Vec<f64>, Vec<f64>) = (0..n).map(|_| (s.draw(), s.draw())).unzip();
    let b: Vec<[f64; 3]> = (0..groups)
        .map(|_| [0.5 * s.draw(), 0.3 * s.draw(), 0.4 * s.draw()])
        .collect();
    let y = (0..n)
        .map(|i| {
            let [b0, b1, b2] = b[i / per];
            let eta = 0.3 + b0 + (0.4 + b1) * x[i] + b2 * w[i];
            let e = s.draw();
            match family {
                Family::Gaussian => eta + 0.6 * e,
                Family::Poisson => (eta.exp() + eta.exp().sqrt() * e).round().max(0.0),
                Family::Binomial => ((4.0 / (1.0 + (-eta).exp())) + e).round().clamp(0.0, 4.0),
            }
        })
        .collect();
    let group: Vec<usize> = (0..n).map(|i| i / per).collect();
    let terms = vec![
        RandomTerm {
            group: group.clone(),
            z: x.iter().flat_map(|&v| [1.0, v]).collect(),
            correlated: true,
        },
        RandomTerm {
            group,
            z: w,
            correlated: false,
        },
    ];
    let xs = x.iter().flat_map(|&v| [1.0, v]).collect();
    let trials = (family == Family::Binomial).then(|| vec![4.0; n]);
    Glmm::with_terms(family, y, xs, terms, trials).unwrap()
}

#[test]
fn the_quadrature_gradient_is_its_value_s_with_two_terms_in_a_point() {
    // Fisher's identity summed row by row over the nodes: for each family, ∇ℓ by the 15³ rule
    // against central differences of the same rule's ℓ. The identity leaves out how the nodes
    // move with θ (they follow each point's mode and curvature), a term of the rule's own error:
    // about 1e-3 here for the Poisson family by the default 9³ rule, below 1e-5 by 15³. For the
    // Gaussian family the integrand is Gaussian, so the rule is exact: ℓ is the closed form's.
    for family in [Family::Gaussian, Family::Poisson, Family::Binomial] {
        let m = three_effects(family);
        assert_eq!(m.latent_dim, 3);
        let mut theta = vec![0.2, 0.35, -0.7, -1.2, 0.3, -0.9];
        if family == Family::Gaussian {
            theta.push(-0.5);
        }
        let value = gradient_is_the_rule_s_own(&m, &theta, 15);
        if family == Family::Gaussian {
            let exact = m.log_likelihood(&theta, 0).unwrap();
            assert_eq!(exact.method, LikelihoodMethod::Exact);
            assert!(
                (exact.value - value).abs() < 1e-9 * value.abs(),
                "{} vs {value}",
                exact.value
            );
        }
    }
}

#[test]
fn a_variance_at_its_boundary_is_a_singular_fit_with_the_other_errors_kept() {
    // Counts with no group effect: ℓ is highest at sd 0. The fit says so, leaves log sd
    // without an error and keeps β's, which then are the errors of the model without the
    // random effect (a Poisson GLM: (Xᵀ W X)⁻¹ with W = diag(μ̂)).
    let (groups, per) = (40, 6);
    let n = groups * per;
    let x: Vec<f64> = (0..n)
        .flat_map(|i| [1.0, (i % 5) as f64 / 2.0 - 1.0])
        .collect();
    let y: Vec<f64> = (0..n).map(|i| ((i * 7 + i / 3) % 5) as f64).collect();
    let g: Vec<usize> = (0..n).map(|i| i % groups).collect();
    let m = Glmm::new(Family::Poisson, y, x.clone(), &g, vec![1.0; n], None).unwrap();
    let fit = m.fit_exact(&ExactSettings::default()).unwrap();
    assert!(fit.singular && fit.converged, "{fit:?}");
    assert!(fit.theta[2] < -5.0 && fit.se[2].is_nan(), "{fit:?}");
    let mut xwx = [0.0; 4];
    for i in 0..n {
        let (a, b) = (x[2 * i], x[2 * i + 1]);
        let mu = (fit.theta[0] * a + fit.theta[1] * b).exp();
        xwx[0] += mu * a * a;
        xwx[1] += mu * a * b;
        xwx[3] += mu * b * b;
    }
    let det = xwx[0] * xwx[3] - xwx[1] * xwx[1];
    let want = [(xwx[3] / det).sqrt(), (xwx[0] / det).sqrt()];
    for (se, w) in fit.se.iter().zip(want) {
        assert!((se / w - 1.0).abs() < 1e-3, "{:?} vs {want:?}", fit.se);
    }
    assert!(
        !intercepts(Family::Poisson, 40, 6, 2)
            .fit_exact(&ExactSettings::default())
            .unwrap()
            .singular
    );
}

#[test]
fn same_bits_on_any_number_of_threads() {
    let m = intercepts(Family::Poisson, 600, 4, 8);
    let fits: Vec<ExactFit> = [1, 3]
        .iter()
        .map(|&t| {
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(t)
                .build()
                .unwrap();
            pool.install(|| m.fit_exact(&ExactSettings::default()).unwrap())
        })
        .collect();
    assert_eq!(fits[0], fits[1]);
}

#[test]
fn what_cannot_be_fitted_exactly_is_named() {
    let err = |m: &Glmm, s: ExactSettings| format!("{}", m.fit_exact(&s).unwrap_err());
    let poisson = intercepts(Family::Poisson, 5, 4, 1);
    let reml = ExactSettings {
        criterion: Criterion::Reml,
        ..Default::default()
    };
    assert!(err(&poisson, reml).contains("Gaussian family only"));
    let nodes = ExactSettings {
        nodes: Some(0),
        ..Default::default()
    };
    assert!(err(&poisson, nodes).contains("1 to 50"));
    // Crossed Poisson intercepts: one point of 9 effects.
    let n = 20;
    let crossed = Glmm::with_terms(
        Family::Poisson,
        (0..n).map(|i| (i % 3) as f64).collect(),
        vec![1.0; n],
        [4, 5]
            .iter()
            .map(|&l| RandomTerm {
                group: (0..n).map(|i| i % l).collect(),
                z: vec![1.0; n],
                correlated: false,
            })
            .collect(),
        None,
    )
    .unwrap();
    assert_eq!(crossed.exact_method(), None);
    // A column that another determines is refused with the data, before any fit.
    let n = 24;
    let collinear = Glmm::new(
        Family::Gaussian,
        (0..n).map(|i| (i as f64 * 0.7).sin()).collect(),
        (0..n)
            .flat_map(|i| [1.0, i as f64, 2.0 * i as f64])
            .collect(),
        &(0..n).map(|i| i % 4).collect::<Vec<_>>(),
        vec![1.0; n],
        None,
    );
    let e = format!("{:?}", collinear.err());
    assert!(e.contains("column 2 is a linear combination"), "{e}");
    assert!(err(&crossed, ExactSettings::default()).contains("automated EM"));
}

/// The balanced one-way model's responses, 1 + a_g + w_gj, with the spreads set exactly: MSW = 1
/// and (1 − 1/G)·MSB = `between`, so that ML's σ̂_b² is (between − 1)/n where that is positive,
/// and 0 otherwise.
fn one_way_spread(groups: usize, per: usize, between: f64) -> Glmm {
    let mut s = NormalStream::new(11);
    let centred = |v: Vec<f64>| {
        let mean = v.iter().sum::<f64>() / v.len() as f64;
        v.into_iter().map(|x| x - mean).collect::<Vec<f64>>()
    };
    let w: Vec<Vec<f64>> = (0..groups)
        .map(|_| centred((0..per).map(|_| s.draw()).collect()))
        .collect();
    let ssw: f64 = w.iter().flatten().map(|v| v * v).sum();
    let w_scale = ((groups * (per - 1)) as f64 / ssw).sqrt();
    let a = centred((0..groups).map(|_| s.draw()).collect());
    // n Σ a² / G = between.
    let a_scale =
        (between * groups as f64 / (per as f64 * a.iter().map(|v| v * v).sum::<f64>())).sqrt();
    let n = groups * per;
    let y = (0..n)
        .map(|i| 1.0 + a_scale * a[i / per] + w_scale * w[i / per][i % per])
        .collect();
    let g: Vec<usize> = (0..n).map(|i| i / per).collect();
    Glmm::new(Family::Gaussian, y, vec![1.0; n], &g, vec![1.0; n], None).unwrap()
}

#[test]
fn a_maximum_on_the_boundary_is_reached_and_one_just_inside_is_kept() {
    // Below the boundary's threshold the model is N iid normals: ℓ = −N/2 (ln 2πσ̂² + 1) with
    // σ̂² = (SSW + SSB)/N, and REML's σ̂² = (SSW + SSB)/(N − 1). In log σ_b the pull towards 0
    // fades as σ_b², which left BFGS short of it.
    let (g, n) = (400, 10);
    let total = (g * n) as f64;
    // SSW = G(n − 1)·MSW, SSB = G·(1 − 1/G)·MSB.
    let ss = (g * (n - 1)) as f64 + 0.8 * g as f64;
    let m = one_way_spread(g, n, 0.8);
    let ss_data: f64 = {
        let mean = m.y.iter().sum::<f64>() / total;
        m.y.iter().map(|v| (v - mean).powi(2)).sum()
    };
    assert!((ss_data / ss - 1.0).abs() < 1e-12, "{ss_data} vs {ss}");
    for (criterion, s2) in [
        (Criterion::Ml, ss / total),
        (Criterion::Reml, ss / (total - 1.0)),
    ] {
        let settings = ExactSettings {
            criterion,
            ..Default::default()
        };
        let fit = m.fit_exact(&settings).unwrap();
        let th = &fit.theta;
        assert!(fit.singular && fit.converged, "{criterion:?}: {fit:?}");
        assert!(
            th[1] - th[2] < AT_BOUNDARY.ln() && fit.se[1].is_nan(),
            "{th:?}"
        );
        // What the fit leaves of σ_b (below the threshold) moves σ̂² by about n σ_b².
        let left = n as f64 * (2.0 * th[1]).exp() / s2;
        assert!(
            (th[2].exp().powi(2) / s2 - 1.0).abs() < 2.0 * left + 1e-12,
            "{criterion:?}: {th:?}"
        );
        if criterion == Criterion::Ml {
            let want = -total / 2.0 * ((2.0 * std::f64::consts::PI * s2).ln() + 1.0);
            assert!(
                (fit.log_likelihood - want).abs() < 1e-9 * want.abs(),
                "{fit:?}"
            );
        }
    }
    // σ_b = 0.05 σ is ML's maximum, below the factor that is tried at the boundary (0.1 σ),
    // and must stay where it is.
    let m = one_way_spread(g, n, 1.0 + 0.05f64.powi(2) * n as f64);
    let fit = m.fit_exact(&ExactSettings::default()).unwrap();
    let th = &fit.theta;
    assert!(!fit.singular && fit.converged, "{fit:?}");
    assert!((th[1].exp() / 0.05 - 1.0).abs() < 1e-5, "{th:?}");
    assert!((th[2].exp() - 1.0).abs() < 1e-8, "{th:?}");
}

#[test]
fn a_model_without_fixed_effects_is_fitted_at_its_boundary() {
    // y ~ 0 + (1 | g) on three groups of (1, 0): each group's within contrast and its mean
    // both ask for a variance of 1/2, σ² and σ² + 2σ_b², so the maximum is at σ_b = 0, σ² = 1/2,
    // ℓ = −3 ln π − 3, where ℓ is flat to fourth order in σ_b.
    let y = vec![1.0, 0.0, 1.0, 0.0, 1.0, 0.0];
    let g = [0, 0, 1, 1, 2, 2];
    let m = Glmm::new(Family::Gaussian, y, Vec::new(), &g, vec![1.0; 6], None).unwrap();
    assert_eq!(m.n_fixed(), 0);
    let fit = m.fit_exact(&ExactSettings::default()).unwrap();
    let want = -3.0 * std::f64::consts::PI.ln() - 3.0;
    assert!(fit.singular && fit.converged, "{fit:?}");
    assert!((fit.log_likelihood - want).abs() < 1e-12, "{fit:?}");
    assert!((fit.theta[1].exp().powi(2) - 0.5).abs() < 1e-9, "{fit:?}");
}

#[test]
fn a_correlation_at_its_boundary_is_reached() {
    // Responses centred within each group, with correlated intercepts and slopes: the fit
    // lands on a boundary (here a correlation of ±1) and its ℓ is at least that of the model
    // nested in it without the intercepts.
    let (groups, per) = (200, 10);
    let mut s = NormalStream::new(2);
    let n = groups * per;
    let x: Vec<f64> = (0..n).map(|_| s.draw()).collect();
    let mut y: Vec<f64> = (0..n).map(|_| s.draw()).collect();
    for c in y.chunks_mut(per) {
        let mean = c.iter().sum::<f64>() / per as f64;
        c.iter_mut().for_each(|v| *v -= mean);
    }
    let group: Vec<usize> = (0..n).map(|i| i / per).collect();
    let xs: Vec<f64> = x.iter().flat_map(|&v| [1.0, v]).collect();
    let full = RandomTerm {
        group: group.clone(),
        z: xs.clone(),
        correlated: true,
    };
    let slope = RandomTerm {
        group,
        z: x.clone(),
        correlated: false,
    };
    let fit = |term| {
        Glmm::with_terms(Family::Gaussian, y.clone(), xs.clone(), vec![term], None)
            .unwrap()
            .fit_exact(&ExactSettings::default())
            .unwrap()
    };
    let (full, slope) = (fit(full), fit(slope));
    assert!(full.singular && full.converged, "{full:?}");
    assert!(
        full.log_likelihood >= slope.log_likelihood - 1e-9 * slope.log_likelihood.abs(),
        "{} vs {}",
        full.log_likelihood,
        slope.log_likelihood
    );
}
