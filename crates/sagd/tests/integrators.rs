//! Each integrator against Gaussian targets with closed forms: the exact stationary law of the
//! discrete chain (from its linear recursion), the order of its bias in δ, and Monte Carlo runs
//! whose tolerances are their own standard errors (independent chains).

mod common;

use common::{mean_se, stationary_var};
use sagd::langevin::{ChainSet, LangevinSettings, Momentum, Scheme};
use sagd::model::{Gaussian, IsoGaussian};

fn kernel(scheme: Scheme, gamma: f64, delta: f64) -> sagd::langevin::Kernel<f64> {
    LangevinSettings { scheme, gamma }.kernel(delta).unwrap()
}

#[test]
fn stationary_bias_has_each_schemes_order() {
    // Exact stationary Var ξ − 1 on N(0, 1), γ = 1: halving δ halves Euler's bias and quarters
    // OBABO's and UBU's; BAOAB's positions are exact, and its momentum carries the O(δ²) error.
    for scheme in Scheme::ALL {
        let bias = |d: f64| stationary_var(&kernel(scheme, 1.0, d), 1.0);
        // Euler's second-order term is still visible at δ = 0.1: compare it further down.
        let (h1, h2) = if scheme == Scheme::Euler {
            (0.01, 0.005)
        } else {
            (0.1, 0.05)
        };
        let (x1, r1) = bias(h1);
        let (x2, r2) = bias(h2);
        let (x1, x2) = (x1 - 1.0, x2 - 1.0);
        match scheme {
            Scheme::Euler => assert!((x1 / x2 - 2.0).abs() < 0.1, "euler ratio {}", x1 / x2),
            Scheme::Obabo | Scheme::Ubu => {
                assert!((x1 / x2 - 4.0).abs() < 0.2, "{scheme:?} ratio {}", x1 / x2)
            }
            Scheme::Baoab => {
                assert!(
                    x1.abs() < 1e-12 && x2.abs() < 1e-12,
                    "baoab position bias {x1} {x2}"
                );
                let ratio = (r1 - 1.0) / (r2 - 1.0);
                assert!((ratio - 4.0).abs() < 0.2, "baoab momentum ratio {ratio}");
            }
        }
        assert!(x1.abs() < 0.02, "{scheme:?} bias {x1} at delta {h1}");
    }
}

/// Runs `n` chains on N(mean, sd²) and returns per-chain time averages of ξ and (ξ − mean)².
#[allow(clippy::too_many_arguments)]
fn run_1d(
    scheme: Scheme,
    delta: f64,
    n: usize,
    burn: usize,
    steps: usize,
    mean: f64,
    sd: f64,
    seed: u64,
) -> (Vec<f64>, Vec<f64>) {
    let target = IsoGaussian { dim: 1, mean, sd };
    let k = kernel(scheme, 1.0, delta);
    let mut chains = ChainSet::<f64>::new(n, 1, seed);
    chains.init(&target, &[mean], Momentum::Normal).unwrap();
    chains.burn_in(&target, &k, burn).unwrap();
    let mut m1 = vec![0.0; n];
    let mut m2 = vec![0.0; n];
    for _ in 0..steps {
        chains.step(&target, &k).unwrap();
        for (i, x) in chains.positions().iter().enumerate() {
            m1[i] += x;
            m2[i] += (x - mean).powi(2);
        }
    }
    m1.iter_mut()
        .chain(m2.iter_mut())
        .for_each(|v| *v /= steps as f64);
    (m1, m2)
}

#[test]
fn one_dimensional_gaussian_moments_match_the_exact_discrete_law() {
    // N(1.5, 0.7²): the mean is exact for every scheme; the variance is the discrete chain's exact
    // stationary variance. 5 standard errors over independent chains. Euler, first order, gets a
    // smaller step for the last check.
    let (mean, sd) = (1.5, 0.7);
    for scheme in Scheme::ALL {
        let delta = if scheme == Scheme::Euler { 0.01 } else { 0.1 };
        let steps = (200.0 / delta) as usize;
        let (m1, m2) = run_1d(scheme, delta, 1000, steps / 4, steps, mean, sd, 11);
        let (mu, se_mu) = mean_se(&m1);
        let (var, se_var) = mean_se(&m2);
        let exact = stationary_var(&kernel(scheme, 1.0, delta), 1.0 / (sd * sd)).0;
        assert!(
            (mu - mean).abs() < 5.0 * se_mu,
            "{scheme:?}: mean {mu} ± {se_mu}"
        );
        assert!(
            (var - exact).abs() < 5.0 * se_var,
            "{scheme:?}: var {var} ± {se_var}, exact {exact}"
        );
        // And close to the true variance: the discretisation bias is small at this δ.
        assert!(
            (var / (sd * sd) - 1.0).abs() < 0.06,
            "{scheme:?}: var {var}"
        );
    }
}

