//! A minibatch pass that runs whole on one device, split over the processes of a split run by
//! images rather than by the CPU's pieces: each process's share of the images, its weighted
//! gradients relayed in rank order.

use sagd::error::Result;

use super::BatchInfo;

/// A minibatch pass that runs whole on one device (a GPU's), split over the processes of a split
/// run by images: `pass` runs on this process's contiguous share of the images of `x`
/// (b × `pixels`) and their rows of `noise` alone, and writes the share's mean gradients; each is
/// weighted by the share's images over b and the weighted gradients added in rank order along the
/// processes ([`sagd::share::relay_sum`]), the losses likewise. Every process ends with the same
/// bits, the same for any run on as many processes; another number of processes cuts other
/// shares, so results agree with one process's to rounding, not to the bit. `noise` is `groups`
/// blocks of b rows, row i of each block belonging to image i (one block of ε for the VAE;
/// [`sagd_noise_blocks`](super::sagd_noise_blocks) for SAGD). Outside a split run, `pass` on the
/// whole minibatch.
pub(super) fn by_shares(
    (x, pixels): (&[f32], usize),
    noise: &[f32],
    groups: usize,
    g_dec: &mut [f32],
    g_enc: &mut [f32],
    pass: impl FnOnce(&[f32], &[f32], &mut [f32], &mut [f32]) -> Result<BatchInfo>,
) -> Result<BatchInfo> {
    if sagd::share::current().is_none() {
        return pass(x, noise, g_dec, g_enc);
    }
    let b = x.len() / pixels;
    let mine = sagd::share::mine(b);
    let row = noise.len() / (groups * b).max(1);
    let xs = &x[mine.start * pixels..mine.end * pixels];
    let ns: Vec<f32> = noise
        .chunks_exact((b * row).max(1))
        .flat_map(|block| &block[mine.start * row..mine.end * row])
        .copied()
        .collect();
    let (mut gd, mut ge) = (vec![0.0f32; g_dec.len()], vec![0.0f32; g_enc.len()]);
    let info = if mine.is_empty() {
        BatchInfo::default()
    } else {
        sagd::share::whole(|| pass(xs, &ns, &mut gd, &mut ge))?
    };
    let weight = mine.len() as f32 / b as f32;
    let first = sagd::share::rank() == 0;
    for (out, part) in [(g_dec, &gd), (g_enc, &ge)] {
        if out.is_empty() {
            continue;
        }
        if first {
            out.iter_mut().zip(part).for_each(|(o, g)| *o = weight * g);
        }
        sagd::share::relay_sum(b, out, |out| {
            if !first {
                out.iter_mut().zip(part).for_each(|(o, g)| *o += weight * g);
            }
        })?;
    }
    let n = mine.len() as f64;
    let parts = sagd::share::gather(vec![(info.loss * n, info.displacement * n)])?;
    Ok(BatchInfo {
        loss: parts.iter().map(|p| p.0).sum::<f64>() / b as f64,
        displacement: parts.iter().map(|p| p.1).sum::<f64>() / b as f64,
    })
}

#[cfg(test)]
mod tests {
    use super::super::tests::{small_vae, PX};
    use super::super::{
        binarise, sagd_batch, sagd_noise_blocks, sagd_noise_len, vae_batch, Chains, Objective,
        Scratch,
    };
    use super::*;
    use sagd::rng::NormalStream;

    /// The largest difference between `a` and `b`, over the largest magnitude of `b`.
    fn relative_gap(a: &[f32], b: &[f32]) -> f64 {
        let gap = a
            .iter()
            .zip(b)
            .map(|(x, y)| (x - y).abs())
            .fold(0.0, f32::max);
        let size = b.iter().map(|y| y.abs()).fold(0.0, f32::max);
        (gap / size) as f64
    }

    /// A pass cut by images over processes (as GPUs run E3 split over processes), the CPU's
    /// pass standing in for the device's, against the same pass on the whole minibatch. A
    /// share that took the wrong rows of the noise or mis-weighted the images would move the
    /// gradients by their own size; a correct one only re-rounds them in f32, with sums of a
    /// few thousand terms: a relative gap near 1e-6, bounded here by 1e-4.
    #[test]
    fn a_pass_split_by_images_is_the_whole_pass_to_rounding() {
        let model = small_vae(4);
        let p = model.init(3);
        let b = 5;
        let mut rng = sagd::rng::Seed::new(11).rng();
        let pixels: Vec<u8> = (0..b * PX).map(|i| (i * 37 % 256) as u8).collect();
        let x = binarise(&pixels, &mut rng);
        let chains = Chains {
            per_image: 3,
            steps: 4,
            ..Chains::default()
        };
        for objective in [Objective::Vae, Objective::Sagd(chains)] {
            let (len, blocks) = match objective {
                Objective::Vae => (b * model.d, 1),
                Objective::Sagd(c) => (sagd_noise_len(&model, &c, b), sagd_noise_blocks(&c)),
            };
            let mut noise = vec![0.0f32; len];
            NormalStream::new(5).fill(&mut noise);
            let run = |x: &[f32], noise: &[f32], gd: &mut [f32], ge: &mut [f32]| {
                let scratch = &mut Scratch::default();
                match objective {
                    Objective::Vae => vae_batch(&model, &p, x, noise, gd, ge, scratch),
                    Objective::Sagd(c) => sagd_batch(&model, &p, x, &c, noise, gd, scratch),
                }
            };
            let enc_len = if objective == Objective::Vae {
                p.enc.len()
            } else {
                0
            };
            let split = || {
                let (mut gd, mut ge) = (vec![0.0f32; p.dec.len()], vec![0.0f32; enc_len]);
                let info = by_shares((&x, PX), &noise, blocks, &mut gd, &mut ge, run).unwrap();
                (info, gd, ge)
            };
            let whole = split();
            // Up to more processes than images (the sixth takes none).
            for processes in [2, 3, 6] {
                let runs = sagd::share::threads_as_processes(processes, split);
                let again = sagd::share::threads_as_processes(processes, split);
                for (r, (info, gd, ge)) in runs.iter().enumerate() {
                    let what = format!("{objective:?} on {processes} processes, rank {r}");
                    assert_eq!(
                        (info, gd, ge),
                        (&runs[0].0, &runs[0].1, &runs[0].2),
                        "{what}"
                    );
                    assert_eq!(
                        (info, gd, ge),
                        (&again[r].0, &again[r].1, &again[r].2),
                        "{what}"
                    );
                    assert!(relative_gap(gd, &whole.1) < 1e-4, "{what}: generator");
                    if enc_len > 0 {
                        assert!(relative_gap(ge, &whole.2) < 1e-4, "{what}: encoder");
                    }
                    let loss_gap = (info.loss - whole.0.loss).abs() / whole.0.loss.abs();
                    assert!(
                        loss_gap < 1e-5,
                        "{what}: loss {} against {}",
                        info.loss,
                        whole.0.loss
                    );
                    let disp_gap = (info.displacement - whole.0.displacement).abs();
                    assert!(
                        disp_gap <= 1e-5 * whole.0.displacement,
                        "{what}: displacement"
                    );
                }
            }
        }
    }
}
