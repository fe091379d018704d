//! The VAE's gradients: the posterior's ∇u and ∇θ, and the ELBO and IWAE estimators' gradients,
//! against central differences of the same (fixed-noise) estimates; determinism of a replication.
#![allow(clippy::needless_range_loop)]

use sagd::model::LatentModel;
use sagd_nn::debias::RunOptions;
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
    let mut lp = vec![0.0f32; 5];
    let mut gu = vec![0.0f32; 5];
    post.log_joint(&p.dec, &rows, &u, &mut lp, &mut gu).unwrap();
    let total = |th: &[f32], uu: &[f32]| -> f64 {
        let mut l = vec![0.0f32; 5];
        let mut g = vec![0.0f32; 5];
        post.log_joint(th, &rows, uu, &mut l, &mut g).unwrap();
        l.iter().map(|v| *v as f64).sum()
    };
    let h = 1e-2f32;
    for r in 0..5 {
        let (mut up, mut um) = (u.clone(), u.clone());
        up[r] += h;
        um[r] -= h;
        let fd = (total(&p.dec, &up) - total(&p.dec, &um)) / (2.0 * h as f64);
        assert!(
            (gu[r] as f64 - fd).abs() < 2e-3 * (1.0 + fd.abs()),
            "∂u[{r}]: {} vs {fd}",
            gu[r]
        );
    }
    let mut gt = vec![0.0f32; p.dec.len()];
    post.add_grad_theta(&p.dec, &rows, &u, &mut gt).unwrap();
    for j in 0..p.dec.len() {
        let (mut tp, mut tm) = (p.dec.clone(), p.dec.clone());
        tp[j] += h;
        tm[j] -= h;
        let fd = (total(&tp, &u) - total(&tm, &u)) / (2.0 * h as f64);
        assert!(
            (gt[j] as f64 - fd).abs() < 2e-3 * (1.0 + fd.abs()),
            "∂θ[{j}]: {} vs {fd}",
            gt[j]
        );
    }
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
fn a_replication_is_deterministic_and_thread_independent() {
    use sagd_nn::debias::E2Settings;
    let s = E2Settings {
        n: 1100,
        hidden: 8,
        batch_size: 1100,
        pretrain_epochs: 60,
        finetune_epochs: 8,
        m: 5000,
        ..Default::default()
    };
    // 1100 points: 34 pieces of 32 rows per pass, however many threads take them.
    let a = on_threads(1, &s, "mixture", 3);
    for threads in [2, 16] {
        assert_eq!(
            strip(&a),
            strip(&on_threads(threads, &s, "mixture", 3)),
            "{threads} threads"
        );
    }
    assert_eq!(a.methods.len(), 4);
}

/// Replication `seed` of `dist` on a pool of `threads` threads.
fn on_threads(
    threads: usize,
    s: &sagd_nn::debias::E2Settings,
    dist: &str,
    seed: u64,
) -> sagd_nn::debias::Replication {
    let law = dist.parse::<sagd_nn::debias::Case>().unwrap().law();
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .unwrap();
    pool.install(|| {
        sagd_nn::debias::replicate(s, &law, seed, &RunOptions::default(), &|_, _, _| {}).unwrap()
    })
}

/// A replication's JSON without its wall times and where its pre-training came from.
fn strip(r: &sagd_nn::debias::Replication) -> serde_json::Value {
    let mut v = serde_json::to_value(r).unwrap();
    v["pretrain_time_s"] = serde_json::Value::Null;
    v.as_object_mut().unwrap().remove("pretrained_from");
    for m in v["methods"].as_object_mut().unwrap().values_mut() {
        m["time_s"] = serde_json::Value::Null;
    }
    v
}

#[test]
fn wide_networks_split_a_minibatch_into_chunks_and_stay_thread_independent() {
    use sagd_nn::debias::E2Settings;
    // Width 256: at most 128 rows per chunk (width 64: 512); a 600-point batch runs as 19
    // chunks of 32 points whose gradient terms are kept (19 copies of the gradients would not
    // stay in cache), and the chains as 19 blocks.
    assert_eq!(Vae::new(2, 256).chunk_rows(), 128);
    assert_eq!(Vae::new(1, 64).chunk_rows(), sagd_nn::CHUNK_ROWS);
    let s = E2Settings {
        n: 600,
        p: 2,
        hidden: 256,
        batch_size: 600,
        pretrain_epochs: 3,
        finetune_epochs: 2,
        m: 2000,
        ..Default::default()
    };
    let one = strip(&on_threads(1, &s, "highdim", 2));
    for threads in [2, 16] {
        assert_eq!(
            one,
            strip(&on_threads(threads, &s, "highdim", 2)),
            "{threads} threads"
        );
    }
}

