//! The built-in GLMMs (`sagd::glmm`) fitted from the defaults against their maximum-likelihood
//! estimates by quadrature, one random intercept per group, in each family.

mod common;
use common::em::fits_with_the_defaults;
use common::glmm::simulate;
use sagd::glmm::Family;

#[test]
fn each_family_fits_its_quadrature_maximum() {
    for family in [Family::Gaussian, Family::Poisson, Family::Binomial] {
        let model = simulate(family, 11);
        let start = model.start();
        fits_with_the_defaults(&format!("{family:?}"), &model, &start, &start);
    }
}
