//! The binary as a user runs it.

mod common;
use common::{sagd, E2_SHORT, MNIST_SMALL};

#[test]
fn bench_kernel_prints_a_json_table() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("kernel.json");
    let o = sagd()
        .args([
            "bench",
            "kernel",
            "--dims",
            "16,64",
            "--schemes",
            "euler,ubu",
            "--work",
            "20000",
            "--repeats",
            "2",
            "--out",
        ])
        .arg(&out)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let rows = v["rows"].as_array().unwrap();
    // naive baseline + noise + two schemes, for each of two dimensions.
    assert_eq!(rows.len(), 8);
    assert!(rows
        .iter()
        .all(|r| r["ns_per_step_dim"].as_f64().unwrap() > 0.0));
    let saved: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
    assert_eq!(saved, v);
}

#[test]
fn bad_flags_fail_with_a_message() {
    let o = sagd()
        .args(["bench", "kernel", "--schemes", "verlet"])
        .output()
        .unwrap();
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("unknown scheme `verlet`") && err.contains("euler, obabo, baoab, ubu"),
        "{err}"
    );
    let o = sagd()
        .args(["--threads", "0", "bench", "kernel"])
        .output()
        .unwrap();
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("--threads must be at least 1"));
    for (args, says) in [
        (
            &["bench", "debias", "--dist", "gamma"][..],
            "unknown case `gamma`",
        ),
        (
            &["bench", "debias", "--dist", "highdim"][..],
            "the 1-D cases",
        ),
    ] {
        let o = sagd().args(args).output().unwrap();
        assert!(!o.status.success());
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains(says), "{err}");
    }
    // Chains that cannot fit in memory: before, the allocation aborted the process (rc 134).
    let dir = tempfile::tempdir().unwrap();
    for flag in [
        &["em", "--chains-per-point"][..],
        &["debias", "--sagd-chains-per-point"][..],
    ] {
        let o = sagd()
            .args(flag)
            .args(["100000000", "--quiet", "--out"])
            .arg(dir.path().join("x"))
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{err}");
        assert!(err.contains("more than this machine's"), "{err}");
        assert!(!dir.path().join("x/result.json").exists());
    }
}

fn json(path: &std::path::Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

#[test]
fn em_writes_its_result_and_figures() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("em");
    let o = sagd()
        .args(["em", "--quiet", "--surface", "12", "--out"])
        .arg(&out)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    for f in [
        "result.json",
        "figure1a.png",
        "figure1a.svg",
        "figure1b.png",
        "figure1b.svg",
    ] {
        assert!(out.join(f).metadata().unwrap().len() > 1000, "{f}");
    }
    // The PNGs at twice the figures' size (Figure 1a is 900 × 720), sharp on dense screens; the
    // SVGs at their size. A PNG's width and height are bytes 16-23, big-endian.
    let png = std::fs::read(out.join("figure1a.png")).unwrap();
    let dim = |at: usize| u32::from_be_bytes(png[at..at + 4].try_into().unwrap());
    assert_eq!((dim(16), dim(20)), (1800, 1440));
    let svg = std::fs::read_to_string(out.join("figure1a.svg")).unwrap();
    assert!(svg.contains("width=\"900\""), "{}", &svg[..200]);
    let v = json(&out.join("result.json"));
    assert_eq!(v["sagd"]["path"].as_array().unwrap().len(), 301);
    assert_eq!(v["exact_gd"]["loglik"].as_array().unwrap().len(), 301);
    assert!(
        v["quadrature_check"]["max_abs_err_loglik"]
            .as_f64()
            .unwrap()
            < 1e-8
    );
    assert!(v["mle"]["converged"].as_bool().unwrap());
    assert!(v["timing_s"]["sagd"].as_f64().unwrap() > 0.0);
    assert_eq!(v["seed"], 1);
    // SAGD ends near exact GD (within the Monte Carlo spread measured in the library's tests).
    assert!(
        v["comparison"]["distance_sagd_exact_final"]
            .as_f64()
            .unwrap()
            < 0.15
    );
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(
        stdout.contains("exact GD") && stdout.contains("MLE"),
        "{stdout}"
    );
}

#[test]
fn em_resumes_from_its_checkpoint_to_the_same_result() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("em");
    let args = [
        "em",
        "--quiet",
        "--surface",
        "4",
        "--msteps",
        "2",
        "--checkpoint-every",
        "30",
        "--out",
    ];
    assert!(sagd()
        .args(args)
        .arg(&out)
        .output()
        .unwrap()
        .status
        .success());
    let first = json(&out.join("result.json"));
    assert!(out.join("em.ckpt").exists());
    let o = sagd()
        .args(args)
        .arg(&out)
        .arg("--resume")
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let second = json(&out.join("result.json"));
    assert_eq!(first["sagd"], second["sagd"]);
    let o = sagd()
        .args(["em", "--quiet", "--resume", "--out"])
        .arg(dir.path().join("none"))
        .output()
        .unwrap();
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("no checkpoint"));
}

