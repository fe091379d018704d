//! lme4's `summary` of a fit as `sagd glmm` prints it (summary.txt): the method, the criteria,
//! the scaled residuals, the random and fixed effects, and the notes and intervals under them.

use std::fmt::Write as _;

use sagd::em::EstimateStatus;
use sagd::glmm::{Criterion, Design, Family, Fitted, GlmmFit, LikelihoodMethod, Summary};

use super::anova::Compared;
use super::confint::Intervals;
use super::ddf::Ddf;
use super::deletions::Deletions;
use super::fitted::scaled_residuals;
use super::ls_means::LsMeans;
use super::step::Step;
use super::GlmmArgs;

/// What the summary adds to the fit: the separation warning, the scaled residuals' quantiles,
/// the confidence intervals (profile, bootstrap), the comparison with other models, the
/// lmerTest tests (t and F with their degrees of freedom), ranova, drop1 and step, and the
/// least-squares means.
pub(super) type Notes<'a> = (
    Option<&'a str>,
    Option<&'a [f64; 5]>,
    &'a [&'a Intervals],
    Option<&'a Compared>,
    Option<&'a Ddf>,
    (&'a [Deletions], Option<&'a Step>),
    Option<&'a LsMeans>,
);

/// The criterion maximised (ℓ, or REML's) and its name.
pub(super) fn criterion(fit: &GlmmFit) -> (f64, &'static str) {
    match &fit.fitted {
        Fitted::Exact(e) if e.criterion == Criterion::Reml => {
            (e.reml.unwrap_or(f64::NAN), "REML criterion")
        }
        _ => (fit.log_likelihood.value, "log-likelihood"),
    }
}

/// How the fit was made, in words.
fn how(fit: &GlmmFit) -> String {
    match &fit.fitted {
        Fitted::Exact(e) => {
            let by = match e.method {
                LikelihoodMethod::Quadrature => {
                    format!("exact likelihood by adaptive Gauss-Hermite quadrature, {} nodes per effect", e.nodes)
                }
                _ => "exact likelihood in closed form".to_string(),
            };
            let fit_by = if e.criterion == Criterion::Reml {
                "REML"
            } else {
                "maximum likelihood"
            };
            let conv = if e.converged {
                String::new()
            } else {
                format!(
                    "; NOT converged: the maximiser stopped after {} iterations (gradient {:.1e})",
                    e.iterations, e.grad_max
                )
            };
            format!("{fit_by} ({by}; {} iterations{conv})", e.iterations)
        }
        Fitted::Em(t) => {
            let status = match t.final_estimate().status {
                EstimateStatus::Polished => "polished".to_string(),
                EstimateStatus::Em => "EM's estimate, not polished".to_string(),
                EstimateStatus::PolishFailed(w) => format!("NOT polished: {w}"),
            };
            let status = match &t.em_resumed {
                Some(why) => format!(
                    "{status}; EM took its estimate back from a first polish that failed ({why}) and ran on"
                ),
                None => status,
            };
            if t.msteps.is_empty() {
                format!(
                    "maximum likelihood (Monte Carlo Newton steps with Langevin chains from Laplace's maximum, no M-step; {status})"
                )
            } else {
                format!(
                    "maximum likelihood (automated Monte Carlo EM with Langevin chains; {} M-steps, {status})",
                    t.msteps.len()
                )
            }
        }
    }
}

