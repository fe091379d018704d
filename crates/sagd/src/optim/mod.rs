//! Parameter updates: a gradient transform (SGD, momentum, Adam), then a step of size α_t, then a
//! projection onto Θ (as optax: transform, apply, project), and the averaged iterate of Algorithm 1.

#[doc(hidden)]
pub mod bfgs;

use serde::{Deserialize, Serialize};

use crate::error::{check_len, positive, Result, SagdError};
use crate::real::Real;

/// A gradient transform: turns a gradient into an update direction, keeping its own state.
#[doc(hidden)]
pub trait Transform {
    /// The state for `dim` parameters.
    fn init(&self, dim: usize) -> OptState;
    /// Replaces `grad` by the direction to step along (the step is −α_t times it).
    fn direction<T: Real>(&self, grad: &mut [T], state: &mut OptState);
}

/// The transforms this crate provides.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize, Default)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum Optimizer {
    /// Plain stochastic gradient steps (Algorithm 1).
    #[default]
    Sgd,
    /// Heavy-ball momentum, or Nesterov's variant.
    Momentum {
        /// The momentum coefficient in [0, 1).
        beta: f64,
        /// Nesterov's look-ahead.
        nesterov: bool,
    },
    /// Adam (Kingma and Ba) with bias correction.
    Adam {
        /// First-moment decay.
        beta1: f64,
        /// Second-moment decay.
        beta2: f64,
        /// Added to the root of the second moment.
        eps: f64,
    },
}

impl Optimizer {
    /// Adam with the usual constants (0.9, 0.999, 1e-8).
    pub fn adam() -> Self {
        Optimizer::Adam {
            beta1: 0.9,
            beta2: 0.999,
            eps: 1e-8,
        }
    }

    /// Checks the constants.
    pub fn validate(&self) -> Result<()> {
        let unit = |name: &'static str, v: f64| {
            if (0.0..1.0).contains(&v) {
                Ok(())
            } else {
                Err(SagdError::InvalidSetting {
                    name,
                    value: v.to_string(),
                    fix: "use a value in [0, 1)".into(),
                })
            }
        };
        match *self {
            Optimizer::Sgd => Ok(()),
            Optimizer::Momentum { beta, .. } => unit("momentum beta", beta),
            Optimizer::Adam { beta1, beta2, eps } => {
                unit("adam beta1", beta1)?;
                unit("adam beta2", beta2)?;
                positive("adam eps", eps, "use a small positive number such as 1e-8")
            }
        }
    }
}

/// The state of a transform (moments in f64, whatever the parameter type).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[doc(hidden)]
pub struct OptState {
    /// First moment / velocity.
    pub m: Vec<f64>,
    /// Second moment (Adam).
    pub v: Vec<f64>,
    /// Updates taken.
    pub count: u64,
}

impl Transform for Optimizer {
    fn init(&self, dim: usize) -> OptState {
        match self {
            Optimizer::Sgd => OptState::default(),
            Optimizer::Momentum { .. } => OptState {
                m: vec![0.0; dim],
                ..Default::default()
            },
            Optimizer::Adam { .. } => OptState {
                m: vec![0.0; dim],
                v: vec![0.0; dim],
                count: 0,
            },
        }
    }

    fn direction<T: Real>(&self, grad: &mut [T], state: &mut OptState) {
        match *self {
            Optimizer::Sgd => state.count += 1,
            Optimizer::Momentum { beta, nesterov } => {
                state.count += 1;
                for (g, m) in grad.iter_mut().zip(state.m.iter_mut()) {
                    *m = beta * *m + g.f64();
                    *g = T::of(if nesterov { g.f64() + beta * *m } else { *m });
                }
            }
            Optimizer::Adam { beta1, beta2, eps } => {
                use rayon::prelude::*;
                let k = AdamStep::next(beta1, beta2, eps, state);
                // Elementwise, so splitting a large vector across threads changes no bits.
                if grad.len() > 2 * SPLIT {
                    grad.par_chunks_mut(SPLIT)
                        .zip(state.m.par_chunks_mut(SPLIT))
                        .zip(state.v.par_chunks_mut(SPLIT))
                        .for_each(|((g, m), v)| adam_update(g, m, v, k));
                } else {
                    adam_update(grad, &mut state.m, &mut state.v, k);
                }
            }
        }
    }
}

/// Elements per task of the elementwise passes over long parameter vectors.
const SPLIT: usize = 1 << 14;

