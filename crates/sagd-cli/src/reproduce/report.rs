//! The report of `sagd reproduce`: `report.html` (one self-contained page: figures embedded as
//! base64 PNG, no request leaves it), `report.md` (the same, figures linked) and `results.json`.

use std::fmt::Write as _;
use std::path::Path;

use anyhow::Result;
use base64::Engine;
use serde::Serialize;

use super::plan::Mode;
use super::progress::duration;
use super::{Record, Status};

/// Where the report was made.
#[derive(Clone, Debug, Serialize)]
pub struct Machine {
    /// Logical cores.
    pub cores: usize,
    /// Worker threads used.
    pub threads: usize,
    /// The processor's model name, where the system says.
    pub cpu: String,
    /// The operating system.
    pub os: String,
}

impl Machine {
    /// This machine.
    pub fn here(threads: usize) -> Self {
        let cpu = std::fs::read_to_string("/proc/cpuinfo")
            .ok()
            .and_then(|t| {
                t.lines()
                    .find(|l| l.starts_with("model name"))
                    .and_then(|l| l.split(':').nth(1))
                    .map(|s| s.trim().to_string())
            })
            .unwrap_or_else(|| "unknown".into());
        Machine {
            cores: std::thread::available_parallelism().map_or(1, |n| n.get()),
            threads,
            cpu,
            os: std::env::consts::OS.into(),
        }
    }
}

#[derive(Serialize)]
struct Results<'a> {
    report: &'static str,
    sagd_version: &'static str,
    mode: &'static str,
    date_utc: String,
    machine: &'a Machine,
    total_time_s: f64,
    experiments: &'a [Record],
}

/// Text as HTML: escaped, with `code` spans (the Markdown's backticks) as `<code>`.
fn escape(s: &str) -> String {
    let text = s
        .replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;");
    let mut out = String::with_capacity(text.len());
    for (i, part) in text.split('`').enumerate() {
        // Odd parts lie between a pair of backticks; an unpaired last one stays as it was.
        match (i % 2, i == text.matches('`').count()) {
            (1, false) => out += &format!("<code>{part}</code>"),
            (1, true) => out += &format!("`{part}"),
            _ => out += part,
        }
    }
    out
}

fn status_word(r: &Record) -> &'static str {
    match (r.status, r.reused) {
        (Status::Done, true) => "done (reused)",
        (Status::Done, false) => "done",
        (Status::Failed, _) => "FAILED",
        (Status::Unavailable, _) => "not available",
    }
}

/// Writes the three report files into `out`; returns their names.
pub fn write(
    out: &Path,
    mode: Mode,
    machine: &Machine,
    records: &[Record],
    total_s: f64,
) -> Result<Vec<String>> {
    let date = humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string();
    let results = Results {
        report: "sagd reproduce",
        sagd_version: env!("CARGO_PKG_VERSION"),
        mode: mode.name(),
        date_utc: date.clone(),
        machine,
        total_time_s: total_s,
        experiments: records,
    };
    let experiments_s: f64 = records.iter().map(|r| r.time_s).sum();
    let header = format!(
        "sagd {} · {} mode · {} · {} cores ({} threads), {} · {} · experiments {} (this run {})",
        env!("CARGO_PKG_VERSION"),
        mode.name(),
        date,
        machine.cores,
        machine.threads,
        machine.cpu,
        machine.os,
        duration(experiments_s),
        duration(total_s)
    );
    let files = [
        ("results.json", serde_json::to_string_pretty(&results)?),
        ("report.md", markdown(&header, records)),
        ("report.html", html(out, &header, records)?),
    ];
    let mut names = Vec::new();
    for (name, text) in files {
        crate::output::write_atomic(&out.join(name), text)?;
        names.push(name.to_string());
    }
    Ok(names)
}

const TITLE: &str = "Stochastic Approximate Gradient Descent via the Langevin Algorithm (Qiu and Wang, AAAI 2020): reproduction";

fn markdown(header: &str, records: &[Record]) -> String {
    let mut md = format!("# {TITLE}\n\n{header}\n\n| experiment | status | what was run | time |\n|---|---|---|---|\n");
    for r in records {
        let _ = writeln!(
            md,
            "| {} | {} | {} | {} |",
            r.name,
            status_word(r),
            r.scale,
            duration(r.time_s)
        );
    }
    for r in records {
        let _ = write!(
            md,
            "\n## {}\n\n{} — {}.\n",
            r.title,
            status_word(r),
            r.scale
        );
        if let Some(e) = &r.error {
            let _ = writeln!(
                md,
                "\n**{}**: {e}",
                if r.status == Status::Failed {
                    "Failed"
                } else {
                    "Note"
                }
            );
        }
        for t in &r.tables {
            let _ = write!(
                md,
                "\n{}\n\n| {} |\n|{}\n",
                t.caption,
                t.header.join(" | "),
                "---|".repeat(t.header.len())
            );
            for row in &t.rows {
                let _ = writeln!(md, "| {} |", row.join(" | "));
            }
        }
        for n in &r.notes {
            let _ = write!(md, "\n{n}\n");
        }
        for f in &r.figures {
            let _ = write!(md, "\n![{f}]({f})\n");
        }
    }
    md
}

