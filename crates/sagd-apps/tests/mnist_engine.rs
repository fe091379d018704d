//! The engine on E3's networks: packed weights, convolutions over many chunks and gradients
//! written over old values give the bits of the plain passes.

use sagd_nn::math::Activation;
use sagd_nn::{PackedWeights, ParamGrads, Sequential, Workspace};

fn normals(n: usize, seed: u64) -> Vec<f32> {
    let mut v = vec![0.0f32; n];
    sagd::rng::NormalStream::new(seed).fill(&mut v);
    v
}

/// Bitwise equality of two f32 slices.
fn same_bits(a: &[f32], b: &[f32]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits())
}

#[test]
fn packed_weights_give_the_same_bits_as_unpacked() {
    // A 600 × 500 layer is packed, the others not; 17 rows keep the unpacked products on the tile
    // kernel, which the packed ones use. E3's generator packs its 1024 × 3136 layer.
    for (net, rows) in [
        (
            Sequential::mlp(&[40, 600, 500, 3], Activation::Softplus),
            17,
        ),
        (sagd_apps::mnist::generator(20), 6),
    ] {
        let params = net.init(5);
        let x = normals(rows * net.input_dim(), 1);
        let dout = normals(rows * net.output_dim(), 2);
        let mut ws = Workspace::default();
        net.forward(&params, &x, rows, &mut ws);
        let y = ws.output().to_vec();
        let (mut dp, mut dx) = (vec![0.0f32; params.len()], vec![0.0f32; x.len()]);
        net.backward(&params, &mut ws, &dout, Some(&mut dp), Some(&mut dx));
        for input_grad in [true, false] {
            let mut packed = PackedWeights::default();
            net.pack(&params, input_grad, &mut packed);
            let mut wp = Workspace::default();
            net.forward_packed(&params, &packed, &x, rows, &mut wp);
            assert!(same_bits(&y, wp.output()));
            let (mut dp2, mut dx2) = (vec![0.0f32; params.len()], vec![0.0f32; x.len()]);
            let sink = ParamGrads::Add(&mut dp2);
            net.backward_packed(&params, &packed, &mut wp, &dout, sink, Some(&mut dx2));
            assert!(same_bits(&dp, &dp2) && same_bits(&dx, &dx2));
        }
    }
}

#[test]
fn convolutions_over_many_chunks_are_image_by_image() {
    // E3's networks on 12 images: their widest convolutions' windows take 5 images a chunk. Each
    // image's outputs and input gradients are its own to the bit; the parameter gradients are the
    // sum of the images' up to f32 rounding of the order of the sum.
    let rows = 12;
    for net in [
        sagd_apps::mnist::generator(20),
        sagd_apps::mnist::encoder(20),
    ] {
        let (din, dout_w) = (net.input_dim(), net.output_dim());
        let params = net.init(9);
        let x: Vec<f32> = normals(rows * din, 3);
        let dout = normals(rows * dout_w, 4);
        let mut ws = Workspace::default();
        net.forward(&params, &x, rows, &mut ws);
        let y = ws.output().to_vec();
        let (mut dp, mut dx) = (vec![0.0f32; params.len()], vec![0.0f32; x.len()]);
        net.backward(&params, &mut ws, &dout, Some(&mut dp), Some(&mut dx));
        let mut sum = vec![0.0f64; params.len()];
        let mut abs = vec![0.0f64; params.len()];
        for i in 0..rows {
            let xi = &x[i * din..(i + 1) * din];
            net.forward(&params, xi, 1, &mut ws);
            assert!(same_bits(ws.output(), &y[i * dout_w..(i + 1) * dout_w]));
            let (mut dpi, mut dxi) = (vec![0.0f32; params.len()], vec![0.0f32; din]);
            let di = &dout[i * dout_w..(i + 1) * dout_w];
            net.backward(&params, &mut ws, di, Some(&mut dpi), Some(&mut dxi));
            assert!(same_bits(&dxi, &dx[i * din..(i + 1) * din]), "image {i}");
            for ((s, a), g) in sum.iter_mut().zip(&mut abs).zip(&dpi) {
                *s += *g as f64;
                *a += g.abs() as f64;
            }
        }
        // Each image's gradient is exact to a relative 2⁻²⁴ per addition of its own sums (a few
        // thousand terms at most), and the batch adds the images in another order: bound the
        // difference by 1e-4 of the sum of magnitudes.
        for (j, ((g, s), a)) in dp.iter().zip(&sum).zip(&abs).enumerate() {
            assert!(
                (*g as f64 - s).abs() <= 1e-4 * a + 1e-30,
                "param {j}: {g} vs {s} (Σ|g| {a})"
            );
        }
    }
}

#[test]
fn gradients_written_over_are_those_added_into_zeros() {
    // E3's networks on 12 images (three chunks of their widest convolutions) and a 1-D VAE's
    // decoder: a backward pass that writes its parameter gradients over a buffer of NaNs
    // (`ParamGrads::Set`) leaves what the same pass adds into zeros, bit for bit, and a second
    // pass added on top is the same in both.
    let rows = 12;
    let nets = [
        sagd_apps::mnist::generator(20),
        sagd_apps::mnist::encoder(20),
        sagd_nn::vae::Vae::new(3, 8).dec,
    ];
    for net in nets {
        let (din, dout_w) = (net.input_dim(), net.output_dim());
        let params = net.init(5);
        let x = normals(rows * din, 6);
        let dout = normals(rows * dout_w, 7);
        let mut ws = Workspace::default();
        let (mut added, mut set) = (vec![0.0f32; params.len()], vec![f32::NAN; params.len()]);
        for (sink, twice) in [(&mut added, false), (&mut set, true)] {
            for pass in 0..2 {
                net.forward(&params, &x, rows, &mut ws);
                let g = if pass == 0 && twice {
                    ParamGrads::Set(&mut sink[..])
                } else {
                    ParamGrads::Add(&mut sink[..])
                };
                net.backward_with(&params, &mut ws, &dout, g, None);
            }
        }
        assert!(added.iter().all(|v| v.is_finite()));
        assert!(same_bits(&added, &set));
    }
}
