//! Experiment E1, the paper's first application (Figure 1): automated EM on the Gamma-sigmoid
//! model beside exact gradient ascent (∇Q by quadrature), the maximum-likelihood estimate, the
//! true log-likelihood along both paths, and the surface under them. [`E1Settings::default`] is
//! the paper's experiment; [`run`] returns everything a report needs.

mod gamma_sigmoid;
pub use gamma_sigmoid::GammaSigmoid;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Instant;

use sagd::em::information::{
    louis_information, polish_retrying, Information, LouisSettings, PolishSettings, Polished,
};
use sagd::em::{
    exact_gd, maximum_likelihood, AutomatedEm, EmEvent, EmSettings, EmTrace, StopRule,
    POLISH_ATTEMPTS,
};
use sagd::error::{Result, SagdError};
use sagd::langevin::{LangevinSettings, Momentum};
use sagd::quadrature::{log_likelihood, log_likelihood_trapezoid, GaussHermite};
use sagd::run::{fnv1a, Control, FNV_OFFSET};
use sagd::schedule::{LengthSchedule, Schedule};
use serde::{Deserialize, Serialize};

/// Where E1's observations come from.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "source", rename_all = "lowercase")]
pub enum E1Data {
    /// n points simulated at the true θ = (a, b) from the run's seed.
    Simulated {
        /// Observations.
        n: usize,
        /// The true (a, b).
        true_theta: [f64; 2],
    },
    /// A user's positive observations.
    Observed {
        /// The observations.
        x: Vec<f64>,
    },
}

/// Settings of E1. The default is the paper's experiment: n = 100 simulated points at
/// θ = (2, 0.5), θ₀ = (0, 1), three M-steps of T = 100 updates with α = 0.2, δ_t = 0.1/√t,
/// K_t = t + 20, 100 burn-in steps per M-step, γ = 1, the Euler scheme, chains from z = 0 with
/// ρ = 0, seed 1.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct E1Settings {
    /// The observations.
    pub data: E1Data,
    /// θ₀ = (a₀, b₀).
    pub theta0: [f64; 2],
    /// M-steps to run when the stopping rule is off.
    pub msteps: usize,
    /// Run M-steps until the stopping rule holds (at most `max_msteps`).
    pub until_converged: bool,
    /// The most M-steps with the stopping rule.
    pub max_msteps: usize,
    /// The stopping rule.
    pub stop_rule: StopRule,
    /// T: updates per M-step.
    pub updates_per_mstep: usize,
    /// The constant learning rate α.
    pub alpha: f64,
    /// δ_t = delta0/√t.
    pub delta0: f64,
    /// K_t = t + k0.
    pub k0: usize,
    /// Burn-in steps at the start of every M-step.
    pub burn_in: usize,
    /// The integrator and friction γ.
    pub langevin: LangevinSettings,
    /// How momenta start.
    pub initial_momentum: Momentum,
    /// Chains per data point.
    pub chains_per_point: usize,
    /// Seed of the simulated data and of the chains (separate streams). Seed 0's data have their
    /// MLE at b = 0, where EM converges sublinearly; seed 1's MLE is interior.
    pub seed: u64,
    /// Gauss-Hermite nodes per point for exact GD, ℓ and the MLE.
    pub quad_nodes: usize,
    /// Grid points per axis of the log-likelihood surface.
    pub surface: usize,
    /// After EM, [`polish`](sagd::em::polish) the estimate: Newton steps on ℓ until
    /// its estimated gap to the maximum is below 0.01 beyond Monte Carlo noise (the check EM's
    /// own rule cannot make when EM is slow); the standard errors then come from there.
    #[serde(default)]
    pub polish: bool,
}

impl Default for E1Settings {
    fn default() -> Self {
        let em = EmSettings::paper_e1();
        E1Settings {
            data: E1Data::Simulated {
                n: 100,
                true_theta: [2.0, 0.5],
            },
            theta0: [0.0, 1.0],
            msteps: em.max_msteps,
            until_converged: false,
            max_msteps: 50,
            stop_rule: StopRule::default(),
            updates_per_mstep: em.updates_per_mstep,
            alpha: 0.2,
            delta0: 0.1,
            k0: 20,
            burn_in: em.sagd.burn_in,
            langevin: em.sagd.langevin,
            initial_momentum: em.sagd.initial_momentum,
            chains_per_point: em.chains_per_point,
            seed: 1,
            quad_nodes: 100,
            surface: 60,
            polish: false,
        }
    }
}

