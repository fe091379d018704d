//! `sagd glmm --profile`: profile-likelihood intervals against lme4's `confint(fit)` (its
//! default method, the profile), R 4.2.2 with lme4 1.1-31 on `tests/data/glmm_counts.csv`:
//! `glmer(count ~ x + dose + (1 | site), family = poisson, nAGQ = 25)` and
//! `lmer(count ~ x + dose + (1 | site), REML = FALSE)`. lme4 interpolates its profile by a
//! spline; the two agree to about 1e-6.

mod common;
use common::{glmm, glmm_refused};

use std::path::{Path, PathBuf};

fn data() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/glmm_counts.csv")
}

/// Runs `sagd glmm` with `args` into `dir`; returns the printout.
fn run(args: &[&str], dir: &Path) -> String {
    String::from_utf8_lossy(&glmm(args, &data(), dir).stdout).into_owned()
}

/// confint.csv's rows: (kind, name, lower, upper).
fn intervals(dir: &Path) -> Vec<(String, String, f64, f64)> {
    let text = std::fs::read_to_string(dir.join("confint.csv")).unwrap();
    assert!(
        text.starts_with("kind,group,name,estimate,lower,upper\n"),
        "{text}"
    );
    text.lines()
        .skip(1)
        .map(|line| {
            let f: Vec<&str> = line.split(',').collect();
            let name = f[2].trim_matches('"').to_string();
            (
                f[0].to_string(),
                name,
                f[4].parse().unwrap(),
                f[5].parse().unwrap(),
            )
        })
        .collect()
}

fn close(got: &[(String, String, f64, f64)], want: &[(&str, &str, f64, f64)]) {
    assert_eq!(got.len(), want.len(), "{got:?}");
    for (g, w) in got.iter().zip(want) {
        assert_eq!((g.0.as_str(), g.1.as_str()), (w.0, w.1));
        assert!(
            (g.2 - w.2).abs() < 1e-5 && (g.3 - w.3).abs() < 1e-5,
            "{g:?} against lme4's {w:?}"
        );
    }
}

#[test]
fn poisson_profile_intervals_are_glmer_s() {
    let dir = tempfile::tempdir().unwrap();
    let args = [
        "count ~ x + dose + (1 | site)",
        "--family",
        "poisson",
        "--profile",
    ];
    let printed = run(&args, dir.path());
    assert!(
        printed.contains("Profile confidence intervals (95 %"),
        "{printed}"
    );
    close(
        &intervals(dir.path()),
        &[
            ("fixed", "(Intercept)", 0.23665239, 0.83249400),
            ("fixed", "x", 0.20478772, 0.43151390),
            ("fixed", "dosehigh", -1.00093898, -0.31226814),
            ("fixed", "doselow", -0.30252315, 0.20643890),
            ("sd", "(Intercept)", 0.44277413, 0.85831945),
        ],
    );
    let r: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("result.json")).unwrap())
            .unwrap();
    assert_eq!(r["confint"]["level"], 0.95);
    assert_eq!(r["confint"]["intervals"].as_array().unwrap().len(), 5);
}

#[test]
fn gaussian_profile_intervals_are_lmer_s() {
    let dir = tempfile::tempdir().unwrap();
    run(
        &["count ~ x + dose + (1 | site)", "--profile", "0.95"],
        dir.path(),
    );
    close(
        &intervals(dir.path()),
        &[
            ("fixed", "(Intercept)", 1.56787314, 2.83160761),
            ("fixed", "x", 0.40620280, 0.83801055),
            ("fixed", "dosehigh", -1.59327750, -0.45360798),
            ("fixed", "doselow", -0.58419573, 0.46206978),
            ("sd", "(Intercept)", 1.04697384, 1.90901718),
            ("sigma", "Residual", 1.25878250, 1.58029605),
        ],
    );
}

