//! The binary split over MPI processes (`cargo test --release -p sagd-cli --features mpi --test
//! mpi`; needs `mpirun`): the same result as the plain binary on 1, 2 and 3 processes (E1, E2,
//! deconvolution, E3), one clear error when the input is bad, the whole job ended within seconds
//! when a process is killed, and a checkpoint written by 2 processes resumed on 3 (E2, E3).
#![cfg(feature = "mpi")]

use std::path::Path;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use serde_json::Value;

mod common;
use common::{sagd, E2_SHORT as E2, MNIST_SMALL};

/// One test's jobs at a time: Open MPI 4.1's launchers started side by side by parallel tests
/// sometimes fail in their own runtime ("ORTE_ERROR_LOG: Data unpack would read past end of
/// buffer"), before sagd runs.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner())
}

/// `sagd` on `np` processes, one thread each (2-core CI machines run 3 of them).
fn mpirun(np: usize) -> Command {
    let mut c = Command::new("mpirun");
    c.args(["--allow-run-as-root", "--oversubscribe", "-np"])
        .arg(np.to_string())
        .arg(env!("CARGO_BIN_EXE_sagd"))
        .args(["--threads", "1"]);
    c
}

fn ok(o: Output) -> Output {
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    o
}

/// A result file without what differs between runs by construction: timings and the flags
/// (which name the output folder).
fn result(dir: &Path) -> Value {
    fn strip(v: &mut Value) {
        match v {
            Value::Object(m) => {
                m.retain(|k, _| {
                    !(k == "flags"
                        || k.ends_with("time_s")
                        || k == "timing_s"
                        || k == "total_s"
                        || k == "exchanged"
                        || k == "processes")
                });
                m.values_mut().for_each(strip);
            }
            Value::Array(a) => a.iter_mut().for_each(strip),
            _ => {}
        }
    }
    let text = std::fs::read_to_string(dir.join("result.json")).unwrap();
    let mut v: Value = serde_json::from_str(&text).unwrap();
    strip(&mut v);
    v
}

/// 300 observations of E1's model at θ = (0.5, 1).
fn em_data(dir: &Path) -> std::path::PathBuf {
    let (model, _) = sagd_apps::e1::GammaSigmoid::simulate(300, 0.5, 1.0, 4).unwrap();
    let mut csv = String::from("x\n");
    for v in model.data() {
        csv.push_str(&format!("{v:.17e}\n"));
    }
    let path = dir.join("x.csv");
    std::fs::write(&path, csv).unwrap();
    path
}

const EM: [&str; 5] = ["em", "--quiet", "--surface", "12", "--data"];

#[test]
fn em_on_1_2_and_3_processes_gives_the_plain_binarys_result() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let data = em_data(dir.path());
    let plain = dir.path().join("plain");
    ok(sagd()
        .args(EM)
        .arg(&data)
        .arg("--out")
        .arg(&plain)
        .output()
        .unwrap());
    let want = result(&plain);
    assert!(
        want["sagd"].is_object() && want["polished"].is_object(),
        "{want}"
    );
    for np in [1, 2, 3] {
        let out = dir.path().join(format!("np{np}"));
        let o = ok(mpirun(np)
            .args(EM)
            .arg(&data)
            .arg("--out")
            .arg(&out)
            .output()
            .unwrap());
        assert_eq!(result(&out), want, "{np} processes");
        for f in ["figure1a.svg", "figure1b.svg"] {
            assert_eq!(
                std::fs::read(out.join(f)).unwrap(),
                std::fs::read(plain.join(f)).unwrap(),
                "{f}, {np} processes"
            );
        }
        if np > 1 {
            // Each process reports what it exchanged; the others print nothing else.
            let err = String::from_utf8_lossy(&o.stderr);
            assert!(err.contains(&format!("process 1 of {np}: ")), "{err}");
            assert_eq!(
                String::from_utf8_lossy(&o.stdout).matches("wrote ").count(),
                1
            );
        }
    }
}

