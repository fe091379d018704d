//! `sagd glmm --bootstrap`: the parametric bootstrap's percentile intervals against lme4's
//! `confint(fit, method = "boot", nsim = 2000, boot.type = "perc")` (R 4.2.2, lme4 1.1-31,
//! `set.seed(1)`, 2.9 minutes on this machine's one thread) on `tests/data/glmm_counts.csv`:
//! `glmer(count ~ x + dose + (1 | site), family = poisson, nAGQ = 25)`. The two draw different
//! responses, so they agree within the Monte Carlo error of their quantiles.

mod common;
use common::{glmm, json, refused, sagd};

use std::path::{Path, PathBuf};

fn data() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/glmm_counts.csv")
}

/// bootstrap.csv: its header's names, and per draw its status and values (empty where failed).
fn replicates(dir: &Path) -> (Vec<String>, Vec<(String, Vec<f64>)>) {
    let text = std::fs::read_to_string(dir.join("bootstrap.csv")).unwrap();
    let mut lines = text.lines();
    let header: Vec<String> = lines
        .next()
        .unwrap()
        .split(',')
        .map(|s| s.trim_matches('"').to_string())
        .collect();
    assert_eq!(header[..2], ["draw", "status"]);
    let rows = lines
        .enumerate()
        .map(|(k, line)| {
            let f: Vec<&str> = line.split(',').collect();
            assert_eq!(f[0], k.to_string());
            let values = f[2..]
                .iter()
                .filter(|v| !v.is_empty())
                .map(|v| v.parse().unwrap())
                .collect();
            (f[1].to_string(), values)
        })
        .collect();
    (header[2..].to_vec(), rows)
}

/// bootstrap.csv's names and rows, and the run's folder.
type Booted = (Vec<String>, Vec<(String, Vec<f64>)>, tempfile::TempDir);

/// Runs `sagd glmm ARGS` (a bootstrap) into a folder of its own, whose printout must contain
/// `heading`.
fn booted(args: &[&str], heading: &str) -> Booted {
    let dir = tempfile::tempdir().unwrap();
    let out = String::from_utf8_lossy(&glmm(args, &data(), dir.path()).stdout).into_owned();
    assert!(out.contains(heading), "{out}");
    let (names, rows) = replicates(dir.path());
    (names, rows, dir)
}

#[test]
fn poisson_bootstrap_intervals_agree_with_lme4s() {
    let args = [
        "count ~ x + dose + (1 | site)",
        "--family",
        "poisson",
        "--bootstrap",
        "2000",
        "--seed",
        "3",
    ];
    let heading = "Parametric bootstrap intervals (95 %, percentiles of 2000 refits)";
    let (names, rows, dir) = booted(&args, heading);
    assert_eq!(
        names,
        [
            "(Intercept)",
            "x",
            "dosehigh",
            "doselow",
            "sd site (Intercept)"
        ]
    );
    assert_eq!(rows.len(), 2000);
    assert!(rows
        .iter()
        .all(|(status, v)| status == "ok" && v.len() == 5));
    // lme4's percentile intervals, in the same order.
    let lme4 = [
        [0.2386660, 0.8179219],
        [0.2035062, 0.4359659],
        [-0.9901234, -0.3382764],
        [-0.3288983, 0.2032192],
        [0.3717054, 0.8174153],
    ];
    let result = json(&dir.path().join("result.json"));
    let intervals = result["bootstrap"]["intervals"].as_array().unwrap();
    assert_eq!(result["bootstrap"]["refits"], 2000);
    for (j, (row, want)) in intervals.iter().zip(lme4).enumerate() {
        // A 2.5 % quantile of N draws errs by √(p(1 − p)/N)/φ(1.96) ≈ 0.06 of the replicates'
        // sd s (nearly normal replicates); two tools' ends differ by √2 of that: 4 errors.
        let v: Vec<f64> = rows.iter().map(|r| r.1[j]).collect();
        let mean = v.iter().sum::<f64>() / v.len() as f64;
        let s = (v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (v.len() - 1) as f64).sqrt();
        let err = (0.025f64 * 0.975 / 2000.0).sqrt() / 0.05845 * s * 2f64.sqrt();
        for (end, w) in ["lower", "upper"].iter().zip(want) {
            let got = row[end].as_f64().unwrap();
            assert!(
                (got - w).abs() < 4.0 * err,
                "{}: {end} {got} against lme4's {w} (error {err})",
                names[j]
            );
        }
    }
}

#[test]
fn replicates_are_the_same_on_any_number_of_threads() {
    let (one, two) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    for (dir, threads) in [(&one, "1"), (&two, "2")] {
        let args = [
            "count ~ x + (1 | site)",
            "--family",
            "poisson",
            "--bootstrap",
            "40",
            "--threads",
            threads,
        ];
        glmm(&args, &data(), dir.path());
    }
    let read =
        |d: &tempfile::TempDir| std::fs::read_to_string(d.path().join("bootstrap.csv")).unwrap();
    assert_eq!(read(&one), read(&two));
}

/// REML's Gaussian fit with correlated slopes, which the profile does not take: its sds, their
/// correlation and σ get intervals, each containing the estimate.
#[test]
fn reml_fits_with_correlated_effects_are_bootstrapped() {
    let args = [
        "count ~ x + (1 + x | site)",
        "--reml",
        "--bootstrap",
        "100",
        "--bootstrap-level",
        "0.9",
    ];
    let (names, rows, dir) = booted(&args, "Parametric bootstrap intervals (90 %");
    assert_eq!(
        names,
        [
            "(Intercept)",
            "x",
            "sd site (Intercept)",
            "sd site x",
            "cor site (Intercept):x",
            "sigma"
        ]
    );
    assert_eq!(rows.len(), 100);
    let csv = std::fs::read_to_string(dir.path().join("confint_bootstrap.csv")).unwrap();
    assert!(csv.contains("cor,\"site\",\"(Intercept):x\""), "{csv}");
    for line in csv.lines().skip(1) {
        let f: Vec<f64> = line
            .split(',')
            .skip(3)
            .map(|v| v.parse().unwrap())
            .collect();
        assert!(
            f[1] <= f[2] && (-1.0..=1.0).contains(&f[1]) || !line.starts_with("cor"),
            "{line}"
        );
        assert!(
            f[1] < f[0] && f[0] < f[2] || line.starts_with("cor"),
            "{line}"
        );
    }
}

#[test]
fn bad_bootstrap_flags_are_refused() {
    for (flags, says) in [
        (
            &["--bootstrap", "1"][..],
            "--bootstrap 1: give the number of refits, 2 or more",
        ),
        (
            &["--bootstrap", "20", "--bootstrap-level", "1.5"][..],
            "--bootstrap-level 1.5",
        ),
    ] {
        let err = refused(
            sagd()
                .args(["glmm", "count ~ x + (1 | site)", "--data"])
                .arg(data())
                .args(flags)
                .args(["--out", "/nonexistent/never"]),
        );
        assert!(err.contains(says), "{err}");
    }
}
