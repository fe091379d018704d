//! The hypotheses of lmerTest's type III tests of the fixed effects (`anova(fit)`): each term's
//! coefficients with every categorical variable coded by sum-to-zero contrasts, carried to the
//! design's own (treatment) coding.

use super::*;
use crate::metric::Factor;

impl Formula {
    /// lmerTest's type III hypotheses of the fixed effects (`anova(fit, type = 3)`), on the rows
    /// of `frame` that [`Formula::design`] keeps: per term of the fixed effects but the
    /// intercept (named as R names it: `x`, `dose`, `x:dose`), the matrix L of its test Lβ = 0,
    /// a row per degree of freedom and a column per fixed effect of the design's `x`. L tests
    /// the term's coefficients under R's `contr.sum` coding of every categorical variable (the
    /// term's effect averaged over the levels of the variables it interacts with; at 0 of a
    /// numeric one), written in the design's treatment coding (βₛ = (XₛᵀXₛ)⁻¹XₛᵀX β, the two
    /// codings spanning the same columns), its rows an orthonormal basis of their span, as
    /// lmerTest's. Refused by name where the design's columns are not independent.
    pub fn type3_contrasts(&self, frame: &Frame) -> Result<Vec<(String, Vec<Vec<f64>>)>> {
        let (cols, rows) = complete_rows(frame, &self.columns(), Source::Fitted)?;
        let coding = self.coding(&cols, &rows);
        let fitted = (&coding, Source::Fitted);
        let (x, _, _) = self.coded_matrix(&self.fixed, &cols, &rows, fitted, false)?;
        let (xs, _, ranges) = self.coded_matrix(&self.fixed, &cols, &rows, fitted, true)?;
        let p = x.len() / rows.len().max(1);
        let hypotheses = type3_hypotheses(&x, &xs, p, &ranges)?;
        Ok((self.fixed.terms.iter())
            .map(|t| term_label(t))
            .zip(hypotheses)
            .collect())
    }
}

/// The type III hypotheses of [`Formula::type3_contrasts`] from the two codings of the same
/// rows: `x` the design's (n × p, row-major), `xs` the sum-to-zero coding's, whose columns
/// `ranges` are each term's. Per term, L = the term's rows of (XₛᵀXₛ)⁻¹XₛᵀX made orthonormal.
/// Refused by name where Xₛ's columns are not independent. The bindings call it with their own
/// formulas' codings.
pub fn type3_hypotheses(
    x: &[f64],
    xs: &[f64],
    p: usize,
    ranges: &[std::ops::Range<usize>],
) -> Result<Vec<Vec<Vec<f64>>>> {
    let n = x.len() / p.max(1);
    if xs.len() != n * p || ranges.iter().any(|r| r.start > r.end || r.end > p) {
        return Err(invalid(
            "type III hypotheses",
            format!("a sum-to-zero coding of {} values or its terms' columns do not fit {n} rows of {p} columns", xs.len()),
            "code the same rows and terms as the design",
        ));
    }
    // XₛᵀXₛ and XₛᵀX, p × p.
    let cross = |a: &[f64], b: &[f64]| -> Vec<f64> {
        let mut out = vec![0.0; p * p];
        for i in 0..n {
            let (ra, rb) = (&a[i * p..(i + 1) * p], &b[i * p..(i + 1) * p]);
            for (j, va) in ra.iter().enumerate() {
                for (k, vb) in rb.iter().enumerate() {
                    out[j * p + k] += va * vb;
                }
            }
        }
        out
    };
    let f = Factor::cholesky(&cross(xs, xs), p).ok_or_else(|| {
        invalid(
            "formula",
            "fixed effects whose columns are not independent".into(),
            "drop the columns that others determine before testing the terms",
        )
    })?;
    let xsx = cross(xs, x);
    // Column k of M = (XₛᵀXₛ)⁻¹ XₛᵀX, then M's rows by term.
    let mut m = vec![vec![0.0; p]; p];
    for k in 0..p {
        let mut col: Vec<f64> = (0..p).map(|j| xsx[j * p + k]).collect();
        f.solve_lower(&mut col);
        f.solve_upper(&mut col);
        for (j, v) in col.into_iter().enumerate() {
            m[j][k] = v;
        }
    }
    Ok(ranges.iter().map(|r| orthonormal(&m[r.clone()])).collect())
}

/// lmerTest's tests of a Gaussian fit `(model, fit)` with Satterthwaite's or (`kenward_roger`)
/// Kenward and Roger's degrees of freedom, as the command line and the bindings print them: the
/// method's name (`"satterthwaite"` or `"kenward_roger"`), the t test of each fixed effect (its
/// standard error, degrees of freedom, p), and the F test of each of `hypotheses` (F, the
/// unscaled F whose F σ² is lmerTest's Mean Sq, q, the denominator's degrees of freedom, p; the
/// two Fs are one for Satterthwaite's). Refused by name where Satterthwaite's tests have no
/// covariance to read, and where the method refuses the model.
#[allow(clippy::type_complexity)]
pub fn ddf_tests(
    (model, fit): (&Glmm, &crate::glmm::GlmmFit),
    hypotheses: &[Vec<Vec<f64>>],
    kenward_roger: bool,
) -> Result<(
    &'static str,
    Vec<(f64, f64, f64)>,
    Vec<(f64, f64, usize, f64, f64)>,
)> {
    if kenward_roger {
        let (t, f) = model.kenward_roger_anova(&fit.theta, hypotheses)?;
        return Ok(("kenward_roger", t, f));
    }
    let cov = fit.tested_covariance()?;
    let (t, f) = model.satterthwaite_tests(&fit.theta, cov, hypotheses)?;
    let f = f.into_iter().map(|(f, q, d, p)| (f, f, q, d, p)).collect();
    Ok(("satterthwaite", t, f))
}

