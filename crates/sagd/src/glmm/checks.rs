//! Data a mixed model cannot be fitted to, told apart before any fitting and named with the
//! input, the place and the fix: sizes that do not match, values that are not finite or outside
//! the family's support, unused group numbers, designs whose fixed effects or random-effect
//! variances are not identified, and responses at the edge of the family's support.

use super::{Family, RandomTerm};
use crate::error::{invalid, Result};

/// What [`data`] found the data to be.
pub(super) struct Checked {
    /// Fixed effects.
    pub p: usize,
    /// Each term's number of levels.
    pub levels: Vec<usize>,
    /// The numbers of trials (1 where none were given).
    pub trials: Vec<f64>,
}

/// Checks a model's data (see [`super::Glmm::with_terms`]) before anything is built from them.
pub(super) fn data(
    family: Family,
    y: &[f64],
    x: &[f64],
    terms: &[RandomTerm],
    trials: Option<Vec<f64>>,
) -> Result<Checked> {
    let n = y.len();
    if n == 0 {
        return Err(invalid(
            "y",
            "empty".into(),
            "give at least one observation",
        ));
    }
    if terms.is_empty() {
        return Err(invalid(
            "groups",
            "no random-effect term".into(),
            "give at least one grouping factor",
        ));
    }
    if !x.len().is_multiple_of(n) {
        return Err(invalid(
            "X",
            format!("{} values", x.len()),
            &format!("give a design with {n} rows"),
        ));
    }
    let p = x.len() / n;
    if let Some(i) = y.iter().position(|v| !v.is_finite()) {
        return Err(invalid(
            "y",
            format!("{} at row {i}", y[i]),
            "remove or impute the missing or infinite values",
        ));
    }
    if x.iter().any(|v| !v.is_finite()) {
        return Err(invalid(
            "X",
            "a value that is not finite".into(),
            "remove or impute the missing or infinite values",
        ));
    }
    let levels = term_levels(terms, n)?;
    let trials = checked_trials(family, trials, n)?;
    for i in 0..n {
        let yi = y[i];
        if !family.admits(yi, trials[i]) {
            return Err(invalid(
                "y",
                format!("{yi} at row {i}"),
                "Poisson needs counts 0, 1, 2, …; binomial needs successes between 0 and the row's trials (whole numbers)",
            ));
        }
    }
    // Data at the edge of the family's support have no maximum: the intercept runs off to ∓∞.
    let edge = at_the_edge(family, y, &trials);
    if let Some(what) = edge {
        return Err(invalid(
            "y",
            what.into(),
            "the maximum-likelihood estimate does not exist (the intercept goes to infinity): there is nothing to fit in these data",
        ));
    }
    if let Some(j) = dependent_column(x, n, p) {
        return Err(invalid(
            "X",
            format!("column {j} is a linear combination of the columns before it (a duplicate, or constant beside the intercept)"),
            "the fixed effects are not identified: drop that column",
        ));
    }
    identified_terms(family, &levels, n, |t| {
        format!("grouping factor {t} (random-effect term {})", t + 1)
    })?;
    distinct_effects(terms, n, |t, a| {
        format!("column {a} of Z in random-effect term {}", t + 1)
    })?;
    Ok(Checked { p, levels, trials })
}

/// An offset (see [`super::Glmm::with_offset`]) checked against `n` rows: its values, or an
/// empty vector for none.
pub(super) fn offset(offset: Option<Vec<f64>>, n: usize) -> Result<Vec<f64>> {
    let Some(o) = offset else {
        return Ok(Vec::new());
    };
    if o.len() != n {
        return Err(invalid(
            "offset",
            format!("{} values for {n} observations", o.len()),
            "give one offset per row of y",
        ));
    }
    if let Some(i) = o.iter().position(|v| !v.is_finite()) {
        return Err(invalid(
            "offset",
            format!("{} at row {i}", o[i]),
            "give every row a finite offset (the log of an exposure needs the exposure > 0)",
        ));
    }
    Ok(o)
}

