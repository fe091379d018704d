//! lmerTest's `ranova`: the models with one random effect less, each named as lmerTest names
//! it; and the log-likelihood of the fixed effects alone, where no random effect is left. And
//! lme4's `drop1`: the models with one fixed-effect term less.

use super::type3::term_label;
use super::*;
use crate::glmm::exact::least_squares_criterion;
use crate::glmm::Criterion;

impl Formula {
    /// The formulas of lmerTest's `ranova(fit)` (its `reduce.terms = TRUE`): per random effect
    /// that can go, its name as lmerTest prints it and the formula without it (`None` where no
    /// random term is left: the fixed effects alone). A correlated term loses each effect but
    /// its intercept (`x in (1 + x | g)`: `(1 | g)`), a term of one effect goes whole (`(1 |
    /// g)`, `x in (0 + x | g)`), and an independent term `(1 + x || g)` is lme4's `(1 | g) + (0
    /// + x | g)`, each of which goes whole.
    pub fn random_reductions(&self) -> Vec<(String, Option<Formula>)> {
        let mut out = Vec::new();
        for (b, bar) in self.random.iter().enumerate() {
            let effects = effect_names(&bar.effects);
            let group = bar.group.join(":");
            for (k, name) in term_reductions(&effects, bar.correlated, &group) {
                out.push((name, self.without_effect(b, k)));
            }
        }
        out
    }

    /// The formulas of lme4's `drop1(fit)` (R's `drop.scope`): per fixed-effect term that no
    /// other term contains (every variable of it in the other's: `x` stays while `x:A` is in
    /// the model), its label as R prints it and the formula without it. The intercept is never
    /// among them.
    pub fn fixed_reductions(&self) -> Vec<(String, Formula)> {
        let terms = &self.fixed.terms;
        let contained = |i: usize| {
            (terms.iter().enumerate())
                .any(|(j, t)| j != i && terms[i].iter().all(|v| t.contains(v)))
        };
        (0..terms.len())
            .filter(|&i| !contained(i))
            .map(|i| {
                let label = term_label(&terms[i]);
                let mut f = self.clone();
                f.fixed.terms.remove(i);
                f.text = format!("{} (without {label})", self.text);
                (label, f)
            })
            .collect()
    }

    /// This formula with effect `k` (the intercept first, where there is one) of random term
    /// `b` left out, the term too where it was its last; `None` where no random term is left.
    fn without_effect(&self, b: usize, k: usize) -> Option<Formula> {
        let mut f = self.clone();
        let bar = &mut f.random[b];
        match (bar.effects.intercept, k) {
            (true, 0) => bar.effects.intercept = false,
            (true, k) => drop(bar.effects.terms.remove(k - 1)),
            (false, k) => drop(bar.effects.terms.remove(k)),
        }
        if !bar.effects.intercept && bar.effects.terms.is_empty() {
            f.random.remove(b);
        }
        f.text = format!("{} (one random effect less)", self.text);
        (!f.random.is_empty()).then_some(f)
    }
}

/// lmerTest's reductions of one random term: its `effects` as lme4 writes them (`1` for the
/// intercept, first where the term has one), whether they are `correlated` (`|`, not `||`),
/// and its grouping factor `group`; per effect that can go, its place among `effects` and the
/// name lmerTest gives the reduced model ([`Formula::random_reductions`]'s rule). The bindings
/// call it with their own formulas' terms.
pub fn term_reductions(effects: &[String], correlated: bool, group: &str) -> Vec<(usize, String)> {
    let whole = |e: &str| match e {
        "1" => format!("(1 | {group})"),
        _ => format!("{e} in (0 + {e} | {group})"),
    };
    let all = match effects.first().map(String::as_str) {
        Some("1") => effects.join(" + "),
        _ => format!("0 + {}", effects.join(" + ")),
    };
    (effects.iter().enumerate())
        .filter_map(|(k, e)| match (correlated, effects.len()) {
            (false, _) | (true, 1) => Some((k, whole(e))),
            _ if e == "1" => None,
            _ => Some((k, format!("{e} in ({all} | {group})"))),
        })
        .collect()
}