#[test]
fn em_fits_a_users_data() {
    let dir = tempfile::tempdir().unwrap();
    let csv = dir.path().join("x.csv");
    let xs: Vec<String> = (1..=60)
        .map(|i| format!("{}", 2.0 + 6.0 * ((i as f64) * 0.37).sin().abs()))
        .collect();
    std::fs::write(&csv, format!("value\n{}\n", xs.join("\n"))).unwrap();
    let fit = |out: &std::path::Path, extra: &[&str]| {
        sagd()
            .args(["em", "--quiet", "--surface", "6", "--max-msteps", "12"])
            .args(extra)
            .arg("--data")
            .arg(&csv)
            .arg("--out")
            .arg(out)
            .output()
            .unwrap()
    };
    let out = dir.path().join("fit");
    let o = fit(&out, &["--column", "value"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    // The printout names the model and the column it read.
    let said = String::from_utf8_lossy(&o.stdout);
    assert!(
        said.contains("Gamma-sigmoid") && said.contains("column `value` (column 1 of 1)"),
        "{said}"
    );
    // The fit alone: the same estimate without the paper's comparisons or their figures.
    let alone = dir.path().join("alone");
    let o = fit(&alone, &["--fit-only"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let (v, w) = (
        json(&out.join("result.json")),
        json(&alone.join("result.json")),
    );
    assert_eq!(w["polished"]["estimate"], v["polished"]["estimate"]);
    assert_eq!(w["standard_errors"], v["standard_errors"]);
    assert!(w["exact_gd"].is_null() && w["surface"].is_null(), "{w}");
    assert!(!alone.join("figure1a.png").exists() && out.join("figure1a.png").exists());
    let said = String::from_utf8_lossy(&o.stdout);
    assert!(
        !said.contains("exact GD") && said.contains("polished"),
        "{said}"
    );
    assert_eq!(v["data"]["n"], 60);
    assert_eq!(v["data"]["origin"]["source"], "file");
    assert!(
        v["settings"]["stopping"].is_object(),
        "with --data EM runs until its stopping rule"
    );
    // ... and then polishes: Newton steps until ℓ is within 0.01 of its maximum (beyond noise);
    // the quadrature MLE checks it.
    let gap = v["polished"]["loglik_max_minus_polished"].as_f64().unwrap();
    assert!(
        v["polished"]["converged"].as_bool().unwrap(),
        "{}",
        v["polished"]
    );
    assert!(gap < 0.05, "{}", v["polished"]);
}

/// `sagd em` on the CSV `data`, into `out`.
fn em_on_data(data: &std::path::Path, out: &std::path::Path) -> std::process::Output {
    sagd()
        .args(["em", "--quiet", "--data"])
        .arg(data)
        .arg("--out")
        .arg(out)
        .output()
        .unwrap()
}

#[test]
fn em_rejects_bad_data_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let cases: &[(&str, &str, &[&str])] = &[
        ("empty.csv", "", &["is empty"]),
        ("header.csv", "x\n", &["no data rows"]),
        (
            "text.csv",
            "1.0\n2.5\nabc\n",
            &["line 3", "`abc` is not a number"],
        ),
        ("nan.csv", "1\nNaN\n", &["line 2", "not a finite number"]),
        ("inf.csv", "1\n2\ninf\n", &["line 3", "not a finite number"]),
        ("zero.csv", "1\n0\n", &["line 2", "not positive"]),
        ("negative.csv", "-3\n", &["line 1", "not positive"]),
    ];
    for (name, body, needles) in cases {
        let path = dir.path().join(name);
        std::fs::write(&path, body).unwrap();
        let out = dir.path().join(format!("out-{name}"));
        let o = em_on_data(&path, &out);
        assert!(!o.status.success(), "{name} was accepted");
        let err = String::from_utf8_lossy(&o.stderr);
        for n in *needles {
            assert!(err.contains(n), "{name}: expected `{n}` in: {err}");
        }
        assert!(
            !out.join("result.json").exists(),
            "{name}: a result was written"
        );
    }
    let good = dir.path().join("two.csv");
    std::fs::write(&good, "a,b\n1,2\n3,4\n").unwrap();
    let bad_column = |col: &str| {
        let o = sagd()
            .args(["em", "--quiet", "--column", col, "--data"])
            .arg(&good)
            .arg("--out")
            .arg(dir.path().join("c"))
            .output()
            .unwrap();
        assert!(!o.status.success());
        String::from_utf8_lossy(&o.stderr).to_string()
    };
    assert!(bad_column("c").contains("no column named `c`"));
    assert!(bad_column("3").contains("no column 3"));
    assert!(bad_column("0").contains("column numbers start at 1"));
    let missing = sagd()
        .args(["em", "--quiet", "--data", "/nonexistent/x.csv"])
        .output()
        .unwrap();
    assert!(!missing.status.success());
    assert!(String::from_utf8_lossy(&missing.stderr)
        .contains("cannot read the data file /nonexistent/x.csv"));
    assert!(!dir.path().join("c").join("result.json").exists());
}

#[test]
fn em_rejects_bad_settings() {
    for (args, needle) in [
        (vec!["--scheme", "rk4"], "unknown scheme"),
        (vec!["--T", "0"], "updates_per_mstep"),
        (vec!["--delta0", "2"], "gamma*delta < 1"),
        (vec!["--rho0", "up"], "--rho0"),
        (
            vec!["--until-converged", "--window", "2"],
            "window of at least 3",
        ),
        // The error names the flag given, not the setting it maps onto.
        (vec!["--msteps", "0"], "invalid setting `msteps`"),
        (
            vec!["--until-converged", "--max-msteps", "0"],
            "invalid setting `max_msteps`",
        ),
    ] {
        let o = sagd().args(["em", "--quiet"]).args(&args).output().unwrap();
        assert!(!o.status.success(), "{args:?} accepted");
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains(needle), "{args:?}: {err}");
    }
}

const SMALL: [&str; 10] = [
    "--pretrain-iters",
    "40",
    "--finetune-iters",
    "4",
    "--m",
    "2000",
    "--n",
    "150",
    "--quiet",
    "--reps",
];

#[test]
fn debias_writes_table_figure_and_result() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("deb");
    let o = sagd()
        .args(["debias", "--dist", "normal"])
        .args(SMALL)
        .arg("2")
        .arg("--out")
        .arg(&out)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    for f in ["result.json", "table1.md", "figure2.png", "figure2.svg"] {
        assert!(out.join(f).metadata().unwrap().len() > 500, "{f}");
    }
    let v = json(&out.join("result.json"));
    let reps = v["replications"].as_array().unwrap();
    assert_eq!(reps.len(), 2);
    assert_eq!(reps[1]["seed"], 1);
    for m in ["vae", "iwae", "hmc", "sagd"] {
        assert!(reps[0]["methods"][m]["W"].as_f64().unwrap() > 0.0, "{m}");
        assert!(v["summary"][format!("{m}_D")]["se"].as_f64().is_some());
    }
    let table = std::fs::read_to_string(out.join("table1.md")).unwrap();
    assert!(
        table.contains("| D | paper |") && table.contains("0.033 (0.0024)"),
        "{table}"
    );
}

#[test]
fn debias_deconvolves_a_users_data() {
    let dir = tempfile::tempdir().unwrap();
    let csv = dir.path().join("obs.csv");
    let xs: Vec<String> = (0..120)
        .map(|i| format!("{:.4}", ((i as f64) * 0.71).sin() * 2.0 + 1.0))
        .collect();
    std::fs::write(&csv, xs.join("\n")).unwrap();
    let out = dir.path().join("dec");
    let o = sagd()
        .args(["debias", "--methods", "vae,sagd", "--noise-sd", "1"])
        .args(&SMALL[..6])
        .arg("--data")
        .arg(&csv)
        .arg("--out")
        .arg(&out)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v = json(&out.join("result.json"));
    assert!(v["note"]
        .as_str()
        .unwrap()
        .contains("D and W are not defined"));
    assert_eq!(v["quantiles"]["sagd"]["q"].as_array().unwrap().len(), 9);
    let samples = std::fs::read_to_string(out.join("latent_samples.csv")).unwrap();
    assert!(
        samples.starts_with("pretrained,sagd,vae\n"),
        "{}",
        &samples[..40]
    );
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(stdout.contains("D and W are not defined"));
    // A fifth held out (24 of 120), every fitted model scored on them, and a recommendation.
    assert_eq!(
        (v["data"]["fitted"].as_u64(), v["data"]["held_out"].as_u64()),
        (Some(96), Some(24))
    );
    let held = &v["held_out"];
    assert_eq!(held["n"], 24);
    assert_eq!(held["scores"].as_array().unwrap().len(), 3);
    assert_eq!(held["scores"][0]["model"], held["best"]);
    assert!(stdout.contains("recommendation ("), "{stdout}");
    // A model is named as the choice only when the data make one; else the rows are tied.
    match held["confidence"].as_str().unwrap() {
        "undecided" => {
            assert!(held["chosen"].is_null(), "{held}");
            assert!(stdout.contains(" tied"), "{stdout}");
        }
        _ => assert_eq!(held["chosen"], held["best"]),
    }
    // What the holdout cost, and how to fit on everything.
    assert!(
        stdout.contains("every fit above used 96 of the 120 observations (24 held out"),
        "{stdout}"
    );
    // The predictive check: a panel per fitted model, each with its held-out score.
    let svg = std::fs::read_to_string(out.join("predictive.svg")).unwrap();
    assert!(svg.contains("the density of x each fitted model implies"));
    assert_eq!(svg.matches("held out: ").count(), 3);
    assert!(out.join("predictive.png").metadata().unwrap().len() > 1000);
    // Flags that only a simulation uses are refused beside --data, not silently recorded.
    for flag in [["--reps", "3"], ["--n", "50"], ["--dist", "mixture"]] {
        let o = sagd()
            .args(["debias", "--data"])
            .arg(&csv)
            .args(flag)
            .output()
            .unwrap();
        assert!(!o.status.success(), "{flag:?} accepted with --data");
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains(flag[0]) && err.contains("--data"), "{err}");
    }
}

