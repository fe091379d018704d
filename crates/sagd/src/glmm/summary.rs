//! A fit on the scales a statistician reads (lme4's `summary`): the fixed effects, each random
//! effect's standard deviation and the correlations of a term's effects, the residual sd, with
//! standard errors by the delta method from θ̂'s covariance, and the information criteria.

use serde::{Deserialize, Serialize};

use super::{Family, Glmm, TermNames};
use crate::error::{invalid, Result};

/// A value and its standard error (NaN where it has none: a parameter at a boundary, or no
/// covariance given).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Estimate {
    /// The estimate.
    pub value: f64,
    /// Its standard error.
    pub se: f64,
}

impl Estimate {
    /// The Wald statistic value / se.
    pub fn z(&self) -> f64 {
        self.value / self.se
    }

    /// The two-sided p-value of the Wald test of value = 0 against the normal distribution
    /// (glmer's `Pr(>|z|)`).
    pub fn p_value(&self) -> f64 {
        statrs::function::erf::erfc(self.z().abs() / std::f64::consts::SQRT_2)
    }
}

/// One random-effect term on the sd scale.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TermSummary {
    /// Each effect's standard deviation √Σ_aa.
    pub sd: Vec<Estimate>,
    /// The effects' correlation matrix (the identity for independent effects).
    pub cor: Vec<Vec<f64>>,
}

/// A GLMM's parameters on the scales lme4 prints ([`Glmm::summary`]).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    /// β.
    pub fixed: Vec<Estimate>,
    /// Per random-effect term.
    pub random: Vec<TermSummary>,
    /// The residual sd σ (Gaussian family).
    pub sigma: Option<Estimate>,
    /// The parameters estimated (θ's length): the k of AIC and BIC.
    pub n_params: usize,
}

impl Summary {
    /// −2ℓ + 2k (lme4's AIC; pass the REML criterion after a REML fit).
    pub fn aic(&self, log_likelihood: f64) -> f64 {
        -2.0 * log_likelihood + 2.0 * self.n_params as f64
    }

    /// −2ℓ + k log n for n observations (lme4's BIC).
    pub fn bic(&self, log_likelihood: f64, n_obs: usize) -> f64 {
        -2.0 * log_likelihood + self.n_params as f64 * (n_obs as f64).ln()
    }
}

/// √v, a tiny negative left by rounding taken as 0; a NaN (a parameter at its boundary, with no
/// covariance) stays NaN, where `f64::max` would make it 0.
pub(super) fn sd_of_variance(v: f64) -> f64 {
    if v < 0.0 {
        0.0
    } else {
        v.sqrt()
    }
}

impl Glmm {
    /// The names of θ's entries in θ's order, from the fixed effects' names and each term's
    /// (its factor and its effects; the levels are not read): β's as given, then per term
    /// `log sd EFFECT` (labelled as [`Glmm::effect_names`] labels) and, for correlated effects, the
    /// Cholesky factor's lower entries `L[a,b] FACTOR` row by row; `log(sigma)` last for the
    /// Gaussian family. Errors name the list whose length does not match the model.
    pub fn theta_names(&self, fixed: &[String], terms: &[TermNames]) -> Result<Vec<String>> {
        if fixed.len() != self.p {
            return Err(invalid(
                "x_names",
                format!("{} names", fixed.len()),
                &format!("give one name per column of X ({})", self.p),
            ));
        }
        let mut effects = self.effect_names(terms)?.into_iter();
        let mut names = fixed.to_vec();
        for (term, t) in self.terms.iter().zip(terms) {
            names.extend(effects.by_ref().take(term.q).map(|e| format!("log sd {e}")));
            if term.correlated {
                for a in 1..term.q {
                    names.extend((0..a).map(|b| format!("L[{a},{b}] {}", t.group)));
                }
            }
        }
        if self.family == Family::Gaussian {
            names.push("log(sigma)".into());
        }
        Ok(names)
    }

    /// The random effects' labels, one per standard deviation of [`Summary::random`] in order:
    /// the effect's name, after its factor's (`g: (Intercept)`) when the model has several terms.
    pub fn effect_names(&self, terms: &[TermNames]) -> Result<Vec<String>> {
        if terms.len() != self.terms.len() {
            return Err(invalid(
                "z_names",
                format!("names of {} terms", terms.len()),
                &format!(
                    "give the names of each of the {} random-effect terms",
                    self.terms.len()
                ),
            ));
        }
        let one = terms.len() == 1;
        let mut labels = Vec::new();
        for (term, t) in self.terms.iter().zip(terms) {
            if t.effects.len() != term.q {
                return Err(invalid(
                    "z_names",
                    format!("{} names for {}", t.effects.len(), t.group),
                    &format!("give one name per column of {}'s Z ({})", t.group, term.q),
                ));
            }
            labels.extend(t.effects.iter().map(|e| match one {
                true => e.clone(),
                false => format!("{}: {e}", t.group),
            }));
        }
        Ok(labels)
    }

