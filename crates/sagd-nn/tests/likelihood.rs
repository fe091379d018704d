//! The decoder's likelihood as a parameter: the posterior's log density against its closed form,
//! its ∇u and ∇θ and the ELBO's and IWAE's gradients against central differences, under the
//! Bernoulli, Poisson and Gaussian likelihoods, with data of another dimension than the latent's;
//! what the estimators refuse.
#![allow(clippy::needless_range_loop)]

mod common;

use common::check_posterior_gradients;
use sagd::error::SagdError;
use sagd::model::LatentModel;
use sagd_nn::likelihood::{Bernoulli, Gaussian, Likelihood, Poisson, UnitGaussian};
use sagd_nn::math::Activation;
use sagd_nn::train::{BoundEstimator, Estimator, GradientEstimator, HmcChains};
use sagd_nn::vae::{DecoderPosterior, Vae, VaeParams};
use sagd_nn::{Device, Sequential, Workspace};

/// Latent dimension 2, data points of 3 values.
const D: usize = 2;
const P: usize = 3;

fn vae() -> Vae {
    Vae {
        d: D,
        dec: Sequential::mlp(&[D, 6, P], Activation::Tanh),
        enc: Sequential::mlp(&[P, 6, 2 * D], Activation::Softplus),
    }
}

/// Four points of each likelihood's data: binary pixels, counts (one in the hundreds, with its
/// log-rate's bias moved near it), reals.
fn data(which: &str) -> Vec<f32> {
    match which {
        "bernoulli" => vec![1., 0., 1., 0., 0., 1., 1., 1., 0., 0., 1., 0.],
        "poisson" => vec![0., 3., 1., 2., 0., 5., 140., 1., 0., 4., 2., 7.],
        _ => vec![
            0.3, -1.2, 2.5, 0.9, 1.7, -0.4, 0.1, 0.0, -2.2, 1.1, 0.6, -0.8,
        ],
    }
}

fn params(which: &str) -> VaeParams {
    let v = vae();
    let mut p = v.init(4);
    if which == "poisson" {
        // The last layer's first bias (it comes last but P in θ): rates near the large count's.
        let n = p.dec.len();
        p.dec[n - P] += 4.0;
    }
    p
}

/// log p(x | h) in f64 from its definition, for the closed-form check.
fn exact(which: &str, h: f64, x: f64) -> f64 {
    match which {
        "bernoulli" => {
            let s = 1.0 / (1.0 + (-h).exp());
            x * s.ln() + (1.0 - x) * (1.0 - s).ln()
        }
        "poisson" => x * h - h.exp(),
        // σ = 0.3.
        "gaussian-sd" => -0.5 * (x - h) * (x - h) / 0.09,
        _ => -0.5 * (x - h) * (x - h),
    }
}

fn each(f: impl Fn(&str, &dyn Likelihood)) {
    f("bernoulli", &Bernoulli);
    f("poisson", &Poisson);
    f("gaussian", &UnitGaussian);
    f("gaussian-sd", &Gaussian::new(0.3).unwrap());
}

#[test]
fn the_posterior_is_its_closed_form_and_its_gradients_match_finite_differences() {
    let v = vae();
    let u = [0.1f32, -0.7, 1.3, 0.4, -1.9, 0.8, 0.05, -0.3];
    let rows = [0usize, 1, 2, 3];
    each(|which, lik| {
        let (x, p) = (data(which), params(which));
        let post = DecoderPosterior::with_likelihood(&v.dec, lik, &x);
        assert_eq!(post.n_data(), 4);
        let (mut lp, mut gu) = (vec![0.0f32; 4], vec![0.0f32; 8]);
        post.log_joint(&p.dec, &rows, &u, &mut lp, &mut gu).unwrap();
        // The closed form: the decoder's outputs, then Σ_j log p(x_j | h_j) − ½‖u‖².
        let mut ws = Workspace::default();
        v.dec.forward(&p.dec, &u, 4, &mut ws);
        for i in 0..4 {
            let prior: f64 = u[i * D..(i + 1) * D]
                .iter()
                .map(|&a| -0.5 * (a * a) as f64)
                .sum();
            let lik: f64 = (0..P)
                .map(|j| exact(which, ws.output()[i * P + j] as f64, x[i * P + j] as f64))
                .sum();
            let want = lik + prior;
            assert!(
                (lp[i] as f64 - want).abs() < 1e-5 * (1.0 + want.abs()),
                "{which}, point {i}: {} vs {want}",
                lp[i]
            );
        }
        check_posterior_gradients(which, &post, &p.dec, (&rows, &u), (1e-2, 3e-3));
    });
}

