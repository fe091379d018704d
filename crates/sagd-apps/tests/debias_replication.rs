//! A replication of the debiased VAE (E2): deterministic and independent of the thread count,
//! split into chunks on wide networks, the same from a cached pre-training, and its trace; bad
//! chain settings refused before any work.

use sagd_apps::debias::RunOptions;
use sagd_nn::vae::Vae;

#[test]
fn a_replication_is_deterministic_and_thread_independent() {
    use sagd_apps::debias::E2Settings;
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
    s: &sagd_apps::debias::E2Settings,
    dist: &str,
    seed: u64,
) -> sagd_apps::debias::Replication {
    let law = dist.parse::<sagd_apps::debias::Case>().unwrap().law();
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .unwrap();
    pool.install(|| {
        sagd_apps::debias::replicate(s, &law, seed, &RunOptions::default(), &|_, _, _| {}).unwrap()
    })
}

/// A replication's JSON without its wall times and where its pre-training came from.
fn strip(r: &sagd_apps::debias::Replication) -> serde_json::Value {
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
    use sagd_apps::debias::E2Settings;
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
    use sagd_apps::debias::{replicate, E2Settings};
    let s = E2Settings {
        n: 200,
        hidden: 8,
        batch_size: 200,
        pretrain_epochs: 30,
        finetune_epochs: 4,
        m: 2000,
        ..Default::default()
    };
    let law = sagd_apps::debias::Case::Exp.law();
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
    // Every single-bit flip of the cache file is refused by its frame's checksum, before any of
    // its numbers are used; one of them end to end, through the replication.
    let good = std::fs::read(&file).unwrap();
    let probe = dir.path().join("probe.cache");
    for i in 0..good.len() {
        for bit in 0..8 {
            let mut bad = good.clone();
            bad[i] ^= 1 << bit;
            std::fs::write(&probe, &bad).unwrap();
            assert!(
                sagd::run::read_framed(&probe).is_err(),
                "byte {i}, bit {bit} accepted"
            );
        }
    }
    let mut flipped = good.clone();
    let mid = flipped.len() / 2;
    flipped[mid] ^= 0x04;
    std::fs::write(&file, &flipped).unwrap();
    let e = replicate(&s, &law, 4, &cached, &|_, _, _| {})
        .unwrap_err()
        .to_string();
    assert!(e.contains("damaged") && e.contains("delete"), "{e}");
    // A file that is not one at all is an error that names it and says what to do.
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
    use sagd_apps::debias::{replicate, E2Settings};
    let s = E2Settings {
        n: 200,
        hidden: 8,
        batch_size: 200,
        pretrain_epochs: 20,
        finetune_epochs: 6,
        m: 2000,
        ..Default::default()
    };
    let law = sagd_apps::debias::Case::Exp.law();
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
    use sagd_apps::debias::{replicate, E2Settings};
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
    let law = sagd_apps::debias::Case::Highdim.law();
    let a = replicate(&s, &law, 1, &RunOptions::default(), &|_, _, _| {}).unwrap();
    let b = replicate(&s, &law, 1, &RunOptions::default(), &|_, _, _| {}).unwrap();
    for (k, v) in &a.methods {
        assert_eq!(v.eval.w1, b.methods[k].eval.w1, "{k}");
        assert!(v.eval.w1_se.is_some() && v.eval.loglik.is_none(), "{k}");
        assert!(v.eval.w1.is_finite(), "{k}");
    }
}

/// Table 1's replications split over 2 and 3 processes (threads of this one standing in for
/// them, `sagd::share`): on 2, a replication each; on 3, more processes than replications, so
/// each replication's methods are split. Every process ends with the whole table, the same bits
/// as one process, with the draws and decoders that the result file leaves out.
#[test]
fn replications_split_over_processes_are_those_of_one_process() {
    use sagd::share::threads_as_processes;
    use sagd_apps::debias::{run_table, Case, E2Settings};
    let s = E2Settings {
        n: 200,
        hidden: 8,
        batch_size: 200,
        pretrain_epochs: 20,
        finetune_epochs: 4,
        m: 2000,
        ..Default::default()
    };
    let case: Case = "exp".parse().unwrap();
    let go = || {
        run_table(
            &s,
            case,
            false,
            &[0, 1],
            &RunOptions::default(),
            &|_, _, _| {},
        )
        .unwrap()
    };
    let whole = go();
    assert!(!whole.replications[0].samples.is_empty());
    for processes in [2, 3] {
        let tables = threads_as_processes(processes, go);
        for (rank, t) in tables.iter().enumerate() {
            assert_eq!(t.replications.len(), 2);
            for (a, b) in t.replications.iter().zip(&whole.replications) {
                let at = format!("{processes} processes, rank {rank}, seed {}", b.seed);
                assert_eq!(strip(a), strip(b), "{at}");
                assert_eq!(a.samples, b.samples, "{at}");
                assert_eq!(a.decoders, b.decoders, "{at}");
                assert_eq!(a.x, b.x, "{at}");
            }
        }
    }
}

/// Every chain setting SAGD's estimators would refuse is refused by the settings' check, which
/// runs before the pre-training: a bad `--sagd-refresh-every` must not cost the other methods'
/// work first.
#[test]
fn bad_chain_settings_are_refused_before_any_work() {
    use sagd::error::SagdError;
    use sagd_apps::debias::E2Settings;
    use sagd_nn::train::ChainSchedule;
    let base = E2Settings::default();
    assert!(base.validate().is_ok());
    let mut cases = Vec::new();
    for (name, change) in [
        (
            "sagd refresh_every",
            Box::new(|s: &mut E2Settings| s.method.sagd.refresh_every = Some(0))
                as Box<dyn Fn(&mut E2Settings)>,
        ),
        (
            "sagd chains_per_point",
            Box::new(|s: &mut E2Settings| s.method.sagd.chains_per_point = Some(0)),
        ),
        (
            "sagd schedule",
            Box::new(|s: &mut E2Settings| {
                s.method.sagd.schedule = Some(ChainSchedule {
                    decay: -1.0,
                    growth: 0.0,
                    updates: 10,
                })
            }),
        ),
        (
            "delta",
            Box::new(|s: &mut E2Settings| s.method.sagd.step_size = 0.0),
        ),
    ] {
        let mut s = base.clone();
        change(&mut s);
        cases.push((name, s.validate()));
    }
    for (name, got) in cases {
        match got {
            Err(SagdError::InvalidSetting { name: n, .. }) => assert_eq!(n, name),
            other => panic!("{name}: {other:?}"),
        }
    }
}
