//! Every layer against central finite differences, parameters saved and loaded bit for bit, and
//! deferred parameter gradients against summed passes.
#![allow(clippy::needless_range_loop)]

use sagd_nn::math::Activation;
use sagd_nn::{Layer, ParamGrads, ParamTerms, Sequential, Workspace};

/// L = Σ c ⊙ net(x), in f64 from the f32 output.
fn loss(net: &Sequential, p: &[f32], x: &[f32], rows: usize, c: &[f32]) -> f64 {
    let mut ws = Workspace::default();
    net.forward(p, x, rows, &mut ws);
    ws.output()
        .iter()
        .zip(c)
        .map(|(a, b)| *a as f64 * *b as f64)
        .sum()
}

fn lcg(seed: &mut u64) -> f32 {
    *seed = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    ((*seed >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
}

/// With `kinks`, coordinates where the difference quotient changes between h and h/2 straddle a
/// ReLU kink and are skipped (at most a few).
fn check(net: &Sequential, h: f32, tol: f64, kinks: bool) {
    let rows = 4;
    let mut s = 7u64;
    let p = net.init(3);
    let x: Vec<f32> = (0..rows * net.input_dim())
        .map(|_| 1.5 * lcg(&mut s))
        .collect();
    let c: Vec<f32> = (0..rows * net.output_dim()).map(|_| lcg(&mut s)).collect();
    let mut ws = Workspace::default();
    net.forward(&p, &x, rows, &mut ws);
    let mut dp = vec![0.0f32; p.len()];
    let mut dx = vec![0.0f32; x.len()];
    net.backward(&p, &mut ws, &c, Some(&mut dp), Some(&mut dx));
    let mut skipped = 0;
    let fd_param = |j: usize, h: f32| {
        let (mut pp, mut pm) = (p.clone(), p.clone());
        pp[j] += h;
        pm[j] -= h;
        (loss(net, &pp, &x, rows, &c) - loss(net, &pm, &x, rows, &c)) / (2.0 * h as f64)
    };
    let fd_input = |j: usize, h: f32| {
        let (mut xp, mut xm) = (x.clone(), x.clone());
        xp[j] += h;
        xm[j] -= h;
        (loss(net, &p, &xp, rows, &c) - loss(net, &p, &xm, rows, &c)) / (2.0 * h as f64)
    };
    for (what, n, grad, fd) in [
        (
            "param",
            p.len(),
            &dp,
            &fd_param as &dyn Fn(usize, f32) -> f64,
        ),
        ("input", x.len(), &dx, &fd_input),
    ] {
        for j in 0..n {
            let f = fd(j, h);
            if kinks && (f - fd(j, h / 2.0)).abs() > tol * (1.0 + f.abs()) {
                skipped += 1;
                continue;
            }
            assert!(
                (grad[j] as f64 - f).abs() <= tol * (1.0 + f.abs()),
                "{what} {j}: {} vs {f}",
                grad[j]
            );
        }
    }
    assert!(
        skipped <= (p.len() + x.len()) / 20,
        "{skipped} coordinates near kinks"
    );
}

#[test]
fn smooth_activations_match_finite_differences() {
    for act in [Activation::Softplus, Activation::Tanh, Activation::Sigmoid] {
        check(&Sequential::mlp(&[3, 7, 5, 2], act), 1e-2, 2e-3, false);
    }
}

#[test]
fn relu_matches_finite_differences_away_from_kinks() {
    check(
        &Sequential::mlp(&[3, 7, 5, 2], Activation::Relu),
        1e-3,
        1e-2,
        true,
    );
}

/// Conv (6 × 6 × 2 → 3 × 3 × 3) and ConvT (back to 6 × 6 × 2) with PyTorch's E3 kernel (4, stride
/// 2, padding 1), then Linear.
fn conv_net(act: Activation) -> Sequential {
    let (k, stride, pad) = (4, 2, 1);
    Sequential::new(vec![
        Layer::Conv {
            c_in: 2,
            c_out: 3,
            side: 6,
            k,
            stride,
            pad,
        },
        Layer::Act { act },
        Layer::ConvT {
            c_in: 3,
            c_out: 2,
            side: 3,
            k,
            stride,
            pad,
        },
        Layer::Act { act },
        Layer::Linear { inp: 72, out: 3 },
    ])
}

#[test]
fn convolutions_match_finite_differences() {
    let net = conv_net(Activation::Tanh);
    assert_eq!((net.input_dim(), net.output_dim()), (72, 3));
    assert_eq!(
        net.n_params(),
        (2 * 16 * 3 + 3) + (3 * 16 * 2 + 2) + (72 * 3 + 3)
    );
    check(&net, 1e-2, 2e-3, false);
    check(&conv_net(Activation::Relu), 1e-3, 1e-2, true);
}

/// A network whose first layer is a convolution wider than every layer above it (an encoder of
/// E3's shape, in miniature): its parameter gradient without ∂L/∂input is the one with it, on a
/// fresh workspace (where nothing above had made the lower buffer as wide as the input).
#[test]
fn a_first_convolution_wider_than_the_layers_above_needs_no_input_gradient() {
    let (k, stride, pad) = (4, 2, 1);
    let relu = Layer::Act {
        act: Activation::Relu,
    };
    let net = Sequential::new(vec![
        Layer::Conv {
            c_in: 1,
            c_out: 4,
            side: 8,
            k,
            stride,
            pad,
        },
        relu,
        Layer::Conv {
            c_in: 4,
            c_out: 8,
            side: 4,
            k,
            stride,
            pad,
        },
        relu,
        Layer::Linear { inp: 32, out: 4 },
    ]);
    let rows = 5;
    let p = net.init(2);
    let x = normals(rows * net.input_dim(), 3);
    let dout = normals(rows * net.output_dim(), 4);
    let grads = |dx: Option<&mut [f32]>| {
        let mut ws = Workspace::default();
        net.forward(&p, &x, rows, &mut ws);
        let mut dp = vec![0.0f32; p.len()];
        net.backward(&p, &mut ws, &dout, Some(&mut dp), dx);
        dp
    };
    let mut dx = vec![0.0f32; x.len()];
    let with_dx = grads(Some(&mut dx));
    assert!(dx.iter().any(|v| *v != 0.0));
    assert_eq!(grads(None), with_dx);
}

#[test]
fn a_convolution_is_the_sum_over_its_window() {
    // One 4 × 4 two-channel image, a 3 × 3 kernel, stride 1, padding 1: output pixel (y, x) of
    // channel o is b_o + Σ W[o, ky, kx, c] · image[y + ky − 1, x + kx − 1, c] (zero outside).
    let (side, k, c_in, c_out) = (4usize, 3usize, 2usize, 2usize);
    let net = Sequential::new(vec![Layer::Conv {
        c_in,
        c_out,
        side,
        k,
        stride: 1,
        pad: 1,
    }]);
    let p = net.init(5);
    let x: Vec<f32> = (0..side * side * c_in)
        .map(|i| (i % 7) as f32 - 3.0)
        .collect();
    let mut ws = Workspace::default();
    net.forward(&p, &x, 1, &mut ws);
    let y = ws.output();
    for oy in 0..side {
        for ox in 0..side {
            for o in 0..c_out {
                let mut v = p[c_out * k * k * c_in + o] as f64;
                for ky in 0..k {
                    for kx in 0..k {
                        let (iy, ix) = (oy + ky, ox + kx);
                        if iy < 1 || ix < 1 || iy > side || ix > side {
                            continue;
                        }
                        for c in 0..c_in {
                            let w = p[((o * k + ky) * k + kx) * c_in + c] as f64;
                            v += w * x[((iy - 1) * side + ix - 1) * c_in + c] as f64;
                        }
                    }
                }
                let got = y[(oy * side + ox) * c_out + o] as f64;
                assert!((got - v).abs() < 1e-5, "({oy}, {ox}, {o}): {got} vs {v}");
            }
        }
    }
}

#[test]
fn linear_layer_is_a_matrix_product() {
    let net = Sequential::new(vec![Layer::Linear { inp: 3, out: 2 }]);
    let p: Vec<f32> = vec![1.0, 2.0, 3.0, -1.0, 0.5, 0.0, 10.0, -20.0];
    let mut ws = Workspace::default();
    net.forward(&p, &[1.0, 1.0, 1.0, 2.0, 0.0, -1.0], 2, &mut ws);
    assert_eq!(ws.output(), &[16.0, -20.5, 9.0, -22.0]);
}

#[test]
fn gradients_accumulate_and_are_skipped_when_not_asked() {
    let net = Sequential::mlp(&[2, 4, 1], Activation::Softplus);
    let p = net.init(1);
    let mut ws = Workspace::default();
    net.forward(&p, &[0.3, -0.2], 1, &mut ws);
    let mut dp = vec![0.0f32; p.len()];
    net.backward(&p, &mut ws, &[1.0], Some(&mut dp), None);
    let once = dp.clone();
    net.forward(&p, &[0.3, -0.2], 1, &mut ws);
    net.backward(&p, &mut ws, &[1.0], Some(&mut dp), None);
    for (a, b) in dp.iter().zip(&once) {
        assert!((a - 2.0 * b).abs() < 1e-6);
    }
    let mut dx = [0.0f32; 2];
    net.forward(&p, &[0.3, -0.2], 1, &mut ws);
    net.backward(&p, &mut ws, &[1.0], None, Some(&mut dx));
    assert!(dx.iter().any(|v| *v != 0.0));
}

#[test]
fn parameters_round_trip_through_a_file() {
    let net = Sequential::mlp(&[1, 64, 64, 1], Activation::Softplus);
    let p = net.init(11);
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("dec.json");
    net.save(&p, &f).unwrap();
    let q = net.load(&f).unwrap();
    assert!(p.iter().zip(&q).all(|(a, b)| a.to_bits() == b.to_bits()));
    let other = Sequential::mlp(&[1, 32, 1], Activation::Softplus);
    assert!(other
        .load(&f)
        .unwrap_err()
        .to_string()
        .contains("another network shape"));
}

fn normals(n: usize, seed: u64) -> Vec<f32> {
    let mut v = vec![0.0f32; n];
    sagd::rng::NormalStream::new(seed).fill(&mut v);
    v
}

#[test]
fn deferred_parameter_gradients_are_the_same_bits_as_summed_passes() {
    // Widths 1, 64 and 1 (the 1-D decoder: the out × 1 and 1 × in layouts) and 3 → 9 → 2
    // (ranges that do not divide by the tile); passes of uneven rows; any number of threads.
    for net in [
        Sequential::mlp(&[1, 64, 64, 1], Activation::Softplus),
        Sequential::mlp(&[3, 9, 9, 2], Activation::Tanh),
        conv_net(Activation::Tanh),
    ] {
        let params = net.init(3);
        let rows = [5usize, 17, 1, 8];
        let mut summed = vec![0.0f32; net.n_params()];
        let mut terms = vec![ParamTerms::default(); rows.len()];
        let mut ws = Workspace::default();
        for (k, (&r, t)) in rows.iter().zip(&mut terms).enumerate() {
            let x = normals(r * net.input_dim(), 10 + k as u64);
            let dout = normals(r * net.output_dim(), 20 + k as u64);
            net.forward(&params, &x, r, &mut ws);
            net.backward(&params, &mut ws, &dout, Some(&mut summed), None);
            net.forward(&params, &x, r, &mut ws);
            net.backward_with(&params, &mut ws, &dout, ParamGrads::Keep(t), None);
        }
        let parts: Vec<&ParamTerms> = terms.iter().collect();
        for threads in [1, 3, 16] {
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .build()
                .unwrap();
            let mut deferred = vec![0.0f32; net.n_params()];
            pool.install(|| net.add_param_grads(&parts, &mut deferred));
            let same = deferred
                .iter()
                .zip(&summed)
                .all(|(a, b)| a.to_bits() == b.to_bits());
            assert!(same, "{threads} threads");
        }
    }
}

#[test]
fn convolutions_over_many_chunks_are_the_same_bits_on_any_number_of_threads() {
    // 3000 images of the small convolutional net: its convolutions run seven chunks of 455
    // images side by side, and its ReLUs (81 000 values) in pieces.
    let net = conv_net(Activation::Relu);
    let params = net.init(4);
    let rows = 3000;
    let x = normals(rows * net.input_dim(), 31);
    let dout = normals(rows * net.output_dim(), 32);
    let run = |threads: usize, set: bool| {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .unwrap();
        let (mut dp, mut dx) = (vec![0.0f32; net.n_params()], vec![0.0f32; x.len()]);
        let mut ws = Workspace::default();
        pool.install(|| {
            net.forward(&params, &x, rows, &mut ws);
            let sink = if set {
                ParamGrads::Set(&mut dp)
            } else {
                ParamGrads::Add(&mut dp)
            };
            net.backward_with(&params, &mut ws, &dout, sink, Some(&mut dx));
        });
        let bits = |v: &[f32]| v.iter().map(|a| a.to_bits()).collect::<Vec<_>>();
        (bits(ws.output()), bits(&dp), bits(&dx))
    };
    let one = run(1, true);
    for threads in [2, 5] {
        assert!(run(threads, true) == one, "{threads} threads");
    }
    // Written over, the same bits as added into zeros.
    assert!(run(3, false) == one, "added into zeros");
    // Every chunk counted once: the parameter gradient of the whole batch is the sum of its
    // three thirds' (each a pass of its own, with its own chunks), to float rounding.
    let mut thirds = vec![0.0f32; net.n_params()];
    let mut ws = Workspace::default();
    for t in 0..3 {
        let r = rows / 3;
        let xt = &x[t * r * net.input_dim()..(t + 1) * r * net.input_dim()];
        let dt = &dout[t * r * net.output_dim()..(t + 1) * r * net.output_dim()];
        net.forward(&params, xt, r, &mut ws);
        net.backward(&params, &mut ws, dt, Some(&mut thirds), None);
    }
    let whole: Vec<f32> = one.1.iter().map(|b| f32::from_bits(*b)).collect();
    let size = whole.iter().fold(0.0f32, |m, v| m.max(v.abs()));
    for (k, (a, b)) in whole.iter().zip(&thirds).enumerate() {
        assert!(
            (a - b).abs() <= 1e-4 * size,
            "parameter {k}: {a} against {b}"
        );
    }
}
