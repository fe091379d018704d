//! Underdamped Langevin dynamics, dξ = ρ dt, dρ = −γρ dt + ∇log π(ξ) dt + √(2γ) dB, discretised by
//! one generic splitting step and a coefficient table per scheme (as BlackJAX's integrators).
//!
//! | scheme | one step of size δ | order of the stationary bias |
//! |---|---|---|
//! | [`Scheme::Euler`] | the paper's eqs. 3-4: ξ += δρ; ρ = (1−γδ)ρ + δ∇log π(ξ_old) + √(2γδ)η | 1 |
//! | [`Scheme::Obabo`] | O(δ/2) B(δ/2) A(δ) B(δ/2) O(δ/2) | 2 |
//! | [`Scheme::Baoab`] | B(δ/2) A(δ/2) O(δ) A(δ/2) B(δ/2) | 2 (exact positions on Gaussians) |
//! | [`Scheme::Ubu`] | U(δ/2) B(δ) U(δ/2), U the exact flow of the free (ξ, ρ) Ornstein-Uhlenbeck part | 2 |
//!
//! A = drift of ξ, B = kick by the gradient, O = exact friction and noise on ρ. Every scheme
//! evaluates the gradient once per step; HMC's leapfrog ([`crate::hmc`]) runs on the same code.
//!
//! # Measured stationary bias on a Gaussian target
//!
//! Target N(0, 1), γ = 1; 1000 independent chains × 2000 steps after 20/δ burn-in steps (f64,
//! seed 1, the same streams for every scheme; test `bias_table` in `tests/integrators.rs`, run with
//! `--nocapture`). Measured Var ξ − 1 (± its standard error over chains), and in brackets the exact
//! value for the discrete chain, from its linear recursion:
//!
//! | δ | Euler | OBABO | BAOAB | UBU |
//! |---|---|---|---|---|
//! | 0.4 | +0.738 ± 0.004 (+0.746) | +0.039 ± 0.002 (+0.042) | −0.004 ± 0.002 (0) | −0.032 ± 0.002 (−0.027) |
//! | 0.2 | +0.261 ± 0.004 (+0.264) | +0.002 ± 0.003 (+0.010) | −0.003 ± 0.003 (0) | −0.010 ± 0.003 (−0.007) |
//! | 0.1 | +0.111 ± 0.005 (+0.114) | −0.004 ± 0.004 (+0.003) | −0.003 ± 0.004 (0) | −0.005 ± 0.004 (−0.002) |
//! | 0.05 | +0.052 ± 0.006 (+0.053) | −0.004 ± 0.006 (+0.001) | −0.002 ± 0.006 (0) | −0.004 ± 0.006 (−0.000) |
//!
//! The exact column halves (Euler) or quarters (OBABO, UBU) with δ; BAOAB's position variance is exact
//! at every δ, and its momentum variance carries the O(δ²) error instead.

mod block;
mod chains;
mod given;

pub use chains::{check_chains_fit, BlockStep, ChainSet, Momentum, StepInfo};

use serde::{Deserialize, Serialize};

use crate::error::{positive, Result, SagdError};
use crate::real::Real;

/// A discretisation of underdamped Langevin dynamics.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Scheme {
    /// The paper's explicit Euler scheme (eqs. 3-4). Needs γδ < 1.
    #[default]
    Euler,
    /// Friction-and-noise half steps around a velocity Verlet step.
    Obabo,
    /// Leimkuhler and Matthews' scheme: exact positions on Gaussian targets.
    Baoab,
    /// Exact Ornstein-Uhlenbeck half flows around a full gradient kick (Sanz-Serna and Zygalakis).
    Ubu,
}

impl Scheme {
    /// All schemes, in table order.
    pub const ALL: [Scheme; 4] = [Scheme::Euler, Scheme::Obabo, Scheme::Baoab, Scheme::Ubu];

    /// The scheme's name as the command line spells it.
    pub fn name(self) -> &'static str {
        match self {
            Scheme::Euler => "euler",
            Scheme::Obabo => "obabo",
            Scheme::Baoab => "baoab",
            Scheme::Ubu => "ubu",
        }
    }
}

