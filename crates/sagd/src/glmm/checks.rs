//! Data a mixed model cannot be fitted to, told apart before any fitting: designs whose fixed
//! effects are not identified, and responses at the edge of the family's support.

use super::Family;

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

#[cfg(test)]
mod tests {
    use super::*;

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
}
