//! E3's binary images on the GPU against the CPU: E3's passes and training phases on synthetic
//! 28 × 28 images, and the same on a small convolutional model of 8 × 8 images that the CPU's
//! stand-in for a GPU runs in seconds (CI's).

use super::training::{
    compare, train_updates, training_check, EstimatorCheck, TrainingCheck, TRAINING_UPDATES,
};
use super::*;

/// E3 on 400 synthetic grey images (strokes of varying intensity): the VAE's ELBO, and SAGD's
/// chains (every scheme, and chains that persist between visits) with the same binarisations and
/// noise on both sides; then the chains again from a steep generator ([`STEEP`] times its initial
/// parameters), where a chain step gone wrong shows in the gradient (a mutation that drops half
/// of each pass's program moves E3's Euler row by 0.79 there, and hardly at all at the initial
/// scale).
pub(super) fn check_e3_estimators(
    seed: u64,
    ordinal: usize,
) -> sagd::error::Result<Vec<EstimatorCheck>> {
    let images = synthetic_images(400, 28);
    let model = crate::mnist::e3(20);
    let params = model.init(seed);
    let chains = Chains::default();
    let ids = (seed, ordinal);
    let mut out = binary_image_estimators("E3", (&model, &params), &images, chains, true, ids)?;
    let steep_at = (&model, &steep(&params));
    let label = "E3 (generator x4)";
    out.extend(binary_image_estimators(
        label, steep_at, &images, chains, false, ids,
    )?);
    Ok(out)
}

/// The binary images' passes of `model` at `params` on both engines, on the first 200 of
/// `images`: the VAE's ELBO (with `vae`), SAGD's `chains` under every scheme, and chains that
/// persist between visits; the cases named after `label`.
fn binary_image_estimators(
    label: &str,
    (model, params): (&BernoulliVae, &VaeParams),
    images: &[u8],
    chains: Chains,
    vae: bool,
    (seed, ordinal): (u64, usize),
) -> sagd::error::Result<Vec<EstimatorCheck>> {
    use sagd::langevin::Scheme;
    let batch: Vec<usize> = (0..200).collect();
    let mut shape = format!("{} chains x {} steps", chains.per_image, chains.steps);
    if chains.delta != Chains::default().delta {
        shape.push_str(&format!(", δ = {}", chains.delta));
    }
    let sagd = |name: &str, scheme| {
        let name = format!("{label} sagd {name}, {shape}");
        (name, Objective::Sagd(Chains { scheme, ..chains }))
    };
    let vae = vae.then(|| (format!("{label} vae, batch 200"), Objective::Vae));
    let cases = [
        sagd("euler", Scheme::Euler),
        sagd("obabo", Scheme::Obabo),
        sagd("baoab", Scheme::Baoab),
        sagd("ubu", Scheme::Ubu),
        // Chains that persist: the second of the three updates continues the first's chains.
        (
            format!("{label} sagd euler, persistent (refresh every 2), {shape}"),
            Objective::Sagd(Chains {
                refresh_every: Some(2),
                ..chains
            }),
        ),
    ];
    let mut out = Vec::new();
    for (name, objective) in vae.into_iter().chain(cases) {
        let mut cpu = E3Estimator::new(model, images, objective, seed);
        let mut gpu = E3Estimator::on(Device::Cuda(ordinal), model, images, objective, seed)?;
        out.push(compare(name, &mut cpu, &mut gpu, params, &batch)?);
    }
    Ok(out)
}

/// The steep checks' generator starts at its initial parameters times this: at the initial
/// scale its images hardly depend on the latent, so the gradient at the chains' last states
/// hardly tells how far they moved (on the small model, half of each transition's program left
/// out moved it by 6e-4, under the check's tolerance); at 4 times it moves it by 0.58 (E3's:
/// 0.79).
const STEEP: f32 = 4.0;

/// A small convolutional VAE of binary 8 × 8 images, E3's shape in miniature (2 latent
/// dimensions; the generator 2 → 64 → 2·2·8, then transposed convolutions 8 → 4 → 1 channels,
/// 2 → 4 → 8 pixels a side; the encoder the mirror, convolutions 1 → 4 → 8, then 32 → 64 →
/// μ, log σ²): every kind of layer E3's passes launch, at a size the CPU's stand-in for a GPU
/// runs in seconds.
fn small_images_model() -> sagd::error::Result<BernoulliVae> {
    let (k, stride, pad) = (4, 2, 1);
    let relu = Layer::Act {
        act: Activation::Relu,
    };
    let conv = |c_in, c_out, side| Layer::Conv {
        c_in,
        c_out,
        side,
        k,
        stride,
        pad,
    };
    let conv_t = |c_in, c_out, side| Layer::ConvT {
        c_in,
        c_out,
        side,
        k,
        stride,
        pad,
    };
    let linear = |inp, out| Layer::Linear { inp, out };
    BernoulliVae::new(
        Sequential::new(vec![
            linear(2, 64),
            relu,
            linear(64, 32),
            relu,
            conv_t(8, 4, 2),
            relu,
            conv_t(4, 1, 4),
        ]),
        Sequential::new(vec![
            conv(1, 4, 8),
            relu,
            conv(4, 8, 4),
            relu,
            linear(32, 64),
            relu,
            linear(64, 4),
        ]),
    )
}