impl std::fmt::Display for Scheme {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Scheme {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        Scheme::ALL
            .into_iter()
            .find(|k| k.name() == s.to_ascii_lowercase())
            .ok_or_else(|| format!("unknown scheme `{s}`: use one of euler, obabo, baoab, ubu"))
    }
}

/// One operation of a splitting step, with its coefficients: the program a [`Kernel`] runs
/// ([`Kernel::ops`]), which every engine reads: the CPU's blocks of chains, and the GPU's through
/// [`Kernel::instructions`]. Operations may be added, so an engine names the ones it runs and
/// refuses the rest.
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Op<T> {
    /// ξ += h ρ.
    Drift(T),
    /// ρ = decay·ρ + grad·∇log π(ξ) + noise·η, η ~ N(0, I).
    Kick {
        /// The momentum's factor.
        decay: T,
        /// The gradient's factor.
        grad: T,
        /// The draw's factor (0: no draw).
        noise: T,
    },
    /// The exact flow of dξ = ρ dt, dρ = −γρ dt + √(2γ) dB over a time h:
    /// ξ += drift·ρ + x1·ζ1 + x2·ζ2, ρ = decay·ρ + v1·ζ1.
    Ou {
        /// The momentum's factor e^(−γh).
        decay: T,
        /// The momentum's factor in the position's move.
        drift: T,
        /// The first draw's factor in the momentum.
        v1: T,
        /// The first draw's factor in the position.
        x1: T,
        /// The second draw's factor in the position.
        x2: T,
    },
    /// Evaluates log π and its gradient at the current position.
    Gradient,
    /// ρ ~ N(0, I).
    Refresh,
}

impl<T: Real> Op<T> {
    /// Normal draws per coordinate: a noisy kick and a refresh one, an Ornstein-Uhlenbeck flow two.
    fn normals(&self) -> usize {
        match self {
            Op::Kick { noise, .. } if *noise != T::zero() => 1,
            Op::Refresh => 1,
            Op::Ou { .. } => 2,
            _ => 0,
        }
    }
}

impl Op<f64> {
    fn cast<T: Real>(self) -> Op<T> {
        match self {
            Op::Drift(h) => Op::Drift(T::of(h)),
            Op::Kick { decay, grad, noise } => Op::Kick {
                decay: T::of(decay),
                grad: T::of(grad),
                noise: T::of(noise),
            },
            Op::Ou {
                decay,
                drift,
                v1,
                x1,
                x2,
            } => Op::Ou {
                decay: T::of(decay),
                drift: T::of(drift),
                v1: T::of(v1),
                x1: T::of(x1),
                x2: T::of(x2),
            },
            Op::Gradient => Op::Gradient,
            Op::Refresh => Op::Refresh,
        }
    }
}

/// One operation of a transition as an engine carries it out on two states, the transition's
/// start (ξ, ∇log π(ξ), log π(ξ)) and its new state (ξ′, ∇′, log π′): the operation, the block
/// of normal draws it reads, and which state it reads. [`Kernel::instructions`] works them out
/// for any engine (the GPU's chains), so that it only carries out the operations and reads the
/// same draw for the same operation as the CPU's blocks, whose fused loops keep this account
/// themselves (a test holds the two to the same bits).
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Instruction<T> {
    /// The operation and its coefficients.
    pub op: Op<T>,
    /// The first block of normal draws it reads (one value per coordinate of every chain),
    /// counted from the transition's first: a noisy kick and a refresh read one block, an
    /// Ornstein-Uhlenbeck flow this block and the next; `None`: it draws none.
    pub draw: Option<usize>,
    /// Whether the positions move here for the first time in the transition, so that ξ′ starts
    /// as ξ: a drift writes ξ′ = ξ + hρ, a flow or an evaluation copies ξ into ξ′ first.
    pub first_move: bool,
    /// For a kick: whether it reads the gradient at ξ′ (evaluated earlier in the transition),
    /// else the start's.
    pub new_gradient: bool,
}

