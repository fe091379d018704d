//! `sagd glmm --bootstrap` and `--compare`: the parametric bootstrap's percentile intervals,
//! and the likelihood-ratio test of two models with its bootstrap p-value. The intervals
//! against lme4's `confint(fit, method = "boot", nsim = 2000, boot.type = "perc")` (R 4.2.2,
//! lme4 1.1-31,
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

/// `sagd glmm count ~ x + (1 | site)` with each case's flags refused, saying its words.
fn all_refused(cases: &[(&[&str], &str)]) {
    for (flags, says) in cases {
        let err = refused(
            sagd()
                .args(["glmm", "count ~ x + (1 | site)", "--data"])
                .arg(data())
                .args(*flags)
                .args(["--out", "/nonexistent/never"]),
        );
        assert!(err.contains(says), "{err}");
    }
}

#[test]
fn bad_bootstrap_flags_are_refused() {
    all_refused(&[
        (
            &["--bootstrap", "1"][..],
            "--bootstrap 1: give the number of refits, 2 or more",
        ),
        (
            &["--bootstrap", "20", "--bootstrap-level", "1.5"][..],
            "--bootstrap-level 1.5",
        ),
        (
            &["--checkpoint-every", "10"][..],
            "keeps the refits of its bootstraps only",
        ),
    ]);
}

/// Both bootstraps stopped part-way (`--interrupt-after`, as Ctrl-C stops them) and resumed
/// (`--resume`, run after run) end with the files of an uninterrupted run, byte for byte, and
/// say how many draws they took from the checkpoints; an interrupted run writes no result, and
/// a resume with another seed is refused by name.
#[test]
fn interrupted_bootstraps_resume_to_the_same_result() {
    let dir = tempfile::tempdir().unwrap();
    let args = [
        "count ~ x + dose + (1 | site)",
        "--family",
        "poisson",
        "--bootstrap",
        "30",
        "--compare",
        "count ~ x + (1 | site)",
        "--compare-bootstrap",
        "20",
    ];
    let whole = dir.path().join("whole");
    glmm(&args, &data(), &whole);
    let part = dir.path().join("part");
    let run = |extra: &[&str]| {
        sagd()
            .arg("glmm")
            .args(args)
            .arg("--data")
            .arg(data())
            .arg("--out")
            .arg(&part)
            .arg("--quiet")
            .args(extra)
            .output()
            .unwrap()
    };
    let stop = ["--checkpoint-every", "7", "--interrupt-after", "8"];
    let failure = |o: &std::process::Output| {
        assert!(!o.status.success());
        assert!(
            !part.join("result.json").exists(),
            "an interrupted run wrote a result"
        );
        String::from_utf8_lossy(&o.stderr).into_owned()
    };
    let err = failure(&run(&stop));
    assert!(
        err.contains("the parametric bootstrap's refits") && err.contains("--resume"),
        "{err}"
    );
    let err = failure(&run(&["--resume", "--seed", "3"]));
    assert!(err.contains("differs in --seed"), "{err}");
    // Each resumed run keeps at least 8 more refits: the 30 and the 20 take at most 7 runs.
    let again = [&["--resume"][..], &stop].concat();
    let mut stopped = Vec::new();
    let o = loop {
        let o = run(&again);
        if o.status.success() || stopped.len() == 7 {
            break o;
        }
        stopped.push(failure(&o));
    };
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let test = "the bootstrap test's refits";
    assert!(stopped.iter().any(|e| e.contains(test)), "{stopped:?}");
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.contains("taken from an interrupted run's checkpoint"),
        "{out}"
    );
    for f in ["bootstrap.csv", "confint_bootstrap.csv", "anova.csv"] {
        let read = |d: &Path| std::fs::read_to_string(d.join(f)).unwrap();
        assert_eq!(read(&whole), read(&part), "{f}");
    }
    assert!(
        !part.join("checkpoints").exists(),
        "a finished run's checkpoints stay"
    );
    let result = json(&part.join("result.json"));
    // The last run took the whole first bootstrap from its checkpoint, and at least 8 of the
    // test's draws.
    let resumed = |v: &serde_json::Value| v["resumed_refits"].as_u64().unwrap();
    assert_eq!(resumed(&result["bootstrap"]), 30);
    let test = &result["anova"]["models"][1]["test"];
    assert!((8..20).contains(&resumed(&test["bootstrap"])));
    assert_eq!(resumed(&json(&whole.join("result.json"))["bootstrap"]), 0);
}

/// anova.csv's second row: its statistic, degrees of freedom, p-value and bootstrap p-value.
fn tested(dir: &Path) -> (f64, usize, f64, Option<f64>) {
    let text = std::fs::read_to_string(dir.join("anova.csv")).unwrap();
    let last = text.lines().nth(2).unwrap();
    let f: Vec<&str> = last.rsplitn(5, ',').collect();
    let boot = (!f[0].is_empty()).then(|| f[0].parse().unwrap());
    (
        f[3].parse().unwrap(),
        f[2].parse().unwrap(),
        f[1].parse().unwrap(),
        boot,
    )
}

