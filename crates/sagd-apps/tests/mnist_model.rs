//! E3's passes: the VAE's and SAGD's gradients against finite differences along random directions,
//! the Euler step's first move, and the importance-sampling estimator's invariants, on a few
//! real MNIST images; and which schemes a GPU's chains take.

use rand::SeedableRng;
use rand_xoshiro::Xoshiro256PlusPlus;
use sagd::rng::NormalStream;
use sagd_apps::mnist::model::{
    binarise, held_out, sagd_batch, sagd_batch_continued, sagd_noise_len, vae_batch, BatchInfo,
    Carried, Chains, Scratch, E3,
};
use sagd_apps::mnist::{self, PIXELS};
use sagd_nn::vae::VaeParams;

fn images(n: usize) -> Vec<f32> {
    let m = mnist::load(&mnist::shipped_dir()).unwrap();
    let mut rng = Xoshiro256PlusPlus::seed_from_u64(1);
    binarise(&m.train.images[..n * PIXELS], &mut rng)
}

fn normals(n: usize, seed: u64) -> Vec<f32> {
    let mut v = vec![0.0f32; n];
    NormalStream::new(seed).fill(&mut v);
    v
}

/// ⟨g, v⟩ against the central difference of `loss` along v (both networks' parameters moved by
/// h·v), relative agreement.
fn directional(
    loss: &dyn Fn(&VaeParams) -> f64,
    p: &VaeParams,
    g: &VaeParams,
    h: f32,
) -> (f64, f64) {
    let vg = normals(p.dec.len(), 5);
    let ve = normals(p.enc.len(), 6);
    let moved = |s: f32| VaeParams {
        dec: p.dec.iter().zip(&vg).map(|(a, v)| a + s * v).collect(),
        enc: p.enc.iter().zip(&ve).map(|(a, v)| a + s * v).collect(),
    };
    let fd = (loss(&moved(h)) - loss(&moved(-h))) / (2.0 * h as f64);
    let dot = |a: &[f32], b: &[f32]| {
        a.iter()
            .zip(b)
            .map(|(x, y)| (*x as f64) * (*y as f64))
            .sum::<f64>()
    };
    (dot(&g.dec, &vg) + dot(&g.enc, &ve), fd)
}

#[test]
fn the_vae_gradient_is_that_of_its_loss() {
    // Smooth enough along a random direction at a small step; ReLU kinks move the loss by
    // O(h²) per crossing.
    let m = sagd_apps::mnist::e3(4);
    let p = m.init(3);
    let x = images(6);
    let eps = normals(6 * 4, 9);
    let mut pool = Scratch::default();
    let mut g = VaeParams {
        dec: vec![0.0; p.dec.len()],
        enc: vec![0.0; p.enc.len()],
    };
    let info = vae_batch(&m, &p, &x, &eps, &mut g.dec, &mut g.enc, &mut pool).unwrap();
    assert!(info.loss > 0.0 && info.loss.is_finite());
    let loss = |q: &VaeParams| {
        let mut scratch = VaeParams {
            dec: vec![0.0; q.dec.len()],
            enc: vec![0.0; q.enc.len()],
        };
        vae_batch(
            &m,
            q,
            &x,
            &eps,
            &mut scratch.dec,
            &mut scratch.enc,
            &mut Scratch::default(),
        )
        .unwrap()
        .loss
    };
    let (analytic, fd) = directional(&loss, &p, &g, 1e-3);
    assert!(
        (analytic - fd).abs() < 2e-2 * analytic.abs().max(1.0),
        "{analytic} vs {fd}"
    );
}

