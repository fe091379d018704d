//! `sagd glmm`'s fitted.csv and its summary's scaled residuals against lme4's.
//!
//! The references are R 4.2.2 with lme4 1.1-31 on the files of `tests/data`, for the fits of
//! `tests/glmm.rs`: `predict(fit)`, `fitted(fit)`, `residuals(fit, "response")`,
//! `residuals(fit, "pearson", scaled = TRUE)` and `residuals(fit, "deviance")` at three rows of
//! each file, and `quantile(summary(fit)$residuals)`.

mod common;
use common::{glmm, refused, sagd};

use std::collections::BTreeMap;
use std::path::Path;

/// Per fit, lme4's values: `q` and the quantiles, or a row of the file and its η, fitted mean,
/// response, Pearson and deviance residuals.
const LME4: &str = "\
poisson,q,-1.7311374259,-0.7490079409,-0.0333491268,0.4031236020,2.9457963189
poisson,1,0.734170254418944,2.08375229074281,-2.08375229074281,-1.44352079678223,-2.04144668837705
poisson,2,0.208059691679138,1.23128666492384,-0.231286664923844,-0.20843517237,-0.215531776054976
poisson,180,0.628570026302589,1.87492756429962,-0.87492756429962,-0.638969093432159,-0.701936660956003
reml,q,-2.6477714519,-0.6262232023,-0.0765969687,0.3308510038,2.9806454791
reml,1,2.45357022680173,2.45357022680173,-2.45357022680173,-1.7283132087811,-2.45357022680173
reml,2,1.35791761431877,1.35791761431877,-0.357917614318765,-0.252119843045572,-0.357917614318765
reml,180,2.42889548406722,2.42889548406722,-1.42889548406722,-1.0065246603111,-1.42889548406722
exposure,q,-2.7667920218,-0.8130055041,-0.1257351473,0.6720093047,4.1767411684
exposure,1,0.0802522036325112,1.08356031106352,-0.0835603110635179,-0.0802737410992908,-0.0813401184042237
exposure,2,1.36564524286605,3.91825045966563,-0.91825045966563,-0.463890050424818,-0.484048751825311
exposure,240,1.00050209823108,2.71964701565706,-1.71964701565706,-1.04275682283827,-1.19928721949829
weights,q,-1.6768849607,-0.7099651843,0.1329617112,0.6263802992,2.7995011288
weights,1,0.934357929686249,0.934357929686249,0.661642070313751,0.903307715836821,0.661642070313751
weights,2,1.25146417329217,1.25146417329217,0.128235826707829,0.391477662136304,0.286744025669589
weights,90,-0.497625616458697,-0.497625616458697,2.0244256164587,2.76384976338898,2.0244256164587
proportions,q,-1.80828699504,-0.63264976564,0.05691098009,0.65186668661,1.63713950551
proportions,1,-1.628217393927266,0.164074706744166,-0.1640747067441655,-0.767357447729175,-1.036964894366163
proportions,2,-0.052938652675752,0.486768426811436,-0.0252299652729744,-0.181999605090947,-0.182119548941547
proportions,96,0.136069977029730,0.533965104985824,0.0260348950141757,0.260951728957069,0.261321475037732
";

/// A fitted.csv row, or lme4's: η, the fitted mean, the response, Pearson and deviance residuals.
type Values = [f64; 5];

/// lme4's quantiles and rows of the fit `name`.
fn lme4(name: &str) -> (Values, BTreeMap<usize, Values>) {
    let (mut q, mut rows) = ([f64::NAN; 5], BTreeMap::new());
    for line in LME4.lines().filter(|l| l.starts_with(&format!("{name},"))) {
        let f: Vec<&str> = line.split(',').collect();
        let v: Vec<f64> = f[2..].iter().map(|x| x.parse().unwrap()).collect();
        let v: Values = v.try_into().unwrap();
        match f[1] {
            "q" => q = v,
            row => drop(rows.insert(row.parse().unwrap(), v)),
        }
    }
    (q, rows)
}

/// Runs `sagd glmm` on the test file `data` into `dir`; returns its fitted.csv's rows by their
/// row in the file, result.json and the printout.
fn fit(
    data: &str,
    args: &[&str],
    dir: &Path,
) -> (BTreeMap<usize, Values>, serde_json::Value, String) {
    let file = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(data);
    let o = glmm(args, &file, dir);
    let text = std::fs::read_to_string(dir.join("fitted.csv")).unwrap();
    assert!(
        text.starts_with("row,eta,fitted,residual,pearson,deviance\n"),
        "{text}"
    );
    let rows = text
        .lines()
        .skip(1)
        .map(|line| {
            let f: Vec<f64> = line.split(',').map(|v| v.parse().unwrap()).collect();
            (f[0] as usize, f[1..].try_into().unwrap())
        })
        .collect();
    let result = std::fs::read_to_string(dir.join("result.json")).unwrap();
    let printed = String::from_utf8_lossy(&o.stdout).into_owned();
    (rows, serde_json::from_str(&result).unwrap(), printed)
}

