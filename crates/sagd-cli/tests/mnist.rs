//! `sagd mnist` and `sagd bench mnist` as a user runs them: E3's result, figures and resume, bad
//! input, the timed phases.

mod common;
use common::{failed, json, sagd, succeeded, MNIST_SMALL};

/// `sagd mnist` on a few hundred images, into `out` (a flag in `extra` replaces the small run's).
fn mnist_small(out: &std::path::Path, extra: &[&str]) -> std::process::Output {
    let mut small = vec![MNIST_SMALL[0]];
    for pair in MNIST_SMALL[1..MNIST_SMALL.len() - 1].chunks(2) {
        assert!(pair[0].starts_with("--") && !pair[1].starts_with("--"));
        if !extra.contains(&pair[0]) {
            small.extend(pair);
        }
    }
    sagd()
        .args(small)
        .arg("--quiet")
        .arg("--out")
        .arg(out)
        .args(extra)
        .output()
        .unwrap()
}

/// `sagd mnist` with `extra`, checkpointing every update and stopped after each, then resumed
/// until it finishes; the stderr of the first stop.
fn interrupted_and_resumed(out: &std::path::Path, extra: &[&str]) -> String {
    let stop = ["--checkpoint-every", "1", "--interrupt-after", "1"];
    let err = failed(&mnist_small(out, &[&stop[..], extra].concat()));
    let again = ["--resume", "--interrupt-after", "1"];
    let mut runs = 0;
    loop {
        let o = mnist_small(out, &[&again[..], extra].concat());
        if o.status.success() {
            return err;
        }
        runs += 1;
        assert!(runs < 8, "{}", String::from_utf8_lossy(&o.stderr));
    }
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
    let err = interrupted_and_resumed(&out2, &["--pretrained-cache", cache]);
    assert!(err.contains("--resume"));
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
    let err = failed(&mnist_small(&out, &["--data", missing.to_str().unwrap()]));
    assert!(
        err.contains("no-such-folder") && err.contains("train-images"),
        "{err}"
    );
    let err = failed(&mnist_small(&out, &["--gamma", "0"]));
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
fn mnist_runs_every_scheme_on_the_cpu_and_checks_delta_by_the_core_s_rule() {
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("cache");
    let cache = cache.to_str().unwrap();
    for scheme in ["obabo", "ubu"] {
        let out = dir.path().join(scheme);
        let o = mnist_small(&out, &["--scheme", scheme, "--pretrained-cache", cache]);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let v = json(&out.join("result.json"));
        assert_eq!(v["settings"]["chains"]["scheme"], scheme);
        assert_eq!(v["evaluations"].as_array().unwrap().len(), 3);
    }
    // γδ = 1.2: Euler refused, naming the way out (BAOAB).
    let out = dir.path().join("euler");
    let err = failed(&mnist_small(&out, &["--delta", "0.6"]));
    assert!(
        err.contains("gamma*delta < 1") && err.contains("baoab"),
        "{err}"
    );
    assert!(!out.join("result.json").exists());
}

#[test]
fn mnist_takes_the_chain_flags_by_debias_s_names_too() {
    // The same chains said in `sagd debias`'s words (--sagd-…) and in E3's own: the same settings.
    let settings = |flags: &[String]| -> serde_json::Value {
        let o = succeeded(sagd().arg("mnist").args(flags).arg("--print-settings"));
        serde_json::from_slice(&o.stdout).unwrap()
    };
    let values = [
        ("chains", "sagd-chains-per-point", "3"),
        ("steps", "sagd-k", "7"),
        ("scheme", "sagd-scheme", "obabo"),
        ("gamma", "sagd-gamma", "1.5"),
        ("delta", "sagd-delta", "0.02"),
        ("delta-decay", "sagd-delta-decay", "0.5"),
        ("k-growth", "sagd-k-growth", "1"),
        ("refresh-every", "sagd-refresh-every", "4"),
    ];
    // The flags under E3's names (`own`) or debias's.
    let flags = |own: bool| -> Vec<String> {
        values
            .iter()
            .flat_map(|(e3, e2, v)| [format!("--{}", if own { e3 } else { e2 }), v.to_string()])
            .collect()
    };
    let (a, b) = (settings(&flags(true)), settings(&flags(false)));
    assert_eq!(a, b);
    let chains = &a["chains"];
    assert_eq!(chains["scheme"], "obabo");
    assert_eq!(chains["per_image"], 3);
    assert_eq!(chains["refresh_every"], 4);
    assert_ne!(a, settings(&[]), "the flags changed nothing");
}

#[test]
fn a_chain_schedule_takes_its_steps_by_update_and_resumes_where_it_stopped() {
    // Over the 2 refinement updates of K = 5: K_t = 3 then 7 (cost-matched), δ_t = δ, δ/√2. A
    // resumed run must know which update it is at to take the same steps.
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("cache");
    let cache = cache.to_str().unwrap();
    let plan = [
        "--delta-decay",
        "0.5",
        "--k-growth",
        "1",
        "--pretrained-cache",
        cache,
    ];
    let whole = dir.path().join("whole");
    let o = mnist_small(&whole, &plan);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v = json(&whole.join("result.json"));
    assert_eq!(v["settings"]["chains"]["schedule"]["growth"], 1.0);
    let fixed = dir.path().join("fixed");
    assert!(mnist_small(&fixed, &["--pretrained-cache", cache])
        .status
        .success());
    let f = json(&fixed.join("result.json"));
    assert_ne!(
        f["evaluations"], v["evaluations"],
        "the schedule changed nothing"
    );
    let resumed = dir.path().join("resumed");
    interrupted_and_resumed(&resumed, &plan);
    let w = json(&resumed.join("result.json"));
    assert_eq!(w["evaluations"], v["evaluations"]);
    assert_eq!(w["curves"], v["curves"]);
    // Exponents below 0 are refused by name.
    let err = failed(&mnist_small(&dir.path().join("bad"), &["--delta-decay=-1"]));
    assert!(
        err.contains("sagd schedule") && err.contains("≥ 0"),
        "{err}"
    );
}

#[test]
fn persistent_chains_change_the_refinement_and_resume_where_they_stopped() {
    // 6 refinement updates over 3 minibatches: each image's chains visited twice, the second
    // visit continuing the first's (--refresh-every 2). A resumed run must restore every
    // image's chains to take the same updates.
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("cache");
    let cache = cache.to_str().unwrap();
    let base = ["--sagd-updates", "6", "--pretrained-cache", cache];
    let plan = [&base[..], &["--refresh-every", "2"]].concat();
    let whole = dir.path().join("whole");
    let o = mnist_small(&whole, &plan);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v = json(&whole.join("result.json"));
    assert_eq!(v["settings"]["chains"]["refresh_every"], 2);
    let fresh = dir.path().join("fresh");
    assert!(mnist_small(&fresh, &base).status.success());
    let f = json(&fresh.join("result.json"));
    // The first visits start from the encoder either way; the second ones differ.
    let (lf, lv) = (&f["curves"][1]["loss"], &v["curves"][1]["loss"]);
    let (lf, lv) = (lf.as_array().unwrap(), lv.as_array().unwrap());
    assert_eq!((lf.len(), &lf[..3]), (6, &lv[..3]));
    assert_ne!(lf[3..], lv[3..]);
    let resumed = dir.path().join("resumed");
    let stop = ["--checkpoint-every", "1", "--interrupt-after", "4"];
    failed(&mnist_small(&resumed, &[&stop[..], &plan].concat()));
    let again = [&["--resume", "--interrupt-after", "4"][..], &plan].concat();
    for runs in 0.. {
        if mnist_small(&resumed, &again).status.success() {
            break;
        }
        assert!(runs < 6, "the resumed run did not finish");
    }
    let w = json(&resumed.join("result.json"));
    assert_eq!(w["evaluations"], v["evaluations"]);
    assert_eq!(w["curves"], v["curves"]);
    // Taken on one GPU's process: where the run fails, it fails for the device (none here),
    // never for the setting. (Refused on GPUs split over processes: tested in sagd-apps.)
    let o = mnist_small(
        &dir.path().join("gpu"),
        &[&plan[..], &["--device", "cuda"]].concat(),
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        o.status.success() || !err.contains("refresh-every"),
        "{err}"
    );
    // 0 refused.
    let err = failed(&mnist_small(
        &dir.path().join("zero"),
        &["--refresh-every", "0"],
    ));
    assert!(
        err.contains("refresh-every") && err.contains("use 1"),
        "{err}"
    );
}

#[test]
fn bench_mnist_times_both_phases_through_the_runner() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("bench.json");
    succeeded(
        sagd()
            .args([
                "bench",
                "mnist",
                "--vae-batches",
                "1",
                "--sagd-batches",
                "1",
                "--out",
            ])
            .arg(&out),
    );
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
