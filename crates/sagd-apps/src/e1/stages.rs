//! E1's stages in order: automated EM, exact gradient ascent, ℓ along both paths, the MLE, the
//! quadrature's check, the surface and the standard errors, each timed.

use sagd::em::information::{
    louis_information, polish_retrying, Information, LouisSettings, PolishSettings, Polished,
};
use sagd::em::{exact_gd, maximum_likelihood, AutomatedEm, EmEvent, EmTrace, POLISH_ATTEMPTS};
use sagd::error::Result;
use sagd::quadrature::{log_likelihood, log_likelihood_trapezoid, GaussHermite};
use sagd::run::{fnv1a, Control, FNV_OFFSET};

use crate::laps::Laps;

use super::{
    far_from_mle, sane, E1Data, E1Options, E1Result, E1Settings, GammaSigmoid, Mle, Surface,
};

fn grid(lo: f64, hi: f64, n: usize) -> Vec<f64> {
    (0..n)
        .map(|k| lo + (hi - lo) * k as f64 / (n - 1).max(1) as f64)
        .collect()
}

/// The log-likelihood surface under Figure 1a, over a grid that holds both paths, θ₀, the MLE
/// (and the true θ of simulated data) with a margin (a 48-node rule: plenty for a picture).
fn surface(
    s: &E1Settings,
    model: &GammaSigmoid,
    sagd_path: &[Vec<f64>],
    exact: &[Vec<f64>],
    mle: &[f64],
) -> Result<Surface> {
    let mut pts: Vec<&[f64]> = sagd_path
        .iter()
        .chain(exact)
        .map(|v| &v[..])
        .filter(|v| sane(v))
        .collect();
    pts.push(&s.theta0);
    pts.push(mle);
    if let E1Data::Simulated { true_theta, .. } = &s.data {
        pts.push(true_theta);
    }
    let range = |j: usize| {
        pts.iter()
            .fold((f64::INFINITY, f64::NEG_INFINITY), |(l, h), p| {
                (l.min(p[j]), h.max(p[j]))
            })
    };
    let ((amin, amax), (bmin, bmax)) = (range(0), range(1));
    let (pa, pb) = (0.15 * (amax - amin).max(0.5), 0.15 * (bmax - bmin).max(0.5));
    let ag = grid(amin - pa, amax + pa, s.surface);
    let bg = grid(bmin - pb, bmax + pb, s.surface);
    let nodes = 48;
    let gh_s = GaussHermite::new(nodes);
    // Rows of the grid split over the processes of a split run.
    let values: Vec<Vec<f64>> = sagd::share::map(ag.len(), |i| {
        Ok(bg
            .iter()
            .map(|bv| log_likelihood(model, &[ag[i], *bv], &gh_s).unwrap_or(f64::NEG_INFINITY))
            .collect())
    })?;
    Ok(Surface {
        a: ag,
        b: bg,
        loglik: values,
        nodes,
    })
}

/// Runs E1: automated EM (through the runner; `on_event` sees every update and M-step), then
/// exact GD over as many M-steps, ℓ along both paths, the MLE, the quadrature check and the
/// surface. Returns `None` when `on_event` interrupted EM (its checkpoint can resume it).
pub fn run(
    s: &E1Settings,
    opts: &E1Options,
    on_event: &mut dyn FnMut(EmEvent) -> Control,
) -> Result<Option<E1Result>> {
    run_scoped(s, opts, true, on_event)
}

/// The fit alone, for a user's data: automated EM, the MLE by quadrature (which checks the
/// estimate), the quadrature check, the standard errors and the polish, without the paper's
/// comparisons, whose fields (`exact_path`, `loglik_exact`, `loglik_sagd`, `surface`) are left
/// empty. The same estimate as [`run`] with the same settings.
pub fn fit(
    s: &E1Settings,
    opts: &E1Options,
    on_event: &mut dyn FnMut(EmEvent) -> Control,
) -> Result<Option<E1Result>> {
    run_scoped(s, opts, false, on_event)
}

/// Automated EM on E1's model, checkpointed and resumed as `opts` asks.
fn automated_em(
    s: &E1Settings,
    opts: &E1Options,
    model: &GammaSigmoid,
    on_event: &mut dyn FnMut(EmEvent) -> Control,
) -> Result<EmTrace> {
    let mut em = AutomatedEm::new(model, s.em());
    em.checkpoint = opts.checkpoint.clone();
    em.data_key = fnv1a(
        FNV_OFFSET,
        model.data().iter().flat_map(|v| v.to_bits().to_le_bytes()),
    );
    let resume = match (&opts.checkpoint, opts.resume) {
        (Some((path, _)), true) => Some(path.as_path()),
        _ => None,
    };
    em.run(&s.theta0, s.seed, resume, on_event)
}

