//! Small dense linear algebra on p × p matrices (p the number of parameters): what the
//! information, the M-step and the exact GLMM fits share.

/// Inverts a symmetric positive-definite matrix by Cholesky; `None` if it is not.
pub(crate) fn spd_inverse(a: &[Vec<f64>]) -> Option<Vec<Vec<f64>>> {
    let p = a.len();
    let mut l = vec![vec![0.0; p]; p];
    for i in 0..p {
        for j in 0..=i {
            let s: f64 = (0..j).map(|k| l[i][k] * l[j][k]).sum();
            if i == j {
                let d = a[i][i] - s;
                if d.is_nan() || d <= 0.0 {
                    return None;
                }
                l[i][i] = d.sqrt();
            } else {
                l[i][j] = (a[i][j] - s) / l[j][j];
            }
        }
    }
    // Columns of L⁻¹, then A⁻¹ = L⁻ᵀ L⁻¹.
    let mut li = vec![vec![0.0; p]; p];
    #[allow(clippy::needless_range_loop)] // triangular indices read clearer than iterators
    for c in 0..p {
        for i in c..p {
            let s: f64 = (c..i).map(|k| l[i][k] * li[k][c]).sum();
            li[i][c] = (if i == c { 1.0 } else { 0.0 } - s) / l[i][i];
        }
    }
    Some(
        (0..p)
            .map(|i| {
                (0..p)
                    .map(|j| (0..p).map(|k| li[k][i] * li[k][j]).sum())
                    .collect()
            })
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inverse_of_a_small_spd_matrix() {
        let a = vec![vec![4.0, 1.0], vec![1.0, 3.0]];
        let inv = spd_inverse(&a).unwrap();
        let det = 11.0;
        assert!((inv[0][0] - 3.0 / det).abs() < 1e-15);
        assert!((inv[0][1] + 1.0 / det).abs() < 1e-15);
        assert!((inv[1][1] - 4.0 / det).abs() < 1e-15);
        assert!(spd_inverse(&[vec![1.0, 2.0], vec![2.0, 1.0]]).is_none());
    }
}
