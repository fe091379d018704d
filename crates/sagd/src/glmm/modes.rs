//! The random effects given the data (lme4's `ranef` with `condVar`): each level's effects at
//! the mode of p(b | y; θ), with their conditional sds from the curvature there.

use rayon::prelude::*;

use super::summary::sd_of_variance;
use super::{Estimate, Glmm};
use crate::error::Result;

impl Glmm {
    /// Each random effect given the data at θ, as lme4's `ranef(fit, condVar = TRUE)` gives
    /// it: per term, per level of its factor (in the order of the term's group indices), per
    /// effect, the conditional mode of b = L u (its `value`) and the sd from the curvature of
    /// log p(b | y; θ) there (its `se`). For the Gaussian family the posterior is Gaussian, so
    /// these are its exact mean and sd; for the others, Laplace's approximation at the mode.
    pub fn random_effects(&self, theta: &[f64]) -> Result<Vec<Vec<Vec<Estimate>>>> {
        self.check_theta(theta)?;
        let factors = self.factors(theta);
        // The levels of each point, as (term, level, offset in its latent).
        let mut at_point: Vec<Vec<(usize, usize, usize)>> = vec![Vec::new(); self.points.len()];
        for (t, term) in self.terms.iter().enumerate() {
            for (level, &(c, offset)) in term.levels.iter().enumerate() {
                at_point[c].push((t, level, offset));
            }
        }
        let per_point = at_point
            .par_iter()
            .enumerate()
            .map(|(c, levels)| {
                let lap = self.laplace(theta, &factors, c, None)?;
                let dim = self.points[c].dim;
                let found: Vec<_> = levels
                    .iter()
                    .map(|&(t, level, offset)| {
                        let q = self.terms[t].q;
                        // Cov(u) ≈ H⁻¹ = L⁻ᵀ L⁻¹ (H = L Lᵀ): its block at the level is
                        // Wᵀ W with W's columns L⁻¹ e_j.
                        let w: Vec<Vec<f64>> = (offset..offset + q)
                            .map(|j| {
                                let mut e = vec![0.0; dim];
                                e[j] = 1.0;
                                lap.curvature.solve_lower(&mut e);
                                e
                            })
                            .collect();
                        let u = &lap.mode[offset..offset + q];
                        let cov_u = |a: usize, b: usize| -> f64 {
                            w[a].iter().zip(&w[b]).map(|(x, y)| x * y).sum()
                        };
                        (t, level, effects(&factors[t], q, u, cov_u))
                    })
                    .collect();
                Ok(found)
            })
            .collect::<Result<Vec<_>>>()?;
        let mut out: Vec<Vec<Vec<Estimate>>> = self
            .terms
            .iter()
            .map(|term| vec![Vec::new(); term.levels.len()])
            .collect();
        for (t, level, e) in per_point.into_iter().flatten() {
            out[t][level] = e;
        }
        Ok(out)
    }
}

