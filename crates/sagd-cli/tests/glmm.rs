//! `sagd glmm` on a CSV file against lme4's fits of the same file and formula.
//!
//! The references were computed with R 4.2.2 and lme4 1.1-31 on `tests/data/glmm_counts.csv`
//! (180 rows, one with a missing count, 30 sites, a three-level text factor):
//! `glmer(count ~ x + dose + (1 | site), family = poisson, nAGQ = 25)`, exact for a random
//! intercept, and `lmer(count ~ x * dose + (1 | site), REML = TRUE)`, exact; the sites' random
//! effects from `ranef(fit, condVar = TRUE)` (the mode, and the root of `postVar`); their exact
//! conditional means and sds by R's `integrate` (relative tolerance 1e-13) of b p(b | y) at
//! glmer's estimate.

mod common;
use common::{failed, glmm, sagd, succeeded};

use std::path::{Path, PathBuf};

fn data() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/glmm_counts.csv")
}

/// Runs `sagd glmm` into a fresh folder; returns its result.json.
fn fit(args: &[&str]) -> serde_json::Value {
    fit_with_ranef(args).0
}

/// A level's first effect in ranef.csv: its conditional mode and sd, and its conditional mean
/// and sd.
type Ranef = std::collections::HashMap<String, [(f64, f64); 2]>;

/// [`fit`], and the rows of its ranef.csv by level.
fn fit_with_ranef(args: &[&str]) -> (serde_json::Value, Ranef) {
    let dir = tempfile::tempdir().unwrap();
    let o = glmm(args, &data(), dir.path());
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.contains("Fixed effects:") && out.contains("(Intercept)"),
        "{out}"
    );
    for f in ["summary.txt", "estimates.csv"] {
        assert!(dir.path().join(f).exists(), "{f}");
    }
    let ranef = std::fs::read_to_string(dir.path().join("ranef.csv")).unwrap();
    assert!(
        ranef.starts_with("group,level,effect,mode,sd,mean,mean_sd,mean_mcse\n"),
        "{ranef}"
    );
    // Integrated means carry no Monte Carlo error.
    assert!(
        ranef.lines().skip(1).all(|row| row.ends_with(",0")),
        "{ranef}"
    );
    let levels = ranef
        .lines()
        .skip(1)
        .map(|row| {
            let f: Vec<&str> = row.split(',').collect();
            let number = |v: &str| v.parse::<f64>().unwrap();
            let pairs = [(number(f[3]), number(f[4])), (number(f[5]), number(f[6]))];
            (f[1].trim_matches('"').to_string(), pairs)
        })
        .collect();
    let result = std::fs::read_to_string(dir.path().join("result.json")).unwrap();
    (serde_json::from_str(&result).unwrap(), levels)
}

/// Each site's conditional mode and sd (`which` 0) against lme4's `ranef(fit, condVar = TRUE)`,
/// or its conditional mean and sd (1) against R's quadrature, to the distance the two maximisers
/// leave between their θ̂ (the modes moved 7e-6 at most here).
fn close_ranef(got: &Ranef, which: usize, want: &[(&str, f64, f64)]) {
    assert_eq!(got.len(), 30);
    for (site, mode, sd) in want {
        let (m, s) = got[*site][which];
        assert!(
            (m - mode).abs() < 5e-5 && (s - sd).abs() < 5e-5,
            "{site}: {m} ({s}) against lme4's {mode} ({sd})"
        );
    }
}

fn fixed(r: &serde_json::Value) -> Vec<(String, f64)> {
    r["fixed"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["name"].as_str().unwrap().to_string(),
                e["estimate"].as_f64().unwrap(),
            )
        })
        .collect()
}

fn close(got: &[(String, f64)], want: &[(&str, f64)], tol: f64) {
    assert_eq!(got.len(), want.len());
    for ((n, v), (m, w)) in got.iter().zip(want) {
        assert_eq!(n, m);
        assert!((v - w).abs() < tol, "{n}: {v} against lme4's {w}");
    }
}

