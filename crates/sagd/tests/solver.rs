//! The SAGD solver: Theorem 3's rate on a convex problem, Theorem 4's convergence on a nonconvex one,
//! checkpoint/resume equality, thread-count independence, and the errors for invalid settings.

mod common;

use common::problems::{LogisticProblem, Loss};
use sagd::prelude::*;

fn mean(v: &[f64]) -> f64 {
    v.iter().sum::<f64>() / v.len() as f64
}

#[test]
fn convex_problem_converges_at_the_rate_of_theorem_3() {
    // F(θ) = E‖θ − ξ‖²/2 over logistic π with mean μ: F(θ) − F* = ‖θ − μ‖²/2 exactly.
    let mu = vec![1.0, -2.0];
    let problem = LogisticProblem::new(mu.clone(), 0.5, 1, Loss::Square);
    let settings = SagdSettings {
        schedules: Schedules::theorem3(0.2, 1.0, 0.5),
        update: UpdateRule {
            projection: Projection::Box {
                lower: vec![-5.0; 2],
                upper: vec![5.0; 2],
            },
            ..UpdateRule::sgd()
        },
        ..Default::default()
    };
    let solver = Sagd::new(settings);
    let seeds = 24;
    let mut err = Vec::new();
    for t_max in [16usize, 64, 256] {
        let e: Vec<f64> = (0..seeds)
            .map(|seed| {
                let mut st = solver
                    .init(&problem, &[0.0, 0.0], &[0.0, 0.0], seed)
                    .unwrap();
                Runner::new(solver.on(&problem, t_max))
                    .run(&mut st)
                    .unwrap();
                st.theta_avg()
                    .iter()
                    .zip(&mu)
                    .map(|(t, m)| (t - m).powi(2))
                    .sum::<f64>()
                    / 2.0
            })
            .collect();
        err.push(mean(&e));
    }
    println!("E F(θ̂_T) − F* at T = 16, 64, 256: {err:?}");
    // O(1/√T): each fourfold T at least halves the error (up to a factor for Monte Carlo noise).
    assert!(err[1] < 0.5 * 1.3 * err[0], "{err:?}");
    assert!(err[2] < 0.5 * 1.3 * err[1], "{err:?}");
    assert!(err[2] < 0.01, "{err:?}");
}

#[test]
fn nonconvex_problem_reaches_the_optimum_with_theorem_4() {
    // F(θ) = Σ E(1 − cos(θ_j − ξ_j)) starts in its concave region (|θ − μ| = 2 > π/2).
    let mu = vec![0.5, 1.0];
    let problem = LogisticProblem::new(mu.clone(), 0.5, 1, Loss::Cosine);
    // G = E cos(ξ − μ) ≈ 0.68 bounds ∇²F: α0 = 0.7 < 1/(2G).
    let settings = SagdSettings {
        schedules: Schedules::theorem4(0.2, 2.0, 0.25, 0.7),
        ..Default::default()
    };
    let solver = Sagd::new(settings);
    let theta0 = [mu[0] + 2.0, mu[1] - 2.0];
    let g0: f64 = problem.exact_grad(&theta0).iter().map(|g| g * g).sum();
    let mut dist = Vec::new();
    let mut g2 = Vec::new();
    for seed in 0..6 {
        let mut st = solver.init(&problem, &theta0, &mu, seed).unwrap();
        Runner::new(solver.on(&problem, 2000)).run(&mut st).unwrap();
        dist.push(
            st.theta
                .iter()
                .zip(&mu)
                .map(|(t, m)| (t - m).powi(2))
                .sum::<f64>()
                .sqrt(),
        );
        g2.push(
            problem
                .exact_grad(&st.theta)
                .iter()
                .map(|g| g * g)
                .sum::<f64>(),
        );
    }
    println!("‖θ_T − θ*‖ = {dist:?}, ‖∇F(θ_T)‖² = {g2:?} (from {g0})");
    assert!(mean(&dist) < 0.2, "{dist:?}");
    assert!(mean(&g2) < g0 / 50.0, "{g2:?}");
}

fn checkpoint_settings() -> SagdSettings {
    SagdSettings {
        schedules: Schedules::theorem3(0.1, 2.0, 0.3),
        langevin: LangevinSettings {
            scheme: Scheme::Ubu,
            gamma: 1.5,
        },
        update: UpdateRule::adam(Averaging::All),
        burn_in: 7,
        ..Default::default()
    }
}