/// The random-effect terms whose variances the data can tell apart, as lme4 requires: every
/// grouping factor with two levels or more (one level's effect is the intercept's), and for the
/// Gaussian family fewer levels than observations (one row a level: its effect and the residual
/// are one variance). Counts and successes may have a level a row, an observation-level effect.
/// `name(t)` names term t in the error.
pub(super) fn identified_terms(
    family: Family,
    levels: &[usize],
    n: usize,
    name: impl Fn(usize) -> String,
) -> Result<()> {
    for (t, &g) in levels.iter().enumerate() {
        if g < 2 {
            return Err(invalid(
                "groups",
                format!("{} has one level", name(t)),
                "a random effect needs a grouping factor of two levels or more: drop the term (with one group the model is a GLM)",
            ));
        }
        if family == Family::Gaussian && g >= n {
            return Err(invalid(
                "groups",
                format!("{} has a level for each of the {n} observations", name(t)),
                "with one observation a level the Gaussian family cannot tell that term's variance from the residual's: drop the term, or group the rows more coarsely",
            ));
        }
    }
    Ok(())
}

/// Refuses two effects of one grouping factor (terms with the same groups) whose columns are
/// proportional, as `(1 | g) + (1 | g)` or `(1 + c | g)` with c constant: their variances, and
/// with them every standard error, are not identified (only their sum is). `name(t, a)` names
/// column a of term t in the error.
pub(super) fn distinct_effects(
    terms: &[RandomTerm],
    n: usize,
    name: impl Fn(usize, usize) -> String,
) -> Result<()> {
    // Each term's columns, taken out of its row-major Z once.
    let columns: Vec<Vec<Vec<f64>>> = terms
        .iter()
        .map(|t| {
            let q = t.z.len() / n.max(1);
            (0..q)
                .map(|a| t.z.iter().skip(a).step_by(q.max(1)).copied().collect())
                .collect()
        })
        .collect();
    // Cauchy–Schwarz with equality, to rounding: (u·v)² = |u|²|v|².
    let proportional = |u: &[f64], v: &[f64]| {
        let dot = |a: &[f64], b: &[f64]| a.iter().zip(b).map(|(x, y)| x * y).sum::<f64>();
        let (uv, uu, vv) = (dot(u, v), dot(u, u), dot(v, v));
        uu > 0.0 && vv > 0.0 && uv * uv >= uu * vv * (1.0 - 1e-12)
    };
    for (t, a_term) in terms.iter().enumerate() {
        for (s, b_term) in terms.iter().enumerate().skip(t) {
            if s != t && a_term.group != b_term.group {
                continue;
            }
            for (a, u) in columns[t].iter().enumerate() {
                let first_b = if s == t { a + 1 } else { 0 };
                for (b, v) in columns[s].iter().enumerate().skip(first_b) {
                    if proportional(u, v) {
                        return Err(invalid(
                            "random effects",
                            format!(
                                "{} and {} are one effect (proportional columns) of one grouping factor",
                                name(t, a),
                                name(s, b)
                            ),
                            "their variances cannot be told apart: give each effect once per grouping factor, e.g. (1 + x | g) instead of (1 | g) + (1 + x | g)",
                        ));
                    }
                }
            }
        }
    }
    Ok(())
}

/// Each random-effect term's number of levels, once its sizes, values and group numbers are
/// checked against `n` observations.
fn term_levels(terms: &[RandomTerm], n: usize) -> Result<Vec<usize>> {
    let mut levels = Vec::with_capacity(terms.len());
    for (t, term) in terms.iter().enumerate() {
        if term.group.len() != n {
            return Err(invalid(
                "groups",
                format!("{} values in grouping factor {t}", term.group.len()),
                &format!("give one group index per observation ({n})"),
            ));
        }
        if !term.z.len().is_multiple_of(n) || term.z.is_empty() {
            return Err(invalid(
                "Z",
                format!("{} values in term {t}", term.z.len()),
                &format!("give a design with {n} rows and at least one column"),
            ));
        }
        if term.z.iter().any(|v| !v.is_finite()) {
            return Err(invalid(
                "Z",
                format!("a value that is not finite in term {t}"),
                "remove or impute the missing or infinite values",
            ));
        }
        let g = term.group.iter().max().map_or(0, |m| m + 1);
        let mut used = vec![false; g];
        term.group.iter().for_each(|&j| used[j] = true);
        if let Some(j) = used.iter().position(|u| !u) {
            return Err(invalid(
                "groups",
                format!("no observation in group {j} of grouping factor {t}"),
                "number the groups 0, 1, …, G − 1 with every number used",
            ));
        }
        levels.push(g);
    }
    Ok(levels)
}