/// The fit `name` against lme4's, to `tol`: the distance between the two maximisers' θ̂ moves
/// the values by about 1e-5 (1e-7 for the Gaussian closed form, which both maximise).
fn matches_lme4(name: &str, data: &str, args: &[&str], tol: f64) -> String {
    let dir = tempfile::tempdir().unwrap();
    let (rows, r, printed) = fit(data, args, dir.path());
    assert_eq!(rows.len(), r["data"]["n_obs"].as_u64().unwrap() as usize);
    let (q, want) = lme4(name);
    for (row, w) in &want {
        let g = rows[row];
        assert!(
            g.iter().zip(w).all(|(a, b)| (a - b).abs() < tol),
            "{name}, row {row}: {g:?} against lme4's {w:?}"
        );
    }
    let got = &r["scaled_residuals"];
    for (k, b) in q.iter().enumerate() {
        let a = got[k].as_f64().unwrap();
        assert!((a - b).abs() < tol, "{name}: {got} against lme4's {q:?}");
    }
    printed
}

#[test]
fn a_poisson_fit_s_values_and_residuals_are_lme4_s() {
    let args = ["count ~ x + dose + (1 | site)", "--family", "poisson"];
    let printed = matches_lme4("poisson", "glmm_counts.csv", &args, 5e-5);
    // As lme4 prints them, between the criteria and the random effects.
    let want = "Scaled residuals:\n      Min        1Q    Median        3Q       Max\n  \
                -1.7311   -0.7490   -0.0333    0.4031    2.9458\n\nRandom effects:";
    assert!(printed.contains(want), "{printed}");
}

#[test]
fn a_row_with_a_missing_value_has_no_fit_and_the_others_keep_their_rows() {
    let dir = tempfile::tempdir().unwrap();
    let args = ["count ~ x + dose + (1 | site)", "--family", "poisson"];
    let (rows, ..) = fit("glmm_counts.csv", &args, dir.path());
    // Row 8 of the file has no count.
    let numbers: Vec<usize> = rows.keys().copied().collect();
    let want: Vec<usize> = (1..=180).filter(|&r| r != 8).collect();
    assert_eq!(numbers, want);
}

#[test]
fn a_reml_fit_s_values_and_residuals_are_lmer_s() {
    let args = ["count ~ x * dose + (1 | site)", "--reml"];
    matches_lme4("reml", "glmm_counts.csv", &args, 1e-6);
}

/// `--weights w` (lmer's `weights = w`, row i's variance σ²/wᵢ) on `glmm_weights.csv`: by REML
/// the rows' values and residuals are lmer's (Pearson's and the deviance's scaled by √wᵢ), and by
/// maximum likelihood the estimates, their errors and the log-likelihood (every constant, ½ Σ
/// ln wᵢ too) are: β (0.768485129871, 0.513035185089), sds 0.704721656834 and 0.727599559139,
/// ℓ −77.7018135966, standard errors 0.1875235480811 and 0.0531146670861.
#[test]
fn weighted_gaussian_fits_are_lmer_s() {
    let reml = ["y ~ x + (1 | site)", "--weights", "w", "--reml"];
    let printed = matches_lme4("weights", "glmm_weights.csv", &reml, 1e-6);
    assert!(printed.contains("Weights: w"), "{printed}");
    let dir = tempfile::tempdir().unwrap();
    let (_, r, _) = fit("glmm_weights.csv", &reml[..3], dir.path());
    let close = |v: &serde_json::Value, want: f64, tol: f64| {
        let got = v.as_f64().unwrap();
        assert!((got - want).abs() < tol, "{got} against lmer's {want}");
    };
    for (k, (beta, se)) in [
        (0.768485129871, 0.1875235480811),
        (0.513035185089, 0.0531146670861),
    ]
    .into_iter()
    .enumerate()
    {
        close(&r["fixed"][k]["estimate"], beta, 1e-7);
        // lmer's errors are β's given the variances; sagd's invert the whole observed
        // information, whose cross terms move them slightly (here 1e-5 of them).
        close(&r["fixed"][k]["se"], se, 1e-4 * se);
    }
    close(&r["random"][0]["sd"][0]["value"], 0.704721656834, 1e-6);
    close(&r["sigma"]["value"], 0.727599559139, 1e-6);
    close(&r["log_likelihood"]["value"], -77.7018135966, 1e-8);
    assert_eq!(r["data"]["weights"], "w");
}