    /// θ on the scales lme4 prints, with standard errors from `covariance` (θ's, e.g.
    /// [`super::ExactFit::covariance`] or the inverse of EM's observed information) by the
    /// delta method; None gives NaN errors.
    pub fn summary(&self, theta: &[f64], covariance: Option<&[Vec<f64>]>) -> Summary {
        let k = theta.len();
        // √(gᵀ C g) for a gradient g of a function of θ.
        let se = |g: &[f64]| -> f64 {
            let Some(c) = covariance else {
                return f64::NAN;
            };
            let mut v = 0.0;
            for (a, ga) in g.iter().enumerate().filter(|(_, g)| **g != 0.0) {
                for (b, gb) in g.iter().enumerate().filter(|(_, g)| **g != 0.0) {
                    v += ga * c[a][b] * gb;
                }
            }
            sd_of_variance(v)
        };
        let unit = |j: usize, scale: f64| {
            let mut g = vec![0.0; k];
            g[j] = scale;
            g
        };
        let fixed = (0..self.p)
            .map(|j| Estimate {
                value: theta[j],
                se: se(&unit(j, 1.0)),
            })
            .collect();
        let random = self
            .terms
            .iter()
            .map(|t| {
                let (q, l) = (t.q, t.factor(theta));
                let sd: Vec<f64> = (0..q)
                    .map(|a| (0..=a).map(|b| l[a * q + b].powi(2)).sum::<f64>().sqrt())
                    .collect();
                let estimates = (0..q)
                    .map(|a| {
                        // ∂sd_a/∂L_ab = L_ab / sd_a; the diagonal is exp of its parameter.
                        let mut g = vec![0.0; k];
                        g[t.theta_at + a] = l[a * q + a].powi(2) / sd[a];
                        if t.correlated {
                            let mut at = t.theta_at + q;
                            for r in 1..q {
                                for b in 0..r {
                                    if r == a {
                                        g[at] = l[a * q + b] / sd[a];
                                    }
                                    at += 1;
                                }
                            }
                        }
                        Estimate {
                            value: sd[a],
                            se: se(&g),
                        }
                    })
                    .collect();
                let cor = (0..q)
                    .map(|a| {
                        (0..q)
                            .map(|b| {
                                let s: f64 =
                                    (0..=a.min(b)).map(|c| l[a * q + c] * l[b * q + c]).sum();
                                s / (sd[a] * sd[b])
                            })
                            .collect()
                    })
                    .collect();
                TermSummary { sd: estimates, cor }
            })
            .collect();
        let sigma = (self.family == Family::Gaussian).then(|| {
            let s = theta[k - 1].exp();
            Estimate {
                value: s,
                se: se(&unit(k - 1, s)),
            }
        });
        Summary {
            fixed,
            random,
            sigma,
            n_params: k,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::glmm::RandomTerm;

    /// Two correlated effects and σ, at a θ with a known covariance.
    fn model() -> Glmm {
        let n = 6;
        let term = RandomTerm {
            group: vec![0, 0, 0, 1, 1, 1],
            z: (0..n).flat_map(|i| [1.0, i as f64]).collect(),
            correlated: true,
        };
        Glmm::with_terms(
            Family::Gaussian,
            vec![1.0, 2.0, 0.5, 3.0, 1.0, 2.0],
            vec![1.0; n],
            vec![term],
            None,
        )
        .unwrap()
    }

    #[test]
    fn sds_correlations_and_their_errors_match_finite_differences() {
        let m = model();
        let theta = [0.3, 0.2f64.ln(), 0.5f64.ln(), 0.4, 0.1];
        let c: Vec<Vec<f64>> = (0..5)
            .map(|a| {
                (0..5)
                    .map(|b| {
                        if a == b {
                            0.04
                        } else {
                            0.01 / (1 + a + b) as f64
                        }
                    })
                    .collect()
            })
            .collect();
        let s = m.summary(&theta, Some(&c));
        // Σ = L Lᵀ with L = [[0.2, 0], [0.4, 0.5]].
        let (s0, s1) = (0.2, (0.4f64 * 0.4 + 0.25).sqrt());
        assert!((s.random[0].sd[0].value - s0).abs() < 1e-12);
        assert!((s.random[0].sd[1].value - s1).abs() < 1e-12);
        assert!((s.random[0].cor[0][1] - 0.2 * 0.4 / (s0 * s1)).abs() < 1e-12);
        assert!((s.sigma.unwrap().value - 0.1f64.exp()).abs() < 1e-12);
        assert_eq!(s.fixed[0].se, 0.2);
        // The delta method against a central-difference Jacobian.
        let sd1 = |th: &[f64]| m.summary(th, None).random[0].sd[1].value;
        let h = 1e-6;
        let g: Vec<f64> = (0..5)
            .map(|j| {
                let (mut a, mut b) = (theta, theta);
                a[j] += h;
                b[j] -= h;
                (sd1(&a) - sd1(&b)) / (2.0 * h)
            })
            .collect();
        let v: f64 = (0..5)
            .flat_map(|a| (0..5).map(move |b| (a, b)))
            .map(|(a, b)| g[a] * c[a][b] * g[b])
            .sum();
        assert!((s.random[0].sd[1].se - v.sqrt()).abs() < 1e-8);
        assert!(m.summary(&theta, None).fixed[0].se.is_nan());
        let e = Estimate {
            value: -1.96,
            se: 1.0,
        };
        assert!((e.p_value() - 0.05).abs() < 1e-4);
        assert_eq!(s.n_params, 5);
        assert!((s.aic(-10.0) - 30.0).abs() < 1e-12);
        assert!((s.bic(-10.0, 6) - (20.0 + 5.0 * 6f64.ln())).abs() < 1e-12);
    }

    #[test]
    fn a_parameter_with_no_covariance_gives_its_sd_no_error_not_a_zero_one() {
        let m = model();
        let theta = [0.3, -14.0, 0.5f64.ln(), 0.4, 0.1];
        // A singular fit's covariance: NaN in the row and column of the sd at its boundary.
        let c: Vec<Vec<f64>> = (0..5)
            .map(|a| {
                (0..5)
                    .map(|b| match (a, b) {
                        (1, _) | (_, 1) => f64::NAN,
                        _ if a == b => 0.04,
                        _ => 0.0,
                    })
                    .collect()
            })
            .collect();
        let s = m.summary(&theta, Some(&c));
        assert!(s.random[0].sd[0].se.is_nan(), "{:?}", s.random[0].sd[0]);
        assert_eq!(s.fixed[0].se, 0.2);
        assert!(s.sigma.unwrap().se.is_finite());
    }

    #[test]
    fn theta_s_names_follow_its_layout_and_wrong_lengths_are_named() {
        let m = model();
        let names = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let term = TermNames {
            group: "g".into(),
            effects: names(&["(Intercept)", "x"]),
            levels: Vec::new(),
        };
        let theta = m.theta_names(&names(&["(Intercept)"]), std::slice::from_ref(&term));
        assert_eq!(
            theta.unwrap(),
            names(&[
                "(Intercept)",
                "log sd (Intercept)",
                "log sd x",
                "L[1,0] g",
                "log(sigma)"
            ])
        );
        // As many names as θ has entries: one per parameter of the summary's count.
        assert_eq!(m.summary(&[0.0; 5], None).n_params, 5);
        assert_eq!(
            m.effect_names(std::slice::from_ref(&term)).unwrap(),
            names(&["(Intercept)", "x"])
        );
        let e = m.theta_names(&names(&["a", "b"]), std::slice::from_ref(&term));
        assert!(e.unwrap_err().to_string().contains("x_names"));
        let short = TermNames {
            effects: names(&["(Intercept)"]),
            ..term.clone()
        };
        let e = m.effect_names(&[short]).unwrap_err().to_string();
        assert!(e.contains("z_names") && e.contains("g's Z (2)"), "{e}");
        assert!(m.effect_names(&[term.clone(), term]).is_err());
    }

    #[test]
    fn an_sd_at_zero_makes_a_fit_singular_whatever_its_test_said() {
        let m = model();
        let theta = [0.3, 0.2f64.ln(), 0.5f64.ln(), 0.4, 0.1];
        assert_eq!(m.singular_at(&theta, None), None);
        assert_eq!(m.singular_at(&theta, Some(false)), Some(false));
        // The first sd e^−30, far below SINGULAR_SD.
        let mut at_zero = theta;
        at_zero[1] = -30.0;
        assert_eq!(m.singular_at(&at_zero, None), Some(true));
        assert_eq!(m.singular_at(&at_zero, Some(false)), Some(true));
    }
}
