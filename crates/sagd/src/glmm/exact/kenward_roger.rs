//! Kenward and Roger's tests of a Gaussian fit's fixed effects (pbkrtest's, which lmerTest's
//! `ddf = "Kenward-Roger"` runs): β̂'s covariance adjusted for the variance parameters being
//! estimated, and each test's denominator degrees of freedom and F's scaling from it. The
//! marginal covariance Σ = Σᵢ σᵢ Gᵢ is linear in the variance parameters σ (each random term's
//! covariance entries, then σ²), as pbkrtest writes it, and block-diagonal by EM's points, so
//! every sum over Σ's entries is taken a point at a time, through Woodbury's identity in the
//! point's effects: a crossed design, one point of all its rows, needs no matrix of its rows
//! squared (pbkrtest's are dense n × n).

use nalgebra::DMatrix;
use statrs::distribution::{ContinuousCDF, FisherSnedecor};

use super::satterthwaite::{check_contrasts, check_hypotheses, t_tail, unit};
use super::woodbury::{Block, EffectColumn};
use crate::error::{invalid, Result};
use crate::glmm::{Family, Glmm};

/// A variance parameter of Σ's linear form: entry (a, b), a ≥ b, of a random term's
/// covariance, or σ².
#[derive(Clone, Copy)]
pub(super) enum Param {
    Entry { term: usize, a: usize, b: usize },
    Residual,
}

/// The sums over the points that the adjustment reads: XᵀΣ⁻¹X, each Pᵢ = −XᵀΣ⁻¹GᵢΣ⁻¹X, each
/// Qᵢⱼ = XᵀΣ⁻¹GᵢΣ⁻¹GⱼΣ⁻¹X (i ≤ j) and each tr(Σ⁻¹GᵢΣ⁻¹Gⱼ) (i ≤ j).
pub(super) struct Sums {
    pub(super) xsx: DMatrix<f64>,
    pub(super) p: Vec<DMatrix<f64>>,
    pub(super) q: Vec<DMatrix<f64>>,
    pub(super) t: Vec<f64>,
}

impl Sums {
    fn zero(p: usize, k: usize) -> Sums {
        let pairs = k * (k + 1) / 2;
        Sums {
            xsx: DMatrix::zeros(p, p),
            p: vec![DMatrix::zeros(p, p); k],
            q: vec![DMatrix::zeros(p, p); pairs],
            t: vec![0.0; pairs],
        }
    }

    fn add(&mut self, o: &Sums) {
        self.xsx += &o.xsx;
        self.p.iter_mut().zip(&o.p).for_each(|(a, b)| *a += b);
        self.q.iter_mut().zip(&o.q).for_each(|(a, b)| *a += b);
        self.t.iter_mut().zip(&o.t).for_each(|(a, b)| *a += b);
    }
}

/// Where pair (i, j), i ≤ j, of k parameters sits among the pairs.
pub(super) fn pair(i: usize, j: usize, k: usize) -> usize {
    let (i, j) = (i.min(j), i.max(j));
    i * k - i * (i + 1) / 2 + j
}

/// The adjustment: Φ = (XᵀΣ⁻¹X)⁻¹, Φ_A (Kenward and Roger's adjusted covariance of β̂), the
/// Pᵢ and W, the variance parameters' covariance (twice the inverse of REML's expected
/// information).
struct Adjusted {
    phi: DMatrix<f64>,
    phi_a: DMatrix<f64>,
    p: Vec<DMatrix<f64>>,
    w: DMatrix<f64>,
}

