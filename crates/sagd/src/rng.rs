//! Seeded random streams: one per chain, so that results do not depend on how chains are split
//! among threads, and a fast vectorised standard-normal generator (the sampler's bottleneck on cheap
//! targets).
//!
//! [`NormalStream`] runs eight xoshiro256+ generators side by side (one per SIMD lane) and turns
//! their output into normals by the Box-Muller transform, with `ln`, `sin` and `cos` written as
//! polynomials with `+`, `*`, `/`, `sqrt` and `mul_add`. The code is compiled for AVX-512 and AVX2
//! with run-time dispatch; every operation is correctly rounded (`mul_add` rounds once, in hardware
//! or in libm's software fma), so every dispatch path, the portable fallback included, returns the
//! same bits.

use rand::{Rng, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;
use serde::{Deserialize, Serialize};

use crate::lanes::{horner, ln as ln_unit};
use crate::real::Real;

const LANES: usize = 8;
/// Normals produced by one block: two xoshiro steps over eight lanes, four pairs each.
const BLOCK: usize = 2 * LANES;

/// SplitMix64's output function: a bijective 64-bit mixer.
#[inline]
pub fn splitmix64(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The seed of stream `stream` under the run seed `seed`: distinct streams get unrelated seeds.
pub fn stream_seed(seed: u64, stream: u64) -> u64 {
    splitmix64(splitmix64(seed) ^ splitmix64(stream.wrapping_add(0x632B_E59B_D9B4_E019)))
}

/// A run's seed and the independent streams split from it, by name or by number, the way JAX
/// splits a key: `seed.stream("init")`, `seed.index(c)` for the c-th of a family (a chain, a
/// replication). Every part of a run takes its randomness from its own stream, so adding or
/// reordering parts leaves the others' draws alone.
///
/// A name is hashed (FNV-1a over its UTF-8 bytes) to a stream number with the top bit set, so a
/// named stream never meets a numbered one below 2^63; both go through [`stream_seed`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Seed(u64);

impl Seed {
    /// The seed a user gave.
    pub const fn new(seed: u64) -> Self {
        Seed(seed)
    }

    /// The stream called `name` (names are case-sensitive; by convention lower-case words).
    pub fn stream(self, name: &str) -> Seed {
        let hash = name.bytes().fold(0xCBF2_9CE4_8422_2325u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01B3)
        });
        self.index(hash | 1 << 63)
    }

    /// The `i`-th stream of a family (chain i, replication i).
    pub fn index(self, i: u64) -> Seed {
        Seed(stream_seed(self.0, i))
    }

    /// The 64-bit value, for the generators seeded from one.
    pub const fn get(self) -> u64 {
        self.0
    }

    /// A normal stream seeded from this seed.
    pub fn normals(self) -> NormalStream {
        NormalStream::new(self.0)
    }

    /// A xoshiro256++ generator seeded from this seed.
    pub fn rng(self) -> Xoshiro256PlusPlus {
        Xoshiro256PlusPlus::seed_from_u64(self.0)
    }
}

impl From<u64> for Seed {
    fn from(seed: u64) -> Self {
        Seed(seed)
    }
}

/// A stream of standard normal draws: eight xoshiro256+ lanes and Box-Muller.
///
/// The sequence of values is fixed by the seed alone, however the caller splits its requests.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct NormalStream {
    s: [[u64; LANES]; 4],
    buf: [f64; BLOCK],
    pos: usize,
}

impl NormalStream {
    /// A stream seeded from a 64-bit seed (each lane's state expanded by SplitMix64).
    pub fn new(seed: u64) -> Self {
        let mut s = [[0u64; LANES]; 4];
        let mut z = seed;
        for lane in 0..LANES {
            for word in s.iter_mut() {
                z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
                word[lane] = splitmix64(z);
            }
        }
        NormalStream {
            s,
            buf: [0.0; BLOCK],
            pos: BLOCK,
        }
    }

    /// Fills `out` with standard normal draws (computed in f64, rounded once for `f32`).
    pub fn fill<T: Real>(&mut self, out: &mut [T]) {
        let mut i = 0;
        while self.pos < BLOCK && i < out.len() {
            out[i] = T::of(self.buf[self.pos]);
            self.pos += 1;
            i += 1;
        }
        let rest = &mut out[i..];
        let whole = rest.len() / BLOCK * BLOCK;
        let (body, tail) = rest.split_at_mut(whole);
        fill_blocks(&mut self.s, body);
        if !tail.is_empty() {
            fill_blocks(&mut self.s, &mut self.buf[..]);
            for (t, b) in tail.iter_mut().zip(self.buf.iter()) {
                *t = T::of(*b);
            }
            self.pos = tail.len();
        }
    }