#[test]
fn poisson_random_intercept_matches_glmer_with_adaptive_quadrature() {
    let (r, ranef) = fit_with_ranef(&["count ~ x + dose + (1 | site)", "--family", "poisson"]);
    // lme4 sorts the text levels: ctl is the reference.
    close(
        &fixed(&r),
        &[
            ("(Intercept)", 0.54561308424),
            ("x", 0.31731383568),
            ("dosehigh", -0.64969965037),
            ("doselow", -0.04773030192),
        ],
        2e-4,
    );
    let sd = r["random"][0]["sd"][0]["value"].as_f64().unwrap();
    assert!((sd - 0.6099468703).abs() < 2e-4, "{sd}");
    assert_eq!(r["data"]["n_obs"], 179);
    assert_eq!(r["data"]["dropped"], 1);
    assert_eq!(r["random"][0]["levels"], 30);
    // glmer's nAGQ > 1 log-likelihood leaves out the constants; its Laplace one (-293.2002)
    // is an approximation, which the exact maximum can only exceed.
    let l = r["log_likelihood"]["value"].as_f64().unwrap();
    assert!(l > -293.2002 && l < -293.1, "{l}");
    assert_eq!(r["method"]["kind"], "exact");
    close_ranef(
        &ranef,
        0,
        &[
            ("site 0", -0.1952687783, 0.3294537775),
            ("site 7", 0.2727816433, 0.2676918036),
            ("site 29", -0.5585299093, 0.3298751939),
        ],
    );
    // The exact means lie 0.03-0.04 (a tenth of an sd) below the modes.
    close_ranef(
        &ranef,
        1,
        &[
            ("site 0", -0.2334244040, 0.3319779594),
            ("site 7", 0.2438816473, 0.2700298220),
            ("site 29", -0.5967409866, 0.3323976073),
        ],
    );
}

#[test]
fn an_exposure_offset_matches_glmer() {
    // Counts over exposures of 1 to 10 (240 rows, 20 sites): glmer(y ~ x + offset(log(exposure))
    // + (1 | site), family = poisson, nAGQ = 25), lme4 1.1-31, bobyqa to rhoend 1e-10.
    let data = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/glmm_exposure.csv");
    let run = |formula: &str, dir: &Path| {
        sagd()
            .args(["glmm", formula, "--family", "poisson", "--quiet", "--data"])
            .arg(&data)
            .arg("--out")
            .arg(dir)
            .output()
            .unwrap()
    };
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("fit");
    let o = run("y ~ x + offset(log(exposure)) + (1 | site)", &out);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let r: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("result.json")).unwrap()).unwrap();
    close(
        &fixed(&r),
        &[("(Intercept)", 0.5098330583), ("x", 0.4327953112)],
        2e-5,
    );
    let sd = r["random"][0]["sd"][0]["value"].as_f64().unwrap();
    assert!((sd - 0.4706889855).abs() < 2e-5, "{sd}");
    let se: Vec<f64> = r["fixed"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["se"].as_f64().unwrap())
        .collect();
    assert!(
        (se[0] - 0.10790215207).abs() < 1e-4 && (se[1] - 0.02026004065).abs() < 1e-5,
        "{se:?}"
    );
    // glmer's Laplace ℓ with every constant is −682.5703; the exact maximum lies above it.
    let l = r["log_likelihood"]["value"].as_f64().unwrap();
    assert!(l > -682.5703 && l < -682.4, "{l}");
    // An exposure of 0 has no log: named, with its row, and nothing written.
    let zero = dir.path().join("zero.csv");
    let text = std::fs::read_to_string(&data)
        .unwrap()
        .replacen(",1.18,", ",0,", 1);
    std::fs::write(&zero, text).unwrap();
    let bad = dir.path().join("bad");
    let o = sagd()
        .args([
            "glmm",
            "y ~ x + offset(log(exposure)) + (1 | site)",
            "--family",
            "poisson",
        ])
        .arg("--data")
        .arg(&zero)
        .arg("--out")
        .arg(&bad)
        .output()
        .unwrap();
    let err = failed(&o);
    assert!(err.contains("`exposure` is 0 at data row 1"), "{err}");
    assert!(!bad.join("result.json").exists());
}

#[test]
fn gaussian_reml_with_an_interaction_matches_lmer() {
    let (r, ranef) = fit_with_ranef(&["count ~ x * dose + (1 | site)", "--reml"]);
    close(
        &fixed(&r),
        &[
            ("(Intercept)", 2.19901483457),
            ("x", 0.75858439887),
            ("dosehigh", -1.00009082565),
            ("doselow", -0.05789583049),
            ("x:dosehigh", -0.39892591972),
            ("x:doselow", -0.09775652644),
        ],
        1e-4,
    );
    assert_eq!(r["criterion"]["name"], "REML criterion");
    let reml = r["criterion"]["value"].as_f64().unwrap();
    assert!((reml - -346.1353251).abs() < 1e-5, "{reml}");
    let site = r["random"][0]["sd"][0]["value"].as_f64().unwrap();
    let sigma = r["sigma"]["value"].as_f64().unwrap();
    assert!((site - 1.419656201).abs() < 1e-4 && (sigma - 1.419632862).abs() < 1e-4);
    // A Gaussian posterior: its mean is its mode.
    assert!(ranef.values().all(|[mode, mean]| mode == mean));
    close_ranef(
        &ranef,
        0,
        &[
            ("site 0", -0.5862746838, 0.5365720467),
            ("site 7", 0.1628045940, 0.5365720467),
            ("site 29", -1.1475416589, 0.5365720467),
        ],
    );
}