impl Adjusted {
    /// The Wald statistic of Lβ = 0 at θ (β first), (Lβ̂)ᵀ(LΦ_ALᵀ)⁻¹(Lβ̂) / q, with F's scaling
    /// and the denominator's degrees of freedom.
    fn wald(&self, l: &DMatrix<f64>, theta: &[f64]) -> (f64, f64, f64) {
        let q = l.nrows();
        let beta = DMatrix::from_column_slice(self.phi.nrows(), 1, &theta[..self.phi.nrows()]);
        let (df2, scale) = self.ddf(l);
        let lb = l * &beta;
        let wald = match (l * &self.phi_a * l.transpose()).try_inverse() {
            Some(inv) => (lb.transpose() * inv * &lb)[(0, 0)],
            None => f64::NAN,
        };
        (wald / q as f64, scale, df2)
    }

    /// Kenward and Roger's denominator degrees of freedom of a test of the q independent rows
    /// of `l`, and F's scaling (pbkrtest's `.KR_adjust`).
    fn ddf(&self, l: &DMatrix<f64>) -> (f64, f64) {
        let q = l.nrows() as f64;
        let lpl = l * &self.phi * l.transpose();
        let Some(inv) = lpl.try_inverse() else {
            return (f64::NAN, f64::NAN);
        };
        let theta_phi = l.transpose() * inv * l * &self.phi;
        let u: Vec<DMatrix<f64>> = (self.p.iter())
            .map(|pi| &theta_phi * pi * &self.phi)
            .collect();
        let (mut a1, mut a2) = (0.0, 0.0);
        for (i, ui) in u.iter().enumerate() {
            for (j, uj) in u.iter().enumerate() {
                a1 += self.w[(i, j)] * ui.trace() * uj.trace();
                a2 += self.w[(i, j)] * (ui * uj).trace();
            }
        }
        let b = (a1 + 6.0 * a2) / (2.0 * q);
        let g = ((q + 1.0) * a1 - (q + 4.0) * a2) / ((q + 2.0) * a2);
        let den = 3.0 * q + 2.0 * (1.0 - g);
        let (c1, c2, c3) = (g / den, (q - g) / den, (q + 2.0 - g) / den);
        let v0 = match 1.0 + c1 * b {
            v if v.abs() < 1e-10 => 0.0,
            v => v,
        };
        let (v1, v2) = (1.0 - c2 * b, 1.0 - c3 * b);
        let e = 1.0 - a2 / q;
        let ratio = match e.abs() < 1e-14 && v1.abs() < 1e-14 {
            true => 1.0,
            false => e / v1,
        };
        let rho = ratio * ratio * v0 / (q * v2);
        let df2 = 4.0 + (q + 2.0) / (q * rho - 1.0);
        let scale = match (df2 - 4.0).abs() < 1e-2 {
            true => 1.0,
            false => df2 * e / (df2 - 2.0),
        };
        (df2, scale)
    }
}

impl Glmm {
    /// Kenward and Roger's tests of a Gaussian fit's fixed effects at its REML estimate θ̂
    /// (pbkrtest's `vcovAdj` and `KRmodcomp`, lmerTest's `summary(fit, ddf = "Kenward-Roger")`
    /// and `contest`): β̂'s covariance adjusted for the variance parameters' estimation, Φ_A =
    /// Φ + 2Φ{Σᵢⱼ Wᵢⱼ(Qᵢⱼ − PᵢΦPⱼ)}Φ with Φ = (XᵀΣ⁻¹X)⁻¹ and W twice the inverse of REML's
    /// expected information in σ (Σ's linear parameters: each term's covariance entries, σ²).
    /// Per coefficient: its standard error √Φ_A,jj, the degrees of freedom, the two-sided
    /// p-value of t on Student's t; per matrix of `hypotheses` (rows of p values, independent):
    /// F = λ (Lβ̂)ᵀ(LΦ_ALᵀ)⁻¹(Lβ̂)/q with Kenward and Roger's scaling λ, q, the denominator's
    /// degrees of freedom and p. Refused for other families and for prior weights (which
    /// pbkrtest leaves out of Σ, so there is no reference to hold them to).
    #[allow(clippy::type_complexity)]
    pub fn kenward_roger_tests(
        &self,
        theta: &[f64],
        hypotheses: &[Vec<Vec<f64>>],
    ) -> Result<(Vec<(f64, f64, f64)>, Vec<(f64, usize, f64, f64)>)> {
        let (t, f) = self.kenward_roger_anova(theta, hypotheses)?;
        Ok((
            t,
            f.into_iter()
                .map(|(f, _, q, df2, p)| (f, q, df2, p))
                .collect(),
        ))
    }

