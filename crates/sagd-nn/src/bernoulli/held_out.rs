//! The held-out log-likelihood by importance sampling from the encoder, and images generated
//! from given latents.

use super::*;

/// One image's importance-sampling estimate: log p̂(x) = log (1/k) Σ_j w_j with
/// w_j = p(x | u_j) N(u_j; 0, I) / q(u_j | x), u_j ~ q; the ELBO over the same draws; and the
/// effective sample size (Σ w)²/Σ w² of the weights.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct HeldOut {
    /// log p̂(x).
    pub log_px: f64,
    /// The ELBO estimate.
    pub elbo: f64,
    /// The weights' effective sample size.
    pub ess: f64,
}

/// [`HeldOut`] for every image of `x` (binarised) with `k` draws each; image i's draws come from
/// its own stream (`seed`, i), so that two generators evaluated with the same encoder and seed
/// see the same draws (common random numbers: their difference is paired). The images are split
/// over processes ([`sagd::share::map`]).
pub fn held_out(
    m: &BernoulliVae,
    gen: &[f32],
    enc: &[f32],
    x: &[f32],
    k: usize,
    seed: u64,
    scratch: &mut Scratch,
) -> Result<Vec<HeldOut>> {
    let d = m.d;
    let px = m.pixels();
    let n = x.len() / px;
    let q = encode(m, enc, x, scratch);
    let pool = &scratch.pool;
    let packed = &mut scratch.packed.0;
    m.gen.pack(gen, false, packed);
    let packed = &*packed;
    sagd::share::map(n, |i| {
        let mut stream = sagd::rng::Seed::new(seed).index(i as u64).normals();
        let mut eps = vec![0.0f32; k * d];
        stream.fill(&mut eps);
        let (mu, lv) = (
            &q[i * 2 * d..i * 2 * d + d],
            &q[i * 2 * d + d..(i + 1) * 2 * d],
        );
        let xi = &x[i * px..(i + 1) * px];
        let mut lw = Vec::with_capacity(k);
        let mut ll_sum = 0.0f64;
        pool.with(|bufs| {
            let ws = &mut bufs.gen;
            let mut dl = vec![0.0f32; px];
            for s in (0..k).step_by(SUB_ROWS) {
                let e = (s + SUB_ROWS).min(k);
                let mut u = vec![0.0f32; (e - s) * d];
                let mut lpq = Vec::with_capacity(e - s);
                for (r, row) in u.chunks_exact_mut(d).enumerate() {
                    let mut v = 0.0f64;
                    for j in 0..d {
                        let z = eps[(s + r) * d + j];
                        row[j] = mu[j] + (0.5 * lv[j]).exp() * z;
                        // log N(u; 0, I) − log q(u | x).
                        v += -0.5 * (row[j] as f64).powi(2)
                            + 0.5 * (z as f64).powi(2)
                            + 0.5 * lv[j] as f64;
                    }
                    lpq.push(v);
                }
                m.gen.forward_packed(gen, packed, &u, e - s, ws);
                for (r, logits) in ws.output().chunks_exact(px).enumerate() {
                    let ll = bernoulli_logits(logits, xi, &mut dl);
                    ll_sum += ll;
                    lw.push(ll + lpq[r]);
                }
            }
        });
        let top = lw.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        let (s1, s2) = lw.iter().fold((0.0, 0.0), |(a, b), v| {
            let w = (v - top).exp();
            (a + w, b + w * w)
        });
        let kl: f64 = (0..d)
            .map(|j| 0.5 * ((mu[j] * mu[j]) as f64 + (lv[j] as f64).exp() - lv[j] as f64 - 1.0))
            .sum();
        Ok(HeldOut {
            log_px: top + (s1 / k as f64).ln(),
            elbo: ll_sum / k as f64 - kl,
            ess: s1 * s1 / s2,
        })
    })
}

/// The generator's pixel probabilities σ(h_θ(u)) for the latents `u` (n × d), n × pixels.
pub fn generate(m: &BernoulliVae, gen: &[f32], u: &[f32]) -> Vec<f32> {
    let n = u.len() / m.d.max(1);
    let mut ws = Workspace::default();
    let mut out = Vec::with_capacity(n * m.pixels());
    for s in (0..n).step_by(SUB_ROWS) {
        let e = (s + SUB_ROWS).min(n);
        m.gen.forward(gen, &u[s * m.d..e * m.d], e - s, &mut ws);
        out.extend(ws.output().iter().map(|l| 1.0 / (1.0 + (-l).exp())));
    }
    out
}
