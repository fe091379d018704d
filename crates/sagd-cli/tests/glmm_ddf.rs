//! `sagd glmm --ddf`: the fixed effects' t tests and each term's type III F test with
//! Satterthwaite's or Kenward and Roger's degrees of freedom, against lmerTest 3.1-3 (with
//! pbkrtest 0.5.2 for Kenward-Roger; R 4.2.2, lme4 1.1-31) on `tests/data/glmm_counts.csv`,
//! `glmm_factorial.csv` and `glmm_weights.csv`.

mod common;
use common::{glmm, refused, sagd};

use std::path::{Path, PathBuf};

fn data() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/glmm_counts.csv")
}

fn factorial() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/glmm_factorial.csv")
}

/// lmerTest 3.1-3's `coef(summary(fit))` (R 4.2.2, lme4 1.1-31): per fit, each fixed effect's
/// standard error, Satterthwaite's degrees of freedom and the t test's p-value.
const LMERTEST: &str = "\
reml,0.325529380617,46.1385327864,2.56695316639e-08
reml,0.200407585302,63.1822914510,2.31957687763e-04
reml,0.284970157699,151.1124505586,1.75535495202e-03
reml,0.270736573938,143.4894045321,7.90134925587e-01
reml,0.294306710652,99.9411829810,1.21889490207e-01
reml,0.266397507334,153.4368952777,5.35793528451e-01
ml,0.319406575594,47.7594291518,1.35696330232e-08
ml,0.194255368414,63.2235421137,1.64412627691e-04
ml,0.280425002459,155.9434428134,1.38949063023e-03
ml,0.265506014443,147.5833676104,7.91059548310e-01
ml,0.286964557687,99.1894617065,1.17957589065e-01
ml,0.261669209553,158.2472043459,5.28369995126e-01
weights,0.1941446362385,14.0798559677,1.41196027676e-03
weights,0.0534838850733,75.3796817473,1.06070252054e-14
";

/// `sagd glmm` with `args` and `--ddf METHOD` on `file`: its printout and result.json.
fn with_ddf(method: &str, args: &[&str], file: &Path) -> (String, serde_json::Value) {
    let dir = tempfile::tempdir().unwrap();
    let all: Vec<&str> = args.iter().copied().chain(["--ddf", method]).collect();
    let printed = String::from_utf8_lossy(&glmm(&all, file, dir.path()).stdout).into_owned();
    let result = std::fs::read_to_string(dir.path().join("result.json")).unwrap();
    (printed, serde_json::from_str(&result).unwrap())
}

/// lmerTest 3.1-3's `anova(fit)` (type III, Satterthwaite): per fit, each term's name, its
/// numerator degrees of freedom, denominator degrees of freedom, F and p.
const LMERTEST_ANOVA: &str = "\
reml,x,1,20.4826333192,18.76201,0.0003090
reml,dose,2,150.2435221639,6.01838,0.0030597
reml,x:dose,2,110.5844645650,1.22128,0.2987976
factorial-reml,A,2,71.0235304579,15.56794044698,2.47479997618e-06
factorial-reml,B,1,76.2310655460,24.81294245087,3.83858902786e-06
factorial-reml,x,1,76.4751889377,11.00455241643,1.39292029385e-03
factorial-reml,A:B,2,74.8968106563,1.02240202126,3.64694835559e-01
factorial-ml,A,2,76.7391129245,16.86333120995,8.50188512436e-07
factorial-ml,B,1,82.4158553241,26.86242925237,1.52688231499e-06
factorial-ml,x,1,82.6819732174,11.92069993819,8.77561146933e-04
factorial-ml,A:B,2,80.9600608738,1.10712901476,3.35457658685e-01
";