/// The bound estimator's gradients against central differences of its loss, the noise fixed by
/// rebuilding the estimator from the same seed for every evaluation.
fn check_bound<L: Likelihood + Copy>(which: &str, lik: L, k: usize) {
    let v = vae();
    let (x, p) = (data(which), params(which));
    let batch = [0usize, 1, 2, 3];
    let loss_grad = |q: &VaeParams| {
        let (mut gd, mut ge) = (vec![0.0f32; q.dec.len()], vec![0.0f32; q.enc.len()]);
        let loss = BoundEstimator::with_likelihood(&v, lik, &x, k, 77)
            .estimate(q, &batch, &mut gd, &mut ge)
            .unwrap();
        (loss, gd, ge)
    };
    let (_, gd, ge) = loss_grad(&p);
    // Central differences extrapolated from steps h and h/2 (Richardson: error O(h⁴), not h²):
    // where rates e^h meet the count of 140 the loss's third derivatives are large, and a plain
    // difference small enough to shrink their error (h² times them) would difference f32 terms
    // near 700 over too short a step.
    let h = 8e-3f32;
    for (net, grad) in [(0, &gd), (1, &ge)] {
        for j in 0..grad.len() {
            let central = |h: f32| {
                let (mut a, mut b) = (p.clone(), p.clone());
                let (wa, wb) = match net {
                    0 => (&mut a.dec, &mut b.dec),
                    _ => (&mut a.enc, &mut b.enc),
                };
                wa[j] += h;
                wb[j] -= h;
                (loss_grad(&a).0 - loss_grad(&b).0) / (2.0 * h as f64)
            };
            let fd = (4.0 * central(h / 2.0) - central(h)) / 3.0;
            assert!(
                (grad[j] as f64 - fd).abs() < 3e-3 * (1.0 + fd.abs()),
                "{which}, k = {k}, network {net}, parameter {j}: {} vs {fd}",
                grad[j]
            );
        }
    }
}

#[test]
fn elbo_and_iwae_gradients_match_finite_differences_under_every_likelihood() {
    for k in [1, 4] {
        check_bound("bernoulli", Bernoulli, k);
        check_bound("poisson", Poisson, k);
        check_bound("gaussian", UnitGaussian, k);
        check_bound("gaussian-sd", Gaussian::new(0.3).unwrap(), k);
    }
}

#[test]
fn the_elbo_under_a_likelihood_is_its_closed_form() {
    // k = 1 on one point: the loss is −log p(x | h(u)) + KL(N(μ, σ²) ‖ N(0, I)) at u = μ + σ ε,
    // ε the estimator's one draw (its stream from the seed, as `BoundEstimator` draws it).
    let v = vae();
    let mut ws = Workspace::default();
    for which in ["bernoulli", "poisson"] {
        let (x, p) = (data(which), params(which));
        let (mut gd, mut ge) = (vec![0.0f32; p.dec.len()], vec![0.0f32; p.enc.len()]);
        let got = match which {
            "bernoulli" => BoundEstimator::with_likelihood(&v, Bernoulli, &x, 1, 5).estimate(
                &p,
                &[2],
                &mut gd,
                &mut ge,
            ),
            _ => BoundEstimator::with_likelihood(&v, Poisson, &x, 1, 5).estimate(
                &p,
                &[2],
                &mut gd,
                &mut ge,
            ),
        }
        .unwrap();
        let point = &x[2 * P..3 * P];
        v.enc.forward(&p.enc, point, 1, &mut ws);
        let enc = ws.output().to_vec();
        let (mu, lv) = (&enc[..D], &enc[D..]);
        let kl: f64 = (0..D)
            .map(|j| 0.5 * ((mu[j] * mu[j] + lv[j].exp() - lv[j] - 1.0) as f64))
            .sum();
        let mut eps = vec![0.0f32; D];
        sagd::rng::NormalStream::new(5).fill(&mut eps);
        let u: Vec<f32> = (0..D)
            .map(|j| mu[j] + (0.5 * lv[j]).exp() * eps[j])
            .collect();
        v.dec.forward(&p.dec, &u, 1, &mut ws);
        let nll: f64 = (0..P)
            .map(|j| -exact(which, ws.output()[j] as f64, point[j] as f64))
            .sum();
        let want = nll + kl;
        assert!(
            (got - want).abs() < 1e-5 * (1.0 + want.abs()),
            "{which}: {got} vs {want}"
        );
    }
}