    /// One standard normal draw.
    pub fn draw(&mut self) -> f64 {
        let mut x = [0.0f64];
        self.fill(&mut x);
        x[0]
    }
}

/// The random streams of one chain: normals for the dynamics and uniforms for accept/reject.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct ChainRng {
    /// Normal draws (momentum noise).
    pub normal: NormalStream,
    uniform: Xoshiro256PlusPlus,
}

impl ChainRng {
    /// The streams of chain `chain` under run seed `seed`.
    pub fn new(seed: u64, chain: u64) -> Self {
        let s = stream_seed(seed, chain);
        ChainRng {
            normal: NormalStream::new(s),
            uniform: Xoshiro256PlusPlus::seed_from_u64(splitmix64(s ^ 0x5DEE_CE66_D1CE_4E5B)),
        }
    }

    /// A uniform draw in [0, 1) with 53 random bits.
    pub fn uniform(&mut self) -> f64 {
        (self.uniform.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }
}

/// A block's values on the stack, on a cache line of their own: at f64's own alignment their
/// vector stores and loads could straddle two lines, as the caller's stack depth decides (the
/// AVX2 copy, which spills, ran 40% slower in some builds than in others).
#[repr(C, align(64))]
struct Aligned<V>(V);

crate::vectorized! {
    fn fill_blocks<T: Real>(s: &mut [[u64; LANES]; 4], out: &mut [T]) {
        let mut st = Aligned(*s);
        let mut z = Aligned([0.0f64; BLOCK]);
        for chunk in out.chunks_exact_mut(BLOCK) {
            let r1 = Aligned(xoshiro_lanes(&mut st.0));
            let r2 = Aligned(xoshiro_lanes(&mut st.0));
            box_muller(&r1.0, &r2.0, &mut z.0);
            for (o, v) in chunk.iter_mut().zip(z.0.iter()) {
                *o = T::of(*v);
            }
        }
        *s = st.0;
    }
}

/// One xoshiro256+ step in each lane.
#[inline(always)]
fn xoshiro_lanes(s: &mut [[u64; LANES]; 4]) -> [u64; LANES] {
    let mut out = [0u64; LANES];
    for l in 0..LANES {
        out[l] = s[0][l].wrapping_add(s[3][l]);
        let t = s[1][l] << 17;
        s[2][l] ^= s[0][l];
        s[3][l] ^= s[1][l];
        s[1][l] ^= s[2][l];
        s[0][l] ^= s[3][l];
        s[2][l] ^= t;
        s[3][l] = s[3][l].rotate_left(45);
    }
    out
}

/// A uniform in [0, 1) from the top 52 bits, without an integer-to-float conversion.
#[inline(always)]
fn unit(r: u64) -> f64 {
    f64::from_bits(0x3FF0_0000_0000_0000 | (r >> 12)) - 1.0
}

#[inline(always)]
fn box_muller(r1: &[u64; LANES], r2: &[u64; LANES], out: &mut [f64]) {
    let (cos_out, sin_out) = out.split_at_mut(LANES);
    for l in 0..LANES {
        // u1 in (0, 1]: the logarithm stays finite.
        let u1 = 1.0 - unit(r1[l]);
        let u2 = unit(r2[l]);
        let radius = (-2.0 * ln_unit(u1)).sqrt();
        let (s, c) = sin_cos_turn(u2);
        cos_out[l] = radius * c;
        sin_out[l] = radius * s;
    }
}

/// `(sin 2πu, cos 2πu)` for `u` in [0, 1).
#[inline(always)]
#[allow(clippy::excessive_precision)]
pub(crate) fn sin_cos_turn(u: f64) -> (f64, f64) {
    // Quarter turns: the reduction is exact because 4u is.
    let v = 4.0 * u;
    let k = (v + 0.5).floor();
    let x = (v - k) * std::f64::consts::FRAC_PI_2; // |x| <= π/4
    let x2 = x * x;
    // Minimax polynomials on [−π/4, π/4] (fdlibm's k_sin.c and k_cos.c).
    let ps = horner(
        x2,
        &[
            1.58969099521155010221e-10,
            -2.50507602534068634195e-08,
            2.75573137070700676789e-06,
            -1.98412698298579493134e-04,
            8.33333333332248946124e-03,
            -1.66666666666666324348e-01,
        ],
    );
    let sin = (x * x2).mul_add(ps, x);
    let pc = horner(
        x2,
        &[
            -1.13596475577881948265e-11,
            2.08757232129817482790e-09,
            -2.75573143513906633035e-07,
            2.48015872894767294178e-05,
            -1.38888888888741095749e-03,
            4.16666666666666019037e-02,
        ],
    );
    let cos = (x2 * x2).mul_add(pc, (-0.5f64).mul_add(x2, 1.0));
    let odd = k == 1.0 || k == 3.0;
    let (c, s) = if odd { (sin, cos) } else { (cos, sin) };
    let c = if k == 1.0 || k == 2.0 { -c } else { c };
    let s = if k == 2.0 || k == 3.0 { -s } else { s };
    (s, c)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sin_cos_match_std() {
        for i in 0..100_000 {
            let u = i as f64 / 100_000.0;
            let (s, c) = sin_cos_turn(u);
            // The reference itself carries the rounding of 2πu (up to 2π · 2⁻⁵³ · 4 ≈ 3e-15 · u).
            let a = 2.0 * std::f64::consts::PI * u;
            let tol = 4e-16 + 2.0 * f64::EPSILON * a;
            assert!((s - a.sin()).abs() < tol, "sin at {u}: {}", s - a.sin());
            assert!((c - a.cos()).abs() < tol, "cos at {u}: {}", c - a.cos());
        }
    }

    #[test]
    fn chunking_does_not_change_the_sequence() {
        let mut a = NormalStream::new(7);
        let mut whole = vec![0.0; 1000];
        a.fill(&mut whole);
        let mut b = NormalStream::new(7);
        let mut parts = Vec::new();
        for len in [1usize, 3, 16, 17, 5, 100, 858] {
            let mut p = vec![0.0; len];
            b.fill(&mut p);
            parts.extend(p);
        }
        assert_eq!(whole, parts);
    }

    #[test]
    fn normal_moments_and_tail() {
        // Mean, variance, kurtosis and a tail probability against N(0, 1), each to 5 standard errors.
        let n = 2_000_000usize;
        let mut s = NormalStream::new(42);
        let mut x = vec![0.0; n];
        s.fill(&mut x);
        let nf = n as f64;
        let m1 = x.iter().sum::<f64>() / nf;
        let m2 = x.iter().map(|v| v * v).sum::<f64>() / nf;
        let m4 = x.iter().map(|v| v.powi(4)).sum::<f64>() / nf;
        let tail = x.iter().filter(|v| v.abs() > 2.0).count() as f64 / nf;
        assert!(m1.abs() < 5.0 * (1.0 / nf).sqrt(), "mean {m1}");
        assert!((m2 - 1.0).abs() < 5.0 * (2.0 / nf).sqrt(), "variance {m2}");
        assert!(
            (m4 - 3.0).abs() < 5.0 * (96.0 / nf).sqrt(),
            "fourth moment {m4}"
        );
        let p = 0.045_500_263_896_358_41;
        assert!(
            (tail - p).abs() < 5.0 * (p * (1.0 - p) / nf).sqrt(),
            "tail {tail}"
        );
    }

    #[test]
    fn streams_differ_and_repeat() {
        let mut a = ChainRng::new(1, 0);
        let mut b = ChainRng::new(1, 1);
        let mut c = ChainRng::new(1, 0);
        let (x, y, z) = (a.normal.draw(), b.normal.draw(), c.normal.draw());
        assert_ne!(x, y);
        assert_eq!(x, z);
        let u = a.uniform();
        assert!((0.0..1.0).contains(&u));
    }

    #[test]
    fn named_streams_are_fixed_distinct_and_uncorrelated() {
        let seed = Seed::new(7);
        // A numbered stream is stream_seed's, so families split before keep their bits.
        assert_eq!(seed.index(3).get(), stream_seed(7, 3));
        // FNV-1a of "a" is 0xAF63DC4C8601EC8C; the top bit marks it as a name.
        assert_eq!(
            seed.stream("a").get(),
            stream_seed(7, 0xAF63_DC4C_8601_EC8C | 1 << 63)
        );
        assert_eq!(seed.stream("init"), Seed::new(7).stream("init"));
        let names = [
            "init", "starts", "chains", "eval", "order", "vae", "sagd", "control",
        ];
        let mut seen: Vec<u64> = names.iter().map(|n| seed.stream(n).get()).collect();
        seen.extend((0..64).map(|i| seed.index(i).get()));
        seen.push(Seed::new(8).stream("init").get());
        let all = seen.len();
        seen.sort_unstable();
        seen.dedup();
        assert_eq!(seen.len(), all);
        // Two named streams' draws: |r| < 4/√n holds for independent streams but for 6e-5.
        let n = 10_000;
        let (mut a, mut b) = (seed.stream("init").normals(), seed.stream("eval").normals());
        let r: f64 = (0..n).map(|_| a.draw() * b.draw()).sum::<f64>() / n as f64;
        assert!(r.abs() < 4.0 / (n as f64).sqrt(), "r = {r}");
    }
}
