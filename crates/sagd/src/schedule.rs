//! Schedules: a value as a function of the 1-based update count t.
//!
//! | preset | δ_t | K_t | α_t |
//! |---|---|---|---|
//! | [`Schedules::theorem3`] | C1/√t | ⌈C2·t⌉ | α0/√t |
//! | [`Schedules::theorem4`] | C1·t^(−c) | ⌈C2·t^(2c)⌉ | α0/t |
//! | [`Schedules::paper_e1`] | 0.1/√t | t + 20 | 0.2 |
//!
//! For example `paper_e1` gives, at t = 1, 4, 100: δ = 0.1, 0.05, 0.01 and K = 21, 24, 120.

use std::fmt;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::error::{Result, SagdError};

/// A real-valued schedule (step sizes, learning rates).
#[derive(Clone, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum Schedule {
    /// The same value at every t.
    Constant {
        /// The value.
        value: f64,
    },
    /// scale · t^(−exponent): 1/√t decay at exponent 0.5, 1/t at 1.
    Power {
        /// The value at t = 1.
        scale: f64,
        /// The decay exponent (≥ 0).
        exponent: f64,
    },
    /// Any function of t (not saved in checkpoints or result files).
    #[serde(skip)]
    Custom(Arc<dyn Fn(usize) -> f64 + Send + Sync>),
}

impl Schedule {
    /// A constant schedule.
    pub fn constant(value: f64) -> Self {
        Schedule::Constant { value }
    }

    /// scale · t^(−exponent).
    pub fn power(scale: f64, exponent: f64) -> Self {
        Schedule::Power { scale, exponent }
    }

    /// A schedule from a closure.
    pub fn custom(f: impl Fn(usize) -> f64 + Send + Sync + 'static) -> Self {
        Schedule::Custom(Arc::new(f))
    }

    /// The value at the 1-based step `t` (t = 0 is read as 1).
    pub fn at(&self, t: usize) -> f64 {
        let t = t.max(1) as f64;
        match self {
            Schedule::Constant { value } => *value,
            Schedule::Power { scale, exponent } => scale * t.powf(-exponent),
            Schedule::Custom(f) => f(t as usize),
        }
    }

    /// Checks the parameters: a finite positive scale and a finite non-negative exponent.
    pub fn validate(&self, name: &'static str) -> Result<()> {
        let bad = |value: String, fix: &str| {
            Err(SagdError::InvalidSetting {
                name,
                value,
                fix: fix.into(),
            })
        };
        match self {
            Schedule::Constant { value } if !(value.is_finite() && *value > 0.0) => {
                bad(value.to_string(), "use a finite value > 0")
            }
            Schedule::Power { scale, .. } if !(scale.is_finite() && *scale > 0.0) => {
                bad(format!("scale {scale}"), "use a finite scale > 0")
            }
            Schedule::Power { exponent, .. } if !(exponent.is_finite() && *exponent >= 0.0) => {
                bad(format!("exponent {exponent}"), "use a finite exponent >= 0")
            }
            _ => Ok(()),
        }
    }
}

impl fmt::Debug for Schedule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Schedule::Constant { value } => write!(f, "{value}"),
            Schedule::Power { scale, exponent } => write!(f, "{scale}·t^-{exponent}"),
            Schedule::Custom(_) => write!(f, "custom"),
        }
    }
}

impl PartialEq for Schedule {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (Schedule::Constant { value: a }, Schedule::Constant { value: b }) => a == b,
            (
                Schedule::Power {
                    scale: a,
                    exponent: b,
                },
                Schedule::Power {
                    scale: c,
                    exponent: d,
                },
            ) => a == c && b == d,
            (Schedule::Custom(a), Schedule::Custom(b)) => Arc::ptr_eq(a, b),
            _ => false,
        }
    }
}