#[test]
fn e2_on_1_2_and_3_processes_gives_the_plain_binarys_result() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let plain = dir.path().join("plain");
    ok(sagd()
        .args(E2)
        .arg(&plain)
        .args(["--reps", "2"])
        .output()
        .unwrap());
    let want = result(&plain);
    assert_eq!(want["replications"].as_array().unwrap().len(), 2);
    // 2 replications on 1 and 2 processes: replications split; on 3: each replication's
    // methods split.
    for np in [1, 2, 3] {
        let out = dir.path().join(format!("np{np}"));
        ok(mpirun(np)
            .args(E2)
            .arg(&out)
            .args(["--reps", "2"])
            .output()
            .unwrap());
        assert_eq!(result(&out), want, "{np} processes");
        assert_eq!(
            std::fs::read(out.join("figure2.svg")).unwrap(),
            std::fs::read(plain.join("figure2.svg")).unwrap(),
            "{np} processes"
        );
    }
}

#[test]
fn a_checkpoint_written_by_2_processes_resumes_on_3() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let whole = dir.path().join("whole");
    ok(sagd()
        .args(E2)
        .arg(&whole)
        .args(["--reps", "2"])
        .output()
        .unwrap());
    let part = dir.path().join("part");
    let o = mpirun(2)
        .args(E2)
        .arg(&part)
        .args([
            "--reps",
            "2",
            "--checkpoint-every",
            "4",
            "--interrupt-after",
            "13",
        ])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success() && err.contains("--resume"), "{err}");
    assert!(!part.join("result.json").exists());
    // Each replication's phases were checkpointed by the process that ran it.
    for rep in [0, 1] {
        assert!(
            part.join(format!("checkpoints/rep{rep}-pretrain.ckpt"))
                .exists(),
            "rep {rep}"
        );
    }
    ok(mpirun(3)
        .args(E2)
        .arg(&part)
        .args(["--reps", "2", "--checkpoint-every", "4", "--resume"])
        .output()
        .unwrap());
    assert_eq!(result(&part), result(&whole));
}

#[test]
fn bad_input_on_several_processes_is_one_clear_error() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let t0 = Instant::now();
    let o = mpirun(2)
        .args(["em", "--quiet", "--data"])
        .arg(dir.path().join("missing.csv"))
        .arg("--out")
        .arg(dir.path().join("out"))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "{err}");
    assert!(
        err.contains("error (process 0 of 2)") && err.contains("missing.csv"),
        "{err}"
    );
    assert!(t0.elapsed() < Duration::from_secs(20), "{:?}", t0.elapsed());
}

/// The process of rank `rank` among the children whose command line contains `tag`.
fn pid_of_rank(tag: &str, rank: usize) -> Option<u32> {
    for e in std::fs::read_dir("/proc").ok()?.flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let cmd = std::fs::read(e.path().join("cmdline")).unwrap_or_default();
        if !String::from_utf8_lossy(&cmd).contains(tag) {
            continue;
        }
        let env = std::fs::read(e.path().join("environ")).unwrap_or_default();
        let want = format!("OMPI_COMM_WORLD_RANK={rank}");
        if env.split(|&b| b == 0).any(|v| v == want.as_bytes()) {
            return Some(pid);
        }
    }
    None
}