#[test]
fn a_cached_pretraining_gives_the_same_replication() {
    use sagd_nn::debias::{replicate, E2Settings};
    let s = E2Settings {
        n: 200,
        hidden: 8,
        batch_size: 200,
        pretrain_epochs: 30,
        finetune_epochs: 4,
        m: 2000,
        ..Default::default()
    };
    let law = sagd_nn::debias::Case::Exp.law();
    let dir = tempfile::tempdir().unwrap();
    let cached = RunOptions {
        pretrained_cache: Some(dir.path().join("cache")),
        ..Default::default()
    };
    let go = |o: &RunOptions| replicate(&s, &law, 4, o, &|_, _, _| {}).unwrap();
    let plain = go(&RunOptions::default());
    let first = go(&cached);
    let second = go(&cached);
    assert!(first.pretrained_from.is_none());
    let file = second.pretrained_from.clone().expect("read from the cache");
    assert_eq!(second.pretrain_time_s, first.pretrain_time_s);
    assert_eq!(strip(&plain), strip(&first));
    assert_eq!(strip(&plain), strip(&second));
    // Another seed is another file.
    let other = replicate(&s, &law, 5, &cached, &|_, _, _| {}).unwrap();
    assert!(other.pretrained_from.is_none());
    // A damaged file is an error that names it and says what to do.
    std::fs::write(&file, "{\"format\": 1").unwrap();
    let e = replicate(&s, &law, 4, &cached, &|_, _, _| {})
        .unwrap_err()
        .to_string();
    assert!(
        e.contains(&file.display().to_string()) && e.contains("delete"),
        "{e}"
    );
}

#[test]
fn the_trace_evaluates_the_current_iterate_at_the_asked_epochs() {
    use sagd_nn::debias::{replicate, E2Settings};
    let s = E2Settings {
        n: 200,
        hidden: 8,
        batch_size: 200,
        pretrain_epochs: 20,
        finetune_epochs: 6,
        m: 2000,
        ..Default::default()
    };
    let law = sagd_nn::debias::Case::Exp.law();
    let traced = RunOptions {
        trace_every: 2,
        ..Default::default()
    };
    let a = replicate(&s, &law, 6, &traced, &|_, _, _| {}).unwrap();
    let b = replicate(&s, &law, 6, &RunOptions::default(), &|_, _, _| {}).unwrap();
    for (k, m) in &a.methods {
        let epochs: Vec<usize> = m.trace.iter().map(|t| t.epoch).collect();
        assert_eq!(epochs, [2, 4, 6], "{k}");
        // Tracing reads the iterate and changes nothing.
        assert_eq!(m.eval, b.methods[k].eval, "{k}");
        assert!(b.methods[k].trace.is_empty());
    }
    // Without averaging the last traced iterate is the one returned.
    let vae = &a.methods["vae"];
    let last = vae.trace.last().unwrap();
    assert_eq!(
        (last.ks, last.w1, last.loglik),
        (vae.eval.ks, vae.eval.w1, vae.eval.loglik)
    );
    assert_eq!(last.loss, vae.final_loss);
}

#[test]
fn minibatches_and_several_dimensions_run_and_are_deterministic() {
    use sagd_nn::debias::{replicate, E2Settings};
    let s = E2Settings {
        n: 120,
        p: 3,
        hidden: 8,
        batch_size: 50,
        pretrain_epochs: 4,
        finetune_epochs: 2,
        m: 3000,
        ..Default::default()
    };
    let law = sagd_nn::debias::Case::Highdim.law();
    let a = replicate(&s, &law, 1, &RunOptions::default(), &|_, _, _| {}).unwrap();
    let b = replicate(&s, &law, 1, &RunOptions::default(), &|_, _, _| {}).unwrap();
    for (k, v) in &a.methods {
        assert_eq!(v.eval.w1, b.methods[k].eval.w1, "{k}");
        assert!(v.eval.w1_se.is_some() && v.eval.loglik.is_none(), "{k}");
        assert!(v.eval.w1.is_finite(), "{k}");
    }
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
