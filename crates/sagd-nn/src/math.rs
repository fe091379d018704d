//! Elementwise activation kernels in f32 with our own `exp` and `log1p`: glibc's scalar calls took
//! over half of a small MLP's time, and these loops vectorise. Compiled for AVX-512 and AVX2 with
//! run-time dispatch; every operation is correctly rounded (`mul_add` included), so every path gives
//! the same bits.

const LN2_HI: f32 = 0.693_145_75;
const LN2_LO: f32 = 1.428_606_8e-6;
/// 1.5·2²³: adding it rounds an f32 of magnitude below 2²² to an integer, held in the low bits.
const ROUND_MAGIC: f32 = 12_582_912.0;

/// e^x for x ≤ 0 (clamped below at −87, where it underflows to ~1e-38). Relative error ~2 ulp.
#[inline(always)]
fn exp_neg(x: f32) -> f32 {
    let x = x.max(-87.0);
    // Round to the nearest integer by adding 1.5·2²³, whose last mantissa bits then hold n: float to
    // int casts (`as i32`) saturate lane by lane and stop the loop from vectorising.
    let t = x.mul_add(std::f32::consts::LOG2_E, ROUND_MAGIC);
    let n = t - ROUND_MAGIC;
    let r = n.mul_add(-LN2_HI, x);
    let r = n.mul_add(-LN2_LO, r);
    // e^r on |r| ≤ ln2/2, Taylor to degree 7.
    let p = (1.0 / 5040.0f32).mul_add(r, 1.0 / 720.0);
    let p = p.mul_add(r, 1.0 / 120.0);
    let p = p.mul_add(r, 1.0 / 24.0);
    let p = p.mul_add(r, 1.0 / 6.0);
    let p = p.mul_add(r, 0.5);
    let p = p.mul_add(r, 1.0);
    let p = p.mul_add(r, 1.0);
    let scale = f32::from_bits(t.to_bits().wrapping_sub(ROUND_MAGIC.to_bits() - 127) << 23);
    p * scale
}

/// e^x − 1 for x ≤ 0, without cancellation near 0.
#[inline(always)]
fn expm1_neg(x: f32) -> f32 {
    if x > -0.34 {
        let p = (1.0 / 40320.0f32).mul_add(x, 1.0 / 5040.0);
        let p = p.mul_add(x, 1.0 / 720.0);
        let p = p.mul_add(x, 1.0 / 120.0);
        let p = p.mul_add(x, 1.0 / 24.0);
        let p = p.mul_add(x, 1.0 / 6.0);
        let p = p.mul_add(x, 0.5);
        let p = p.mul_add(x, 1.0);
        p * x
    } else {
        exp_neg(x) - 1.0
    }
}

/// tanh a.
#[inline(always)]
fn tanh(a: f32) -> f32 {
    let m = expm1_neg(-2.0 * a.abs());
    let t = -m / (2.0 + m);
    if a < 0.0 {
        -t
    } else {
        t
    }
}

/// ln(1 + y) for y in [0, 1] as y·P(y), P of degree 9 interpolating ln(1 + y)/y at Chebyshev
/// nodes (relative error 5e-9 in exact arithmetic, 1.4e-7 in f32): no division, unlike the
/// (u − 1)/(u + 1) series, which made softplus twice as slow.
#[inline(always)]
fn log1p_unit(y: f32) -> f32 {
    const P: [f32; 10] = [
        1.0,
        -0.499_998_93,
        0.333_297_1,
        -0.249_516_16,
        0.196_632_74,
        -0.152_696_67,
        0.105_436_236,
        -0.056_373_61,
        0.019_542_526,
        -0.003_176_057,
    ];
    let mut p = P[9];
    for c in P[..9].iter().rev() {
        p = p.mul_add(y, *c);
    }
    p * y
}

/// (softplus(a), σ(a)) from one exponential.
#[inline(always)]
pub(crate) fn softplus_sigmoid(a: f32) -> (f32, f32) {
    let e = exp_neg(-a.abs());
    let sp = a.max(0.0) + log1p_unit(e);
    let inv = 1.0 / (1.0 + e);
    let sg = if a >= 0.0 { inv } else { e * inv };
    (sp, sg)
}

/// The activations of the engine.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Activation {
    /// log(1 + e^a).
    Softplus,
    /// max(a, 0).
    Relu,
    /// tanh a.
    Tanh,
    /// 1/(1 + e^−a).
    Sigmoid,
}

sagd::vectorized! {
    /// y = f(x) and dy = f'(x) elementwise (the derivative is kept for the backward pass).
    pub fn forward(act: Activation, x: &[f32], y: &mut [f32], dy: &mut [f32]) {
        let it = y.iter_mut().zip(dy.iter_mut()).zip(x);
        match act {
            Activation::Softplus => it.for_each(|((y, dy), a)| (*y, *dy) = softplus_sigmoid(*a)),
            Activation::Relu => it.for_each(|((y, dy), a)| {
                *y = relu(*a);
                *dy = relu_slope(*a);
            }),
            Activation::Sigmoid => it.for_each(|((y, dy), a)| {
                let s = softplus_sigmoid(*a).1;
                *y = s;
                *dy = s * (1.0 - s);
            }),
            Activation::Tanh => it.for_each(|((y, dy), a)| {
                let t = tanh(*a);
                *y = t;
                *dy = 1.0 - t * t;
            }),
        }
    }
}

