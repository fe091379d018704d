//! Element-wise functions written so that a loop over them vectorises (no branches, no calls into
//! libm): inside a [`crate::vectorized!`] loop they run 8 or 16 lanes at a time, where `f64::ln`
//! and `f64::exp` run one. Each rounds the same way on every dispatch path (fused multiply-adds
//! only where asked, which round once everywhere), so results keep their bits across CPUs.

/// Σ c_i x^(n−1−i) by Horner's rule with fused multiply-adds (coefficients from the highest power).
/// `mul_add` rounds once on every machine (in hardware or in libm), so all dispatch paths agree.
#[inline(always)]
pub(crate) fn horner(x: f64, c: &[f64]) -> f64 {
    let mut acc = c[0];
    for &ci in &c[1..] {
        acc = acc.mul_add(x, ci);
    }
    acc
}

/// 1.5 · 2⁵²: added to a float of magnitude below 2⁵¹, it rounds it to an integer held in the low
/// bits of the sum (exact, and vectorisable without AVX-512's float-to-integer conversion).
const ROUND: f64 = 6_755_399_441_055_744.0;

/// Natural logarithm of a normal positive `x`, accurate to a few ulp.
#[inline(always)]
pub(crate) fn ln(x: f64) -> f64 {
    const SQRT2: f64 = std::f64::consts::SQRT_2;
    let bits = x.to_bits();
    // The exponent field as a float by the 2^52 trick (exact, and vectorizable without AVX-512's
    // integer-to-float conversion): the same value as `as f64`.
    let field = f64::from_bits(0x4330_0000_0000_0000 | ((bits >> 52) & 0x7FF));
    let mut e = (field - 4_503_599_627_370_496.0) - 1023.0;
    let mut m = f64::from_bits((bits & 0x000F_FFFF_FFFF_FFFF) | 0x3FF0_0000_0000_0000);
    if m > SQRT2 {
        m *= 0.5;
        e += 1.0;
    }
    let s = (m - 1.0) / (m + 1.0);
    e.mul_add(std::f64::consts::LN_2, atanh_series(s))
}

/// 2 atanh(s) = ln((1 + s)/(1 − s)) for |s| <= 0.1716: 2s + s·R(s²), R a minimax polynomial
/// (fdlibm's e_log.c).
#[inline(always)]
#[allow(clippy::excessive_precision)]
fn atanh_series(s: f64) -> f64 {
    let z = s * s;
    let r = horner(
        z,
        &[
            1.479819860511658591e-01,
            1.531383769920937332e-01,
            1.818357216161805012e-01,
            2.222219843214978396e-01,
            2.857142874366239149e-01,
            3.999999999940941908e-01,
            6.666666666666735130e-01,
        ],
    ) * z;
    s.mul_add(r, 2.0 * s)
}

/// ln(1 + e) and 1/(1 + e) for e in [0, 1], to a few ulp, from one division where `ln` and a
/// quotient take three: ln(1 + e) = 2 atanh(e/(2 + e)) up to e = √2 − 1, and
/// ln 2 + 2 atanh((e − 1)/(e + 3)) beyond (the ratio is then (1 + e)/2's), so |s| <= 0.1716 and
/// no rounding of 1 + e enters the logarithm; s and 1/(1 + e) share the reciprocal of the
/// product of their denominators.
#[inline(always)]
pub(crate) fn ln_1p_and_recip(e: f64) -> (f64, f64) {
    const SQRT2_M1: f64 = std::f64::consts::SQRT_2 - 1.0;
    let (num, den, k) = if e > SQRT2_M1 {
        (e - 1.0, e + 3.0, 1.0f64)
    } else {
        (e, 2.0 + e, 0.0)
    };
    let one_e = 1.0 + e;
    let q = 1.0 / (den * one_e);
    let s = num * (one_e * q);
    let ln_1p = k.mul_add(std::f64::consts::LN_2, atanh_series(s));
    (ln_1p, den * q)
}