/// lme4's `summary` of the fit, with the standard errors of the sds that lme4 does not give,
/// the scaled residuals' quantiles where the fitted values were found, the warning of
/// separated responses ([`sagd::glmm::Glmm::separation`]) where there is one, and the profile
/// intervals where they were asked for.
pub(super) fn render(
    a: &GlmmArgs,
    family: Family,
    d: &Design,
    (fit, (separation, residuals, intervals, compared, tests, deletions, ls_means)): (
        &GlmmFit,
        Notes<'_>,
    ),
    s: &Summary,
    seconds: f64,
) -> String {
    let mut o = String::new();
    header(&mut o, a, family, d, fit);
    criteria(&mut o, d, fit, s);
    if let Some(q) = residuals {
        scaled_residuals(&mut o, q);
    }
    random_effects(&mut o, d, fit, s);
    match tests {
        Some(t) => t.tables(&mut o, d, s),
        None => fixed_effects(&mut o, family, d, fit, s),
    }
    if let Some(w) = separation {
        let _ = writeln!(o, "warning: {w}");
    }
    for i in intervals {
        i.table(&mut o);
    }
    if let Some(c) = compared {
        c.table(&mut o);
    }
    for d in deletions.0 {
        d.table(&mut o);
    }
    if let Some(s) = deletions.1 {
        s.table(&mut o);
    }
    if let Some(m) = ls_means {
        m.table(&mut o);
    }
    let _ = writeln!(o, "({seconds:.2} s)");
    o
}

/// The method, family, formula and data.
fn header(o: &mut String, a: &GlmmArgs, family: Family, d: &Design, fit: &GlmmFit) {
    let link = match family {
        Family::Gaussian => "identity",
        Family::Poisson => "log",
        Family::Binomial => "logit",
    };
    let _ = writeln!(o, "Mixed model fit by {}", how(fit));
    let _ = writeln!(
        o,
        " Family: {}  ( {link} )",
        format!("{family:?}").to_lowercase()
    );
    let _ = writeln!(o, "Formula: {}", a.formula);
    let dropped = if d.dropped > 0 {
        format!("; {} row(s) with a missing value dropped", d.dropped)
    } else {
        String::new()
    };
    let _ = writeln!(
        o,
        "   Data: {} ({} observations{dropped})",
        a.data.display(),
        d.n_obs
    );
    if let Some(w) = &a.weights {
        let _ = writeln!(o, "Weights: {w}");
    }
    o.push('\n');
}

/// AIC, BIC, the criterion, the deviance and the log-likelihood with its error.
fn criteria(o: &mut String, d: &Design, fit: &GlmmFit, s: &Summary) {
    let (value, name) = criterion(fit);
    let l = fit.log_likelihood;
    let err = match l.method {
        LikelihoodMethod::ImportanceSampling { draws } => {
            format!(
                " ± {:.4} (importance sampling, {draws} draws per block)",
                l.se
            )
        }
        LikelihoodMethod::Quadrature if l.se > 0.0 => format!(" (quadrature error {:.0e})", l.se),
        _ => String::new(),
    };
    let _ = writeln!(
        o,
        "{:>12} {:>12} {:>12} {:>12} {:>9}",
        "AIC",
        "BIC",
        if name == "REML criterion" {
            "REML"
        } else {
            "logLik"
        },
        "deviance",
        "df.resid"
    );
    let _ = writeln!(
        o,
        "{:>12.2} {:>12.2} {:>12.4} {:>12.4} {:>9}",
        s.aic(value),
        s.bic(value, d.n_obs),
        value,
        -2.0 * value,
        d.n_obs.saturating_sub(s.n_params)
    );
    let at = if name == "REML criterion" {
        " (maximum likelihood's, at this estimate)"
    } else {
        ""
    };
    let _ = writeln!(o, "log-likelihood{at}: {:.4}{err}", l.value);
}

/// The random effects' standard deviations and correlations, the residual's, the groups, and the
/// singular-fit note.
fn random_effects(o: &mut String, d: &Design, fit: &GlmmFit, s: &Summary) {
    let _ = writeln!(o, "\nRandom effects:");
    let _ = writeln!(
        o,
        " {:<12} {:<16} {:>10} {:>10}  Corr",
        "Groups", "Name", "Std.Dev.", "(s.e.)"
    );
    for (names, term) in d.term_names.iter().zip(&s.random) {
        for (k, (effect, sd)) in names.effects.iter().zip(&term.sd).enumerate() {
            let group = if k == 0 { names.group.as_str() } else { "" };
            let cor: Vec<String> = (0..k).map(|b| format!("{:6.3}", term.cor[k][b])).collect();
            let _ = writeln!(
                o,
                " {group:<12} {effect:<16} {:>10} {:>10}  {}",
                shown(sd.value, 4),
                se_text(sd.se),
                cor.join(" ")
            );
        }
    }
    if let Some(sigma) = s.sigma {
        let _ = writeln!(
            o,
            " {:<12} {:<16} {:>10} {:>10}",
            "Residual",
            "",
            shown(sigma.value, 4),
            se_text(sigma.se)
        );
    }
    let groups: Vec<String> = d
        .term_names
        .iter()
        .map(|t| format!("{}, {}", t.group, t.levels.len()))
        .collect();
    let _ = writeln!(
        o,
        "Number of obs: {}, groups:  {}",
        d.n_obs,
        groups.join("; ")
    );
    if fit.singular == Some(true) {
        let _ = writeln!(o, "{}", sagd::glmm::SINGULAR_NOTE);
    }
}

