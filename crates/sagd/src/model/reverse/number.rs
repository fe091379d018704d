//! [`Rev`] as a number: the operators, `num-traits`' and `num-dual`'s traits (what
//! [`Scalar`] asks of a model's numbers), each operation recording its partial derivatives.

use std::fmt;
use std::iter::{Product, Sum};
use std::ops::{
    Add, AddAssign, Div, DivAssign, Mul, MulAssign, Neg, Rem, RemAssign, Sub, SubAssign,
};

use num_dual::{DualNum, DualStruct, Mappable};
use num_traits::{FromPrimitive, Inv, Num, One, ParseFloatError, Signed, Zero};
use statrs::function::gamma::{digamma, ln_gamma};

use super::Rev;
use crate::model::Scalar;

macro_rules! arithmetic {
    ($Op:ident, $op:ident, $OpAssign:ident, $op_assign:ident, |$a:ident, $b:ident| $value:expr, $da:expr, $db:expr) => {
        impl $Op for Rev {
            type Output = Rev;
            #[inline(always)]
            fn $op(self, other: Rev) -> Rev {
                let ($a, $b) = (self.value, other.value);
                self.binary(other, $value, $da, $db)
            }
        }
        impl $Op<&Rev> for Rev {
            type Output = Rev;
            #[inline(always)]
            fn $op(self, other: &Rev) -> Rev {
                self.$op(*other)
            }
        }
        impl $Op<f64> for Rev {
            type Output = Rev;
            #[inline(always)]
            fn $op(self, other: f64) -> Rev {
                self.$op(Rev::constant(other))
            }
        }
        impl $OpAssign for Rev {
            #[inline(always)]
            fn $op_assign(&mut self, other: Rev) {
                *self = self.$op(other);
            }
        }
        impl $OpAssign<f64> for Rev {
            #[inline(always)]
            fn $op_assign(&mut self, other: f64) {
                *self = self.$op(other);
            }
        }
    };
}

arithmetic!(Add, add, AddAssign, add_assign, |a, b| a + b, 1.0, 1.0);
arithmetic!(Sub, sub, SubAssign, sub_assign, |a, b| a - b, 1.0, -1.0);
arithmetic!(Mul, mul, MulAssign, mul_assign, |a, b| a * b, b, a);
arithmetic!(
    Div,
    div,
    DivAssign,
    div_assign,
    |a, b| a / b,
    1.0 / b,
    -a / (b * b)
);
arithmetic!(
    Rem,
    rem,
    RemAssign,
    rem_assign,
    |a, b| a % b,
    1.0,
    -(a / b).trunc()
);

impl Neg for Rev {
    type Output = Rev;
    #[inline(always)]
    fn neg(self) -> Rev {
        self.unary(-self.value, -1.0)
    }
}

impl PartialEq for Rev {
    fn eq(&self, other: &Rev) -> bool {
        self.value == other.value
    }
}

impl PartialEq<f64> for Rev {
    fn eq(&self, other: &f64) -> bool {
        self.value == *other
    }
}

/// Comparisons look at values only, so a model takes the same branches on every number type.
impl PartialOrd for Rev {
    fn partial_cmp(&self, other: &Rev) -> Option<std::cmp::Ordering> {
        self.value.partial_cmp(&other.value)
    }
}

impl PartialOrd<f64> for Rev {
    fn partial_cmp(&self, other: &f64) -> Option<std::cmp::Ordering> {
        self.value.partial_cmp(other)
    }
}

impl fmt::Display for Rev {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.value, f)
    }
}

impl From<f64> for Rev {
    fn from(value: f64) -> Rev {
        Rev::constant(value)
    }
}

impl Zero for Rev {
    fn zero() -> Rev {
        Rev::constant(0.0)
    }
    fn is_zero(&self) -> bool {
        self.value == 0.0
    }
}

impl One for Rev {
    fn one() -> Rev {
        Rev::constant(1.0)
    }
}