/// A chain-length schedule K_t (at least 1).
#[derive(Clone, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum LengthSchedule {
    /// K at every t.
    Constant {
        /// The value.
        value: usize,
    },
    /// ⌈scale · t^exponent⌉ + offset: Theorem 3's C2·t at exponent 1, the paper's t + 20 at scale 1,
    /// exponent 1, offset 20.
    Power {
        /// The multiplier.
        scale: f64,
        /// The growth exponent (≥ 0).
        exponent: f64,
        /// Added after rounding up.
        offset: usize,
    },
    /// Any function of t (not saved in checkpoints or result files).
    #[serde(skip)]
    Custom(Arc<dyn Fn(usize) -> usize + Send + Sync>),
}

impl LengthSchedule {
    /// A constant length.
    pub fn constant(value: usize) -> Self {
        LengthSchedule::Constant { value }
    }

    /// ⌈scale · t^exponent⌉ + offset.
    pub fn power(scale: f64, exponent: f64, offset: usize) -> Self {
        LengthSchedule::Power {
            scale,
            exponent,
            offset,
        }
    }

    /// A schedule from a closure.
    pub fn custom(f: impl Fn(usize) -> usize + Send + Sync + 'static) -> Self {
        LengthSchedule::Custom(Arc::new(f))
    }

    /// The value at the 1-based step `t`, at least 1.
    pub fn at(&self, t: usize) -> usize {
        let t = t.max(1);
        let k = match self {
            LengthSchedule::Constant { value } => *value,
            LengthSchedule::Power {
                scale,
                exponent,
                offset,
            } => (scale * (t as f64).powf(*exponent)).ceil() as usize + offset,
            LengthSchedule::Custom(f) => f(t),
        };
        k.max(1)
    }

    /// Checks the parameters.
    pub fn validate(&self, name: &'static str) -> Result<()> {
        let bad = |value: String, fix: &str| {
            Err(SagdError::InvalidSetting {
                name,
                value,
                fix: fix.into(),
            })
        };
        match self {
            LengthSchedule::Constant { value: 0 } => {
                bad("0".into(), "use a chain length of at least 1")
            }
            LengthSchedule::Power { scale, .. } if !(scale.is_finite() && *scale >= 0.0) => {
                bad(format!("scale {scale}"), "use a finite scale >= 0")
            }
            LengthSchedule::Power {
                scale, offset: 0, ..
            } if *scale == 0.0 => bad(
                "scale 0 with no offset".into(),
                "that asks for K_t = 0 Langevin steps at every t: use a scale > 0, or an offset of at least 1",
            ),
            LengthSchedule::Power { exponent, .. }
                if !(exponent.is_finite() && *exponent >= 0.0) =>
            {
                bad(format!("exponent {exponent}"), "use a finite exponent >= 0")
            }
            _ => Ok(()),
        }
    }
}

impl fmt::Debug for LengthSchedule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LengthSchedule::Constant { value } => write!(f, "{value}"),
            LengthSchedule::Power {
                scale,
                exponent,
                offset,
            } => write!(f, "ceil({scale}·t^{exponent})+{offset}"),
            LengthSchedule::Custom(_) => write!(f, "custom"),
        }
    }
}

impl PartialEq for LengthSchedule {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (LengthSchedule::Constant { value: a }, LengthSchedule::Constant { value: b }) => {
                a == b
            }
            (
                LengthSchedule::Power {
                    scale: a,
                    exponent: b,
                    offset: c,
                },
                LengthSchedule::Power {
                    scale: d,
                    exponent: e,
                    offset: f,
                },
            ) => a == d && b == e && c == f,
            (LengthSchedule::Custom(a), LengthSchedule::Custom(b)) => Arc::ptr_eq(a, b),
            _ => false,
        }
    }
}

/// The three schedules of Algorithm 1.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Schedules {
    /// The Langevin step δ_t.
    pub step_size: Schedule,
    /// The chain length K_t (Langevin steps per update).
    pub chain_length: LengthSchedule,
    /// The learning rate α_t.
    pub learning_rate: Schedule,
}