/// The O step over time h: exact friction and noise on ρ.
fn friction(gamma: f64, h: f64) -> Op<f64> {
    let decay = (-gamma * h).exp();
    Op::Kick {
        decay,
        grad: 0.0,
        noise: (-(-2.0 * gamma * h).exp_m1()).sqrt(),
    }
}

fn kick(h: f64) -> Op<f64> {
    Op::Kick {
        decay: 1.0,
        grad: h,
        noise: 0.0,
    }
}

/// The U step over time h (see [`Op::Ou`]). The position variance is summed as a series when γh is
/// small, where the closed form cancels.
fn ou(gamma: f64, h: f64) -> Op<f64> {
    let a = gamma * h;
    let one_minus = -(-a).exp_m1(); // 1 − e^{−a}
    let var_v = -(-2.0 * a).exp_m1(); // 1 − e^{−2a}
    let cov = one_minus * one_minus / gamma;
    // f(a) = a − 2(1 − e^{−a}) + (1 − e^{−2a})/2 = Σ_{n≥3} (−1)^{n+1} (2^{n−1} − 2) aⁿ / n!
    let f = if a < 0.5 {
        let mut sum = 0.0;
        let mut term = a * a / 2.0; // a^n / n! at n = 2
        for n in 3..40 {
            term *= a / n as f64;
            let sign = if n % 2 == 1 { 1.0 } else { -1.0 };
            sum += sign * (2f64.powi(n - 1) - 2.0) * term;
        }
        sum
    } else {
        a - 2.0 * one_minus + var_v / 2.0
    };
    let var_x = 2.0 * f / (gamma * gamma * gamma);
    let v1 = var_v.sqrt();
    let x1 = cov / v1;
    let x2 = (var_x - x1 * x1).max(0.0).sqrt();
    Op::Ou {
        decay: (-a).exp(),
        drift: one_minus / gamma,
        v1,
        x1,
        x2,
    }
}

/// Settings of the Langevin sampler.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct LangevinSettings {
    /// The discretisation.
    pub scheme: Scheme,
    /// The friction γ > 0.
    pub gamma: f64,
}

impl Default for LangevinSettings {
    fn default() -> Self {
        LangevinSettings {
            scheme: Scheme::Euler,
            gamma: 1.0,
        }
    }
}

impl LangevinSettings {
    /// Checks γ and a step size δ, with messages that say what to change (the check of
    /// [`LangevinStep::new`]).
    pub fn validate(&self, delta: f64) -> Result<()> {
        LangevinStep::new(*self, delta).map(|_| ())
    }

    /// The kernel of one Langevin step of size `delta`, once checked ([`LangevinStep::new`]).
    pub fn kernel<T: Real>(&self, delta: f64) -> Result<Kernel<T>> {
        Ok(LangevinStep::new(*self, delta)?.kernel())
    }

    /// These settings at the step δ, checked once: what a sampler keeps.
    pub fn step(&self, delta: f64) -> Result<LangevinStep> {
        LangevinStep::new(*self, delta)
    }
}

/// One Langevin step's settings, checked: the scheme, the friction γ and the step δ. Made only by
/// [`LangevinStep::new`] (or read from a file through it), so every value is one a kernel can be
/// made of, and the samplers that hold one check nothing again. Written to files as `{scheme,
/// gamma, delta}`.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
#[serde(into = "UncheckedStep")]
pub struct LangevinStep {
    langevin: LangevinSettings,
    delta: f64,
}

/// [`LangevinStep`]'s fields as a file holds them, before the check.
#[derive(Clone, Copy, Serialize, Deserialize)]
struct UncheckedStep {
    #[serde(default)]
    scheme: Scheme,
    gamma: f64,
    delta: f64,
}