sagd::vectorized! {
    /// v ← e^(v − m) elementwise, for m ≥ every v (the shifted weights of a log-sum-exp).
    pub fn exp_shifted(v: &mut [f32], m: f32) {
        v.iter_mut().for_each(|x| *x = exp_neg(*x - m));
    }
}

sagd::vectorized! {
    /// The Bernoulli log-likelihood of binary pixels `x` under logits `l`, one row of `l.len()`
    /// pixels: returns Σ_j x_j l_j − softplus(l_j) (stable for any logit) and writes its gradient
    /// x_j − σ(l_j) into `grad`. Summed in f64.
    pub fn bernoulli_logits(l: &[f32], x: &[f32], grad: &mut [f32]) -> f64 {
        let mut total = 0.0f64;
        for ((g, a), b) in grad.iter_mut().zip(l).zip(x) {
            let (sp, sg) = softplus_sigmoid(*a);
            total += (b * a - sp) as f64;
            *g = b - sg;
        }
        total
    }
}

sagd::vectorized! {
    /// g *= dy elementwise.
    pub fn scale(g: &mut [f32], dy: &[f32]) {
        g.iter_mut().zip(dy).for_each(|(g, d)| *g *= d);
    }
}

/// max(a, 0), +0 for −0 and NaN: the engine's ReLU, fused into a product's store or not.
#[inline(always)]
pub fn relu(a: f32) -> f32 {
    if a > 0.0 {
        a
    } else {
        0.0
    }
}

/// A ReLU's derivative at `a`, its input or its output alike: 1 where a > 0, else 0.
#[inline(always)]
pub fn relu_slope(a: f32) -> f32 {
    if a > 0.0 {
        1.0
    } else {
        0.0
    }
}

sagd::vectorized! {
    /// y = max(x, 0) elementwise, without the derivative: the backward pass takes it from y
    /// ([`relu_backward`]).
    pub fn relu_forward(x: &[f32], y: &mut [f32]) {
        y.iter_mut().zip(x).for_each(|(y, a)| *y = relu(*a));
    }
}

sagd::vectorized! {
    /// g ← g · 1(y > 0) for a ReLU's output y: its derivative, multiplied in as 1 or 0 (the bits of
    /// [`scale`] by the derivative).
    pub fn relu_backward(g: &mut [f32], y: &[f32]) {
        g.iter_mut().zip(y).for_each(|(g, y)| *g *= relu_slope(*y));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bernoulli_log_likelihood_with_logits() {
        // log σ(l) for x = 1, log(1 − σ(l)) for x = 0, from logits far into both tails.
        let l = [-30.0f32, -2.0, 0.0, 0.5, 3.0, 30.0];
        for x in [0.0f32, 1.0] {
            let xs = [x; 6];
            let mut g = [0.0f32; 6];
            let total = bernoulli_logits(&l, &xs, &mut g);
            let mut want = 0.0f64;
            for (j, a) in l.iter().enumerate() {
                let a = *a as f64;
                let p = 1.0 / (1.0 + (-a).exp());
                want += if x == 1.0 {
                    -(-a).exp().ln_1p()
                } else {
                    -a.exp().ln_1p()
                };
                assert!(
                    (g[j] as f64 - (x as f64 - p)).abs() < 1e-6,
                    "logit {a}, x {x}"
                );
            }
            assert!(
                (total - want).abs() < 1e-5 * (1.0 + want.abs()),
                "{total} vs {want}"
            );
        }
    }

    #[test]
    fn exp_and_log1p_match_std() {
        let mut worst_e: f32 = 0.0;
        let mut worst_l: f32 = 0.0;
        for k in 0..200_000 {
            let x = -87.0 * k as f32 / 200_000.0;
            worst_e = worst_e.max(((exp_neg(x) - x.exp()) / x.exp()).abs());
            let y = (k as f32 / 200_000.0).powi(3);
            let r = y.ln_1p();
            if r > 0.0 {
                worst_l = worst_l.max(((log1p_unit(y) - r) / r).abs());
            }
        }
        assert!(worst_e < 4e-7, "exp {worst_e}");
        assert!(worst_l < 4e-7, "log1p {worst_l}");
    }

    #[test]
    fn activations_match_their_definitions() {
        let x: Vec<f32> = (-2000..=2000).map(|k| k as f32 * 0.02).collect();
        for act in [
            Activation::Softplus,
            Activation::Relu,
            Activation::Tanh,
            Activation::Sigmoid,
        ] {
            let mut y = vec![0.0; x.len()];
            let mut dy = vec![0.0; x.len()];
            forward(act, &x, &mut y, &mut dy);
            for (a, v) in x.iter().zip(&y) {
                let a64 = *a as f64;
                let exact = match act {
                    Activation::Softplus => a64.max(0.0) + (-a64.abs()).exp().ln_1p(),
                    Activation::Relu => a64.max(0.0),
                    Activation::Tanh => a64.tanh(),
                    Activation::Sigmoid => 1.0 / (1.0 + (-a64).exp()),
                };
                assert!(
                    (*v as f64 - exact).abs() <= 3e-7 * exact.abs().max(1e-30) + 1e-37,
                    "{act:?}({a}) = {v}, exact {exact}"
                );
            }
        }
    }
}