#[test]
fn a_resumed_run_ends_bitwise_identical() {
    let problem = LogisticProblem::new(vec![1.0, -2.0, 0.5], 0.5, 6, Loss::Square);
    let solver = Sagd::new(checkpoint_settings());
    let theta0 = [0.0; 3];

    let mut whole = solver.init(&problem, &theta0, &[0.0; 3], 99).unwrap();
    let mut h1 = History::default();
    Runner::new(solver.on(&problem, 30))
        .observe(&mut h1)
        .run(&mut whole)
        .unwrap();

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("run.ckpt");
    let mut stop_at_20 = |s: &SagdState<f64>, _: &IterInfo| {
        if s.t == 20 {
            Control::Stop
        } else {
            Control::Continue
        }
    };
    let mut part = solver.init(&problem, &theta0, &[0.0; 3], 99).unwrap();
    let mut h2 = History::default();
    let mut r2 = Runner::new(solver.on(&problem, 30))
        .observe(&mut h2)
        .observe(&mut stop_at_20)
        .checkpoint(&path, 10);
    assert_eq!(r2.run(&mut part).unwrap(), sagd::run::Outcome::Stopped);
    drop(r2);
    drop(part);

    // The history travels with the checkpoint; the stopping observer has nothing to restore.
    let mut h3 = History::default();
    let mut never = |_: &SagdState<f64>, _: &IterInfo| Control::Continue;
    let mut r3 = Runner::new(solver.on(&problem, 30))
        .observe(&mut h3)
        .observe(&mut never);
    let mut resumed = r3.resume(&path).unwrap();
    assert_eq!(resumed.t, 20);
    r3.run(&mut resumed).unwrap();
    drop(r3);
    assert_eq!(resumed, whole, "the resumed state differs");
    assert_eq!(h3, h1, "the resumed history differs");

    // A checkpoint is refused under other settings, damaged, or garbage.
    let other = Sagd::new(SagdSettings {
        burn_in: 8,
        ..checkpoint_settings()
    });
    let resume = |s: &Sagd, p: &std::path::Path| {
        let mut a = History::default();
        let mut b = |_: &SagdState<f64>, _: &IterInfo| Control::Continue;
        Runner::new(s.on(&problem, 30))
            .observe(&mut a)
            .observe(&mut b)
            .resume(p)
            .map(|_| ())
            .unwrap_err()
            .to_string()
    };
    let err = resume(&other, &path);
    assert!(err.contains("other settings"), "{err}");
    let mut bytes = std::fs::read(&path).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0x10;
    std::fs::write(dir.path().join("flipped"), &bytes).unwrap();
    let err = resume(&solver, &dir.path().join("flipped"));
    assert!(err.contains("checksum"), "{err}");
    std::fs::write(dir.path().join("bad"), b"hello").unwrap();
    let err = resume(&solver, &dir.path().join("bad"));
    assert!(err.contains("not a sagd checkpoint"), "{err}");
    let err = resume(&solver, &dir.path().join("missing"));
    assert!(err.contains("missing"), "{err}");
}

#[test]
fn results_do_not_depend_on_the_thread_count() {
    // 10000 chains: several blocks, stepped in parallel with two threads, in sequence with one.
    let problem = LogisticProblem::new(vec![1.0, -2.0], 0.5, 10_000, Loss::Cosine);
    let solver = Sagd::new(SagdSettings {
        schedules: Schedules::constant(0.1, 5, 0.1),
        burn_in: 3,
        ..Default::default()
    });
    let run = |threads: usize| {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .unwrap();
        pool.install(|| {
            let mut st = solver.init(&problem, &[0.0, 0.0], &[0.0, 0.0], 5).unwrap();
            Runner::new(solver.on(&problem, 4)).run(&mut st).unwrap();
            st
        })
    };
    let (one, two) = (run(1), run(2));
    assert_eq!(one, two);
}

#[test]
fn non_persistent_chains_restart_every_iteration() {
    // Algorithm 1 as written restarts every iteration from (ξ₀, ρ₀). With ρ₀ = 0 and K = 1, Euler's
    // one step moves ξ by δ·ρ₀ = 0, so a restarted chain sits at ξ₀ after every iteration; a
    // persistent one moves on.
    let problem = LogisticProblem::new(vec![1.0], 0.5, 1, Loss::Square);
    let settings = |persistent| SagdSettings {
        schedules: Schedules::constant(0.1, 1, 0.1),
        persistent,
        initial_momentum: Momentum::Zero,
        ..Default::default()
    };
    for persistent in [false, true] {
        let solver = Sagd::new(settings(persistent));
        let mut st = solver.init(&problem, &[0.0], &[0.3], 1).unwrap();
        for _ in 0..3 {
            solver.next_iter(&problem, &mut st).unwrap();
        }
        assert_eq!(
            st.chains.positions()[0] == 0.3,
            !persistent,
            "persistent = {persistent}"
        );
    }
}