    /// [`Glmm::kenward_roger_tests`] with each F test's unscaled F beside the scaled one
    /// (pbkrtest's `FtestU`, whose F σ² is lmerTest's Mean Sq): per hypothesis F, the unscaled
    /// F, q, the denominator's degrees of freedom and p. The command line's and the bindings'
    /// type III tables read it.
    #[doc(hidden)]
    #[allow(clippy::type_complexity)]
    pub fn kenward_roger_anova(
        &self,
        theta: &[f64],
        hypotheses: &[Vec<Vec<f64>>],
    ) -> Result<(Vec<(f64, f64, f64)>, Vec<(f64, f64, usize, f64, f64)>)> {
        check_hypotheses(self.p, hypotheses)?;
        let units: Vec<Vec<f64>> = (0..self.p).map(|j| unit(self.p, j)).collect();
        let (adj, t) = self.kenward_roger_t(theta, &units)?;
        let f = (hypotheses.iter())
            .map(|rows| {
                let l = DMatrix::from_fn(rows.len(), self.p, |i, k| rows[i][k]);
                let (unscaled, scale, df2) = adj.wald(&l, theta);
                let f = unscaled * scale;
                let tail = match FisherSnedecor::new(rows.len() as f64, df2) {
                    Ok(law) if df2.is_finite() && f.is_finite() => law.sf(f),
                    _ => f64::NAN,
                };
                (f, unscaled, rows.len(), df2, tail)
            })
            .collect();
        Ok((t, f))
    }

    /// Kenward and Roger's t test of each contrast lᵀβ = 0 of a Gaussian fit at its REML
    /// estimate θ̂ (lmerTest's `contest1D` with `ddf = "Kenward-Roger"`, which `ls_means` runs
    /// on each mean): per row l of `contrasts` (p values), the standard error √(lᵀΦ_A l), the
    /// degrees of freedom and the two-sided p-value of t = lᵀβ̂ / se. Refused as
    /// [`Glmm::kenward_roger_tests`] is.
    pub fn kenward_roger_contrasts(
        &self,
        theta: &[f64],
        contrasts: &[Vec<f64>],
    ) -> Result<Vec<(f64, f64, f64)>> {
        check_contrasts(self.p, contrasts)?;
        Ok(self.kenward_roger_t(theta, contrasts)?.1)
    }

    /// The adjustment at θ and the t test of each row of `contrasts`: its standard error, the
    /// degrees of freedom, p.
    #[allow(clippy::type_complexity)]
    fn kenward_roger_t(
        &self,
        theta: &[f64],
        contrasts: &[Vec<f64>],
    ) -> Result<(Adjusted, Vec<(f64, f64, f64)>)> {
        if self.family != Family::Gaussian || self.weighted {
            return Err(invalid(
                "ddf",
                match self.weighted {
                    true => format!("Kenward-Roger for a weighted {:?} model", self.family),
                    false => format!("Kenward-Roger for a {:?} model", self.family),
                },
                "Kenward and Roger's degrees of freedom are an unweighted Gaussian model's \
                 (pbkrtest's): use Satterthwaite's for weights; other families have Wald z tests",
            ));
        }
        self.check_theta(theta)?;
        let adj = self.kenward_roger_adjusted(theta)?;
        let t = (contrasts.iter())
            .map(|row| {
                let l = DMatrix::from_row_slice(1, self.p, row);
                let (t2, _, df) = adj.wald(&l, theta);
                let se = (&l * &adj.phi_a * l.transpose())[(0, 0)].sqrt();
                (se, df, t_tail(t2.sqrt(), df))
            })
            .collect();
        Ok((adj, t))
    }