/// Correlated slopes, ML: every sd and the correlation are profiled, as lme4's `.sig` entries.
/// lme4's spline falls back to linear interpolation on this correlation's profile (it warns of
/// a non-monotonic profile) and puts its lower end at 0.0567, where the profile deviance is
/// 4.28 above its minimum. The deviance from lme4's own `devFunOnly` function, minimised by R's
/// `optim` over the sds with the correlation held, rises through χ²₁(0.95) = 3.8415 between
/// 0.1005 (3.8505) and 0.1025 (3.8311): the end must lie there. Its upper end is 1, as lme4's
/// (at 0.95 the rise is 0.10). The slope sd's lower end: the Gaussian likelihood written out
/// densely in R and maximised by `optim` with that sd held falls by 3.8462 at 0.0429 and by
/// 3.8353 at 0.0432 (lme4's confint puts it at 0.0451, where it falls by 3.768). The fixed
/// effects, the intercept's sd, the slope's upper end and σ agree with lme4's `confint` to 1e-4.
#[test]
fn every_sd_and_the_correlation_of_correlated_slopes_are_profiled() {
    let dir = tempfile::tempdir().unwrap();
    let printed = run(
        &["count ~ x + dose + (1 + x | site)", "--profile"],
        dir.path(),
    );
    assert!(printed.contains("cor site (Intercept):x"), "{printed}");
    let got = intervals(dir.path());
    let names: Vec<(&str, &str)> = got.iter().map(|g| (g.0.as_str(), g.1.as_str())).collect();
    assert_eq!(
        names,
        [
            ("fixed", "(Intercept)"),
            ("fixed", "x"),
            ("fixed", "dosehigh"),
            ("fixed", "doselow"),
            ("sd", "(Intercept)"),
            ("sd", "x"),
            ("cor", "(Intercept):x"),
            ("sigma", "Residual"),
        ]
    );
    let lme4 = [
        (1.53983298325, 2.8235429526),
        (0.35030202719, 0.8612317302),
        (-1.49237757615, -0.3678108298),
        (-0.58534601014, 0.4542499269),
        (1.08525248875, 1.9639612854),
    ];
    for (g, w) in got.iter().zip(lme4) {
        assert!(
            (g.2 - w.0).abs() < 1e-4 && (g.3 - w.1).abs() < 1e-4,
            "{g:?} {w:?}"
        );
    }
    let (slope, cor, sigma) = (&got[5], &got[6], &got[7]);
    assert!((slope.3 - 0.6926119210).abs() < 1e-4, "{slope:?}");
    assert!(slope.2 > 0.0429 && slope.2 < 0.0432, "{slope:?}");
    assert!(cor.2 > 0.1005 && cor.2 < 0.1025 && cor.3 == 1.0, "{cor:?}");
    assert!((sigma.2 - 1.20276301037).abs() < 1e-4 && (sigma.3 - 1.5379710894).abs() < 1e-4);
}

#[test]
fn a_narrower_level_gives_narrower_intervals() {
    let (wide, narrow) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let formula = "count ~ x + (1 | site)";
    run(&[formula, "--family", "poisson", "--profile"], wide.path());
    run(
        &[formula, "--family", "poisson", "--profile", "0.5"],
        narrow.path(),
    );
    for (w, n) in intervals(wide.path()).iter().zip(intervals(narrow.path())) {
        assert!(w.2 < n.2 && n.3 < w.3, "{w:?} {n:?}");
    }
}

#[test]
fn what_cannot_be_profiled_is_refused_or_said() {
    let dir = tempfile::tempdir().unwrap();
    let command = |args: &[&str]| glmm_refused(args, &data(), &dir.path().join("no"));
    let e = command(&["count ~ x + (1 | site)", "--reml", "--profile"]);
    assert!(e.contains("--profile") && e.contains("--reml"), "{e}");
    let e = command(&["count ~ x + (1 | site)", "--profile", "1.5"]);
    assert!(e.contains("between 0 and 1"), "{e}");
    let e = command(&[
        "count ~ x + (1 | site)",
        "--family",
        "poisson",
        "--method",
        "em",
        "--profile",
    ]);
    assert!(e.contains("--method em"), "{e}");
    // Crossed counts are fitted by Langevin chains: the fit stands, without intervals.
    let out = dir.path().join("crossed");
    let crossed = "count ~ x + (1 | site) + (1 | dose)";
    let args = [
        crossed,
        "--family",
        "poisson",
        "--profile",
        "--ranef-draws",
        "0",
    ];
    let o = glmm(&args, &data(), &out);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("no profile intervals"), "{err}");
    assert!(!out.join("confint.csv").exists());
}

/// A weighted Gaussian fit's profile intervals (`--weights w`, `tests/data/glmm_weights.csv`):
/// the sd's and σ's are lme4's `confint(lmer(y ~ x + (1 | site), weights = w, REML = FALSE))`;
/// its β's are not, since lme4 1.1-31's profile of a weighted fit's fixed effects is wrong
/// (it warns of a non-monotonic profile and gives (0.766, 0.796) for the intercept, against its
/// Wald interval (0.401, 1.136)). The β's ends here are instead the roots of lmer's own
/// deviance, 2 (ℓ̂ − ℓ(β_j)) = χ²₁(0.95), each β_j held by an offset and the rest refitted
/// (`uniroot` to 1e-10).
#[test]
fn weighted_profile_intervals_are_the_roots_of_lmer_s_deviance() {
    let dir = tempfile::tempdir().unwrap();
    let data = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/glmm_weights.csv");
    glmm(
        &["y ~ x + (1 | site)", "--weights", "w", "--profile"],
        &data,
        dir.path(),
    );
    close(
        &intervals(dir.path()),
        &[
            ("fixed", "(Intercept)", 0.376716, 1.161205),
            ("fixed", "x", 0.407531, 0.618392),
            ("sd", "(Intercept)", 0.49792322, 1.07496096),
            ("sigma", "Residual", 0.62506759, 0.86154881),
        ],
    );
}
