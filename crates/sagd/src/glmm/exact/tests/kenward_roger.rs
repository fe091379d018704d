//! Kenward and Roger's tests against their closed forms in balanced designs, where they are
//! exact: β̂'s adjusted covariance is the fit's own, a one-way model's intercept has G − 1
//! degrees of freedom and a within-groups slope N − G − 1, and a balanced split plot's F test of
//! its between-subjects factor is the classical ANOVA's, unscaled, on a − 1 and S − a degrees of
//! freedom. Against pbkrtest on unbalanced data: crates/sagd-cli/tests/glmm_ddf.rs.

use super::super::kenward_roger::{pair, Param, Sums};
use super::satterthwaite::{split_plot, within};
use super::*;

fn reml(m: &Glmm) -> ExactFit {
    let settings = ExactSettings {
        criterion: Criterion::Reml,
        ..Default::default()
    };
    m.fit_exact(&settings).unwrap()
}

#[test]
fn balanced_designs_have_their_strata_s_degrees_of_freedom() {
    let (g, per) = (12, 5);
    let m = one_way(g, per, 5);
    let fit = reml(&m);
    let (se, df, _) = m.kenward_roger_tests(&fit.theta, &[]).unwrap().0[0];
    assert!((df - (g - 1) as f64).abs() < 1e-6, "{df}");
    // Var(μ̂) = (σ_b² + σ²/n)/G is linear in the variances: no adjustment.
    assert!((se / fit.se[0] - 1.0).abs() < 1e-6, "{se} vs {}", fit.se[0]);
    let m = within(g, 7);
    let fit = reml(&m);
    let (se, df, _) = m.kenward_roger_tests(&fit.theta, &[]).unwrap().0[1];
    let want = (g * per - g - 1) as f64;
    assert!((df - want).abs() < 1e-6 * want, "{df}");
    assert!((se / fit.se[1] - 1.0).abs() < 1e-6, "{se} vs {}", fit.se[1]);
}

/// The split plot's F test of A is Satterthwaite's (the classical one there, checked in
/// satterthwaite.rs), with Kenward and Roger's scaling 1.
#[test]
fn a_split_plot_s_f_test_is_the_classical_anova_s() {
    use crate::glmm::Formula;
    let (levels, per, obs) = (3, 4, 5);
    let frame = split_plot(levels, per, obs);
    let formula = Formula::parse("y ~ A + (1 | g)").unwrap();
    let m = (formula.design(&frame).unwrap())
        .glmm(Family::Gaussian)
        .unwrap();
    let fit = reml(&m);
    let l = formula.type3_contrasts(&frame).unwrap().remove(0).1;
    let hypotheses = std::slice::from_ref(&l);
    let (f, q, ddf, p) = m.kenward_roger_tests(&fit.theta, hypotheses).unwrap().1[0];
    let classical = m
        .satterthwaite_tests(&fit.theta, &fit.covariance, hypotheses)
        .unwrap()
        .1[0];
    assert_eq!(q, levels - 1);
    assert!((ddf - (levels * per - levels) as f64).abs() < 1e-5, "{ddf}");
    assert!(
        (f / classical.0 - 1.0).abs() < 1e-6,
        "{f} vs {}",
        classical.0
    );
    assert!(
        (p / classical.3 - 1.0).abs() < 1e-5,
        "{p} vs {}",
        classical.3
    );
}

#[test]
fn kenward_roger_is_an_unweighted_gaussian_model_s() {
    let m = intercepts(Family::Poisson, 10, 6, 1);
    let e = m.kenward_roger_tests(&m.start().to_vec(), &[]).unwrap_err();
    assert!(e.to_string().contains("Gaussian"), "{e}");
    let m = one_way(6, 4, 1);
    let theta = m.start().to_vec();
    let weighted = m.clone().with_weights(&[2.0; 24]).unwrap();
    let e = weighted.kenward_roger_tests(&theta, &[]).unwrap_err();
    assert!(e.to_string().contains("weighted"), "{e}");
    let e = m
        .kenward_roger_tests(&theta, &[vec![vec![1.0, 0.0]]])
        .unwrap_err();
    assert!(e.to_string().contains("hypotheses"), "{e}");
}

