//! What `sagd em` writes: `result.json` and the printed summary.

use sagd_apps::e1::{E1Data, E1Result, E1Settings};
use serde_json::json;

use super::E1Output;

/// `result.json`: the run's settings and every series of the figures.
pub(super) fn result_json(
    o: &E1Output,
    s: &E1Settings,
    r: &E1Result,
    t_plots: f64,
    total: f64,
) -> serde_json::Value {
    let (sagd_end, ex_end) = (r.sagd_end(), r.exact_end());
    let dist = sagd_end
        .iter()
        .zip(ex_end)
        .map(|(u, v)| (u - v).powi(2))
        .sum::<f64>()
        .sqrt();
    let last = |v: &[f64]| v.last().copied().unwrap_or(f64::NAN);
    let origin = match (&s.data, &o.file) {
        (E1Data::Simulated { true_theta, .. }, _) => {
            json!({"source": "simulated", "true_theta": true_theta})
        }
        (_, Some((file, column))) => json!({"source": "file", "file": file, "column": column}),
        (_, None) => json!({"source": "file"}),
    };
    let mut timing = r.timing_s.clone();
    timing.insert("plots".into(), t_plots);
    timing.insert("total".into(), total);
    let mut v = json!({
        "experiment": "E1 automated EM, Gamma-sigmoid model",
        "sagd_version": env!("CARGO_PKG_VERSION"),
        "seed": s.seed,
        "flags": o.flags,
        "settings": s.em(),
        "data": {"n": r.x.len(), "x": r.x, "origin": origin},
        "theta0": s.theta0,
        "sagd": {
            "path": r.em.path,
            "loglik": r.loglik_sagd,
            "final": sagd_end,
            "final_loglik": r.loglik_sagd.last(),
            "estimate": r.em.estimate,
            "estimate_se": r.em.estimate_se,
            "estimate_loglik": r.estimate_loglik,
            "converged": r.em.converged,
            "handover_rate": r.em.handover_rate,
            "em_resumed": r.em.em_resumed,
            "msteps": r.em.msteps,
            "langevin_steps": r.em.langevin_steps,
            "backoffs": r.em.backoffs,
        },
        "exact_gd": o.compare.then(|| json!({"path": r.exact_path, "loglik": r.loglik_exact, "final": ex_end, "final_loglik": r.loglik_exact.last()})),
        "mle": r.mle,
        "comparison": if o.compare {
            json!({
                "distance_sagd_exact_final": dist,
                "loglik_exact_minus_sagd_final": last(&r.loglik_exact) - last(&r.loglik_sagd),
                "loglik_max_minus_sagd_estimate": r.mle.loglik - r.estimate_loglik,
            })
        } else {
            json!({"loglik_max_minus_sagd_estimate": r.mle.loglik - r.estimate_loglik})
        },
        "quadrature_check": {"nodes": s.quad_nodes, "reference": "trapezoid, 28001 points on [-14, 14]", "max_abs_err_loglik": r.quadrature_error},
        "surface": o.compare.then_some(&r.surface),
        "timing_s": timing,
        "warnings": r.warnings,
        "standard_errors": r.information,
        "polished": r.polished.as_ref().map(|(p, ll)| serde_json::json!({
            "estimate": p.estimate,
            "mc_se": p.mc_se,
            "loglik": ll,
            "loglik_max_minus_polished": r.mle.loglik - ll,
            "gap_estimates": p.gaps,
            "gap_noise": p.gap_noise,
            "converged": p.converged,
            "se_warning": p.se_warning,
        })),
    });
    if !r.exchanged.is_empty() {
        // A run split over processes: what the first process exchanged in each phase.
        v["exchanged"] = json!(r.exchanged);
    }
    v
}