/// `--ddf satterthwaite`'s type III table against lmerTest's `anova(fit)`: the correlated
/// slopes' REML fit of `glmm_counts.csv` (a numeric variable crossed with a factor) and
/// `y ~ A * B + x + (1 | subj)` on `glmm_factorial.csv` (two factors crossed, unbalanced: 92
/// rows of 16 subjects), by REML and ML. F to 1e-5 and the degrees of freedom and p to 1e-4 of
/// themselves (lmerTest prints 7 digits of F and p for the first fit).
#[test]
fn type3_tests_are_lmertest_s_anova() {
    let factorial = factorial();
    let slopes = "count ~ x * dose + (1 + x | site)";
    let two = "y ~ A * B + x + (1 | subj)";
    let fits: [(&str, &[&str], PathBuf); 3] = [
        ("reml", &[slopes, "--reml"], data()),
        ("factorial-reml", &[two, "--reml"], factorial.clone()),
        ("factorial-ml", &[two], factorial),
    ];
    for (name, args, file) in fits {
        let (printed, r) = with_ddf("satterthwaite", args, &file);
        assert!(
            printed.contains("Type III analysis of variance"),
            "{printed}"
        );
        let got = r["anova_type3"].as_array().unwrap();
        let want: Vec<Vec<&str>> = (LMERTEST_ANOVA.lines())
            .filter(|l| l.starts_with(&format!("{name},")))
            .map(|l| l.split(',').skip(1).collect())
            .collect();
        assert_eq!(got.len(), want.len(), "{name}: {got:?}");
        for (g, w) in got.iter().zip(&want) {
            assert_eq!(g["term"], w[0], "{name}");
            assert_eq!(g["num_df"].to_string(), w[1], "{name}");
            let rel = |key: &str, v: &str| {
                (g[key].as_f64().unwrap() / v.parse::<f64>().unwrap() - 1.0).abs()
            };
            assert!(rel("den_df", w[2]) < 1e-4, "{name}: {g} against {w:?}");
            assert!(rel("f", w[3]) < 1e-5, "{name}: {g} against {w:?}");
            assert!(rel("p", w[4]) < 1e-4, "{name}: {g} against {w:?}");
        }
    }
}

/// `--ddf satterthwaite` against lmerTest's `summary(fit)`: `lmer(count ~ x * dose + (1 + x |
/// site), REML = TRUE` and `FALSE)` on glmm_counts.csv, and the weighted `lmer(y ~ x + (1 |
/// site), weights = w)` (REML) on glmm_weights.csv. The two maximisers' θ̂ differ by about 1e-6,
/// which moves the errors by about that and the degrees of freedom by 1e-5 of themselves. Other
/// families and EM's fits are refused by name.
#[test]
fn satterthwaite_tests_are_lmertest_s() {
    let slopes = "count ~ x * dose + (1 + x | site)";
    let weights = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/glmm_weights.csv");
    let fits: [(&str, &[&str], PathBuf); 3] = [
        ("reml", &[slopes, "--reml"], data()),
        ("ml", &[slopes], data()),
        (
            "weights",
            &["y ~ x + (1 | site)", "--weights", "w", "--reml"],
            weights,
        ),
    ];
    for (name, args, file) in fits {
        let (printed, r) = with_ddf("satterthwaite", args, &file);
        assert!(
            printed.contains("Satterthwaite's degrees of freedom"),
            "{printed}"
        );
        let want: Vec<Vec<f64>> = (LMERTEST.lines())
            .filter(|l| l.starts_with(&format!("{name},")))
            .map(|l| l.split(',').skip(1).map(|v| v.parse().unwrap()).collect())
            .collect();
        let got = r["satterthwaite"].as_array().unwrap();
        assert_eq!(got.len(), want.len(), "{name}");
        for (g, w) in got.iter().zip(&want) {
            let rel = |key: &str, v: f64| (g[key].as_f64().unwrap() / v - 1.0).abs();
            assert!(rel("se", w[0]) < 1e-5, "{name}: {g} against {w:?}");
            assert!(rel("df", w[1]) < 1e-4, "{name}: {g} against {w:?}");
            assert!(rel("p", w[2]) < 1e-4, "{name}: {g} against {w:?}");
        }
    }
    for (flags, says) in [
        (&["--family", "poisson"][..], "Gaussian family"),
        (&["--method", "em"][..], "exact likelihood"),
    ] {
        let err = refused(
            sagd()
                .args([
                    "glmm",
                    "count ~ x + (1 | site)",
                    "--ddf",
                    "satterthwaite",
                    "--data",
                ])
                .arg(data())
                .args(flags)
                .args(["--out", "/nonexistent/never"]),
        );
        assert!(err.contains("--ddf") && err.contains(says), "{err}");
    }
}

