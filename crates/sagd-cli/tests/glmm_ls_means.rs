//! `sagd glmm --ls-means`: lmerTest's `ls_means(fit)` (and `pairwise = TRUE`) with
//! Satterthwaite's and Kenward and Roger's degrees of freedom against lmerTest 3.1-3 (pbkrtest
//! 0.5.2, R 4.2.2, lme4 1.1-31) on `tests/data/glmm_factorial.csv`, and a Poisson model's Wald
//! means against glmer's estimate and covariance (nAGQ = 25) on `glmm_counts.csv`.

mod common;
use common::{glmm, json, refused, sagd};

use std::path::{Path, PathBuf};

fn data(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(name)
}

/// Per fit (`s`: REML, Satterthwaite; `sp`: its pairwise differences; `kr`: REML,
/// Kenward-Roger; `ml90`: ML, Satterthwaite, 90% intervals; `wald`: Poisson), each mean's name,
/// estimate, standard error, degrees of freedom, interval's ends and p: lmerTest's
/// `ls_means(fit)` of `lmer(y ~ A * B + x + (1 | subj))` with A and B factors, and for `wald`
/// L β̂ and √(L V Lᵀ) of `glmer(count ~ x + dose + (1 | site), family = poisson, nAGQ = 25)`
/// with x at its mean over the model's rows (emmeans' reference grid).
const REFERENCE: &str = "\
s,Ahi,3.17120636997,0.191114748772,35.8966195794,2.78356893138,3.55884380857,2.04397299071e-18
s,Alo,2.2262620914,0.180052944793,29.8405440947,1.85846250713,2.59406167567,2.85107330458e-13
s,Amid,2.28057833149,0.187238858414,33.7487295389,1.89995880895,2.66119785403,6.65833824369e-14
s,Bno,2.14420220263,0.157662443994,18.0924426899,1.8130869708,2.47531743446,6.10736356984e-11
s,Byes,2.97449565928,0.186923794358,32.3724811474,2.59391609237,3.35507522618,7.29109348691e-17
s,Ahi:Bno,2.66939065844,0.192950165447,37.0007817672,2.2784367663,3.06034455059,3.36482004816e-16
s,Alo:Bno,1.96745742761,0.204708938529,44.4795932049,1.55501927591,2.37989557931,2.00183682785e-12
s,Amid:Bno,1.79575852185,0.201893253529,41.8286613057,1.3882719905,2.20324505319,3.4038852613e-11
s,Ahi:Byes,3.67302208151,0.281562162567,75.5191422201,3.11218468393,4.23385947908,4.93224953669e-21
s,Alo:Byes,2.48506675519,0.236960371587,61.59649712,2.01132799026,2.95880552012,2.48777424937e-15
s,Amid:Byes,2.76539814114,0.265292699621,70.8823655581,2.23640430869,3.29439197358,5.96223547486e-16
sp,Ahi - Alo,0.944944278572,0.186589722374,71.249746962,0.57291753736,1.31697101978,3.09485299285e-06
sp,Ahi - Amid,0.890628038484,0.191436130142,70.7328337732,0.50889024981,1.27236582716,1.48748094686e-05
sp,Alo - Amid,-0.0543162400875,0.184296482869,71.070336957,-0.421786687502,0.313154207327,0.769065391347
sp,Bno - Byes,-0.830293456643,0.166683451799,76.2310652875,-1.16225604963,-0.498330863657,3.83858979117e-06
sp,Ahi:Bno - Alo:Bno,0.70193323083,0.210187049751,71.0828714809,0.282840624037,1.12102583762,0.00133898662745
sp,Ahi:Bno - Amid:Bno,0.873632136598,0.208695520905,72.0991453514,0.457614992951,1.28964928024,7.90781854938e-05
sp,Ahi:Bno - Ahi:Byes,-1.00363142306,0.29481290114,76.0112365098,-1.59080079952,-0.416462046601,0.00106182706725
sp,Ahi:Bno - Alo:Byes,0.184323903251,0.242463949309,71.58681255,-0.299066813273,0.667714619776,0.449624661007
sp,Ahi:Bno - Amid:Byes,-0.0960074826917,0.274274576426,74.4913197139,-0.642451619604,0.450436654221,0.727295358054
sp,Alo:Bno - Amid:Bno,0.171698905768,0.219635544703,71.659608583,-0.266172085774,0.60956989731,0.43694001639
sp,Alo:Bno - Ahi:Byes,-1.70556465389,0.297961759715,74.1604814009,-2.29924507352,-1.11188423426,2.07829763165e-07
sp,Alo:Bno - Alo:Byes,-0.517609327578,0.257751203137,72.8822453769,-1.03132071757,-0.00389793758602,0.0483312499311
sp,Alo:Bno - Amid:Byes,-0.797940713521,0.285245365003,73.422110616,-1.3663788498,-0.229502577241,0.00657425943431
sp,Amid:Bno - Ahi:Byes,-1.87726355966,0.29462179053,74.819046471,-2.46420353066,-1.29032358866,1.37291118622e-08
sp,Amid:Bno - Alo:Byes,-0.689308233346,0.250237183169,72.4295940418,-1.18809639704,-0.19052006965,0.00742576627964
sp,Amid:Bno - Amid:Byes,-0.96963961929,0.286441345105,76.5982301969,-1.54006495455,-0.39921428403,0.00112466868642
sp,Ahi:Byes - Alo:Byes,1.18795532631,0.317591962321,73.836878219,0.555116297475,1.82079435515,0.000360347117502
sp,Ahi:Byes - Amid:Byes,0.90762394037,0.331620408576,73.1784755529,0.246732574176,1.56851530656,0.00777939637794
sp,Alo:Byes - Amid:Byes,-0.280331385943,0.303515671263,74.170699727,-0.885076436715,0.324413664829,0.358682233634
kr,Ahi,3.17120636997,0.191337115437,36.5006369535,2.78334143704,3.55907130291,1.43631098354e-18
kr,Alo,2.2262620914,0.180105887571,30.4057586653,1.85864252148,2.59388166133,2.16779249102e-13
kr,Amid,2.28057833149,0.187402941693,34.3418819457,1.89986933733,2.66128732565,5.24300694163e-14
kr,Bno,2.14420220263,0.157786224682,18.5098061863,1.81335888685,2.47504551842,4.48244641479e-11
kr,Byes,2.97449565928,0.187485255505,32.9569994521,2.59303513139,3.35595618716,5.42752692679e-17
kr,Ahi:Bno,2.66939065844,0.193176676557,37.6091482407,2.27819141337,3.06058990352,2.57718682546e-16
kr,Alo:Bno,1.96745742761,0.204865577349,45.0953989372,1.5548610651,2.38005379013,1.77831281025e-12
kr,Amid:Bno,1.79575852185,0.202300736475,42.4462112822,1.38762621869,2.203890825,3.16340383473e-11
kr,Ahi:Byes,3.67302208151,0.282836746907,75.76120787,3.1096751647,4.23636899831,5.89219048061e-21
kr,Alo:Byes,2.48506675519,0.237422267635,62.0861787364,2.01047950857,2.95965400181,2.44317015396e-15
kr,Amid:Byes,2.76539814114,0.266457139925,71.221217247,2.23412629045,3.29666999182,6.81414874021e-16
ml90,Ahi,3.17125044098,0.183850583143,38.3476242251,2.86135691403,3.48114396793,1.15336147407e-19
ml90,Alo,2.226210606,0.173232210286,31.8481463654,1.9327328101,2.5196884019,3.80998676516e-14
ml90,Amid,2.28056566695,0.180129904035,36.0402960306,1.97646174045,2.58466959344,7.86180801947e-15
ml90,Bno,2.14424680351,0.151749533433,19.2957515707,1.8820574166,2.40643619041,1.24205438689e-11
ml90,Byes,2.97443767245,0.179832145676,34.5727305463,2.67049613165,3.27837921324,5.38668807406e-18
ml90,Ahi:Bno,2.66934956975,0.185612270621,39.5340849539,2.35671882016,2.98198031935,2.69137795532e-17
ml90,Alo:Bno,1.96744907251,0.196898495437,47.5850281633,1.63714946989,2.29774867512,2.86195228804e-13
ml90,Amid:Bno,1.79594176826,0.194198563497,44.7339200197,1.46975860434,2.12212493217,6.00814025894e-12
ml90,Ahi:Byes,3.6731513122,0.270705917434,81.433251311,3.22275581472,4.12354680969,1.32165665551e-22
ml90,Alo:Byes,2.48497213949,0.227865593204,66.1539502761,2.10484328274,2.86510099625,2.01134547844e-16
ml90,Amid:Byes,2.76518956564,0.255080152604,76.3306813074,2.34046521007,3.1899139212,4.13576110566e-17
wald,dosectl,0.544805936435,0.149268735481,Inf,0.252244590873,0.837367281996,0.000262410994313
wald,dosehigh,-0.104889554052,0.185868305181,Inf,-0.469184738074,0.259405629971,0.572535083727
wald,doselow,0.497071529425,0.149902495917,Inf,0.203268036234,0.790875022616,0.000913270488253
";

