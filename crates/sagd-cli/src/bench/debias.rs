//! `sagd bench debias`: E2 replications timed phase by phase, beside the PyTorch peer's when its
//! script is given, on the same machine and threads.

use super::*;

/// Wall seconds per phase of one E2 replication (the fastest repeat), by phase name.
#[derive(Serialize, Default, Clone)]
struct PhaseTimes(std::collections::BTreeMap<&'static str, f64>);

const PHASES: [&str; 6] = ["whole", "pretrain", "vae", "iwae", "hmc", "sagd"];

impl PhaseTimes {
    fn get(&self, phase: &str) -> Option<f64> {
        self.0.get(phase).copied()
    }

    /// Keeps the faster of the two times of `phase`.
    fn keep_min(&mut self, phase: &'static str, t: f64) {
        let v = self.0.entry(phase).or_insert(t);
        *v = v.min(t);
    }
}

#[derive(Serialize)]
struct DebiasReport {
    benchmark: &'static str,
    dist: String,
    seed: u64,
    threads: usize,
    repeats: usize,
    unit: &'static str,
    sagd: PhaseTimes,
    peer: Option<PhaseTimes>,
    ratio: Option<PhaseTimes>,
}

pub(crate) fn debias(a: DebiasBenchArgs) -> Result<()> {
    use sagd_apps::debias::{replicate, Case, Method, RunOptions};
    if a.dist == Case::Highdim {
        anyhow::bail!("--dist: the benchmark runs the 1-D cases (normal, exp, mixture)");
    }
    let (spec, law) = (a.dist.settings(false), a.dist.law());
    let threads = rayon::current_num_threads();
    let mut ours = PhaseTimes::default();
    let quiet = |_: &str, _: usize, _: usize| {};
    a.device
        .ready()
        .with_context(|| format!("--device {}", a.device))?;
    let opts = RunOptions {
        device: a.device,
        ..RunOptions::default()
    };
    for rep in 0..a.repeats.max(1) {
        // All four methods at once, as `sagd debias` runs a replication.
        let t = std::time::Instant::now();
        replicate(&spec, &law, a.seed, &opts, &quiet)?;
        ours.keep_min("whole", t.elapsed().as_secs_f64());
        // Each method alone, after its own pre-training.
        for m in Method::ALL {
            let mut s = spec.clone();
            s.methods = vec![m];
            let r = replicate(&s, &law, a.seed, &opts, &quiet)?;
            ours.keep_min("pretrain", r.pretrain_time_s);
            if let Some(mr) = r.methods.get(m.name()) {
                ours.keep_min(m.name(), mr.time_s);
            }
        }
        say_err!("repeat {} of {} done", rep + 1, a.repeats.max(1));
    }
    let peer = match &a.peer {
        Some(script) => Some(run_peer(&a, script, threads)?),
        None => None,
    };
    let ratio = peer.as_ref().map(|p| {
        let mut r = PhaseTimes::default();
        for ph in PHASES {
            if let (Some(a), Some(b)) = (ours.get(ph), p.get(ph)) {
                r.keep_min(ph, b / a);
            }
        }
        r
    });
    let cell = |v: Option<f64>, unit: &str| v.map_or("—".into(), |v| format!("{v:.2}{unit}"));
    eprint_table(
        &["phase", "sagd (s)", "peer (s)", "peer / sagd"],
        PHASES.iter().map(|&ph| {
            vec![
                ph.to_string(),
                cell(ours.get(ph), ""),
                cell(peer.as_ref().and_then(|p| p.get(ph)), ""),
                cell(ratio.as_ref().and_then(|r| r.get(ph)), "×"),
            ]
        }),
    );
    let report = DebiasReport {
        benchmark: "debias",
        dist: a.dist.to_string(),
        seed: a.seed,
        threads,
        repeats: a.repeats.max(1),
        unit: "wall seconds (fastest repeat); whole: all four methods concurrently",
        sagd: ours,
        peer,
        ratio,
    };
    let json = serde_json::to_string_pretty(&report)?;
    if let Some(p) = &a.out {
        std::fs::write(p, &json).with_context(|| format!("writing {}", p.display()))?;
    }
    say!("{json}");
    Ok(())
}

/// Runs the peer's E2 replication and reads its phase times from its JSON (whole: our clock
/// around the process, as for ours).
fn run_peer(a: &DebiasBenchArgs, script: &std::path::Path, threads: usize) -> Result<PhaseTimes> {
    let dir = tempfile::tempdir()?;
    let json = dir.path().join("peer.json");
    let mut best = PhaseTimes::default();
    for _ in 0..a.repeats.max(1) {
        let t = std::time::Instant::now();
        let status = std::process::Command::new(&a.python)
            .arg(script)
            .args(["e2", "--dist", a.dist.name(), "--reps", "1"])
            .args(["--seed-offset", &a.seed.to_string()])
            .args(["--threads", &threads.to_string()])
            .arg("--out")
            .arg(&json)
            .stdout(std::process::Stdio::null())
            .status()
            .with_context(|| format!("--python {}: could not start it", a.python.display()))?;
        if !status.success() {
            anyhow::bail!(
                "--peer {}: the peer failed ({status}); does --python {} have torch, numpy and scipy?",
                script.display(),
                a.python.display()
            );
        }
        best.keep_min("whole", t.elapsed().as_secs_f64());
        let text = std::fs::read_to_string(&json)
            .with_context(|| format!("reading the peer's result {}", json.display()))?;
        let v: serde_json::Value = serde_json::from_str(&text)
            .with_context(|| format!("the peer's result {} is not JSON", json.display()))?;
        for (ph, key) in [
            ("pretrain", "pretrained"),
            ("vae", "vae"),
            ("iwae", "iwae"),
            ("hmc", "hmc"),
            ("sagd", "sagd"),
        ] {
            if let Some(t) = v["summary"][key]["time_mean_s"].as_f64() {
                best.keep_min(ph, t);
            }
        }
    }
    Ok(best)
}