/// E3's estimators and training ([`check_estimators`]' and [`check_training`]'s E3 cases) on a
/// small convolutional VAE of 400 synthetic 8 × 8 images: what CI runs on the CPU's stand-in for
/// a GPU (`scripts/gpu_on_cpu.sh`), where E3's own networks take many minutes. The generator
/// starts steep (its initial parameters times 4) and the chains step at δ = 0.1, so that where
/// the chains end shows in the gradient; the training goes through the training job, the device
/// taking Adam's steps, 3 updates of minibatches of 100 at a rate of 1e-3 per phase.
pub fn check_e3_small(
    seed: u64,
    ordinal: usize,
) -> sagd::error::Result<(Vec<EstimatorCheck>, Vec<TrainingCheck>)> {
    Ok((
        e3_small_estimators(seed, ordinal)?,
        e3_small_training(seed, ordinal)?,
    ))
}

/// The small check's model, images, chains and start.
fn e3_small() -> sagd::error::Result<(BernoulliVae, Vec<u8>, Chains)> {
    let chains = Chains {
        delta: 0.1,
        ..Chains::default()
    };
    Ok((small_images_model()?, synthetic_images(400, 8), chains))
}

/// `p` with the generator's parameters times [`STEEP`].
fn steep(p: &VaeParams) -> VaeParams {
    let mut q = p.clone();
    q.dec.iter_mut().for_each(|v| *v *= STEEP);
    q
}

/// The estimators of [`check_e3_small`].
pub(super) fn e3_small_estimators(
    seed: u64,
    ordinal: usize,
) -> sagd::error::Result<Vec<EstimatorCheck>> {
    let (model, images, chains) = e3_small()?;
    let at = (&model, &steep(&model.init(seed)));
    binary_image_estimators("8x8", at, &images, chains, true, (seed, ordinal))
}

/// The training of [`check_e3_small`].
pub(super) fn e3_small_training(
    seed: u64,
    ordinal: usize,
) -> sagd::error::Result<Vec<TrainingCheck>> {
    let (model, images, chains) = e3_small()?;
    let p0 = steep(&model.init(seed));
    let sizes = (model.gen.n_params(), model.enc.n_params());
    let mut training = Vec::new();
    for (phase, objective) in [
        ("8x8 vae", Objective::Vae),
        ("8x8 sagd (euler, δ = 0.1)", Objective::Sagd(chains)),
    ] {
        let train = |device, start: &VaeParams| {
            let mut est = E3Estimator::on(device, &model, &images, objective, seed)?;
            train_updates(&mut est, sizes, 400, start, seed)
        };
        let encoder = objective == Objective::Vae;
        training.push(training_check(phase, encoder, &p0, train, ordinal)?);
    }
    Ok(training)
}

/// E3's VAE and SAGD phases, 3 updates each of minibatches of 200 synthetic images, through
/// E3's own phases on the CPU (the host's Adam) and on GPU `ordinal` (the device's), with the
/// CPU's own rounding floor.
pub(super) fn e3_training(seed: u64, ordinal: usize) -> sagd::error::Result<Vec<TrainingCheck>> {
    use crate::mnist::experiment::{train_phase_from, E3Settings};
    let images = synthetic_images(400, 28);
    let s = E3Settings {
        train_n: 400,
        seed,
        ..E3Settings::default()
    };
    let model = crate::mnist::e3(s.latent);
    let p0 = model.init(sagd::rng::Seed::new(seed).stream("init").get());
    let none = |_: &str, _: usize, _: usize| {};
    let mut out = Vec::new();
    for objective in [Objective::Vae, Objective::Sagd(Chains::default())] {
        let train = |device, start: &VaeParams| {
            let (updates, start) = (TRAINING_UPDATES, start.clone());
            train_phase_from(&s, &images, objective, updates, start, device, &none)
        };
        let phase = match objective {
            Objective::Vae => "E3 vae",
            Objective::Sagd(_) => "E3 sagd (euler)",
        };
        let encoder = objective == Objective::Vae;
        out.push(training_check(phase, encoder, &p0, train, ordinal)?);
    }
    Ok(out)
}

/// `n` grey `side` × `side` images of vertical strokes of varying place and intensity.
fn synthetic_images(n: usize, side: usize) -> Vec<u8> {
    let px = side * side;
    (0..n * px)
        .map(|i| {
            let (img, p) = (i / px, i % px);
            let (y, x) = (p / side, p % side);
            if (x + img) % 7 < 3 && (side / 7..side * 6 / 7).contains(&y) {
                (128 + (img * 13 + p) % 128) as u8
            } else {
                0
            }
        })
        .collect()
}