/// Var ξ − 1 measured and exact, for the crate docs' table. Run with `--nocapture` to see it.
#[test]
fn bias_table() {
    println!("| δ | scheme | measured Var ξ − 1 (± se) | exact |");
    for delta in [0.4, 0.2, 0.1, 0.05] {
        for scheme in Scheme::ALL {
            let (_, m2) = run_1d(
                scheme,
                delta,
                1000,
                (20.0 / delta) as usize,
                2000,
                0.0,
                1.0,
                1,
            );
            let (var, se) = mean_se(&m2);
            let exact = stationary_var(&kernel(scheme, 1.0, delta), 1.0).0;
            println!(
                "| {delta} | {} | {:+.4} (± {:.4}) | {:+.5} |",
                scheme.name(),
                var - 1.0,
                se,
                exact - 1.0
            );
            assert!(
                (var - exact).abs() < 5.0 * se,
                "{scheme:?} at {delta}: {var} vs {exact}"
            );
        }
    }
}

/// Givens rotations: an orthogonal matrix with a known product.
fn rotation(d: usize) -> Vec<f64> {
    let mut q = vec![0.0; d * d];
    for i in 0..d {
        q[i * d + i] = 1.0;
    }
    for (k, (i, j)) in [
        (0, 1),
        (2, 5),
        (3, 7),
        (1, 4),
        (6, 9),
        (8, 2),
        (5, 0),
        (4, 9),
    ]
    .into_iter()
    .enumerate()
    {
        let a = 0.4 + 0.3 * k as f64;
        let (c, s) = (f64::cos(a), f64::sin(a));
        for r in 0..d {
            let (x, y) = (q[r * d + i], q[r * d + j]);
            q[r * d + i] = c * x - s * y;
            q[r * d + j] = s * x + c * y;
        }
    }
    q
}

#[test]
fn correlated_ten_dimensional_gaussian() {
    // Σ = Q diag(s) Qᵀ; the discrete chain's stationary covariance is Q diag(v_δ(1/s_i)) Qᵀ.
    let d = 10;
    let s: Vec<f64> = (0..d).map(|i| 0.3 + 0.3 * i as f64).collect();
    let q = rotation(d);
    let mean: Vec<f64> = (0..d).map(|i| i as f64 * 0.5 - 2.0).collect();
    let mut precision = vec![0.0; d * d];
    for a in 0..d {
        for b in 0..d {
            precision[a * d + b] = (0..d).map(|k| q[a * d + k] * q[b * d + k] / s[k]).sum();
        }
    }
    let target = Gaussian {
        mean: mean.clone(),
        precision,
    };
    let delta = 0.1;
    for scheme in Scheme::ALL {
        let k = kernel(scheme, 1.0, delta);
        let v: Vec<f64> = s.iter().map(|si| stationary_var(&k, 1.0 / si).0).collect();
        let exact = |a: usize, b: usize| -> f64 {
            (0..d).map(|m| q[a * d + m] * q[b * d + m] * v[m]).sum()
        };
        let n = 600;
        let mut chains = ChainSet::<f64>::new(n, d, 5);
        chains.init(&target, &mean, Momentum::Normal).unwrap();
        chains.burn_in(&target, &k, 300).unwrap();
        let steps = 1500;
        let mut m1 = vec![vec![0.0; n]; d];
        let mut m2 = vec![vec![0.0; n]; d * d];
        for _ in 0..steps {
            chains.step(&target, &k).unwrap();
            for c in 0..n {
                let x = chains.position(c);
                for a in 0..d {
                    m1[a][c] += x[a] / steps as f64;
                    for b in 0..=a {
                        m2[a * d + b][c] += (x[a] - mean[a]) * (x[b] - mean[b]) / steps as f64;
                    }
                }
            }
        }
        for a in 0..d {
            let (mu, se) = mean_se(&m1[a]);
            assert!(
                (mu - mean[a]).abs() < 5.0 * se,
                "{scheme:?} mean[{a}] {mu} ± {se}"
            );
            for b in 0..=a {
                let (c, se) = mean_se(&m2[a * d + b]);
                let e = exact(a, b);
                assert!(
                    (c - e).abs() < 5.0 * se,
                    "{scheme:?} cov[{a},{b}] {c} ± {se}, exact {e}"
                );
                // The discretisation bias at δ = 0.1 is a few percent of the largest variance.
                let truth: f64 = (0..d).map(|m| q[a * d + m] * q[b * d + m] * s[m]).sum();
                assert!(
                    (e - truth).abs() < 0.05 * 3.0,
                    "{scheme:?} bias at [{a},{b}]"
                );
            }
        }
    }
}