/// Whether every element is finite (in parallel for long vectors).
fn all_finite<T: Real>(v: &[T]) -> bool {
    use rayon::prelude::*;
    if v.len() > 2 * SPLIT {
        v.par_chunks(SPLIT).all(|c| c.iter().all(|x| x.is_finite()))
    } else {
        v.iter().all(|x| x.is_finite())
    }
}

/// Adam's constants at one update: β₁, β₂, ε and the bias corrections 1 − β₁ᵗ, 1 − β₂ᵗ.
#[derive(Clone, Copy, Debug)]
struct AdamStep {
    beta1: f64,
    beta2: f64,
    eps: f64,
    c1: f64,
    c2: f64,
}

impl AdamStep {
    /// Counts the update in `state` and gives its constants.
    fn next(beta1: f64, beta2: f64, eps: f64, state: &mut OptState) -> Self {
        state.count += 1;
        AdamStep {
            beta1,
            beta2,
            eps,
            c1: 1.0 - beta1.powi(state.count as i32),
            c2: 1.0 - beta2.powi(state.count as i32),
        }
    }

    /// Moves one coordinate's moments (kept in f64) by its gradient and gives its direction
    /// m̂ / (√v̂ + ε), computed in the parameters' precision: for f32 parameters the divisions and
    /// the square root run on 16 lanes instead of 8 (in f64, Adam on E3's 6.6 million parameters
    /// was bound by them); for f64 the same bits as before.
    #[inline(always)]
    fn direction<T: Real>(self, g: T, m: &mut f64, v: &mut f64) -> T {
        let gf = g.f64();
        *m = self.beta1 * *m + (1.0 - self.beta1) * gf;
        *v = self.beta2 * *v + (1.0 - self.beta2) * gf * gf;
        let m_hat = T::of(*m) / T::of(self.c1);
        let v_hat = T::of(*v) / T::of(self.c2);
        m_hat / (v_hat.sqrt() + T::of(self.eps))
    }
}

crate::vectorized! {
    /// Adam's moments and direction for one slice. Compiled for wide vector units too (division and
    /// square root dominate); the same bits on every path.
    fn adam_update<T: Real>(g: &mut [T], m: &mut [f64], v: &mut [f64], k: AdamStep) {
        for ((g, m), v) in g.iter_mut().zip(m.iter_mut()).zip(v.iter_mut()) {
            *g = k.direction(*g, m, v);
        }
    }
}

crate::vectorized! {
    /// [`adam_update`] and the step θ ← θ − α·direction in one pass over a slice (the same bits as
    /// the two passes); whether every moved θ is finite.
    fn adam_step<T: Real>(
        g: &mut [T],
        m: &mut [f64],
        v: &mut [f64],
        theta: &mut [T],
        k: AdamStep,
        lr: f64,
    ) -> bool {
        let mut finite = true;
        for (((g, m), v), th) in g
            .iter_mut()
            .zip(m.iter_mut())
            .zip(v.iter_mut())
            .zip(theta.iter_mut())
        {
            *g = k.direction(*g, m, v);
            *th = descend(*th, *g, lr);
            finite &= th.is_finite();
        }
        finite
    }
}

/// θ − α·d, the step rounded to T before it is taken: one rounding in f64, the same as f32's
/// `w -= lr·g`.
#[inline(always)]
fn descend<T: Real>(theta: T, d: T, lr: f64) -> T {
    theta - T::of(lr * d.f64())
}

/// The feasible set Θ of Algorithm 1's projection step.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, Default)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum Projection {
    /// Θ = ℝᵖ.
    #[default]
    None,
    /// A box lower ≤ θ ≤ upper, coordinate-wise.
    Box {
        /// Lower bounds.
        lower: Vec<f64>,
        /// Upper bounds.
        upper: Vec<f64>,
    },
    /// A Euclidean ball ‖θ − center‖ ≤ radius.
    Ball {
        /// The centre.
        center: Vec<f64>,
        /// The radius (> 0).
        radius: f64,
    },
}

