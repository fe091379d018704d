//! A GLMM fitted by its exact likelihood from Rust: Poisson counts with correlated random
//! intercepts and slopes, lme4's `glmer(y ~ x + (1 + x | g), family = poisson)`, which glmer fits
//! only by Laplace's approximation. `Glmm::fit_exact` integrates each group's two effects by
//! adaptive Gauss-Hermite quadrature at its mode and maximises the result by BFGS; the same data
//! by REML in the Gaussian family follow, then the same model from a table and lme4's formula,
//! with [`Glmm::fit`] and the summary on lme4's scales.
//!
//! Run: `cargo run --release -p sagd --example glmm_exact`

use rand::SeedableRng;
use rand_distr::{Distribution, Poisson, StandardNormal};
use rand_xoshiro::Xoshiro256PlusPlus;
use sagd::glmm::formula::Column;
use sagd::glmm::{Criterion, ExactSettings, Family, FitSettings, Formula, Frame, Glmm, RandomTerm};
use sagd::run::Control;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // 60 groups of 8: log E[y] = 0.5 + 0.3 x + b0 + b1 x, sd(b0) = 0.5, sd(b1) = 0.3, cor 0.6.
    let (groups, per) = (60, 8);
    let (x, y) = simulate(groups, per);
    fit_from_columns(&x, &y, per)?;
    fit_from_formula(x, y, per)
}

/// Counts of `groups` groups of `per`: the covariate x and the Poisson responses y.
fn simulate(groups: usize, per: usize) -> (Vec<f64>, Vec<f64>) {
    let mut rng = Xoshiro256PlusPlus::seed_from_u64(3);
    let mut normal = || -> f64 { StandardNormal.sample(&mut rng) };
    let effects: Vec<(f64, f64)> = (0..groups)
        .map(|_| {
            let (e0, e1) = (normal(), normal());
            (0.5 * e0, 0.3 * (0.6 * e0 + 0.8 * e1))
        })
        .collect();
    let x: Vec<f64> = (0..groups * per).map(|_| normal()).collect();
    let mut rng = Xoshiro256PlusPlus::seed_from_u64(4);
    let y: Vec<f64> = (0..groups * per)
        .map(|i| {
            let (b0, b1) = effects[i / per];
            let mean = (0.5 + b0 + (0.3 + b1) * x[i]).exp();
            Poisson::new(mean).map_or(0.0, |p| p.sample(&mut rng))
        })
        .collect();
    (x, y)
}

/// The model from its design matrices, fitted by the exact likelihood (Poisson) and by REML
/// (the same design with Gaussian responses).
fn fit_from_columns(x: &[f64], y: &[f64], per: usize) -> Result<(), Box<dyn std::error::Error>> {
    let design: Vec<f64> = x.iter().flat_map(|&v| [1.0, v]).collect();
    let slopes = RandomTerm {
        group: (0..y.len()).map(|i| i / per).collect(),
        z: design.clone(),
        correlated: true,
    };
    let model = Glmm::with_terms(
        Family::Poisson,
        y.to_vec(),
        design.clone(),
        vec![slopes.clone()],
        None,
    )?;
    let fit = model.fit_exact(&ExactSettings::default())?;
    // θ = (β0, β1, log L00, log L11, L10), Σ = L Lᵀ.
    let t = &fit.theta;
    let (l00, l11, l10) = (t[2].exp(), t[3].exp(), t[4]);
    let (sd0, sd1) = (l00, l10.hypot(l11));
    println!(
        "Poisson, (1 + x | g): β = ({:.4} ± {:.4}, {:.4} ± {:.4}), sds ({sd0:.4}, {sd1:.4}), cor {:.3}",
        t[0],
        fit.se[0],
        t[1],
        fit.se[1],
        l00 * l10 / (sd0 * sd1)
    );
    println!(
        "  log-likelihood {:.4} by {:?} ({} nodes per effect, quadrature error {:.1e}), {} BFGS iterations, singular: {}",
        fit.log_likelihood, fit.method, fit.nodes, fit.quadrature_error, fit.iterations, fit.singular
    );

    // The same design with Gaussian responses (log(1 + y)), by REML as lmer's default.
    let gaussian = Glmm::with_terms(
        Family::Gaussian,
        y.iter().map(|v| (1.0 + v).ln()).collect(),
        design,
        vec![slopes],
        None,
    )?;
    let reml = gaussian.fit_exact(&ExactSettings {
        criterion: Criterion::Reml,
        ..ExactSettings::default()
    })?;
    println!(
        "Gaussian by REML: β = ({:.4}, {:.4}), σ = {:.4}, REML criterion {:.4}, log-likelihood there {:.4}",
        reml.theta[0],
        reml.theta[1],
        reml.theta[5].exp(),
        reml.reml.unwrap_or(f64::NAN),
        reml.log_likelihood
    );
    Ok(())
}

/// The same model from a table and lme4's formula, by [`Glmm::fit`], with the summary on lme4's
/// scales: the columns' names come with the estimates.
fn fit_from_formula(
    x: Vec<f64>,
    y: Vec<f64>,
    per: usize,
) -> Result<(), Box<dyn std::error::Error>> {
    let groups: Vec<Option<String>> = (0..y.len())
        .map(|i| Some(format!("g{}", i / per)))
        .collect();
    let frame = Frame::new(
        vec!["y".into(), "x".into(), "g".into()],
        vec![Column::Number(y), Column::Number(x), Column::Text(groups)],
    )?;
    let design = Formula::parse("y ~ x + (1 + x | g)")?.design(&frame)?;
    let model = design.glmm(Family::Poisson)?;
    let fit = model.fit(&FitSettings::default(), &mut |_| Control::Continue)?;
    let summary = model.summary(&fit.theta, fit.covariance.as_deref());
    for (name, b) in design.x_names.iter().zip(&summary.fixed) {
        println!("  {name:12} {:8.4} ± {:.4}", b.value, b.se);
    }
    let sd = &summary.random[0].sd;
    println!(
        "  sd {} {:.4} ± {:.4}, sd x {:.4} ± {:.4}; AIC {:.2}",
        design.term_names[0].effects[0],
        sd[0].value,
        sd[0].se,
        sd[1].value,
        sd[1].se,
        summary.aic(fit.log_likelihood.value)
    );
    Ok(())
}