#[test]
fn sagd_without_steps_is_the_gradient_at_the_encoders_draws() {
    let m = sagd_apps::mnist::e3(4);
    let p = m.init(4);
    let x = images(3);
    let chains = Chains {
        per_image: 2,
        steps: 0,
        ..Chains::default()
    };
    let noise = normals(sagd_noise_len(&m, &chains, 3), 11);
    let mut pool = Scratch::default();
    let mut gg = vec![0.0f32; p.dec.len()];
    let info = sagd_batch(&m, &p, &x, &chains, &noise, &mut gg, &mut pool).unwrap();
    assert_eq!(info.displacement, 0.0);
    let g = VaeParams {
        dec: gg,
        enc: vec![0.0; p.enc.len()],
    };
    // The loss at fixed draws depends on the encoder too (through u₀), but the gradient is the
    // generator's only: compare along a direction that moves the generator alone.
    let loss = |q: &VaeParams| {
        let q = VaeParams {
            dec: q.dec.clone(),
            enc: p.enc.clone(),
        };
        let mut scratch = vec![0.0f32; q.dec.len()];
        sagd_batch(
            &m,
            &q,
            &x,
            &chains,
            &noise,
            &mut scratch,
            &mut Scratch::default(),
        )
        .unwrap()
        .loss
    };
    let (analytic, fd) = directional(&loss, &p, &g, 1e-3);
    assert!(
        (analytic - fd).abs() < 2e-2 * analytic.abs().max(1.0),
        "{analytic} vs {fd}"
    );
}

#[test]
fn the_first_euler_step_moves_by_delta_rho() {
    // u₁ = u₀ + δ ρ₀: the mean displacement after one step is δ times the mean ‖ρ₀‖.
    let m = sagd_apps::mnist::e3(4);
    let p = m.init(5);
    let x = images(2);
    let chains = Chains {
        per_image: 3,
        steps: 1,
        ..Chains::default()
    };
    let noise = normals(sagd_noise_len(&m, &chains, 2), 13);
    let mut gg = vec![0.0f32; p.dec.len()];
    let info = sagd_batch(
        &m,
        &p,
        &x,
        &chains,
        &noise,
        &mut gg,
        &mut Scratch::default(),
    )
    .unwrap();
    let rows = 6;
    let rho0 = &noise[rows * 4..2 * rows * 4];
    let want = rho0
        .chunks_exact(4)
        .map(|r| r.iter().map(|v| (*v as f64).powi(2)).sum::<f64>().sqrt())
        .sum::<f64>()
        / rows as f64
        * chains.delta;
    assert!(
        (info.displacement - want).abs() < 1e-6 * want,
        "{} vs {want}",
        info.displacement
    );
}

#[test]
fn held_out_estimates_bound_the_elbo_and_repeat_with_their_seed() {
    let m = sagd_apps::mnist::e3(4);
    let p = m.init(6);
    let x = images(3);
    let mut pool = Scratch::default();
    let a = held_out(&m, &p.dec, &p.enc, &x, 50, 7, &mut pool).unwrap();
    let b = held_out(&m, &p.dec, &p.enc, &x, 50, 7, &mut pool).unwrap();
    assert_eq!(a, b);
    for h in &a {
        // log of the mean weight ≥ the mean log weight (Jensen, on the same draws), and a
        // binary image has log p(x) < 0.
        assert!(h.log_px >= h.elbo && h.log_px < 0.0, "{h:?}");
        assert!(h.ess >= 1.0 && h.ess <= 50.0 + 1e-9, "{h:?}");
    }
}

/// SAGD's pass on 2 images with every parameter zero (d = 4): the encoder gives u₀ = ε (μ = 0,
/// log σ² = 0) and the likelihood does not depend on u, so the posterior is N(0, I) and
/// ∇u log p(u | x) = −u. The pass's result and its noise (drawn from `seed`).
fn on_a_flat_likelihood(chains: &Chains, seed: u64) -> (BatchInfo, Vec<f32>) {
    let m = sagd_apps::mnist::e3(4);
    let p = m.init(1);
    let p = VaeParams {
        dec: vec![0.0; p.dec.len()],
        enc: vec![0.0; p.enc.len()],
    };
    let noise = normals(sagd_noise_len(&m, chains, 2), seed);
    let mut gg = vec![0.0f32; p.dec.len()];
    let mut scratch = Scratch::default();
    let info = sagd_batch(&m, &p, &images(2), chains, &noise, &mut gg, &mut scratch).unwrap();
    (info, noise)
}

