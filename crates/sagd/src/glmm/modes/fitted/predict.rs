//! Predictions for new rows: lme4's `predict(fit, newdata, re.form, allow.new.levels = TRUE)`.

use super::{residuals, FittedValues};
use crate::error::{invalid, Result};
use crate::glmm::{Design, Glmm};

impl Glmm {
    /// Each row of `new` at θ, the model's rows' fit ([`Glmm::fitted_values`]) carried to new
    /// data (lme4's `predict(fit, newdata, allow.new.levels = TRUE)`). `new` is coded as the
    /// fitted data were ([`Formula::new_design`](crate::glmm::Formula::new_design)): its fixed
    /// effects' columns are the model's, and each term's group indices number the model's
    /// levels first. η and μ take every level the model was fitted to at its conditional mode
    /// when `conditional` (lme4's default, `re.form = NULL`), and a level the model has not seen
    /// (an index at or past its count of levels) no effect, the population's value; without
    /// `conditional` no level has one (`re.form = NA`). The residuals are those of the responses
    /// `new` gives, NaN where a row's response is NaN.
    pub fn predict(&self, theta: &[f64], new: &Design, conditional: bool) -> Result<FittedValues> {
        self.check_theta(theta)?;
        let n = new.y.len();
        self.check_new(new)?;
        let modes = if conditional {
            self.random_effects(theta)?
        } else {
            Vec::new()
        };
        let beta = &theta[..self.p];
        let sigma = self.scale(theta).1.exp();
        let mut out = FittedValues::zeros(n);
        for i in 0..n {
            let xi = &new.x[i * self.p..(i + 1) * self.p];
            let fixed: f64 = xi.iter().zip(beta).map(|(a, b)| a * b).sum();
            let offset = new.offset.as_ref().map_or(0.0, |o| o[i]);
            let mut random = 0.0;
            for (term, levels) in new.terms.iter().zip(&modes) {
                if let Some(b) = levels.get(term.group[i]) {
                    let q = b.len();
                    let zi = &term.z[i * q..(i + 1) * q];
                    random += zi.iter().zip(b).map(|(z, e)| z * e.value).sum::<f64>();
                }
            }
            let eta = fixed + offset + random;
            let trials = new.trials.as_ref().map_or(1.0, |t| t[i]);
            let (mean, [response, pearson, deviance]) =
                residuals(self.family, eta, new.y[i], trials, sigma);
            out.eta[i] = eta;
            out.mean[i] = mean;
            out.response[i] = response;
            out.pearson[i] = pearson;
            out.deviance[i] = deviance;
        }
        Ok(out)
    }

    /// That `new`'s arrays have this model's shape: p fixed effects and, per term, its effects
    /// on every row.
    fn check_new(&self, new: &Design) -> Result<()> {
        let n = new.y.len();
        let fix = "build the new rows with Formula::new_design on the data the model was fitted to";
        let mismatch = |what: String| Err(invalid("new data", what, fix));
        if new.x.len() != n * self.p {
            return mismatch(format!(
                "{} fixed-effect values for {n} rows of the model's {} columns",
                new.x.len(),
                self.p
            ));
        }
        if new.terms.len() != self.terms.len() {
            return mismatch(format!(
                "{} random-effect terms for the model's {}",
                new.terms.len(),
                self.terms.len()
            ));
        }
        for (t, (term, ours)) in new.terms.iter().zip(&self.terms).enumerate() {
            if term.group.len() != n || term.z.len() != n * ours.q {
                return mismatch(format!(
                    "random-effect term {} has {} groups and {} effect values for {n} rows of {} effects",
                    t + 1,
                    term.group.len(),
                    term.z.len(),
                    ours.q
                ));
            }
        }
        let lengths = [new.offset.as_ref(), new.trials.as_ref()];
        if lengths.iter().flatten().any(|v| v.len() != n) {
            return mismatch(format!("offsets or trials not one per row of {n}"));
        }
        Ok(())
    }
}