/// `sagd glmm FORMULA ARGS --ls-means …` on `file`: ls_means.csv's rows by name (term, then
/// estimate, se, df, lower, upper, p), the printout and result.json.
fn ls_means(args: &[&str], file: &Path) -> (Vec<(String, [f64; 6])>, String, serde_json::Value) {
    let dir = tempfile::tempdir().unwrap();
    let printed = String::from_utf8_lossy(&glmm(args, file, dir.path()).stdout).into_owned();
    let mut reader = csv::Reader::from_path(dir.path().join("ls_means.csv")).unwrap();
    let rows = (reader.records())
        .map(|r| {
            let r = r.unwrap();
            let v = |k: usize| r[k].parse::<f64>().unwrap();
            (r[1].to_string(), [v(2), v(3), v(4), v(6), v(7), v(8)])
        })
        .collect();
    (rows, printed, json(&dir.path().join("result.json")))
}

/// The reference's rows of fit `tag`, in its order.
fn reference(tag: &str) -> Vec<(String, [f64; 6])> {
    (REFERENCE.lines())
        .filter_map(|line| {
            let f: Vec<&str> = line.split(',').collect();
            (f[0] == tag).then(|| {
                let v = |k: usize| f[k].parse::<f64>().unwrap();
                (f[1].to_string(), [v(2), v(3), v(4), v(5), v(6), v(7)])
            })
        })
        .collect()
}