impl<'de> Deserialize<'de> for LangevinStep {
    /// Read through [`LangevinStep::new`]: a file's invalid settings are refused as it is read.
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        let u = UncheckedStep::deserialize(d)?;
        let langevin = LangevinSettings {
            scheme: u.scheme,
            gamma: u.gamma,
        };
        LangevinStep::new(langevin, u.delta).map_err(serde::de::Error::custom)
    }
}

impl From<LangevinStep> for UncheckedStep {
    fn from(s: LangevinStep) -> Self {
        UncheckedStep {
            scheme: s.langevin.scheme,
            gamma: s.langevin.gamma,
            delta: s.delta,
        }
    }
}

impl LangevinStep {
    /// The scheme and friction of `langevin` at the step `delta`, refused by name unless γ and δ
    /// are finite and > 0 and, for the paper's Euler scheme, γδ < 1.
    pub fn new(langevin: LangevinSettings, delta: f64) -> Result<Self> {
        positive(
            "gamma",
            langevin.gamma,
            "the friction must be a finite number > 0 (the paper uses 1 or 2)",
        )?;
        positive(
            "delta",
            delta,
            "the Langevin step size must be a finite number > 0",
        )?;
        if langevin.scheme == Scheme::Euler && langevin.gamma * delta >= 1.0 {
            return Err(SagdError::InvalidSetting {
                name: "delta",
                value: delta.to_string(),
                fix: format!(
                    "the Euler scheme needs gamma*delta < 1 (here gamma = {}): use delta < {}, or another scheme (baoab, ubu)",
                    langevin.gamma,
                    1.0 / langevin.gamma
                ),
            });
        }
        Ok(LangevinStep { langevin, delta })
    }

    /// The same scheme and friction at another step (a schedule's δ_t), checked.
    pub fn with_delta(self, delta: f64) -> Result<Self> {
        LangevinStep::new(self.langevin, delta)
    }

    /// The scheme and the friction.
    pub fn langevin(&self) -> LangevinSettings {
        self.langevin
    }

    /// The discretisation.
    pub fn scheme(&self) -> Scheme {
        self.langevin.scheme
    }

    /// The friction γ.
    pub fn gamma(&self) -> f64 {
        self.langevin.gamma
    }

    /// The step δ.
    pub fn delta(&self) -> f64 {
        self.delta
    }

    /// The kernel of one step: the scheme's program at γ and δ.
    pub fn kernel<T: Real>(&self) -> Kernel<T> {
        let (g, h) = (self.langevin.gamma, self.delta);
        let ops = match self.langevin.scheme {
            Scheme::Euler => vec![
                Op::Drift(h),
                Op::Kick {
                    decay: 1.0 - g * h,
                    grad: h,
                    noise: (2.0 * g * h).sqrt(),
                },
                Op::Gradient,
            ],
            Scheme::Obabo => vec![
                friction(g, h / 2.0),
                kick(h / 2.0),
                Op::Drift(h),
                Op::Gradient,
                kick(h / 2.0),
                friction(g, h / 2.0),
            ],
            Scheme::Baoab => vec![
                kick(h / 2.0),
                Op::Drift(h / 2.0),
                friction(g, h),
                Op::Drift(h / 2.0),
                Op::Gradient,
                kick(h / 2.0),
            ],
            Scheme::Ubu => vec![ou(g, h / 2.0), Op::Gradient, kick(h), ou(g, h / 2.0)],
        };
        Kernel {
            ops: ops.into_iter().map(Op::cast).collect(),
            metropolis: false,
        }
    }
}

/// One transition of the chains: a program of splitting operations, and whether it ends with a
/// Metropolis test (HMC) or is always kept (Langevin).
#[derive(Clone, Debug, PartialEq)]
pub struct Kernel<T> {
    pub(crate) ops: Vec<Op<T>>,
    pub(crate) metropolis: bool,
}

impl<T: Real> Kernel<T> {
    /// Whether a transition ends with the target evaluated at its final position (no move after
    /// the last gradient, no Metropolis test that could put the chain back): then what the target
    /// computed alongside its last evaluation (the fused θ-gradient) belongs to the new state.
    pub fn ends_at_gradient(&self) -> bool {
        !self.metropolis
            && match self.ops.iter().rposition(|op| matches!(op, Op::Gradient)) {
                Some(i) => self.ops[i..]
                    .iter()
                    .all(|op| !matches!(op, Op::Drift(_) | Op::Ou { .. })),
                None => false,
            }
    }