#[test]
fn baoab_takes_its_first_step_on_a_flat_likelihood() {
    // One BAOAB step: ρ' = ρ₀ − (δ/2)u₀, u' = u₀ + (δ/2)ρ', ρ'' = e^(−γδ)ρ' + √(1 − e^(−2γδ)) η,
    // u₁ = u' + (δ/2)ρ''.
    let chains = Chains {
        scheme: sagd::langevin::Scheme::Baoab,
        per_image: 3,
        steps: 1,
        delta: 0.3,
        ..Chains::default()
    };
    let (info, noise) = on_a_flat_likelihood(&chains, 17);
    let (rows, d) = (6, 4);
    let (eps, rest) = noise.split_at(rows * d);
    let (rho0, eta) = rest.split_at(rows * d);
    let (h, c1) = (0.15f64, (-2.0f64 * 0.3).exp());
    let c2 = (1.0 - c1 * c1).sqrt();
    let want = (0..rows)
        .map(|r| {
            (0..d)
                .map(|j| {
                    let i = r * d + j;
                    let (u0, r0, e) = (eps[i] as f64, rho0[i] as f64, eta[i] as f64);
                    let r1 = r0 - h * u0;
                    let r2 = c1 * r1 + c2 * e;
                    (h * r1 + h * r2).powi(2)
                })
                .sum::<f64>()
                .sqrt()
        })
        .sum::<f64>()
        / rows as f64;
    assert!(
        (info.displacement - want).abs() < 1e-5 * want,
        "{} vs {want}",
        info.displacement
    );
}

#[test]
fn every_scheme_runs_the_core_program_on_a_flat_likelihood() {
    // On N(0, I), E3's chains must move exactly as the core's program on that Gaussian with the
    // same draws (OBABO and UBU take more per step).
    let (rows, d) = (6, 4);
    for scheme in sagd::langevin::Scheme::ALL {
        let chains = Chains {
            scheme,
            per_image: 3,
            steps: 4,
            delta: 0.2,
            ..Chains::default()
        };
        let (info, noise) = on_a_flat_likelihood(&chains, 19);
        let (eps, rest) = noise.split_at(rows * d);
        let (rho0, eta) = rest.split_at(rows * d);
        let kernel = chains.kernel().unwrap();
        assert_eq!(
            eta.len(),
            4 * kernel.normals_per_step() * rows * d,
            "{scheme}"
        );
        let target = sagd::model::IsoGaussian {
            dim: d,
            mean: 0.0,
            sd: 1.0,
        };
        let (mut u, mut rho) = (eps.to_vec(), rho0.to_vec());
        let block = |i: usize| &eta[i * rows * d..(i + 1) * rows * d];
        kernel
            .run_with_noise(&target, &mut u, &mut rho, 4, block)
            .unwrap();
        let want = u
            .chunks_exact(d)
            .zip(eps.chunks_exact(d))
            .map(|(a, b)| {
                a.iter()
                    .zip(b)
                    .map(|(x, y)| ((x - y) as f64).powi(2))
                    .sum::<f64>()
                    .sqrt()
            })
            .sum::<f64>()
            / rows as f64;
        assert!(want > 0.05, "{scheme}: the chains moved by {want}");
        assert_eq!(info.displacement, want, "{scheme}");
    }
}

