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
        let (n, p) = (rows.len(), x.len() / rows.len().max(1));
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
        let f = Factor::cholesky(&cross(&xs, &xs), p).ok_or_else(|| {
            invalid(
                "formula",
                "fixed effects whose columns are not independent".into(),
                "drop the columns that others determine before testing the terms",
            )
        })?;
        let xsx = cross(&xs, &x);
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
        Ok((self.fixed.terms.iter())
            .zip(ranges)
            .map(|(term, range)| (term_label(term), orthonormal(&m[range])))
            .collect())
    }
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
fn term_label(term: &[Var]) -> String {
    (term.iter())
        .map(|v| match v.factor {
            true => format!("factor({})", v.name),
            false => v.name.clone(),
        })
        .collect::<Vec<_>>()
        .join(":")
}
