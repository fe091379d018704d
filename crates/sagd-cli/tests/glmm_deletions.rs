//! Tables of models with one term less against their references: `--ranova` against lmerTest
//! 3.1-3's `ranova(fit)` and `--drop1` against lme4 1.1-31's `drop1(fit, test = "Chisq")` (R
//! 4.2.2), on `tests/data/glmm_factorial.csv`, `glmm_counts.csv` and `glmm_weights.csv`.

mod common;
use common::{glmm, glmm_refused};

use std::path::{Path, PathBuf};

fn data() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/glmm_counts.csv")
}

fn factorial() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/glmm_factorial.csv")
}

/// `sagd glmm` with `args` and `flag` on `file`: its printout, result.json's table under
/// `key`, and the table's CSV file, `key`.csv.
fn table(
    args: &[&str],
    flag: &str,
    file: &Path,
    key: &str,
) -> (String, Vec<serde_json::Value>, String) {
    let dir = tempfile::tempdir().unwrap();
    let all: Vec<&str> = args.iter().copied().chain([flag]).collect();
    let printed = String::from_utf8_lossy(&glmm(&all, file, dir.path()).stdout).into_owned();
    let result = std::fs::read_to_string(dir.path().join("result.json")).unwrap();
    let r: serde_json::Value = serde_json::from_str(&result).unwrap();
    let rows = r[key]["models"].as_array().unwrap().clone();
    let csv = std::fs::read_to_string(dir.path().join(format!("{key}.csv"))).unwrap();
    (printed, rows, csv)
}

/// The rows of `reference` (`;`-separated, the first field the fit's name) for the fit `name`,
/// without the name.
fn reference<'a>(reference: &'a str, name: &str) -> Vec<Vec<&'a str>> {
    (reference.lines())
        .filter(|l| l.starts_with(&format!("{name};")))
        .map(|l| l.split(';').skip(1).collect())
        .collect()
}

/// The error of `sagd glmm` with `args` on glmm_counts.csv, which must refuse them.
fn refused_with(args: &[&str]) -> String {
    glmm_refused(args, &data(), Path::new("/nonexistent/never"))
}

/// `v` relative to the number written `want`.
fn rel(v: &serde_json::Value, want: &str) -> f64 {
    (v.as_f64().unwrap() / want.parse::<f64>().unwrap() - 1.0).abs()
}

/// A table's row past the model's own: its test's LRT and p to 1e-4 of `lrt` and `p`, its
/// degrees of freedom `df`.
fn check_test(name: &str, g: &serde_json::Value, (lrt, df, p): (&str, &str, &str)) {
    let t = &g["test"];
    assert!(rel(&t["lrt"], lrt) < 1e-4, "{name}: {g} against {lrt}");
    assert_eq!(t["df"].to_string(), df, "{name}: {g}");
    assert!(rel(&t["p"], p) < 1e-4, "{name}: {g} against {p}");
}

/// lmerTest 3.1-3's `ranova(fit)`: per fit, each row's name, npar, logLik (REML's for a REML
/// fit) and, past the model's own row, LRT, Df and Pr(>Chisq).
const RANOVA: &str = "\
factorial-reml;<none>;9;-106.914802275
factorial-reml;(1 | subj);8;-115.205095563;16.5805865756;1;4.66258651185e-05
factorial-ml;<none>;9;-101.330441309
factorial-ml;(1 | subj);8;-110.169648823;17.678415027;1;2.61578131372e-05
slopes;<none>;10;-343.055928870
slopes;x in (1 + x | site);8;-346.135325056;6.15879237244;2;0.0459870158613
independent;<none>;5;-351.850131961
independent;(1 | site);4;-385.189617238;66.67897055394;1;3.19525673497e-16
independent;x in (0 + x | site);4;-352.588474996;1.47668606819;1;0.224293738339
weights;<none>;4;-80.453252454
weights;(1 | site);3;-120.373115858;79.8397268091;1;4.0604598204e-19
";