/// lmerTest 3.1-3's `summary(fit, ddf = "Kenward-Roger")` and `anova(fit, ddf =
/// "Kenward-Roger")` (pbkrtest 0.5.2): per REML fit, each fixed effect's standard error from
/// β̂'s adjusted covariance, degrees of freedom and p; then each term's NumDF, DenDF, F, p and
/// Sum Sq (pbkrtest's unscaled F times σ² times NumDF: the slopes' F scaling is 0.9997 for
/// dose).
const KENWARD_ROGER: &str = "\
factorial,t,0.1927064340519,37.4474232152,1.50135539632e-16
factorial,t,0.2105227462852,71.4178309180,1.35861656052e-03
factorial,t,0.2092661122826,72.4139758119,8.20197919268e-05
factorial,t,0.2969648810174,76.2421933987,1.14661281966e-03
factorial,t,0.0903137931697,76.6955274129,1.50790355386e-03
factorial,t,0.3905326124777,74.8492618773,2.17194425413e-01
factorial,t,0.4029337781992,75.0113050745,9.32994341316e-01
factorial,F,2,71.3587182956,15.5211901463,2.53175832178e-06,13.6654083453
factorial,F,1,76.4570087133,24.4444698717,4.41572594292e-06,10.7608867261
factorial,F,1,76.6955274129,10.8340694447,1.50790355386e-03,4.76934834075
factorial,F,2,75.1549911349,1.0100806553,3.69079329037e-01,0.889311465346
slopes,t,0.327733514434,46.3004849028,2.95413595219e-08
slopes,t,0.208188518302,66.2352246388,3.63313377070e-04
slopes,t,0.289969770913,151.1927129611,2.09424148955e-03
slopes,t,0.278292851110,143.7819844282,7.95703193535e-01
slopes,t,0.309173986274,96.9727237780,1.40757997831e-01
slopes,t,0.273313733707,152.8726707797,5.46154952957e-01
slopes,F,1,22.445183580,17.63335437772,3.57864348031e-04,32.5309205899
slopes,F,2,148.520523650,5.85000687650,3.58494437684e-03,21.5907417974
slopes,F,2,105.570330431,1.10195112458,3.36012643048e-01,4.07312300547
";

/// `--ddf kenward-roger` against lmerTest's Kenward-Roger tests (pbkrtest's) on the unbalanced
/// factorial design and the correlated slopes' fit, both by REML: standard errors to 1e-5 of
/// themselves, degrees of freedom, F and p to 1e-4 (the two maximisers' θ̂ differ by about
/// 1e-6). ML fits and prior weights are refused by name, as lmerTest refuses the first.
#[test]
fn kenward_roger_tests_are_lmertest_s() {
    let fits: [(&str, &[&str], PathBuf); 2] = [
        (
            "factorial",
            &["y ~ A * B + x + (1 | subj)", "--reml"],
            factorial(),
        ),
        (
            "slopes",
            &["count ~ x * dose + (1 + x | site)", "--reml"],
            data(),
        ),
    ];
    for (name, args, file) in fits {
        let (printed, r) = with_ddf("kenward-roger", args, &file);
        assert!(
            printed.contains("Kenward-Roger's degrees of freedom"),
            "{printed}"
        );
        assert!(printed.contains("Kenward-Roger's method"), "{printed}");
        assert_eq!(r["anova_type3_ddf"], "kenward_roger");
        let rows = |kind: &str| -> Vec<Vec<f64>> {
            (KENWARD_ROGER.lines())
                .filter(|l| l.starts_with(&format!("{name},{kind},")))
                .map(|l| l.split(',').skip(2).map(|v| v.parse().unwrap()).collect())
                .collect()
        };
        let rel =
            |g: &serde_json::Value, key: &str, v: f64| (g[key].as_f64().unwrap() / v - 1.0).abs();
        let (t, want_t) = (r["kenward_roger"].as_array().unwrap(), rows("t"));
        assert_eq!(t.len(), want_t.len(), "{name}");
        for (g, w) in t.iter().zip(&want_t) {
            assert!(rel(g, "se", w[0]) < 1e-5, "{name}: {g} against {w:?}");
            assert!(rel(g, "df", w[1]) < 1e-4, "{name}: {g} against {w:?}");
            assert!(rel(g, "p", w[2]) < 1e-4, "{name}: {g} against {w:?}");
        }
        let (f, want_f) = (r["anova_type3"].as_array().unwrap(), rows("F"));
        assert_eq!(f.len(), want_f.len(), "{name}");
        for (g, w) in f.iter().zip(&want_f) {
            assert_eq!(g["num_df"].as_f64().unwrap(), w[0], "{name}");
            assert!(rel(g, "den_df", w[1]) < 1e-4, "{name}: {g} against {w:?}");
            assert!(rel(g, "f", w[2]) < 1e-4, "{name}: {g} against {w:?}");
            assert!(rel(g, "p", w[3]) < 1e-4, "{name}: {g} against {w:?}");
            assert!(rel(g, "sum_sq", w[4]) < 2e-5, "{name}: {g} against {w:?}");
        }
    }
    let weights = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/glmm_weights.csv");
    let counts = "count ~ x + (1 | site)";
    for (formula, flags, file, says) in [
        (counts, &[][..], data(), "REML fits"),
        (
            "y ~ x + (1 | site)",
            &["--reml", "--weights", "w"][..],
            weights,
            "weights",
        ),
    ] {
        let err = refused(
            sagd()
                .args(["glmm", formula, "--ddf", "kenward-roger", "--data"])
                .arg(file)
                .args(flags)
                .args(["--out", "/nonexistent/never"]),
        );
        assert!(
            err.contains("--ddf kenward-roger") && err.contains(says),
            "{err}"
        );
    }
}