#[test]
fn em_on_the_same_model_reaches_the_exact_maximum() {
    let exact = fit(&["count ~ x + dose + (1 | site)", "--family", "poisson"]);
    let em = fit(&[
        "count ~ x + dose + (1 | site)",
        "--family",
        "poisson",
        "--method",
        "em",
    ]);
    assert_eq!(em["method"]["kind"], "em");
    assert_eq!(em["method"]["status"], "polished");
    // The polish's tolerance: within 0.01 of the maximum; ℓ here is exact (quadrature).
    let gap = exact["log_likelihood"]["value"].as_f64().unwrap()
        - em["log_likelihood"]["value"].as_f64().unwrap();
    assert!((-1e-6..0.01).contains(&gap), "{gap}");
}

#[test]
fn bad_input_is_refused_by_name_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    for (formula, family, says) in [
        (
            "count ~ x + log(x) + (1 | site)",
            "poisson",
            "add the transformed variable",
        ),
        ("count ~ x + (1 | plot)", "poisson", "no column `plot`"),
        ("count ~ x + (1 | site)", "binomial", "at data row"),
        ("count ~ x", "poisson", "no random-effect term"),
        ("count ~ x + (1 | site)", "gamma", "unknown family"),
        (
            "count ~ x + (1 | site:x)",
            "gaussian",
            "`site:x` has a level for each of the 179 observations",
        ),
        ("count ~ (x + (1 | site)", "poisson", "brackets"),
        (
            "count ~ x + (1 | site) --ranef-draws 5",
            "poisson",
            "--ranef-draws 5",
        ),
    ] {
        // A case's flags follow its formula.
        let (formula, flags) = formula.split_once(" --").unwrap_or((formula, ""));
        let flags = flags.split_whitespace().enumerate().map(|(i, f)| match i {
            0 => format!("--{f}"),
            _ => f.to_string(),
        });
        let o = sagd()
            .args(["glmm", formula, "--family", family])
            .args(flags)
            .arg("--data")
            .arg(data())
            .arg("--out")
            .arg(&out)
            .output()
            .unwrap();
        assert!(!o.status.success(), "{formula}");
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains(says), "{formula}: {err}");
        assert!(!out.join("result.json").exists());
    }
}

#[test]
fn a_reader_that_has_gone_leaves_the_run_to_finish() {
    // `sagd glmm … 2>&1 | head -1`: stdout and stderr closed before a line is written. Each
    // println! used to panic there (exit 101), before or after the result was written.
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let closed = || {
        let (reader, writer) = std::io::pipe().unwrap();
        drop(reader);
        writer
    };
    let status = sagd()
        .args([
            "glmm",
            "count ~ x + (1 | site)",
            "--family",
            "poisson",
            "--data",
        ])
        .arg(data())
        .arg("--out")
        .arg(&out)
        .stdout(closed())
        .stderr(closed())
        .status()
        .unwrap();
    assert!(status.success(), "{status:?}");
    assert!(out.join("result.json").exists() && out.join("ranef.csv").exists());
}

#[test]
fn a_folder_holding_another_command_s_result_is_refused_and_kept() {
    // The mixed folders: `em --out` into another command's result folder exited 0 and
    // left one command's result.json beside the other's files.
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let glmm = |out: &std::path::Path| {
        sagd()
            .args([
                "glmm",
                "count ~ x + (1 | site)",
                "--family",
                "poisson",
                "--quiet",
            ])
            .arg("--data")
            .arg(data())
            .arg("--out")
            .arg(out)
            .output()
            .unwrap()
    };
    let o = glmm(&out);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let before = std::fs::read(out.join("result.json")).unwrap();
    let o = sagd()
        .args(["em", "--quiet", "--out"])
        .arg(&out)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success()
            && err.contains("`sagd glmm`")
            && err.contains("another --out")
            && err.contains("--replace"),
        "{err}"
    );
    assert_eq!(std::fs::read(out.join("result.json")).unwrap(), before);
    assert!(!out.join("figure1a.png").exists());
    // The same command may replace its own result, and the lock is not left behind.
    let o = glmm(&out);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(!out.join(".sagd.lock").exists());
    let mark = std::fs::read_to_string(out.join(".sagd-command")).unwrap();
    let listed: Vec<&str> = mark.lines().collect();
    assert_eq!(listed[0], "glmm", "{mark}");
    assert!(
        listed.contains(&"result.json") && listed.contains(&"summary.txt"),
        "{mark}"
    );
}