/// `--ranova` against lmerTest's `ranova(fit)`: REML and ML fits of the unbalanced factorial,
/// correlated slopes (x left out of `(1 + x | site)`), independent ones (lme4's `(1 | site) +
/// (0 + x | site)`, each left out whole) and a weighted fit whose only term leaves the fixed
/// effects alone (weighted least squares' REML log-likelihood, R's `logLik(lm)`): the models'
/// criteria to 1e-7 of themselves, LRT and p to 1e-4; other families refused by name.
#[test]
fn ranova_is_lmertest_s() {
    let weights = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/glmm_weights.csv");
    let two = "y ~ A * B + x + (1 | subj)";
    let fits: [(&str, &[&str], PathBuf); 5] = [
        ("factorial-reml", &[two, "--reml"], factorial()),
        ("factorial-ml", &[two], factorial()),
        (
            "slopes",
            &["count ~ x * dose + (1 + x | site)", "--reml"],
            data(),
        ),
        (
            "independent",
            &["count ~ x + (1 + x || site)", "--reml"],
            data(),
        ),
        (
            "weights",
            &["y ~ x + (1 | site)", "--reml", "--weights", "w"],
            weights,
        ),
    ];
    for (name, args, file) in fits {
        let (printed, got, csv) = table(args, "--ranova", &file, "ranova");
        assert!(printed.contains("lmerTest's ranova"), "{printed}");
        let want = reference(RANOVA, name);
        assert_eq!(got.len(), want.len(), "{name}: {got:?}");
        assert_eq!(csv.lines().count(), want.len() + 1, "{csv}");
        for (g, w) in got.iter().zip(&want) {
            assert_eq!(g["term"], w[0], "{name}");
            assert_eq!(g["npar"].to_string(), w[1], "{name}");
            assert!(rel(&g["loglik"], w[2]) < 1e-7, "{name}: {g} against {w:?}");
            match w.len() > 3 {
                true => check_test(name, g, (w[3], w[4], w[5])),
                false => assert!(g["test"].is_null(), "{name}: {g}"),
            }
        }
    }
    let err = refused_with(&["count ~ x + (1 | site)", "--family", "poisson", "--ranova"]);
    assert!(
        err.contains("--ranova") && err.contains("--compare"),
        "{err}"
    );
}

/// lme4 1.1-31's `drop1(fit, test = "Chisq")`: per fit, each row's name, the parameters it
/// drops (none for the model's own), AIC and, past the model's own row, LRT and Pr(Chi).
/// A REML fit's table is its ML refit's. The Poisson fits are glmer's with nAGQ = 25, whose AIC
/// lacks constants that sagd's exact likelihood has: their AICs are not compared.
const DROP1: &str = "\
factorial-reml;<none>;;220.6608826186
factorial-reml;x;1;229.6350054636;10.97412284;0.00092392977
factorial-reml;A:B;2;218.8459354476;2.185052829;0.3353681436
factorial-ml;<none>;;222.6114107559
factorial-ml;B;1;242.6775784224;22.06616767;2.634116435e-06
factorial-ml;x:A;2;218.8459354476;0.2345246916;0.8893518448
slopes-reml;<none>;;699.5348058436
slopes-reml;x:dose;2;698.0024734580;2.467667614;0.2911741296
poisson;<none>;;
poisson;x:dose;2;;1.443275037;0.4859558425
poisson-main;<none>;;
poisson-main;x;1;;31.16036685;2.375672357e-08
poisson-main;dose;2;;16.29104394;0.0002900312243
";