/// pbkrtest's dense form of one point's sums: each Gᵢ and Σ as m × m matrices, Σ inverted by
/// Cholesky's factor.
fn dense_point(m: &Glmm, c: usize, params: &[Param], theta: &[f64]) -> Sums {
    use nalgebra::{Cholesky, DMatrix};
    let (p, k, rows) = (m.p, params.len(), m.points[c].rows.clone());
    let n = rows.len();
    let covs: Vec<DMatrix<f64>> = (m.terms.iter())
        .map(|t| {
            let l = DMatrix::from_row_slice(t.q, t.q, &t.factor(theta));
            &l * l.transpose()
        })
        .collect();
    let s2 = (2.0 * theta[theta.len() - 1]).exp();
    let g: Vec<DMatrix<f64>> = (params.iter())
        .map(|prm| match *prm {
            Param::Residual => DMatrix::identity(n, n),
            Param::Entry { term, a, b } => {
                let t = &m.terms[term];
                DMatrix::from_fn(n, n, |r, s| {
                    let (r, s) = (rows.start + r, rows.start + s);
                    let z = |r: usize, a: usize| t.z[r * t.q + a];
                    match (t.slot[r] == t.slot[s], a == b) {
                        (false, _) => 0.0,
                        (true, true) => z(r, a) * z(s, b),
                        (true, false) => z(r, a) * z(s, b) + z(r, b) * z(s, a),
                    }
                })
            }
        })
        .collect();
    let value = |prm: &Param| match *prm {
        Param::Entry { term, a, b } => covs[term][(a, b)],
        Param::Residual => s2,
    };
    let mut sigma = DMatrix::zeros(n, n);
    g.iter()
        .zip(params)
        .for_each(|(gi, prm)| sigma += gi * value(prm));
    let sinv = Cholesky::new(sigma).unwrap().inverse();
    let x = DMatrix::from_row_slice(n, p, &m.x[rows.start * p..rows.end * p]);
    let sx = &sinv * &x;
    let gsx: Vec<DMatrix<f64>> = g.iter().map(|gi| gi * &sx).collect();
    let sg: Vec<DMatrix<f64>> = g.iter().map(|gi| &sinv * gi).collect();
    let pairs = k * (k + 1) / 2;
    let mut out = Sums {
        xsx: x.transpose() * &sx,
        p: vec![DMatrix::zeros(p, p); k],
        q: vec![DMatrix::zeros(p, p); pairs],
        t: vec![0.0; pairs],
    };
    for i in 0..k {
        out.p[i] = -(sx.transpose() * &gsx[i]);
        for j in i..k {
            let ij = pair(i, j, k);
            out.q[ij] = gsx[i].transpose() * &sinv * &gsx[j];
            out.t[ij] = sg[i].component_mul(&sg[j].transpose()).sum();
        }
    }
    out
}

/// Each point's sums through Woodbury's identity are the dense form's to rounding: one point
/// of crossed correlated slopes and intercepts, nested points of two terms, three effects a
/// point in two terms, and a one-way model of many points; at θ away from the fit.
#[test]
fn the_block_sums_by_woodbury_are_the_dense_sums() {
    use crate::glmm::tests::two_terms;
    let models = [
        two_terms(Family::Gaussian, false),
        two_terms(Family::Gaussian, true),
        super::three_effects(Family::Gaussian),
        one_way(7, 5, 3),
    ];
    for (i, m) in models.iter().enumerate() {
        let theta: Vec<f64> = (m.start().iter().enumerate())
            .map(|(j, v)| v + 0.3 * ((j * 7 + i) as f64).sin())
            .collect();
        let params = m.linear_params();
        let factors: Vec<Vec<f64>> = m.terms.iter().map(|t| t.factor(&theta)).collect();
        let s2 = (2.0 * theta[theta.len() - 1]).exp();
        for c in 0..m.points.len() {
            let got = m.kenward_roger_point(c, &params, (&factors, s2)).unwrap();
            let want = dense_point(m, c, &params, &theta);
            let gap = |a: &nalgebra::DMatrix<f64>, b: &nalgebra::DMatrix<f64>| {
                (a - b).amax() / b.amax().max(1e-300)
            };
            let mut worst = gap(&got.xsx, &want.xsx);
            for (a, b) in got.p.iter().zip(&want.p).chain(got.q.iter().zip(&want.q)) {
                worst = worst.max(gap(a, b));
            }
            for (a, b) in got.t.iter().zip(&want.t) {
                worst = worst.max((a - b).abs() / b.abs());
            }
            assert!(worst < 1e-10, "model {i}, point {c}: {worst:e}");
        }
    }
}

