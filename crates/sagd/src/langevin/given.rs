//! The kernel's program on rows of chains whose normal draws the caller gives: for engines that
//! draw all of a pass's noise at once (so that another device, or a split run, reads the same
//! draws) and need only the chains' last positions.

use super::block::{evaluated, row_finite, run_block, Block};
use super::{Instruction, Kernel, Op};
use crate::error::{check_len, Result, SagdError};
use crate::model::LogDensity;
use crate::real::Real;

impl<T: Real> Kernel<T> {
    /// Blocks of normal draws (one per coordinate of every row) that one transition takes: one per
    /// noisy kick and per momentum refresh, two per Ornstein-Uhlenbeck flow. Euler and BAOAB take
    /// one, OBABO two, UBU four.
    pub fn normals_per_step(&self) -> usize {
        self.ops.iter().map(Op::normals).sum()
    }

    /// The program up to its last move of the positions: what a transition must run when only
    /// the positions after it are wanted.
    fn to_last_move(&self) -> Kernel<T> {
        let end = self
            .ops
            .iter()
            .rposition(|op| matches!(op, Op::Drift(_) | Op::Ou { .. }))
            .map_or(0, |i| i + 1);
        Kernel {
            ops: self.ops[..end].to_vec(),
            metropolis: self.metropolis,
        }
    }
}

