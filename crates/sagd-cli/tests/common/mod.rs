//! What the binary's test files share.
#![allow(dead_code)]

use std::path::Path;
use std::process::{Command, Output};

/// The binary under test.
pub fn sagd() -> Command {
    Command::new(env!("CARGO_BIN_EXE_sagd"))
}

/// The standard error of a run that must have failed (its output shown if it did not).
pub fn failed(o: &Output) -> String {
    assert!(
        !o.status.success(),
        "the run should have failed; it printed {}",
        String::from_utf8_lossy(&o.stdout)
    );
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Runs `command`, which must succeed (its standard error shown if it did not), and gives its
/// output.
pub fn succeeded(command: &mut Command) -> Output {
    let o = command.output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    o
}

/// `sagd glmm ARGS --data DATA --out OUT`.
fn glmm_command(args: &[&str], data: &Path, out: &Path) -> Command {
    let mut command = sagd();
    command.arg("glmm").args(args).arg("--data").arg(data);
    command.arg("--out").arg(out);
    command
}

/// Runs `sagd glmm ARGS --data DATA --out OUT --quiet`, which must succeed, and gives its output.
pub fn glmm(args: &[&str], data: &Path, out: &Path) -> Output {
    succeeded(glmm_command(args, data, out).arg("--quiet"))
}

/// Runs `sagd glmm ARGS --data DATA --out OUT`, which must fail, and gives its standard error.
pub fn glmm_refused(args: &[&str], data: &Path, out: &Path) -> String {
    refused(&mut glmm_command(args, data, out))
}

/// Runs `command`, which must fail, and gives its standard error.
pub fn refused(command: &mut Command) -> String {
    failed(&command.output().unwrap())
}

/// A short E2 replication whose checkpoints fall mid fine-tuning (`--interrupt-after 13` with
/// `--checkpoint-every 4`); the output folder follows.
pub const E2_SHORT: [&str; 13] = [
    "debias",
    "--dist",
    "exp",
    "--quiet",
    "--n",
    "200",
    "--pretrain-epochs",
    "40",
    "--finetune-epochs",
    "30",
    "--m",
    "2000",
    "--out",
];

/// `sagd mnist` on 300 images, 4 latent dimensions, two chains of two steps, 10 test images:
/// every phase and file of E3 in seconds (the output folder follows `--out`).
pub const MNIST_SMALL: [&str; 20] = [
    "mnist",
    "--train-n",
    "300",
    "--batch-size",
    "100",
    "--latent",
    "4",
    "--vae-epochs",
    "1",
    "--sagd-updates",
    "2",
    "--chains",
    "2",
    "--steps",
    "2",
    "--eval-n",
    "10",
    "--eval-k",
    "20",
    "--quiet",
];

/// A JSON file, parsed.
pub fn json(path: &std::path::Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// `result.json` without what differs between any two runs (wall times, the command line).
pub fn without_timings(mut v: serde_json::Value) -> serde_json::Value {
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

/// Copies a folder and its subfolders.
pub fn copy_dir(from: &std::path::Path, to: &std::path::Path) {
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
