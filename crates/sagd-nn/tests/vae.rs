//! The VAE's gradients: the posterior's ∇u and ∇θ, and the ELBO and IWAE estimators' gradients,
//! against central differences of the same (fixed-noise) estimates; passes kept for ∇θ.
#![allow(clippy::needless_range_loop)]

mod common;

use common::check_posterior_gradients;
use sagd::model::LatentModel;
use sagd_nn::train::{BoundEstimator, GradientEstimator};
use sagd_nn::vae::{DecoderPosterior, Vae, VaeParams};

fn data() -> Vec<f32> {
    vec![0.3, -1.2, 2.5, 0.9, 1.7]
}

/// A small decoder, its parameters, and five rows with latent values.
fn posterior_case() -> (Vae, VaeParams, Vec<usize>, Vec<f32>) {
    let vae = Vae::new(1, 6);
    let p = vae.init(4);
    (vae, p, (0..5).collect(), vec![0.1, -0.7, 1.3, 0.4, -1.9])
}

#[test]
fn posterior_gradients_match_finite_differences() {
    let (vae, p, rows, u) = posterior_case();
    let x = data();
    let post = DecoderPosterior::new(&vae.dec, &x);
    check_posterior_gradients("N(x; h, 1)", &post, &p.dec, (&rows, &u), (1e-2, 2e-3));
}

/// The estimator's gradient against central differences of its loss, with the noise fixed by
/// rebuilding the estimator from the same seed for every evaluation; `points` copies of the data
/// (enough of them spread the k·points decoder rows over several chunks).
fn check_bound(k: usize, points: usize) {
    let vae = Vae::new(1, 5);
    let p = vae.init(9);
    let x: Vec<f32> = data().into_iter().cycle().take(points).collect();
    let batch: Vec<usize> = (0..points).collect();
    let loss = |q: &sagd_nn::vae::VaeParams| -> f64 {
        let mut gd = vec![0.0f32; q.dec.len()];
        let mut ge = vec![0.0f32; q.enc.len()];
        BoundEstimator::new(&vae, &x, k, 77)
            .estimate(q, &batch, &mut gd, &mut ge)
            .unwrap()
    };
    let mut gd = vec![0.0f32; p.dec.len()];
    let mut ge = vec![0.0f32; p.enc.len()];
    BoundEstimator::new(&vae, &x, k, 77)
        .estimate(&p, &batch, &mut gd, &mut ge)
        .unwrap();
    let h = 1e-2f32;
    for j in 0..p.dec.len() {
        let (mut a, mut b) = (p.clone(), p.clone());
        a.dec[j] += h;
        b.dec[j] -= h;
        let fd = (loss(&a) - loss(&b)) / (2.0 * h as f64);
        assert!(
            (gd[j] as f64 - fd).abs() < 3e-3 * (1.0 + fd.abs()),
            "k = {k}, decoder {j}: {} vs {fd}",
            gd[j]
        );
    }
    for j in 0..p.enc.len() {
        let (mut a, mut b) = (p.clone(), p.clone());
        a.enc[j] += h;
        b.enc[j] -= h;
        let fd = (loss(&a) - loss(&b)) / (2.0 * h as f64);
        assert!(
            (ge[j] as f64 - fd).abs() < 3e-3 * (1.0 + fd.abs()),
            "k = {k}, encoder {j}: {} vs {fd}",
            ge[j]
        );
    }
}

#[test]
fn elbo_gradient_matches_finite_differences() {
    check_bound(1, 5);
}

#[test]
fn iwae_gradient_matches_finite_differences() {
    check_bound(7, 5);
}

#[test]
fn iwae_gradient_over_several_chunks_matches_finite_differences() {
    // 50 samples of 25 points: 1250 decoder rows in chunks of 500 (10 whole points each).
    const { assert!(25 * 50 > 2 * sagd_nn::CHUNK_ROWS) };
    check_bound(50, 25);
}

#[test]
fn remembered_passes_give_the_same_theta_gradient() {
    let (vae, p, rows, u) = posterior_case();
    let x = data();
    let plain = DecoderPosterior::new(&vae.dec, &x);
    let fresh = |uu: &[f32], th: &[f32]| {
        let mut g = vec![0.0f32; p.dec.len()];
        plain.add_grad_theta(th, &rows, uu, &mut g).unwrap();
        g
    };
    let post = DecoderPosterior::new(&vae.dec, &x).keeping_passes(true);
    let (mut lp, mut gu) = (vec![0.0f32; 5], vec![0.0f32; 5]);
    post.log_joint(&p.dec, &rows, &u, &mut lp, &mut gu).unwrap();
    // Same points (the kept pass alone), then one row moved (kept pass plus a pass for that row),
    // then another θ (no kept pass applies).
    let mut moved = u.clone();
    moved[2] = 0.9;
    let mut theta2 = p.dec.clone();
    theta2[3] += 0.5;
    for (uu, th) in [(&u, &p.dec), (&moved, &p.dec), (&u, &theta2)] {
        let mut kept = vec![0.0f32; p.dec.len()];
        post.add_grad_theta(th, &rows, uu, &mut kept).unwrap();
        post.log_joint(&p.dec, &rows, &u, &mut lp, &mut gu).unwrap();
        for (a, b) in kept.iter().zip(&fresh(uu, th)) {
            assert!((a - b).abs() <= 1e-5 * (1.0 + b.abs()), "{a} vs {b}");
        }
    }
    // The first two reused the kept pass, the third could not.
    assert_eq!(post.reused_passes(), 2);
    assert_eq!(plain.reused_passes(), 0);
    // The moved row's contribution is really there: it differs from the unmoved gradient.
    assert!(fresh(&moved, &p.dec)
        .iter()
        .zip(&fresh(&u, &p.dec))
        .any(|(a, b)| (a - b).abs() > 1e-3));
}