impl<T: Real> Kernel<T> {
    /// Runs `steps` transitions of this kernel on the chains whose positions are the rows of `x`
    /// (each of `target.dim()` values) and momenta the rows of `rho`, and leaves their last
    /// positions in `x`. `draws(i)` gives the i-th block of normal draws (rows × dim, row-major):
    /// transition s takes blocks s·m … s·m + m − 1, m = [`Kernel::normals_per_step`], in the
    /// program's order. Returns the number of divergences (a diverged row restarts at its last
    /// state with ρ = 0).
    ///
    /// The target is evaluated once at the start and once per transition, but not after the last
    /// move of the positions, which nothing here would read: K Euler steps evaluate it K times
    /// (`rho` is then left part-way through the last transition; [`Kernel::continue_with_noise`]
    /// finishes it). The same program on the same draws gives the same bits as a
    /// [`super::ChainSet`] step.
    pub fn run_with_noise<'n>(
        &self,
        target: &impl LogDensity<T>,
        x: &mut [T],
        rho: &mut [T],
        steps: usize,
        draws: impl Fn(usize) -> &'n [T],
    ) -> Result<usize> {
        self.given(target, (x, rho), steps, draws, &self.to_last_move())
    }

    /// [`Kernel::run_with_noise`] with every transition whole: the last one's momentum too, at
    /// one more evaluation of the target, so that `x` and `rho` are where the chains continue
    /// from. K steps and then K more on the next draws give the bits of 2K steps at once.
    pub fn continue_with_noise<'n>(
        &self,
        target: &impl LogDensity<T>,
        x: &mut [T],
        rho: &mut [T],
        steps: usize,
        draws: impl Fn(usize) -> &'n [T],
    ) -> Result<usize> {
        self.given(target, (x, rho), steps, draws, self)
    }

    /// What [`Kernel::run_with_noise`] runs after its first evaluation of the target, as one
    /// list: the [`Kernel::instructions`] of `steps` transitions (the last up to its last move of
    /// the positions), each draw numbered from the run's first block (transition s's from
    /// s·[`Kernel::normals_per_step`]). For an engine that runs the whole program in place on one
    /// state (E3's chains on a GPU), without the divergence checks.
    #[doc(hidden)]
    pub fn unrolled(&self, steps: usize) -> Vec<Instruction<T>> {
        self.unrolled_to(steps, &self.to_last_move())
    }

    /// [`Kernel::unrolled`] with every transition whole, as [`Kernel::continue_with_noise`]
    /// runs them: for chains that persist, their momenta where the next run continues them.
    #[doc(hidden)]
    pub fn unrolled_whole(&self, steps: usize) -> Vec<Instruction<T>> {
        self.unrolled_to(steps, self)
    }

    /// The instructions of `steps` transitions, the last one by the program `last`.
    fn unrolled_to(&self, steps: usize, last: &Kernel<T>) -> Vec<Instruction<T>> {
        let per_step = self.normals_per_step();
        let mut out = Vec::new();
        for s in 0..steps {
            let program = if s + 1 == steps { last } else { self };
            out.extend(program.instructions().map(|i| Instruction {
                draw: i.draw.map(|k| s * per_step + k),
                ..i
            }));
        }
        out
    }

    /// The transitions of [`Kernel::run_with_noise`], the last one by the program `last`.
    fn given<'n>(
        &self,
        target: &impl LogDensity<T>,
        (x, rho): (&mut [T], &mut [T]),
        steps: usize,
        draws: impl Fn(usize) -> &'n [T],
        last: &Kernel<T>,
    ) -> Result<usize> {
        if self.metropolis {
            return Err(SagdError::InvalidSetting {
                name: "kernel",
                value: "hmc".into(),
                fix: "a Metropolis test draws from each chain's stream: run HMC on a ChainSet"
                    .into(),
            });
        }
        let d = target.dim().max(1);
        let rows = x.len() / d;
        check_len("positions (rows × target dimension)", rows * d, x.len())?;
        check_len("momenta (as the positions)", x.len(), rho.len())?;
        if steps == 0 || rows == 0 {
            return Ok(0);
        }
        let (mut xa, mut xb) = (x.to_vec(), x.to_vec());
        let (mut ga, mut gb) = (vec![T::zero(); x.len()], vec![T::zero(); x.len()]);
        let (mut la, mut lb) = (vec![T::zero(); rows], vec![T::zero(); rows]);
        evaluated(target.logp_grad(0, &xa, &mut la, &mut ga), &mut la)?;
        if let Some(chain) = (0..rows).find(|&r| !row_finite(&xa, &ga, &la, r, d)) {
            return Err(SagdError::NonFiniteStart { chain });
        }
        let per_step = self.normals_per_step();
        let mut divergences = 0;
        for s in 0..steps {
            let step: Vec<&[T]> = (0..per_step).map(|j| draws(s * per_step + j)).collect();
            for block in &step {
                check_len(
                    "a block of given normal draws (rows × dim)",
                    x.len(),
                    block.len(),
                )?;
            }
            let parts = (
                &xa[..],
                &mut xb[..],
                &ga[..],
                &mut gb[..],
                &la[..],
                &mut lb[..],
                &mut *rho,
                &mut [][..],
                &mut [][..],
            );
            let program = if s + 1 == steps { last } else { self };
            let b = Block::new(0, parts).with_draws(&step);
            divergences += run_block(target, program, b, None)?.divergences;
            std::mem::swap(&mut xa, &mut xb);
            std::mem::swap(&mut ga, &mut gb);
            std::mem::swap(&mut la, &mut lb);
        }
        x.copy_from_slice(&xa);
        Ok(divergences)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::langevin::{ChainSet, LangevinSettings, Momentum, Scheme};
    use crate::model::IsoGaussian;
    use crate::rng::ChainRng;

    /// The draws a ChainSet's rows take from their streams over `steps` transitions of `kernel`,
    /// laid out as `run_with_noise` reads them.
    fn streams_draws(
        kernel: &Kernel<f64>,
        rows: usize,
        d: usize,
        steps: usize,
        seed: u64,
    ) -> Vec<Vec<f64>> {
        let mut rngs: Vec<ChainRng> = (0..rows as u64).map(|c| ChainRng::new(seed, c)).collect();
        let mut blocks = Vec::new();
        for _ in 0..steps {
            for op in &kernel.ops {
                let width = op.normals();
                let mut mine = vec![vec![0.0; rows * d]; width];
                for (r, rng) in rngs.iter_mut().enumerate() {
                    let mut row = vec![0.0; width * d];
                    rng.normal.fill(&mut row);
                    for (w, block) in mine.iter_mut().enumerate() {
                        block[r * d..(r + 1) * d].copy_from_slice(&row[w * d..(w + 1) * d]);
                    }
                }
                blocks.extend(mine);
            }
        }
        blocks
    }

    /// `scheme`'s kernel at (γ, δ) = `gd`, a ChainSet of `seed` started at `x0` with momenta
    /// `rho0` and run `steps` transitions on `target`, and the draws it took.
    fn stepped(
        target: &IsoGaussian,
        scheme: Scheme,
        (gamma, delta): (f64, f64),
        (x0, rho0): (&[f64], &[f64]),
        (steps, seed): (usize, u64),
    ) -> (Kernel<f64>, ChainSet<f64>, Vec<Vec<f64>>) {
        let kernel = LangevinSettings { scheme, gamma }
            .kernel::<f64>(delta)
            .unwrap();
        let (d, rows) = (target.dim, x0.len() / target.dim);
        let mut chains = ChainSet::new(rows, d, seed);
        chains.init(target, x0, Momentum::Zero).unwrap();
        chains.set_momenta(rho0).unwrap();
        chains.burn_in(target, &kernel, steps).unwrap();
        let blocks = streams_draws(&kernel, rows, d, steps, seed);
        (kernel, chains, blocks)
    }

    /// One operation but an evaluation on whole arrays in place, as an engine that launches a
    /// kernel per operation does: positions `x`, momenta `p`, the gradient `g` it reads, `eta(k)`
    /// the operation's k-th block of draws.
    fn carry_out<'b>(
        op: Op<f64>,
        (x, p, g): (&mut [f64], &mut [f64], &[f64]),
        eta: impl Fn(usize) -> &'b [f64],
    ) {
        match op {
            Op::Drift(h) => x.iter_mut().zip(&*p).for_each(|(x, p)| *x += h * p),
            Op::Kick { decay, grad, noise } => {
                let zero = vec![0.0; p.len()];
                let e = if noise != 0.0 { eta(0) } else { &zero };
                for ((p, g), e) in p.iter_mut().zip(g).zip(e) {
                    *p = decay * *p + grad * g + noise * e;
                }
            }
            Op::Ou {
                decay,
                drift,
                v1,
                x1,
                x2,
            } => {
                let (z1, z2) = (eta(0), eta(1));
                for j in 0..x.len() {
                    x[j] += drift * p[j] + x1 * z1[j] + x2 * z2[j];
                    p[j] = decay * p[j] + v1 * z1[j];
                }
            }
            Op::Refresh => p.copy_from_slice(eta(0)),
            other => panic!("{other:?} is the caller's"),
        }
    }

    #[test]
    fn given_draws_step_as_the_chains_own_streams_bit_for_bit() {
        let target = IsoGaussian {
            dim: 3,
            mean: 0.5,
            sd: 1.5,
        };
        let (rows, d, steps, seed) = (4, 3, 7, 11);
        let x0: Vec<f64> = (0..rows * d).map(|i| 0.3 * i as f64 - 1.0).collect();
        let rho0: Vec<f64> = (0..rows * d).map(|i| 0.1 * i as f64 - 0.4).collect();
        for scheme in Scheme::ALL {
            let (kernel, chains, blocks) =
                stepped(&target, scheme, (1.3, 0.2), (&x0, &rho0), (steps, seed));
            assert_eq!(blocks.len(), steps * kernel.normals_per_step(), "{scheme}");
            let (mut x, mut rho) = (x0.clone(), rho0.clone());
            let draws = |i: usize| &blocks[i][..];
            let div = kernel
                .run_with_noise(&target, &mut x, &mut rho, steps, draws)
                .unwrap();
            assert_eq!(div, 0);
            assert_eq!(x, chains.positions(), "{scheme}");
        }
    }

    #[test]
    fn continued_chains_are_the_chains_own_streams_and_split_runs_join_bit_for_bit() {
        let target = IsoGaussian {
            dim: 3,
            mean: -0.5,
            sd: 0.7,
        };
        let (rows, d, steps, seed) = (4, 3, 6, 5);
        let x0: Vec<f64> = (0..rows * d).map(|i| 0.2 * i as f64 - 0.9).collect();
        let rho0: Vec<f64> = (0..rows * d).map(|i| 0.4 - 0.05 * i as f64).collect();
        for scheme in Scheme::ALL {
            let (kernel, chains, blocks) =
                stepped(&target, scheme, (1.1, 0.15), (&x0, &rho0), (steps, seed));
            let (mut x, mut rho) = (x0.clone(), rho0.clone());
            kernel
                .continue_with_noise(&target, &mut x, &mut rho, steps, |i| &blocks[i][..])
                .unwrap();
            assert_eq!(x, chains.positions(), "{scheme}");
            assert_eq!(rho, chains.momenta(), "{scheme}");
            // Two visits of half the steps each, the second on the draws that follow.
            let m = kernel.normals_per_step();
            let (mut x2, mut rho2) = (x0.clone(), rho0.clone());
            for half in 0..2 {
                let first = half * (steps / 2) * m;
                kernel
                    .continue_with_noise(&target, &mut x2, &mut rho2, steps / 2, |i| {
                        &blocks[first + i][..]
                    })
                    .unwrap();
            }
            assert_eq!((x2, rho2), (x, rho), "{scheme}");
        }
    }

    /// The unrolled program, run op by op on whole arrays as another engine would (a drift, a
    /// kick, an Ornstein-Uhlenbeck flow, an evaluation: one launch each), leaves the positions
    /// of `run_with_noise` on the same draws, bit for bit, for every scheme; unrolled whole, the
    /// positions and momenta of `continue_with_noise`.
    #[test]
    fn the_unrolled_program_runs_as_run_with_noise() {
        let target = IsoGaussian {
            dim: 2,
            mean: 0.3,
            sd: 0.8,
        };
        let (rows, d, seed) = (3, 2, 9);
        let x0: Vec<f64> = (0..rows * d).map(|i| 0.25 * i as f64 - 0.6).collect();
        let rho0: Vec<f64> = (0..rows * d).map(|i| 0.3 - 0.1 * i as f64).collect();
        for scheme in Scheme::ALL {
            for (steps, whole) in [(1, false), (4, false), (1, true), (4, true)] {
                let (kernel, _, blocks) =
                    stepped(&target, scheme, (1.2, 0.25), (&x0, &rho0), (steps, seed));
                let (mut x, mut rho) = (x0.clone(), rho0.clone());
                let draws = |i: usize| &blocks[i][..];
                let (run, program) = if whole {
                    let run = kernel.continue_with_noise(&target, &mut x, &mut rho, steps, draws);
                    (run, kernel.unrolled_whole(steps))
                } else {
                    let run = kernel.run_with_noise(&target, &mut x, &mut rho, steps, draws);
                    (run, kernel.unrolled(steps))
                };
                run.unwrap();
                let (mut u, mut p) = (x0.clone(), rho0.clone());
                let (mut g, mut lp) = (vec![0.0; rows * d], vec![0.0; rows]);
                target.logp_grad(0, &u, &mut lp, &mut g).unwrap();
                let mut evaluations = 0;
                for step in program {
                    let eta =
                        |k: usize| &blocks[step.draw.expect("a noisy operation's block") + k][..];
                    if step.op == Op::Gradient {
                        target.logp_grad(0, &u, &mut lp, &mut g).unwrap();
                        evaluations += 1;
                    } else {
                        carry_out(step.op, (&mut u, &mut p, &g), eta);
                    }
                }
                let what = format!("{scheme}, {steps} steps, whole {whole}");
                assert_eq!(u, x, "{what}");
                let per = kernel
                    .ops
                    .iter()
                    .filter(|o| matches!(o, Op::Gradient))
                    .count();
                if whole {
                    // Every transition whole: its momenta too, at K evaluations per K steps.
                    assert_eq!(p, rho, "{what}");
                    assert_eq!(evaluations, per * steps, "{what}");
                } else {
                    // The last transition stops at its last move: after the first evaluation,
                    // K Euler steps evaluate K − 1 times.
                    assert!(evaluations <= per * steps, "{what}");
                    if scheme == Scheme::Euler {
                        assert_eq!(evaluations, steps - 1);
                    }
                }
            }
        }
    }

    /// A two-state engine written from [`Kernel::instructions`] alone (the transition's start a,
    /// its new state b, each instruction's draw and state as it says, then b kept as the next
    /// start), as the GPU's chains run it, gives the bits of the CPU's blocks, which keep their
    /// own account of moves, gradients and draws: the instructions place every operation as the
    /// CPU does, for every scheme, over several transitions.
    #[test]
    fn the_instructions_run_as_the_cpu_s_blocks_bit_for_bit() {
        let target = IsoGaussian {
            dim: 2,
            mean: -0.2,
            sd: 0.7,
        };
        let (rows, d, seed) = (3, 2, 5);
        let len = rows * d;
        let x0: Vec<f64> = (0..len).map(|i| 0.2 * i as f64 - 0.5).collect();
        let rho0: Vec<f64> = (0..len).map(|i| 0.4 - 0.15 * i as f64).collect();
        for scheme in Scheme::ALL {
            let steps = 3;
            let (kernel, _, blocks) =
                stepped(&target, scheme, (0.9, 0.3), (&x0, &rho0), (steps, seed));
            let (mut x, mut rho) = (x0.clone(), rho0.clone());
            kernel
                .continue_with_noise(&target, &mut x, &mut rho, steps, |i| &blocks[i][..])
                .unwrap();
            let m = kernel.normals_per_step();
            let (mut xa, mut p) = (x0.clone(), rho0.clone());
            let (mut ga, mut la) = (vec![0.0; len], vec![0.0; rows]);
            target.logp_grad(0, &xa, &mut la, &mut ga).unwrap();
            for t in 0..steps {
                let (mut xb, mut gb, mut lb) = (xa.clone(), ga.clone(), la.clone());
                for step in kernel.instructions() {
                    // ξ′ starts as ξ at the first move (a drift's ξ + hρ is then the same bits).
                    if step.first_move {
                        xb.copy_from_slice(&xa);
                    }
                    let g = if step.new_gradient { &gb } else { &ga };
                    let eta = |k: usize| &blocks[t * m + step.draw.expect("a draw") + k][..];
                    if step.op == Op::Gradient {
                        target.logp_grad(0, &xb, &mut lb, &mut gb).unwrap();
                    } else {
                        carry_out(step.op, (&mut xb, &mut p, g), eta);
                    }
                }
                (xa, ga, la) = (xb, gb, lb);
            }
            assert_eq!((xa, p), (x, rho), "{scheme}");
        }
    }

    #[test]
    fn the_draws_per_step_are_counted_per_scheme() {
        let per = |scheme| {
            LangevinSettings { scheme, gamma: 1.0 }
                .kernel::<f32>(0.1)
                .unwrap()
                .normals_per_step()
        };
        assert_eq!(
            Scheme::ALL.map(per),
            [1, 2, 1, 4],
            "euler, obabo, baoab, ubu"
        );
    }

    #[test]
    fn wrong_shapes_and_metropolis_kernels_are_refused_by_name() {
        let target = IsoGaussian {
            dim: 2,
            mean: 0.0,
            sd: 1.0,
        };
        let kernel = LangevinSettings::default().kernel::<f64>(0.1).unwrap();
        let short = [0.0; 3];
        let (mut x, mut rho) = (vec![0.0; 4], vec![0.0; 4]);
        let e = kernel
            .run_with_noise(&target, &mut x, &mut rho, 1, |_| &short[..])
            .unwrap_err();
        assert!(e.to_string().contains("given normal draws"), "{e}");
        let mut rho3 = vec![0.0; 3];
        let e = kernel
            .run_with_noise(&target, &mut x, &mut rho3, 1, |_| &short[..])
            .unwrap_err();
        assert!(e.to_string().contains("momenta"), "{e}");
        let hmc = crate::hmc::HmcSettings::default().kernel::<f64>().unwrap();
        let e = hmc
            .run_with_noise(&target, &mut x, &mut rho, 1, |_| &short[..])
            .unwrap_err();
        assert!(e.to_string().contains("Metropolis"), "{e}");
    }
}