/// Every row of `got` is the reference's `tag`, in order: the estimate and the interval's ends
/// within `abs`, the standard error within `rel` of itself, the degrees of freedom within 10 ×
/// `rel` (lmerTest's derivatives are numerical) and p within 1e-3 of itself.
fn matches(tag: &str, got: &[(String, [f64; 6])], (abs, rel): (f64, f64)) {
    let want = reference(tag);
    assert_eq!(got.len(), want.len(), "{tag}: {got:?}");
    for ((name, g), (wname, w)) in got.iter().zip(&want) {
        assert_eq!(name, wname, "{tag}");
        let close = |k: usize, tol: f64, relative: bool| {
            let scale = if relative { w[k].abs() } else { 1.0 };
            let ok = match w[k].is_finite() {
                true => (g[k] - w[k]).abs() <= tol * scale,
                false => g[k] == w[k],
            };
            assert!(ok, "{tag} {name}: column {k} is {} against {}", g[k], w[k]);
        };
        close(0, abs, false);
        close(1, rel, true);
        close(2, 10.0 * rel, true);
        close(3, abs, false);
        close(4, abs, false);
        close(5, 1e-3, true);
    }
}

const FACTORIAL: &str = "y ~ A * B + x + (1 | subj)";

/// The means of A, B and A:B (x is numeric: no means of its own, at its mean in the others')
/// by REML with Satterthwaite's and Kenward and Roger's degrees of freedom, and by ML at 90%:
/// lmerTest's to 1e-6 (se, and df to 1e-5).
#[test]
fn ls_means_are_lmertest_s() {
    let file = data("glmm_factorial.csv");
    let (rows, printed, result) = ls_means(&[FACTORIAL, "--reml", "--ls-means"], &file);
    matches("s", &rows, (1e-6, 1e-6));
    assert!(printed.contains("Least-squares means (lmerTest's ls_means; Satterthwaite's degrees of freedom; 95% intervals)"), "{printed}");
    let m = &result["ls_means"];
    assert_eq!(
        (m["ddf"].as_str(), m["pairwise"].as_bool()),
        (Some("satterthwaite"), Some(false))
    );
    assert_eq!(m["means"][0]["term"], "A");
    assert_eq!(m["means"][5]["name"], "Ahi:Bno");
    let kr = ["--reml", "--ddf", "kenward-roger", "--ls-means"];
    let (rows, printed, _) = ls_means(&[&[FACTORIAL][..], &kr].concat(), &file);
    matches("kr", &rows, (1e-6, 1e-6));
    assert!(
        printed.contains("Kenward-Roger's degrees of freedom"),
        "{printed}"
    );
    let ml = [FACTORIAL, "--ls-means", "--ls-means-level", "0.9"];
    matches("ml90", &ls_means(&ml, &file).0, (1e-6, 1e-6));
}

