//! What `sagd debias --data` writes: the fitted latent distributions' samples and quantiles, the
//! density figure, the predictive check, the trace and `result.json`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context, Result};
use sagd_apps::debias::choose::HeldOut;
use sagd_apps::debias::figure::PredictiveSeries;
use sagd_apps::debias::Deconvolution;
use sagd_apps::debias::{deconvolve as fit_data, E2Settings};
use serde_json::json;

use super::render::{density_figure, write_trace};

/// The command whose result a deconvolution's folder holds.
const DECONVOLVE: &str = "debias --data";
use super::{run_options, DebiasArgs};
use crate::input::{read_column, Column, Domain};
use crate::output::Staging;
use crate::progress::progress_bar;

/// The deconvolution of `--data`: samples, density figure, trace and `result.json`.
pub fn deconvolve(a: &DebiasArgs, s: &E2Settings, path: &Path) -> Result<()> {
    let t_all = Instant::now();
    let noise_sd = a.noise_sd.ok_or_else(|| {
        anyhow::anyhow!(
            "--data needs --noise-sd: the standard deviation of the noise in X = Z + N(0, sd²), which the data cannot tell; give the one your measurements have (e.g. --noise-sd 0.5)"
        )
    })?;
    let column: Option<Column> = a
        .column
        .as_deref()
        .map(|c| c.parse().map_err(|e| anyhow::anyhow!("--column: {e}")))
        .transpose()?;
    let data = read_column(path, column.as_ref(), Domain::Finite)?;
    let x = &data.values;
    let out = a
        .out
        .clone()
        .unwrap_or_else(|| PathBuf::from("out/deconvolution"));
    let mut staging = Staging::new(&out, DECONVOLVE)?;
    staging.owns(&[
        "result.json",
        "latent_samples.csv",
        "density.png",
        "density.svg",
        "predictive.png",
        "predictive.svg",
        "trace.csv",
        "trace.png",
        "trace.svg",
    ]);
    // The full batch unless --batch-size says otherwise.
    let s = E2Settings {
        batch_size: a.batch_size.unwrap_or(x.len()),
        ..s.clone()
    };
    let n = x.len();

    let bar = progress_bar(a.quiet, s.replication_work(n));
    bar.set_message("deconvolution");
    let d = fit_data(
        &s,
        x,
        noise_sd,
        a.holdout,
        a.seed,
        &run_options(a, &out, DECONVOLVE)?,
        &|phase, _, _| bar.inc(s.update_cost(phase)),
    )?;
    bar.finish_and_clear();
    write_samples(&mut staging, &d, s.m)?;
    draw_figures(&mut staging, &s, x, &d, path)?;
    let note = if d.held_out.is_some() {
        "no true latent distribution: D and W are not defined; the fitted models are compared by their log-likelihood of held-out observations"
    } else {
        "no true latent distribution: D and W are not defined, and nothing was held out (--holdout 0) to compare the fitted models on"
    };
    // The flags without the simulated case, which a fit of data does not use.
    let mut flags = serde_json::to_value(a)?;
    if let Some(m) = flags.as_object_mut() {
        m.remove("dist");
        m.remove("paper_settings");
    }
    let result = json!({
        "experiment": "deconvolution with the debiased VAE",
        "sagd_version": env!("CARGO_PKG_VERSION"),
        "flags": flags,
        "settings": d.settings,
        "data": {"file": path.display().to_string(), "column": data.shown, "n": n, "fitted": d.n, "held_out": n - d.n, "noise_sd": d.noise_sd},
        "note": note,
        "quantiles": d.quantiles,
        "loglik_per_point_scaled_data": d.loglik_per_point_scaled_data,
        "held_out": d.held_out,
        "time_s": {"pretrain": d.fit.pretrain_time_s, "methods": d.fit.methods.iter().map(|(k, v)| (k.clone(), v.time_s)).collect::<BTreeMap<_, _>>(), "total": t_all.elapsed().as_secs_f64()},
    });
    write_trace(&mut staging, std::slice::from_ref(&d.fit))?;
    std::fs::write(
        staging.path("result.json"),
        serde_json::to_string_pretty(&result)?,
    )
    .context("writing result.json")?;
    let files = staging.commit("result.json")?;
    let what = format!("{}, column {}", path.display(), data.shown);
    print_summary(&d, &what, n, note);
    say!("wrote {}: {}", out.display(), files.join(", "));
    Ok(())
}

/// What the deconvolution of `what` (the file and column) found: the latent laws' quantiles and,
/// where observations were held out, the models' comparison.
fn print_summary(d: &Deconvolution, what: &str, n: usize, note: &str) {
    say!(
        "deconvolution of {what} ({} observations: {} fitted, {} held out; noise sd {}): {note}",
        n,
        d.n,
        n - d.n,
        d.noise_sd
    );
    // Quantiles to a thousandth of the noise's sd, in any units (3 decimals at sd 1).
    let decimals = (3.0 - d.noise_sd.log10().floor()).clamp(0.0, 20.0) as usize;
    for (k, q) in &d.quantiles {
        say!(
            "{k:14} quantiles 5/50/95%: {:.decimals$} {:.decimals$} {:.decimals$}",
            q.q[1],
            q.q[4],
            q.q[7]
        );
    }
    if let Some(h) = &d.held_out {
        print_held_out(h, d.n, n);
    }
}

