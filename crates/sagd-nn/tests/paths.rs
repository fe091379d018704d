//! The same bits on every instruction set: networks' passes (products on the tile kernels and
//! the packed panels, convolutions, every activation) and the normals, fingerprinted and checked
//! against one constant. CI runs this test on each path the machine has
//! (`SAGD_CPU_CAPABILITY=avx2`, `=portable`, and the widest by default), so a kernel that
//! rounds differently fails on its path alone; one that fails everywhere means the engine's
//! arithmetic changed on purpose, and the constant must change with it (say so in CHANGELOG).

use sagd_nn::math::Activation;
use sagd_nn::{Layer, Sequential, Workspace};

/// FNV-1a over the bits.
fn fold(h: &mut u64, v: &[f32]) {
    *h = sagd::run::fnv1a(*h, v.iter().flat_map(|x| x.to_bits().to_le_bytes()));
}

fn normals(n: usize, seed: u64) -> Vec<f32> {
    let mut v = vec![0.0f32; n];
    sagd::rng::NormalStream::new(seed).fill(&mut v);
    v
}

/// One forward and backward pass of `net` on `rows` rows, folded into `h`.
fn pass(h: &mut u64, net: &Sequential, rows: usize, seed: u64) {
    let p = net.init(seed);
    let x = normals(rows * net.input_dim(), seed + 1);
    let dout = normals(rows * net.output_dim(), seed + 2);
    let mut ws = Workspace::default();
    net.forward(&p, &x, rows, &mut ws);
    fold(h, ws.output());
    let mut dp = vec![0.0f32; p.len()];
    let mut dx = vec![0.0f32; x.len()];
    net.backward(&p, &mut ws, &dout, Some(&mut dp), Some(&mut dx));
    fold(h, &dp);
    fold(h, &dx);
}

#[test]
fn every_instruction_set_gives_the_same_bits() {
    let mut h = sagd::run::FNV_OFFSET;
    fold(&mut h, &normals(1001, 5));
    // E2's shapes (widths 1 and 64) and wide layers on the packed panels; widths that do not
    // divide by any tile.
    for (k, act) in [
        Activation::Softplus,
        Activation::Tanh,
        Activation::Relu,
        Activation::Sigmoid,
    ]
    .into_iter()
    .enumerate()
    {
        let k = k as u64;
        pass(&mut h, &Sequential::mlp(&[1, 64, 64, 1], act), 37, 10 + k);
        pass(
            &mut h,
            &Sequential::mlp(&[13, 200, 77, 5], act),
            301,
            20 + k,
        );
    }
    // A convolution, its transpose and a linear layer on a 12 × 12 image with 16 channels.
    let conv = Sequential::new(vec![
        Layer::Conv {
            c_in: 1,
            c_out: 16,
            side: 12,
            k: 4,
            stride: 2,
            pad: 1,
        },
        Layer::Act {
            act: Activation::Relu,
        },
        Layer::ConvT {
            c_in: 16,
            c_out: 8,
            side: 6,
            k: 4,
            stride: 2,
            pad: 1,
        },
        Layer::Act {
            act: Activation::Softplus,
        },
        Layer::Linear {
            inp: 8 * 12 * 12,
            out: 33,
        },
    ]);
    pass(&mut h, &conv, 23, 40);
    let path = sagd::cpu::capability();
    println!("{}: {h:#018x}", path.name());
    assert_eq!(
        h,
        0x81ce_e9aa_75de_7e07,
        "the fingerprint on the {} path differs from the one every path gave",
        path.name()
    );
}