/// `--ls-means pairwise`: every pair of each term's means, in lmerTest's order and names.
#[test]
fn pairwise_differences_are_lmertest_s() {
    let file = data("glmm_factorial.csv");
    let (rows, printed, result) = ls_means(&[FACTORIAL, "--reml", "--ls-means", "pairwise"], &file);
    matches("sp", &rows, (1e-6, 1e-6));
    assert!(
        printed.contains("Pairwise differences of least-squares means"),
        "{printed}"
    );
    assert_eq!(result["ls_means"]["pairwise"], true);
}

/// A Poisson model's means on the log scale by Wald z tests: glmer's L β̂ and √(L V Lᵀ) to the
/// two fits' agreement (5e-5: glmer's optimiser stops there), infinite degrees of freedom
/// (null in result.json).
#[test]
fn a_glmm_s_means_are_wald_z_on_the_link_scale() {
    let file = data("glmm_counts.csv");
    let args = [
        "count ~ x + dose + (1 | site)",
        "--family",
        "poisson",
        "--ls-means",
    ];
    let (rows, printed, result) = ls_means(&args, &file);
    matches("wald", &rows, (5e-5, 5e-5));
    assert!(
        printed.contains("Wald z tests on the link's scale"),
        "{printed}"
    );
    assert!(result["ls_means"]["means"][0]["df"].is_null());
}

/// glmer's (nAGQ = 25) means of `count ~ x + dose + (1 | site)` on the response scale: per mean
/// (`rate`) or pairwise ratio (`ratio`) its name, exp(L β̂), exp(L β̂) √(L V Lᵀ) and the
/// interval's ends exp(L β̂ ∓ 1.96 √(L V Lᵀ)).
const RESPONSE: &str = "\
rate,dosectl,1.7242737312,0.257380159479,1.28691076542,2.3102766563
rate,dosehigh,0.900423965274,0.16736027637,0.625512016597,1.29615945933
rate,doselow,1.64390010174,0.24642472829,1.22540087607,2.20532529174
ratio,dosectl / dosehigh,1.91495761741,0.335776356164,1.35801970214,2.7003015278
ratio,dosectl / doselow,1.04889203995,0.136056042075,0.813425876376,1.35251968671
ratio,dosehigh / doselow,0.547736425296,0.0967799781325,0.387411185364,0.774410246609
";