/// A crossed design of 6,000 rows, one block whose dense matrices would take 2.1 GiB, has its
/// tests: the intercept's standard error at least the fit's (the adjustment adds), its degrees
/// of freedom between the smaller factor's levels less one and the rows.
#[test]
fn a_large_crossed_block_has_its_tests() {
    let (ga, gb, n) = (60, 40, 6000);
    let mut s = crate::rng::NormalStream::new(4);
    let (ba, bb): (Vec<f64>, Vec<f64>) = (
        (0..ga).map(|_| 0.7 * s.draw()).collect(),
        (0..gb).map(|_| 0.5 * s.draw()).collect(),
    );
    let (ia, ib): (Vec<usize>, Vec<usize>) =
        (0..n).map(|i| (i % ga, (i * 7 + i / ga) % gb)).unzip();
    let x: Vec<f64> = (0..n).map(|i| ((i * 13) % 17) as f64 / 8.0 - 1.0).collect();
    let y = (0..n)
        .map(|i| 1.0 + 0.5 * x[i] + ba[ia[i]] + bb[ib[i]] + 0.8 * s.draw())
        .collect();
    let term = |group: Vec<usize>| RandomTerm {
        group,
        z: vec![1.0; n],
        correlated: false,
    };
    let xs = x.iter().flat_map(|&v| [1.0, v]).collect();
    let m = Glmm::with_terms(Family::Gaussian, y, xs, vec![term(ia), term(ib)], None).unwrap();
    assert_eq!(m.points.len(), 1);
    let fit = reml(&m);
    let (t, _) = m.kenward_roger_tests(&fit.theta, &[]).unwrap();
    let (se, df, p) = t[0];
    assert!(
        se.is_finite() && se >= fit.se[0] * (1.0 - 1e-9),
        "{se} vs {}",
        fit.se[0]
    );
    assert!(df > (gb - 1) as f64 && df < n as f64, "{df}");
    assert!(p > 0.0 && p < 1e-6, "{p}");
}

/// lmerTest's least-squares means of a balanced split plot's between-subjects factor, by both
/// methods: each level's raw mean, with the classical standard error √(MS_subjects(A) / (per ·
/// obs)) on S − a degrees of freedom; a difference of two levels, √2 times it; and the Wald z
/// test's standard error is the fit's covariance's.
#[test]
fn a_split_plot_s_least_squares_means_are_the_classical_ones() {
    use crate::glmm::formula::pairwise_contrasts;
    use crate::glmm::Formula;
    let (levels, per, obs) = (3, 4, 5);
    let frame = split_plot(levels, per, obs);
    let y = frame
        .numbers_at("y", &(0..frame.n_rows()).collect::<Vec<_>>(), "response")
        .unwrap();
    let formula = Formula::parse("y ~ A + (1 | g)").unwrap();
    let m = (formula.design(&frame).unwrap())
        .glmm(Family::Gaussian)
        .unwrap();
    let fit = reml(&m);
    let (term, means) = formula.ls_means_contrasts(&frame).unwrap().remove(0);
    assert_eq!(term, "A");
    let rows: Vec<Vec<f64>> = means.iter().map(|(_, l)| l.clone()).collect();
    // The rows are subject-major: a level's per · obs rows, each subject's obs of them.
    let mean = |r: std::ops::Range<usize>| y[r.clone()].iter().sum::<f64>() / r.len() as f64;
    let (block, subjects) = (per * obs, levels * per);
    let ms_subjects = (0..subjects)
        .map(|s| {
            (mean(s * obs..(s + 1) * obs) - mean(s / per * block..(s / per + 1) * block)).powi(2)
        })
        .sum::<f64>()
        * obs as f64
        / (subjects - levels) as f64;
    let se = (ms_subjects / block as f64).sqrt();
    let df = (subjects - levels) as f64;
    let sat = m
        .satterthwaite_contrasts(&fit.theta, &fit.covariance, &rows)
        .unwrap();
    let kr = m.kenward_roger_contrasts(&fit.theta, &rows).unwrap();
    for (i, l) in rows.iter().enumerate() {
        let estimate: f64 = l.iter().zip(&fit.theta).map(|(a, b)| a * b).sum();
        assert!(
            (estimate - mean(i * block..(i + 1) * block)).abs() < 1e-9,
            "{i}"
        );
        for (what, (s, d, _)) in [("Satterthwaite", sat[i]), ("Kenward-Roger", kr[i])] {
            assert!((s / se - 1.0).abs() < 1e-6, "{what} {i}: {s} vs {se}");
            assert!((d - df).abs() < 1e-4, "{what} {i}: {d} vs {df}");
        }
    }
    let pairs: Vec<Vec<f64>> = pairwise_contrasts(&means)
        .into_iter()
        .map(|(_, l)| l)
        .collect();
    let (s, d, _) = m
        .satterthwaite_contrasts(&fit.theta, &fit.covariance, &pairs)
        .unwrap()[2];
    assert!(
        (s / (se * 2f64.sqrt()) - 1.0).abs() < 1e-6 && (d - df).abs() < 1e-4,
        "{s} {d}"
    );
    let wrong = m.satterthwaite_contrasts(&fit.theta, &fit.covariance, &[vec![1.0]]);
    assert!(wrong
        .unwrap_err()
        .to_string()
        .contains("a row of 1 values for the model's 3 fixed effects"));
}