/// A binomial's `--weights n` with the response a proportion (`glmer(prop ~ x + (1 | site),
/// weights = n, family = binomial, nAGQ = 25)` on `glmm_proportions.csv`, lme4 1.1-31, bobyqa to
/// rhoend 1e-10): n trials a row. The rows' values and residuals are lme4's; β (−0.379607838497,
/// 0.674348776221) and the sd 0.655906188943 are glmer's, ℓ (−179.80785245198) the exact
/// log-likelihood at glmer's estimate, constants included (R's `integrate` per site, relative
/// tolerance 1e-13); the fit is the one of `cbind(s, f)` on the same rows, and simulate.csv's
/// draws are proportions of n, as lme4's `simulate` gives them.
#[test]
fn binomial_weights_are_trials_as_glmer_reads_them() {
    let args = [
        "prop ~ x + (1 | site)",
        "--family",
        "binomial",
        "--weights",
        "n",
    ];
    let printed = matches_lme4("proportions", "glmm_proportions.csv", &args, 1e-6);
    assert!(printed.contains("Weights: n"), "{printed}");
    let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let with_sims: Vec<&str> = args.iter().copied().chain(["--simulate", "20"]).collect();
    let (_, r, _) = fit("glmm_proportions.csv", &with_sims, a.path());
    let counts = ["cbind(s, f) ~ x + (1 | site)", "--family", "binomial"];
    let (_, c, _) = fit("glmm_proportions.csv", &counts, b.path());
    let close = |v: &serde_json::Value, want: f64, tol: f64| {
        let got = v.as_f64().unwrap();
        assert!((got - want).abs() < tol, "{got} against {want}");
    };
    for (k, beta) in [-0.379607838497, 0.674348776221].into_iter().enumerate() {
        close(&r["fixed"][k]["estimate"], beta, 1e-6);
    }
    close(&r["random"][0]["sd"][0]["value"], 0.655906188943, 1e-6);
    close(&r["log_likelihood"]["value"], -179.80785245198, 1e-8);
    for key in ["fixed", "random", "log_likelihood"] {
        assert_eq!(r[key], c[key], "{key}");
    }
    let data = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/glmm_proportions.csv"),
    )
    .unwrap();
    let trials: Vec<f64> = (data.lines().skip(1))
        .map(|l| l.split(',').nth(1).unwrap().parse().unwrap())
        .collect();
    for row in simulations(a.path()) {
        let n = trials[row[0] as usize - 1];
        for p in &row[1..] {
            let s = p * n;
            assert!(
                (0.0..=1.0).contains(p) && (s - s.round()).abs() < 1e-9,
                "{p} of {n}"
            );
        }
    }
}

/// Weights of another family, a column that is not there or holds labels, and a weight of 0 are
/// refused by name, before anything is written; so are a binomial's weights beside
/// `cbind(successes, failures)` (its trials given twice) and weights that are not whole trials.
#[test]
fn bad_weights_are_refused() {
    let data = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/glmm_weights.csv");
    let (y, w) = ("y ~ x + (1 | site)", "w ~ x + (1 | site)");
    for (formula, flags, says) in [
        (
            w,
            &["--weights", "w", "--family", "poisson"][..],
            "Gaussian family",
        ),
        (y, &["--weights", "v"][..], "no column `v`"),
        (y, &["--weights", "site"][..], "column `site` holds labels"),
        (y, &["--weights", "x"][..], "positive"),
    ] {
        let err = refused(
            sagd()
                .args(["glmm", formula, "--data"])
                .arg(&data)
                .args(flags)
                .args(["--out", "/nonexistent/never"]),
        );
        assert!(err.contains("--weights") && err.contains(says), "{err}");
    }
    let data = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/glmm_proportions.csv");
    for (formula, weights, says) in [
        ("cbind(s, f) ~ x + (1 | site)", "n", "not both"),
        ("prop ~ x + (1 | site)", "x", "whole number"),
    ] {
        let err = refused(
            sagd()
                .args(["glmm", formula, "--family", "binomial", "--data"])
                .arg(&data)
                .args(["--weights", weights, "--out", "/nonexistent/never"]),
        );
        assert!(err.contains("--weights") && err.contains(says), "{err}");
    }
}

#[test]
fn an_offset_is_in_each_row_s_linear_predictor_as_glmer_has_it() {
    let args = [
        "y ~ x + offset(log(exposure)) + (1 | site)",
        "--family",
        "poisson",
    ];
    matches_lme4("exposure", "glmm_exposure.csv", &args, 1e-4);
}

/// simulate.csv's draws, row by row (each row's data-file number, then its draws).
fn simulations(dir: &Path) -> Vec<Vec<f64>> {
    let text = std::fs::read_to_string(dir.join("simulate.csv")).unwrap();
    text.lines()
        .skip(1)
        .map(|l| l.split(',').map(|v| v.parse().unwrap()).collect())
        .collect()
}

