//! What `sagd debias` writes: Table 1 as Markdown, Figure 2, the learning curves and
//! `result.json`; for `--data`, the deconvolution's samples, density figure and result.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context, Result};
use indicatif::ProgressBar;
use sagd_apps::debias::figure::DensitySeries;
use sagd_apps::debias::{
    paper, run_table, Case, E2Settings, Replication, RunOptions, Table1, TracePoint,
};
use serde_json::json;

use super::{run_options, DebiasArgs};
use crate::output::Staging;
use crate::plot::{save, DensityGrid, DensityPanel, TraceFigure};
use crate::progress::progress_bar;

/// Writes `trace.csv` (one row per replication, method and traced epoch) and `trace.png/.svg`
/// (the first replication's curves: W against π where it is known, else the log-likelihood) when
/// there is a trace.
pub(super) fn write_trace(staging: &mut Staging, reps: &[Replication]) -> Result<()> {
    let mut csv = String::from("seed,method,epoch,D,W,loglik,z_mean,z_sd,loss\n");
    let opt = |v: Option<f64>| v.map(|v| v.to_string()).unwrap_or_default();
    for r in reps {
        for (m, mr) in &r.methods {
            for t in &mr.trace {
                csv += &format!(
                    "{},{m},{},{},{},{},{},{},{}\n",
                    r.seed,
                    t.epoch,
                    t.ks,
                    t.w1,
                    opt(t.loglik),
                    t.z_mean,
                    t.z_sd,
                    t.loss
                );
            }
        }
    }
    let Some(first) = reps
        .first()
        .filter(|r| r.methods.values().any(|m| !m.trace.is_empty()))
    else {
        return Ok(());
    };
    std::fs::write(staging.path("trace.csv"), csv).context("writing trace.csv")?;
    let against_pi = first.pretrained.w1.is_finite();
    let (metric, pick): (&str, fn(&TracePoint) -> Option<f64>) = if against_pi {
        ("1-Wasserstein distance W to π", |t| Some(t.w1))
    } else {
        ("mean log-likelihood (scaled data)", |t| t.loglik)
    };
    let fig = TraceFigure {
        title: format!(
            "Fine-tuning, seed {}: the current iterate every traced epoch",
            first.seed
        ),
        metric,
        curves: first
            .methods
            .iter()
            .map(|(m, mr)| {
                let c = mr
                    .trace
                    .iter()
                    .filter_map(|t| Some((t.epoch as f64, pick(t)?)));
                let label = m
                    .parse::<sagd_apps::debias::Method>()
                    .map(|m| m.label())
                    .unwrap_or(m);
                (label.to_string(), c.collect())
            })
            .collect(),
        reference: if against_pi {
            Some(first.pretrained.w1)
        } else {
            first.pretrained.loglik
        }
        .map(|v| ("pre-trained VAE".to_string(), v)),
    };
    let (png, svg) = (staging.path("trace.png"), staging.path("trace.svg"));
    save(&fig, &png, &svg, (760, 460))
}