/// The fixed effects' table (with Monte Carlo errors after EM) and the polish's warning.
fn fixed_effects(o: &mut String, family: Family, d: &Design, fit: &GlmmFit, s: &Summary) {
    let stat = if family == Family::Gaussian { "t" } else { "z" };
    let mc = match &fit.fitted {
        Fitted::Em(t) => Some(t.final_estimate().se.to_vec()),
        Fitted::Exact(_) => None,
    };
    let _ = write!(
        o,
        "\nFixed effects:\n {:<20} {:>10} {:>11} {:>8}",
        "",
        "Estimate",
        "Std. Error",
        format!("{stat} value")
    );
    if family != Family::Gaussian {
        let _ = write!(o, " {:>10}", "Pr(>|z|)");
    }
    if mc.is_some() {
        let _ = write!(o, " {:>10}", "MC error");
    }
    let _ = writeln!(o);
    for (j, (name, e)) in d.x_names.iter().zip(&s.fixed).enumerate() {
        let _ = write!(
            o,
            " {name:<20} {:>10} {:>11} {:>8.3}",
            shown(e.value, 5),
            se_text(e.se),
            e.z()
        );
        if family != Family::Gaussian {
            let _ = write!(o, " {:>10}", p_text(e.p_value()));
        }
        if let Some(m) = mc.as_ref().and_then(|m| m.get(j)) {
            let _ = write!(o, " {m:>10.2e}");
        }
        let _ = writeln!(o);
    }
    if let Fitted::Em(t) = &fit.fitted {
        if let Some(w) = t.polished.as_ref().and_then(|p| p.se_warning.as_ref()) {
            let _ = writeln!(o, "warning: {w}");
        }
    }
}

/// A p-value as R's summaries print it: below the double's precision (|z| > 8.2) it reads
/// `<2e-16`, not a number (erfc is 0 beyond |z| ≈ 38, which printed as `0.000e0`).
pub(super) fn p_text(p: f64) -> String {
    if p < f64::EPSILON {
        "<2e-16".to_string()
    } else {
        format!("{p:.3e}")
    }
}

pub(super) fn se_text(se: f64) -> String {
    if se.is_finite() {
        shown(se, 4)
    } else {
        "-".to_string()
    }
}

/// `v` with `decimals` decimals, or in scientific notation with 4 significant digits where
/// those decimals would hide it (below 10⁻³) or it would run past its column (10⁷ and above):
/// a response in small or large units reads as one in the usual ones.
pub(super) fn shown(v: f64, decimals: usize) -> String {
    if v == 0.0 || !v.is_finite() || (1e-3..1e7).contains(&v.abs()) {
        format!("{v:.decimals$}")
    } else {
        format!("{v:.3e}")
    }
}

#[cfg(test)]
mod tests {
    use super::p_text;

    #[test]
    fn p_values_below_the_double_s_precision_read_as_r_prints_them() {
        let z = |z: f64| sagd::glmm::Estimate { value: z, se: 1.0 }.p_value();
        assert_eq!(p_text(z(70.6)), "<2e-16");
        assert_eq!(p_text(z(13.0)), "<2e-16");
        assert_eq!(p_text(z(8.0)), "1.244e-15");
        assert_eq!(p_text(z(1.959_963_985)), "5.000e-2");
    }
}
