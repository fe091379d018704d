//! A formula on new data, coded as on the data a model was fitted to: the design that lme4's
//! `predict(fit, newdata, allow.new.levels = TRUE)` evaluates.

use super::*;

impl Formula {
    /// The formula's arrays on the rows of `new`, coded as on `data`, the frame the model was
    /// fitted to (for [`Glmm::predict`]):
    /// - the fixed effects' columns are `data`'s (a categorical value that `data`'s rows lack is
    ///   an error that names it, as R's);
    /// - each grouping factor's levels are `data`'s, then the levels only `new` has (sorted), so
    ///   that a row's group index at or past `data`'s count of levels marks a level the fit has
    ///   not seen;
    /// - the response may be left out of `new`, or a row's value of it (NaN then); a row
    ///   missing any other value the formula uses is dropped and counted.
    pub fn new_design(&self, data: &Frame, new: &Frame) -> Result<Design> {
        let (fit_cols, fit_rows) = complete_rows(data, &self.columns(), Source::Fitted)?;
        let coding = self.coding(&fit_cols, &fit_rows);
        let response = self.response_columns();
        let predictors: Vec<&str> = self
            .columns()
            .into_iter()
            .filter(|c| !response.contains(c))
            .collect();
        let (mut cols, rows) = complete_rows(new, &predictors, Source::New)?;
        let given: Vec<(&str, &Column)> = response
            .iter()
            .filter_map(|&c| new.find(c).map(|col| (c, col)))
            .collect();
        let has_response = given.len() == response.len();
        cols.extend(given);
        let on_new = (&coding, Source::New);
        let response = if has_response {
            self.response_values(&cols, &rows, on_new)?
        } else {
            (self.response_name(), vec![f64::NAN; rows.len()], None)
        };
        self.arrays(&cols, (rows, new.n_rows()), on_new, response)
    }
}

#[cfg(test)]
mod tests;