/// lmerTest 3.1-3's `anova(fit, type = 1)` and `anova(fit, type = 2)` (pbkrtest 0.5.2 for
/// Kenward-Roger): per fit and type, each term's Sum Sq, Mean Sq, NumDF, DenDF, F and p. `f`:
/// `y ~ A * B + x + (1 | subj)` by REML on glmm_factorial.csv (`kr`: Kenward-Roger); `g`: `y ~
/// x * A + B + (1 | subj)` by ML (x is contained in x:A, A is not: their numeric variables
/// differ); `s`: the correlated slopes of glmm_counts.csv by REML.
const LMERTEST_TYPES: &str = "\
f1,A,13.5737692208,6.7868846104,2,69.9526742755,15.4171123451,2.83635963401e-06
f1,B,7.69635380695,7.69635380695,1,75.7779814926,17.4830659575,7.70451424554e-05
f1,x,4.87350818477,4.87350818477,1,76.7590746087,11.0706793341,0.00134825601007
f1,A:B,0.900158783097,0.450079391549,2,74.9015588882,1.02240202126,0.36469452429
f2,A,15.1650551029,7.58252755144,2,70.2370151824,17.2244978117,8.18783035929e-07
f2,B,10.624871594,10.624871594,1,75.9259782174,24.1354978639,5.03704280539e-06
f2,x,4.84439794999,4.84439794999,1,76.4751889377,11.0045524164,0.00139292029385
f2,A:B,0.900158783097,0.450079391549,2,74.8968106563,1.02240202126,0.364694835559
f1kr,A,13.5649066871,6.78245334353,2,70.3091953894,15.4070459403,2.82638720981e-06
f1kr,B,7.58974557531,7.58974557531,1,76.0142231405,17.2408943016,8.52303984698e-05
f1kr,x,4.79465151281,4.79465151281,1,76.9728457294,10.8915482245,0.00146548832123
f1kr,A:B,0.889311465346,0.444655732673,2,75.1549911349,1.0100806553,0.369079329037
f2kr,A,15.1489189293,7.57445946464,2,70.5880857972,17.2061695132,8.1884493775e-07
f2kr,B,10.474722586,10.474722586,1,76.1588709378,23.7944188185,5.73769953392e-06
f2kr,x,4.76934834075,4.76934834075,1,76.6955274129,10.8340694447,0.00150790355386
f2kr,A:B,0.889311465346,0.444655732673,2,75.1549911349,1.0100806553,0.369079329037
g1ml,x,2.49604788642,2.49604788642,1,83.1031646228,5.98982528573,0.0164951198846
g1ml,A,12.8994357912,6.4497178956,2,76.0976006346,15.4775409347,2.29169096654e-06
g1ml,B,10.3526628185,10.3526628185,1,82.170644137,24.8435303914,3.39781868934e-06
g1ml,x:A,0.0978546407808,0.0489273203904,2,80.7054341113,0.117412050639,0.889370324151
g2ml,x,4.67938640106,4.67938640106,1,83.3282262307,11.2292344787,0.00121195439986
g2ml,A,14.2461590076,7.12307950381,2,76.2683419536,17.093422749,7.35242906512e-07
g2ml,B,10.4102360486,10.4102360486,1,82.1904318789,24.9816902366,3.21502311416e-06
g2ml,x:A,0.0978546407808,0.0489273203904,2,80.7704349055,0.117412050639,0.889370202367
s1,x,37.9161125225,37.9161125225,1,18.9190030737,20.5523942738,0.000229481273925
s1,dose,23.5915187631,11.7957593815,2,147.06804257,6.39388063386,0.00217433265673
s1,x:dose,4.50616396881,2.25308198441,2,115.910470659,1.22128103843,0.298617712151
s2,x,39.8644558376,39.8644558376,1,18.9366097463,21.608491994,0.000176578822024
s2,dose,22.2060513268,11.1030256634,2,150.243522164,6.0183849526,0.00305965754292
s2,x:dose,4.50616396881,2.25308198441,2,110.584464565,1.22128103843,0.298797635769
";