/// The Markdown of Table 1: this run's row beside the paper's for each metric.
fn markdown(t: &Table1) -> String {
    let s = &t.settings;
    let (first, last) = (t.seeds[0], t.seeds[t.seeds.len() - 1]);
    let mut md = format!(
        "# Table 1 — {} (n = {}, p = {}, {} replication(s), seeds {first}..{last})\n\nSettings: {}. Mean (standard error) over replications (for one replication of several\ncoordinates: over coordinates); the paper's numbers below each row.\n\n| metric | method | pretrained VAE | {} |\n|---|---|---|{}\n",
        t.case,
        s.n,
        s.p,
        t.seeds.len(),
        t.settings_profile,
        s.methods.iter().map(|m| m.label()).collect::<Vec<_>>().join(" | "),
        s.methods.iter().map(|_| "---|").collect::<String>()
    );
    for metric in ["D", "W"] {
        let cell = |who: &str| {
            t.get(who, metric)
                .map(|v| v.to_string())
                .unwrap_or_default()
        };
        let mut row = format!("| {metric} | this run | {} |", cell("pretrained"));
        for m in &s.methods {
            row += &format!(" {} |", cell(m.name()));
        }
        md += &(row + "\n");
        if paper(t.case, metric).is_some() {
            let mut row = format!("| {metric} | paper | — |");
            for m in &s.methods {
                let v = t
                    .paper(*m, metric)
                    .map(|v| v.to_string())
                    .unwrap_or_default();
                row += &format!(" {v} |");
            }
            md += &(row + "\n");
        }
    }
    md += &format!(
        "\nMean wall seconds per replication and phase (replications run in parallel): {}\n",
        t.mean_time_s
            .iter()
            .map(|(k, v)| format!("{k} {v:.2}"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    md
}

/// Figure 2 of the first replication (first coordinate), or the density of a deconvolution.
pub(super) fn density_figure(
    staging: &mut Staging,
    name: &str,
    law: Option<&sagd::metrics::Law>,
    x: &[f64],
    panels: Vec<(String, &[f64], f64, f64)>,
    caption: String,
) -> Result<()> {
    let samples: Vec<&[f64]> = panels.iter().map(|p| p.1).collect();
    let series = DensitySeries::new(law, x, &samples);
    // A fit that diverged can put its draws anywhere: no figure of a range nothing can show.
    let span = series.hi - series.lo;
    if !(span.is_finite() && span < 1e9 && series.max_density().is_finite()) {
        say_err!(
            "warning: {name} not drawn: the fitted draws span [{:.3e}, {:.3e}], beyond any plot (a method diverged?)",
            series.lo, series.hi
        );
        return Ok(());
    }
    let grid = DensityGrid {
        series: &series,
        panels: panels
            .into_iter()
            .map(|(title, _, d, w)| DensityPanel { title, d, w })
            .collect(),
        caption,
    };
    let (p, sv) = (
        staging.path(&format!("{name}.png")),
        staging.path(&format!("{name}.svg")),
    );
    save(&grid, &p, &sv, grid.size())
}

/// What a Table 1 run is, beside its settings.
pub struct TableJob<'a> {
    /// The case.
    pub case: Case,
    /// Whether the case's paper preset was asked for (names the profile).
    pub paper_settings: bool,
    /// The replications' seeds.
    pub seeds: Vec<u64>,
    /// Checkpoints, cache, trace.
    pub opts: RunOptions,
    /// The output folder.
    pub out: &'a Path,
    /// Progress over all updates.
    pub bar: &'a ProgressBar,
    /// The command line, recorded in `result.json`.
    pub flags: serde_json::Value,
    /// The command whose result the folder holds (`debias`, `reproduce`).
    pub command: &'static str,
}

/// Table 1, Figure 2, the trace and `result.json` of one case, written into `j.out` (whole or not
/// at all); returns the table, its Markdown and the files written.
pub fn write_table(s: &E2Settings, j: TableJob) -> Result<(Table1, String, Vec<String>)> {
    let t_all = Instant::now();
    let mut staging = Staging::new(j.out, j.command)?;
    staging.owns(&[
        "result.json",
        "table1.md",
        "figure2.png",
        "figure2.svg",
        "trace.csv",
        "trace.png",
        "trace.svg",
    ]);
    // Progress in work, not updates: an IWAE update costs about twenty of pre-training's.
    j.bar
        .set_length(s.replication_work(s.n) * j.seeds.len() as u64);
    let bar = j.bar;
    let t = run_table(
        s,
        j.case,
        j.paper_settings,
        &j.seeds,
        &j.opts,
        &|phase, _, _| bar.inc(s.update_cost(phase)),
    )?;
    bar.finish_and_clear();
    let md = markdown(&t);
    std::fs::write(staging.path("table1.md"), &md).context("writing table1.md")?;

    let first = &t.replications[0];
    let col = |v: &[f64]| -> Vec<f64> { v.iter().step_by(s.p).copied().collect() };
    let draws: BTreeMap<&str, Vec<f64>> = first
        .samples
        .iter()
        .map(|(k, v)| (k.as_str(), col(v)))
        .collect();
    let mut panels = vec![(
        "pretrained VAE".to_string(),
        &draws["pretrained"][..],
        first.pretrained.ks,
        first.pretrained.w1,
    )];
    for m in &s.methods {
        let r = &first.methods[m.name()];
        panels.push((
            m.label().to_string(),
            &draws[m.name()][..],
            r.eval.ks,
            r.eval.w1,
        ));
    }
    let caption = format!(
        "Figure 2 — {} (seed {}{}): the fitted latent law of each model against the data and π",
        t.case,
        first.seed,
        if s.p > 1 { ", first coordinate" } else { "" }
    );
    density_figure(
        &mut staging,
        "figure2",
        Some(&t.law),
        &col(&first.x),
        panels,
        caption,
    )?;

    let result = json!({
        "experiment": "E2 debiased VAE",
        "sagd_version": env!("CARGO_PKG_VERSION"),
        "flags": j.flags,
        "settings": t.settings,
        "settings_profile": t.settings_profile,
        "law": t.law,
        "seeds": t.seeds,
        "summary": t.summary,
        "mean_time_s": t.mean_time_s,
        "replications": t.replications,
        "total_time_s": t_all.elapsed().as_secs_f64(),
    });
    write_trace(&mut staging, &t.replications)?;
    std::fs::write(
        staging.path("result.json"),
        serde_json::to_string_pretty(&result)?,
    )
    .context("writing result.json")?;
    let files = staging.commit("result.json")?;
    Ok((t, md, files))
}

/// `sagd debias --dist CASE`.
pub fn table(a: &DebiasArgs, s: &E2Settings) -> Result<()> {
    let out = a
        .out
        .clone()
        .unwrap_or_else(|| PathBuf::from(format!("out/debias-{}", a.dist)));
    let bar = progress_bar(a.quiet, 0);
    bar.set_message(format!("{} × {} reps", a.dist, a.reps));
    let (t, md, files) = write_table(
        s,
        TableJob {
            case: a.dist,
            paper_settings: a.paper_settings,
            seeds: (a.seed..a.seed + a.reps as u64).collect(),
            opts: run_options(a, &out, "debias")?,
            out: &out,
            bar: &bar,
            flags: serde_json::to_value(a)?,
            command: "debias",
        },
    )?;
    say!("settings: {}", t.settings_profile);
    say_part!("{md}");
    say!("wrote {}: {}", out.display(), files.join(", "));
    Ok(())
}