#[test]
fn replace_removes_another_command_s_result_and_keeps_the_user_s_files() {
    // `--replace` overrides the refusal above: the other command's listed files and its
    // interrupted run's checkpoints go, a file the user put there stays.
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    std::fs::create_dir_all(out.join("checkpoints")).unwrap();
    for (name, text) in [
        (
            ".sagd-command",
            "debias\ntrace.png\nresult.json\n../outside.txt\n",
        ),
        ("trace.png", "debias's figure"),
        ("result.json", "{}"),
        ("notes.txt", "the user's"),
        ("checkpoints/.sagd-command", "mnist\n"),
        ("checkpoints/pretrain.ckpt", "mnist's checkpoint"),
    ] {
        std::fs::write(out.join(name), text).unwrap();
    }
    std::fs::write(dir.path().join("outside.txt"), "not in the folder").unwrap();
    succeeded(
        sagd()
            .args(["glmm", "count ~ x + (1 | site)", "--family", "poisson"])
            .args(["--quiet", "--replace"])
            .arg("--data")
            .arg(data())
            .arg("--out")
            .arg(&out),
    );
    assert!(!out.join("trace.png").exists());
    assert!(!out.join("checkpoints").exists());
    assert!(out.join("notes.txt").exists());
    assert!(dir.path().join("outside.txt").exists());
    let result = std::fs::read_to_string(out.join("result.json")).unwrap();
    assert!(result.contains("site"), "{result}");
    let mark = std::fs::read_to_string(out.join(".sagd-command")).unwrap();
    assert!(mark.starts_with("glmm\n"), "{mark}");
}

#[test]
fn crossed_counts_have_sampled_means_with_their_errors_or_blank_ones_on_request() {
    let run = |extra: &[&str]| {
        let dir = tempfile::tempdir().unwrap();
        let o = succeeded(
            sagd()
                .args([
                    "glmm",
                    "count ~ x + (1 | site) + (1 | dose)",
                    "--family",
                    "poisson",
                ])
                .args(extra)
                .arg("--data")
                .arg(data())
                .arg("--out")
                .arg(dir.path())
                .arg("--quiet"),
        );
        let read = |f| std::fs::read_to_string(dir.path().join(f)).unwrap();
        let result: serde_json::Value = serde_json::from_str(&read("result.json")).unwrap();
        let err = String::from_utf8_lossy(&o.stderr).to_string();
        (err, read("ranef.csv"), result["ranef_means"].clone())
    };
    // 30 sites and 3 doses in one block: the means by HMC, each with its Monte Carlo error.
    let (err, ranef, means) = run(&[]);
    assert!(
        err.contains("sampled by HMC") && err.contains("mean_mcse"),
        "{err}"
    );
    assert_eq!(ranef.lines().count(), 1 + 33);
    for row in ranef.lines().skip(1) {
        let f: Vec<f64> = row.split(',').skip(3).map(|v| v.parse().unwrap()).collect();
        let [mode, sd, mean, mean_sd, mcse] = f[..] else {
            panic!("{row}")
        };
        assert!(mcse > 0.0 && mcse < 0.05 * mean_sd, "{row}");
        assert!(
            (mean - mode).abs() < 0.5 * sd && (mean_sd - sd).abs() < 0.3 * sd,
            "{row}"
        );
    }
    assert_eq!(means["method"], "hmc");
    assert!(means["max_rhat"].as_f64().unwrap() < 1.01, "{means}");
    // Without draws: blank, and the note says how to have them.
    let (err, ranef, means) = run(&["--ranef-draws", "0"]);
    assert!(err.contains("mean and mean_sd are blank"), "{err}");
    assert!(
        err.contains("at most 3 effects per block") && err.contains("--ranef-draws"),
        "{err}"
    );
    assert!(
        ranef.lines().skip(1).all(|row| row.ends_with(",,,")),
        "{ranef}"
    );
    assert!(means["method"].is_null(), "{means}");
}
