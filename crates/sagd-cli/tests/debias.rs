//! `sagd debias` as a user runs it: Table 1's row and Figure 2, a user's data deconvolved, bad
//! input, the high-dimensional case, the pre-trained cache, resumed fine-tuning, the presets, and
//! the output folder kept whole when a run is killed (and its lock).

mod common;
use common::{copy_dir, json, refused, sagd, succeeded, without_timings, E2_SHORT};

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
    succeeded(
        sagd()
            .args(["debias", "--dist", "normal"])
            .args(SMALL)
            .arg("2")
            .arg("--out")
            .arg(&out),
    );
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
    let o = succeeded(
        sagd()
            .args(["debias", "--methods", "vae,sagd", "--noise-sd", "1"])
            .args(&SMALL[..6])
            .arg("--data")
            .arg(&csv)
            .arg("--out")
            .arg(&out),
    );
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
    let err = refused(
        sagd()
            .args(["debias", "--quiet", "--noise-sd", "1", "--data"])
            .arg(&bad)
            .arg("--out")
            .arg(&out),
    );
    assert!(err.contains("line 2"));
    assert!(!out.join("result.json").exists());
    // The noise's sd is the user's to state: not taken as 1 in silence, and not taken without
    // data. Nothing is written either way.
    let good = dir.path().join("good.csv");
    std::fs::write(&good, "1.0\n2.0\n0.5\n").unwrap();
    let err = refused(
        sagd()
            .args(["debias", "--quiet", "--data"])
            .arg(&good)
            .arg("--out")
            .arg(&out),
    );
    assert!(err.contains("--data needs --noise-sd"), "{err}");
    assert!(!out.exists());
    let err = refused(sagd().args(["debias", "--quiet", "--noise-sd", "0.5"]));
    assert!(err.contains("--data"));
}

#[test]
fn debias_runs_the_high_dimensional_case_with_minibatches() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("hd");
    let o = succeeded(
        sagd()
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
            .arg(&out),
    );
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
        succeeded(
            sagd()
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
                .arg(&out),
        );
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

#[test]
fn debias_interrupted_mid_fine_tuning_resumes_to_the_same_result() {
    let dir = tempfile::tempdir().unwrap();
    // SAGD's tail average, HMC's acceptance record, IWAE's stream and a trace all cross the
    // interruption.
    let mut args = E2_SHORT.to_vec();
    args.splice(12..12, ["--trace-every", "10"]);
    let whole = dir.path().join("whole");
    succeeded(sagd().args(&args).arg(&whole));

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
    succeeded(
        sagd()
            .args(&args)
            .arg(&other)
            .args(["--resume", "--seed", "3"]),
    );
    succeeded(
        sagd()
            .args(&args)
            .arg(&part)
            .args(["--checkpoint-every", "4", "--resume"]),
    );
    assert_eq!(
        without_timings(json(&part.join("result.json"))),
        without_timings(json(&whole.join("result.json")))
    );
    assert!(
        !part.join("checkpoints").exists(),
        "the finished run left its checkpoints"
    );
}

#[test]
fn sagd_presets_set_their_schedules_and_flags_override_them() {
    let settings = |extra: &[&str]| -> serde_json::Value {
        let o = succeeded(
            sagd()
                .args(["debias", "--dist", "normal", "--print-settings"])
                .args(extra),
        );
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
    let err = refused(
        sagd()
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
            .arg(tempfile::tempdir().unwrap().path()),
    );
    assert!(err.contains("sagd schedule"));
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
    let staging = staging_of(&child, &out);
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(staging.exists(), "the run never started");
    assert_eq!(std::fs::read(out.join("result.json")).unwrap(), before);
    // A second run into the folder while a live run holds it is refused, saying how to clear it.
    let mut holder = sagd().args(args).arg(&out).spawn().unwrap();
    let held = staging_of(&holder, &out);
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

/// The staging folder of the run `child` writing into `out`, once it exists (at most a minute).
fn staging_of(child: &std::process::Child, out: &std::path::Path) -> std::path::PathBuf {
    let staging = out.join(format!(".staging-{}", child.id()));
    let t0 = std::time::Instant::now();
    while !staging.exists() && t0.elapsed().as_secs() < 60 {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    staging
}
