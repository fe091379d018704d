//! lmerTest's tests of a Gaussian fit's fixed effects with Satterthwaite's degrees of freedom:
//! the t test of each coefficient (`summary(fit)`) and the F test of any hypothesis Lβ = 0
//! (`contest(fit, L)`, which `anova(fit)` runs on each term's), from Var(β̂ | φ) and its
//! derivatives in the variance parameters φ, both taken once by the closed form.

use statrs::distribution::{ChiSquared, ContinuousCDF, FisherSnedecor, Normal, StudentsT};

use super::central_jacobian;
use crate::error::{invalid, Result};
use crate::glmm::{Family, Glmm};
use crate::metric::Factor;

/// What every test reads: V = Var(β̂ | φ̂) (p × p, row-major), its derivative in each variance
/// parameter not at its boundary, and those parameters' covariance.
struct Spread {
    p: usize,
    v: Vec<f64>,
    dv: Vec<Vec<f64>>,
    a: Vec<Vec<f64>>,
}

impl Spread {
    /// lᵀ M l for a p × p row-major M.
    fn quad(&self, m: &[f64], l: &[f64]) -> f64 {
        let p = self.p;
        (0..p)
            .map(|j| l[j] * (0..p).map(|k| m[j * p + k] * l[k]).sum::<f64>())
            .sum()
    }

    /// The contrast l's variance v = lᵀVl and Satterthwaite's ν = 2v² / (∇vᵀ A ∇v) (infinite
    /// where ∇v vanishes).
    fn df(&self, l: &[f64]) -> (f64, f64) {
        let v = self.quad(&self.v, l);
        let g: Vec<f64> = self.dv.iter().map(|d| self.quad(d, l)).collect();
        let spread: f64 = (g.iter().enumerate())
            .map(|(a, ga)| ga * g.iter().zip(&self.a[a]).map(|(gb, c)| gb * c).sum::<f64>())
            .sum();
        match 2.0 * v * v / spread {
            nu if nu > 0.0 => (v, nu),
            _ => (v, f64::INFINITY),
        }
    }
}

impl Glmm {
    /// lmerTest's Satterthwaite t tests of a Gaussian fit's fixed effects (`summary(fit,
    /// ddf = "Satterthwaite")`), at its estimate θ̂ with `covariance` θ̂'s (the fit's: the
    /// likelihood's information, or for a REML fit the REML criterion's in the variance
    /// parameters). For each βⱼ: its standard error given the variance parameters φ (lmer's
    /// `vcov`: v = Var(β̂ⱼ | φ), σ²(XᵀV₀⁻¹X)⁻¹'s entry), the degrees of freedom ν = 2v² / (∇v ᵀ
    /// A ∇v), ∇v v's gradient in φ by central differences and A φ's covariance (a parameter at
    /// its boundary held fixed, as the standard errors are), and the two-sided p-value of t =
    /// βⱼ/√v on Student's t with ν degrees of freedom (ν infinite where ∇v vanishes). Refused
    /// for other families, whose tests are Wald z tests.
    pub fn satterthwaite(
        &self,
        theta: &[f64],
        covariance: &[Vec<f64>],
    ) -> Result<Vec<(f64, f64, f64)>> {
        Ok(self.satterthwaite_tests(theta, covariance, &[])?.0)
    }

    /// [`Glmm::satterthwaite`]'s t tests and lmerTest's Satterthwaite F tests of hypotheses
    /// Lβ = 0 on a Gaussian fit's fixed effects (`contest(fit, L)`), at θ̂ with `covariance` as
    /// [`Glmm::satterthwaite`]'s, one per matrix of `hypotheses` (its rows of p values each),
    /// all from one pass of Var(β̂ | φ)'s derivatives. L's rows are turned by the eigenvectors of
    /// L Var(β̂ | φ) Lᵀ into independent contrasts (those of eigenvalues above 1.5e-8 of the
    /// largest: q of them); F = Σ tₘ²/q, each contrast with its own degrees of freedom νₘ, and
    /// the denominator's 2E/(E − q), E = Σ νₘ/(νₘ − 2) (νₘ itself for q = 1; their mean where
    /// they are equal; 2 where one is 2 or less). For each: F, q, the denominator's degrees of
    /// freedom and F's p-value on Fisher's law with them (NaN, with q = 0, for a hypothesis whose
    /// contrasts have no variance).
    #[allow(clippy::type_complexity)]
    pub fn satterthwaite_tests(
        &self,
        theta: &[f64],
        covariance: &[Vec<f64>],
        hypotheses: &[Vec<Vec<f64>>],
    ) -> Result<(Vec<(f64, f64, f64)>, Vec<(f64, usize, f64, f64)>)> {
        let p = self.p;
        check_hypotheses(p, hypotheses)?;
        let s = self.spread(theta, covariance)?;
        let t = (0..p).map(|j| t_test(&s, theta, &unit(p, j))).collect();
        Ok((t, hypotheses.iter().map(|l| f_test(&s, theta, l)).collect()))
    }