/// The printed summary; `file` is the user's data file and the column read from it.
pub(super) fn summary(
    s: &E1Settings,
    r: &E1Result,
    file: Option<(&std::path::Path, String)>,
    total: f64,
) {
    let em = s.em();
    // With a user's file, say which model was fitted to which column: E1's, the only one `sagd
    // em` fits.
    let model = match (&s.data, file) {
        (E1Data::Observed { .. }, Some((f, column))) => format!("Gamma-sigmoid model (the paper's E1: X | Z ~ Gamma(10 σ(a + bZ), 1), Z ~ N(0, 1)) fitted by automated EM to {}, column {column}", f.display()),
        (E1Data::Observed { .. }, None) => "Gamma-sigmoid model (the paper's E1: X | Z ~ Gamma(10 σ(a + bZ), 1), Z ~ N(0, 1)) fitted to your data by automated EM".to_string(),
        (E1Data::Simulated { .. }, _) => "E1 automated EM".to_string(),
    };
    say!(
        "{model}: n = {}, seed = {}, {} M-steps of T = {}{}",
        r.x.len(),
        s.seed,
        r.em.msteps.len(),
        em.updates_per_mstep,
        match (em.stopping.is_some(), r.em.converged, r.em.handover_rate) {
            (false, _, _) => String::new(),
            (true, true, _) => " (stopping rule met)".to_string(),
            (true, false, Some(rate)) => format!(
                " (EM slow, each M-step repeating {rate:.2} of the last: handed to the polish)"
            ),
            (true, false, None) if r.mle.unbounded => {
                " (stopping rule NOT met: ℓ has no maximum to reach, see the WARNING)".to_string()
            }
            (true, false, None) => " (stopping rule NOT met: raise --max-msteps)".to_string(),
        }
    );
    say!("{:12} {:>10} {:>10} {:>12}", "", "a", "b", "loglik");
    let row = |name: &str, t: &[f64], ll: f64| {
        say!("{name:12} {:>10.5} {:>10.5} {ll:>12.5}", t[0], t[1]);
    };
    let last = |v: &[f64]| v.last().copied().unwrap_or(f64::NAN);
    // The paper's comparison, when it ran: exact gradient ascent and SAGD's last iterate.
    if !r.exact_path.is_empty() {
        row("exact GD", r.exact_end(), last(&r.loglik_exact));
        row("SAGD", r.sagd_end(), last(&r.loglik_sagd));
    }
    if r.em.converged {
        say!(
            "{:12} {:>10.5} {:>10.5}   (± {:.4}, {:.4})",
            "SAGD est.",
            r.em.estimate[0],
            r.em.estimate[1],
            r.em.estimate_se[0],
            r.em.estimate_se[1]
        );
    }
    if let Some((p, ll)) = &r.polished {
        say!(
            "{:12} {:>10.5} {:>10.5} {ll:>12.5}   (Monte Carlo se {:.4}, {:.4}; {} Newton steps, gap {})",
            "polished",
            p.estimate[0],
            p.estimate[1],
            p.mc_se[0],
            p.mc_se[1],
            p.gaps.len(),
            if p.converged { "below 0.01" } else { "NOT below 0.01" }
        );
    }
    row(r.mle.label(), &r.mle.theta, r.mle.loglik);
    if let Some(i) = &r.information {
        // Each standard error with its own Monte Carlo error, when the draws gave one.
        let err = |j: usize| {
            i.se_error
                .get(j)
                .map_or(String::new(), |e| format!(" ± {e:.4}"))
        };
        say!(
            "standard errors at the estimate (observed information, {} draws per chain): a {:.4}{} (95% Wald [{:.3}, {:.3}]), b {:.4}{} (95% Wald [{:.3}, {:.3}])",
            i.draws, i.se[0], err(0), i.wald95[0][0], i.wald95[0][1], i.se[1], err(1), i.wald95[1][0], i.wald95[1][1]
        );
    }
    for w in &r.warnings {
        say!("WARNING: {w}");
    }
    say!(
        "quadrature max abs error vs brute force: {:.1e}",
        r.quadrature_error
    );
    say!(
        "time: SAGD {:.3} s, total {total:.3} s",
        r.timing_s.get("sagd").copied().unwrap_or(0.0)
    );
}