#[test]
fn continued_chains_join_two_visits_into_one_run_bit_for_bit() {
    // K steps, kept, then K more on the next draws: the positions, momenta and generator
    // gradient of one run of 2K steps on the same draws (a pass that dropped the carried
    // momenta, or restarted a carried chain from the encoder, would differ).
    let m = sagd_apps::mnist::e3(5);
    let p = m.init(4);
    let x = images(3);
    let (k, d, rows) = (3, 5, 2 * 3);
    let chains = |steps| Chains {
        scheme: sagd::langevin::Scheme::Baoab,
        per_image: 2,
        steps,
        refresh_every: Some(10),
        ..Chains::default()
    };
    let fresh = || Carried {
        from: vec![false; rows],
        u: vec![0.0; rows * d],
        rho: vec![0.0; rows * d],
    };
    let whole = normals(sagd_noise_len(&m, &chains(2 * k), 3), 8);
    let first = &whole[..sagd_noise_len(&m, &chains(k), 3)];
    // The second visit's ε and ρ₀ go unused by carried chains; its steps' draws follow.
    let mut second = vec![0.0f32; 2 * rows * d];
    second.extend_from_slice(&whole[first.len()..]);
    let mut scratch = Scratch::default();
    let mut g = vec![0.0f32; p.dec.len()];
    let mut joined = fresh();
    for noise in [first, &second[..]] {
        sagd_batch_continued(
            &m,
            &p,
            &x,
            &chains(k),
            noise,
            &mut joined,
            &mut g,
            &mut scratch,
        )
        .unwrap();
    }
    let (mut once, mut g_once) = (fresh(), vec![0.0f32; p.dec.len()]);
    sagd_batch_continued(
        &m,
        &p,
        &x,
        &chains(2 * k),
        &whole,
        &mut once,
        &mut g_once,
        &mut scratch,
    )
    .unwrap();
    assert!(joined.from.iter().all(|&f| f));
    assert_eq!((&joined.u, &joined.rho), (&once.u, &once.rho));
    assert_eq!(g, g_once);
    // The cut pass of sagd_batch gives the same gradient (the positions do not depend on
    // whether the last transition's momentum is finished).
    let mut g_cut = vec![0.0f32; p.dec.len()];
    sagd_batch(&m, &p, &x, &chains(2 * k), &whole, &mut g_cut, &mut scratch).unwrap();
    assert_eq!(g_cut, g_once);
}

/// The inputs of the tests of the passes' bits: 12 images × 20 chains: 240 chain states in
/// blocks of 100, 100 and 40; 16 final pieces of 15; the VAE's 2 pieces of 6 images.
struct Passes {
    m: E3,
    p: VaeParams,
    x: Vec<f32>,
    chains: Chains,
    noise: Vec<f32>,
    eps: Vec<f32>,
}

fn passes() -> Passes {
    let m = sagd_apps::mnist::e3(20);
    let p = m.init(4);
    let chains = Chains::default();
    let noise = normals(sagd_noise_len(&m, &chains, 12), 8);
    Passes {
        m,
        p,
        x: images(12),
        chains,
        noise,
        eps: normals(12 * 20, 9),
    }
}

#[test]
fn the_passes_give_the_same_bits_on_any_number_of_threads() {
    let Passes {
        m,
        p,
        x,
        chains,
        noise,
        eps,
    } = passes();
    let run = |threads: usize| {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .unwrap();
        pool.install(|| {
            let mut scratch = Scratch::default();
            let mut g = VaeParams {
                dec: vec![0.0; p.dec.len()],
                enc: vec![0.0; p.enc.len()],
            };
            let vae = vae_batch(&m, &p, &x, &eps, &mut g.dec, &mut g.enc, &mut scratch).unwrap();
            let mut gs = vec![0.0; p.dec.len()];
            let sagd = sagd_batch(&m, &p, &x, &chains, &noise, &mut gs, &mut scratch).unwrap();
            (vae, g, sagd, gs)
        })
    };
    let one = run(1);
    for threads in [2, 5] {
        let other = run(threads);
        assert_eq!(other.0, one.0, "VAE loss, {threads} threads");
        assert_eq!(other.1, one.1, "VAE gradients, {threads} threads");
        assert_eq!(
            other.2, one.2,
            "SAGD loss and displacement, {threads} threads"
        );
        assert_eq!(other.3, one.3, "SAGD gradient, {threads} threads");
    }
    assert!(one.3.iter().any(|v| *v != 0.0));
}