impl Schedules {
    /// Theorem 3 (convex F): δ_t = C1/√t, K_t = ⌈C2·t⌉, α_t = α0/√t; E F(θ̂) − F* = O(1/√T).
    pub fn theorem3(c1: f64, c2: f64, alpha0: f64) -> Self {
        Schedules {
            step_size: Schedule::power(c1, 0.5),
            chain_length: LengthSchedule::power(c2, 1.0, 0),
            learning_rate: Schedule::power(alpha0, 0.5),
        }
    }

    /// Theorem 4 (nonconvex smooth F): δ_t = C1·t^(−c), K_t = ⌈C2·t^(2c)⌉, α_t = α0/t with
    /// α0 < 1/(2G), G the Lipschitz constant of ∇F; liminf E‖∇F(θ_t)‖² = 0.
    pub fn theorem4(c1: f64, c2: f64, c: f64, alpha0: f64) -> Self {
        Schedules {
            step_size: Schedule::power(c1, c),
            chain_length: LengthSchedule::power(c2, 2.0 * c, 0),
            learning_rate: Schedule::power(alpha0, 1.0),
        }
    }

    /// The paper's EM experiment (E1): δ_t = 0.1/√t, K_t = t + 20, α = 0.2.
    pub fn paper_e1() -> Self {
        Schedules {
            step_size: Schedule::power(0.1, 0.5),
            chain_length: LengthSchedule::power(1.0, 1.0, 20),
            learning_rate: Schedule::constant(0.2),
        }
    }

    /// Constant δ, K and α.
    pub fn constant(delta: f64, k: usize, alpha: f64) -> Self {
        Schedules {
            step_size: Schedule::constant(delta),
            chain_length: LengthSchedule::constant(k),
            learning_rate: Schedule::constant(alpha),
        }
    }

    /// Checks all three.
    pub fn validate(&self) -> Result<()> {
        self.step_size.validate("step_size (delta_t)")?;
        self.chain_length.validate("chain_length (K_t)")?;
        self.learning_rate.validate("learning_rate (alpha_t)")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn presets_match_the_paper() {
        let e1 = Schedules::paper_e1();
        assert_eq!(e1.step_size.at(1), 0.1);
        assert!((e1.step_size.at(4) - 0.05).abs() < 1e-15);
        assert_eq!(e1.chain_length.at(1), 21);
        assert_eq!(e1.chain_length.at(100), 120);
        assert_eq!(e1.learning_rate.at(50), 0.2);
        let t3 = Schedules::theorem3(0.2, 2.0, 0.5);
        assert!((t3.step_size.at(16) - 0.05).abs() < 1e-15);
        assert_eq!(t3.chain_length.at(16), 32);
        assert!((t3.learning_rate.at(4) - 0.25).abs() < 1e-15);
        let t4 = Schedules::theorem4(0.1, 3.0, 0.25, 0.4);
        assert!((t4.step_size.at(16) - 0.05).abs() < 1e-15);
        assert_eq!(t4.chain_length.at(16), 12);
        assert!((t4.learning_rate.at(8) - 0.05).abs() < 1e-15);
        let c = LengthSchedule::custom(|t| 2 * t);
        assert_eq!(c.at(5), 10);
    }

    #[test]
    fn invalid_schedules_are_rejected() {
        assert!(Schedule::constant(0.0).validate("x").is_err());
        assert!(Schedule::power(1.0, -1.0).validate("x").is_err());
        assert!(Schedule::power(f64::NAN, 1.0).validate("x").is_err());
        assert!(LengthSchedule::constant(0).validate("k").is_err());
        // K_t = ceil(0·t) = 0 everywhere (Python's c2 = 0 ran with one step, silently).
        assert!(LengthSchedule::power(0.0, 1.0, 0).validate("k").is_err());
        assert!(LengthSchedule::power(0.0, 1.0, 20).validate("k").is_ok());
        let msg = Schedule::constant(-1.0)
            .validate("learning_rate")
            .unwrap_err()
            .to_string();
        assert!(
            msg.contains("learning_rate") && msg.contains("> 0"),
            "{msg}"
        );
    }
}
