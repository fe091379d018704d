//! The binary as a user runs it, across its commands: benchmarks, flags, progress on a pipe, the
//! pre-trained cache, a launch on several processes. Each command has its own file (`em.rs`,
//! `debias.rs`, `mnist.rs`, `reproduce.rs`, `glmm.rs`).

mod common;
use common::{refused, sagd, succeeded};

#[test]
fn bench_kernel_prints_a_json_table() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("kernel.json");
    let o = succeeded(
        sagd()
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
            .arg(&out),
    );
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
    let err = refused(sagd().args(["bench", "kernel", "--schemes", "verlet"]));
    assert!(
        err.contains("unknown scheme `verlet`") && err.contains("euler, obabo, baoab, ubu"),
        "{err}"
    );
    let err = refused(sagd().args(["--threads", "0", "bench", "kernel"]));
    assert!(err.contains("--threads must be at least 1"));
    // A chain too large for any machine's memory is refused before the allocator meets it.
    let err = refused(sagd().args(["bench", "kernel", "--dims", "100000000000000"]));
    assert!(
        err.contains("`--dims`") && err.contains("more than this machine"),
        "{err}"
    );
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
        let err = refused(sagd().args(args));
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

#[test]
fn an_error_names_its_cause_once() {
    // The IDX reader's error shows the file's I/O error, which is also its source.
    let dir = tempfile::tempdir().unwrap();
    let err = refused(sagd().arg("mnist").arg("--data").arg(dir.path()));
    assert_eq!(err.matches("No such file or directory").count(), 1, "{err}");
    assert!(err.contains("train-images-idx3-ubyte"), "{err}");
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
