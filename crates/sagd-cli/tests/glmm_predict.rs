//! `sagd glmm --predict`: predictions.csv against lme4's `predict(fit, newdata,
//! allow.new.levels = TRUE)` and `predict(fit, newdata, re.form = NA)`, and new data the fit
//! cannot predict refused by name.
//!
//! The references are R 4.2.2 with lme4 1.1-31: the fits of `tests/glmm.rs` on the files of
//! `tests/data`, predicting `glmm_counts_new.csv` (sites 0, 5 and 17 of the data, and a site 99
//! it lacks; two rows without a count) and `glmm_exposure_new.csv` (a site `gnew` the data lack).

mod common;
use common::{glmm, refused, sagd};

use std::path::Path;

/// Per fit, lme4's η, mean and population-level η (`re.form = NA`) for each new row.
const LME4: &str = "\
poisson,0.461278165181,1.586099987714,0.656546943482
poisson,-0.615593677245,0.540320024368,-0.484851990813
poisson,0.577354797358,1.781320240210,0.577354797358
poisson,0.340170604557,1.405187301472,0.340170604557
poisson,1.537940187821,4.654991979871,0.402693837214
reml,1.592125915901,1.592125915901,2.416334531950
reml,0.403466210125,0.403466210125,0.884064426618
reml,2.258165971630,2.258165971630,2.258165971630
reml,1.724863863341,1.724863863341,1.724863863341
reml,4.733384263208,4.733384263208,1.922558626748
exposure,0.606280416208,1.833598475674,1.001854086622
exposure,1.267292943850,3.551226169997,0.900020593793
exposure,0.475078920029,1.608141107021,0.475078920029
exposure,0.311691341249,1.365733082498,0.509829964007
";

fn data(file: &str) -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(file)
}

/// predictions.csv's fields, row by row.
fn predictions(dir: &Path) -> Vec<Vec<String>> {
    let text = std::fs::read_to_string(dir.join("predictions.csv")).unwrap();
    let mut lines = text.lines();
    assert_eq!(
        lines.next(),
        Some("row,eta,fitted,eta_fixed,fitted_fixed,unseen_levels,residual,pearson,deviance")
    );
    lines
        .map(|l| l.split(',').map(String::from).collect())
        .collect()
}

/// The fit `name` on `file`, predicting `new`, against lme4's to `tol` (the distance between
/// the two maximisers' θ̂); returns predictions.csv's rows and result.json.
fn matches_lme4(
    name: &str,
    (file, new): (&str, &str),
    args: &[&str],
    tol: f64,
) -> (Vec<Vec<String>>, serde_json::Value) {
    let dir = tempfile::tempdir().unwrap();
    let new = data(new);
    let mut all = args.to_vec();
    all.extend(["--predict", new.to_str().unwrap()]);
    glmm(&all, &data(file), dir.path());
    let rows = predictions(dir.path());
    let want: Vec<Vec<f64>> = LME4
        .lines()
        .filter(|l| l.starts_with(&format!("{name},")))
        .map(|l| l.split(',').skip(1).map(|v| v.parse().unwrap()).collect())
        .collect();
    assert_eq!(rows.len(), want.len());
    for (k, (got, w)) in rows.iter().zip(&want).enumerate() {
        assert_eq!(got[0], (k + 1).to_string());
        let got: Vec<f64> = got[1..4].iter().map(|v| v.parse().unwrap()).collect();
        assert!(
            got.iter().zip(w).all(|(a, b)| (a - b).abs() < tol),
            "{name}, new row {}: {got:?} against lme4's {w:?}",
            k + 1
        );
    }
    let result = std::fs::read_to_string(dir.path().join("result.json")).unwrap();
    (rows, serde_json::from_str(&result).unwrap())
}

#[test]
fn a_poisson_fit_predicts_new_rows_as_glmer_does() {
    let args = ["count ~ x + dose + (1 | site)", "--family", "poisson"];
    let files = ("glmm_counts.csv", "glmm_counts_new.csv");
    let (rows, result) = matches_lme4("poisson", files, &args, 5e-5);
    // Site 99 is new (rows 3 and 4): no site effect, the population's value.
    let unseen: Vec<&str> = rows.iter().map(|r| r[5].as_str()).collect();
    assert_eq!(unseen, ["", "", "\"site\"", "\"site\"", ""]);
    for r in &rows[2..4] {
        assert_eq!((&r[1], &r[2]), (&r[3], &r[4]));
    }
    // Residuals where the file gives a count (rows 1, 3, 5), blank where it does not.
    for (k, r) in rows.iter().enumerate() {
        assert_eq!(r[6].is_empty(), k == 1 || k == 3, "{r:?}");
    }
    let (count, fitted): (f64, f64) = (3.0, rows[0][2].parse().unwrap());
    assert_eq!(rows[0][6].parse::<f64>().unwrap(), count - fitted);
    let p = &result["predictions"];
    assert_eq!(
        (p["rows"].as_u64(), p["dropped"].as_u64()),
        (Some(5), Some(0))
    );
    assert_eq!(p["rows_at_unseen_levels"]["site"].as_u64(), Some(2));
}