/// `--ls-means-scale response`: a Poisson fit's means as rates and its pairwise differences as
/// ratios (named `a / b`), within 1e-4 of glmer's, whose optimiser stops there; the tests stay
/// the link's. Without --ls-means the scale is refused.
#[test]
fn a_poisson_fit_s_means_on_the_response_scale_are_rates_and_ratios() {
    let file = data("glmm_counts.csv");
    let link = ls_means(
        &[
            "count ~ x + dose + (1 | site)",
            "--family",
            "poisson",
            "--ls-means",
        ],
        &file,
    )
    .0;
    for (kind, asked) in [("rate", "means"), ("ratio", "pairwise")] {
        let args = [
            "count ~ x + dose + (1 | site)",
            "--family",
            "poisson",
            "--ls-means",
            asked,
            "--ls-means-scale",
            "response",
        ];
        let (rows, printed, result) = ls_means(&args, &file);
        assert!(printed.contains("on the response scale"), "{printed}");
        assert_eq!(result["ls_means"]["scale"], "response");
        let want: Vec<Vec<&str>> = (RESPONSE.lines())
            .filter(|l| l.starts_with(&format!("{kind},")))
            .map(|l| l.split(',').skip(1).collect())
            .collect();
        assert_eq!(rows.len(), want.len());
        for ((name, g), w) in rows.iter().zip(&want) {
            assert_eq!(name, w[0]);
            for (k, col) in [(0, 1), (1, 2), (3, 3), (4, 4)] {
                let v: f64 = w[col].parse().unwrap();
                assert!(
                    (g[k] / v - 1.0).abs() < 1e-4,
                    "{name} column {k}: {} against {v}",
                    g[k]
                );
            }
        }
        if kind == "rate" {
            // The link's p-values, unchanged.
            for ((_, g), (_, l)) in rows.iter().zip(&link) {
                assert_eq!(g[5], l[5]);
            }
        }
    }
    let dir = tempfile::tempdir().unwrap();
    let err = refused(
        sagd()
            .args([
                "glmm",
                "count ~ x + dose + (1 | site)",
                "--family",
                "poisson",
                "--quiet",
                "--ls-means-scale",
                "response",
                "--data",
            ])
            .arg(&file)
            .arg("--out")
            .arg(dir.path()),
    );
    assert!(
        err.contains("--ls-means-scale response: give --ls-means too"),
        "{err}"
    );
}

/// A model without a term of categorical variables only has no means: the fit stands, a
/// warning says why and no ls_means.csv is written; bad levels and EM's Gaussian fits are
/// refused by name.
#[test]
fn no_means_without_factor_terms_and_bad_flags_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let file = data("glmm_factorial.csv");
    let o = glmm(&["y ~ x + (1 | subj)", "--ls-means"], &file, dir.path());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains(
            "no least-squares means: the fixed effects have no term of categorical variables only"
        ),
        "{err}"
    );
    assert!(!dir.path().join("ls_means.csv").exists());
    assert!(dir.path().join("result.json").exists());
    for (flags, says) in [
        (
            &["--ls-means", "--ls-means-level", "1.5"][..],
            "--ls-means-level 1.5: give the intervals' level between 0 and 1",
        ),
        (
            &["--ls-means", "--method", "em"][..],
            "--ls-means: a Gaussian model's tests need the exact likelihood",
        ),
        (&["--ls-means", "all"][..], "invalid value 'all'"),
    ] {
        let err = refused(
            sagd()
                .args(["glmm", FACTORIAL, "--quiet", "--data"])
                .arg(&file)
                .arg("--out")
                .arg(dir.path().join("refused"))
                .args(flags),
        );
        assert!(err.contains(says), "{flags:?}: {err}");
    }
}

/// A term of 400 levels has 79,800 pairwise differences, each a test of its own: refused by
/// name (at most 50,000), the fit standing without them; its 400 means are made.
#[test]
fn too_many_pairwise_differences_are_refused_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("levels.csv");
    let mut text = String::from("y,f,g\n");
    for i in 0..1600 {
        let y = ((i * 37 % 101) as f64 - 50.0) / 25.0 + (i % 400) as f64 * 0.001;
        text.push_str(&format!("{y},L{:03},G{}\n", i % 400, i * 7 % 20));
    }
    std::fs::write(&file, text).unwrap();
    let out = dir.path().join("out");
    let o = glmm(&["y ~ f + (1 | g)", "--ls-means", "pairwise"], &file, &out);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains(
            "no least-squares means: invalid setting `ls_means` = 79800 pairwise differences"
        ),
        "{err}"
    );
    assert!(!out.join("ls_means.csv").exists() && out.join("result.json").exists());
    let (rows, _, _) = ls_means(&["y ~ f + (1 | g)", "--ls-means"], &file);
    assert_eq!(rows.len(), 400);
}