/// `--compare`: lme4's `anova(glmer(count ~ x + (1 | site), poisson, nAGQ = 25),
/// glmer(count ~ x + dose + (1 | site), ...))` on the file less its row of a missing count:
/// Chisq 16.29104 on 2 Df, p 0.00029003; the bootstrap's p-value (1 + k)/(1 + refits), the same
/// on any number of threads.
#[test]
fn compared_models_are_tested_as_lme4s_anova_tests_them() {
    let (one, two) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    for (dir, threads) in [(&one, "1"), (&two, "2")] {
        let args = [
            "count ~ x + dose + (1 | site)",
            "--family",
            "poisson",
            "--compare",
            "count ~ x + (1 | site)",
            "--compare-bootstrap",
            "40",
            "--threads",
            threads,
        ];
        let out = String::from_utf8_lossy(&glmm(&args, &data(), dir.path()).stdout).into_owned();
        assert!(out.contains("Likelihood-ratio test (lme4's anova)") && out.contains("Pr(boot)"));
    }
    let (chisq, df, p, boot) = tested(one.path());
    assert!((chisq - 16.29104).abs() < 2e-4 && df == 2, "{chisq} {df}");
    assert!((p - 0.00029003).abs() < 1e-7, "{p}");
    let boot = boot.unwrap();
    let k = boot * 41.0 - 1.0;
    assert!(
        (k - k.round()).abs() < 1e-9 && (0.0..=40.0).contains(&k),
        "{boot}"
    );
    let read = |d: &tempfile::TempDir| std::fs::read_to_string(d.path().join("anova.csv")).unwrap();
    assert_eq!(read(&one), read(&two));
    let result = json(&one.path().join("result.json"));
    let models = &result["anova"]["models"];
    assert_eq!(models[1]["test"]["bootstrap"]["refits"], 40);
    assert_eq!(
        (&models[0]["npar"], &models[0]["test"]),
        (&3.into(), &().into())
    );
}

/// `--compare` given twice: the three models ordered by their parameters and each tested against
/// the one before, as lme4's `anova(m2, m0, m1)` tests them (R 4.2.2, lme4 1.1-31, nAGQ = 25):
/// Chisq 32.60437 on 1 Df, p 1.1296e-08, then 16.29104 on 2 Df, p 0.00029003.
#[test]
fn three_models_are_tested_in_turn_as_lme4s_anova_tests_them() {
    let dir = tempfile::tempdir().unwrap();
    let args = [
        "count ~ x + dose + (1 | site)",
        "--family",
        "poisson",
        "--compare",
        "count ~ 1 + (1 | site)",
        "--compare",
        "count ~ x + (1 | site)",
    ];
    let out = String::from_utf8_lossy(&glmm(&args, &data(), dir.path()).stdout).into_owned();
    assert!(
        out.contains("Likelihood-ratio test (lme4's anova)"),
        "{out}"
    );
    let text = std::fs::read_to_string(dir.path().join("anova.csv")).unwrap();
    let order: Vec<&str> = text
        .lines()
        .skip(1)
        .map(|l| l.split('"').nth(1).unwrap())
        .collect();
    assert_eq!(order, [args[4], args[6], args[0]]);
    let models = json(&dir.path().join("result.json"))["anova"]["models"].clone();
    assert!(models[0]["test"].is_null());
    for (k, (chisq, df, p)) in [(32.60437, 1, 1.1296e-08), (16.29104, 2, 0.00029003)]
        .into_iter()
        .enumerate()
    {
        let t = &models[k + 1]["test"];
        let got = t["chisq"].as_f64().unwrap();
        assert!((got - chisq).abs() < 2e-4 && t["df"] == df, "{t}");
        let got = t["p_value"].as_f64().unwrap();
        assert!((got - p).abs() < 1e-4 * p, "{t}");
        assert!(t["bootstrap"].is_null());
    }
}

/// `--reml` with `--compare`: the models, fitted by REML, refitted by ML and compared, as lme4's
/// `anova(m0, m1)` of two REML fits does (R 4.2.2, lme4 1.1-31: `lmer(count ~ x + dose + (1 + x |
/// site))` against `count ~ x * dose + ...`, logLik −341.0012367 and −339.7674029, Chisq
/// 2.46767 on 2 Df, p 0.29117); the summary's own fit stays REML's.
#[test]
fn reml_fits_are_compared_by_their_ml_refits_as_lme4s_anova_compares_them() {
    let dir = tempfile::tempdir().unwrap();
    let args = [
        "count ~ x * dose + (1 + x | site)",
        "--reml",
        "--compare",
        "count ~ x + dose + (1 + x | site)",
    ];
    let out = String::from_utf8_lossy(&glmm(&args, &data(), dir.path()).stdout).into_owned();
    assert!(out.contains("refitted by ML instead of REML"), "{out}");
    assert!(out.contains("Mixed model fit by REML"), "{out}");
    let result = json(&dir.path().join("result.json"));
    let anova = &result["anova"];
    assert_eq!(anova["refitted_by_ml"], true);
    for (k, loglik) in [-341.0012367, -339.7674029].into_iter().enumerate() {
        let got = anova["models"][k]["loglik"].as_f64().unwrap();
        assert!((got - loglik).abs() < 1e-6, "{got} against {loglik}");
    }
    let t = &anova["models"][1]["test"];
    assert!((t["chisq"].as_f64().unwrap() - 2.46767).abs() < 1e-5, "{t}");
    assert_eq!(t["df"], 2);
    assert!(
        (t["p_value"].as_f64().unwrap() - 0.29117).abs() < 1e-5,
        "{t}"
    );
    assert!(result["criterion"]["name"] == "REML criterion", "{result}");
}

#[test]
fn comparisons_that_mean_nothing_are_refused() {
    all_refused(&[
        (
            &["--compare", "x ~ count + (1 | site)"][..],
            "its response is `x`",
        ),
        (
            &["--compare-bootstrap", "20"][..],
            "give the model to compare with",
        ),
        (
            &[
                "--compare",
                "count ~ (1 | site)",
                "--compare-bootstrap",
                "0",
            ][..],
            "--compare-bootstrap 0",
        ),
    ]);
}