impl Num for Rev {
    type FromStrRadixErr = ParseFloatError;
    fn from_str_radix(s: &str, radix: u32) -> Result<Rev, ParseFloatError> {
        f64::from_str_radix(s, radix).map(Rev::constant)
    }
}

impl Signed for Rev {
    fn abs(&self) -> Rev {
        self.through(|x| x.abs())
    }
    fn abs_sub(&self, other: &Rev) -> Rev {
        if self.value > other.value {
            *self - *other
        } else {
            Rev::zero()
        }
    }
    fn signum(&self) -> Rev {
        Rev::constant(self.value.signum())
    }
    fn is_positive(&self) -> bool {
        self.value.is_sign_positive()
    }
    fn is_negative(&self) -> bool {
        self.value.is_sign_negative()
    }
}

impl Inv for Rev {
    type Output = Rev;
    fn inv(self) -> Rev {
        self.recip()
    }
}

impl Sum for Rev {
    fn sum<I: Iterator<Item = Rev>>(iter: I) -> Rev {
        iter.fold(Rev::zero(), |s, x| s + x)
    }
}

impl Product for Rev {
    fn product<I: Iterator<Item = Rev>>(iter: I) -> Rev {
        iter.fold(Rev::one(), |s, x| s * x)
    }
}

impl FromPrimitive for Rev {
    fn from_i64(n: i64) -> Option<Rev> {
        Some(Rev::constant(n as f64))
    }
    fn from_u64(n: u64) -> Option<Rev> {
        Some(Rev::constant(n as f64))
    }
    fn from_f64(n: f64) -> Option<Rev> {
        Some(Rev::constant(n))
    }
}

impl DualStruct for Rev {
    type Real = f64;
    type Inner = f64;
    fn re(&self) -> f64 {
        self.value
    }
    fn from_inner(inner: &f64) -> Rev {
        Rev::constant(*inner)
    }
}

impl Mappable<Rev> for Rev {
    type Output<O> = O;
    fn map_dual<G: Fn(Rev) -> O, O>(self, g: G) -> O {
        g(self)
    }
}

/// Elementary functions whose value and derivative `num-dual` computes.
macro_rules! elementary {
    ($($f:ident),*) => {
        $(
            fn $f(&self) -> Rev {
                self.through(|x| x.$f())
            }
        )*
    };
}

impl DualNum for Rev {
    type Primitive = f64;
    const NDERIV: usize = 1;
    type InnerDual = f64;

    elementary!(
        sqrt, cbrt, exp2, exp_m1, log2, log10, ln_1p, sin, cos, tan, asin, acos, atan, sinh, cosh,
        tanh, asinh, acosh, atanh, sph_j0, sph_j1, sph_j2
    );

    fn from_re(re: f64) -> Rev {
        Rev::constant(re)
    }
    fn scale(self, factor: &f64) -> Rev {
        self * *factor
    }
    fn recip(&self) -> Rev {
        let r = 1.0 / self.value;
        self.unary(r, -r * r)
    }
    fn powi(&self, n: i32) -> Rev {
        self.through(|x| x.powi(n))
    }
    fn powf(&self, n: f64) -> Rev {
        self.through(|x| x.powf(n))
    }
    fn exp(&self) -> Rev {
        let e = self.value.exp();
        self.unary(e, e)
    }
    fn ln(&self) -> Rev {
        self.unary(self.value.ln(), 1.0 / self.value)
    }
    fn log(&self, base: f64) -> Rev {
        self.through(|x| x.log(base))
    }
    fn sin_cos(&self) -> (Rev, Rev) {
        (self.sin(), self.cos())
    }
    fn atan2(&self, other: Rev) -> Rev {
        let (y, x) = (self.value, other.value);
        let r2 = x * x + y * y;
        self.binary(other, y.atan2(x), x / r2, -y / r2)
    }
}

impl Scalar for Rev {
    fn ln_gamma(self) -> Rev {
        self.unary(ln_gamma(self.value), digamma(self.value))
    }
    fn value(self) -> f64 {
        self.value
    }
}