#[test]
fn debias_rejects_bad_input() {
    let dir = tempfile::tempdir().unwrap();
    for (args, needle) in [
        (
            vec!["--dist", "gamma"],
            "unknown case `gamma`: use normal, exp",
        ),
        (
            vec!["--batch-size", "0"],
            "`batch_size` = 0: use at least 1",
        ),
        (vec!["--methods", "vae,mcmc"], "unknown method `mcmc`"),
        (
            vec!["--sagd-scheme", "euler", "--sagd-delta", "0.6"],
            "gamma*delta < 1",
        ),
        (vec!["--n", "0"], "`n` = 0: use at least 1"),
        (
            vec!["--sagd-lr", "0"],
            "`sagd_lr` = 0: use a finite learning rate",
        ),
        (vec!["--reps", "0"], "--reps must be at least 1"),
    ] {
        let o = sagd()
            .args(["debias", "--quiet"])
            .args(&args)
            .output()
            .unwrap();
        assert!(!o.status.success(), "{args:?} accepted");
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains(needle), "{args:?}: {err}");
    }
    let bad = dir.path().join("bad.csv");
    std::fs::write(&bad, "1.0\nNaN\n").unwrap();
    let out = dir.path().join("o");
    let o = sagd()
        .args(["debias", "--quiet", "--noise-sd", "1", "--data"])
        .arg(&bad)
        .arg("--out")
        .arg(&out)
        .output()
        .unwrap();
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("line 2"));
    assert!(!out.join("result.json").exists());
    // The noise's sd is the user's to state: not taken as 1 in silence, and not taken without
    // data. Nothing is written either way.
    let good = dir.path().join("good.csv");
    std::fs::write(&good, "1.0\n2.0\n0.5\n").unwrap();
    let o = sagd()
        .args(["debias", "--quiet", "--data"])
        .arg(&good)
        .arg("--out")
        .arg(&out)
        .output()
        .unwrap();
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("--data needs --noise-sd"), "{err}");
    assert!(!out.exists());
    let o = sagd()
        .args(["debias", "--quiet", "--noise-sd", "0.5"])
        .output()
        .unwrap();
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("--data"));
}

#[test]
fn debias_runs_the_high_dimensional_case_with_minibatches() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("hd");
    let o = sagd()
        .args([
            "debias",
            "--dist",
            "highdim",
            "--quiet",
            "--n",
            "120",
            "--p",
            "4",
            "--hidden",
            "8",
            "--batch-size",
            "50",
        ])
        .args([
            "--pretrain-epochs",
            "3",
            "--finetune-epochs",
            "1",
            "--m",
            "2000",
            "--out",
        ])
        .arg(&out)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v = json(&out.join("result.json"));
    assert!(v["settings_profile"]
        .as_str()
        .unwrap()
        .contains("small default"));
    assert!(v["replications"][0]["methods"]["sagd"]["W_se_coord"]
        .as_f64()
        .is_some());
    assert!(String::from_utf8_lossy(&o.stdout).contains("| W | paper |"));
}

