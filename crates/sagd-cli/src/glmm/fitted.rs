//! fitted.csv and the summary's scaled residuals: each observation's fit at the levels'
//! conditional modes (lme4's `predict`, `fitted` and `residuals`); simulate.csv, new responses
//! from the fitted model (`simulate`).

use std::fmt::Write as _;

use sagd::glmm::{Design, FittedValues};

/// One row per observation used: its row in the data file (1 for the first row below the
/// header, as R numbers a data frame's rows), η, the fitted mean (a probability for the
/// binomial family) and the response, Pearson and deviance residuals.
pub(super) fn fitted_csv(d: &Design, f: &FittedValues) -> String {
    let mut o = String::from("row,eta,fitted,residual,pearson,deviance\n");
    for (k, row) in d.rows.iter().enumerate() {
        let _ = writeln!(
            o,
            "{},{},{},{},{},{}",
            row + 1,
            f.eta[k],
            f.mean[k],
            f.response[k],
            f.pearson[k],
            f.deviance[k]
        );
    }
    o
}

/// simulate.csv: one row per observation used, its row in the data file, then each draw's
/// response (lme4's `simulate(fit)`, one column per draw); each divided by the row's entry of
/// `per` where given (a binomial's successes as proportions of its weights, as lme4 gives them).
pub(super) fn simulate_csv(d: &Design, sims: &[Vec<f64>], per: Option<&[f64]>) -> String {
    let mut o = String::from("row");
    for k in 1..=sims.len() {
        let _ = write!(o, ",sim_{k}");
    }
    o.push('\n');
    for (i, row) in d.rows.iter().enumerate() {
        let _ = write!(o, "{}", row + 1);
        let per = per.map_or(1.0, |w| w[i]);
        for s in sims {
            let _ = write!(o, ",{}", s[i] / per);
        }
        o.push('\n');
    }
    o
}

/// The Pearson residuals' minimum, quartiles and maximum, as lme4's `summary` prints them.
pub(super) fn scaled_residuals(o: &mut String, q: &[f64; 5]) {
    let _ = writeln!(o, "\nScaled residuals:");
    let _ = writeln!(
        o,
        "{:>9} {:>9} {:>9} {:>9} {:>9}",
        "Min", "1Q", "Median", "3Q", "Max"
    );
    let _ = writeln!(
        o,
        "{:>9.4} {:>9.4} {:>9.4} {:>9.4} {:>9.4}",
        q[0], q[1], q[2], q[3], q[4]
    );
}