impl E1Settings {
    /// The automated-EM settings these describe.
    pub fn em(&self) -> EmSettings {
        let mut s = EmSettings::paper_e1();
        s.sagd.langevin = self.langevin;
        s.sagd.initial_momentum = self.initial_momentum;
        s.sagd.schedules.step_size = Schedule::power(self.delta0, 0.5);
        s.sagd.schedules.chain_length = LengthSchedule::power(1.0, 1.0, self.k0);
        s.sagd.schedules.learning_rate = Schedule::constant(self.alpha);
        s.sagd.burn_in = self.burn_in;
        s.updates_per_mstep = self.updates_per_mstep;
        s.chains_per_point = self.chains_per_point;
        if self.until_converged {
            s.max_msteps = self.max_msteps;
            s.stopping = Some(self.stop_rule);
        } else {
            s.max_msteps = self.msteps;
            s.stopping = None;
        }
        s
    }

    /// Checks every setting.
    pub fn validate(&self) -> Result<()> {
        let bad = |name: &'static str, value: String, fix: &str| {
            Err(SagdError::InvalidSetting {
                name,
                value,
                fix: fix.into(),
            })
        };
        if self.quad_nodes < 8 {
            return bad(
                "quad_nodes",
                self.quad_nodes.to_string(),
                "use at least 8 (100 is accurate to 1e-9 here)",
            );
        }
        if self.surface < 2 {
            return bad(
                "surface",
                self.surface.to_string(),
                "use at least 2 grid points per axis",
            );
        }
        if let E1Data::Simulated { n: 0, .. } = self.data {
            return bad("n", "0".into(), "simulate at least 1 observation");
        }
        // Named by the setting the user gave: fixed M-steps or the stopping rule's cap.
        if !self.until_converged && self.msteps == 0 {
            return bad("msteps", "0".into(), "run at least 1 M-step (the paper: 3)");
        }
        if self.until_converged && self.max_msteps == 0 {
            return bad(
                "max_msteps",
                "0".into(),
                "allow at least 1 M-step (default 50)",
            );
        }
        self.em().validate(2)
    }

    /// The model: simulated from the seed, or the user's observations.
    pub fn model(&self) -> Result<GammaSigmoid> {
        match &self.data {
            E1Data::Simulated { n, true_theta } => {
                Ok(GammaSigmoid::simulate(*n, true_theta[0], true_theta[1], self.seed)?.0)
            }
            E1Data::Observed { x } => GammaSigmoid::new(x.clone()),
        }
    }
}

/// How E1 runs, beside what it computes.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct E1Options {
    /// Checkpoint file and cadence (updates within an M-step; also after every M-step).
    pub checkpoint: Option<(PathBuf, usize)>,
    /// Resume from the checkpoint file.
    pub resume: bool,
}

/// The maximum-likelihood estimate by BFGS on the quadrature log-likelihood.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Mle {
    /// θ̂.
    pub theta: Vec<f64>,
    /// ℓ(θ̂).
    pub loglik: f64,
    /// max |∂ℓ/∂θ_j| there.
    pub grad_max: f64,
    /// Whether BFGS met its gradient tolerance.
    pub converged: bool,
    /// BFGS iterations.
    pub iterations: usize,
}

/// The true log-likelihood on a grid: `loglik[i][j]` at `(a[i], b[j])`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Surface {
    /// Grid in a.
    pub a: Vec<f64>,
    /// Grid in b.
    pub b: Vec<f64>,
    /// Values.
    pub loglik: Vec<Vec<f64>>,
    /// Gauss-Hermite nodes per point.
    pub nodes: usize,
}

/// Everything E1 computed.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct E1Result {
    /// The observations.
    pub x: Vec<f64>,
    /// Automated EM's record (path, M-steps, estimate).
    pub em: EmTrace,
    /// ℓ at every point of the SAGD path.
    pub loglik_sagd: Vec<f64>,
    /// ℓ at the stopping rule's estimate (the last iterate when the rule is off).
    pub estimate_loglik: f64,
    /// Exact gradient ascent: θ₀ and θ after every update.
    pub exact_path: Vec<Vec<f64>>,
    /// ℓ along it.
    pub loglik_exact: Vec<f64>,
    /// The MLE.
    pub mle: Mle,
    /// Largest |ℓ by the rule − ℓ by a 28001-point trapezoid rule| at θ₀, both endpoints and the MLE.
    pub quadrature_error: f64,
    /// The surface under Figure 1a.
    pub surface: Surface,
    /// Wall seconds of `sagd`, `exact_gd`, `loglik_paths`, `mle`, `surface`.
    pub timing_s: std::collections::BTreeMap<String, f64>,
    /// In a run split over processes: what this process exchanged in each of those phases.
    #[serde(skip_serializing_if = "std::collections::BTreeMap::is_empty", default)]
    pub exchanged: std::collections::BTreeMap<String, sagd::share::Exchanged>,
    /// What the run found wrong with itself: a maximisation that did not converge, an EM that
    /// ended far from the maximum, paths beyond any sensible range.
    pub warnings: Vec<String>,
    /// The observed information at the estimate by Louis' identity: standard errors and Wald
    /// intervals (statistical uncertainty of the MLE, which the estimate approaches; not the Monte
    /// Carlo error of the estimate, `em.estimate_se`).
    pub information: Option<Information>,
    /// The polished estimate and its log-likelihood, with `polish` on.
    pub polished: Option<(Polished, f64)>,
}