#[test]
fn debias_traces_fits_and_reuses_a_cached_pretraining() {
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("cache");
    let run = |out: &str, extra: &[&str]| {
        let out = dir.path().join(out);
        let o = sagd()
            .args([
                "debias", "--dist", "highdim", "--quiet", "--n", "120", "--p", "3",
            ])
            .args([
                "--hidden",
                "8",
                "--batch-size",
                "50",
                "--pretrain-epochs",
                "3",
            ])
            .args([
                "--finetune-epochs",
                "4",
                "--m",
                "2000",
                "--methods",
                "vae,sagd",
            ])
            .args(["--trace-every", "2", "--pretrained-cache"])
            .arg(&cache)
            .args(extra)
            .arg("--out")
            .arg(&out)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        (json(&out.join("result.json")), out)
    };
    let (first, out) = run("a", &[]);
    let trace = std::fs::read_to_string(out.join("trace.csv")).unwrap();
    let lines: Vec<&str> = trace.lines().collect();
    assert_eq!(lines[0], "seed,method,epoch,D,W,loglik,z_mean,z_sd,loss");
    for f in ["trace.png", "trace.svg"] {
        assert!(out.join(f).metadata().unwrap().len() > 500, "{f}");
    }
    // Two methods, epochs 2 and 4.
    assert_eq!(lines.len(), 5, "{trace}");
    assert!(lines[2].starts_with("0,sagd,4,") || lines[4].starts_with("0,vae,4,"));
    assert_eq!(std::fs::read_dir(&cache).unwrap().count(), 1);
    let rep = &first["replications"][0];
    assert!(rep.get("pretrained_from").is_none());
    assert_eq!(rep["methods"]["sagd"]["trace"].as_array().unwrap().len(), 2);
    // The second run reads the cache and fits the same.
    let (second, _) = run("b", &[]);
    let rep2 = &second["replications"][0];
    assert!(rep2["pretrained_from"]
        .as_str()
        .unwrap()
        .contains("pretrained-p3-h8"));
    for m in ["vae", "sagd"] {
        assert_eq!(rep["methods"][m]["W"], rep2["methods"][m]["W"], "{m}");
    }
    // The paper's profile gives SAGD its own learning rate, and --sagd-lr overrides it.
    let (paper, _) = run("c", &["--paper-settings"]);
    assert_eq!(paper["settings"]["sagd_lr"], 1e-4);
    assert_eq!(first["settings"]["sagd_lr"], serde_json::Value::Null);
    let (own, _) = run("d", &["--paper-settings", "--sagd-lr", "1e-3"]);
    assert_eq!(own["settings"]["sagd_lr"], 1e-3);
    assert_eq!(
        own["replications"][0]["methods"]["sagd"]["W"],
        rep["methods"]["sagd"]["W"]
    );
}

/// `result.json` without what differs between any two runs (wall times, the command line).
fn without_timings(mut v: serde_json::Value) -> serde_json::Value {
    fn strip(v: &mut serde_json::Value) {
        match v {
            serde_json::Value::Object(m) => {
                m.retain(|k, _| !(k.contains("time_s") || k == "flags"));
                m.values_mut().for_each(strip);
            }
            serde_json::Value::Array(a) => a.iter_mut().for_each(strip),
            _ => {}
        }
    }
    strip(&mut v);
    v
}

#[test]
fn debias_interrupted_mid_fine_tuning_resumes_to_the_same_result() {
    let dir = tempfile::tempdir().unwrap();
    // SAGD's tail average, HMC's acceptance record, IWAE's stream and a trace all cross the
    // interruption.
    let mut args = E2_SHORT.to_vec();
    args.splice(12..12, ["--trace-every", "10"]);
    let whole = dir.path().join("whole");
    let o = sagd().args(&args).arg(&whole).output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));

    let part = dir.path().join("part");
    let o = sagd()
        .args(&args)
        .arg(&part)
        .args(["--checkpoint-every", "4", "--interrupt-after", "13"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success() && err.contains("--resume"), "{err}");
    assert!(
        !part.join("result.json").exists(),
        "an interrupted run wrote a result"
    );
    for m in ["pretrain", "vae", "iwae", "hmc", "sagd"] {
        assert!(
            part.join(format!("checkpoints/rep0-{m}.ckpt")).exists(),
            "{m}"
        );
    }
    // Another command into the interrupted run's folder is refused: before, `sagd em --out`
    // there exited 0 and removed the checkpoints, so that the resume failed.
    let o = sagd()
        .args(["em", "--quiet", "--out"])
        .arg(&part)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success() && err.contains("checkpoints of an interrupted run of `sagd debias`"),
        "{err}"
    );
    assert!(part.join("checkpoints/rep0-sagd.ckpt").exists());
    // A damaged checkpoint of a later phase is named before any phase is recomputed (on a copy;
    // the earlier phases' checkpoints are left as they were).
    let damaged = dir.path().join("damaged");
    copy_dir(&part, &damaged);
    let sagd_ck = damaged.join("checkpoints/rep0-sagd.ckpt");
    let mut bytes = std::fs::read(&sagd_ck).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0x10;
    std::fs::write(&sagd_ck, &bytes).unwrap();
    let vae_before = std::fs::read(damaged.join("checkpoints/rep0-vae.ckpt")).unwrap();
    let o = sagd()
        .args(&args)
        .arg(&damaged)
        .args(["--checkpoint-every", "4", "--resume"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success() && err.contains("rep0-sagd.ckpt") && err.contains("checksum"),
        "{err}"
    );
    assert_eq!(
        std::fs::read(damaged.join("checkpoints/rep0-vae.ckpt")).unwrap(),
        vae_before,
        "a phase was recomputed before the damage was found"
    );

    // Checkpoints of other settings are refused; another seed does not take these (on a copy:
    // a run that finishes removes its checkpoints).
    let o = sagd()
        .args(&args)
        .arg(&part)
        .args(["--resume", "--lr", "0.002"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success() && err.contains("other settings"),
        "{err}"
    );
    let other = dir.path().join("other");
    copy_dir(&part, &other);
    let o = sagd()
        .args(&args)
        .arg(&other)
        .args(["--resume", "--seed", "3"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let o = sagd()
        .args(&args)
        .arg(&part)
        .args(["--checkpoint-every", "4", "--resume"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(
        without_timings(json(&part.join("result.json"))),
        without_timings(json(&whole.join("result.json")))
    );
    assert!(
        !part.join("checkpoints").exists(),
        "the finished run left its checkpoints"
    );
}

/// Copies a folder and its subfolders.
fn copy_dir(from: &std::path::Path, to: &std::path::Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &to.join(e.file_name()));
        } else {
            std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
        }
    }
}

/// Ctrl-C during `sagd reproduce` ends it with exit code 130 and says how to resume.
#[test]
#[cfg(target_os = "linux")]
fn reproduce_interrupted_by_ctrl_c_says_how_to_resume() {
    use std::io::{BufRead, BufReader, Read};
    let dir = tempfile::tempdir().unwrap();
    let mut child = sagd()
        .args(["reproduce", "--tiny", "--out"])
        .arg(dir.path().join("rep"))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut err = BufReader::new(child.stderr.take().unwrap());
    // The plan's line comes after the handler is installed.
    let mut first = String::new();
    err.read_line(&mut first).unwrap();
    assert!(first.contains("sagd reproduce (tiny)"), "{first}");
    let kill = std::process::Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(kill.success());
    let mut rest = String::new();
    err.read_to_string(&mut rest).unwrap();
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(130), "{rest}");
    assert!(
        rest.contains("interrupted: run the same command again to resume"),
        "{rest}"
    );
}

#[test]
fn a_cache_that_cannot_be_written_is_refused_before_any_work() {
    // The issue: a read-only --pretrained-cache failed only after the pre-training it was to
    // keep. A folder under a plain file cannot be made, whoever runs the test (root included).
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("a-file");
    std::fs::write(&file, "").unwrap();
    let cache = file.join("cache");
    for cmd in [
        vec!["debias", "--dist", "exp", "--reps", "1"],
        vec!["mnist"],
        vec!["reproduce", "--only", "e1"],
    ] {
        let out = dir.path().join(format!("out-{}", cmd[0]));
        let o = sagd()
            .args(&cmd)
            .args(["--quiet", "--pretrained-cache"])
            .arg(&cache)
            .arg("--out")
            .arg(&out)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success(), "{cmd:?}");
        assert!(
            err.contains("--pretrained-cache") && err.contains("cannot write there"),
            "{cmd:?}: {err}"
        );
        assert!(!out.join("result.json").exists() && !out.join("report.md").exists());
    }
}