/// The numbers of trials (1 where none were given), one per observation, whole and at least 1
/// for the binomial.
fn checked_trials(family: Family, trials: Option<Vec<f64>>, n: usize) -> Result<Vec<f64>> {
    let trials = trials.unwrap_or_else(|| vec![1.0; n]);
    if trials.len() != n {
        return Err(invalid(
            "trials",
            format!("{} values", trials.len()),
            &format!("give one number of trials per observation ({n})"),
        ));
    }
    if family == Family::Binomial {
        if let Some(i) = trials
            .iter()
            .position(|t| !(t.is_finite() && *t >= 1.0 && t.fract() == 0.0))
        {
            return Err(invalid(
                "trials",
                format!("{} at row {i}", trials[i]),
                "give each row's number of trials as a whole number, at least 1",
            ));
        }
    }
    Ok(trials)
}

/// What makes `y` sit at the edge of `family`'s support in every row (all counts 0; no success,
/// or only successes), where the likelihood has no maximum; `None` otherwise.
pub(super) fn at_the_edge(family: Family, y: &[f64], trials: &[f64]) -> Option<&'static str> {
    match family {
        Family::Poisson => y.iter().all(|&v| v == 0.0).then_some("0 in every row"),
        Family::Binomial if y.iter().all(|&v| v == 0.0) => Some("0 successes in every row"),
        Family::Binomial if y.iter().zip(trials).all(|(v, t)| v == t) => {
            Some("every trial a success")
        }
        _ => None,
    }
}

/// The first column of the n × p row-major design `x` that lies (to a relative 1e-9) in the span
/// of the columns before it, by Gram–Schmidt on the columns.
pub(super) fn dependent_column(x: &[f64], n: usize, p: usize) -> Option<usize> {
    let mut basis: Vec<Vec<f64>> = Vec::with_capacity(p);
    for j in 0..p {
        let mut c: Vec<f64> = (0..n).map(|i| x[i * p + j]).collect();
        let norm0 = c.iter().map(|v| v * v).sum::<f64>().sqrt();
        for _ in 0..2 {
            for b in &basis {
                let dot: f64 = c.iter().zip(b).map(|(u, v)| u * v).sum();
                c.iter_mut().zip(b).for_each(|(u, v)| *u -= dot * v);
            }
        }
        let norm = c.iter().map(|v| v * v).sum::<f64>().sqrt();
        if norm <= 1e-9 * norm0 || norm0 == 0.0 {
            return Some(j);
        }
        c.iter_mut().for_each(|v| *v /= norm);
        basis.push(c);
    }
    None
}

/// How far from a whole number, relative to the row's trials, a binomial row's successes from a
/// proportion may be (float rounding of a proportion such as 1/3) and still count as whole.
const WHOLE: f64 = 1e-6;

