use super::*;

#[test]
fn adam_on_a_long_vector_matches_adam_on_each_coordinate() {
    // Long enough to be split across threads; every coordinate must see plain Adam.
    let (opt, n) = (Optimizer::adam(), 50_000);
    let mut big = opt.init(n);
    let mut single: Vec<OptState> = (0..n).map(|_| opt.init(1)).collect();
    for step in 0..3 {
        let grad: Vec<f32> = (0..n)
            .map(|i| ((i * 7 + step * 13) % 101) as f32 / 50.0 - 1.0)
            .collect();
        let mut g = grad.clone();
        opt.direction(&mut g, &mut big);
        for (i, st) in single.iter_mut().enumerate() {
            let mut one = [grad[i]];
            opt.direction(&mut one, st);
            assert_eq!(
                one[0].to_bits(),
                g[i].to_bits(),
                "step {step}, coordinate {i}"
            );
        }
    }
}

#[test]
fn adams_one_pass_step_is_the_direction_then_the_step() {
    // A box with infinite bounds takes the general path (direction, step, projection) with
    // the same arithmetic as the one pass that plain Adam takes.
    let n = 50_000;
    let fused = UpdateRule::adam(Averaging::None);
    let general = UpdateRule {
        projection: Projection::Box {
            lower: vec![f64::NEG_INFINITY; n],
            upper: vec![f64::INFINITY; n],
        },
        ..fused.clone()
    };
    let (mut s1, mut s2) = (fused.init(n, None), general.init(n, None));
    let mut t1: Vec<f32> = (0..n).map(|i| (i % 13) as f32 * 0.1 - 0.6).collect();
    let mut t2 = t1.clone();
    for step in 0..3 {
        let g: Vec<f32> = (0..n)
            .map(|i| (((i * 7 + step * 13) % 101) as f32 / 50.0 - 1.0) * 1e-3)
            .collect();
        let (mut g1, mut g2) = (g.clone(), g.clone());
        fused.apply(&mut s1, &mut t1, &mut g1, 0.01).unwrap();
        general.apply(&mut s2, &mut t2, &mut g2, 0.01).unwrap();
        assert!(t1.iter().zip(&t2).all(|(a, b)| a.to_bits() == b.to_bits()));
        assert!(g1.iter().zip(&g2).all(|(a, b)| a.to_bits() == b.to_bits()));
        assert_eq!(s1, s2);
    }
    // An overflowing step is an error naming the update.
    let mut huge = vec![f32::MAX; n];
    assert!(matches!(
        fused.apply(&mut s1, &mut huge, &mut vec![-1.0; n], 1e38),
        Err(SagdError::NonFiniteUpdate { iteration: 4 })
    ));
}

#[test]
fn adams_direction_in_f32_is_f64s_rounded_to_a_few_ulps() {
    let opt = Optimizer::adam();
    let n = 10_000;
    let (mut s32, mut s64) = (opt.init(n), opt.init(n));
    for step in 0..5 {
        let g: Vec<f64> = (0..n)
            .map(|i| {
                (((i * 31 + step * 7) % 199) as f64 / 99.0 - 1.0) * 10f64.powi(i as i32 % 7 - 5)
            })
            .collect();
        let mut g32: Vec<f32> = g.iter().map(|v| *v as f32).collect();
        let mut g64: Vec<f64> = g32.iter().map(|v| *v as f64).collect();
        opt.direction(&mut g32, &mut s32);
        opt.direction(&mut g64, &mut s64);
        for (a, b) in g32.iter().zip(&g64) {
            // Four roundings in f32 and two of the moments: within 8 ulps (2⁻²⁰ relative).
            assert!(
                (*a as f64 - b).abs() <= b.abs() * 2f64.powi(-20),
                "{a} vs {b}"
            );
        }
    }
    assert_eq!(s32, s64);
}

#[test]
fn tail_average_is_the_mean_of_the_last_iterates() {
    // SGD on a constant gradient 1 with α = 0.5 from 0: θ_t = −t/2.
    let rule = UpdateRule {
        averaging: Averaging::Tail { fraction: 0.5 },
        ..UpdateRule::sgd()
    };
    let mut st = rule.init(1, Some(10));
    let mut th = [0.0f64];
    for _ in 0..10 {
        rule.apply(&mut st, &mut th, &mut [1.0], 0.5).unwrap();
    }
    assert_eq!(th[0], -5.0);
    // The last five: −3, −3.5, …, −5.
    assert!((rule.average(&st, &th)[0] + 4.0).abs() < 1e-12);
    let full = UpdateRule::sgd();
    let mut st = full.init(1, None);
    let mut th = [0.0f64];
    for _ in 0..4 {
        full.apply(&mut st, &mut th, &mut [1.0], 1.0).unwrap();
    }
    assert!((full.average(&st, &th)[0] + 2.5).abs() < 1e-12);
    full.finish(&st, &mut th);
    assert!((th[0] + 2.5).abs() < 1e-12);
    let none = UpdateRule {
        averaging: Averaging::None,
        ..UpdateRule::sgd()
    };
    let mut st = none.init(1, Some(3));
    let mut th = [0.0f64];
    none.apply(&mut st, &mut th, &mut [1.0], 1.0).unwrap();
    assert_eq!(none.average(&st, &th), vec![-1.0]);
    assert!(matches!(
        none.apply(&mut st, &mut th, &mut [f64::NAN], 1.0),
        Err(SagdError::NonFiniteUpdate { iteration: 2 })
    ));
}

#[test]
fn adam_first_step_is_the_sign() {
    let opt = Optimizer::adam();
    let mut st = opt.init(2);
    let mut g = [3.0f64, -0.5];
    opt.direction(&mut g, &mut st);
    assert!(
        (g[0] - 1.0).abs() < 1e-7 && (g[1] + 1.0).abs() < 1e-7,
        "{g:?}"
    );
}

#[test]
fn momentum_accumulates() {
    let opt = Optimizer::Momentum {
        beta: 0.5,
        nesterov: false,
    };
    let mut st = opt.init(1);
    let mut g = [1.0f64];
    opt.direction(&mut g, &mut st);
    let mut g2 = [1.0f64];
    opt.direction(&mut g2, &mut st);
    assert_eq!(g2[0], 1.5);
}

#[test]
fn projections() {
    let b = Projection::Box {
        lower: vec![0.0, 0.0],
        upper: vec![1.0, 1.0],
    };
    let mut t = [2.0f64, -1.0];
    b.apply(&mut t);
    assert_eq!(t, [1.0, 0.0]);
    let ball = Projection::Ball {
        center: vec![0.0, 0.0],
        radius: 1.0,
    };
    let mut t = [3.0f64, 4.0];
    ball.apply(&mut t);
    assert!((t[0] - 0.6).abs() < 1e-15 && (t[1] - 0.8).abs() < 1e-15);
    let mut inside = [0.1f64, 0.2];
    ball.apply(&mut inside);
    assert_eq!(inside, [0.1, 0.2]);
    assert!(Projection::Box {
        lower: vec![1.0],
        upper: vec![0.0]
    }
    .validate(1)
    .is_err());
    assert!(ball.validate(3).is_err());
    assert!(Optimizer::Momentum {
        beta: 1.0,
        nesterov: false
    }
    .validate()
    .is_err());
}
