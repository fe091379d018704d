//! `sagd.glmm` and `sagd.glmm_loglik`: a GLMM from numpy arrays, fitted by its exact likelihood
//! where it can be computed ([`Glmm::fit_exact`]) or by automated EM, and its log-likelihood at
//! any θ.

use numpy::{PyArray1, PyArray2, PyReadonlyArray1, PyReadonlyArray2};
use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyDict;
use sagd::em::EmEvent;
use sagd::glmm::{
    Criterion, ExactFit, ExactSettings, Family, FitSettings, Fitted, Glmm, GlmmFit,
    LikelihoodMethod, Method, RandomTerm, SampledMeans, TermNames,
};
use sagd::model::LatentModel;

use crate::{detached, em_settings, py_error, trace_dict};

mod lmertest;
mod ranova;
mod refits;

use lmertest::{ddf_items, hypotheses_of, ls_means_items, AnovaTerms, LsMeansCoding, Type3};
pub(crate) use ranova::{least_squares_loglik, random_reductions};
pub(crate) use refits::bootstrap_lrt;
use refits::{bootstrap_items, Kept};

/// A `Glmm` from `sagd.glmm`'s checked arrays (one random-effect term per entry of `groups`),
/// with the Gaussian's prior weights where given, or the binomial's (its trials, y then the
/// proportion of them that succeeded: `Glmm::weighted_proportions`).
#[allow(clippy::too_many_arguments)]
fn glmm_model(
    family: &str,
    y: PyReadonlyArray1<'_, f64>,
    x: PyReadonlyArray2<'_, f64>,
    groups: Vec<PyReadonlyArray1<'_, i64>>,
    zs: Vec<PyReadonlyArray2<'_, f64>>,
    correlated: Vec<bool>,
    trials: Option<PyReadonlyArray1<'_, f64>>,
    offset: Option<PyReadonlyArray1<'_, f64>>,
    weights: Option<PyReadonlyArray1<'_, f64>>,
) -> PyResult<Glmm> {
    let family: Family = family.parse().map_err(PyValueError::new_err)?;
    if zs.len() != groups.len() || correlated.len() != groups.len() {
        return Err(PyValueError::new_err(
            "Z, correlated: give one per grouping factor",
        ));
    }
    let mut terms = Vec::with_capacity(groups.len());
    for ((g, z), correlated) in groups.iter().zip(&zs).zip(correlated) {
        let group = g
            .as_array()
            .iter()
            .map(|&g| usize::try_from(g))
            .collect::<Result<_, _>>()
            .map_err(|_| {
                PyValueError::new_err(
                    "groups: negative group index; number the groups 0, 1, …, G − 1",
                )
            })?;
        terms.push(RandomTerm {
            group,
            z: z.as_array().iter().copied().collect(),
            correlated,
        });
    }
    let (y, x) = (
        y.as_array().to_vec(),
        x.as_array().iter().copied().collect(),
    );
    let mut trials = trials.map(|t| t.as_array().to_vec());
    let mut weights = weights.map(|w| w.as_array().to_vec());
    let mut y = y;
    if let (Family::Binomial, Some(w)) = (family, &weights) {
        let row = |i: usize| format!("observation {i}");
        let given = (&y[..], trials.as_deref());
        let (successes, w) = Glmm::weighted_proportions(given, w, row).map_err(py_error)?;
        (y, trials, weights) = (successes, Some(w), None);
    }
    let model = match offset {
        Some(o) => Glmm::with_offset(family, y, x, terms, trials, o.as_array().to_vec()),
        None => Glmm::with_terms(family, y, x, terms, trials),
    };
    match weights {
        Some(w) => model.and_then(|m| m.with_weights(&w)),
        None => model,
    }
    .map_err(py_error)
}

