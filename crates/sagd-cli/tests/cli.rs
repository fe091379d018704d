//! The binary as a user runs it.

use std::process::Command;

fn sagd() -> Command {
    Command::new(env!("CARGO_BIN_EXE_sagd"))
}

#[test]
fn bench_kernel_prints_a_json_table() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("kernel.json");
    let o = sagd()
        .args(["bench", "kernel", "--dims", "16,64", "--schemes", "euler,ubu", "--work", "20000", "--repeats", "2", "--out"])
        .arg(&out)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let rows = v["rows"].as_array().unwrap();
    // naive baseline + noise + two schemes, for each of two dimensions.
    assert_eq!(rows.len(), 8);
    assert!(rows.iter().all(|r| r["ns_per_step_dim"].as_f64().unwrap() > 0.0));
    let saved: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
    assert_eq!(saved, v);
}

#[test]
fn bad_flags_fail_with_a_message() {
    let o = sagd().args(["bench", "kernel", "--schemes", "verlet"]).output().unwrap();
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("unknown scheme `verlet`") && err.contains("euler, obabo, baoab, ubu"), "{err}");
    let o = sagd().args(["--threads", "0", "bench", "kernel"]).output().unwrap();
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("--threads must be at least 1"));
}