#[test]
fn a_killed_process_ends_the_job_within_seconds_naming_its_rank() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let data = em_data(dir.path());
    let out = dir.path().join("killed-run");
    let mut job = mpirun(2)
        .args(["em", "--quiet", "--msteps", "400", "--data"])
        .arg(&data)
        .arg("--out")
        .arg(&out)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let tag = out.to_string_lossy().to_string();
    let t0 = Instant::now();
    let pid = loop {
        if let Some(p) = pid_of_rank(&tag, 1) {
            break p;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "rank 1 never started"
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    // Well into the run: both processes are exchanging.
    std::thread::sleep(Duration::from_secs(2));
    assert!(
        job.try_wait().unwrap().is_none(),
        "the run ended before the kill"
    );
    let killed = Instant::now();
    Command::new("kill")
        .args(["-9", &pid.to_string()])
        .status()
        .unwrap();
    let status = loop {
        if let Some(s) = job.try_wait().unwrap() {
            break s;
        }
        assert!(
            killed.elapsed() < Duration::from_secs(20),
            "the job outlived its killed process by 20 s"
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    let mut err = String::new();
    std::io::Read::read_to_string(&mut job.stderr.take().unwrap(), &mut err).unwrap();
    assert!(!status.success());
    assert!(err.contains("rank 1") && err.contains("signal 9"), "{err}");
    eprintln!("the job ended {:?} after the kill", killed.elapsed());
    assert!(!out.join("result.json").exists());
}

#[test]
fn deconvolution_on_3_processes_gives_the_plain_binarys_result() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    // X = Z + N(0, 1) with Z exponential, 300 points, written with a simple generator.
    let mut state = 0x2545_f491_4f6c_dd1du64;
    let mut uniform = || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        (state >> 11) as f64 / (1u64 << 53) as f64
    };
    let mut csv = String::from("x\n");
    for _ in 0..300 {
        let z = -(1.0 - uniform()).ln();
        let noise =
            (-2.0 * (1.0 - uniform()).ln()).sqrt() * (std::f64::consts::TAU * uniform()).cos();
        csv.push_str(&format!("{:.17e}\n", z + noise));
    }
    let data = dir.path().join("x.csv");
    std::fs::write(&data, csv).unwrap();
    let args = [
        "debias",
        "--quiet",
        "--noise-sd",
        "1",
        "--pretrain-iters",
        "40",
        "--finetune-iters",
        "4",
    ];
    let plain = dir.path().join("plain");
    ok(sagd()
        .args(args)
        .arg("--data")
        .arg(&data)
        .arg("--out")
        .arg(&plain)
        .output()
        .unwrap());
    let split = dir.path().join("split");
    ok(mpirun(3)
        .args(args)
        .arg("--data")
        .arg(&data)
        .arg("--out")
        .arg(&split)
        .output()
        .unwrap());
    let want = result(&plain);
    assert!(want["held_out"].is_object(), "{want}");
    assert_eq!(result(&split), want);
    for f in ["latent_samples.csv", "density.svg", "predictive.svg"] {
        assert_eq!(
            std::fs::read(split.join(f)).unwrap(),
            std::fs::read(plain.join(f)).unwrap(),
            "{f}"
        );
    }
}

#[test]
fn mnist_on_1_2_and_3_processes_gives_the_plain_binarys_result_and_resumes() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    // Each run its own pre-training cache: a shared one would skip the VAE's split passes.
    let run = |mut c: Command, name: &str, extra: &[&str]| {
        let out = dir.path().join(name);
        let o = c
            .args(MNIST_SMALL)
            .arg("--out")
            .arg(&out)
            .arg("--pretrained-cache")
            .arg(dir.path().join(format!("cache-{name}")))
            .args(extra)
            .output()
            .unwrap();
        (out, o)
    };
    let (plain, o) = run(sagd(), "plain", &[]);
    ok(o);
    let want = result(&plain);
    assert_eq!(want["pretrained_cached"], false);
    assert_eq!(want["evaluations"].as_array().unwrap().len(), 3);
    for np in [1, 2, 3] {
        let (out, o) = run(mpirun(np), &format!("np{np}"), &[]);
        ok(o);
        assert_eq!(result(&out), want, "{np} processes");
        assert_eq!(
            std::fs::read(out.join("figure3.svg")).unwrap(),
            std::fs::read(plain.join("figure3.svg")).unwrap(),
            "{np} processes"
        );
    }
    // Interrupted on 2 processes after an update of each phase, resumed on 3.
    let stop = ["--checkpoint-every", "1", "--interrupt-after", "1"];
    let (part, o) = run(mpirun(2), "part", &stop);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success() && err.contains("--resume"), "{err}");
    let mut runs = 0;
    loop {
        let (_, o) = run(mpirun(3), "part", &["--resume", "--interrupt-after", "1"]);
        if o.status.success() {
            break;
        }
        runs += 1;
        assert!(runs < 8, "{}", String::from_utf8_lossy(&o.stderr));
    }
    let mut got = result(&part);
    // The pre-trained networks came from the cache the interrupted run wrote.
    got["pretrained_cached"] = false.into();
    assert_eq!(got, want);
}