    /// Φ, Φ_A, the Pᵢ and W at θ.
    fn kenward_roger_adjusted(&self, theta: &[f64]) -> Result<Adjusted> {
        let params = self.linear_params();
        let k = params.len();
        let s = self.kenward_roger_sums(theta, &params)?;
        let singular = || {
            invalid(
                "X",
                "columns that are linearly dependent, or variance parameters that the data do \
                 not determine"
                    .into(),
                "drop the columns that others determine, or the terms whose variances are 0",
            )
        };
        let phi = s.xsx.clone().try_inverse().ok_or_else(singular)?;
        // REML's expected information in σ, twice: tr(Σ⁻¹GᵢΣ⁻¹Gⱼ) − 2 tr(ΦQᵢⱼ) + tr(ΦPᵢΦPⱼ).
        let phi_p: Vec<DMatrix<f64>> = s.p.iter().map(|pi| &phi * pi).collect();
        let ie2 = DMatrix::from_fn(k, k, |i, j| {
            let ij = pair(i, j, k);
            s.t[ij] - 2.0 * (&phi * &s.q[ij]).trace() + (&phi_p[i] * &phi_p[j]).trace()
        });
        let w = ie2.try_inverse().ok_or_else(singular)? * 2.0;
        let mut u = DMatrix::zeros(self.p, self.p);
        for i in 0..k {
            for j in 0..k {
                // Qⱼᵢ = Qᵢⱼᵀ.
                let q = match i <= j {
                    true => s.q[pair(i, j, k)].clone(),
                    false => s.q[pair(i, j, k)].transpose(),
                };
                u += (q - &s.p[i] * &phi * &s.p[j]) * w[(i, j)];
            }
        }
        let phi_a = &phi + (&phi * u * &phi) * 2.0;
        Ok(Adjusted {
            phi,
            phi_a,
            p: s.p,
            w,
        })
    }

    /// Σ's linear parameters: each term's covariance entries (a ≥ b; the diagonal alone for
    /// independent effects), then σ².
    pub(super) fn linear_params(&self) -> Vec<Param> {
        let mut params = Vec::new();
        for (term, t) in self.terms.iter().enumerate() {
            for a in 0..t.q {
                let bs = if t.correlated { 0..a + 1 } else { a..a + 1 };
                params.extend(bs.map(|b| Param::Entry { term, a, b }));
            }
        }
        params.push(Param::Residual);
        params
    }

    /// [`Sums`] over the points ([`Glmm::sum_over_points`]: the same bits on any number of
    /// threads).
    fn kenward_roger_sums(&self, theta: &[f64], params: &[Param]) -> Result<Sums> {
        let k = params.len();
        let factors = self.factors(theta);
        let s2 = (2.0 * theta[theta.len() - 1]).exp();
        self.sum_over_points(
            || Sums::zero(self.p, k),
            Sums::add,
            |c| self.kenward_roger_point(c, params, (&factors, s2)),
        )
    }

