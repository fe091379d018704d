//! The docs a newcomer reads first cannot go stale silently: the README's numbers are those of the
//! results files they quote, its timing claims are the plan's and the measured run's, the help
//! texts are this build's, and the screenshot is of the report it claims to show.

use std::path::{Path, PathBuf};
use std::process::Command;

use sha2::{Digest, Sha256};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn read(rel: &str) -> String {
    std::fs::read_to_string(root().join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

fn json(rel: &str) -> serde_json::Value {
    serde_json::from_str(&read(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

fn help(args: &[&str]) -> String {
    let o = Command::new(env!("CARGO_BIN_EXE_sagd"))
        .args(args)
        .output()
        .unwrap();
    assert!(o.status.success());
    String::from_utf8(o.stdout).unwrap()
}

/// The README, with its lines joined: a number and its words may be wrapped across lines.
fn readme() -> String {
    read("README.md")
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
}

fn claims(readme: &str, text: &str) {
    assert!(
        readme.contains(text),
        "the README should say \"{text}\" (what the results file or this build gives)"
    );
}

/// The quick report kept in the repository.
const QUICK: &str = "docs/results/reproduce-quick/results.json";

/// The element of the array `list` whose `field` is `value`.
fn find<'a>(list: &'a serde_json::Value, field: &str, value: &str) -> &'a serde_json::Value {
    list.as_array()
        .unwrap()
        .iter()
        .find(|e| e[field] == value)
        .unwrap_or_else(|| panic!("no element with {field} = {value}"))
}

fn experiment<'a>(r: &'a serde_json::Value, name: &str) -> &'a serde_json::Value {
    find(&r["experiments"], "name", name)
}

fn minutes_seconds(s: f64) -> String {
    let s = s.round() as u64;
    format!("{} min {} s", s / 60, s % 60)
}

#[test]
fn the_readme_is_written_for_users() {
    let text = read("README.md").to_lowercase();
    for word in ["issue", "sitting", "shared/", ".venv"] {
        assert!(!text.contains(word), "the README mentions \"{word}\"");
    }
    // The first screen (about 40 lines) says what it is, how to install, the two commands and
    // what comes out.
    let first: String = read("README.md")
        .lines()
        .take(40)
        .collect::<Vec<_>>()
        .join("\n");
    for must in [
        "minimises F(θ)",
        "**Install.**",
        "cargo run --release -p sagd-cli -- reproduce",
        "cargo test --release --workspace",
        "**What comes out.**",
        "docs/report.png",
    ] {
        assert!(first.contains(must), "first screen lacks {must}");
    }
    // The test command is CI's.
    assert!(read(".ci/run").contains("cargo test --release --workspace"));
}

#[test]
fn help_texts_are_this_builds() {
    let top = help(&["--help"]);
    for c in ["reproduce", "em", "glmm", "debias", "mnist", "bench"] {
        assert!(top.contains(&format!("  {c} ")), "sagd --help lacks {c}");
    }
    for stale in ["once it exists", "still to be built", "ten minutes"] {
        assert!(!top.contains(stale), "sagd --help says \"{stale}\"");
        assert!(!help(&["reproduce", "--help"]).contains(stale));
    }
    // The README's estimate for the quick plan is the one --quick's help computes.
    let h = help(&["reproduce", "--help"]);
    let est = h
        .split("(estimated ")
        .nth(1)
        .and_then(|s| s.split(" min on 2 cores").next())
        .expect("--quick's help gives an estimate for 2 cores");
    claims(
        &readme(),
        &format!("the plan estimates {est} min on 2 cores"),
    );
}

#[test]
fn the_readmes_numbers_are_the_results_files() {
    let text = readme();
    let r = json(QUICK);
    assert_eq!(r["mode"], "quick", "{QUICK} is not a quick report");
    assert_eq!(r["sagd_version"], env!("CARGO_PKG_VERSION"));
    claims(
        &text,
        &format!(
            "run shown below took {} on a 2-core",
            minutes_seconds(r["total_time_s"].as_f64().unwrap())
        ),
    );
    let e1 = &experiment(&r, "e1")["summary"];
    claims(
        &text,
        &format!(
            "SAGD ends {:.3} from exact gradient ascent",
            e1["distance_sagd_exact"].as_f64().unwrap()
        ),
    );
    let exp = &experiment(&r, "e2-exp")["summary"]["summary"];
    let w = |who: &str| exp[format!("{who}_W")]["mean"].as_f64().unwrap();
    claims(
        &text,
        &format!(
            "W of the fitted latent law to π is {:.3} for the pre-trained VAE and {:.3} for SAGD as the paper ran it",
            w("pretrained"),
            w("sagd-paper")
        ),
    );
    claims(&text, &format!("our default SAGD {:.3}", w("sagd")));
    // Table 1 over 30 replications: the W row of SAGD (default) in docs/results/table1.md.
    let table = read("docs/results/table1.md");
    for case in ["normal", "exp", "mixture"] {
        let row = table
            .lines()
            .find(|l| l.starts_with(&format!("| {case} | W |")))
            .unwrap_or_else(|| panic!("table1.md has no W row for {case}"));
        let sagd = row.split('|').nth(7).unwrap().trim();
        let mean = sagd.split(' ').next().unwrap();
        claims(&text, &format!("{case} {mean}"));
    }
    // E3: the default run's paired differences.
    let e3 = json("docs/results/e3-default/result.json");
    let diff = |what: &str| find(&e3["differences"], "what", what).clone();
    let mean_se = |d: serde_json::Value| (d["mean"].as_f64().unwrap(), d["se"].as_f64().unwrap());
    let (am, ase) = mean_se(diff("SAGD − pre-trained"));
    let (bm, bse) = mean_se(diff("SAGD − control"));
    claims(&text, &format!("+{am:.3} nats** (paired se {ase:.3})"));
    claims(&text, &format!("+{bm:.3}** (se {bse:.3})"));
}

#[test]
fn the_screenshot_is_of_the_report_kept_beside_it() {
    let shots = json("docs/screenshots.json");
    for (png, of) in shots.as_object().unwrap() {
        assert!(root().join(png).exists(), "{png} is missing");
        let page = of["of"].as_str().unwrap();
        let bytes = std::fs::read(root().join(page)).unwrap_or_else(|e| panic!("{page}: {e}"));
        let sha: String = Sha256::digest(&bytes)
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        assert_eq!(
            of["sha256"].as_str().unwrap(),
            sha,
            "{png} was taken of another {page}: take it again (docs/screenshots.json says how)"
        );
    }
    assert!(read("README.md").contains("docs/report.png"));
}
