//! The fits of data in other units: a response or a covariate in units 10⁻⁶ to 10⁶ times the
//! first gives the same fit in those units, by every route (closed form, quadrature, EM and the
//! polish).

use super::*;
use crate::glmm::Summary;

/// Gaussian responses with correlated random intercepts and slopes (sds 0.8 and 0.5,
/// correlation 0.6, σ 0.5), 40 groups of 10, in units `scale` times the first, the covariate in
/// units `x_unit` times its first.
fn gaussian_slopes(scale: f64, x_unit: f64) -> Glmm {
    let response = |eta: f64, e: f64| scale * (eta + 0.5 * e);
    slopes_with(
        Family::Gaussian,
        (19, 40, 10),
        (1.0, [0.8, 0.5]),
        x_unit,
        response,
    )
}

/// The default fit of `m` against that of `base`, the same data in other units: each
/// estimate and standard error of β, the first term's sds and σ over its entry of `units`
/// (`base`'s to 1e-6 and 1e-5: the fits agree to BFGS's tolerance, about 1e-7), the
/// correlation and the singular verdict the same, ℓ moved by `shift` (to 1e-9).
fn same_fit_in_units(m: &Glmm, base: &Glmm, units: &[f64], shift: f64) {
    use crate::glmm::FitSettings;
    let fit = |m: &Glmm| {
        let f = m
            .fit(&FitSettings::default(), &mut |_| {
                crate::run::Control::Continue
            })
            .unwrap();
        let s = m.summary(&f.theta, f.covariance.as_deref());
        (s, f.log_likelihood.value, f.singular)
    };
    let ((s, ll, singular), (b, b_ll, b_singular)) = (fit(m), fit(base));
    let close = |a: f64, b: f64, tol: f64, what: &str| {
        assert!((a - b).abs() <= tol * b.abs(), "{what}: {a} against {b}");
    };
    assert_eq!(singular, b_singular);
    close(ll, b_ll + shift, 1e-9, "ℓ");
    let sds = |s: &Summary| {
        s.random
            .iter()
            .flat_map(|t| t.sd.clone())
            .collect::<Vec<_>>()
    };
    let (e_sds, b_sds) = (sds(&s), sds(&b));
    let pairs = s.fixed.iter().zip(&b.fixed);
    let pairs = pairs.chain(e_sds.iter().zip(&b_sds));
    let pairs = pairs.chain(s.sigma.iter().zip(&b.sigma));
    for ((e, b), unit) in pairs.zip(units) {
        close(e.value / unit, b.value, 1e-6, "estimate");
        close(e.se / unit, b.se, 1e-5, "standard error");
    }
    let cors = |s: &Summary| {
        s.random
            .iter()
            .flat_map(|t| t.cor.concat())
            .collect::<Vec<_>>()
    };
    for (a, b) in cors(&s).iter().zip(&cors(&b)) {
        close(*a, *b, 1e-6, "correlation");
    }
}

/// Poisson counts of 20 × 10 crossed levels, one row a pair, with random intercepts of each
/// (sds 0.5 and 0.3) and a covariate in units `x_unit` times its first: a design fitted by EM
/// and the polish.
fn crossed_counts(x_unit: f64) -> Glmm {
    let (na, nb) = (20, 10);
    let mut s = NormalStream::new(31);
    let n = na * nb;
    let x: Vec<f64> = (0..n).map(|_| s.draw()).collect();
    let a: Vec<f64> = (0..na).map(|_| 0.5 * s.draw()).collect();
    let b: Vec<f64> = (0..nb).map(|_| 0.3 * s.draw()).collect();
    let y = (0..n)
        .map(|i| {
            let mean = (0.5 + a[i / nb] + b[i % nb] + 0.3 * x[i]).exp();
            (mean + mean.sqrt() * s.draw()).round().max(0.0)
        })
        .collect();
    let term = |group: Vec<usize>| RandomTerm {
        group,
        z: vec![1.0; n],
        correlated: false,
    };
    let terms = vec![
        term((0..n).map(|i| i / nb).collect()),
        term((0..n).map(|i| i % nb).collect()),
    ];
    let xs = x.iter().flat_map(|&v| [1.0, v * x_unit]).collect();
    Glmm::with_terms(Family::Poisson, y, xs, terms, None).unwrap()
}

#[test]
fn a_gaussian_fit_in_other_units_is_the_same_fit_in_those_units() {
    // The response in units 10⁻⁶ to 10⁶ times the first: every estimate and standard error on
    // lme4's scales scales with it, ℓ moves by −n log c. Before, the start's sds (0.5 in any
    // units) left the fit at 10⁻³ and 10⁶ at a boundary, steps of one size in θ gave standard
    // errors at 10⁻⁶ 39 times the estimate, and the singular rule's sd of 10⁻⁴ called a fit
    // at 10⁻⁶ singular.
    let base = gaussian_slopes(1.0, 1.0);
    for c in [1e-6, 1e-3, 1e3, 1e6] {
        same_fit_in_units(&gaussian_slopes(c, 1.0), &base, &[c; 5], -400.0 * c.ln());
    }
}

#[test]
fn a_covariate_in_other_units_gives_the_same_fit_in_those_units() {
    // A slope's covariate in units 10⁻⁶ to 10⁶ times the first: its coefficient, its random
    // effect's sd and their errors scale with 1/c, the rest stays. Before, a Poisson fit at
    // 10⁶ stopped at its start (its slopes' sd 0.5 overflowed the rates), its coefficient's
    // error was 41% off with the intercepts alone, a Gaussian fit ended 7.7 nats below the
    // maximum, and a crossed Poisson fit (EM and the polish) ended 7.6 nats below it, its
    // polish failed and its errors left blank.
    let (poisson, gaussian) = (slopes_in(30, 8, 1.0), gaussian_slopes(1.0, 1.0));
    let crossed = crossed_counts(1.0);
    for c in [1e-6, 1e-3, 1e3, 1e6] {
        let units = [1.0, 1.0 / c, 1.0, 1.0 / c, 1.0];
        same_fit_in_units(&slopes_in(30, 8, c), &poisson, &units, 0.0);
        same_fit_in_units(&gaussian_slopes(1.0, c), &gaussian, &units, 0.0);
        same_fit_in_units(&crossed_counts(c), &crossed, &[1.0, 1.0 / c, 1.0, 1.0], 0.0);
    }
}