#[test]
fn a_resumed_reproduce_says_its_estimate_counts_the_interrupted_work_whole() {
    // An experiment left with checkpoints by an interrupted run: the plan cannot tell how far it
    // got, and the printed estimate says it is an upper bound.
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("rep");
    std::fs::create_dir_all(out.join("e1").join("checkpoints")).unwrap();
    let o = sagd()
        .args(["reproduce", "--tiny", "--only", "e1", "--out"])
        .arg(&out)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let err = String::from_utf8_lossy(&o.stderr);
    let first = err.lines().next().unwrap_or("");
    assert!(
        first.contains("estimated at most") && first.contains("1 resume from checkpoints"),
        "{first}"
    );
}

#[test]
fn reproduce_writes_one_report_and_survives_a_failing_experiment() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("rep");
    let o = sagd()
        .args(["reproduce", "--tiny", "--quiet", "--out"])
        .arg(&out)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v = json(&out.join("results.json"));
    let exps = v["experiments"].as_array().unwrap();
    let names: Vec<&str> = exps.iter().map(|e| e["name"].as_str().unwrap()).collect();
    assert_eq!(
        names,
        [
            "e1",
            "e2-normal",
            "e2-exp",
            "e2-mixture",
            "e2-highdim",
            "e3"
        ]
    );
    let html = std::fs::read_to_string(out.join("report.html")).unwrap();
    let md = std::fs::read_to_string(out.join("report.md")).unwrap();
    for e in exps {
        let name = e["name"].as_str().unwrap();
        assert_eq!(e["status"], "done", "{name}");
        assert!(html.contains(&format!("id=\"{name}\"")), "{name}");
        for f in e["figures"].as_array().unwrap() {
            let f = f.as_str().unwrap();
            assert!(out.join(f).metadata().unwrap().len() > 1000, "{f}");
            assert!(md.contains(&format!("]({f})")), "{f}");
        }
        assert!(
            json(&out.join(name).join("result.json")).is_object(),
            "{name}"
        );
        assert!(!e["tables"].as_array().unwrap().is_empty(), "{name}");
    }
    // Every figure is inside the page, and nothing on it is fetched from elsewhere.
    // Figures 1a, 1b, four of Figure 2, Figure 3 and E3's learning curves.
    assert_eq!(html.matches("src=\"data:image/png;base64,").count(), 8);
    assert!(html.contains("SAGD − control"), "E3's paired differences");
    assert!(!html.contains("src=\"http") && !html.contains("href=\"http"));
    assert!(
        html.contains("0.052 (0.0040)"),
        "the paper's numbers beside ours"
    );

    // The same flags again: every experiment reused, or all but e1 (`e1_reused` false); the
    // run's stderr.
    let again = |e1_reused: bool| {
        let o = sagd()
            .args(["reproduce", "--tiny", "--quiet", "--out"])
            .arg(&out)
            .output()
            .unwrap();
        assert!(o.status.success());
        let v = json(&out.join("results.json"));
        for e in v["experiments"].as_array().unwrap() {
            assert_eq!(e["reused"], e1_reused || e["name"] != "e1", "{}", e["name"]);
        }
        String::from_utf8_lossy(&o.stderr).to_string()
    };
    // Nothing is recomputed.
    again(true);
    // A damaged record is not trusted: that experiment runs again, saying so; the others are
    // reused.
    let record = out.join("e1/reproduce.record");
    let mut bytes = std::fs::read(&record).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0x02;
    std::fs::write(&record, &bytes).unwrap();
    let err = again(false);
    assert!(
        err.contains("checksum") && err.contains("e1 runs again"),
        "{err}"
    );
    // A figure the report embeds, written over since (the issue: another run's figures in an
    // experiment's folder were embedded under the old table): that experiment runs again.
    let figure = out.join("e1/figure1a.png");
    let mut bytes = std::fs::read(&figure).unwrap();
    bytes.push(0);
    std::fs::write(&figure, &bytes).unwrap();
    again(false);

    // One experiment fails: the others are there, the report says why, the exit status is not 0.
    let bad = dir.path().join("bad");
    let o = sagd()
        .args([
            "reproduce",
            "--tiny",
            "--quiet",
            "--only",
            "e1,e2",
            "--fail",
            "e2-exp",
            "--out",
        ])
        .arg(&bad)
        .output()
        .unwrap();
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("1 experiment(s) failed"));
    let v = json(&bad.join("results.json"));
    for e in v["experiments"].as_array().unwrap() {
        let failed = e["name"] == "e2-exp";
        assert_eq!(e["status"], if failed { "failed" } else { "done" });
        assert_eq!(
            bad.join(e["name"].as_str().unwrap())
                .join("result.json")
                .exists(),
            !failed
        );
    }
    let html = std::fs::read_to_string(bad.join("report.html")).unwrap();
    assert!(html.contains("forced failure"));
}