/// Draws of a model's responses as its response was given: a binomial's successes as
/// proportions of its `weights` (lme4's `simulate` of a weighted binomial fit), others as drawn.
fn as_given(mut sims: Vec<Vec<f64>>, family: &str, weights: Option<&[f64]>) -> Vec<Vec<f64>> {
    let binomial = family.parse::<Family>() == Ok(Family::Binomial);
    if let Some(w) = weights.filter(|_| binomial) {
        for draw in &mut sims {
            draw.iter_mut().zip(w).for_each(|(s, m)| *s /= m);
        }
    }
    sims
}

/// ℓ(θ) of a GLMM (see `sagd.glmm_loglik`): (value, its error, how it was computed).
#[pyfunction]
#[pyo3(signature = (*, family, y, x, groups, zs, correlated, trials, theta, seed=0, offset=None, weights=None))]
#[allow(clippy::too_many_arguments)]
pub(crate) fn glmm_loglik(
    py: Python<'_>,
    family: &str,
    y: PyReadonlyArray1<'_, f64>,
    x: PyReadonlyArray2<'_, f64>,
    groups: Vec<PyReadonlyArray1<'_, i64>>,
    zs: Vec<PyReadonlyArray2<'_, f64>>,
    correlated: Vec<bool>,
    trials: Option<PyReadonlyArray1<'_, f64>>,
    theta: Vec<f64>,
    seed: u64,
    offset: Option<PyReadonlyArray1<'_, f64>>,
    weights: Option<PyReadonlyArray1<'_, f64>>,
) -> PyResult<(f64, f64, String)> {
    let model = glmm_model(
        family, y, x, groups, zs, correlated, trials, offset, weights,
    )?;
    let l = py
        .detach(|| model.log_likelihood(&theta, seed))
        .map_err(py_error)?;
    Ok((l.value, l.se, likelihood_method_name(l.method)))
}

/// A `Glmm` from a dict of [`glmm_model`]'s arguments by name (`_Arrays.core()`).
fn model_of(d: &Bound<'_, PyDict>) -> PyResult<Glmm> {
    let item = |k: &str| -> PyResult<Bound<'_, PyAny>> {
        d.get_item(k)?
            .ok_or_else(|| PyValueError::new_err(format!("the model's `{k}` is missing")))
    };
    let family: String = item("family")?.extract()?;
    glmm_model(
        &family,
        item("y")?.extract()?,
        item("x")?.extract()?,
        item("groups")?.extract()?,
        item("zs")?.extract()?,
        item("correlated")?.extract()?,
        item("trials")?.extract()?,
        item("offset")?.extract()?,
        item("weights")?.extract()?,
    )
}

/// Draws of new responses from the model `model` at `theta` (`Glmm::simulate`), draws ×
/// observations: every level's effects drawn afresh, or held at their conditional modes where
/// `conditional`.
#[pyfunction]
#[pyo3(signature = (*, model, theta, draws, seed=0, conditional=false, threads=None))]
pub(crate) fn simulate_glmm(
    py: Python<'_>,
    model: Bound<'_, PyDict>,
    theta: Vec<f64>,
    draws: usize,
    seed: u64,
    conditional: bool,
    threads: Option<usize>,
) -> PyResult<Vec<Vec<f64>>> {
    let m = model_of(&model)?;
    let family: String = model
        .get_item("family")?
        .map_or(Ok(String::new()), |f| f.extract())?;
    let weights: Option<Vec<f64>> = match model.get_item("weights")? {
        Some(w) => w.extract()?,
        None => None,
    };
    let sims = detached(py, threads, None, None, |_| {
        m.simulate(&theta, draws, seed, conditional)
    })?
    .map_err(py_error)?;
    Ok(as_given(sims, &family, weights.as_deref()))
}

fn likelihood_method_name(method: LikelihoodMethod) -> String {
    match method {
        LikelihoodMethod::Quadrature => "quadrature".to_string(),
        LikelihoodMethod::Exact => "exact".to_string(),
        LikelihoodMethod::ImportanceSampling { draws } => {
            format!("importance sampling ({draws} draws per point)")
        }
    }
}

