//! The hypotheses of lmerTest's type I and type II tests of the fixed effects (`anova(fit, type
//! = 1)`, `anova(fit, type = 2)`), in the design's own coding: rows of the unit lower-triangular
//! factor of XᵀX (Doolittle's, without pivoting), taken in the terms' order for type I, and for
//! type II with each term and the terms that contain it moved last.

use super::*;
use crate::glmm::exact::unit;

/// Doolittle's tolerance, lmerTest's: a pivot below it leaves its column 0, and entries below
/// it are 0.
const DOOLITTLE_EPS: f64 = 1e-6;

impl Formula {
    /// lmerTest's hypotheses of its type `kind` table (1, 2 or 3) of the fixed effects, on the
    /// rows of `frame` that [`Formula::design`] keeps: per term but the intercept (named as R
    /// names it), the matrix L of its test Lβ = 0 in the design's coding. Type 1 (sequential):
    /// the term's rows of Lᵀ, XᵀX = LU by Doolittle's method in the terms' order. Type 2: a term
    /// no other contains is tested whole (its coefficients 0); another term's rows come from the
    /// same factor of XᵀX with the term and those that contain it last (a term contains another
    /// when it has all its variables and more, and the same numeric ones). Type 3:
    /// [`Formula::type3_contrasts`]. Other kinds are refused by name.
    pub fn anova_contrasts(
        &self,
        frame: &Frame,
        kind: usize,
    ) -> Result<Vec<(String, Vec<Vec<f64>>)>> {
        if kind == 3 {
            return self.type3_contrasts(frame);
        }
        let (cols, rows) = complete_rows(frame, &self.columns(), Source::Fitted)?;
        let coding = self.coding(&cols, &rows);
        let fitted = (&coding, Source::Fitted);
        let (x, _, ranges) = self.coded_matrix(&self.fixed, &cols, &rows, fitted, false)?;
        let p = x.len() / rows.len().max(1);
        let terms = &self.fixed.terms;
        fn numeric(coding: &Coding, t: &[Var]) -> Vec<Var> {
            (t.iter())
                .filter(|v| coding.categorical(v).is_none())
                .cloned()
                .collect()
        }
        let contains: Vec<Vec<usize>> = (terms.iter())
            .map(|small| {
                (terms.iter().enumerate())
                    .filter(|(_, big)| {
                        small.iter().all(|v| big.contains(v))
                            && big.len() > small.len()
                            && same_term(&numeric(&coding, small), &numeric(&coding, big))
                    })
                    .map(|(k, _)| k)
                    .collect()
            })
            .collect();
        let hypotheses = anova_hypotheses(&x, p, &ranges, &contains, kind)?;
        Ok((terms.iter())
            .map(|t| type3::term_label(t))
            .zip(hypotheses)
            .collect())
    }
}

/// The hypotheses of lmerTest's type `kind` (1 or 2) tests from a design `x` (n × p,
/// row-major) whose terms but the intercept have the columns `ranges`, term t contained in the
/// terms `contains[t]`: per term, L's rows (p values each), as [`Formula::anova_contrasts`]
/// makes them. The bindings call it with their own formulas' codings.
pub fn anova_hypotheses(
    x: &[f64],
    p: usize,
    ranges: &[std::ops::Range<usize>],
    contains: &[Vec<usize>],
    kind: usize,
) -> Result<Vec<Vec<Vec<f64>>>> {
    let n = x.len() / p.max(1);
    let bad = ranges.iter().any(|r| r.start > r.end || r.end > p)
        || contains.len() != ranges.len()
        || contains.iter().flatten().any(|&t| t >= ranges.len());
    if !(kind == 1 || kind == 2) || x.len() != n * p || bad {
        return Err(invalid(
            "anova type",
            format!(
                "type {kind} of {} terms on {n} rows of {p} columns",
                ranges.len()
            ),
            "ask for type 1, 2 or 3, and give each term's columns and the terms containing it",
        ));
    }
    let cols: Vec<usize> = (0..p).collect();
    // Type II is type I where at most one term or one column is tested.
    if kind == 1 || p <= 1 || ranges.len() <= 1 {
        let lt = doolittle_lt(x, p, &cols);
        return Ok(ranges.iter().map(|r| lt[r.clone()].to_vec()).collect());
    }
    Ok((ranges.iter().enumerate())
        .map(|(t, r)| {
            if contains[t].is_empty() {
                // A term no other contains: its coefficients are 0.
                return r.clone().map(|j| unit(p, j)).collect();
            }
            // The term's columns and those of the terms containing it last, in that order.
            let mut last: Vec<usize> = r.clone().collect();
            last.extend(contains[t].iter().flat_map(|&u| ranges[u].clone()));
            let mut order: Vec<usize> = (0..p).filter(|j| !last.contains(j)).collect();
            let first_of_term = order.len();
            order.extend(&last);
            let lt = doolittle_lt(x, p, &order);
            // Its rows, their columns put back in the design's order.
            (first_of_term..first_of_term + r.len())
                .map(|i| {
                    let mut row = vec![0.0; p];
                    for (k, &j) in order.iter().enumerate() {
                        row[j] = lt[i][k];
                    }
                    row
                })
                .collect()
        })
        .collect())
}