#[test]
fn single_precision_chains_sample_the_target() {
    let target = IsoGaussian {
        dim: 4,
        mean: -1.0,
        sd: 2.0,
    };
    let k = LangevinSettings {
        scheme: Scheme::Baoab,
        gamma: 1.0,
    }
    .kernel::<f32>(0.2)
    .unwrap();
    let n = 500;
    let mut chains = ChainSet::<f32>::new(n, 4, 3);
    chains
        .init(&target, &[-1.0f32; 4], Momentum::Normal)
        .unwrap();
    chains.burn_in(&target, &k, 200).unwrap();
    let mut m1 = vec![0.0; n];
    let mut m2 = vec![0.0; n];
    let steps = 1000;
    for _ in 0..steps {
        chains.step(&target, &k).unwrap();
        for c in 0..n {
            let x = chains.position(c);
            m1[c] += x.iter().map(|v| *v as f64).sum::<f64>() / (4 * steps) as f64;
            m2[c] += x.iter().map(|v| (*v as f64 + 1.0).powi(2)).sum::<f64>() / (4 * steps) as f64;
        }
    }
    let (mu, se) = mean_se(&m1);
    let (var, se_v) = mean_se(&m2);
    assert!((mu + 1.0).abs() < 5.0 * se, "mean {mu} ± {se}");
    assert!((var - 4.0).abs() < 5.0 * se_v, "var {var} ± {se_v}");
}

#[test]
fn divergent_chains_are_reset_and_reported() {
    // Precision 10⁴ with δ = 0.05: the Euler recursion is unstable (δw² = 500 > γ = 1), so chains
    // blow up, are reported, and are put back to their last finite state.
    let target = IsoGaussian {
        dim: 3,
        mean: 0.0,
        sd: 0.01,
    };
    let k = kernel(Scheme::Euler, 1.0, 0.05);
    let mut chains = ChainSet::<f64>::new(8, 3, 9);
    chains.init(&target, &[0.01; 3], Momentum::Normal).unwrap();
    let mut div = 0;
    for _ in 0..2000 {
        div += chains.step(&target, &k).unwrap().divergences;
        assert!(chains.positions().iter().all(|v| v.is_finite()));
        assert!(chains.log_densities().iter().all(|v| v.is_finite()));
    }
    assert!(div > 0, "the unstable chains were never reported");
    assert_eq!(chains.divergences, div as u64);
}

#[test]
fn a_target_that_fails_in_a_region_is_recovered() {
    // log π is NaN for ξ > 1: chains that step there are reset; none of their states shows it.
    struct Walled;
    impl sagd::model::LogDensity<f64> for Walled {
        fn dim(&self) -> usize {
            1
        }
        fn logp_grad(
            &self,
            _r: usize,
            x: &[f64],
            lp: &mut [f64],
            g: &mut [f64],
        ) -> Result<(), sagd::error::LogpError> {
            for ((x, lp), g) in x.iter().zip(lp.iter_mut()).zip(g.iter_mut()) {
                *lp = if *x > 1.0 { f64::NAN } else { -0.5 * x * x };
                *g = -x;
            }
            Ok(())
        }
    }
    let k = kernel(Scheme::Baoab, 1.0, 0.2);
    let mut chains = ChainSet::<f64>::new(50, 1, 2);
    chains.init(&Walled, &[0.0], Momentum::Normal).unwrap();
    let mut div = 0;
    for _ in 0..500 {
        div += chains.step(&Walled, &k).unwrap().divergences;
        assert!(chains.positions().iter().all(|v| *v <= 1.0));
    }
    assert!(div > 0);
}

