//! The passes on a VAE that is not E3's: 6-pixel images, a one-dimensional latent, MLPs.

use super::*;
use crate::math::Activation;
use sagd::error::SagdError;

/// Pixels of the small images.
pub(super) const PX: usize = 6;

/// A VAE of 6-pixel images with a one-dimensional latent.
fn small() -> BernoulliVae {
    small_vae(1)
}

/// A VAE of 6-pixel images with a `d`-dimensional latent: MLPs of one hidden layer.
pub(super) fn small_vae(d: usize) -> BernoulliVae {
    BernoulliVae::new(
        Sequential::mlp(&[d, 8, PX], Activation::Tanh),
        Sequential::mlp(&[PX, 8, 2 * d], Activation::Tanh),
    )
    .expect("the networks fit")
}

/// `n` binary images, a fixed pattern.
fn images(n: usize) -> Vec<f32> {
    (0..n * PX)
        .map(|i| ((i * 7 + i / 5) % 3 == 0) as u8 as f32)
        .collect()
}

/// `n` standard normals from `seed`.
fn normals(n: usize, seed: u64) -> Vec<f32> {
    let mut v = vec![0.0f32; n];
    Seed::new(seed).normals().fill(&mut v);
    v
}

#[test]
fn networks_that_do_not_fit_are_refused_by_name() {
    let gen = || Sequential::mlp(&[1, 8, PX], Activation::Tanh);
    let cases = [
        (Sequential::mlp(&[5, 8, 2], Activation::Tanh), "6 inputs"),
        (
            Sequential::mlp(&[PX, 8, 3], Activation::Tanh),
            "2·1 outputs",
        ),
    ];
    for (enc, fix) in cases {
        match BernoulliVae::new(gen(), enc) {
            Err(SagdError::InvalidSetting { name, fix: f, .. }) => {
                assert_eq!(name, "encoder");
                assert!(f.contains(fix), "{f}");
            }
            other => panic!("expected the encoder refused, got {other:?}"),
        }
    }
    let m = small();
    assert_eq!((m.d, m.pixels()), (1, PX));
}

#[test]
fn the_elbo_gradient_of_other_images_is_that_of_its_loss() {
    let (m, b) = (small(), 5);
    let p = m.init(3);
    let (x, eps) = (images(b), normals(b * m.d, 4));
    let loss_grad = |p: &VaeParams| {
        let (mut gd, mut ge) = (vec![0.0f32; p.dec.len()], vec![0.0f32; p.enc.len()]);
        let info = vae_batch(&m, p, &x, &eps, &mut gd, &mut ge, &mut Scratch::default())
            .expect("the pass runs");
        (info.loss, gd, ge)
    };
    let (_, gd, ge) = loss_grad(&p);
    let (vd, ve) = (normals(p.dec.len(), 5), normals(p.enc.len(), 6));
    let h = 3e-3f32;
    let moved = |s: f32| VaeParams {
        dec: p.dec.iter().zip(&vd).map(|(a, v)| a + s * h * v).collect(),
        enc: p.enc.iter().zip(&ve).map(|(a, v)| a + s * h * v).collect(),
    };
    let fd = (loss_grad(&moved(1.0)).0 - loss_grad(&moved(-1.0)).0) / (2.0 * h as f64);
    let dot = |g: &[f32], v: &[f32]| g.iter().zip(v).map(|(a, b)| (a * b) as f64).sum::<f64>();
    let analytic = dot(&gd, &vd) + dot(&ge, &ve);
    // The central difference's error is c·h² with c ≈ 6 here (measured: 5.8e-3, 6.4e-4, 5.8e-5
    // at h = 0.03, 0.01, 0.003), and the loss's f32 rounding over 2h adds about 5e-6 at this h.
    assert!(
        (analytic - fd).abs() < 2e-4 * analytic.abs().max(1.0),
        "{analytic} vs {fd}"
    );
}

#[test]
fn the_held_out_likelihood_of_other_images_matches_quadrature() {
    let m = small();
    // The encoder's last layer set so that q(u | x) = N(0.3, 4) for every image: wider than the
    // prior, so the importance weights are bounded and their spread estimates the error well.
    let mut p = m.init(7);
    let n = p.enc.len();
    p.enc[n - 18..].fill(0.0);
    p.enc[n - 2] = 0.3;
    p.enc[n - 1] = 4f32.ln();
    let x = images(3);
    let k = 4000;
    let est = held_out(&m, &p.dec, &p.enc, &x, k, 8, &mut Scratch::default()).expect("runs");
    // log p(x) = log ∫ Π_j Bernoulli(x_j; σ(h(u))) N(u; 0, 1) du on a grid of 8001 points over
    // [−8, 8] (the trapezoid rule, exact to far below the Monte Carlo error here).
    let (lo, hi, n) = (-8.0f64, 8.0f64, 8001);
    let step = (hi - lo) / (n - 1) as f64;
    let grid: Vec<f32> = (0..n).map(|i| (lo + step * i as f64) as f32).collect();
    let probs = generate(&m, &p.dec, &grid);
    for (i, e) in est.iter().enumerate() {
        let xi = &x[i * PX..(i + 1) * PX];
        let terms: Vec<f64> = grid
            .iter()
            .zip(probs.chunks_exact(PX))
            .map(|(u, q)| {
                let ll: f64 = q
                    .iter()
                    .zip(xi)
                    .map(|(q, x)| {
                        if *x > 0.5 {
                            (*q as f64).ln()
                        } else {
                            (1.0 - *q as f64).ln()
                        }
                    })
                    .sum();
                ll - 0.5 * (*u as f64).powi(2) - 0.5 * (2.0 * std::f64::consts::PI).ln()
            })
            .collect();
        let top = terms.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        let exact = top + (terms.iter().map(|t| (t - top).exp()).sum::<f64>() * step).ln();
        // The log of a mean of k weights: sd ≈ √((k/ESS − 1)/k).
        let se = ((k as f64 / e.ess - 1.0) / k as f64).sqrt();
        assert!(
            (e.log_px - exact).abs() < 4.0 * se + 1e-4,
            "image {i}: {} against quadrature's {exact} (se {se})",
            e.log_px
        );
        assert!(e.elbo <= exact, "image {i}: ELBO {} above {exact}", e.elbo);
    }
}
