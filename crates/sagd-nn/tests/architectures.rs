//! The engine's passes on networks a user might build, not only the experiments': random stacks
//! of convolutions, transposed convolutions, Linear layers and activations, on 1 to 300 rows.
//! Every way of taking the backward pass (gradients added, written over, kept as terms or
//! skipped; the input's gradient asked or not; a fresh workspace or one another network used
//! before) gives the same output and gradients, and none panics.

#[path = "common/architectures.rs"]
mod architectures;

use architectures::{random_net, Draw};
use sagd_nn::{ParamGrads, ParamTerms, Sequential, Workspace};

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