    /// lmerTest's Satterthwaite t test of each contrast lᵀβ = 0 of a Gaussian fit (`contest1D`,
    /// which `ls_means` runs on each mean), at θ̂ with `covariance` as [`Glmm::satterthwaite`]'s:
    /// per row l of `contrasts` (p values), the standard error √(lᵀ Var(β̂ | φ) l), the degrees of
    /// freedom and the two-sided p-value of t = lᵀβ̂ / se. [`Glmm::satterthwaite`]'s are those of
    /// the unit rows.
    pub fn satterthwaite_contrasts(
        &self,
        theta: &[f64],
        covariance: &[Vec<f64>],
        contrasts: &[Vec<f64>],
    ) -> Result<Vec<(f64, f64, f64)>> {
        check_contrasts(self.p, contrasts)?;
        let s = self.spread(theta, covariance)?;
        Ok(contrasts.iter().map(|l| t_test(&s, theta, l)).collect())
    }

    /// V = Var(β̂ | φ̂), its derivatives in φ (θ after β) by central differences, and φ's
    /// covariance; refused for other families and a covariance of another shape.
    fn spread(&self, theta: &[f64], covariance: &[Vec<f64>]) -> Result<Spread> {
        if self.family != Family::Gaussian {
            return Err(invalid(
                "ddf",
                format!("Satterthwaite for the {:?} family", self.family),
                "Satterthwaite's degrees of freedom are a Gaussian model's (lmerTest's): other \
                 families' fixed effects have Wald z tests",
            ));
        }
        self.check_theta(theta)?;
        let (p, k) = (self.p, theta.len());
        if covariance.len() != k || covariance.iter().any(|row| row.len() != k) {
            return Err(invalid(
                "covariance",
                format!("{} rows for θ's {k} entries", covariance.len()),
                "give the fit's covariance of θ̂ (k × k)",
            ));
        }
        let v = self.beta_covariance(theta, &theta[p..])?;
        let dv = central_jacobian(|phi| self.beta_covariance(theta, phi), &theta[p..])?;
        // A variance parameter at its boundary (NaN in the covariance) is held fixed.
        let kept: Vec<usize> = (0..k - p)
            .filter(|&a| covariance[p + a][p + a].is_finite())
            .collect();
        Ok(Spread {
            p,
            v,
            dv: kept.iter().map(|&a| dv[a].clone()).collect(),
            a: (kept.iter())
                .map(|&a| kept.iter().map(|&b| covariance[p + a][p + b]).collect())
                .collect(),
        })
    }

    /// Var(β̂ | φ) = σ²(XᵀV₀⁻¹X)⁻¹ (p × p, row-major) at θ with its variance parameters (after
    /// β) set to `phi`.
    fn beta_covariance(&self, theta: &[f64], phi: &[f64]) -> Result<Vec<f64>> {
        let (p, k) = (self.p, theta.len());
        let mut th = theta.to_vec();
        th[p..].copy_from_slice(phi);
        let pieces = self.gaussian_pieces(&self.relative(&th))?;
        let f = Factor::cholesky(&pieces.xvx, p).ok_or_else(|| {
            invalid(
                "X",
                "columns that are linearly dependent".into(),
                "drop the columns that others determine",
            )
        })?;
        let s2 = (2.0 * th[k - 1]).exp();
        let mut out = vec![0.0; p * p];
        for j in 0..p {
            let mut e = vec![0.0; p];
            e[j] = 1.0;
            f.solve_lower(&mut e);
            f.solve_upper(&mut e);
            for (i, v) in e.into_iter().enumerate() {
                out[i * p + j] = s2 * v;
            }
        }
        Ok(out)
    }
}

