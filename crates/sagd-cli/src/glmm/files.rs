//! The fit's files besides the summary: estimates.csv (one row per parameter on lme4's scales)
//! and result.json (all of it, with θ̂, its covariance and how the fit was made).

use std::fmt::Write as _;

use sagd::glmm::{Design, Family, Fitted, GlmmFit, Summary};
use serde_json::json;

use super::summary::criterion;
use super::GlmmArgs;

/// `v` as a CSV field: quoted, its quotes doubled.
pub(super) fn csv_text(v: &str) -> String {
    format!("\"{}\"", v.replace('"', "\"\""))
}

/// One row per parameter on lme4's scales: kind, group, name, estimate, standard error.
pub(super) fn estimates_csv(d: &Design, fit: &GlmmFit, s: &Summary) -> String {
    let mut o = String::from("kind,group,name,estimate,se\n");
    for (name, e) in d.x_names.iter().zip(&s.fixed) {
        let _ = writeln!(o, "fixed,,{},{},{}", csv_text(name), e.value, e.se);
    }
    for (names, term) in d.term_names.iter().zip(&s.random) {
        for (k, (effect, sd)) in names.effects.iter().zip(&term.sd).enumerate() {
            let _ = writeln!(
                o,
                "sd,{},{},{},{}",
                csv_text(&names.group),
                csv_text(effect),
                sd.value,
                sd.se
            );
            for (b, other) in names.effects.iter().enumerate().take(k) {
                let _ = writeln!(
                    o,
                    "cor,{},{},{},",
                    csv_text(&names.group),
                    csv_text(&format!("{other}:{effect}")),
                    term.cor[k][b]
                );
            }
        }
    }
    if let Some(sigma) = s.sigma {
        let _ = writeln!(o, "sigma,,Residual,{},{}", sigma.value, sigma.se);
    }
    let (value, name) = criterion(fit);
    let _ = writeln!(
        o,
        "loglik,,{},{value},{}",
        csv_text(name),
        fit.log_likelihood.se
    );
    o
}

/// `result.json`: the command, the data's shape, the estimate on both scales and how it was made.
pub(super) fn result_json(
    a: &GlmmArgs,
    family: Family,
    d: &Design,
    (fit, separation): (&GlmmFit, Option<&str>),
    s: &Summary,
    seconds: f64,
) -> serde_json::Value {
    let (value, name) = criterion(fit);
    let method = match &fit.fitted {
        Fitted::Exact(e) => json!({"kind": "exact", "fit": e}),
        Fitted::Em(t) => json!({
            "kind": "em",
            "status": t.final_estimate().status.name(),
            "polish_error": t.polish_error,
            "estimate_mc_se": t.final_estimate().se,
            "msteps": t.msteps.len(),
            "converged": t.converged,
            "handover_rate": t.handover_rate,
            "em_resumed": t.em_resumed,
            "langevin_steps": t.langevin_steps,
            "polished": t.polished,
        }),
    };
    json!({
        "command": "glmm",
        "sagd_version": env!("CARGO_PKG_VERSION"),
        "flags": a,
        "formula": a.formula,
        "family": family,
        "data": {
            "file": a.data,
            "n_obs": d.n_obs,
            "dropped": d.dropped,
            "response": d.response,
            "weights": a.weights,
        },
        "fixed": d.x_names.iter().zip(&s.fixed).map(|(n, e)| json!({"name": n, "estimate": e.value, "se": e.se})).collect::<Vec<_>>(),
        "random": d.term_names.iter().zip(&s.random).map(|(t, r)| json!({
            "group": t.group, "levels": t.levels.len(), "effects": t.effects, "sd": r.sd, "cor": r.cor,
        })).collect::<Vec<_>>(),
        "sigma": s.sigma,
        "log_likelihood": fit.log_likelihood,
        "criterion": {"name": name, "value": value},
        "aic": s.aic(value),
        "bic": s.bic(value, d.n_obs),
        "n_params": s.n_params,
        "singular": fit.singular,
        "separation": separation,
        "theta": fit.theta,
        "covariance": fit.covariance,
        "method": method,
        "seconds": seconds,
    })
}