/// `--simulate`: new counts from the fitted Poisson model, each site's effect drawn afresh, so
/// that a row's mean over the draws is exp(η_fixed + τ²/2) (η_fixed from predictions.csv, the
/// data themselves predicted without the levels; τ from estimates.csv); the same seed gives the
/// same file.
#[test]
fn simulated_counts_have_the_fitted_model_s_means() {
    let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let data = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/glmm_counts.csv");
    let data = data.to_str().unwrap();
    let args = ["count ~ x + dose + (1 | site)", "--family", "poisson"];
    let with =
        |extra: &[&'static str]| -> Vec<&str> { args.iter().chain(extra).copied().collect() };
    let predicted = [&with(&["--simulate", "2000", "--predict"])[..], &[data]].concat();
    glmm(&predicted, Path::new(data), a.path());
    glmm(&with(&["--simulate", "2000"]), Path::new(data), b.path());
    let sims = simulations(a.path());
    assert_eq!(sims, simulations(b.path()));
    assert_eq!((sims.len(), sims[0].len()), (179, 2001));
    assert!(sims
        .iter()
        .all(|r| r[1..].iter().all(|y| *y >= 0.0 && y.fract() == 0.0)));
    let estimates = std::fs::read_to_string(a.path().join("estimates.csv")).unwrap();
    let tau: f64 = estimates
        .lines()
        .find(|l| l.starts_with("sd,"))
        .and_then(|l| l.split(',').nth(3))
        .unwrap()
        .parse()
        .unwrap();
    let predictions = std::fs::read_to_string(a.path().join("predictions.csv")).unwrap();
    // The data file's rows with a count (row 8 has none) in simulate.csv's order.
    let eta_fixed: Vec<f64> = predictions
        .lines()
        .skip(1)
        .filter(|l| !l.starts_with("8,"))
        .map(|l| l.split(',').nth(3).unwrap().parse().unwrap())
        .collect();
    let mut z_max: f64 = 0.0;
    for (r, eta) in sims.iter().zip(&eta_fixed) {
        let mean = (eta + tau * tau / 2.0).exp();
        let var = mean + mean * mean * ((tau * tau).exp() - 1.0);
        let got = r[1..].iter().sum::<f64>() / 2000.0;
        z_max = z_max.max((got - mean).abs() / (var / 2000.0).sqrt());
    }
    // The largest of 179 standard normals passes 4.5 in about 1 run of 800.
    assert!(z_max < 4.5, "{z_max}");
}

/// `--simulate-conditional`: each site's effect held at its conditional mode, so that a row's
/// counts are Poisson with the fitted mean (predictions.csv's `fitted`, the data themselves
/// predicted with their levels): their mean over 2000 draws within the Monte Carlo error of it,
/// their variance its own (the Poisson's, far below the unconditional draws' spread).
#[test]
fn conditional_simulations_are_poisson_at_the_fitted_means() {
    let dir = tempfile::tempdir().unwrap();
    let data = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/glmm_counts.csv");
    let args = [
        "count ~ x + dose + (1 | site)",
        "--family",
        "poisson",
        "--simulate",
        "2000",
        "--simulate-conditional",
        "--predict",
        data.to_str().unwrap(),
    ];
    glmm(&args, &data, dir.path());
    let sims = simulations(dir.path());
    let predictions = std::fs::read_to_string(dir.path().join("predictions.csv")).unwrap();
    let fitted: Vec<f64> = predictions
        .lines()
        .skip(1)
        .filter(|l| !l.starts_with("8,"))
        .map(|l| l.split(',').nth(2).unwrap().parse().unwrap())
        .collect();
    assert_eq!(sims.len(), fitted.len());
    let (rows, mut z_max) = (fitted.len() as f64, 0.0f64);
    let (mut ratio, mut ratio_var) = (0.0, 0.0);
    for (r, mean) in sims.iter().zip(&fitted) {
        let n = (r.len() - 1) as f64;
        let got = r[1..].iter().sum::<f64>() / n;
        let var = r[1..].iter().map(|y| (y - got).powi(2)).sum::<f64>() / (n - 1.0);
        z_max = z_max.max((got - mean).abs() / (mean / n).sqrt());
        // A Poisson's sample variance s² has Var ≈ (μ + 2μ²)/n: s²/μ's is (1/μ + 2)/n.
        ratio += var / mean / rows;
        ratio_var += (1.0 / mean + 2.0) / n / (rows * rows);
    }
    assert!(z_max < 4.5, "{z_max}");
    assert!((ratio - 1.0).abs() < 4.0 * ratio_var.sqrt(), "{ratio}");
}