#[test]
fn every_invalid_setting_gives_its_error() {
    let problem = LogisticProblem::new(vec![1.0, 2.0], 0.5, 1, Loss::Square);
    let check = |settings: SagdSettings, theta0: &[f64], needle: &str| {
        let err = Sagd::new(settings)
            .init(&problem, theta0, &[0.0, 0.0], 0)
            .unwrap_err()
            .to_string();
        assert!(err.contains(needle), "expected `{needle}` in: {err}");
    };
    let euler = |delta: f64, gamma: f64| SagdSettings {
        schedules: Schedules::constant(delta, 5, 0.1),
        langevin: LangevinSettings {
            scheme: Scheme::Euler,
            gamma,
        },
        ..Default::default()
    };
    check(euler(0.5, 2.0), &[0.0, 0.0], "gamma*delta < 1");
    check(euler(0.0, 1.0), &[0.0, 0.0], "step_size");
    check(euler(-0.1, 1.0), &[0.0, 0.0], "step_size");
    check(euler(0.1, f64::NAN), &[0.0, 0.0], "gamma");
    check(euler(0.1, 0.0), &[0.0, 0.0], "gamma");
    check(
        SagdSettings {
            schedules: Schedules::constant(0.1, 0, 0.1),
            ..Default::default()
        },
        &[0.0, 0.0],
        "chain length of at least 1",
    );
    check(
        SagdSettings {
            schedules: Schedules::constant(0.1, 5, f64::INFINITY),
            ..Default::default()
        },
        &[0.0, 0.0],
        "learning_rate",
    );
    check(
        SagdSettings {
            update: UpdateRule {
                projection: Projection::Ball {
                    center: vec![0.0],
                    radius: 1.0,
                },
                ..UpdateRule::sgd()
            },
            ..Default::default()
        },
        &[0.0, 0.0],
        "projection ball centre",
    );
    check(
        SagdSettings {
            update: UpdateRule {
                projection: Projection::Ball {
                    center: vec![0.0; 2],
                    radius: -1.0,
                },
                ..UpdateRule::sgd()
            },
            ..Default::default()
        },
        &[0.0, 0.0],
        "radius",
    );
    check(
        SagdSettings {
            update: UpdateRule {
                transform: Optimizer::Adam {
                    beta1: 1.0,
                    beta2: 0.9,
                    eps: 1e-8,
                },
                ..UpdateRule::sgd()
            },
            ..Default::default()
        },
        &[0.0, 0.0],
        "adam beta1",
    );
    check(SagdSettings::default(), &[0.0], "theta0");
    // Euler at γδ ≥ 1 says what to use instead.
    let msg = LangevinSettings {
        scheme: Scheme::Euler,
        gamma: 2.0,
    }
    .validate(0.6)
    .unwrap_err()
    .to_string();
    assert!(
        msg.contains("delta < 0.5") && msg.contains("baoab"),
        "{msg}"
    );
    let hmc = HmcSettings {
        step_size: 0.1,
        n_leapfrog: 0,
    }
    .kernel::<f64>()
    .unwrap_err()
    .to_string();
    assert!(hmc.contains("n_leapfrog"), "{hmc}");
    assert!("leapfrog"
        .parse::<Scheme>()
        .unwrap_err()
        .contains("euler, obabo, baoab, ubu"));
    // A start where the target is not finite.
    struct Nan;
    impl Problem<f64> for Nan {
        fn theta_dim(&self) -> usize {
            1
        }
        fn n_chains(&self) -> usize {
            2
        }
        fn chain_dim(&self) -> usize {
            1
        }
        fn log_target(
            &self,
            _: &[f64],
            _: usize,
            _: &[f64],
            lp: &mut [f64],
            g: &mut [f64],
        ) -> Result<(), LogpError> {
            lp.fill(f64::NAN);
            g.fill(0.0);
            Ok(())
        }
        fn add_grad_f(
            &self,
            _: &[f64],
            _: usize,
            _: &[f64],
            _: &mut [f64],
        ) -> Result<(), LogpError> {
            Ok(())
        }
    }
    let err = Sagd::new(SagdSettings::default())
        .init(&Nan, &[0.0], &[0.0], 0)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("not finite at the initial position of chain 0"),
        "{err}"
    );
}