/// `--anova-type 1` and `2` against lmerTest's type I and type II tables: Sum Sq to 2e-5 of
/// itself, DenDF and p to 1e-4, F to 2e-5 (the maximisers' θ̂ differ by about 1e-6). A type II
/// term that no other contains is tested whole, and its degrees of freedom differ from type
/// I's (the slopes' x:dose: 110.6 against 115.9): the rows of each hypothesis are lmerTest's.
#[test]
fn type1_and_type2_tables_are_lmertest_s() {
    let factorial = factorial();
    let fits: [(&str, &[&str], &PathBuf, &str); 4] = [
        (
            "f",
            &["y ~ A * B + x + (1 | subj)", "--reml"],
            &factorial,
            "satterthwaite",
        ),
        (
            "fkr",
            &["y ~ A * B + x + (1 | subj)", "--reml"],
            &factorial,
            "kenward-roger",
        ),
        (
            "gml",
            &["y ~ x * A + B + (1 | subj)"],
            &factorial,
            "satterthwaite",
        ),
        (
            "s",
            &["count ~ x * dose + (1 + x | site)", "--reml"],
            &data(),
            "satterthwaite",
        ),
    ];
    for (name, args, file, method) in fits {
        for kind in ["1", "2"] {
            let tag = match name.strip_suffix("kr").or(name.strip_suffix("ml")) {
                Some(stem) => format!("{stem}{kind}{}", &name[stem.len()..]),
                None => format!("{name}{kind}"),
            };
            let all: Vec<&str> = args.iter().copied().chain(["--anova-type", kind]).collect();
            let (printed, r) = with_ddf(method, &all, file);
            let heading = if kind == "1" {
                "Type I analysis"
            } else {
                "Type II analysis"
            };
            assert!(printed.contains(heading), "{printed}");
            let got = r[format!("anova_type{kind}")].as_array().unwrap().clone();
            let want: Vec<Vec<&str>> = (LMERTEST_TYPES.lines())
                .filter(|l| l.starts_with(&format!("{tag},")))
                .map(|l| l.split(',').skip(1).collect())
                .collect();
            assert_eq!(got.len(), want.len(), "{tag}");
            for (g, w) in got.iter().zip(&want) {
                assert_eq!(g["term"], w[0], "{tag}");
                assert_eq!(g["num_df"].as_f64().unwrap(), w[3].parse::<f64>().unwrap());
                for (key, k, tol) in [
                    ("sum_sq", 1, 2e-5),
                    ("mean_sq", 2, 2e-5),
                    ("den_df", 4, 1e-4),
                    ("f", 5, 2e-5),
                    ("p", 6, 1e-4),
                ] {
                    let (a, b) = (g[key].as_f64().unwrap(), w[k].parse::<f64>().unwrap());
                    assert!(
                        (a / b - 1.0).abs() < tol,
                        "{tag} {}: {key} {a} against {b}",
                        w[0]
                    );
                }
            }
        }
    }
    let err = refused(
        sagd()
            .args([
                "glmm",
                "count ~ x + (1 | site)",
                "--ddf",
                "satterthwaite",
                "--anova-type",
                "4",
                "--data",
            ])
            .arg(data())
            .args(["--out", "/nonexistent/never"]),
    );
    assert!(err.contains("--anova-type"), "{err}");
    let err = refused(
        sagd()
            .args([
                "glmm",
                "count ~ x + (1 | site)",
                "--anova-type",
                "2",
                "--data",
            ])
            .arg(data())
            .args(["--out", "/nonexistent/never"]),
    );
    assert!(
        err.contains("--anova-type 2: the terms' F tests come with --ddf"),
        "{err}"
    );
}