impl super::Glmm {
    /// A binomial response given lme4's way with prior weights (`glmer(y ~ …, weights = w,
    /// family = binomial)`): each yᵢ the proportion of wᵢ trials that succeeded, turned into the
    /// successes yᵢwᵢ and the trials wᵢ that [`super::Glmm::with_terms`] takes (the same
    /// likelihood as lme4's, its constant included). A 0/1 response with weights is the
    /// proportion 0 or 1 of wᵢ trials. Refused by name where `trials` are given too (the
    /// weights would give them twice) and unless each wᵢ is a whole number, at least 1, each yᵢ
    /// in [0, 1] and yᵢwᵢ a whole number (to a relative 1e-6: lme4 warns and fits fractional
    /// successes); `row` names row i in the errors.
    pub fn weighted_proportions(
        (y, trials): (&[f64], Option<&[f64]>),
        w: &[f64],
        row: impl Fn(usize) -> String,
    ) -> Result<(Vec<f64>, Vec<f64>)> {
        if trials.is_some() {
            return Err(invalid(
                "weights",
                "beside the trials of cbind(successes, failures)".into(),
                "a binomial's weights are its trials: give the counts by cbind(successes, \
                 failures) or the proportion of successes with weights, not both",
            ));
        }
        if w.len() != y.len() {
            return Err(invalid(
                "weights",
                format!("{} values", w.len()),
                &format!("give one weight per row of the response ({})", y.len()),
            ));
        }
        let mut successes = Vec::with_capacity(y.len());
        for (i, (&p, &m)) in y.iter().zip(w).enumerate() {
            if !(m.is_finite() && m >= 1.0 && m.fract() == 0.0) {
                return Err(invalid(
                    "weights",
                    format!("{m} at {}", row(i)),
                    "a binomial's weights are its rows' numbers of trials: give each a whole \
                     number, at least 1 (drop a row of weight 0)",
                ));
            }
            let s = p * m;
            if !(0.0..=1.0).contains(&p) || (s - s.round()).abs() > WHOLE * m {
                return Err(invalid(
                    "data",
                    format!("the response is {p} of {m} trials at {}", row(i)),
                    "with weights, a binomial's response is the proportion of the row's trials \
                     that succeeded, in [0, 1], and that proportion times the weight a whole \
                     number of successes: give the proportion to more digits, or the counts as \
                     cbind(successes, failures) without weights",
                ));
            }
            successes.push(s.round());
        }
        Ok((successes, w.to_vec()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::glmm::Glmm;

    #[test]
    fn a_column_in_the_span_of_those_before_it_is_found() {
        // Rows (1, x, 2x - 1): the third column is 2·second − first.
        let x: Vec<f64> = [0.5, -1.0, 2.0, 0.3]
            .iter()
            .flat_map(|&v| [1.0, v, 2.0 * v - 1.0])
            .collect();
        assert_eq!(dependent_column(&x, 4, 3), Some(2));
        assert_eq!(dependent_column(&x, 4, 2), None);
        let x: Vec<f64> = x.chunks(3).flat_map(|r| [r[0], r[1]]).collect();
        assert_eq!(dependent_column(&x, 4, 2), None);
        // A column of zeros, and a constant column beside the intercept.
        assert_eq!(dependent_column(&[1.0, 0.0, 1.0, 0.0], 2, 2), Some(1));
        assert_eq!(dependent_column(&[1.0, 3.0, 1.0, 3.0], 2, 2), Some(1));
    }

    #[test]
    fn responses_at_the_edge_of_the_support_are_named() {
        assert!(at_the_edge(Family::Poisson, &[0.0, 0.0], &[1.0, 1.0]).is_some());
        assert!(at_the_edge(Family::Poisson, &[0.0, 1.0], &[1.0, 1.0]).is_none());
        assert!(at_the_edge(Family::Binomial, &[3.0, 5.0], &[3.0, 5.0]).is_some());
        assert!(at_the_edge(Family::Binomial, &[2.0, 5.0], &[3.0, 5.0]).is_none());
        assert!(at_the_edge(Family::Gaussian, &[0.0, 0.0], &[1.0, 1.0]).is_none());
    }

    #[test]
    fn bad_data_is_named() {
        let err = |r: Result<Glmm>| format!("{:?}", r.unwrap_err());
        let e = err(Glmm::new(
            Family::Poisson,
            vec![1.0, -1.0],
            vec![1.0, 1.0],
            &[0, 0],
            vec![1.0, 1.0],
            None,
        ));
        assert!(e.contains("y") && e.contains("row 1"), "{e}");
        let e = err(Glmm::new(
            Family::Gaussian,
            vec![1.0, 2.0],
            vec![1.0, 1.0],
            &[0, 2],
            vec![1.0, 1.0],
            None,
        ));
        assert!(e.contains("group 1"), "{e}");
        let e = err(Glmm::new(
            Family::Gaussian,
            vec![1.0, f64::NAN],
            vec![1.0, 1.0],
            &[0, 0],
            vec![1.0, 1.0],
            None,
        ));
        assert!(e.contains("NaN"), "{e}");
        // The silent fits: all-zero counts ("polished", β₀ = −194.7), a duplicated
        // column (its coefficient split in two), impossible trials (blamed on y).
        let e = err(Glmm::new(
            Family::Poisson,
            vec![0.0; 4],
            vec![1.0; 4],
            &[0, 0, 1, 1],
            vec![1.0; 4],
            None,
        ));
        assert!(
            e.contains("0 in every row") && e.contains("does not exist"),
            "{e}"
        );
        let e = err(Glmm::new(
            Family::Poisson,
            vec![0.0, 1.0, 2.0, 1.0],
            vec![1.0, 0.5, 1.0, 1.0, -1.0, 1.0, 1.0, 2.0, 1.0, 1.0, 0.0, 1.0],
            &[0, 0, 1, 1],
            vec![1.0; 4],
            None,
        ));
        assert!(
            e.contains("column 2") && e.contains("drop that column"),
            "{e}"
        );
        let e = err(Glmm::new(
            Family::Binomial,
            vec![0.0, 1.0],
            vec![1.0; 2],
            &[0, 1],
            vec![1.0; 2],
            Some(vec![-1.0, 2.0]),
        ));
        assert!(e.contains("`trials`") || e.contains("\"trials\""), "{e}");
    }

    #[test]
    fn variances_the_data_cannot_identify_are_named() {
        // As lme4 refuses them: one level (its effect is the intercept's), and for the Gaussian
        // family a level a row (its effect's variance is the residual's). A level a row of
        // counts is an observation-level effect, which stands.
        let y = vec![1.0, 0.0, 2.0, 1.0];
        let model =
            |family, g: &[usize]| Glmm::new(family, y.clone(), vec![1.0; 4], g, vec![1.0; 4], None);
        let e = format!("{:?}", model(Family::Poisson, &[0, 0, 0, 0]).unwrap_err());
        assert!(
            e.contains("one level") && e.contains("two levels or more"),
            "{e}"
        );
        let e = format!("{:?}", model(Family::Gaussian, &[0, 1, 2, 3]).unwrap_err());
        assert!(
            e.contains("each of the 4 observations") && e.contains("residual"),
            "{e}"
        );
        assert!(model(Family::Poisson, &[0, 1, 2, 3]).is_ok());
        assert!(model(Family::Gaussian, &[0, 1, 2, 2]).is_ok());
    }

    /// lme4's binomial weights: proportions of whole trials (1/3 of 3 to its float rounding, a
    /// 0/1 response) become successes and trials; weights that are not whole trials, a
    /// proportion outside [0, 1] or one that is no whole number of its trials is refused with
    /// the row named.
    #[test]
    fn binomial_weights_are_trials_of_proportions() {
        let row = |i: usize| format!("row {i}");
        let y = [1.0 / 3.0, 0.0, 1.0, 0.25];
        let (s, m) = Glmm::weighted_proportions((&y, None), &[3.0, 5.0, 2.0, 8.0], row).unwrap();
        assert_eq!((s, m), (vec![1.0, 0.0, 2.0, 2.0], vec![3.0, 5.0, 2.0, 8.0]));
        for (w, y, says) in [
            (2.5, 0.4, "2.5 at row 1"),
            (0.0, 0.0, "whole number, at least 1"),
            (f64::NAN, 0.0, "NaN at row 1"),
            (4.0, 1.5, "1.5 of 4 trials at row 1"),
            (4.0, -0.25, "-0.25 of 4 trials"),
            (3.0, 0.3333, "0.3333 of 3 trials"),
        ] {
            let e = Glmm::weighted_proportions((&[0.5, y], None), &[2.0, w], row).unwrap_err();
            assert!(e.to_string().contains(says), "{e}");
        }
        let e = Glmm::weighted_proportions((&y, None), &[1.0], row).unwrap_err();
        assert!(e.to_string().contains("one weight per row"), "{e}");
        let trials = [3.0; 4];
        let e = Glmm::weighted_proportions((&y, Some(&trials)), &trials, row).unwrap_err();
        assert!(e.to_string().contains("not both"), "{e}");
    }
}
