//! The floating-point types the sampler runs in (`f32` and `f64`).

use std::fmt::{Debug, Display};
use std::iter::Sum;
use std::ops::{AddAssign, DivAssign, MulAssign, SubAssign};

use serde::de::DeserializeOwned;
use serde::Serialize;

/// A floating-point type the sampler and solver can run in.
///
/// Implemented for `f32` (the neural engine's type) and `f64` (the EM example's). Schedules, step
/// sizes and diagnostics are always `f64`; positions, momenta and gradients are `T`.
pub trait Real:
    num_traits::Float
    + Default
    + Debug
    + Display
    + Send
    + Sync
    + Sum
    + AddAssign
    + SubAssign
    + MulAssign
    + DivAssign
    + Serialize
    + DeserializeOwned
    + 'static
{
    /// Converts from `f64` (rounding for `f32`).
    fn of(x: f64) -> Self;
    /// Converts to `f64` (exactly).
    fn f64(self) -> f64;
}

impl Real for f64 {
    #[inline(always)]
    fn of(x: f64) -> Self {
        x
    }
    #[inline(always)]
    fn f64(self) -> f64 {
        self
    }
}

impl Real for f32 {
    #[inline(always)]
    fn of(x: f64) -> Self {
        x as f32
    }
    #[inline(always)]
    fn f64(self) -> f64 {
        self as f64
    }
}

/// Σ vᵢ² in f64, with eight partial sums so that the loop vectorises (a fixed order: the result does
/// not depend on the machine). Non-finite entries make the result non-finite.
#[inline(always)]
#[doc(hidden)]
pub fn sum_sq<T: Real>(v: &[T]) -> f64 {
    sum_map(v, |x| x * x)
}

/// Σ f(vᵢ) in f64 with eight partial sums (see [`sum_sq`]).
#[inline(always)]
#[doc(hidden)]
pub fn sum_map<T: Real>(v: &[T], f: impl Fn(f64) -> f64) -> f64 {
    let mut acc = [0.0f64; 8];
    let chunks = v.chunks_exact(8);
    let rest = chunks.remainder();
    for c in chunks {
        for l in 0..8 {
            acc[l] += f(c[l].f64());
        }
    }
    for (l, x) in rest.iter().enumerate() {
        acc[l] += f(x.f64());
    }
    ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]))
}