/// The MLE by BFGS on the quadrature's ℓ from `start`, or from θ₀ where `start` left the range
/// (a diverged path is no place to start it).
fn mle_from(s: &E1Settings, model: &GammaSigmoid, start: &[f64], gh: &GaussHermite) -> Result<Mle> {
    let start = if sane(start) { start } else { &s.theta0[..] };
    let b = maximum_likelihood(model, start, gh)?;
    Ok(Mle {
        unbounded: -b.f <= model.loglik_at_shape_bound() + NO_HIGHER_THAN_THE_BOUND,
        theta: b.x,
        loglik: -b.f,
        grad_max: b.grad_max,
        converged: b.converged,
        iterations: b.iterations,
    })
}

/// How far, in nats, the MLE must rise above ℓ's limit as a → +∞ to count as a maximum.
const NO_HIGHER_THAN_THE_BOUND: f64 = 1e-3;

/// The warning for an [`Mle`] that is [`Mle::unbounded`].
fn unbounded_warning(model: &GammaSigmoid, mle: &Mle) -> String {
    let x = model.data();
    let mean = x.iter().sum::<f64>() / x.len() as f64;
    format!(
        "ℓ has no maximum at a finite θ: it rises toward {:.5} as a → +∞, where every Gamma shape 10σ(a + bZ) reaches its bound 10, and the MLE's search stopped on that ridge (ℓ = {:.5}); the estimates and standard errors above are points on it, not a fit. The model's mean is at most 10 (these data's is {mean:.3}): rescale the data, or fit a model whose shape is not bounded (docs/your-own-model.md)",
        model.loglik_at_shape_bound(),
        mle.loglik,
    )
}

/// The largest difference between the quadrature's ℓ and brute force at `points`.
fn quadrature_error(model: &GammaSigmoid, points: &[Vec<f64>], gh: &GaussHermite) -> Result<f64> {
    Ok(sagd::share::map(points.len(), |i| -> Result<f64> {
        let t = &points[i];
        let q = log_likelihood(model, t, gh)?;
        let r = log_likelihood_trapezoid(model, t, -14.0, 14.0, 28_001)?;
        Ok((q - r).abs())
    })?
    .into_iter()
    .fold(0.0, f64::max))
}

/// The polished estimate with its log-likelihood, as [`E1Result::polished`] holds it.
type PolishedFit = (Polished, f64);

/// The information at EM's estimate: from the polish (with the polished estimate and its ℓ) when
/// asked, else Louis' alone. What went wrong is added to `warnings`, never an error.
fn standard_errors(
    s: &E1Settings,
    model: &GammaSigmoid,
    estimate: &[f64],
    gh: &GaussHermite,
    warnings: &mut Vec<String>,
) -> Result<(Option<Information>, Option<PolishedFit>)> {
    let louis_seed = sagd::rng::stream_seed(s.seed, 0x10_5e);
    if !s.polish {
        return Ok(
            match louis_information(model, estimate, &LouisSettings::default(), louis_seed) {
                Ok(i) => (Some(i), None),
                Err(e) => {
                    warnings.push(format!("no standard errors at the estimate: {e}"));
                    (None, None)
                }
            },
        );
    }
    let settings = PolishSettings::default();
    match polish_retrying(model, estimate, &settings, louis_seed, POLISH_ATTEMPTS) {
        Ok((p, _)) => {
            if !p.converged {
                warnings.push(format!(
                    "polish did not bring the estimated log-likelihood gap below 0.01 in its steps (last {:.4}): treat the estimate with care",
                    p.gaps.last().copied().unwrap_or(f64::NAN)
                ));
            }
            if let Some(w) = &p.se_warning {
                warnings.push(w.clone());
            }
            let loglik = log_likelihood(model, &p.estimate, gh)?;
            Ok((Some(p.information.clone()), Some((p, loglik))))
        }
        Err(failures) => {
            warnings.push(format!(
                "no polish and no standard errors at the estimate: polish failed {} times ({})",
                failures.len(),
                failures.join("; ")
            ));
            Ok((None, None))
        }
    }
}

/// Warnings about where EM ended: far from the MLE (a NaN gap is as far as it gets), or a path
/// (EM's, or exact GD's) that left the range where its figures can be drawn.
fn far_or_diverged(
    s: &E1Settings,
    mle: &Mle,
    final_loglik: f64,
    path: &[Vec<f64>],
    exact: &[Vec<f64>],
) -> Vec<String> {
    let mut warnings = Vec::new();
    let gap = mle.loglik - final_loglik;
    let far = far_from_mle(mle.theta.len());
    if gap.is_nan() || gap >= far {
        warnings.push(format!(
            "automated EM ended far from the maximum: ℓ(MLE) − ℓ(estimate) = {gap:.3} nats, outside the MLE's 99% likelihood-ratio region ({far:.2}); run more M-steps (the stopping rule), or lower the learning rate α = {} if the path oscillates",
            s.alpha
        ));
    }
    if path.iter().chain(exact).any(|v| !sane(v)) {
        warnings.push(format!(
            "a parameter path left the range [−1e6, 1e6] (is the learning rate α = {} too large?): figures that need it are not drawn",
            s.alpha
        ));
    }
    warnings
}