/// `sagd em` at a small cost: one M-step, a small surface.
fn em_small(out: &std::path::Path, extra: &[&str]) -> std::process::Output {
    sagd()
        .args(["em", "--quiet", "--msteps", "1", "--surface", "4", "--out"])
        .arg(out)
        .args(extra)
        .output()
        .unwrap()
}

#[test]
fn a_checkpoint_of_another_problem_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("em");
    let o = em_small(&out, &["--checkpoint-every", "30"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let data = dir.path().join("x.csv");
    std::fs::write(&data, "x\n1.5\n2.5\n7.0\n").unwrap();
    let other_data = dir.path().join("y.csv");
    std::fs::write(&other_data, "x\n1.5\n2.5\n7.5\n").unwrap();
    for extra in [
        &["--seed", "2"][..],
        &["--n", "50"],
        &["--a-true", "1.5"],
        &["--a0", "0.5"],
        &["--T", "50"],
    ] {
        let o = em_small(&out, &[&["--resume"][..], extra].concat());
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(
            !o.status.success() && err.contains("other settings or data"),
            "{extra:?}: {err}"
        );
    }
    // Data from a file: a checkpoint of other data with as many points is refused too.
    let with = |f: &std::path::Path, resume: bool| {
        let mut a = vec!["--data", f.to_str().unwrap()];
        a.extend(["--checkpoint-every", "30"]);
        if resume {
            a.push("--resume");
        }
        em_small(&dir.path().join("fit"), &a)
    };
    assert!(with(&data, false).status.success());
    assert!(with(&data, true).status.success());
    let o = with(&other_data, true);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("(differing: data)"), "{err}");
    let o = em_small(&out, &["--resume", "--T", "50"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("(differing: EM settings)"), "{err}");
}

#[test]
fn a_failed_run_keeps_the_complete_earlier_result() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("em");
    // A temporary checkpoint that a killed run left is removed by the next checkpoint.
    std::fs::create_dir_all(&out).unwrap();
    let leftover = out.join("em.ckpt.tmp-4194000");
    std::fs::write(&leftover, [0u8; 100]).unwrap();
    assert!(em_small(&out, &["--checkpoint-every", "30"])
        .status
        .success());
    assert!(
        !leftover.exists(),
        "a dead run's temporary checkpoint stayed"
    );
    let before = std::fs::read(out.join("result.json")).unwrap();
    // A damaged checkpoint fails the run after it has started writing.
    let ck = out.join("em.ckpt");
    let mut bytes = std::fs::read(&ck).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0x01;
    std::fs::write(&ck, &bytes).unwrap();
    let o = em_small(&out, &["--resume"]);
    assert!(String::from_utf8_lossy(&o.stderr).contains("checksum"));
    assert_eq!(std::fs::read(out.join("result.json")).unwrap(), before);
    assert!(out.join("figure1a.png").exists());
    // Staging folders and lock temporaries of dead runs are removed by the next run, and
    // nothing else is left but the folder's mark of the command whose result it holds.
    std::fs::create_dir(out.join(".staging-4194000")).unwrap();
    std::fs::write(out.join(".sagd.lock.new-4194000"), "pid 4194000").unwrap();
    assert!(em_small(&out, &[]).status.success());
    let left: Vec<String> = std::fs::read_dir(&out)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().to_string())
        .filter(|n| n.starts_with('.') && n != ".sagd-command")
        .collect();
    assert!(left.is_empty(), "{left:?}");
}

#[test]
fn a_killed_run_leaves_the_earlier_result_and_the_next_run_cleans_up() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("deb");
    let args = ["debias", "--quiet", "--n", "300", "--m", "2000", "--out"];
    let o = sagd()
        .args(args)
        .arg(&out)
        .args(["--pretrain-epochs", "20", "--finetune-epochs", "2"])
        .output()
        .unwrap();
    assert!(o.status.success());
    let before = std::fs::read(out.join("result.json")).unwrap();
    let mut child = sagd().args(args).arg(&out).spawn().unwrap();
    let staging = out.join(format!(".staging-{}", child.id()));
    let t0 = std::time::Instant::now();
    while !staging.exists() && t0.elapsed().as_secs() < 60 {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(staging.exists(), "the run never started");
    assert_eq!(std::fs::read(out.join("result.json")).unwrap(), before);
    // A second run into the folder while a live run holds it is refused, saying how to clear it.
    let mut holder = sagd().args(args).arg(&out).spawn().unwrap();
    let held = out.join(format!(".staging-{}", holder.id()));
    let t0 = std::time::Instant::now();
    while !held.exists() && t0.elapsed().as_secs() < 60 {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let o = sagd().args(args).arg(&out).output().unwrap();
    holder.kill().unwrap();
    holder.wait().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success() && err.contains("another sagd run") && err.contains(".sagd.lock"),
        "{err}"
    );
    // Locks no live run holds do not block: the killed run's, one naming a live process that is
    // not that run (process 1, as after a reboot), and an older sagd's bare process id.
    for stale in [
        None,
        Some("pid 1 start 0 boot x".to_string()),
        Some("1".to_string()),
    ] {
        if let Some(text) = &stale {
            std::fs::write(out.join(".sagd.lock"), text).unwrap();
        }
        let o = sagd()
            .args(args)
            .arg(&out)
            .args(["--pretrain-epochs", "20", "--finetune-epochs", "2"])
            .output()
            .unwrap();
        assert!(
            o.status.success(),
            "{stale:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        assert!(!staging.exists() && !held.exists() && !out.join(".sagd.lock").exists());
    }
}

#[test]
fn a_diverging_em_ends_quickly_and_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let t0 = std::time::Instant::now();
    let o = em_small(&dir.path().join("a"), &["--alpha", "1e4"]);
    assert!(t0.elapsed().as_secs() < 60);
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(
        text.contains("WARNING") && text.contains("learning rate"),
        "{text}"
    );
    let v = json(&dir.path().join("a/result.json"));
    assert!(!v["warnings"].as_array().unwrap().is_empty());
    // Silent misreads and absurd settings are refused.
    let comma = dir.path().join("comma.csv");
    std::fs::write(&comma, "x\n6,172\n5,3\n").unwrap();
    let o = em_small(&dir.path().join("c"), &["--data", comma.to_str().unwrap()]);
    assert!(String::from_utf8_lossy(&o.stderr).contains("decimal comma"));
    let o = sagd().args(["--threads", "100000", "em"]).output().unwrap();
    assert!(String::from_utf8_lossy(&o.stderr).contains("and at most"));
    let o = sagd()
        .args(["debias", "--quiet", "--hmc-k", "0"])
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&o.stderr).contains("hmc transitions"));
}