/// The fields of an exact fit, under the names of [`trace_dict`]'s (no Monte Carlo error).
fn exact_dict<'py>(py: Python<'py>, fit: &ExactFit) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    let k = fit.theta.len();
    d.set_item("estimate", PyArray1::from_slice(py, &fit.theta))?;
    d.set_item("mc_se", PyArray1::from_vec(py, vec![0.0; k]))?;
    d.set_item("status", "exact")?;
    d.set_item("polish_error", None::<String>)?;
    d.set_item("converged", fit.converged)?;
    d.set_item("msteps", 0)?;
    d.set_item("iterations", fit.iterations)?;
    d.set_item("langevin_steps", 0)?;
    d.set_item("interrupted", false)?;
    d.set_item(
        "path",
        PyArray2::from_vec2(py, std::slice::from_ref(&fit.theta))
            .map_err(|e| PyRuntimeError::new_err(e.to_string()))?,
    )?;
    d.set_item("se", PyArray1::from_slice(py, &fit.se))?;
    d.set_item("se_error", PyArray1::from_vec(py, vec![0.0; k]))?;
    d.set_item(
        "information",
        PyArray2::from_vec2(py, &fit.information)
            .map_err(|e| PyRuntimeError::new_err(e.to_string()))?,
    )?;
    d.set_item("information_theta", PyArray1::from_slice(py, &fit.theta))?;
    d.set_item(
        "covariance",
        PyArray2::from_vec2(py, &fit.covariance)
            .map_err(|e| PyRuntimeError::new_err(e.to_string()))?,
    )?;
    d.set_item("loglik", fit.log_likelihood)?;
    d.set_item("loglik_se", fit.quadrature_error)?;
    let how = match fit.method {
        LikelihoodMethod::Quadrature => {
            format!("adaptive quadrature ({} nodes per effect)", fit.nodes)
        }
        other => likelihood_method_name(other),
    };
    d.set_item("loglik_method", how)?;
    d.set_item("loglik_ess", None::<f64>)?;
    d.set_item("singular", fit.singular)?;
    d.set_item("reml_loglik", fit.reml)?;
    d.set_item("quadrature_nodes", fit.nodes)?;
    if !fit.converged {
        d.set_item(
            "se_warning",
            format!(
                "the maximiser stopped after {} iterations short of its tolerance (gradient {:.2e}); treat the estimate as approximate",
                fit.iterations, fit.grad_max
            ),
        )?;
    }
    Ok(d)
}