#[test]
fn the_passes_split_over_processes_give_one_processs_bits() {
    // The VAE's 2 pieces (a third process has none), 3 blocks of chains, 16 final pieces; 12
    // held-out images.
    let Passes {
        m,
        p,
        x,
        chains,
        noise,
        eps,
    } = passes();
    let run = || {
        let mut scratch = Scratch::default();
        let mut g = VaeParams {
            dec: vec![f32::NAN; p.dec.len()],
            enc: vec![f32::NAN; p.enc.len()],
        };
        let vae = vae_batch(&m, &p, &x, &eps, &mut g.dec, &mut g.enc, &mut scratch).unwrap();
        let mut gs = vec![f32::NAN; p.dec.len()];
        let sagd = sagd_batch(&m, &p, &x, &chains, &noise, &mut gs, &mut scratch).unwrap();
        let held = held_out(&m, &p.dec, &p.enc, &x, 30, 7, &mut scratch).unwrap();
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        (vae, bits(&g.dec), bits(&g.enc), sagd, bits(&gs), held)
    };
    let one = run();
    assert!(one.4.iter().any(|b| f32::from_bits(*b) != 0.0));
    let before = sagd::share::exchanged();
    for processes in [2, 3, 5] {
        for (rank, got) in sagd::share::threads_as_processes(processes, run)
            .into_iter()
            .enumerate()
        {
            let at = format!("process {rank} of {processes}");
            assert_eq!(got.0, one.0, "VAE loss, {at}");
            assert!(got.1 == one.1 && got.2 == one.2, "VAE gradients, {at}");
            assert_eq!(got.3, one.3, "SAGD loss and displacement, {at}");
            assert!(got.4 == one.4, "SAGD gradient, {at}");
            assert_eq!(got.5, one.5, "held-out estimates, {at}");
        }
    }
    assert!(sagd::share::exchanged().since(&before).sent > 0, "split");
}

#[test]
fn continued_passes_split_over_processes_give_one_processs_bits() {
    // A third of the 240 chains carried in, the rest from the encoder: every process ends with
    // one process's gradient and every chain's last position and momentum.
    let Passes {
        m,
        p,
        x,
        chains,
        noise,
        ..
    } = passes();
    let (rows, d) = (12 * chains.per_image, m.d);
    let run = || {
        let mut carried = Carried {
            from: (0..rows).map(|r| r % 3 == 0).collect(),
            u: normals(rows * d, 10),
            rho: normals(rows * d, 11),
        };
        let mut g = vec![f32::NAN; p.dec.len()];
        let mut scratch = Scratch::default();
        let info = sagd_batch_continued(
            &m,
            &p,
            &x,
            &chains,
            &noise,
            &mut carried,
            &mut g,
            &mut scratch,
        )
        .unwrap();
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        (info, bits(&g), bits(&carried.u), bits(&carried.rho))
    };
    let one = run();
    for processes in [2, 3] {
        for (rank, got) in sagd::share::threads_as_processes(processes, run)
            .into_iter()
            .enumerate()
        {
            assert!(got == one, "process {rank} of {processes}");
        }
    }
}

/// A GPU runs E3's chains of every scheme (their programs are drifts, kicks, exact flows and
/// evaluations) and chains that persist between visits in a run of one process; it refuses, by
/// name and before any work, persistent chains in a run split over processes. The CPU runs them
/// all.
#[test]
fn a_gpu_takes_every_scheme_and_refuses_persistent_chains_only_when_split() {
    use sagd::langevin::Scheme;
    use sagd_nn::Device;
    for scheme in Scheme::ALL {
        let chains = Chains {
            scheme,
            ..Chains::default()
        };
        assert!(chains.runs_on(Device::Cpu).is_ok(), "{scheme}");
        let gpu = chains.runs_on(Device::Cuda(0));
        assert!(gpu.is_ok(), "{scheme}: {gpu:?}");
        let persistent = Chains {
            refresh_every: Some(5),
            ..chains
        };
        assert!(persistent.runs_on(Device::Cpu).is_ok(), "{scheme}");
        let gpu = persistent.runs_on(Device::Cuda(0));
        assert!(gpu.is_ok(), "{scheme}: {gpu:?}");
        // Split over two processes: the CPU still runs them, a GPU refuses them by name.
        let split = sagd::share::threads_as_processes(2, || {
            let cpu = persistent.runs_on(Device::Cpu).is_ok();
            let gpu = persistent.runs_on(Device::Cuda(0));
            (cpu, gpu.err().map(|e| e.to_string()).unwrap_or_default())
        });
        for (cpu, err) in split {
            assert!(cpu, "{scheme}");
            assert!(
                err.contains("refresh-every") && err.contains("one GPU's process"),
                "{scheme}: {err}"
            );
        }
    }
}