#[test]
fn piped_output_shows_progress_lines() {
    let dir = tempfile::tempdir().unwrap();
    let o = sagd()
        .env("SAGD_PROGRESS_EVERY_MS", "100")
        .args([
            "debias",
            "--n",
            "300",
            "--m",
            "2000",
            "--pretrain-epochs",
            "600",
            "--finetune-epochs",
            "60",
            "--out",
        ])
        .arg(dir.path().join("d"))
        .output()
        .unwrap();
    assert!(o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    let lines: Vec<&str> = err
        .lines()
        .filter(|l| l.contains("% done, elapsed"))
        .collect();
    assert!(lines.len() >= 2, "{err}");
    assert!(lines.iter().all(|l| l.contains("eta")), "{err}");
}

#[test]
fn far_from_the_mle_and_extreme_data_are_named() {
    let dir = tempfile::tempdir().unwrap();
    // α = 20 overshoots: the end is outside the MLE's 99% likelihood-ratio region, and says so.
    let o = sagd()
        .args(["em", "--quiet", "--surface", "4", "--alpha", "20", "--out"])
        .arg(dir.path().join("a"))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(text.contains("far from the maximum"), "{text}");
    // The paper's settings end well inside it.
    let o = sagd()
        .args(["em", "--quiet", "--surface", "4", "--out"])
        .arg(dir.path().join("b"))
        .output()
        .unwrap();
    assert!(!String::from_utf8_lossy(&o.stdout).contains("WARNING"));
    // An observation of 1e4 among values of order 1: refused by its number, not a blind failure.
    let f = dir.path().join("x.csv");
    let mut text = String::from("x\n");
    for i in 0..200 {
        text += &format!("{}\n", if i == 17 { 1e4 } else { (i % 7) as f64 * 0.3 });
    }
    std::fs::write(&f, text).unwrap();
    let o = sagd()
        .args([
            "debias",
            "--quiet",
            "--m",
            "2000",
            "--noise-sd",
            "1",
            "--data",
        ])
        .arg(&f)
        .arg("--out")
        .arg(dir.path().join("c"))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success() && err.contains("observation 18 = 10000"),
        "{err}"
    );
    // E1's model: values so large that ℓ is flat in floating point are refused by their number,
    // with the data (not the learning rate) named as the cause.
    for huge in ["1e100", "1e308"] {
        let mut text = String::from("x\n");
        for i in 0..50 {
            text += &if i == 9 {
                format!("{huge}\n")
            } else {
                format!("{}\n", 1.0 + (i % 5) as f64)
            };
        }
        std::fs::write(&f, text).unwrap();
        let out = dir.path().join(format!("em-{huge}"));
        let o = em_on_data(&f, &out);
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(
            !o.status.success()
                && err.contains(&format!("observation 10 = {huge}"))
                && err.contains("rescale"),
            "{huge}: {err}"
        );
        assert!(!out.join("result.json").exists());
    }
}

/// `sagd mnist` on a few hundred images, into `out`.
fn mnist_small(out: &std::path::Path, extra: &[&str]) -> std::process::Output {
    sagd()
        .args(MNIST_SMALL)
        .arg("--out")
        .arg(out)
        .args(extra)
        .output()
        .unwrap()
}

#[test]
fn mnist_writes_its_result_and_figures_and_resumes() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("mnist");
    let o = mnist_small(&out, &[]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(text.contains("VAE epochs (paper 500)"), "{text}");
    assert!(text.contains("SAGD − pre-trained"), "{text}");
    for f in ["figure3.png", "figure3.svg", "curves.png", "curves.svg"] {
        assert!(std::fs::metadata(out.join(f)).unwrap().len() > 1000, "{f}");
    }
    let v = json(&out.join("result.json"));
    assert_eq!(v["evaluations"].as_array().unwrap().len(), 3);
    assert_eq!(v["differences"].as_array().unwrap().len(), 3);
    assert_eq!(v["curves"][1]["loss"].as_array().unwrap().len(), 2);

    // Interrupted after one update of each phase, then resumed: the same held-out numbers and
    // curves.
    let out2 = dir.path().join("resumed");
    let cache = dir.path().join("cache2");
    let cache = cache.to_str().unwrap();
    let o = mnist_small(
        &out2,
        &[
            "--checkpoint-every",
            "1",
            "--interrupt-after",
            "1",
            "--pretrained-cache",
            cache,
        ],
    );
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("--resume"));
    let mut runs = 0;
    loop {
        let o = mnist_small(
            &out2,
            &[
                "--resume",
                "--interrupt-after",
                "1",
                "--pretrained-cache",
                cache,
            ],
        );
        if o.status.success() {
            break;
        }
        runs += 1;
        assert!(runs < 8, "{}", String::from_utf8_lossy(&o.stderr));
    }
    let w = json(&out2.join("result.json"));
    assert_eq!(w["evaluations"], v["evaluations"]);
    assert_eq!(w["differences"], v["differences"]);
    // The learning curves too, from each phase's first update: the checkpoints carry them.
    assert_eq!(w["curves"], v["curves"]);
}

#[test]
fn mnist_rejects_bad_data_and_settings() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("mnist");
    let missing = dir.path().join("no-such-folder");
    let o = mnist_small(&out, &["--data", missing.to_str().unwrap()]);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("no-such-folder") && err.contains("train-images"),
        "{err}"
    );
    let o = mnist_small(&out, &["--gamma", "0"]);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("gamma") && err.contains("friction"), "{err}");
    // No evaluation would be a table of NaN, no step no SAGD: both refused.
    for (flag, needle) in [("--eval-n", "eval_n"), ("--steps", "steps")] {
        let o = sagd()
            .args(["mnist", "--quiet", flag, "0", "--out"])
            .arg(&out)
            .output()
            .unwrap();
        assert!(!o.status.success(), "{flag} 0 accepted");
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains(&format!("`{needle}`")), "{flag}: {err}");
    }
    assert!(!out.join("result.json").exists());
    // Without a GPU (CI), --device cuda stops before any work, naming the flag.
    let o = mnist_small(&out, &["--device", "cuda"]);
    if !o.status.success() {
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(
            err.contains("--device cuda") && err.contains("CUDA"),
            "{err}"
        );
        assert!(!out.join("result.json").exists());
    }
}

