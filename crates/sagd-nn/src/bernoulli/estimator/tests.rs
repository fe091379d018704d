use super::super::tests::{small_vae, PX};
use super::*;

#[test]
fn a_schedule_sets_each_update_s_chains_and_its_count_is_checkpointed() {
    let model = small_vae(4);
    let images: Vec<u8> = (0..2 * PX).map(|i| (i * 37 % 256) as u8).collect();
    let chains = Chains {
        schedule: Some(crate::train::ChainSchedule {
            decay: 0.5,
            growth: 1.0,
            updates: 0,
        }),
        ..Chains::default()
    }
    .over(100);
    // δ_t = δ/√(1 + t); K_t grows to about twice K, 500 steps in all as K = 5 fixed.
    let at: Vec<Chains> = (0..100).map(|t| chains.at(t)).collect();
    assert_eq!((at[0].delta, at[3].delta), (0.01, 0.005));
    let total: usize = at.iter().map(|c| c.steps).sum();
    assert!((total as i64 - 500).abs() <= 50, "{total}");
    assert!(at.windows(2).all(|w| w[1].steps >= w[0].steps) && at[99].steps == 10);
    assert_eq!(Chains::default().at(7), Chains::default());
    let mut est = BernoulliEstimator::new(&model, &images, Objective::Sagd(chains), 3);
    est.update = 7;
    let saved = est.save_state().unwrap();
    let mut again = BernoulliEstimator::new(&model, &images, Objective::Sagd(chains), 3);
    again.load_state(&saved).unwrap();
    assert_eq!((again.update, &again.streams), (7, &est.streams));
    // A checkpoint from before the count: the streams alone, at update 0.
    again.load_state(&encode(&est.streams).unwrap()).unwrap();
    assert_eq!((again.update, &again.streams), (0, &est.streams));
    assert!(again.load_state(&[1, 2, 3]).is_err());
}

/// A pass whose loss overflows stops the run with the error naming its update (1-based).
#[test]
fn a_non_finite_loss_names_its_update() {
    let model = small_vae(2);
    let images: Vec<u8> = (0..4 * PX).map(|i| (i * 37 % 256) as u8).collect();
    let mut p = model.init(1);
    let mut est = BernoulliEstimator::new(&model, &images, Objective::Vae, 3);
    let (mut gd, mut ge) = (vec![0.0; p.dec.len()], vec![0.0; p.enc.len()]);
    est.estimate(&p, &[0, 1], &mut gd, &mut ge).expect("finite");
    p.dec.iter_mut().for_each(|w| *w = f32::INFINITY);
    match est.estimate(&p, &[2, 3], &mut gd, &mut ge) {
        Err(SagdError::NonFiniteUpdate { iteration }) => assert_eq!(iteration, 2),
        other => panic!("{other:?}"),
    }
}

#[test]
fn draws_made_ahead_are_the_draws_in_turn() {
    let model = small_vae(20);
    let images: Vec<u8> = (0..4 * PX).map(|i| (i * 37 % 256) as u8).collect();
    let objective = Objective::Sagd(Chains::default());
    let batches: [&[usize]; 4] = [&[0, 1], &[2, 3], &[1], &[3]];
    // In turn.
    let mut a = BernoulliEstimator::new(&model, &images, objective, 7);
    let turn: Vec<_> = batches
        .iter()
        .map(|b| {
            a.draw(b).unwrap();
            (a.x.clone(), a.noise.clone(), a.streams.clone())
        })
        .collect();
    // Each update's draws made ahead for the next update's size: taken where the sizes
    // agree (the second and fourth), dropped where they do not (the third).
    let mut b = BernoulliEstimator::new(&model, &images, objective, 7);
    for (k, batch) in batches.iter().enumerate() {
        b.draw(batch).unwrap();
        assert_eq!(
            (&b.x, &b.noise, &b.streams),
            (&turn[k].0, &turn[k].1, &turn[k].2)
        );
        let len = b.noise_len(batch.len(), b.update);
        b.ahead = Some(Ahead::draw(&b.streams, batch.len() * PX, len));
        // Its streams stay those of the draws used: what a checkpoint saves.
        assert_eq!(b.streams, turn[k].2);
    }
}

/// Each update's generator gradient at the same parameters `p`, on the minibatch of every
/// image, for `chains`; the estimator after them.
fn gradients<'a>(
    model: &'a BernoulliVae,
    images: &'a [u8],
    p: &VaeParams,
    chains: Chains,
    updates: usize,
) -> (Vec<Vec<f32>>, BernoulliEstimator<'a>) {
    let mut est = BernoulliEstimator::new(model, images, Objective::Sagd(chains), 5);
    let batch: Vec<usize> = (0..images.len() / model.pixels()).collect();
    let grads = (0..updates)
        .map(|_| {
            let mut g = vec![0.0f32; p.dec.len()];
            est.estimate(p, &batch, &mut g, &mut []).unwrap();
            g
        })
        .collect();
    (grads, est)
}