#[test]
fn a_gaussian_of_sd_one_is_the_papers_and_bad_sds_are_refused() {
    let one = Gaussian::new(1.0).unwrap();
    for (h, x) in [(0.3f32, -1.2f32), (2.5, 2.5), (-4.0, 7.5)] {
        assert_eq!(one.log_density(h, x), UnitGaussian.log_density(h, x));
    }
    for sd in [0.0, -1.0, f64::NAN, f64::INFINITY, 1e-30] {
        match Gaussian::new(sd) {
            Err(SagdError::InvalidSetting { name, .. }) => assert_eq!(name, "Gaussian sd"),
            other => panic!("sd {sd}: expected a refusal, got {other:?}"),
        }
    }
}

#[test]
fn the_estimators_refuse_what_they_cannot_compute_by_name() {
    let v = vae();
    let x = data("bernoulli");
    let refused = |r: sagd::error::Result<Box<dyn GradientEstimator + '_>>| match r {
        Err(SagdError::InvalidSetting { name, fix, .. }) => (name, fix),
        Err(e) => panic!("expected a setting refused, got {e}"),
        Ok(_) => panic!("expected a setting refused, got an estimator"),
    };
    // The CUDA backend computes the laws of sagd_nn::likelihood only: a law of one's own is
    // refused before any device is opened (so this runs on any machine), on every estimator.
    struct Own;
    impl Likelihood for Own {
        fn log_density(&self, h: f32, x: f32) -> (f32, f32) {
            (-(x - h).abs(), (x - h).signum())
        }
    }
    let chains = [
        Estimator::Bound { k: 1 },
        Estimator::Hmc(HmcChains {
            hmc: Default::default(),
            transitions: 3,
        }),
        Estimator::Sagd(Default::default()),
    ];
    for est in chains {
        let (name, fix) = refused(est.on_with(Device::Cuda(0), &v, Own, &x, 1));
        assert_eq!(name, "device");
        assert!(fix.contains("on the CPU"), "{fix}");
        assert!(
            !fix.contains("  "),
            "the message reads as one sentence: {fix:?}"
        );
    }
    // The backend's laws, and data wider than the latent, are not refused as settings (where no
    // GPU is found, opening it fails instead).
    for est in chains {
        if let Err(SagdError::InvalidSetting { name, fix, .. }) =
            est.on_with(Device::Cuda(0), &v, Bernoulli, &x, 1)
        {
            panic!("Bernoulli on the GPU refused: {name}: {fix}");
        }
    }
    assert!(Own.device_law().is_none());
    // Data that are not whole points.
    let (name, fix) =
        refused(Estimator::Bound { k: 1 }.on_with(Device::Cpu, &v, Bernoulli, &x[..5], 1));
    assert_eq!(name, "x");
    assert!(fix.contains("3 values"), "{fix}");
    // An encoder that does not read the decoder's outputs.
    let misfit = Vae {
        enc: Sequential::mlp(&[D, 6, 2 * D], Activation::Softplus),
        ..vae()
    };
    let (name, fix) =
        refused(Estimator::Bound { k: 1 }.on_with(Device::Cpu, &misfit, Bernoulli, &x, 1));
    assert_eq!(name, "encoder");
    assert!(fix.contains("give it 3 inputs"), "{fix}");
    // What fits runs, on every estimator.
    for est in [
        Estimator::Bound { k: 2 },
        Estimator::Hmc(HmcChains {
            hmc: Default::default(),
            transitions: 3,
        }),
        Estimator::Sagd(Default::default()),
    ] {
        let mut e = est.on_with(Device::Cpu, &v, Bernoulli, &x, 1).unwrap();
        let p = v.init(1);
        let (mut gd, mut ge) = (vec![0.0f32; p.dec.len()], vec![0.0f32; p.enc.len()]);
        let loss = e.estimate(&p, &[0, 2], &mut gd, &mut ge).unwrap();
        assert!(
            loss.is_finite() && gd.iter().all(|g| g.is_finite()),
            "{est:?}"
        );
        assert!(gd.iter().any(|g| *g != 0.0), "{est:?}");
    }
}