fn html(out: &Path, header: &str, records: &[Record]) -> Result<String> {
    let mut h = format!(
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>sagd reproduce</title>\n<style>\nbody{{font-family:sans-serif;max-width:1000px;margin:2em auto;padding:0 1em;color:#222}}\ntable{{border-collapse:collapse;margin:1em 0}}td,th{{border:1px solid #bbb;padding:.3em .6em;text-align:right}}\ntd:first-child,th:first-child{{text-align:left}}td{{white-space:nowrap}}td.text{{white-space:normal;text-align:left}}caption{{text-align:left;font-style:italic;margin-bottom:.3em}}\n.meta{{color:#555}}.failed{{color:#b00;font-weight:bold}}.unavailable{{color:#777}}img{{max-width:100%;border:1px solid #ddd;margin:.5em 0}}\n</style></head><body>\n<h1>{}</h1>\n<p class=\"meta\">{}</p>\n<table><tr><th>experiment</th><th>status</th><th>what was run</th><th>time</th></tr>\n",
        escape(TITLE),
        escape(header)
    );
    for r in records {
        let class = match r.status {
            Status::Done => "done",
            Status::Failed => "failed",
            Status::Unavailable => "unavailable",
        };
        let _ = writeln!(
            h,
            "<tr><td><a href=\"#{}\">{}</a></td><td class=\"{class}\">{}</td><td class=\"text\">{}</td><td>{}</td></tr>",
            r.name,
            r.name,
            status_word(r),
            escape(&r.scale),
            duration(r.time_s)
        );
    }
    h += "</table>\n";
    for r in records {
        let _ = write!(
            h,
            "<h2 id=\"{}\">{}</h2>\n<p>{} — {}.</p>\n",
            r.name,
            escape(&r.title),
            status_word(r),
            escape(&r.scale)
        );
        if let Some(e) = &r.error {
            let class = if r.status == Status::Failed {
                "failed"
            } else {
                "unavailable"
            };
            let _ = writeln!(h, "<p class=\"{class}\">{}</p>", escape(e));
        }
        for t in &r.tables {
            let _ = write!(h, "<table><caption>{}</caption><tr>", escape(&t.caption));
            for c in &t.header {
                let _ = write!(h, "<th>{}</th>", escape(c));
            }
            h += "</tr>\n";
            for row in &t.rows {
                h += "<tr>";
                for c in row {
                    let _ = write!(h, "<td>{}</td>", escape(c));
                }
                h += "</tr>\n";
            }
            h += "</table>\n";
        }
        for n in &r.notes {
            let _ = writeln!(h, "<p>{}</p>", escape(n));
        }
        for f in &r.figures {
            match std::fs::read(out.join(f)) {
                Ok(bytes) => {
                    // Shown at the figure's own size: its PNG has PNG_SCALE pixels per pixel
                    // (the width is bytes 16-19 of a PNG, in its header chunk).
                    let width = bytes
                        .get(16..20)
                        .and_then(|b| <[u8; 4]>::try_from(b).ok())
                        .map(|b| u32::from_be_bytes(b) / crate::plot::PNG_SCALE as u32);
                    let size = width.map_or(String::new(), |w| format!(" width=\"{w}\""));
                    let b64 = base64::engine::general_purpose::STANDARD.encode(bytes);
                    let _ = writeln!(
                        h,
                        "<p><img alt=\"{f}\"{size} src=\"data:image/png;base64,{b64}\"></p>"
                    );
                }
                // A figure skipped for values beyond any plot: the page says so.
                Err(_) => {
                    let _ = writeln!(
                        h,
                        "<p class=\"failed\">{f} was not drawn (see the experiment's output).</p>"
                    );
                }
            }
        }
    }
    h += "</body></html>\n";
    Ok(h)
}

#[cfg(test)]
mod tests {
    use super::escape;

    #[test]
    fn html_text_is_escaped_and_backticks_become_code() {
        assert_eq!(
            escape("run `sagd mnist` & <see>"),
            "run <code>sagd mnist</code> &amp; &lt;see&gt;"
        );
        assert_eq!(escape("one ` alone"), "one ` alone");
        assert_eq!(escape("`a` and `b"), "<code>a</code> and `b");
    }
}