/// `--drop1` against lme4's `drop1`: a REML fit refitted by ML (as lme4's `extractAIC`
/// refits it), an ML fit in which `x` stays (contained in `x:A`) while `B` and `x:A` go,
/// correlated slopes, and Poisson fits (exact quadrature; glmer's AGQ): AIC to 1e-7 of itself,
/// LRT and p to 1e-4; a model with no term to leave out refused by name.
#[test]
fn drop1_is_lme4_s() {
    let poisson = ["--family", "poisson"];
    let fits: [(&str, Vec<&str>, PathBuf); 5] = [
        (
            "factorial-reml",
            vec!["y ~ A * B + x + (1 | subj)", "--reml"],
            factorial(),
        ),
        (
            "factorial-ml",
            vec!["y ~ x * A + B + (1 | subj)"],
            factorial(),
        ),
        (
            "slopes-reml",
            vec!["count ~ x * dose + (1 + x | site)", "--reml"],
            data(),
        ),
        (
            "poisson",
            [&["count ~ x * dose + (1 | site)"][..], &poisson].concat(),
            data(),
        ),
        (
            "poisson-main",
            [&["count ~ x + dose + (1 | site)"][..], &poisson].concat(),
            data(),
        ),
    ];
    for (name, args, file) in fits {
        let (printed, got, csv) = table(&args, "--drop1", &file, "drop1");
        assert!(printed.contains("lme4's drop1"), "{printed}");
        assert_eq!(
            printed.contains("refitted by ML"),
            name.ends_with("reml"),
            "{printed}"
        );
        let want = reference(DROP1, name);
        assert_eq!(got.len(), want.len(), "{name}: {got:?}");
        assert_eq!(csv.lines().count(), want.len() + 1, "{csv}");
        let full = got[0]["npar"].as_u64().unwrap();
        for (g, w) in got.iter().zip(&want) {
            assert_eq!(g["term"], w[0], "{name}");
            if !w[2].is_empty() {
                assert!(rel(&g["aic"], w[2]) < 1e-7, "{name}: {g} against {w:?}");
            }
            match w[1].parse::<u64>() {
                Ok(dropped) => {
                    assert_eq!(g["npar"].as_u64().unwrap(), full - dropped, "{name}: {g}");
                    check_test(name, g, (w[3], w[1], w[4]));
                }
                Err(_) => assert!(g["test"].is_null(), "{name}: {g}"),
            }
        }
    }
    let err = refused_with(&["count ~ 1 + (1 | site)", "--drop1"]);
    assert!(
        err.contains("--drop1") && err.contains("no fixed-effect term"),
        "{err}"
    );
}

/// lmerTest 3.1-3's `step(fit)` (REML fits): per fit, the random-effect table's rows (`r`: name,
/// the step it was left out at, empty for the model as given, npar, logLik, LRT, p), the
/// fixed-effect table's (`f`: name, step, Sum Sq, NumDF, DenDF, F, p) and the model found. In
/// `independent` the slope goes at step 1; `kr` has Kenward and Roger's F tests.
const STEP: &str = "\
factorial;r;<none>;;9;-106.9148022751
factorial;r;(1 | subj);0;8;-115.2050955629;16.58058658;4.662586512e-05
factorial;f;A:B;1;0.9001587831;2;74.89681066;1.022402021;0.3646948356
factorial;f;A;0;15.12809247;2;72.39657023;17.17687224;7.854468341e-07
factorial;f;B;0;10.30775093;1;77.89428972;23.40743503;6.487476143e-06
factorial;f;x;0;4.672015968;1;78.67571393;10.60948319;0.001661622341
factorial;found;y ~ A + B + x + (1 | subj)
independent;r;<none>;;9;-345.5020038083
independent;r;x in (0 + x | site);1;8;-346.1353250563;1.266642496;0.2603974916
independent;r;(1 | site);0;7;-377.7376031111;63.20455611;1.863169284e-15
independent;f;x:dose;1;3.91049534;2;152.8315419;0.9701741285;0.3813387841
independent;f;x;0;63.82858357;1;152.7919704;31.73040414;8.285629719e-08
independent;f;dose;0;29.68026376;2;153.9925689;7.377312101;0.0008717953131
independent;found;count ~ x + dose + (1 | site)
kr;r;<none>;;10;-343.0559288701
kr;r;x in (1 + x | site);0;8;-346.1353250563;6.158792372;0.04598701586
kr;f;x:dose;1;4.073123005;2;105.5703304;1.101951125;0.336012643
kr;f;x;0;39.02950945;1;21.46031795;20.98823386;0.0001542108346
kr;f;dose;0;22.78727229;2;151.106937;6.125792027;0.002766665832
kr;found;count ~ x + dose + (1 + x | site)
";