/// A right-hand side's effects as lme4 writes them: `1` for the intercept, then each term.
fn effect_names(effects: &Effects) -> Vec<String> {
    let intercept = effects.intercept.then(|| "1".to_string());
    let terms = effects.terms.iter().map(|t| term_label(t));
    intercept.into_iter().chain(terms).collect()
}

impl Design {
    /// The log-likelihood of the fixed effects alone, fitted by least squares (weighted by
    /// `weights`, a Gaussian's prior weights), R's `logLik(lm(…), REML = …)` under `criterion`:
    /// ML ½ Σ log w − n/2 (log 2π + 1 − log n + log RSS), REML the same with n − p for n, less
    /// ½ log det XᵀWX; the offset taken from y. With the parameters it counts (β and σ).
    pub fn least_squares_loglik(
        &self,
        weights: Option<&[f64]>,
        criterion: Criterion,
    ) -> Result<(f64, usize)> {
        least_squares_loglik(&self.x, &self.y, self.offset.as_deref(), weights, criterion)
    }
}

/// [`Design::least_squares_loglik`] of rows `x` (n × p, row-major), responses `y`, an optional
/// `offset` and prior `weights` (each n values): the Gaussian closed form's criterion with no
/// random effect. The bindings call it with their own arrays.
pub fn least_squares_loglik(
    x: &[f64],
    y: &[f64],
    offset: Option<&[f64]>,
    weights: Option<&[f64]>,
    criterion: Criterion,
) -> Result<(f64, usize)> {
    let n = y.len();
    let p = x.len() / n.max(1);
    if p == 0 || x.len() != n * p || [offset, weights].iter().flatten().any(|v| v.len() != n) {
        return Err(invalid(
            "least squares",
            format!(
                "{n} responses with a design of {} values, or offsets or weights of another length",
                x.len()
            ),
            "give n rows of p ≥ 1 columns and n offsets and weights",
        ));
    }
    let y: Vec<f64> = match offset {
        Some(o) => y.iter().zip(o).map(|(y, o)| y - o).collect(),
        None => y.to_vec(),
    };
    Ok((least_squares_criterion(x, &y, weights, criterion)?, p + 1))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each reduction's name is lmerTest's, and its formula has the effect left out.
    #[test]
    fn each_random_effect_is_left_out_as_lmertest_leaves_it_out() {
        let names = |text: &str| -> Vec<(String, Option<usize>)> {
            (Formula::parse(text)
                .unwrap()
                .random_reductions()
                .into_iter())
            .map(|(name, f)| (name, f.map(|f| f.random.len())))
            .collect()
        };
        let s = |v: &str| v.to_string();
        assert_eq!(
            names("y ~ x + (1 + x + f | g) + (1 | h)"),
            [
                (s("x in (1 + x + f | g)"), Some(2)),
                (s("f in (1 + x + f | g)"), Some(2)),
                (s("(1 | h)"), Some(1)),
            ]
        );
        assert_eq!(
            names("y ~ x + (1 + x || g:h)"),
            [
                (s("(1 | g:h)"), Some(1)),
                (s("x in (0 + x | g:h)"), Some(1))
            ]
        );
        assert_eq!(
            names("y ~ x + (0 + x | g)"),
            [(s("x in (0 + x | g)"), None)]
        );
        let f = Formula::parse("y ~ x + (1 + x | g)").unwrap();
        let (_, reduced) = f.random_reductions().remove(0);
        let bar = &reduced.unwrap().random[0];
        assert!(bar.effects.intercept && bar.effects.terms.is_empty() && bar.correlated);
    }

    /// lme4's drop1 leaves out each fixed-effect term that no other contains (R's
    /// `drop.scope`), by variables alone: `x` stays while `x:A` is in, `A` too; the intercept
    /// and the random terms always stay.
    #[test]
    fn each_marginal_fixed_term_is_left_out_as_drop1_leaves_it_out() {
        let reductions = |text: &str| -> Vec<(String, Vec<String>)> {
            (Formula::parse(text).unwrap().fixed_reductions().into_iter())
                .map(|(name, f)| {
                    assert!(f.fixed.intercept && f.random.len() == 1, "{text}");
                    (name, f.fixed.terms.iter().map(|t| term_label(t)).collect())
                })
                .collect()
        };
        let s = |v: &[&str]| -> Vec<String> { v.iter().map(|t| t.to_string()).collect() };
        assert_eq!(
            reductions("y ~ x * A + B + (1 | g)"),
            [
                ("B".to_string(), s(&["x", "A", "x:A"])),
                ("x:A".to_string(), s(&["x", "A", "B"])),
            ]
        );
        assert_eq!(
            reductions("y ~ factor(d) + x:A + (1 | g)"),
            [
                ("factor(d)".to_string(), s(&["x:A"])),
                ("x:A".to_string(), s(&["factor(d)"])),
            ]
        );
        assert!(reductions("y ~ 1 + (1 | g)").is_empty());
    }

    /// The fixed effects alone by (weighted) least squares: ML's log-likelihood is the normal
    /// density's at β̂ (here by nalgebra's SVD of √W X) and σ̂² = RSS/n; REML's is the density's
    /// at σ̃² = RSS/(n − p) with n − p for n, less ½ log det XᵀWX; an offset is taken from y.
    #[test]
    fn the_fixed_effects_alone_have_the_normal_log_likelihood() {
        use nalgebra::{DMatrix, DVector};
        let n = 12;
        let x: Vec<f64> = (0..n)
            .flat_map(|i| [1.0, i as f64, (i % 3) as f64])
            .collect();
        let y: Vec<f64> = (0..n)
            .map(|i| (i as f64 * 0.7).sin() * 2.0 + i as f64 * 0.3)
            .collect();
        let offset: Vec<f64> = (0..n).map(|i| 0.1 * i as f64).collect();
        let d = Design {
            y,
            trials: None,
            x,
            x_names: vec!["(Intercept)".into(), "x".into(), "z".into()],
            terms: Vec::new(),
            term_names: Vec::new(),
            n_obs: n,
            dropped: 0,
            response: "y".into(),
            rows: (0..n).collect(),
            offset: Some(offset.clone()),
        };
        let p = 3;
        let w: Vec<f64> = (0..n).map(|i| 0.5 + (i % 4) as f64).collect();
        for weights in [None, Some(&w[..])] {
            let wi = |i: usize| weights.map_or(1.0, |w| w[i]);
            let a = DMatrix::from_fn(n, p, |i, j| wi(i).sqrt() * d.x[i * p + j]);
            let b = DVector::from_fn(n, |i, _| wi(i).sqrt() * (d.y[i] - offset[i]));
            let beta = a.clone().svd(true, true).solve(&b, 1e-14).unwrap();
            let rss = (&b - &a * &beta).norm_squared();
            let log_w: f64 = (0..n).map(|i| wi(i).ln()).sum();
            let two_pi = 2.0 * std::f64::consts::PI;
            let density =
                |m: f64, s2: f64| 0.5 * log_w - 0.5 * m * (two_pi * s2).ln() - rss / (2.0 * s2);
            let (ml, k) = d.least_squares_loglik(weights, Criterion::Ml).unwrap();
            assert_eq!(k, p + 1);
            let want = density(n as f64, rss / n as f64);
            assert!((ml - want).abs() < 1e-10 * want.abs(), "{ml} vs {want}");
            let (reml, _) = d.least_squares_loglik(weights, Criterion::Reml).unwrap();
            let m = (n - p) as f64;
            let log_det = (a.transpose() * &a).determinant().ln();
            let want = density(m, rss / m) - 0.5 * log_det;
            assert!((reml - want).abs() < 1e-10 * want.abs(), "{reml} vs {want}");
        }
    }
}