#[test]
fn sagd_chains_under_a_count_likelihood_estimate_the_posterior_mean_gradient() {
    use sagd_nn::train::{ChainEstimator, LangevinChains};
    // One latent, two counts per point: p(u | x; θ) ∝ N(u; 0, 1) Π_j Poisson(x_j; e^{h_j(u)}).
    let v = Vae {
        d: 1,
        dec: Sequential::mlp(&[1, 8, 2], Activation::Tanh),
        enc: Sequential::mlp(&[2, 8, 2], Activation::Softplus),
    };
    let p = v.init(3);
    let point = [2.0f32, 9.0];
    // The exact gradient E[−∇θ log p(x | h(u))] over the posterior, by quadrature on a grid
    // (u in [−8, 8], step 1/256; the posterior's sd is near 0.5, its tails past 8 below e^−30),
    // from the closed form: log p(x, u) = Σ_j x_j h_j − e^{h_j} − u²/2 up to constants, and
    // ∇θ log p(x | h) = J_θᵀ (x − e^h), one backward pass with each row weighted.
    let grid: Vec<f32> = (0..=4096).map(|i| -8.0 + i as f32 / 256.0).collect();
    let mut ws = Workspace::default();
    v.dec.forward(&p.dec, &grid, grid.len(), &mut ws);
    let h = ws.output().to_vec();
    let log_joint: Vec<f64> = grid
        .iter()
        .zip(h.chunks_exact(2))
        .map(|(u, h)| {
            let lik: f64 = (0..2)
                .map(|j| point[j] as f64 * h[j] as f64 - (h[j] as f64).exp())
                .sum();
            lik - 0.5 * (*u as f64).powi(2)
        })
        .collect();
    let top = log_joint.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let w: Vec<f64> = log_joint.iter().map(|l| (l - top).exp()).collect();
    let mass: f64 = w.iter().sum();
    let dy: Vec<f32> = h
        .chunks_exact(2)
        .zip(&w)
        .flat_map(|(h, w)| {
            (0..2).map(move |j| (-w / mass * (point[j] as f64 - (h[j] as f64).exp())) as f32)
        })
        .collect();
    let mut g = vec![0.0f32; p.dec.len()];
    v.dec.backward(&p.dec, &mut ws, &dy, Some(&mut g), None);
    let exact: Vec<f64> = g.iter().map(|g| *g as f64).collect();
    // SAGD's estimate on 500 copies of the point: BAOAB chains (δ = 0.02: its bias in position
    // is O(δ²), far under the Monte Carlo error here), burnt in for 1000 steps, averaging
    // ∇θ over 200 more; 16 seeds.
    let x: Vec<f32> = point.iter().copied().cycle().take(2 * 500).collect();
    let batch: Vec<usize> = (0..500).collect();
    let s = LangevinChains {
        steps: 200,
        burn_in: 1000,
        ..LangevinChains::default()
    };
    let estimates: Vec<Vec<f64>> = (0..16)
        .map(|seed| {
            let mut e = ChainEstimator::sagd_with(&v, Poisson, &x, &s, 40 + seed).unwrap();
            let (mut gd, mut ge) = (vec![0.0f32; p.dec.len()], vec![0.0f32; p.enc.len()]);
            e.estimate(&p, &batch, &mut gd, &mut ge).unwrap();
            gd.iter().map(|g| *g as f64).collect()
        })
        .collect();
    // Two fixed directions: the exact gradient's, and one that does not depend on it. Along
    // each, the 16 estimates' mean against the exact value in units of its standard error
    // (Student's t with 15 degrees of freedom: |t| > 4.07 with probability 0.001).
    let norm = exact.iter().map(|e| e * e).sum::<f64>().sqrt();
    let along_exact: Vec<f64> = exact.iter().map(|e| e / norm).collect();
    let other: Vec<f64> = (0..exact.len())
        .map(|j| ((j * 7 % 5) as f64 - 2.0) / 3.0)
        .collect();
    for (name, dir) in [
        ("the exact gradient", along_exact),
        ("a fixed direction", other),
    ] {
        let dot = |g: &[f64]| g.iter().zip(&dir).map(|(a, b)| a * b).sum::<f64>();
        let proj: Vec<f64> = estimates.iter().map(|g| dot(g)).collect();
        let mean = proj.iter().sum::<f64>() / 16.0;
        let sd = (proj.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / 15.0).sqrt();
        let t = (mean - dot(&exact)) / (sd / 4.0);
        assert!(
            t.abs() < 4.07,
            "along {name}: {mean} ± {} vs exact {} (t = {t})",
            sd / 4.0,
            dot(&exact)
        );
    }
}

