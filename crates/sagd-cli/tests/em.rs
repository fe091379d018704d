//! `sagd em` as a user runs it: E1's result and figures, checkpoints, a user's data, bad input, and
//! the output folder kept whole when a run fails.

mod common;
use common::{json, refused, sagd, succeeded};

#[test]
fn em_writes_its_result_and_figures() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("em");
    let o = succeeded(
        sagd()
            .args(["em", "--quiet", "--surface", "12", "--out"])
            .arg(&out),
    );
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
    succeeded(sagd().args(args).arg(&out).arg("--resume"));
    let second = json(&out.join("result.json"));
    assert_eq!(first["sagd"], second["sagd"]);
    let err = refused(
        sagd()
            .args(["em", "--quiet", "--resume", "--out"])
            .arg(dir.path().join("none")),
    );
    assert!(err.contains("no checkpoint"));
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
    assert_eq!(v["mle"]["unbounded"], false, "{}", v["mle"]);
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
fn data_beyond_the_models_mean_are_told_they_have_no_mle() {
    // Every x above e^ψ(10) ≈ 9.5: each Gamma density rises with its shape up to the bound 10,
    // so ℓ rises toward a → +∞ and has no maximum.
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("large.csv");
    let rows: String = (0..30)
        .map(|i| format!("{}\n", 12.0 + 0.27 * i as f64))
        .collect();
    std::fs::write(&data, format!("x\n{rows}")).unwrap();
    let out = dir.path().join("fit");
    let o = sagd()
        .args(["em", "--quiet", "--fit-only", "--max-msteps", "4", "--data"])
        .arg(&data)
        .arg("--out")
        .arg(&out)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let said = String::from_utf8_lossy(&o.stdout);
    assert!(
        said.contains("no MLE") && said.contains("WARNING: ℓ has no maximum at a finite θ"),
        "{said}"
    );
    let v = json(&out.join("result.json"));
    assert_eq!(v["mle"]["unbounded"], true, "{}", v["mle"]);
    assert!(v["warnings"][0]
        .as_str()
        .unwrap()
        .contains("rescale the data"));
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
        refused(
            sagd()
                .args(["em", "--quiet", "--column", col, "--data"])
                .arg(&good)
                .arg("--out")
                .arg(dir.path().join("c")),
        )
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