/// Fits a GLMM by its exact likelihood or automated EM (see `sagd.glmm` for the arguments), every
/// argument by name: one random-effect term per entry of `groups`, with its design in `zs`, its
/// `correlated` flag and its names (`terms`: the factor and its effects); returns a dict of
/// arrays, θ's `names` and the sds' `random_names` among them.
#[pyfunction]
#[pyo3(signature = (*, family, y, x, groups, zs, correlated, trials, x_names, terms, seed=0, threads=None, max_msteps=None, progress=None, method="auto", reml=false, nodes=None, ranef_draws=500, offset=None, weights=None, profile=None, simulate=None, bootstrap=None, bootstrap_progress=None, satterthwaite=false, kenward_roger=false, type3=None, anova_terms=None, ls_means=None, ls_means_pairwise=false, ls_means_level=0.95, ls_means_response=false, checkpoint=None, checkpoint_every=100, interrupt_after=None))]
#[allow(clippy::too_many_arguments)]
pub(crate) fn fit_glmm<'py>(
    py: Python<'py>,
    family: &str,
    y: PyReadonlyArray1<'py, f64>,
    x: PyReadonlyArray2<'py, f64>,
    groups: Vec<PyReadonlyArray1<'py, i64>>,
    zs: Vec<PyReadonlyArray2<'py, f64>>,
    correlated: Vec<bool>,
    trials: Option<PyReadonlyArray1<'py, f64>>,
    x_names: Vec<String>,
    terms: Vec<(String, Vec<String>)>,
    seed: u64,
    threads: Option<usize>,
    max_msteps: Option<usize>,
    progress: Option<Py<PyAny>>,
    method: &str,
    reml: bool,
    nodes: Option<usize>,
    ranef_draws: usize,
    offset: Option<PyReadonlyArray1<'py, f64>>,
    weights: Option<PyReadonlyArray1<'py, f64>>,
    profile: Option<f64>,
    simulate: Option<usize>,
    bootstrap: Option<usize>,
    bootstrap_progress: Option<Py<PyAny>>,
    satterthwaite: bool,
    kenward_roger: bool,
    type3: Option<Type3<'py>>,
    anova_terms: Option<AnovaTerms>,
    ls_means: Option<LsMeansCoding<'py>>,
    ls_means_pairwise: bool,
    ls_means_level: f64,
    ls_means_response: bool,
    checkpoint: Option<std::path::PathBuf>,
    checkpoint_every: usize,
    interrupt_after: Option<usize>,
) -> PyResult<Bound<'py, PyDict>> {
    let kept: Kept = (checkpoint, checkpoint_every, interrupt_after);
    if (1..SampledMeans::MIN_DRAWS).contains(&ranef_draws) {
        return Err(PyValueError::new_err(format!(
            "ranef_draws: {ranef_draws}: use 0 (no sampled means) or at least {} draws a chain",
            SampledMeans::MIN_DRAWS
        )));
    }
    let given_weights = weights.as_ref().map(|w| w.as_array().to_vec());
    let hypotheses = hypotheses_of(&x, type3, anova_terms)?;
    let model = glmm_model(
        family, y, x, groups, zs, correlated, trials, offset, weights,
    )?;
    let terms = term_names(terms);
    let names = model.theta_names(&x_names, &terms).map_err(py_error)?;
    let random_names = model.effect_names(&terms).map_err(py_error)?;
    let settings = fit_settings(method, reml, nodes, max_msteps, seed)?;
    let fit = detached(py, threads, progress, None, |watch| {
        model.fit(&settings, &mut |e| match e {
            EmEvent::Update { .. } => watch.tick(1),
            _ => watch.tick(0),
        })
    })?
    .map_err(py_error)?;
    let d = fit_items(py, &model, &fit)?;
    random_effect_items(py, &d, &model, &fit.theta, (ranef_draws, seed))?;
    fitted_items(py, &d, &model, &fit.theta)?;
    if let Some(level) = profile {
        profile_items(py, &d, &model, &fit, level)?;
    }
    if satterthwaite || kenward_roger {
        ddf_items(&d, &model, &fit, &hypotheses, kenward_roger)?;
    }
    if let Some(coding) = ls_means {
        let asked = (ls_means_pairwise, kenward_roger, ls_means_response);
        ls_means_items(&d, (&model, &fit), coding, asked, ls_means_level)?;
    }
    if let Some(draws) = simulate {
        let given = (family, given_weights.as_deref());
        simulation_items(py, &d, &model, &fit.theta, (draws, seed), given)?;
    }
    if let Some(draws) = bootstrap {
        bootstrap_items(
            py,
            &d,
            &model,
            (&fit, &settings),
            (draws, seed, threads),
            (bootstrap_progress, kept),
        )?;
    }
    d.set_item("n_points", model.n_data())?;
    d.set_item("names", names)?;
    d.set_item("random_names", random_names)?;
    Ok(d)
}

/// The names of the bindings' random-effect terms (each its factor and its effects), without
/// their levels.
fn term_names(terms: Vec<(String, Vec<String>)>) -> Vec<TermNames> {
    (terms.into_iter())
        .map(|(group, effects)| TermNames {
            group,
            effects,
            levels: Vec::new(),
        })
        .collect()
}