/// Lᵀ of Doolittle's XₒᵀXₒ = LU (L unit lower-triangular, no pivoting, lmerTest's tolerance),
/// Xₒ the columns `order` of `x` (n × p, row-major): row i of Lᵀ is column i of L.
fn doolittle_lt(x: &[f64], p: usize, order: &[usize]) -> Vec<Vec<f64>> {
    let m = order.len();
    let n = x.len() / p.max(1);
    let mut a = vec![vec![0.0; m]; m];
    for i in 0..n {
        let row = &x[i * p..(i + 1) * p];
        for (j, &cj) in order.iter().enumerate() {
            for (k, &ck) in order.iter().enumerate() {
                a[j][k] += row[cj] * row[ck];
            }
        }
    }
    let mut l = vec![vec![0.0; m]; m];
    let mut u = vec![vec![0.0; m]; m];
    for i in 0..m {
        l[i][i] = 1.0;
        for j in 0..m {
            u[i][j] = a[i][j] - (0..i).map(|k| l[i][k] * u[k][j]).sum::<f64>();
        }
        for j in i + 1..m {
            let v = a[j][i] - (0..i).map(|k| l[j][k] * u[k][i]).sum::<f64>();
            l[j][i] = if u[i][i].abs() < DOOLITTLE_EPS {
                0.0
            } else {
                v / u[i][i]
            };
        }
    }
    (0..m)
        .map(|i| {
            (0..m)
                .map(|j| match l[j][i] {
                    v if v.abs() < DOOLITTLE_EPS => 0.0,
                    v => v,
                })
                .collect()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// XᵀX = [[4, 2, 2], [2, 2, 0], [2, 0, 2]] (an intercept and two indicators): L's
    /// columns by hand, L = [[1, 0, 0], [½, 1, 0], [½, −1, 1]].
    #[test]
    fn doolittle_s_factor_is_the_hand_worked_one() {
        let x = [1.0, 1.0, 0.0, 1.0, 1.0, 0.0, 1.0, 0.0, 1.0, 1.0, 0.0, 1.0];
        let lt = doolittle_lt(&x, 3, &[0, 1, 2]);
        assert_eq!(lt, [[1.0, 0.5, 0.5], [0.0, 1.0, -1.0], [0.0, 0.0, 1.0]]);
    }

    /// A balanced 2 × 2 design, `y ~ A + B`: A's and B's columns are orthogonal once the
    /// intercept is out, so type I and type II test each coefficient alone. Unbalanced, type I's
    /// first term carries the second's column and type II's does not; the last term's rows are
    /// the same in both.
    #[test]
    fn types_1_and_2_agree_where_the_design_is_balanced() {
        let design = |cells: &[(f64, f64)]| -> Vec<f64> {
            cells.iter().flat_map(|&(a, b)| [1.0, a, b]).collect()
        };
        let balanced = design(&[(0.0, 0.0), (1.0, 0.0), (0.0, 1.0), (1.0, 1.0)]);
        let ranges = [1..2, 2..3];
        let contains = [vec![], vec![]];
        for kind in [1, 2] {
            let h = anova_hypotheses(&balanced, 3, &ranges, &contains, kind).unwrap();
            assert_eq!(
                h,
                [vec![vec![0.0, 1.0, 0.0]], vec![vec![0.0, 0.0, 1.0]]],
                "{kind}"
            );
        }
        let cells = [(0.0, 0.0), (1.0, 0.0), (1.0, 0.0), (0.0, 1.0), (1.0, 1.0)];
        let unbalanced = design(&cells);
        let one = anova_hypotheses(&unbalanced, 3, &ranges, &contains, 1).unwrap();
        let two = anova_hypotheses(&unbalanced, 3, &ranges, &contains, 2).unwrap();
        assert!(one[0][0][2].abs() > 0.1, "{one:?}");
        assert_eq!(two[0], [vec![0.0, 1.0, 0.0]]);
        assert_eq!(one[1], two[1]);
        let e = anova_hypotheses(&unbalanced, 3, &ranges, &contains, 4).unwrap_err();
        assert!(e.to_string().contains("type 4"), "{e}");
    }

    /// `y ~ f * x + (1 | h)` on the formula tests' frame: f is not contained in f:x (their
    /// numeric variables differ), x is; type II tests f whole and x with f:x's columns last.
    #[test]
    fn containment_keeps_the_numeric_variables_apart() {
        let frame = super::super::tests::frame();
        let f = Formula::parse("y ~ f * x + (1 | h)").unwrap();
        let h = f.anova_contrasts(&frame, 2).unwrap();
        let names: Vec<&str> = h.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["f", "x", "f:x"]);
        // Columns (Intercept), fb, fc, x, fb:x, fc:x: f's rows are its unit rows.
        assert_eq!(h[0].1[0], [0.0, 1.0, 0.0, 0.0, 0.0, 0.0]);
        assert!(
            h[1].1[0][3] == 1.0 && h[1].1[0][1..3] == [0.0, 0.0],
            "{:?}",
            h[1]
        );
        assert_eq!(f.anova_contrasts(&frame, 3).unwrap().len(), 3);
    }
}
