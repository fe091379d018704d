//! The held-out criterion of `deconvolve` on data where one fitted model is better by
//! construction: a bimodal latent law (modes 10 noise sds apart, which a barely trained VAE
//! cannot yet separate) fitted by a VAE pre-trained for 15 epochs and the same VAE fine-tuned for
//! 400 more. The criterion must pick the fine-tuned one, and be sure of it.

use sagd::rng::NormalStream;
use sagd_apps::debias::choose::Confidence;
use sagd_apps::debias::{deconvolve, E2Settings, Method, RunOptions};

#[test]
fn the_held_out_criterion_picks_the_model_trained_longer() {
    let n = 1000;
    let mut normals = NormalStream::new(5);
    let x: Vec<f64> = (0..n)
        .map(|i| {
            let mode = if i % 2 == 0 { -2.5 } else { 2.5 };
            mode + 0.5 * normals.draw()
        })
        .collect();
    let s = E2Settings {
        methods: vec![Method::Vae],
        batch_size: n,
        pretrain_epochs: 15,
        finetune_epochs: 400,
        m: 4000,
        ..E2Settings::default()
    };
    let d = deconvolve(&s, &x, 0.5, 0.2, 1, &RunOptions::default(), &|_, _, _| {}).unwrap();
    let h = d.held_out.expect("a held-out comparison");
    assert_eq!(h.n, 200);
    assert_eq!(h.best, "vae", "{h:?}");
    assert_eq!(h.confidence, Confidence::Clear, "{h:?}");
    let pretrained = &h.scores[1];
    assert_eq!(pretrained.model, "pretrained");
    assert!(
        pretrained.below_best > 3.0 * pretrained.below_best_se,
        "{h:?}"
    );
    // Trained on the other 800 observations only.
    assert_eq!(d.settings.n, 800);
    // And the model it picks is nearer the truth: Z's sd is √(2.5² + 0.5²) ≈ 2.55.
    let sd = |z: &[f64]| {
        let m = z.iter().sum::<f64>() / z.len() as f64;
        (z.iter().map(|v| (v - m).powi(2)).sum::<f64>() / z.len() as f64).sqrt()
    };
    let truth = (2.5f64.powi(2) + 0.25).sqrt();
    let (tuned, pre) = (sd(&d.samples["vae"]), sd(&d.samples["pretrained"]));
    eprintln!("sd of Z: fine-tuned {tuned:.3}, pre-trained {pre:.3}, truth {truth:.3}");
    assert!((tuned - truth).abs() < (pre - truth).abs(), "{tuned} {pre}");
}

#[test]
fn a_holdout_outside_its_range_is_named() {
    let x: Vec<f64> = (0..10).map(|i| i as f64).collect();
    for bad in [-0.1, 0.6, f64::NAN] {
        let e = deconvolve(
            &E2Settings::default(),
            &x,
            1.0,
            bad,
            0,
            &RunOptions::default(),
            &|_, _, _| {},
        )
        .unwrap_err();
        assert!(format!("{e}").contains("holdout"), "{e}");
    }
}
