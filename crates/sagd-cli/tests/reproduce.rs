//! `sagd reproduce` as a user runs it: one report that survives a failing experiment, Ctrl-C and
//! resuming, the estimate of a resumed run.

mod common;
use common::{json, refused, sagd, succeeded};

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
fn a_resumed_reproduce_says_its_estimate_counts_the_interrupted_work_whole() {
    // An experiment left with checkpoints by an interrupted run: the plan cannot tell how far it
    // got, and the printed estimate says it is an upper bound.
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("rep");
    std::fs::create_dir_all(out.join("e1").join("checkpoints")).unwrap();
    let o = succeeded(
        sagd()
            .args(["reproduce", "--tiny", "--only", "e1", "--out"])
            .arg(&out),
    );
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
    succeeded(
        sagd()
            .args(["reproduce", "--tiny", "--quiet", "--out"])
            .arg(&out),
    );
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
    let err = refused(
        sagd()
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
            .arg(&bad),
    );
    assert!(err.contains("1 experiment(s) failed"));
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