/// e^x to a couple of ulp for any `x` (∞ beyond 709.78, 0 below −745, NaN for NaN).
#[inline(always)]
#[allow(clippy::excessive_precision)]
pub(crate) fn exp(x: f64) -> f64 {
    const INV_LN2: f64 = std::f64::consts::LOG2_E;
    // ln 2 split so that k · LN2_HI is exact for |k| < 2¹¹ (fdlibm's e_exp.c).
    const LN2_HI: f64 = 6.93147180369123816490e-01;
    const LN2_LO: f64 = 1.90821492927058770002e-10;
    let c = x.clamp(-746.0, 710.0);
    // x = k ln 2 + r, |r| <= ln 2 / 2.
    let t = c.mul_add(INV_LN2, ROUND);
    let k = t - ROUND;
    let r = k.mul_add(-LN2_LO, k.mul_add(-LN2_HI, c));
    // e^r by its Taylor series to r¹³/13!: the remainder is below 2⁻⁵⁷ of the value.
    let p = horner(
        r,
        &[
            1.0 / 6_227_020_800.0,
            1.0 / 479_001_600.0,
            1.0 / 39_916_800.0,
            1.0 / 3_628_800.0,
            1.0 / 362_880.0,
            1.0 / 40_320.0,
            1.0 / 5_040.0,
            1.0 / 720.0,
            1.0 / 120.0,
            1.0 / 24.0,
            1.0 / 6.0,
            0.5,
            1.0,
            1.0,
        ],
    );
    // 2^k as two normal powers of two, so that k from −1076 to 1024 underflows and overflows as
    // e^x does.
    let k = (t.to_bits() as i64).wrapping_sub(ROUND.to_bits() as i64);
    let k1 = k >> 1;
    let k2 = k - k1;
    let s1 = f64::from_bits(((k1 + 1023) as u64) << 52);
    let s2 = f64::from_bits(((k2 + 1023) as u64) << 52);
    let y = p * s1 * s2;
    if x.is_nan() {
        x
    } else {
        y
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Distance in units in the last place between two finite floats of one sign.
    fn ulps(a: f64, b: f64) -> u64 {
        (a.to_bits() as i64 - b.to_bits() as i64).unsigned_abs()
    }

    #[test]
    fn ln_matches_std() {
        let mut worst = 0;
        for i in 1..200_000 {
            let x = (i as f64) * 1e-3 + (i as f64 * 0.37).sin() * 1e-4;
            worst = worst.max(ulps(ln(x), x.ln()));
        }
        for x in [f64::MIN_POSITIVE, 1e-300, 1.0, 2.0, 1e300, f64::MAX] {
            worst = worst.max(ulps(ln(x), x.ln()));
        }
        assert!(worst <= 2, "{worst} ulps");
        assert_eq!(ln(1.0), 0.0);
    }

    #[test]
    fn ln_1p_and_recip_match_std() {
        let (mut worst_ln, mut worst_recip) = (0, 0);
        let mut check = |e: f64| {
            let (a, r) = ln_1p_and_recip(e);
            worst_ln = worst_ln.max(ulps(a, e.ln_1p()));
            worst_recip = worst_recip.max(ulps(r, 1.0 / (1.0 + e)));
        };
        for i in 0..=1_000_000 {
            check(i as f64 * 1e-6);
        }
        let edge = std::f64::consts::SQRT_2 - 1.0;
        for i in -1000..=1000 {
            check(edge + i as f64 * 1e-17);
        }
        let mut e = 1.0f64;
        while e > 1e-300 {
            check(e);
            check(0.7 * e);
            e *= 0.5;
        }
        assert!(
            worst_ln <= 4 && worst_recip <= 4,
            "{worst_ln}, {worst_recip} ulps"
        );
        assert_eq!(ln_1p_and_recip(0.0), (0.0, 1.0));
        assert_eq!(ln_1p_and_recip(1.0).1, 0.5);
    }

    #[test]
    fn exp_matches_std_where_it_is_finite_and_not_subnormal() {
        let mut worst = 0;
        for i in 0..2_000_000 {
            let x = -708.0 + 1417.0 * (i as f64 / 2e6) + (i as f64 * 0.61).sin() * 1e-6;
            worst = worst.max(ulps(exp(x), x.exp()));
        }
        for i in 0..200_000 {
            let x = -1.0 + (i as f64) * 1e-5;
            worst = worst.max(ulps(exp(x), x.exp()));
        }
        assert!(worst <= 2, "{worst} ulps");
        assert_eq!(exp(0.0), 1.0);
    }

    #[test]
    fn exp_overflows_underflows_and_passes_nan_as_std() {
        assert_eq!(exp(709.0), 709f64.exp());
        assert_eq!(exp(710.0), f64::INFINITY);
        assert_eq!(exp(f64::INFINITY), f64::INFINITY);
        assert_eq!(exp(-746.0), 0.0);
        assert_eq!(exp(f64::NEG_INFINITY), 0.0);
        assert!(exp(f64::NAN).is_nan());
        // Subnormal results: within a relative 2⁻⁴⁰ (their own precision is coarser).
        for x in [-710.0, -720.0, -740.0] {
            let (a, b) = (exp(x), f64::exp(x));
            assert!(
                (a - b).abs() <= b * 1e-12 + f64::from_bits(1),
                "{x}: {a:e} {b:e}"
            );
        }
    }
}