impl Projection {
    /// Checks the set against the parameter dimension.
    pub fn validate(&self, dim: usize) -> Result<()> {
        match self {
            Projection::None => Ok(()),
            Projection::Box { lower, upper } => {
                check_len("projection box lower bounds", dim, lower.len())?;
                check_len("projection box upper bounds", dim, upper.len())?;
                match lower
                    .iter()
                    .zip(upper)
                    .position(|(l, u)| l.is_nan() || u.is_nan() || l > u)
                {
                    Some(i) => Err(SagdError::InvalidSetting {
                        name: "projection box",
                        value: format!("[{}, {}] at coordinate {i}", lower[i], upper[i]),
                        fix: "each lower bound must be <= its upper bound".into(),
                    }),
                    None => Ok(()),
                }
            }
            Projection::Ball { center, radius } => {
                check_len("projection ball centre", dim, center.len())?;
                positive("projection ball radius", *radius, "use a finite radius > 0")
            }
        }
    }

    /// Projects θ onto the set, in place.
    pub fn apply<T: Real>(&self, theta: &mut [T]) {
        match self {
            Projection::None => {}
            Projection::Box { lower, upper } => {
                for ((t, l), u) in theta.iter_mut().zip(lower).zip(upper) {
                    *t = T::of(t.f64().clamp(*l, *u));
                }
            }
            Projection::Ball { center, radius } => {
                let norm = theta
                    .iter()
                    .zip(center)
                    .map(|(t, c)| (t.f64() - c).powi(2))
                    .sum::<f64>()
                    .sqrt();
                if norm > *radius {
                    let s = radius / norm;
                    for (t, c) in theta.iter_mut().zip(center) {
                        *t = T::of(c + s * (t.f64() - c));
                    }
                }
            }
        }
    }
}

/// Which iterates the returned parameter averages (Polyak-Ruppert averaging).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize, Default)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum Averaging {
    /// The last iterate.
    None,
    /// θ̂_t = (1/t) Σ_{s≤t} θ_s over the stage (Algorithm 1's output).
    #[default]
    All,
    /// The mean over the final `fraction` of a run of known length (at least the last iterate).
    Tail {
        /// The fraction of the updates, in (0, 1].
        fraction: f64,
    },
}

/// The one update rule of every optimisation in the project (optax's chain): the transform turns
/// the gradient into a direction, θ steps by −α_t times it, the projection maps θ back onto Θ, and
/// the averaging keeps θ̂. The SAGD solver, automated EM and network training all call
/// [`UpdateRule::apply`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, Default)]
pub struct UpdateRule {
    /// SGD, momentum or Adam.
    pub transform: Optimizer,
    /// The feasible set Θ.
    pub projection: Projection,
    /// Which iterates θ̂ averages.
    pub averaging: Averaging,
}

/// The state of an [`UpdateRule`]: the transform's moments and the running average.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct UpdateState {
    /// The transform's state.
    #[doc(hidden)]
    pub opt: OptState,
    /// Updates applied.
    pub count: usize,
    /// The running mean of the averaged iterates (valid when `averaged > 0`).
    pub avg: Vec<f64>,
    /// Iterates averaged so far.
    pub averaged: usize,
    /// Iterates after this update count are averaged.
    average_from: usize,
}

impl UpdateRule {
    /// Plain SGD steps, no projection, Algorithm 1's full average.
    pub fn sgd() -> Self {
        UpdateRule::default()
    }

    /// Adam with the usual constants, no projection, and the given averaging.
    pub fn adam(averaging: Averaging) -> Self {
        UpdateRule {
            transform: Optimizer::adam(),
            projection: Projection::None,
            averaging,
        }
    }

    /// Checks the transform, the set Θ for `dim` parameters and the averaging.
    pub fn validate(&self, dim: usize) -> Result<()> {
        self.transform.validate()?;
        self.projection.validate(dim)?;
        match self.averaging {
            Averaging::Tail { fraction } if !(fraction > 0.0 && fraction <= 1.0) => {
                Err(SagdError::InvalidSetting {
                    name: "averaging tail fraction",
                    value: fraction.to_string(),
                    fix: "use a fraction in (0, 1], or no averaging".into(),
                })
            }
            _ => Ok(()),
        }
    }

    /// A fresh state for `dim` parameters over a run of `total` updates (needed by
    /// [`Averaging::Tail`]; `None` for a run of unknown length, where a tail averages everything).
    pub fn init(&self, dim: usize, total: Option<usize>) -> UpdateState {
        let average_from = match (self.averaging, total) {
            (Averaging::None, _) => usize::MAX,
            (Averaging::All, _) | (Averaging::Tail { .. }, None) => 0,
            (Averaging::Tail { fraction }, Some(n)) => {
                n - ((fraction.min(1.0) * n as f64).round() as usize).clamp(1, n.max(1))
            }
        };
        UpdateState {
            opt: self.transform.init(dim),
            count: 0,
            avg: vec![0.0; dim],
            averaged: 0,
            average_from,
        }
    }