/// Exact GD's path, and the log-likelihood along EM's path and along exact GD's.
type ExactPaths = (Vec<Vec<f64>>, Vec<f64>, Vec<f64>);

/// Exact GD from θ₀ over as many updates as EM's `trace` took, then the log-likelihood along
/// both paths by quadrature: (exact GD's path, ℓ along EM's, ℓ along exact GD's).
fn exact_paths(
    s: &E1Settings,
    model: &GammaSigmoid,
    trace: &EmTrace,
    gh: &GaussHermite,
    laps: &mut Laps,
) -> Result<ExactPaths> {
    let ll = |path: &[Vec<f64>]| -> Result<Vec<f64>> {
        sagd::share::map(path.len(), |i| log_likelihood(model, &path[i], gh))
    };
    let (msteps, updates) = (trace.msteps.len(), s.em().updates_per_mstep);
    let exact = exact_gd(model, &s.theta0, msteps, updates, s.alpha, gh)?;
    laps.lap("exact_gd");
    let (a, b) = (ll(&trace.path)?, ll(&exact)?);
    laps.lap("loglik_paths");
    Ok((exact, a, b))
}

/// The warnings of an MLE that did not converge or ran off to the boundary.
fn mle_warnings(model: &GammaSigmoid, mle: &Mle) -> Vec<String> {
    let mut warnings = Vec::new();
    if !mle.converged {
        warnings.push(format!(
            "the MLE did not converge (BFGS stopped after {} iterations with max |∂ℓ/∂θ| = {:.2e}): its value is a lower bound on the maximum",
            mle.iterations, mle.grad_max
        ));
    }
    if mle.unbounded {
        warnings.push(unbounded_warning(model, mle));
    }
    warnings
}

/// [`run`] (`compare`) or [`fit`].
fn run_scoped(
    s: &E1Settings,
    opts: &E1Options,
    compare: bool,
    on_event: &mut dyn FnMut(EmEvent) -> Control,
) -> Result<Option<E1Result>> {
    s.validate()?;
    let model = s.model()?;
    let mut laps = Laps::start();
    let trace = automated_em(s, opts, &model, on_event)?;
    if trace.interrupted {
        return Ok(None);
    }
    laps.lap("sagd");

    let gh = GaussHermite::new(s.quad_nodes);
    let (exact, loglik_sagd, loglik_exact) = match compare {
        true => exact_paths(s, &model, &trace, &gh, &mut laps)?,
        false => (Vec::new(), Vec::new(), Vec::new()),
    };
    // BFGS starts at exact GD's end, or (the fit alone) at EM's estimate.
    let ex_end = exact
        .last()
        .cloned()
        .unwrap_or_else(|| trace.estimate.clone());
    let mle = mle_from(s, &model, &ex_end, &gh)?;
    laps.lap("mle");

    // Quadrature against brute force at the points that matter.
    // Exact GD's end is EM's estimate when the fit runs alone: each point once.
    let mut check = vec![
        s.theta0.to_vec(),
        ex_end,
        trace.estimate.clone(),
        mle.theta.clone(),
    ];
    check.dedup();
    let quadrature_error = quadrature_error(&model, &check, &gh)?;

    let surface = if compare {
        let surface = surface(s, &model, &trace.path, &exact, &mle.theta)?;
        laps.lap("surface");
        surface
    } else {
        Surface {
            a: Vec::new(),
            b: Vec::new(),
            loglik: Vec::new(),
            nodes: 0,
        }
    };
    let estimate_loglik = log_likelihood(&model, &trace.estimate, &gh)?;
    let mut warnings = mle_warnings(&model, &mle);
    let (information, polished) = standard_errors(s, &model, &trace.estimate, &gh, &mut warnings)?;
    laps.lap("standard_errors");
    // The final estimate: polished when asked.
    let final_loglik = polished.as_ref().map_or(estimate_loglik, |p| p.1);
    warnings.extend(far_or_diverged(s, &mle, final_loglik, &trace.path, &exact));
    Ok(Some(E1Result {
        x: model.data().to_vec(),
        em: trace,
        loglik_sagd,
        estimate_loglik,
        exact_path: exact,
        loglik_exact,
        mle,
        quadrature_error,
        surface,
        timing_s: laps.timing,
        exchanged: laps.exchanged,
        warnings,
        information,
        polished,
    }))
}