/// Nothing, or the error of a hypothesis with no rows or a row that is not of the model's `p`
/// fixed effects.
pub(super) fn check_hypotheses(p: usize, hypotheses: &[Vec<Vec<f64>>]) -> Result<()> {
    match (hypotheses.iter()).find(|l| l.is_empty() || l.iter().any(|r| r.len() != p)) {
        Some(l) => Err(invalid(
            "hypotheses",
            format!(
                "a matrix of {} rows for the model's {p} fixed effects",
                l.len()
            ),
            "give each hypothesis one or more rows of p values",
        )),
        None => Ok(()),
    }
}

/// Nothing, or the error of a contrast that is not a row of the model's `p` fixed effects.
pub(super) fn check_contrasts(p: usize, contrasts: &[Vec<f64>]) -> Result<()> {
    match contrasts.iter().find(|l| l.len() != p) {
        Some(l) => Err(invalid(
            "contrasts",
            format!(
                "a row of {} values for the model's {p} fixed effects",
                l.len()
            ),
            "give each contrast p values, one per fixed effect",
        )),
        None => Ok(()),
    }
}

/// The unit row eⱼ of p values.
pub(in crate::glmm) fn unit(p: usize, j: usize) -> Vec<f64> {
    (0..p).map(|k| f64::from(u8::from(j == k))).collect()
}

/// The two-sided p-value of t on Student's t with ν degrees of freedom (the normal law's where
/// ν is infinite).
pub(in crate::glmm) fn t_tail(t: f64, nu: f64) -> f64 {
    let tail = match StudentsT::new(0.0, 1.0, nu) {
        Ok(law) if nu.is_finite() => law.sf(t.abs()),
        _ => Normal::standard().sf(t.abs()),
    };
    2.0 * tail
}

/// The t test of lᵀβ = 0 from `s` at θ: its standard error, degrees of freedom, p.
fn t_test(s: &Spread, theta: &[f64], l: &[f64]) -> (f64, f64, f64) {
    let (v, nu) = s.df(l);
    let estimate: f64 = l.iter().zip(theta).map(|(a, b)| a * b).sum();
    (v.sqrt(), nu, t_tail(estimate / v.sqrt(), nu))
}

/// The F test of Lβ = 0 from `s` at θ: F, q, the denominator's degrees of freedom, p.
fn f_test(s: &Spread, theta: &[f64], l: &[Vec<f64>]) -> (f64, usize, f64, f64) {
    let (p, r) = (s.p, l.len());
    // L V Lᵀ, its eigenvectors, and the independent contrasts Σᵢ Pᵢₘ Lᵢ.
    let lv: Vec<Vec<f64>> = (l.iter())
        .map(|li| {
            (0..p)
                .map(|k| (0..p).map(|j| li[j] * s.v[j * p + k]).sum())
                .collect()
        })
        .collect();
    let lvl = nalgebra::DMatrix::from_fn(r, r, |i, j| {
        lv[i].iter().zip(&l[j]).map(|(a, b)| a * b).sum::<f64>()
    });
    let eig = nalgebra::SymmetricEigen::new(lvl);
    let top = eig.eigenvalues.iter().copied().fold(0.0, f64::max);
    let rotated: Vec<Vec<f64>> = (0..r)
        .filter(|&m| eig.eigenvalues[m] > 1.5e-8 * top)
        .map(|m| {
            (0..p)
                .map(|k| (0..r).map(|i| eig.eigenvectors[(i, m)] * l[i][k]).sum())
                .collect()
        })
        .collect();
    let q = rotated.len();
    if q == 0 {
        // L Var(β̂) Lᵀ = 0: no contrast to test.
        return (f64::NAN, 0, f64::NAN, f64::NAN);
    }
    let (mut t2, mut nu) = (0.0, Vec::with_capacity(q));
    for lm in &rotated {
        let (v, n) = s.df(lm);
        t2 += lm
            .iter()
            .zip(theta)
            .map(|(a, b)| a * b)
            .sum::<f64>()
            .powi(2)
            / v;
        nu.push(n);
    }
    let f = t2 / q as f64;
    let ddf = match q {
        1 => nu[0],
        _ if nu.iter().all(|v| (v - nu[0]).abs() < 1e-8) => nu[0],
        _ if nu.iter().any(|&v| v <= 2.0) => 2.0,
        _ => {
            let e: f64 = nu.iter().map(|v| v / (v - 2.0)).sum();
            2.0 * e / (e - q as f64)
        }
    };
    let tail = match FisherSnedecor::new(q as f64, ddf) {
        Ok(law) if ddf.is_finite() => law.sf(f),
        _ => ChiSquared::new(q as f64).map_or(f64::NAN, |law| law.sf(q as f64 * f)),
    };
    (f, q, ddf, tail)
}