#[test]
fn a_reml_fit_with_correlated_slopes_predicts_as_lmer_does() {
    let args = ["count ~ x * dose + (1 + x | site)", "--reml"];
    let files = ("glmm_counts.csv", "glmm_counts_new.csv");
    matches_lme4("reml", files, &args, 2e-5);
}

#[test]
fn new_rows_carry_their_own_offsets() {
    let args = [
        "y ~ x + offset(log(exposure)) + (1 | site)",
        "--family",
        "poisson",
    ];
    let files = ("glmm_exposure.csv", "glmm_exposure_new.csv");
    matches_lme4("exposure", files, &args, 1e-4);
}

#[test]
fn new_data_the_fit_cannot_predict_are_refused_before_the_fit() {
    let dir = tempfile::tempdir().unwrap();
    let new = dir.path().join("new.csv");
    let out = dir.path().join("out");
    let attempt = |text: &str| {
        std::fs::write(&new, text).unwrap();
        refused(
            sagd()
                .args([
                    "glmm",
                    "count ~ x + dose + (1 | site)",
                    "--family",
                    "poisson",
                ])
                .arg("--data")
                .arg(data("glmm_counts.csv"))
                .arg("--predict")
                .arg(&new)
                .arg("--out")
                .arg(&out),
        )
    };
    let e = attempt("x,dose,site\n0.1,low,site 0\n0.2,medium,site 1\n");
    assert!(
        e.contains("`dose` is `medium` at new-data row 2")
            && e.contains("(ctl, high, low)")
            && e.contains("--predict"),
        "{e}"
    );
    let e = attempt("x,site\n0.1,site 0\n");
    assert!(e.contains("no column `dose`"), "{e}");
    assert!(
        !out.exists(),
        "nothing is written for new data that cannot be predicted"
    );
}

/// A weighted fit (lmer's `weights = w`; glmer's binomial `weights = n` beside a proportion)
/// predicting its own data file: each new row takes its weight from the file's --weights
/// column, so its residuals are the fitted rows' (fitted.csv's, which are lme4's,
/// `tests/glmm_fitted.rs`). Without that column the Pearson and deviance residuals, which a
/// weight scales, are left blank, and result.json says so.
#[test]
fn new_rows_of_a_weighted_fit_take_their_own_weights() {
    let runs = [
        (
            "glmm_weights.csv",
            &["y ~ x + (1 | site)", "--weights", "w"][..],
            2,
        ),
        (
            "glmm_proportions.csv",
            &[
                "prop ~ x + (1 | site)",
                "--family",
                "binomial",
                "--weights",
                "n",
            ][..],
            1,
        ),
    ];
    for (file, args, weight_column) in runs {
        let dir = tempfile::tempdir().unwrap();
        let path = data(file);
        let mut all = args.to_vec();
        all.extend(["--predict", path.to_str().unwrap()]);
        glmm(&all, &path, dir.path());
        let fitted = std::fs::read_to_string(dir.path().join("fitted.csv")).unwrap();
        let rows = predictions(dir.path());
        for (got, want) in rows.iter().zip(fitted.lines().skip(1)) {
            let want: Vec<f64> = want.split(',').map(|v| v.parse().unwrap()).collect();
            for (g, w) in got[6..].iter().zip(&want[3..]) {
                let g: f64 = g.parse().unwrap();
                assert!(
                    (g - w).abs() < 1e-12 * (1.0 + w.abs()),
                    "{file}: {got:?} {want:?}"
                );
            }
        }
        let result: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(dir.path().join("result.json")).unwrap())
                .unwrap();
        assert_eq!(result["predictions"]["weights"], args[args.len() - 1]);
        // The same file without its weights.
        let text = std::fs::read_to_string(&path).unwrap();
        let unweighted: String = (text.lines())
            .map(|l| {
                let mut f: Vec<&str> = l.split(',').collect();
                f.remove(weight_column);
                f.join(",") + "\n"
            })
            .collect();
        let new = dir.path().join("new.csv");
        std::fs::write(&new, unweighted).unwrap();
        let blank = dir.path().join("blank");
        let mut all = args.to_vec();
        all.extend(["--predict", new.to_str().unwrap()]);
        let o = glmm(&all, &path, &blank);
        assert!(String::from_utf8_lossy(&o.stderr).contains("left blank"));
        for (got, fitted) in predictions(&blank).iter().zip(&rows) {
            // The response residual needs no weight (a binomial's y·n/n to rounding).
            let (g, w): (f64, f64) = (got[6].parse().unwrap(), fitted[6].parse().unwrap());
            assert!((g - w).abs() < 1e-12, "{file}: {got:?} {fitted:?}");
            assert_eq!((&got[7], &got[8]), (&String::new(), &String::new()));
        }
        let result: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(blank.join("result.json")).unwrap())
                .unwrap();
        assert!(result["predictions"]["weights"].is_null());
    }
}