/// An orthonormal basis of the rows' span, by Gram–Schmidt (twice, for rounding) in their
/// order, a row within 1e-10 of the span of those before it left out. Satterthwaite's degrees
/// of freedom of a test of several rows depend on the basis of their span unless it is
/// orthonormal (lmerTest's tests are then the same for any such basis).
fn orthonormal(rows: &[Vec<f64>]) -> Vec<Vec<f64>> {
    let dot = |a: &[f64], b: &[f64]| a.iter().zip(b).map(|(x, y)| x * y).sum::<f64>();
    let mut basis: Vec<Vec<f64>> = Vec::with_capacity(rows.len());
    for row in rows {
        let mut r = row.clone();
        let norm0 = dot(&r, &r).sqrt();
        for _ in 0..2 {
            for b in &basis {
                let c = dot(&r, b);
                r.iter_mut().zip(b).for_each(|(v, w)| *v -= c * w);
            }
        }
        let norm = dot(&r, &r).sqrt();
        if norm > 1e-10 * norm0.max(f64::MIN_POSITIVE) {
            r.iter_mut().for_each(|v| *v /= norm);
            basis.push(r);
        }
    }
    basis
}

/// A term as R labels it: its variables joined by `:`, `factor(x)` where the formula says so.
pub(super) fn term_label(term: &[Var]) -> String {
    (term.iter())
        .map(|v| match v.factor {
            true => format!("factor({})", v.name),
            false => v.name.clone(),
        })
        .collect::<Vec<_>>()
        .join(":")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A one-way design of 3 levels, 2 rows each: the treatment coding (1, level 2, level 3)
    /// and R's `contr.sum` coding (1, +1 at level 1 and −1 at 3, +1 at level 2 and −1 at 3).
    fn one_way() -> (Vec<f64>, Vec<f64>) {
        let (mut x, mut xs) = (Vec::new(), Vec::new());
        for level in [0, 0, 1, 1, 2, 2] {
            x.extend([1.0, (level == 1) as u8 as f64, (level == 2) as u8 as f64]);
            let s = |l: usize| match level {
                2 => -1.0,
                _ if level == l => 1.0,
                _ => 0.0,
            };
            xs.extend([1.0, s(0), s(1)]);
        }
        (x, xs)
    }

    /// The factor's hypothesis "every level's mean the same" is β₂ = β₃ = 0 in the treatment
    /// coding: L's rows are an orthonormal basis of span(e₂, e₃); the intercept's under sum
    /// coding is the mean of the levels' means, (1, 1/3, 1/3) normalised.
    #[test]
    fn a_factor_s_hypothesis_is_its_treatment_effects() {
        let (x, xs) = one_way();
        let h = type3_hypotheses(&x, &xs, 3, &[0..1, 1..3]).unwrap();
        let factor = &h[1];
        assert_eq!(factor.len(), 2);
        for (i, a) in factor.iter().enumerate() {
            assert!(a[0].abs() < 1e-12, "{a:?}");
            for (j, b) in factor.iter().enumerate() {
                let dot: f64 = a.iter().zip(b).map(|(u, v)| u * v).sum();
                assert!((dot - (i == j) as u8 as f64).abs() < 1e-12, "{factor:?}");
            }
        }
        let norm = (1.0f64 + 2.0 / 9.0).sqrt();
        let want = [1.0 / norm, 1.0 / 3.0 / norm, 1.0 / 3.0 / norm];
        assert_eq!(h[0].len(), 1);
        for (g, w) in h[0][0].iter().zip(want) {
            assert!((g - w).abs() < 1e-12, "{:?}", h[0]);
        }
    }

    /// Codings that do not fit each other, or a sum coding whose columns are not independent,
    /// are refused by name.
    #[test]
    fn codings_that_do_not_fit_are_refused() {
        let (x, xs) = one_way();
        let all = [0..1, 1..3];
        let short = type3_hypotheses(&x, &xs[..15], 3, &all).unwrap_err();
        assert!(short.to_string().contains("do not fit 6 rows"), "{short}");
        let past = type3_hypotheses(&x, &xs, 3, &[0..1, 1..4]).unwrap_err();
        assert!(past.to_string().contains("type III"), "{past}");
        let twice: Vec<f64> = xs.chunks(3).flat_map(|r| [r[0], r[1], r[1]]).collect();
        let dependent = type3_hypotheses(&x, &twice, 3, &all).unwrap_err();
        assert!(
            dependent.to_string().contains("not independent"),
            "{dependent}"
        );
    }
}