    /// Whether a transition ends with a Metropolis test (HMC).
    pub fn metropolis(&self) -> bool {
        self.metropolis
    }

    /// The program of one transition, typed ([`Kernel::table`] gives it as plain numbers).
    pub fn ops(&self) -> &[Op<T>] {
        &self.ops
    }

    /// The program of one transition as an engine carries it out on the transition's start and
    /// its new state ([`Instruction`]): the GPU's chains run it, and it gives the bits of the
    /// CPU's blocks.
    /// What no instruction writes carries over from the start: the positions when none has
    /// `first_move`, the gradient and log density when none is an [`Op::Gradient`]. The draws
    /// number [`Kernel::normals_per_step`] blocks in all.
    ///
    /// ```
    /// use sagd::langevin::{LangevinSettings, Op, Scheme};
    ///
    /// // The paper's Euler step: ξ′ = ξ + δρ, a kick with the start's gradient and one draw, and
    /// // the target evaluated at ξ′ for the next transition.
    /// let euler = LangevinSettings { scheme: Scheme::Euler, gamma: 1.0 };
    /// let kernel = euler.kernel::<f64>(0.1).unwrap();
    /// let steps: Vec<_> = kernel.instructions().collect();
    /// assert!(matches!(steps[0].op, Op::Drift(_)) && steps[0].first_move);
    /// assert!(matches!(steps[1].op, Op::Kick { .. }));
    /// assert_eq!((steps[1].draw, steps[1].new_gradient), (Some(0), false));
    /// assert_eq!(steps[2].op, Op::Gradient);
    /// ```
    pub fn instructions(&self) -> impl Iterator<Item = Instruction<T>> + '_ {
        let (mut moved, mut fresh, mut next) = (false, false, 0);
        self.ops.iter().map(move |&op| {
            let width = op.normals();
            let first_move = !moved && !matches!(op, Op::Kick { .. } | Op::Refresh);
            let step = Instruction {
                op,
                draw: (width > 0).then_some(next),
                first_move,
                new_gradient: fresh && matches!(op, Op::Kick { .. }),
            };
            moved |= first_move;
            fresh |= matches!(op, Op::Gradient);
            next += width;
            step
        })
    }

    /// The coefficient table of the kernel as plain numbers (for tests, documentation and other
    /// engines that run the same program): each entry is an operation name and its coefficients —
    /// `drift` (h: ξ += h ρ), `kick` (decay, grad, noise: ρ = decay·ρ + grad·∇log π(ξ) + noise·η),
    /// `ou` (decay, drift, v1, x1, x2: ξ += drift·ρ + x1·ζ1 + x2·ζ2, ρ = decay·ρ + v1·ζ1),
    /// `gradient` (evaluate log π and its gradient), `refresh` (ρ ~ N(0, I)).
    pub fn table(&self) -> Vec<(&'static str, Vec<f64>)> {
        self.ops
            .iter()
            .map(|op| match *op {
                Op::Drift(h) => ("drift", vec![h.f64()]),
                Op::Kick { decay, grad, noise } => {
                    ("kick", vec![decay.f64(), grad.f64(), noise.f64()])
                }
                Op::Ou {
                    decay,
                    drift,
                    v1,
                    x1,
                    x2,
                } => (
                    "ou",
                    vec![decay.f64(), drift.f64(), v1.f64(), x1.f64(), x2.f64()],
                ),
                Op::Gradient => ("gradient", vec![]),
                Op::Refresh => ("refresh", vec![]),
            })
            .collect()
    }

    /// Normal draws per coordinate of the operation that draws most (the streams' buffer).
    pub(crate) fn noise_per_coord(&self) -> usize {
        self.ops.iter().map(Op::normals).max().unwrap_or(0)
    }
}