/// `--step` against lmerTest's `step`: each table's rows in order, logLik to 1e-7 of itself,
/// LRT, Sum Sq, DenDF, F and p to 1e-4, the steps and degrees of freedom exactly, and the model
/// found; other families refused by name.
#[test]
fn step_is_lmertest_s() {
    let fits: [(&str, &[&str], PathBuf); 3] = [
        (
            "factorial",
            &["y ~ A * B + x + (1 | subj)", "--reml"],
            factorial(),
        ),
        (
            "independent",
            &["count ~ x * dose + (1 + x || site)", "--reml"],
            data(),
        ),
        (
            "kr",
            &[
                "count ~ x * dose + (1 + x | site)",
                "--reml",
                "--ddf",
                "kenward-roger",
            ],
            data(),
        ),
    ];
    for (name, args, file) in fits {
        let dir = tempfile::tempdir().unwrap();
        let all: Vec<&str> = args.iter().copied().chain(["--step"]).collect();
        let printed = String::from_utf8_lossy(&glmm(&all, &file, dir.path()).stdout).into_owned();
        assert!(
            printed.contains("Backward reduced fixed-effect table"),
            "{printed}"
        );
        let result = std::fs::read_to_string(dir.path().join("result.json")).unwrap();
        let step = &serde_json::from_str::<serde_json::Value>(&result).unwrap()["step"];
        let want = |part: &str| -> Vec<Vec<&str>> {
            (reference(STEP, name).into_iter())
                .filter(|w| w[0] == part)
                .map(|w| w[1..].to_vec())
                .collect()
        };
        let random = step["random"]["models"].as_array().unwrap();
        assert_eq!(random.len(), want("r").len(), "{name}: {random:?}");
        for (g, w) in random.iter().zip(&want("r")) {
            assert_eq!(g["term"], w[0], "{name}");
            assert_eq!(
                g["eliminated"].to_string(),
                if w[1].is_empty() { "null" } else { w[1] }
            );
            assert_eq!(g["npar"].to_string(), w[2], "{name}");
            assert!(rel(&g["loglik"], w[3]) < 1e-7, "{name}: {g} against {w:?}");
            if w.len() > 4 {
                let (lrt, p) = (&g["test"]["lrt"], &g["test"]["p"]);
                assert!(
                    rel(lrt, w[4]) < 1e-4 && rel(p, w[5]) < 1e-4,
                    "{name}: {g} vs {w:?}"
                );
            }
        }
        let fixed = step["fixed"].as_array().unwrap();
        assert_eq!(fixed.len(), want("f").len(), "{name}: {fixed:?}");
        for (g, w) in fixed.iter().zip(&want("f")) {
            assert_eq!(g["term"], w[0], "{name}");
            assert_eq!(g["eliminated"].to_string(), w[1], "{name}");
            assert_eq!(g["num_df"].to_string(), w[3], "{name}");
            for (key, v) in [("sum_sq", w[2]), ("den_df", w[4]), ("f", w[5]), ("p", w[6])] {
                assert!(rel(&g[key], v) < 1e-4, "{name}: {key} of {g} against {w:?}");
            }
        }
        assert_eq!(step["model_found"], want("found")[0][0], "{name}");
        assert!(printed.contains(&format!("Model found:\n{}", want("found")[0][0])));
    }
    // Every group's mean the same: the group's variance is 0 and its test's p is 1, but it is
    // the last random term: kept, and the note says why.
    let dir = tempfile::tempdir().unwrap();
    let flat = dir.path().join("flat.csv");
    let rows: String = (0..15)
        .map(|r| {
            format!(
                "{},{},g{}\n",
                [1.0, 2.0, 3.5][r % 3],
                [0.3, -0.2, 0.9][r % 3],
                r / 3
            )
        })
        .collect();
    std::fs::write(&flat, format!("y,x,g\n{rows}")).unwrap();
    let out = dir.path().join("out");
    glmm(&["y ~ x + (1 | g)", "--reml", "--step"], &flat, &out);
    let step = &common::json(&out.join("result.json"))["step"];
    assert!(
        step["note"].as_str().unwrap().contains("last random term"),
        "{step}"
    );
    assert_eq!(step["model_found"], "y ~ x + (1 | g)", "{step}");
    let err = refused_with(&["count ~ x + (1 | site)", "--family", "poisson", "--step"]);
    assert!(err.contains("--step") && err.contains("--drop1"), "{err}");
}