#[test]
fn kept_passes_give_the_same_theta_gradient_with_data_wider_than_the_latent() {
    let v = vae();
    let (x, p) = (data("bernoulli"), params("bernoulli"));
    let rows = [0usize, 1, 2, 3];
    let u = [0.1f32, -0.7, 1.3, 0.4, -1.9, 0.8, 0.05, -0.3];
    let plain = DecoderPosterior::with_likelihood(&v.dec, &Bernoulli, &x);
    let fresh = |uu: &[f32]| {
        let mut g = vec![0.0f32; p.dec.len()];
        plain.add_grad_theta(&p.dec, &rows, uu, &mut g).unwrap();
        g
    };
    let kept = DecoderPosterior::with_likelihood(&v.dec, &Bernoulli, &x).keeping_passes(true);
    let (mut lp, mut gu) = (vec![0.0f32; 4], vec![0.0f32; 8]);
    // The same latents (the kept pass alone), then point 2's moved (the kept pass for the other
    // three, a pass of its own for it).
    let mut moved = u;
    moved[4] = 0.9;
    for uu in [&u, &moved] {
        kept.log_joint(&p.dec, &rows, &u, &mut lp, &mut gu).unwrap();
        let mut g = vec![0.0f32; p.dec.len()];
        kept.add_grad_theta(&p.dec, &rows, uu, &mut g).unwrap();
        for (a, b) in g.iter().zip(&fresh(uu)) {
            assert!((a - b).abs() <= 1e-5 * (1.0 + b.abs()), "{a} vs {b}");
        }
    }
    assert_eq!(kept.reused_passes(), 2);
}

#[test]
fn training_under_a_likelihood_is_the_same_bits_on_any_number_of_threads() {
    use sagd::run::{Identity, Runner};
    use sagd_nn::train::{LangevinChains, TrainSettings, Training};
    let v = vae();
    let x: Vec<f32> = data("poisson").into_iter().cycle().take(P * 300).collect();
    let p0 = params("poisson");
    let s = TrainSettings {
        epochs: 3,
        batch_size: 100,
        lr: 1e-3,
        lr_decay: 0.0,
        averaging: sagd::optim::Averaging::None,
    };
    let run = |threads: usize, est: Estimator| {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .unwrap();
        pool.install(|| {
            let mut e = est.on_with(Device::Cpu, &v, Poisson, &x, 5).unwrap();
            let job = Training::new(&v, &mut *e, &s, 300, Identity::new()).unwrap();
            let mut st = job.init(p0.clone(), 1);
            let mut runner = Runner::new(job);
            runner.run(&mut st).unwrap();
            runner.solver.finish(&st)
        })
    };
    for est in [
        Estimator::Bound { k: 3 },
        Estimator::Sagd(LangevinChains::default()),
    ] {
        let one = run(1, est);
        assert_ne!(one.dec, p0.dec);
        assert_eq!(one, run(3, est), "{est:?}");
    }
}