    /// One point's [`Sums`], through Woodbury's identity in its effects ([`Block`]): its Σ
    /// from the terms' Cholesky factors and σ², each Gᵢ a product of the terms' effect columns
    /// on its rows.
    pub(super) fn kenward_roger_point(
        &self,
        c: usize,
        params: &[Param],
        (factors, s2): (&[Vec<f64>], f64),
    ) -> Result<Sums> {
        let (p, k, rows) = (self.p, params.len(), self.points[c].rows.clone());
        let m = rows.len();
        let (block, columns, first) = self.point_block(c, factors, s2)?;
        // Gᵢ's pairs (A, B) of effect columns, Gᵢ = Σ ABᵀ; σ²'s, none (Gᵢ = I).
        let pairs = |prm: &Param| match *prm {
            Param::Residual => vec![],
            Param::Entry { term, a, b } => {
                let (ca, cb) = (first[term] + a, first[term] + b);
                match a == b {
                    true => vec![(ca, cb)],
                    false => vec![(ca, cb), (cb, ca)],
                }
            }
        };
        let x = DMatrix::from_row_slice(m, p, &self.x[rows.start * p..rows.end * p]);
        let sx = block.solve(&x);
        let gsx: Vec<DMatrix<f64>> = (params.iter())
            .map(|prm| match *prm {
                Param::Residual => sx.clone(),
                Param::Entry { term, a, b } => {
                    let (ca, cb) = (&columns[first[term] + a], &columns[first[term] + b]);
                    ca.outer_times(cb, &sx, a != b)
                }
            })
            .collect();
        let sgsx: Vec<DMatrix<f64>> = gsx.iter().map(|g| block.solve(g)).collect();
        // AᵀΣ⁻¹B and AᵀΣ⁻²B of every two effect columns.
        let inner = block.inners(&columns);
        // tr(Σ⁻¹GᵢΣ⁻¹Gⱼ): tr(Σ⁻¹ABᵀΣ⁻¹CDᵀ) = tr((BᵀΣ⁻¹C)(DᵀΣ⁻¹A)) per pair, tr(BᵀΣ⁻²A)
        // where Gⱼ = I, tr(Σ⁻²) where both are.
        let trace = |i: &Param, j: &Param| -> f64 {
            let (pi, pj) = (pairs(i), pairs(j));
            match (pi.is_empty(), pj.is_empty()) {
                (true, true) => block.trace_square(),
                (false, true) | (true, false) => (pi.iter().chain(&pj))
                    .map(|&(a, b)| inner[b][a].1.trace())
                    .sum(),
                (false, false) => (pi.iter())
                    .flat_map(|&(a, b)| pj.iter().map(move |&(c, d)| (a, b, c, d)))
                    .map(|(a, b, c, d)| {
                        let (bc, da) = (&inner[b][c].0, &inner[d][a].0);
                        bc.component_mul(&da.transpose()).sum()
                    })
                    .sum(),
            }
        };
        let mut out = Sums::zero(p, k);
        out.xsx = x.transpose() * &sx;
        for i in 0..k {
            out.p[i] = -(sx.transpose() * &gsx[i]);
            for j in i..k {
                let ij = pair(i, j, k);
                out.q[ij] = gsx[i].transpose() * &sgsx[j];
                out.t[ij] = trace(&params[i], &params[j]);
            }
        }
        Ok(out)
    }

    /// Point `c`'s [`Block`] (U = ZΛ from the terms' factors, σ² = `s2`), each term's effect
    /// columns on its rows (its levels numbered within the point), and where each term's
    /// columns start among them.
    fn point_block(
        &self,
        c: usize,
        factors: &[Vec<f64>],
        s2: f64,
    ) -> Result<(Block, Vec<EffectColumn>, Vec<usize>)> {
        let (rows, dim) = (self.points[c].rows.clone(), self.points[c].dim);
        let block = Block::new(dim, self.point_design(factors, c), s2)?;
        let (mut columns, mut first) = (Vec::new(), Vec::new());
        for t in &self.terms {
            // The term's levels in the point, numbered in the order its rows meet them.
            let mut number = vec![usize::MAX; dim];
            let mut levels = 0;
            let lev: Vec<usize> = (rows.clone())
                .map(|r| {
                    if number[t.slot[r]] == usize::MAX {
                        number[t.slot[r]] = levels;
                        levels += 1;
                    }
                    number[t.slot[r]]
                })
                .collect();
            first.push(columns.len());
            columns.extend((0..t.q).map(|a| EffectColumn {
                lev: lev.clone(),
                z: rows.clone().map(|r| t.z[r * t.q + a]).collect(),
                levels,
            }));
        }
        Ok((block, columns, first))
    }
}