/// The fit's settings from `sagd.glmm`'s (and the bootstrap test's) arguments: the method by
/// name, REML or ML, the quadrature's nodes, EM's M-steps and the seed.
pub(crate) fn fit_settings(
    method: &str,
    reml: bool,
    nodes: Option<usize>,
    max_msteps: Option<usize>,
    seed: u64,
) -> PyResult<FitSettings> {
    let method: Method = method.parse().map_err(PyValueError::new_err)?;
    Ok(FitSettings {
        method,
        exact: ExactSettings {
            criterion: if reml { Criterion::Reml } else { Criterion::Ml },
            nodes,
            ..ExactSettings::default()
        },
        em: em_settings(max_msteps),
        seed,
    })
}

/// `simulations`: `draws` new responses from the fit at `theta` from `seed`, draws ×
/// observations (lme4's `simulate(fit, nsim)` transposed), a binomial's as its response was
/// given (proportions of its weights where the model had them).
fn simulation_items(
    py: Python<'_>,
    d: &Bound<'_, PyDict>,
    model: &Glmm,
    theta: &[f64],
    (draws, seed): (usize, u64),
    (family, weights): (&str, Option<&[f64]>),
) -> PyResult<()> {
    let sims = py
        .detach(|| model.simulate(theta, draws, seed, false))
        .map_err(py_error)?;
    d.set_item("simulations", as_given(sims, family, weights))
}

/// A fit's items of `sagd.glmm`'s result: the exact fit's or EM's own, the verdicts on a singular
/// fit and on separation, θ̂ on lme4's scales with the sds' delta-method errors, AIC and BIC.
fn fit_items<'py>(py: Python<'py>, model: &Glmm, fit: &GlmmFit) -> PyResult<Bound<'py, PyDict>> {
    let d = match &fit.fitted {
        Fitted::Exact(exact) => exact_dict(py, exact)?,
        Fitted::Em(trace) => {
            let d = trace_dict(py, trace)?;
            let l = fit.log_likelihood;
            d.set_item("loglik", l.value)?;
            d.set_item("loglik_se", l.se)?;
            d.set_item("loglik_method", likelihood_method_name(l.method))?;
            d.set_item("loglik_ess", l.min_ess)?;
            d
        }
    };
    // The fit's verdict (the exact fit's test, or an sd at 0) and what to say about it.
    d.set_item("singular", fit.singular)?;
    if fit.singular == Some(true) {
        d.set_item("singular_note", sagd::glmm::SINGULAR_NOTE)?;
    }
    // Fixed effects that put fitted means at the family's edge: separated responses.
    d.set_item("separation_note", model.separation(&fit.theta))?;
    // θ̂ on lme4's scales: the sds with their delta-method errors, the correlations, σ.
    let summary = model.summary(&fit.theta, fit.covariance.as_deref());
    let sds: Vec<_> = summary.random.iter().flat_map(|t| t.sd.iter()).collect();
    d.set_item("random_sd", sds.iter().map(|e| e.value).collect::<Vec<_>>())?;
    d.set_item("random_sd_se", sds.iter().map(|e| e.se).collect::<Vec<_>>())?;
    d.set_item(
        "random_cor",
        summary
            .random
            .iter()
            .map(|t| t.cor.clone())
            .collect::<Vec<_>>(),
    )?;
    d.set_item("sigma", summary.sigma.map(|e| e.value))?;
    d.set_item("sigma_se", summary.sigma.map(|e| e.se))?;
    // lme4's AIC and BIC, of the REML criterion after a REML fit.
    let criterion = match &fit.fitted {
        Fitted::Exact(e) => e.reml.unwrap_or(e.log_likelihood),
        Fitted::Em(_) => fit.log_likelihood.value,
    };
    d.set_item("aic", summary.aic(criterion))?;
    d.set_item("bic", summary.bic(criterion, model.n_obs()))?;
    Ok(d)
}