    /// One update: `grad` is replaced by the transform's direction, θ ← Π_Θ(θ − α·direction), and
    /// θ is averaged when its turn has come. A non-finite gradient or θ is an error naming the
    /// update (θ is left as it was only for a non-finite gradient).
    pub fn apply<T: Real>(
        &self,
        st: &mut UpdateState,
        theta: &mut [T],
        grad: &mut [T],
        lr: f64,
    ) -> Result<()> {
        let iteration = st.count + 1;
        if !all_finite(grad) {
            return Err(SagdError::NonFiniteUpdate { iteration });
        }
        use rayon::prelude::*;
        let long = theta.len() > 2 * SPLIT;
        if let (Optimizer::Adam { beta1, beta2, eps }, Projection::None) =
            (self.transform, &self.projection)
        {
            // Direction, step and θ's check in one pass (E3's updates move 6.6 million
            // parameters: three passes cost as much again as the arithmetic).
            let k = AdamStep::next(beta1, beta2, eps, &mut st.opt);
            let OptState { m, v, .. } = &mut st.opt;
            let finite = if long {
                grad.par_chunks_mut(SPLIT)
                    .zip(m.par_chunks_mut(SPLIT))
                    .zip(v.par_chunks_mut(SPLIT))
                    .zip(theta.par_chunks_mut(SPLIT))
                    .map(|(((g, m), v), th)| adam_step(g, m, v, th, k, lr))
                    .reduce(|| true, |a, b| a & b)
            } else {
                adam_step(grad, m, v, theta, k, lr)
            };
            return self.record(st, theta, finite);
        }
        self.transform.direction(grad, &mut st.opt);
        // Elementwise, so split among threads for long vectors without changing bits.
        let step = |th: &mut [T], d: &[T]| {
            for (th, d) in th.iter_mut().zip(d) {
                *th = descend(*th, *d, lr);
            }
        };
        if long {
            theta
                .par_chunks_mut(SPLIT)
                .zip(grad.par_chunks(SPLIT))
                .for_each(|(th, d)| step(th, d));
        } else {
            step(theta, grad);
        }
        self.settle(st, theta)
    }

    /// An update to a point chosen by the caller (a Newton step with its line search): θ ← Π_Θ(θ'),
    /// counted and averaged like [`UpdateRule::apply`]'s. The transform is not used.
    pub fn accept<T: Real>(&self, st: &mut UpdateState, theta: &mut [T], to: &[T]) -> Result<()> {
        theta.copy_from_slice(to);
        self.settle(st, theta)
    }

    /// Projects the moved θ, counts the update and averages θ when its turn has come.
    fn settle<T: Real>(&self, st: &mut UpdateState, theta: &mut [T]) -> Result<()> {
        self.projection.apply(theta);
        let finite = all_finite(theta);
        self.record(st, theta, finite)
    }

    /// Counts the update that moved θ (an error if θ is not `finite`) and averages θ when its
    /// turn has come.
    fn record<T: Real>(&self, st: &mut UpdateState, theta: &[T], finite: bool) -> Result<()> {
        let iteration = st.count + 1;
        st.count = iteration;
        if !finite {
            return Err(SagdError::NonFiniteUpdate { iteration });
        }
        if st.count > st.average_from {
            st.averaged += 1;
            let w = 1.0 / st.averaged as f64;
            st.avg
                .iter_mut()
                .zip(theta.iter())
                .for_each(|(a, v)| *a += (v.f64() - *a) * w);
        }
        Ok(())
    }

    /// The averaged iterate θ̂ (θ itself while nothing has been averaged).
    pub fn average<T: Real>(&self, st: &UpdateState, theta: &[T]) -> Vec<f64> {
        if st.averaged > 0 {
            st.avg.clone()
        } else {
            theta.iter().map(|v| v.f64()).collect()
        }
    }

    /// Writes θ̂ into θ when any iterate was averaged (the parameter a run returns).
    pub fn finish<T: Real>(&self, st: &UpdateState, theta: &mut [T]) {
        if st.averaged > 0 {
            theta
                .iter_mut()
                .zip(&st.avg)
                .for_each(|(v, a)| *v = T::of(*a));
        }
    }
}

#[cfg(test)]
mod tests;
