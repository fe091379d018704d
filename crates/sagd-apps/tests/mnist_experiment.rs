//! E3 end to end on a few hundred images: every output, the pre-trained cache, and an interrupted
//! run resumed to the same result.

use sagd::error::SagdError;
use sagd_apps::mnist::experiment::{run, E3Options, E3Settings};
use sagd_apps::mnist::model::Chains;
use sagd_apps::mnist::{self, Mnist};

fn tiny() -> E3Settings {
    E3Settings {
        latent: 4,
        train_n: 400,
        batch_size: 100,
        vae_epochs: 2,
        sagd_updates: 3,
        chains: Chains {
            per_image: 2,
            steps: 2,
            ..Chains::default()
        },
        eval_n: 20,
        eval_k: 50,
        ..E3Settings::default()
    }
}

fn data() -> Mnist {
    let m = mnist::load(&mnist::shipped_dir()).unwrap();
    Mnist {
        train: m.train.head(400),
        test: m.test.head(20),
    }
}

#[test]
fn a_tiny_run_writes_everything_and_resumes_to_the_same_result() {
    let (s, d) = (tiny(), data());
    let dir = tempfile::tempdir().unwrap();
    let none = |_: &str, _: usize, _: usize| {};
    let whole = run(&s, &d, &E3Options::default(), &none).unwrap();
    assert_eq!(whole.curves.len(), 3);
    assert_eq!(whole.curves[0].loss.len(), 8);
    assert_eq!(whole.curves[1].loss.len(), 3);
    assert!(whole
        .curves
        .iter()
        .all(|c| c.loss.iter().all(|v| v.is_finite())));
    // The VAE's loss falls over its first epochs (it starts near 784 ln 2 ≈ 543).
    let pre = &whole.curves[0].loss;
    assert!(pre[0] > 400.0 && pre[7] < pre[0], "{pre:?}");
    assert_eq!(whole.evaluations.len(), 3);
    for e in &whole.evaluations {
        assert_eq!(e.per_image.len(), 20);
        assert!(e.log_px < 0.0 && e.log_px >= e.elbo, "{e:?}");
    }
    assert_eq!(whole.differences.len(), 3);
    // The SAGD-refined generator moved; the encoder did not.
    assert_ne!(whole.sagd.dec, whole.pretrained.dec);
    assert_eq!(whole.sagd.enc, whole.pretrained.enc);
    assert_ne!(whole.control.enc, whole.pretrained.enc);

    // Stopped every 2 updates and resumed each time, through all three phases, it ends where the
    // uninterrupted run does; then a run with the pre-trained cache starts at the refinement.
    let opts = E3Options {
        checkpoint_dir: Some(dir.path().join("ckpt")),
        checkpoint_every: 1,
        resume: true,
        pretrained_cache: Some(dir.path().join("cache")),
        interrupt_after: Some(2),
        ..E3Options::default()
    };
    let mut stops = 0;
    let resumed = loop {
        match run(&s, &d, &opts, &none) {
            Ok(r) => break r,
            Err(SagdError::Interrupted { .. }) => stops += 1,
            Err(e) => panic!("{e}"),
        }
        assert!(stops <= 7, "no progress");
    };
    assert!(stops >= 5, "{stops} stops");
    // Pre-training finished in an earlier run, which cached it.
    assert!(resumed.pretrained_cached);
    assert!(resumed.pretrained == whole.pretrained);
    assert!(resumed.sagd == whole.sagd && resumed.control == whole.control);
    assert!(resumed.evaluations == whole.evaluations);
    let cached = E3Options {
        checkpoint_dir: None,
        interrupt_after: None,
        ..opts
    };
    let again = run(&s, &d, &cached, &none).unwrap();
    assert!(again.pretrained_cached && again.sagd == whole.sagd);
}

#[test]
fn bad_settings_name_the_setting_and_the_fix() {
    let d = data();
    let none = |_: &str, _: usize, _: usize| {};
    for (s, name) in [
        (
            E3Settings {
                train_n: 401,
                ..tiny()
            },
            "train_n",
        ),
        (
            E3Settings {
                eval_n: 21,
                ..tiny()
            },
            "eval_n",
        ),
        (
            E3Settings {
                batch_size: 0,
                ..tiny()
            },
            "batch_size",
        ),
        (
            E3Settings {
                chains: Chains {
                    delta: -1.0,
                    ..Chains::default()
                },
                ..tiny()
            },
            "delta",
        ),
    ] {
        match run(&s, &d, &E3Options::default(), &none) {
            Err(e) => assert!(e.to_string().contains(name), "{e}"),
            Ok(_) => panic!("{name}: accepted"),
        }
    }
}
