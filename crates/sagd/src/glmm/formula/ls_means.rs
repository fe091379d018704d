//! lmerTest's least-squares means of the fixed effects (`ls_means(fit)`): for each term whose
//! variables are all categorical, each combination of its levels' mean prediction over a
//! reference grid, written as a contrast Lβ of the fixed effects.

use super::*;

/// Rows of the reference grid coded at a time.
const GRID_BLOCK: usize = 4096;

/// The most rows of the reference grid (the product of every categorical variable's levels).
const MAX_GRID: usize = 10_000_000;

/// The most pairwise differences a table tests (each a test of its own: 316 levels of one term).
const MAX_PAIRS: usize = 50_000;

/// A variable of the fixed effects on the reference grid: its levels, or its mean.
enum GridVar<'a> {
    Levels(&'a [String]),
    Mean(f64),
}

impl Formula {
    /// lmerTest's least-squares means (`ls_means(fit)`), on the rows of `frame` that
    /// [`Formula::design`] keeps: per term of the fixed effects whose variables are all
    /// categorical (named as R names it: `A`, `A:B`, `factor(d)`), per combination of its levels
    /// (named `Alo`, `Alo:Bu`, the first variable's levels changing fastest) the row L of the
    /// fixed effects (in the design's coding) whose Lβ is that combination's mean. The mean is
    /// taken over the reference grid: every level of the other categorical variables, each as
    /// often, and every numeric variable at its mean over the rows. Offsets are left out, as
    /// lmerTest's. No term: an empty list. Refused by name for a column read both as a number
    /// and as a factor, and for a grid of over ten million rows.
    #[allow(clippy::type_complexity)]
    pub fn ls_means_contrasts(
        &self,
        frame: &Frame,
    ) -> Result<Vec<(String, Vec<(String, Vec<f64>)>)>> {
        let (cols, rows) = complete_rows(frame, &self.columns(), Source::Fitted)?;
        let coding = self.coding(&cols, &rows);
        let vars = self.grid_vars(&cols, &rows, &coding)?;
        let terms: Vec<&Vec<Var>> = (self.fixed.terms.iter())
            .filter(|t| t.iter().all(|v| coding.categorical(v).is_some()))
            .collect();
        if terms.is_empty() {
            return Ok(Vec::new());
        }
        // Grid row g has level (g / stride) mod levels of each categorical variable.
        let mut strides = Vec::with_capacity(vars.len());
        let mut grid = 1usize;
        for (_, g) in &vars {
            strides.push(grid);
            if let GridVar::Levels(l) = g {
                grid = grid.saturating_mul(l.len());
            }
        }
        if grid > MAX_GRID {
            return Err(invalid(
                "formula",
                format!("a reference grid of {grid} rows (every combination of the categorical variables' levels)"),
                "least-squares means average over every combination: fit a model with fewer \
                 or coarser factors",
            ));
        }
        // Each term's variables: their place among the grid's and their levels.
        let slot = |v: &Var| {
            vars.iter()
                .position(|(w, _)| *w == v)
                .expect("listed above")
        };
        let term_levels: Vec<Vec<(usize, &[String])>> = (terms.iter())
            .map(|t| {
                (t.iter())
                    .map(|v| match vars[slot(v)].1 {
                        GridVar::Levels(l) => (slot(v), l),
                        GridVar::Mean(_) => unreachable!("the terms' variables are categorical"),
                    })
                    .collect()
            })
            .collect();
        let sums = self.grid_sums((&vars, &strides, grid), &term_levels, (&cols, &coding))?;
        Ok((terms.iter().zip(&term_levels).zip(sums))
            .map(|((term, levels), sums)| {
                let per = (grid / sums.len()) as f64;
                let named = (sums.into_iter().enumerate())
                    .map(|(combo, row)| {
                        let name = combination_name(term, levels, combo);
                        (name, row.into_iter().map(|s| s / per).collect())
                    })
                    .collect();
                (type3::term_label(term), named)
            })
            .collect())
    }
}