#[test]
fn gathered_chains_advance_as_they_would_in_place() {
    // Every chain has its own stream: stepping a permuted gathering and scattering it back gives the
    // same states as stepping the whole set.
    let target = IsoGaussian {
        dim: 3,
        mean: 0.5,
        sd: 1.2,
    };
    let k = kernel(Scheme::Baoab, 1.0, 0.1);
    let mut whole = ChainSet::<f64>::new(10, 3, 8);
    whole.init(&target, &[0.0; 3], Momentum::Normal).unwrap();
    let mut parts = whole.clone();
    for _ in 0..5 {
        whole.step(&target, &k).unwrap();
    }
    let rows = [7usize, 2, 9, 0, 4, 1, 3, 8, 6, 5];
    let (a, b) = rows.split_at(4);
    for batch in [a, b] {
        let mut sub = parts.gather(batch).unwrap();
        for _ in 0..5 {
            sub.step(&target, &k).unwrap();
        }
        parts.scatter(&sub, batch).unwrap();
    }
    assert_eq!(whole.positions(), parts.positions());
    assert_eq!(whole.momenta(), parts.momenta());
}

#[test]
fn blocks_running_several_steps_match_single_steps() {
    // run_steps(k) lets each block take its k transitions in one task: the same states, momenta and
    // step summaries as k calls of step(), for every kind of kernel; the hook sees each block's
    // positions after each transition.
    let target = IsoGaussian {
        dim: 2,
        mean: -0.3,
        sd: 0.8,
    };
    let hmc = sagd::hmc::HmcSettings {
        step_size: 0.3,
        n_leapfrog: 3,
    }
    .kernel::<f64>()
    .unwrap();
    for k in [
        kernel(Scheme::Euler, 1.0, 0.1),
        kernel(Scheme::Ubu, 1.0, 0.2),
        hmc,
    ] {
        let mut one = ChainSet::<f64>::new(11, 2, 4);
        one.set_rows_per_block(3);
        one.init(&target, &[0.2, -0.1], Momentum::Normal).unwrap();
        let mut many = one.clone();
        let mut infos = Vec::new();
        let mut seen = Vec::new();
        for _ in 0..5 {
            infos.push(one.step(&target, &k).unwrap());
            seen.push(one.positions().to_vec());
        }
        let (got, hooks) = many
            .run_steps(&target, &k, 5, false, |b| {
                (b.first_row, b.positions.to_vec())
            })
            .unwrap();
        assert_eq!(one.positions(), many.positions());
        assert_eq!(one.momenta(), many.momenta());
        assert_eq!(one.gradients(), many.gradients());
        assert_eq!(infos, got);
        for (s, blocks) in hooks.iter().enumerate() {
            // Blocks of 3 rows (the last of 2), in order.
            assert_eq!(blocks.len(), 4);
            let joined: Vec<f64> = blocks.iter().flat_map(|(_, x)| x.clone()).collect();
            assert_eq!(joined, seen[s]);
            assert_eq!(
                blocks.iter().map(|(f, _)| *f).collect::<Vec<_>>(),
                [0, 3, 6, 9]
            );
        }
    }
}

