//! The engine's passes on networks a user might build, not only the experiments': random stacks
//! of convolutions, transposed convolutions, Linear layers and activations, on 1 to 300 rows.
//! Every way of taking the backward pass (gradients added, written over, kept as terms or
//! skipped; the input's gradient asked or not; a fresh workspace or one another network used
//! before) gives the same output and gradients, and none panics.

use sagd_nn::math::Activation;
use sagd_nn::{Layer, ParamGrads, ParamTerms, Sequential, Workspace};

/// A small integer generator, so that the architectures are fixed by their seed.
struct Draw(u64);

impl Draw {
    /// A number in 0..n.
    fn below(&mut self, n: u64) -> usize {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((self.0 >> 33) % n) as usize
    }

    /// `n` values in [−1, 1].
    fn values(&mut self, n: usize) -> Vec<f32> {
        (0..n)
            .map(|_| self.below(2001) as f32 / 1000.0 - 1.0)
            .collect()
    }
}

/// A network of 2 to 5 weighted layers: from a flat input or an image of 1-3 channels 4, 6 or 8
/// pixels a side, each layer a convolution halving the side, a transposed convolution doubling
/// it, or a Linear layer (to a flat width or to an image), with a random activation between.
fn random_net(seed: u64) -> Sequential {
    let mut r = Draw(seed);
    let acts = [
        Activation::Relu,
        Activation::Tanh,
        Activation::Softplus,
        Activation::Sigmoid,
    ];
    let (k, stride, pad) = (4, 2, 1);
    let mut image = (r.below(2) == 0).then(|| (1 + r.below(3), [4, 6, 8][r.below(3)]));
    let mut width = match image {
        Some((c, side)) => c * side * side,
        None => 1 + r.below(20),
    };
    let depth = 2 + r.below(4);
    let mut layers = Vec::new();
    for i in 0..depth {
        let kind = r.below(3);
        let c_out = 1 + r.below(6);
        match image {
            Some((c_in, side)) if kind == 0 && side % 2 == 0 => {
                layers.push(Layer::Conv {
                    c_in,
                    c_out,
                    side,
                    k,
                    stride,
                    pad,
                });
                image = Some((c_out, side / 2));
            }
            Some((c_in, side)) if kind == 1 && side <= 8 => {
                layers.push(Layer::ConvT {
                    c_in,
                    c_out,
                    side,
                    k,
                    stride,
                    pad,
                });
                image = Some((c_out, side * 2));
            }
            _ if r.below(2) == 0 => {
                let (c, side) = (1 + r.below(4), [2, 4][r.below(2)]);
                layers.push(Layer::Linear {
                    inp: width,
                    out: c * side * side,
                });
                image = Some((c, side));
            }
            _ => {
                let out = 1 + r.below(40);
                layers.push(Layer::Linear { inp: width, out });
                image = None;
                width = out;
            }
        }
        if let Some((c, side)) = image {
            width = c * side * side;
        }
        if i + 1 < depth {
            layers.push(Layer::Act {
                act: acts[r.below(4)],
            });
        }
    }
    Sequential::new(layers)
}

/// How a backward pass hands over its parameter gradients.
#[derive(Clone, Copy, Debug)]
enum Sink {
    Add,
    Set,
    Keep,
    Skip,
}

/// The output, the parameter gradient (empty for `Skip`) and the input's gradient (empty
/// without `dx`) of one forward and backward pass on `ws`.
fn pass(
    net: &Sequential,
    (p, x, dout, rows): (&[f32], &[f32], &[f32], usize),
    ws: &mut Workspace,
    sink: Sink,
    dx: bool,
) -> (Vec<f32>, Vec<f32>, Vec<f32>) {
    net.forward(p, x, rows, ws);
    let out = ws.output().to_vec();
    let mut dx = vec![0.0f32; if dx { x.len() } else { 0 }];
    let dx_out = (!dx.is_empty()).then_some(&mut dx[..]);
    // Written over: start from values a missed element would show.
    let mut dp = vec![if matches!(sink, Sink::Set) { 7.0 } else { 0.0 }; p.len()];
    match sink {
        Sink::Add => net.backward_with(p, ws, dout, ParamGrads::Add(&mut dp), dx_out),
        Sink::Set => net.backward_with(p, ws, dout, ParamGrads::Set(&mut dp), dx_out),
        Sink::Keep => {
            let mut terms = ParamTerms::default();
            net.backward_with(p, ws, dout, ParamGrads::Keep(&mut terms), dx_out);
            net.add_param_grads(&[&terms], &mut dp);
        }
        Sink::Skip => {
            net.backward_with(p, ws, dout, ParamGrads::Skip, dx_out);
            dp.clear();
        }
    }
    (out, dp, dx)
}

#[test]
fn random_networks_agree_in_every_backward_mode() {
    let mut used = Workspace::default();
    for seed in 0..80u64 {
        let net = random_net(seed);
        let p = net.init(seed);
        for rows in [1usize, 37, 300] {
            let mut r = Draw(1000 * seed + rows as u64);
            let x = r.values(rows * net.input_dim());
            let dout = r.values(rows * net.output_dim());
            let data = (&p[..], &x[..], &dout[..], rows);
            let (out, grad, dx) = pass(&net, data, &mut Workspace::default(), Sink::Add, true);
            let scale = grad.iter().fold(0.0f32, |m, v| m.max(v.abs()));
            for sink in [Sink::Add, Sink::Set, Sink::Keep, Sink::Skip] {
                for with_dx in [true, false] {
                    for fresh in [true, false] {
                        let mut new = Workspace::default();
                        let ws = if fresh { &mut new } else { &mut used };
                        let (o, g, d) = pass(&net, data, ws, sink, with_dx);
                        let case = format!("{:?}, {rows} rows, {sink:?}", net.layers());
                        assert_eq!(o, out, "{case}: output");
                        if with_dx {
                            assert_eq!(d, dx, "{case}: input gradient");
                        }
                        match sink {
                            Sink::Skip => {}
                            // Kept terms sum a convolution's chunks in another order: rounding
                            // (at most 4.6e-6 of the largest element over these networks),
                            // where a lost or wrong term moves it by O(1) of it.
                            Sink::Keep => {
                                let worst = g
                                    .iter()
                                    .zip(&grad)
                                    .map(|(a, b)| (a - b).abs())
                                    .fold(0.0f32, f32::max);
                                assert!(worst <= 1e-4 * scale, "{case}: {worst} of {scale}");
                            }
                            _ => assert_eq!(g, grad, "{case}: parameter gradient"),
                        }
                    }
                }
            }
        }
    }
}