impl E1Result {
    /// SAGD's last iterate.
    pub fn sagd_end(&self) -> &[f64] {
        self.em.path.last().map(|v| &v[..]).unwrap_or(&[])
    }

    /// Exact GD's last iterate.
    pub fn exact_end(&self) -> &[f64] {
        self.exact_path.last().map(|v| &v[..]).unwrap_or(&[])
    }
}

/// Values that a figure or a starting point can use: finite and below 1e6 in magnitude.
pub fn sane(v: &[f64]) -> bool {
    v.iter().all(|x| x.is_finite() && x.abs() < 1e6)
}

/// How far below the maximum ℓ may end before EM is flagged as "far from the MLE": half the 99%
/// quantile of χ² with `p` degrees of freedom, the edge of the MLE's 99% likelihood-ratio
/// confidence region (4.61 nats for p = 2). The paper's three M-steps end 0.7 below it.
pub fn far_from_mle(p: usize) -> f64 {
    use statrs::distribution::{ChiSquared, ContinuousCDF};
    ChiSquared::new(p.max(1) as f64).map_or(4.61, |c| 0.5 * c.inverse_cdf(0.99))
}

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

/// Wall seconds of each stage of E1 and, in a split run, the bytes it exchanged.
struct Laps {
    clock: Instant,
    before: sagd::share::Exchanged,
    timing: BTreeMap<String, f64>,
    exchanged: BTreeMap<String, sagd::share::Exchanged>,
}

impl Laps {
    fn start() -> Self {
        Laps {
            clock: Instant::now(),
            before: sagd::share::exchanged(),
            timing: BTreeMap::new(),
            exchanged: BTreeMap::new(),
        }
    }

    /// Ends stage `name`, and starts the next.
    fn lap(&mut self, name: &str) {
        self.timing
            .insert(name.to_string(), self.clock.elapsed().as_secs_f64());
        self.clock = Instant::now();
        if sagd::share::size() > 1 {
            let now = sagd::share::exchanged();
            self.exchanged
                .insert(name.to_string(), now.since(&self.before));
            self.before = now;
        }
    }
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
        theta: b.x,
        loglik: -b.f,
        grad_max: b.grad_max,
        converged: b.converged,
        iterations: b.iterations,
    })
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
    let ll = |path: &[Vec<f64>]| -> Result<Vec<f64>> {
        sagd::share::map(path.len(), |i| log_likelihood(&model, &path[i], &gh))
    };
    let (exact, loglik_sagd, loglik_exact) = if compare {
        let msteps = trace.msteps.len();
        let exact = exact_gd(
            &model,
            &s.theta0,
            msteps,
            s.em().updates_per_mstep,
            s.alpha,
            &gh,
        )?;
        laps.lap("exact_gd");
        let (a, b) = (ll(&trace.path)?, ll(&exact)?);
        laps.lap("loglik_paths");
        (exact, a, b)
    } else {
        (Vec::new(), Vec::new(), Vec::new())
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
    let mut warnings = Vec::new();
    if !mle.converged {
        warnings.push(format!(
            "the MLE did not converge (BFGS stopped after {} iterations with max |∂ℓ/∂θ| = {:.2e}): its value is a lower bound on the maximum",
            mle.iterations, mle.grad_max
        ));
    }
    let (information, polished) = standard_errors(s, &model, &trace.estimate, &gh, &mut warnings)?;
    laps.lap("standard_errors");
    // The final estimate: polished when asked.
    let gap = mle.loglik - polished.as_ref().map_or(estimate_loglik, |p| p.1);
    // A NaN gap is as far as it gets.
    let far = far_from_mle(mle.theta.len());
    if gap.is_nan() || gap >= far {
        warnings.push(format!(
            "automated EM ended far from the maximum: ℓ(MLE) − ℓ(estimate) = {gap:.3} nats, outside the MLE's 99% likelihood-ratio region ({far:.2}); run more M-steps (the stopping rule), or lower the learning rate α = {} if the path oscillates",
            s.alpha
        ));
    }
    let diverged = trace.path.iter().chain(&exact).any(|v| !sane(v));
    if diverged {
        warnings.push(format!(
            "a parameter path left the range [−1e6, 1e6] (is the learning rate α = {} too large?): figures that need it are not drawn",
            s.alpha
        ));
    }
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