/// b = L u and the sds of Cov(b) = L Cov(u) Lᵀ, for one level's q effects (L lower-triangular,
/// q × q row-major).
fn effects(l: &[f64], q: usize, u: &[f64], cov_u: impl Fn(usize, usize) -> f64) -> Vec<Estimate> {
    (0..q)
        .map(|a| {
            let value = (0..=a).map(|b| l[a * q + b] * u[b]).sum();
            let var: f64 = (0..=a)
                .flat_map(|b| (0..=a).map(move |c| (b, c)))
                .map(|(b, c)| l[a * q + b] * cov_u(b, c) * l[a * q + c])
                .sum();
            Estimate {
                value,
                se: sd_of_variance(var),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::super::{Family, RandomTerm};
    use super::*;
    use crate::linalg::spd_inverse;

    /// The Gaussian posterior of every effect in b-space, densely: b ~ N(0, G) with y | b ~
    /// N(Xβ + Z b, σ² I), so Prec = G⁻¹ + ZᵀZ/σ² and mean = Prec⁻¹ Zᵀ(y − Xβ)/σ². `z` holds the
    /// rows of Z (n × m), `g` G (m × m).
    fn dense_posterior(
        y: &[f64],
        fixed: &[f64],
        z: &[Vec<f64>],
        g: &[Vec<f64>],
        s2: f64,
    ) -> (Vec<f64>, Vec<Vec<f64>>) {
        let m = g.len();
        let mut prec = spd_inverse(g).unwrap();
        let mut v = vec![0.0; m];
        for ((zi, yi), fi) in z.iter().zip(y).zip(fixed) {
            for a in 0..m {
                v[a] += zi[a] * (yi - fi) / s2;
                for b in 0..m {
                    prec[a][b] += zi[a] * zi[b] / s2;
                }
            }
        }
        let cov = spd_inverse(&prec).unwrap();
        let mean = (0..m)
            .map(|a| (0..m).map(|b| cov[a][b] * v[b]).sum())
            .collect();
        (mean, cov)
    }

    fn close(e: &Estimate, value: f64, sd: f64) {
        assert!((e.value - value).abs() < 1e-9, "{e:?} against {value}");
        assert!((e.se - sd).abs() < 1e-9, "{e:?} against sd {sd}");
    }

    #[test]
    fn gaussian_intercepts_are_the_shrunken_group_means() {
        // Groups of 1 to 4 rows: b_g = τ²/(τ² + σ²/n_g) (ȳ_g − μ), Var = 1/(1/τ² + n_g/σ²).
        let sizes = [1usize, 2, 3, 4];
        let group: Vec<usize> = (0..4).flat_map(|g| vec![g; sizes[g]]).collect();
        let n = group.len();
        let y: Vec<f64> = (0..n).map(|i| (i as f64 * 1.3).sin() * 2.0 + 1.0).collect();
        let m = Glmm::new(
            Family::Gaussian,
            y.clone(),
            vec![1.0; n],
            &group,
            vec![1.0; n],
            None,
        )
        .unwrap();
        let (mu, tau, sigma) = (0.7, 0.9f64, 0.6f64);
        let re = m.random_effects(&[mu, tau.ln(), sigma.ln()]).unwrap();
        assert_eq!((re.len(), re[0].len(), re[0][0].len()), (1, 4, 1));
        for (g, &ng) in sizes.iter().enumerate() {
            let rows: Vec<f64> = (0..n).filter(|&i| group[i] == g).map(|i| y[i]).collect();
            let mean = rows.iter().sum::<f64>() / ng as f64;
            let (t2, s2) = (tau * tau, sigma * sigma);
            let value = t2 / (t2 + s2 / ng as f64) * (mean - mu);
            close(&re[0][g][0], value, (1.0 / t2 + ng as f64 / s2).powf(-0.5));
        }
    }

    #[test]
    fn poisson_modes_solve_their_score_with_the_curvature_s_sd() {
        let n = 30;
        let group: Vec<usize> = (0..n).map(|i| i % 5).collect();
        let x: Vec<f64> = (0..n).flat_map(|i| [1.0, (i as f64 * 0.4).cos()]).collect();
        let y: Vec<f64> = (0..n).map(|i| ((i * 7) % 6) as f64).collect();
        let m = Glmm::new(
            Family::Poisson,
            y.clone(),
            x.clone(),
            &group,
            vec![1.0; n],
            None,
        )
        .unwrap();
        let (beta, tau) = ([0.4, 0.3], 0.5f64);
        let re = m.random_effects(&[beta[0], beta[1], tau.ln()]).unwrap();
        for (g, level) in re[0].iter().enumerate() {
            let b = level[0].value;
            // d/db [Σ y η − e^η] − b/τ² and −d²/db² at the mode.
            let (mut score, mut curvature) = (-b / (tau * tau), 1.0 / (tau * tau));
            for i in (0..n).filter(|&i| group[i] == g) {
                let mu = (beta[0] * x[2 * i] + beta[1] * x[2 * i + 1] + b).exp();
                score += y[i] - mu;
                curvature += mu;
            }
            assert!(score.abs() < 1e-8, "level {g}: score {score}");
            assert!((level[0].se - curvature.powf(-0.5)).abs() < 1e-9);
        }
    }

    #[test]
    fn correlated_and_crossed_effects_are_the_gaussian_posterior() {
        // Correlated intercepts and slopes by `a` (3 levels) crossed with intercepts by `b` (4
        // levels): every row in one point, so the levels' places in its latent are all tested.
        let n = 24;
        let xs: Vec<f64> = (0..n).map(|i| (i as f64 * 0.7).sin()).collect();
        let (ga, gb): (Vec<usize>, Vec<usize>) = (0..n).map(|i| (i % 3, (i / 2) % 4)).unzip();
        let y: Vec<f64> = (0..n).map(|i| (i as f64 * 0.9).cos() + xs[i]).collect();
        let terms = vec![
            RandomTerm {
                group: ga.clone(),
                z: xs.iter().flat_map(|&x| [1.0, x]).collect(),
                correlated: true,
            },
            RandomTerm {
                group: gb.clone(),
                z: vec![1.0; n],
                correlated: false,
            },
        ];
        let x: Vec<f64> = xs.iter().flat_map(|&x| [1.0, x]).collect();
        let m = Glmm::with_terms(Family::Gaussian, y.clone(), x, terms, None).unwrap();
        // θ: β, log sd (a: intercept, slope), L[1,0], log sd (b), log σ.
        let theta = [
            0.2,
            0.5,
            0.6f64.ln(),
            0.3f64.ln(),
            0.1,
            0.4f64.ln(),
            0.5f64.ln(),
        ];
        let re = m.random_effects(&theta).unwrap();
        // b-space: a's levels (2 effects each) then b's; G block-diagonal.
        let l = [[0.6, 0.0], [0.1, 0.3]];
        let ga_cov = |r: usize, c: usize| (0..2).map(|k| l[r][k] * l[c][k]).sum::<f64>();
        let m_dim = 3 * 2 + 4;
        let mut g = vec![vec![0.0; m_dim]; m_dim];
        for lev in 0..3 {
            for (r, c) in [(0, 0), (0, 1), (1, 0), (1, 1)] {
                g[2 * lev + r][2 * lev + c] = ga_cov(r, c);
            }
        }
        (0..4).for_each(|lev| g[6 + lev][6 + lev] = 0.4 * 0.4);
        let z: Vec<Vec<f64>> = (0..n)
            .map(|i| {
                let mut row = vec![0.0; m_dim];
                row[2 * ga[i]] = 1.0;
                row[2 * ga[i] + 1] = xs[i];
                row[6 + gb[i]] = 1.0;
                row
            })
            .collect();
        let fixed: Vec<f64> = xs.iter().map(|x| 0.2 + 0.5 * x).collect();
        let (mean, cov) = dense_posterior(&y, &fixed, &z, &g, 0.25);
        for (lev, effects) in re[0].iter().enumerate() {
            for (e, got) in effects.iter().enumerate() {
                let k = 2 * lev + e;
                close(got, mean[k], cov[k][k].sqrt());
            }
        }
        for (lev, effects) in re[1].iter().enumerate() {
            let k = 6 + lev;
            close(&effects[0], mean[k], cov[k][k].sqrt());
        }
        assert_eq!((re[0].len(), re[1].len()), (3, 4));
        assert!(m.random_effects(&theta[..3]).is_err());
    }
}