/// `latent_samples.csv`: one column per fitted model, at most 10 000 rows.
fn write_samples(staging: &mut Staging, d: &Deconvolution, m: usize) -> Result<()> {
    let names: Vec<&String> = d.draws.keys().collect();
    let mut csv = names
        .iter()
        .map(|n| n.as_str())
        .collect::<Vec<_>>()
        .join(",")
        + "\n";
    for i in 0..10_000.min(m) {
        let row: Vec<String> = names.iter().map(|n| d.draws[*n][i].to_string()).collect();
        csv += &(row.join(",") + "\n");
    }
    std::fs::write(staging.path("latent_samples.csv"), csv).context("writing latent_samples.csv")
}

/// The density figure (each fitted latent distribution under the data) and the predictive check.
fn draw_figures(
    staging: &mut Staging,
    s: &E2Settings,
    x: &[f64],
    d: &Deconvolution,
    path: &Path,
) -> Result<()> {
    let mut panels = vec![(
        "pretrained VAE".to_string(),
        &d.samples["pretrained"][..],
        f64::NAN,
        f64::NAN,
    )];
    for m in &s.methods {
        panels.push((
            m.label().to_string(),
            &d.samples[m.name()][..],
            f64::NAN,
            f64::NAN,
        ));
    }
    let caption = format!(
        "{}: data (dashed) and estimated latent distribution (histogram)",
        path.display()
    );
    density_figure(staging, "density", None, x, panels, caption)?;
    let models: Vec<(&str, &str)> = std::iter::once(("pretrained", "pretrained VAE"))
        .chain(s.methods.iter().map(|m| (m.name(), m.label())))
        .collect();
    predictive_figure(staging, x, d, &models, path)
}

/// The held-out comparison's table, its recommendation, and what the holdout cost: `fitted` of
/// the `n` observations were fitted.
fn print_held_out(h: &HeldOut, fitted: usize, n: usize) {
    say!(
        "held-out log-likelihood per observation (of X/σ, {} observations left out of the fit; higher predicts better):",
        h.n
    );
    say!(
        "{:14} {:>9} {:>8}   {:>24}",
        "",
        "mean",
        "se",
        "below the highest (paired se)"
    );
    let tie = sagd_apps::debias::choose::TIE_Z;
    for m in &h.scores {
        // Without a choice, the highest row and those within TIE_Z of it are marked tied.
        let tied = h.chosen.is_none() && m.below_best <= tie * m.below_best_se;
        let below = if m.model == h.best {
            "—".to_string()
        } else {
            format!("{:.4} ({:.4})", m.below_best, m.below_best_se)
        };
        let mark = if tied { " tied" } else { "" };
        say!(
            "{:14} {:9.4} {:8.4}   {below:>24}{mark}",
            m.model,
            m.mean,
            m.se
        );
    }
    say!("recommendation ({:?}): {}", h.confidence, h.advice);
    // The holdout's price: every fit saw fewer observations.
    let refit = match &h.chosen {
        Some(m) if m != "pretrained" => {
            format!("; to use {m}, refit it on all of them: --methods {m} --holdout 0")
        }
        _ => "; --holdout 0 fits on all of them, without this comparison".to_string(),
    };
    say!(
        "every fit above used {fitted} of the {n} observations ({} held out to compare them){refit}",
        h.n
    );
}

/// `predictive.png`/`.svg`: per fitted model, the observations' histogram under the density of X
/// that the model implies, with its held-out score; `models` are (name, label) pairs.
fn predictive_figure(
    staging: &mut Staging,
    x: &[f64],
    d: &Deconvolution,
    models: &[(&str, &str)],
    path: &Path,
) -> Result<()> {
    let samples: Vec<&[f64]> = models
        .iter()
        .filter_map(|(m, _)| d.samples.get(*m).map(|v| &v[..]))
        .collect();
    let series = PredictiveSeries::new(x, d.noise_sd, &samples);
    let note = |model: &str| -> String {
        let Some(h) = &d.held_out else {
            return String::new();
        };
        match h.scores.iter().find(|m| m.model == model) {
            Some(m) if h.chosen.as_deref() == Some(model) && m.model == h.best => {
                "held out: the best".into()
            }
            Some(m) if m.model == h.best => "held out: the highest, not a choice".into(),
            Some(m) => format!(
                "held out: {:.4} (se {:.4}) below",
                m.below_best, m.below_best_se
            ),
            None => String::new(),
        }
    };
    let panels = models
        .iter()
        .filter(|(m, _)| d.samples.contains_key(*m))
        .map(|(m, label)| (label.to_string(), note(m)))
        .collect();
    let grid = crate::plot::PredictiveGrid {
        series: &series,
        panels,
        caption: format!(
            "{}: data (grey histogram) and the density of x each fitted model implies (blue)",
            path.display()
        ),
    };
    crate::plot::save(
        &grid,
        &staging.path("predictive.png"),
        &staging.path("predictive.svg"),
        grid.size(),
    )
}
