//! Points of different dimensions in one model (levels nested unevenly: a group of one
//! subgroup beside groups of two), each integrated by the rule of its own dimension: the
//! likelihood and the conditional means against iterated one-dimensional integrals, the
//! gradient against differences.

use super::*;
use statrs::function::gamma::ln_gamma;

/// Every row of the data below: its level of a, its subgroup b (numbered over all), x and y.
type Rows = Vec<(usize, usize, f64, f64)>;

/// Poisson counts under (1 | a/b): a's levels 0 to 3 with 2, 1, 2 and 1 subgroups b of 6 rows,
/// so that the points (one level of a with its subgroups) have 3, 2, 3 and 2 effects.
fn nested() -> (Glmm, Rows) {
    let subgroups = [2, 1, 2, 1];
    let mut s = NormalStream::new(3);
    let mut rows = Vec::new();
    let mut b_level = 0;
    for (a, &count) in subgroups.iter().enumerate() {
        let effect_a = 0.6 * s.draw();
        for _ in 0..count {
            let effect_b = 0.4 * s.draw();
            for r in 0..6 {
                let xi = (r as f64 - 2.5) / 3.0;
                let rate = (0.4 + 0.5 * xi + effect_a + effect_b).exp();
                rows.push((
                    a,
                    b_level,
                    xi,
                    (rate * (1.0 + 0.3 * s.draw().tanh())).round(),
                ));
            }
            b_level += 1;
        }
    }
    let x = rows.iter().flat_map(|r| [1.0, r.2]).collect();
    let y = rows.iter().map(|r| r.3).collect::<Vec<_>>();
    let n = y.len();
    let term = |group: Vec<usize>| RandomTerm {
        group,
        z: vec![1.0; n],
        correlated: false,
    };
    let terms = vec![
        term(rows.iter().map(|r| r.0).collect()),
        term(rows.iter().map(|r| r.1).collect()),
    ];
    let m = Glmm::with_terms(Family::Poisson, y, x, terms, None).unwrap();
    (m, rows)
}

/// θ: β = (0.3, 0.4), a's sd e^−0.6, b's e^−1.
const THETA: [f64; 4] = [0.3, 0.4, -0.6, -1.0];

/// For each level of a: log p(y_a) and E[b_a | y] by iterated Gauss-Hermite rules of 80 nodes
/// over u_a and each subgroup's u_b (the integrands are smooth and the priors wide next to
/// these posteriors).
fn iterated(rows: &Rows) -> Vec<(f64, f64)> {
    let gh = GaussHermite::new(80);
    let (sa, sb) = (THETA[2].exp(), THETA[3].exp());
    // ∫ φ(v) f(v) dv = Σ w_k f(√2 t_k) / √π.
    let rule: Vec<(f64, f64)> = gh
        .nodes
        .iter()
        .zip(&gh.weights)
        .map(|(t, w)| {
            (
                std::f64::consts::SQRT_2 * t,
                w / std::f64::consts::PI.sqrt(),
            )
        })
        .collect();
    let log_pois = |y: f64, eta: f64| y * eta - eta.exp() - ln_gamma(y + 1.0);
    let levels = rows.iter().map(|r| r.0).max().unwrap() + 1;
    (0..levels)
        .map(|a| {
            let mine: Vec<_> = rows.iter().filter(|r| r.0 == a).collect();
            let mut subgroups: Vec<usize> = mine.iter().map(|r| r.1).collect();
            subgroups.dedup();
            let (mut total, mut first) = (0.0, 0.0);
            for &(v, wv) in &rule {
                let mut like = 1.0;
                for &b in &subgroups {
                    let inner: f64 = rule
                        .iter()
                        .map(|&(u, wu)| {
                            let l: f64 = mine
                                .iter()
                                .filter(|r| r.1 == b)
                                .map(|r| log_pois(r.3, THETA[0] + THETA[1] * r.2 + sa * v + sb * u))
                                .sum();
                            wu * l.exp()
                        })
                        .sum();
                    like *= inner;
                }
                total += wv * like;
                first += wv * like * sa * v;
            }
            (total.ln(), first / total)
        })
        .collect()
}

#[test]
fn unevenly_nested_points_are_integrated_each_in_its_own_dimension() {
    let (m, rows) = nested();
    let dims: Vec<usize> = m.points.iter().map(|c| c.dim).collect();
    assert_eq!(dims, [3, 2, 3, 2]);
    let reference = iterated(&rows);
    let rule = ProductRule::new(m.latent_dim, 15);
    let mut modes: Vec<Vec<f64>> = m.points.iter().map(|c| vec![0.0; c.dim]).collect();
    let (v, g) = m.quadrature_value_grad(&THETA, &rule, &mut modes).unwrap();
    let want: f64 = reference.iter().map(|r| r.0).sum();
    assert!((v - want).abs() < 1e-9, "{v} vs {want}");
    // ∇θ by Fisher's identity at the nodes, against central differences of the same rule.
    for j in 0..THETA.len() {
        let mut at = |h: f64| {
            let mut th = THETA.to_vec();
            th[j] += h;
            m.quadrature_value_grad(&th, &rule, &mut modes).unwrap().0
        };
        let fd = (at(1e-5) - at(-1e-5)) / 2e-5;
        assert!(
            (g[j] - fd).abs() < 1e-6 * (1.0 + fd.abs()),
            "∂θ{j}: {} vs {fd}",
            g[j]
        );
    }
    // Each level of a's conditional mean, the levels of one subgroup (2 effects) among them.
    let means = m.conditional_means(&THETA).unwrap();
    for (a, r) in reference.iter().enumerate() {
        let got = means[0][a][0].value;
        assert!((got - r.1).abs() < 1e-8, "level {a}: {got} vs {}", r.1);
    }
    // And the fit runs through.
    let fit = m.fit_exact(&ExactSettings::default()).unwrap();
    assert!(fit.converged, "{fit:?}");
}