#[test]
fn bench_mnist_times_both_phases_through_the_runner() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("bench.json");
    let o = sagd()
        .args([
            "bench",
            "mnist",
            "--vae-batches",
            "1",
            "--sagd-batches",
            "1",
            "--out",
        ])
        .arg(&out)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v = json(&out);
    let rows = v["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 2);
    for (r, phase) in rows.iter().zip(["vae", "sagd"]) {
        assert_eq!(r["phase"], phase);
        let s = r["s_per_update"].as_f64().unwrap();
        assert!(s > 0.0 && s.is_finite(), "{r}");
        // 300 minibatches of 200 make an epoch (to JSON's parsing precision).
        let epoch = r["s_per_epoch"].as_f64().unwrap();
        assert!((epoch / (s * 300.0) - 1.0).abs() < 1e-12, "{r}");
    }
}

#[test]
fn a_resumed_reproduce_writes_the_curves_of_an_uninterrupted_one() {
    let dir = tempfile::tempdir().unwrap();
    let tiny = |out: &std::path::Path, extra: &[&str]| {
        sagd()
            .args(["reproduce", "--tiny", "--quiet", "--only", "e3", "--out"])
            .arg(out)
            .args(extra)
            .output()
            .unwrap()
    };
    let whole = dir.path().join("whole");
    assert!(tiny(&whole, &[]).status.success());
    // Each training phase stops after one update of each run, until the experiment finishes.
    let part = dir.path().join("part");
    let mut runs = 0;
    while !tiny(&part, &["--interrupt-after", "1"]).status.success() {
        runs += 1;
        assert!(runs < 12, "never finished");
    }
    assert!(runs > 0, "the interruption did not interrupt");
    let curves = |out: &std::path::Path| json(&out.join("e3/result.json"))["curves"].clone();
    assert_eq!(curves(&part), curves(&whole));
    assert_eq!(
        json(&part.join("e3/result.json"))["evaluations"],
        json(&whole.join("e3/result.json"))["evaluations"]
    );
}

#[test]
fn sagd_presets_set_their_schedules_and_flags_override_them() {
    let settings = |extra: &[&str]| -> serde_json::Value {
        let o = sagd()
            .args(["debias", "--dist", "normal", "--print-settings"])
            .args(extra)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        serde_json::from_slice(&o.stdout).unwrap()
    };
    let default = settings(&[]);
    assert_eq!(
        default["method"]["sagd"]["schedule"],
        serde_json::Value::Null
    );
    let t3 = settings(&["--sagd-preset", "theorem3"]);
    let chains = &t3["method"]["sagd"];
    assert_eq!(chains["step_size"], 0.1);
    assert_eq!(chains["schedule"]["decay"], 0.5);
    assert_eq!(chains["schedule"]["growth"], 1.0);
    // HMC keeps the spec's step, not the preset's starting δ.
    assert_eq!(t3["method"]["hmc_step_size"], 0.02);
    let decay = settings(&["--sagd-preset", "decay"]);
    assert_eq!(
        (
            decay["sagd_lr"].as_f64(),
            decay["method"]["sagd_lr_decay"].as_f64()
        ),
        (Some(5e-3), Some(0.5))
    );
    assert_eq!(decay["method"]["sagd"], default["method"]["sagd"]);
    // The default's chains persist (no field: old settings' keys unchanged); refresh's restart
    // every 20 updates, unless a flag says otherwise.
    assert!(default["method"]["sagd"].get("refresh_every").is_none());
    let refresh = settings(&["--sagd-preset", "refresh"]);
    assert_eq!(refresh["method"]["sagd"]["refresh_every"], 20);
    let every5 = settings(&["--sagd-preset", "refresh", "--sagd-refresh-every", "5"]);
    assert_eq!(every5["method"]["sagd"]["refresh_every"], 5);
    // One chain per point unless asked (no field: old settings' keys unchanged).
    assert!(default["method"]["sagd"].get("chains_per_point").is_none());
    let two = settings(&["--sagd-chains-per-point", "2"]);
    assert_eq!(two["method"]["sagd"]["chains_per_point"], 2);
    let refresh2 = settings(&["--sagd-preset", "refresh2"]);
    assert_eq!(
        (
            &refresh2["method"]["sagd"]["chains_per_point"],
            &refresh2["method"]["sagd"]["refresh_every"]
        ),
        (&serde_json::json!(2), &serde_json::json!(20))
    );
    // An explicit flag beats the preset.
    let mine = settings(&[
        "--sagd-preset",
        "theorem3",
        "--sagd-delta",
        "0.05",
        "--sagd-k-growth",
        "0",
    ]);
    assert_eq!(mine["method"]["sagd"]["step_size"], 0.05);
    assert_eq!(mine["method"]["sagd"]["schedule"]["growth"], 0.0);
    // Exponents that would grow δ or shrink K are refused by name.
    let o = sagd()
        .args([
            "debias",
            "--dist",
            "normal",
            "--methods",
            "sagd",
            "--reps",
            "1",
            "--n",
            "50",
        ])
        .args([
            "--pretrain-epochs",
            "1",
            "--finetune-epochs",
            "1",
            "--sagd-delta-decay",
            "-1",
        ])
        .arg("--out")
        .arg(tempfile::tempdir().unwrap().path())
        .output()
        .unwrap();
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("sagd schedule"));
}

/// Launched as one of several processes (as mpirun would), a binary built without MPI refuses
/// rather than run the whole job once per process.
#[cfg(not(feature = "mpi"))]
#[test]
fn a_binary_without_mpi_refuses_a_launch_on_several_processes() {
    let dir = tempfile::tempdir().unwrap();
    let o = sagd()
        .env("OMPI_COMM_WORLD_SIZE", "4")
        .args(["em", "--quiet", "--out"])
        .arg(dir.path().join("out"))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "{err}");
    assert!(
        err.contains("one of 4 processes") && err.contains("--features mpi"),
        "{err}"
    );
    assert!(!dir.path().join("out").exists());
}