/// Each level's effects given the data (lme4's `ranef`, `condVar`) at θ̂, per term: levels × q;
/// the fit stands without them where a mode cannot be found (None, and the reason). Their
/// exact conditional means where quadrature reaches, sampled by HMC beyond it (with their
/// Monte Carlo errors and the chains' R-hat) unless `ranef_draws` is 0.
fn random_effect_items(
    py: Python<'_>,
    d: &Bound<'_, PyDict>,
    model: &Glmm,
    theta: &[f64],
    (ranef_draws, seed): (usize, u64),
) -> PyResult<()> {
    type PerLevel = Vec<Vec<Vec<sagd::glmm::Estimate>>>;
    let by_level = |r: &PerLevel, f: fn(&sagd::glmm::Estimate) -> f64| -> Vec<Vec<Vec<f64>>> {
        r.iter()
            .map(|t| t.iter().map(|l| l.iter().map(f).collect()).collect())
            .collect()
    };
    match model.random_effects(theta) {
        Ok(ranef) => {
            d.set_item("ranef", by_level(&ranef, |e| e.value))?;
            d.set_item("ranef_sd", by_level(&ranef, |e| e.se))?;
            let zeros = |m: &PerLevel| by_level(m, |_| 0.0);
            let means = match model.conditional_means(theta) {
                Ok(m) => Some((zeros(&m), m)),
                Err(_) if ranef_draws > 0 => {
                    let s = py
                        .detach(|| model.conditional_means_sampled(theta, ranef_draws, seed))
                        .map_err(py_error)?;
                    d.set_item("ranef_mean_rhat", s.max_rhat)?;
                    d.set_item("ranef_mean_ess", s.min_ess)?;
                    Some((s.mcse, s.effects))
                }
                Err(_) => None,
            };
            if let Some((mcse, means)) = means {
                d.set_item("ranef_mean", by_level(&means, |e| e.value))?;
                d.set_item("ranef_mean_sd", by_level(&means, |e| e.se))?;
                d.set_item("ranef_mean_mcse", mcse)?;
            }
        }
        Err(e) => d.set_item("ranef_error", e.to_string())?,
    }
    Ok(())
}

/// Each observation's fit at θ̂ with the levels' effects at their modes (lme4's `predict`,
/// `fitted`, `residuals`) and the Pearson residuals' quantiles; the fit stands without them
/// where a mode cannot be found (the reason instead).
fn fitted_items(
    py: Python<'_>,
    d: &Bound<'_, PyDict>,
    model: &Glmm,
    theta: &[f64],
) -> PyResult<()> {
    match model.fitted_values(theta) {
        Ok(f) => {
            d.set_item("resid_quantiles", f.pearson_quantiles())?;
            for (name, v) in [
                ("eta", f.eta),
                ("fitted", f.mean),
                ("resid_response", f.response),
                ("resid_pearson", f.pearson),
                ("resid_deviance", f.deviance),
            ] {
                d.set_item(name, PyArray1::from_vec(py, v))?;
            }
        }
        Err(e) => d.set_item("fitted_error", e.to_string())?,
    }
    Ok(())
}

/// The profile-likelihood intervals at `level` of θ's entries (None for those not profiled),
/// or why there are none (a fit by Langevin chains).
fn profile_items(
    py: Python<'_>,
    d: &Bound<'_, PyDict>,
    model: &Glmm,
    fit: &GlmmFit,
    level: f64,
) -> PyResult<()> {
    let Fitted::Exact(exact) = &fit.fitted else {
        let why = "the fit is by Langevin chains, whose likelihood is sampled: profile intervals \
                   need an exact fit (method=\"exact\", on models it can take)";
        return d.set_item("profile_error", why);
    };
    let intervals = py
        .detach(|| model.profile_intervals(exact, level))
        .map_err(py_error)?;
    d.set_item("profile", intervals)
}