#[test]
fn persistent_chains_continue_between_visits_and_restart_every_r_th() {
    let model = small_vae(3);
    let images: Vec<u8> = (0..3 * PX).map(|i| (i * 53 % 256) as u8).collect();
    let p = model.init(2);
    let fresh = Chains {
        per_image: 2,
        steps: 3,
        ..Chains::default()
    };
    let persistent = Chains {
        refresh_every: Some(2),
        ..fresh
    };
    let (a, _) = gradients(&model, &images, &p, fresh, 3);
    let (b, est) = gradients(&model, &images, &p, persistent, 3);
    // Visits 1 and 3 start from the encoder on the same draws: the same gradient (whole
    // transitions leave the positions as cut ones). Visit 2 continues the chains of visit 1.
    assert_eq!(a[0], b[0]);
    assert_ne!(a[1], b[1]);
    assert_eq!(a[2], b[2]);
    // The kept chains resume: a checkpoint's estimator takes the same fourth update.
    let saved = est.save_state().unwrap();
    let mut again = BernoulliEstimator::new(&model, &images, Objective::Sagd(persistent), 9);
    again.load_state(&saved).unwrap();
    let (mut est, batch) = (est, [0, 1, 2]);
    let (mut g1, mut g2) = (vec![0.0f32; p.dec.len()], vec![0.0f32; p.dec.len()]);
    est.estimate(&p, &batch, &mut g1, &mut []).unwrap();
    again.estimate(&p, &batch, &mut g2, &mut []).unwrap();
    assert_eq!(g1, g2);
    // A GPU takes them in a run of one process (where none opens, it fails to open, not
    // on the chains), and refuses them by name, before it looks for a device, in a split run.
    let on_gpu = || {
        let est = BernoulliEstimator::on(
            Device::Cuda(0),
            &model,
            &images,
            Objective::Sagd(persistent),
            5,
        );
        est.err().map(|e| e.to_string()).unwrap_or_default()
    };
    let alone = on_gpu();
    assert!(!alone.contains("refresh-every"), "{alone}");
    for err in sagd::share::threads_as_processes(2, on_gpu) {
        assert!(
            err.contains("refresh-every") && err.contains("one GPU's process"),
            "{err}"
        );
    }
    // Images that are not whole rows of the model's pixels, on either device.
    for device in [Device::Cpu, Device::Cuda(0)] {
        let cut = BernoulliEstimator::on(device, &model, &images[1..], Objective::Vae, 5);
        let err = cut.err().map(|e| e.to_string()).unwrap_or_default();
        assert!(
            err.contains("whole images of the generator's 6 pixels"),
            "{err}"
        );
    }
    // A minibatch beyond the images (a job told of more points than there are) is refused
    // by name, and the estimator's streams do not move.
    let mut est = BernoulliEstimator::new(&model, &images, Objective::Vae, 5);
    let before = est.streams.clone();
    let mut g = (vec![0.0f32; p.dec.len()], vec![0.0f32; p.enc.len()]);
    let err = est.estimate(&p, &[0, 3], &mut g.0, &mut g.1).unwrap_err();
    assert!(err.to_string().contains("holds 3 images"), "{err}");
    assert_eq!((est.streams, est.update), (before, 0));
}

/// Chains that no pass could run are refused by `on`, by name, on either device (a GPU's
/// before it looks for a device), where the CPU's first pass used to find them.
#[test]
fn invalid_chains_are_refused_before_any_work() {
    let model = small_vae(3);
    let images: Vec<u8> = (0..3 * PX).map(|i| (i * 37 % 256) as u8).collect();
    let base = Chains::default();
    let schedule = crate::train::ChainSchedule {
        decay: -1.0,
        growth: 0.0,
        updates: 10,
    };
    for (bad, name) in [
        (Chains { delta: 0.5, ..base }, "delta"), // Euler at γδ = 1
        (
            Chains {
                gamma: f64::NAN,
                ..base
            },
            "gamma",
        ),
        (Chains { steps: 0, ..base }, "steps"),
        (
            Chains {
                per_image: 0,
                ..base
            },
            "chains",
        ),
        (
            Chains {
                refresh_every: Some(0),
                ..base
            },
            "refresh-every",
        ),
        (
            Chains {
                schedule: Some(schedule),
                ..base
            },
            "sagd schedule",
        ),
    ] {
        assert!(bad.validate().is_err(), "{name}");
        for device in [Device::Cpu, Device::Cuda(0)] {
            let r = BernoulliEstimator::on(device, &model, &images, Objective::Sagd(bad), 5);
            match r.err() {
                Some(SagdError::InvalidSetting { name: got, .. }) => assert_eq!(got, name),
                other => panic!("{name} on {device:?}: {other:?}"),
            }
        }
    }
    assert!(base.validate().is_ok());
    let step = base.step().expect("valid");
    assert_eq!((step.gamma(), step.delta()), (base.gamma, base.delta));
}