impl Formula {
    /// The fixed effects' variables in order of appearance, each with its levels (categorical)
    /// or its mean over `rows`; refused by name where a column is read both ways.
    fn grid_vars<'c>(
        &'c self,
        cols: &Columns<'_>,
        rows: &[usize],
        coding: &'c Coding,
    ) -> Result<Vec<(&'c Var, GridVar<'c>)>> {
        let mut vars: Vec<(&Var, GridVar<'_>)> = Vec::new();
        for v in self.fixed.terms.iter().flatten() {
            if vars.iter().any(|(w, _)| *w == v) {
                continue;
            }
            if let Some((w, _)) = vars.iter().find(|(w, _)| w.name == v.name) {
                return Err(invalid(
                    "formula",
                    format!(
                        "`{}` read both as a number and as `factor({})`",
                        w.name, w.name
                    ),
                    "least-squares means need each column read one way: add a copy of the column \
                     under another name",
                ));
            }
            let g = match coding.categorical(v) {
                Some(levels) => GridVar::Levels(levels),
                None => {
                    let values = numbers(cols, rows, &v.name, "variable", Source::Fitted)?;
                    GridVar::Mean(values.iter().sum::<f64>() / values.len() as f64)
                }
            };
            vars.push((v, g));
        }
        Ok(vars)
    }

    /// Per term (its variables' places in the grid and levels, `term_levels`), per combination
    /// of its levels, the sum of the design's rows over the grid rows that have it: the grid
    /// (`vars`, each categorical one's `strides`, `grid` rows) coded a block of rows at a time
    /// under `coding`.
    #[allow(clippy::type_complexity)]
    fn grid_sums(
        &self,
        (vars, strides, grid): (&[(&Var, GridVar<'_>)], &[usize], usize),
        term_levels: &[Vec<(usize, &[String])>],
        (cols, coding): (&Columns<'_>, &Coding),
    ) -> Result<Vec<Vec<Vec<f64>>>> {
        let mut sums: Vec<Vec<Vec<f64>>> = Vec::with_capacity(term_levels.len());
        for start in (0..grid).step_by(GRID_BLOCK) {
            let n = GRID_BLOCK.min(grid - start);
            let columns: Vec<Column> = (vars.iter().zip(strides))
                .map(|((v, g), &stride)| {
                    grid_column(cols[v.name.as_str()], g, stride, start..start + n)
                })
                .collect();
            let block: Columns<'_> = (vars.iter().zip(&columns))
                .map(|((v, _), c)| (v.name.as_str(), c))
                .collect();
            let block_rows: Vec<usize> = (0..n).collect();
            let (x, _) = self.matrix(&self.fixed, &block, &block_rows, (coding, Source::New))?;
            let p = x.len() / n;
            for (t, levels) in term_levels.iter().enumerate() {
                if sums.len() == t {
                    let combos = levels.iter().map(|(_, l)| l.len()).product();
                    sums.push(vec![vec![0.0; p]; combos]);
                }
                for (i, row) in x.chunks_exact(p).enumerate() {
                    let (mut combo, mut scale) = (0, 1);
                    for &(k, l) in levels {
                        combo += (start + i) / strides[k] % l.len() * scale;
                        scale *= l.len();
                    }
                    sums[t][combo]
                        .iter_mut()
                        .zip(row)
                        .for_each(|(s, v)| *s += v);
                }
            }
        }
        Ok(sums)
    }
}

/// The grid rows `at` of a variable read from `source` (for its kind: numbers or text): its
/// level (g / stride) mod levels at row g, or its mean.
fn grid_column(
    source: &Column,
    g: &GridVar<'_>,
    stride: usize,
    at: std::ops::Range<usize>,
) -> Column {
    match (g, source) {
        (GridVar::Mean(m), _) => Column::Number(vec![*m; at.len()]),
        (GridVar::Levels(l), Column::Number(_)) => Column::Number(
            at.map(|r| l[r / stride % l.len()].parse().unwrap_or(f64::NAN))
                .collect(),
        ),
        (GridVar::Levels(l), Column::Text(_)) => {
            Column::Text(at.map(|r| Some(l[r / stride % l.len()].clone())).collect())
        }
    }
}

/// Combination `combo` of a term's levels (`levels`, per variable) as R names it (`Alo:Bu`, the
/// first variable's level changing fastest).
fn combination_name(term: &[Var], levels: &[(usize, &[String])], mut combo: usize) -> String {
    let mut parts = Vec::with_capacity(term.len());
    for (v, (_, l)) in term.iter().zip(levels) {
        let shown = match v.factor {
            true => format!("factor({})", v.name),
            false => v.name.clone(),
        };
        parts.push(format!("{shown}{}", l[combo % l.len()]));
        combo /= l.len();
    }
    parts.join(":")
}

/// lmerTest's pairwise differences of least-squares means (`ls_means(fit, pairwise = TRUE)`):
/// for each pair i < j of `means` (names and rows L), in that order, `"a - b"` and Lᵢ − Lⱼ.
pub fn pairwise_contrasts(means: &[(String, Vec<f64>)]) -> Vec<(String, Vec<f64>)> {
    let mut out = Vec::new();
    for (i, (a, la)) in means.iter().enumerate() {
        for (b, lb) in &means[i + 1..] {
            let row = la.iter().zip(lb).map(|(x, y)| x - y).collect();
            out.push((format!("{a} - {b}"), row));
        }
    }
    out
}

/// How a table of least-squares means found its degrees of freedom: lmerTest's methods for a
/// Gaussian fit, Wald z tests (infinite) for the other families.
pub const LS_MEANS_METHODS: [&str; 3] = ["satterthwaite", "kenward_roger", "wald"];

/// A table of lmerTest's least-squares means (or, with `pairwise`, of each pair's difference
/// within each term) from each term's means (as [`Formula::ls_means_contrasts`] gives them, or
/// the bindings' own codings) at the fit θ̂ of `model`: for a Gaussian model Satterthwaite's t
/// tests (Kenward and Roger's with `kenward_roger`), for the other families Wald z tests with
/// the fit's covariance. Per row its term, its name and [`contrast_table`]'s values at
/// `level`, on the link's scale or, with `response`, on the response's (emmeans' `type =
/// "response"`: a mean g⁻¹(η̂) with the delta method's standard error |dμ/dη| se and its
/// interval's ends mapped by g⁻¹; a pairwise difference of logs a ratio, of logits an odds
/// ratio, exp(d) with standard error exp(d) se, named `a / b`; the tests stay the link's; the
/// identity link's unchanged); and the method, one of [`LS_MEANS_METHODS`]. Refused by name
/// where the tests cannot be made (no covariance, Kenward and Roger's refusals).
#[allow(clippy::type_complexity)]
pub fn ls_means_table(
    (model, fit): (&Glmm, &crate::glmm::GlmmFit),
    terms: Vec<(String, Vec<(String, Vec<f64>)>)>,
    (pairwise, kenward_roger, response): (bool, bool, bool),
    level: f64,
) -> Result<(&'static str, Vec<(String, String, [f64; 7])>)> {
    let pairs: usize = terms
        .iter()
        .map(|(_, m)| m.len() * m.len().saturating_sub(1) / 2)
        .sum();
    if pairwise && pairs > MAX_PAIRS {
        return Err(invalid(
            "ls_means",
            format!("{pairs} pairwise differences of least-squares means"),
            &format!("each is tested on its own: ask for the means, or for terms with fewer levels (at most {MAX_PAIRS} pairs)"),
        ));
    }
    let mut named = Vec::new();
    for (term, means) in terms {
        let rows = match pairwise {
            true => pairwise_contrasts(&means),
            false => means,
        };
        named.extend(rows.into_iter().map(|(name, l)| (term.clone(), name, l)));
    }
    let contrasts: Vec<Vec<f64>> = named.iter().map(|(_, _, l)| l.clone()).collect();
    let (method, tests) = match (model.family, kenward_roger) {
        (Family::Gaussian, true) => (
            LS_MEANS_METHODS[1],
            model.kenward_roger_contrasts(&fit.theta, &contrasts)?,
        ),
        (Family::Gaussian, false) => (
            LS_MEANS_METHODS[0],
            model.satterthwaite_contrasts(&fit.theta, fit.tested_covariance()?, &contrasts)?,
        ),
        _ => (LS_MEANS_METHODS[2], fit.wald_contrasts(&contrasts)?),
    };
    let mut table = contrast_table(&fit.theta, &contrasts, &tests, level);
    if response && model.family != Family::Gaussian {
        table
            .iter_mut()
            .for_each(|v| on_response_scale(model.family, pairwise, v));
    }
    let rows = (named.into_iter().zip(table))
        .map(|((term, mut name, _), values)| {
            if response && pairwise && model.family != Family::Gaussian {
                name = name.replacen(" - ", " / ", 1);
            }
            (term, name, values)
        })
        .collect();
    Ok((method, rows))
}

/// A row of [`contrast_table`] on the link's scale taken to the response's: a mean through the
/// inverse link (log: exp; logit: the logistic), its standard error by the delta method; a
/// difference (`pairwise`) to exp(d), a ratio of rates or of odds. t and p are the link's.
fn on_response_scale(family: Family, pairwise: bool, v: &mut [f64; 7]) {
    let logistic = |x: f64| 1.0 / (1.0 + (-x).exp());
    let (inverse, slope): (&dyn Fn(f64) -> f64, f64) = match (family, pairwise) {
        (Family::Binomial, false) => {
            let mu = logistic(v[0]);
            (&logistic, mu * (1.0 - mu))
        }
        _ => (&f64::exp, v[0].exp()),
    };
    v[0] = inverse(v[0]);
    v[1] *= slope;
    v[4] = inverse(v[4]);
    v[5] = inverse(v[5]);
}

/// lmerTest's table of contrasts with intervals (`contest1D(…, confint = TRUE)`): per row l of
/// `contrasts` with its test (standard error, degrees of freedom, p, as
/// [`Glmm::satterthwaite_contrasts`] gives it), its estimate lᵀβ̂ (β̂ θ's first entries), the
/// standard error, the degrees of freedom, t, the interval's ends at `level` (Student's t with
/// those degrees of freedom, the normal law's where they are infinite) and p.
pub fn contrast_table(
    theta: &[f64],
    contrasts: &[Vec<f64>],
    tests: &[(f64, f64, f64)],
    level: f64,
) -> Vec<[f64; 7]> {
    use statrs::distribution::{ContinuousCDF, Normal, StudentsT};
    let upper = 0.5 + level / 2.0;
    (contrasts.iter().zip(tests))
        .map(|(l, &(se, df, p))| {
            let estimate: f64 = l.iter().zip(theta).map(|(a, b)| a * b).sum();
            let q = match StudentsT::new(0.0, 1.0, df) {
                Ok(law) if df.is_finite() => law.inverse_cdf(upper),
                _ => Normal::standard().inverse_cdf(upper),
            };
            let t = estimate / se;
            [estimate, se, df, t, estimate - q * se, estimate + q * se, p]
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::super::tests::frame;
    use super::*;

    /// Each term's means: (term, [(name, L)]).
    #[allow(clippy::type_complexity)]
    fn means(formula: &str, frame: &Frame) -> Vec<(String, Vec<(String, Vec<f64>)>)> {
        Formula::parse(formula)
            .unwrap()
            .ls_means_contrasts(frame)
            .unwrap()
    }

    fn close(a: &[f64], b: &[f64]) -> bool {
        a.len() == b.len() && a.iter().zip(b).all(|(x, y)| (x - y).abs() < 1e-12)
    }

    /// Columns (Intercept), x, fb, fc, factor(g)10 on the five complete rows (x's mean 1.5, g
    /// 10 or 2): each level of f with g averaged (½ of factor(g)10), and each of g with f
    /// averaged (⅓ of fb and of fc); x, numeric, has no means of its own.
    #[test]
    fn a_level_s_mean_averages_the_other_factors_and_holds_numbers_at_their_mean() {
        let m = means("y ~ x + f + factor(g) + (1 | h)", &frame());
        assert_eq!(m.len(), 2);
        let (term, f) = &m[0];
        assert_eq!(term, "f");
        let names: Vec<&str> = f.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["fa", "fb", "fc"]);
        assert!(close(&f[0].1, &[1.0, 1.5, 0.0, 0.0, 0.5]), "{f:?}");
        assert!(close(&f[2].1, &[1.0, 1.5, 0.0, 1.0, 0.5]), "{f:?}");
        let (term, g) = &m[1];
        assert_eq!(term, "factor(g)");
        assert_eq!(g[1].0, "factor(g)10");
        let third = 1.0 / 3.0;
        assert!(close(&g[0].1, &[1.0, 1.5, third, third, 0.0]), "{g:?}");
        assert!(close(&g[1].1, &[1.0, 1.5, third, third, 1.0]), "{g:?}");
    }

    /// `f * h`: the interaction's means are the cells (first variable fastest), f's the cells
    /// averaged over h's three levels.
    #[test]
    fn an_interaction_s_means_are_its_cells() {
        let m = means("y ~ f * h + (1 | g)", &frame());
        let terms: Vec<&str> = m.iter().map(|(t, _)| t.as_str()).collect();
        assert_eq!(terms, ["f", "h", "f:h"]);
        // (Intercept), fb, fc, hv, hw, fb:hv, fc:hv, fb:hw, fc:hw.
        let third = 1.0 / 3.0;
        let fb = [1.0, 1.0, 0.0, third, third, third, 0.0, third, 0.0];
        assert!(close(&m[0].1[1].1, &fb), "{:?}", m[0].1[1]);
        let (name, cell) = &m[2].1[4];
        assert_eq!(name, "fb:hv");
        assert!(close(cell, &[1.0, 1.0, 0.0, 1.0, 0.0, 1.0, 0.0, 0.0, 0.0]));
        assert_eq!(m[2].1.len(), 9);
    }

    /// A grid of 70 × 70 rows, coded in blocks: a's level i averages b's 69 contrasts (1/70
    /// each) whichever block its rows fall in.
    #[test]
    fn a_grid_longer_than_a_block_averages_every_row() {
        let n = 70;
        let a: Vec<f64> = (0..n).map(|i| i as f64).collect();
        let b: Vec<f64> = (0..n).map(|i| ((i * 3) % n) as f64).collect();
        let y = vec![0.0; n];
        let g = vec![0.0; n];
        let frame = Frame::new(
            ["y", "a", "b", "g"].map(String::from).to_vec(),
            [y, a, b, g].map(Column::Number).to_vec(),
        )
        .unwrap();
        let m = means("y ~ factor(a) + factor(b) + (1 | g)", &frame);
        let p = 1 + 2 * (n - 1);
        for (i, (name, l)) in m[0].1.iter().enumerate() {
            assert_eq!(name, &format!("factor(a){i}"));
            let mut want = vec![0.0; p];
            want[0] = 1.0;
            if i > 0 {
                want[i] = 1.0;
            }
            want[n..].iter_mut().for_each(|v| *v = 1.0 / n as f64);
            assert!(close(l, &want), "{name}: {l:?}");
        }
    }

    /// Each pair i < j in order, named `a - b`.
    #[test]
    fn pairs_are_differences_in_lmertest_s_order() {
        let means =
            [("A1", 1.0), ("A2", 2.0), ("A3", 4.0)].map(|(n, v)| (n.to_string(), vec![1.0, v]));
        let pairs = pairwise_contrasts(&means);
        let names: Vec<&str> = pairs.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["A1 - A2", "A1 - A3", "A2 - A3"]);
        assert_eq!(pairs[1].1, [0.0, -3.0]);
    }

    /// No term of categorical variables only: no means. A column read two ways, or a grid of
    /// over ten million rows, is refused by name.
    #[test]
    fn no_means_without_factor_terms_and_refusals_name_the_cause() {
        assert!(means("y ~ x + x:f + (1 | g)", &frame()).is_empty());
        let both = Formula::parse("y ~ x + factor(x) + (1 | g)").unwrap();
        let e = both.ls_means_contrasts(&frame()).unwrap_err().to_string();
        assert!(
            e.contains("`x` read both as a number and as `factor(x)`"),
            "{e}"
        );
        let n = 60;
        let names = ["y", "a", "b", "c", "d"];
        let columns = (0..5)
            .map(|_| Column::Number((0..n).map(|i| i as f64).collect()))
            .collect();
        let frame = Frame::new(names.map(String::from).to_vec(), columns).unwrap();
        let big = "y ~ factor(a) + factor(b) + factor(c) + factor(d) + (1 | d)";
        let big = Formula::parse(big).unwrap();
        let e = big.ls_means_contrasts(&frame).unwrap_err().to_string();
        assert!(e.contains("a reference grid of 12960000 rows"), "{e}");
    }

    /// The table's estimate, interval and t from the contrasts' tests: a unit contrast's
    /// estimate is its coefficient, its interval ±1.959964 se on the normal law, ±2.570582 se
    /// on Student's t with 5 degrees of freedom.
    #[test]
    fn the_table_s_intervals_are_student_s_or_the_normal_law_s() {
        let theta = [2.0, -1.0, 0.3];
        let rows = [vec![1.0, 0.0], vec![1.0, 1.0]];
        let tests = [(0.5, 5.0, 0.01), (0.25, f64::INFINITY, 0.2)];
        let t = contrast_table(&theta, &rows, &tests, 0.95);
        assert_eq!(t[0][0], 2.0);
        assert!((t[0][4] - (2.0 - 2.570582 * 0.5)).abs() < 1e-6, "{t:?}");
        assert!((t[1][5] - (1.0 + 1.959964 * 0.25)).abs() < 1e-6, "{t:?}");
        assert_eq!((t[1][3], t[1][6]), (4.0, 0.2));
    }
}