/// A checked step is made only of valid settings, whether built or read from a file, writes
/// itself as `{scheme, gamma, delta}`, and gives the kernel the settings give at its δ, to the bit.
#[test]
fn a_langevin_step_holds_only_valid_settings() {
    use sagd::error::SagdError;
    use sagd::langevin::LangevinStep;
    let baoab = LangevinSettings {
        scheme: Scheme::Baoab,
        gamma: 2.0,
    };
    let step = LangevinStep::new(baoab, 0.1).expect("valid");
    assert_eq!(
        (step.scheme(), step.gamma(), step.delta()),
        (Scheme::Baoab, 2.0, 0.1)
    );
    assert_eq!(step.langevin(), baoab);
    for scheme in Scheme::ALL {
        let s = LangevinSettings { scheme, gamma: 1.5 };
        let table = LangevinStep::new(s, 0.3)
            .expect("valid")
            .kernel::<f64>()
            .table();
        assert_eq!(
            table,
            s.kernel::<f64>(0.3).expect("valid").table(),
            "{scheme:?}"
        );
    }
    let json = serde_json::to_value(step).expect("writes");
    assert_eq!(
        json,
        serde_json::json!({"scheme": "baoab", "gamma": 2.0, "delta": 0.1})
    );
    let back: LangevinStep = serde_json::from_value(json).expect("reads");
    assert_eq!(back, step);
    // Each rule refused by name: when built, when read, and at a schedule's δ_t.
    let euler = LangevinSettings {
        scheme: Scheme::Euler,
        gamma: 2.0,
    };
    let name = |r: sagd::error::Result<LangevinStep>| match r {
        Err(SagdError::InvalidSetting { name, .. }) => name,
        other => panic!("accepted: {other:?}"),
    };
    assert_eq!(name(LangevinStep::new(euler, 0.5)), "delta"); // γδ = 1
    assert_eq!(name(LangevinStep::new(baoab, 0.0)), "delta");
    assert_eq!(name(LangevinStep::new(baoab, f64::NAN)), "delta");
    let frictionless = LangevinSettings {
        gamma: -1.0,
        ..baoab
    };
    assert_eq!(name(LangevinStep::new(frictionless, 0.1)), "gamma");
    assert_eq!(name(step.with_delta(-0.1)), "delta");
    assert_eq!(step.with_delta(0.05).expect("valid").delta(), 0.05);
    assert!(LangevinStep::new(euler, 0.49).is_ok());
    for bad in [
        r#"{"scheme": "euler", "gamma": 2.0, "delta": 0.5}"#,
        r#"{"scheme": "baoab", "gamma": 0.0, "delta": 0.1}"#,
    ] {
        let err = serde_json::from_str::<LangevinStep>(bad).expect_err(bad);
        assert!(err.to_string().contains("gamma"), "{err}");
    }
}

/// Each scheme's and HMC's instructions place every operation as worked out by hand from the
/// programs: which draw it reads, where the positions first move, which gradient a kick reads.
/// The GPU's chains carry these out, so a mistake here would move every scheme's chains there.
#[test]
fn the_instructions_place_each_operation_on_the_transitions_states() {
    use sagd::langevin::{Kernel, Op};
    // (operation, draw, first move, new gradient); "k" a kick, "kn" a noisy one.
    fn placed(k: &Kernel<f64>) -> Vec<(&'static str, Option<usize>, bool, bool)> {
        k.instructions()
            .map(|i| {
                let name = match i.op {
                    Op::Drift(_) => "drift",
                    Op::Kick { noise, .. } if noise != 0.0 => "kn",
                    Op::Kick { .. } => "k",
                    Op::Ou { .. } => "ou",
                    Op::Gradient => "grad",
                    Op::Refresh => "refresh",
                    _ => "other",
                };
                (name, i.draw, i.first_move, i.new_gradient)
            })
            .collect()
    }
    let (t, f) = (true, false);
    let expected = [
        (
            Scheme::Euler,
            vec![
                ("drift", None, t, f),
                ("kn", Some(0), f, f),
                ("grad", None, f, f),
            ],
        ),
        (
            Scheme::Obabo,
            vec![
                ("kn", Some(0), f, f),
                ("k", None, f, f),
                ("drift", None, t, f),
                ("grad", None, f, f),
                ("k", None, f, t),
                ("kn", Some(1), f, t),
            ],
        ),
        (
            Scheme::Baoab,
            vec![
                ("k", None, f, f),
                ("drift", None, t, f),
                ("kn", Some(0), f, f),
                ("drift", None, f, f),
                ("grad", None, f, f),
                ("k", None, f, t),
            ],
        ),
        (
            Scheme::Ubu,
            vec![
                ("ou", Some(0), t, f),
                ("grad", None, f, f),
                ("k", None, f, t),
                ("ou", Some(2), f, f),
            ],
        ),
    ];
    for (scheme, want) in expected {
        let k = kernel(scheme, 1.5, 0.2);
        assert_eq!(placed(&k), want, "{scheme}");
        assert!(k.instructions().map(|i| i.op).eq(k.ops().iter().copied()));
    }
    let hmc = sagd::hmc::HmcSettings {
        step_size: 0.1,
        n_leapfrog: 2,
    }
    .kernel::<f64>()
    .expect("valid");
    let leapfrog = [
        ("k", None, f, f),
        ("drift", None, t, f),
        ("grad", None, f, f),
        ("k", None, f, t),
        ("k", None, f, t),
        ("drift", None, f, f),
        ("grad", None, f, f),
        ("k", None, f, t),
    ];
    let mut want = vec![("refresh", Some(0), f, f)];
    want.extend(leapfrog);
    assert_eq!(placed(&hmc), want);
}
