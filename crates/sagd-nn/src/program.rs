//! The core's Langevin program carried out one operation at a time on whole buffers of chain
//! state, as an engine that launches one kernel per operation runs it (the GPU's chains: E2's,
//! on a transition's two states, and E3's, on one state in place). Which buffer each
//! instruction reads and writes, which block of draws, and what a transition carries over from
//! its start are written here once, over a backend's elementwise operations ([`Elementwise`]);
//! the tests run it on a host backend and hold it to the CPU's bits for every scheme.

use std::ops::Range;

use sagd::langevin::{Instruction, Kernel, Op};

/// A backend's elementwise operations on the first `len` values of chain state.
pub(crate) trait Elementwise {
    /// A buffer of chain state or draws.
    type Buf;
    /// A range of a buffer's values, as an operation reads it.
    type View<'a>
    where
        Self: 'a;
    /// The backend's error.
    type Error;
    /// The values `at` of `buf`.
    fn view<'a>(&'a self, buf: &'a Self::Buf, at: Range<usize>) -> Self::View<'a>;
    /// `to` = `from`.
    fn copy(&self, from: &Self::Buf, to: &mut Self::Buf, len: usize) -> Result<(), Self::Error>;
    /// x += h ρ, or x = from + h ρ where `from` is given.
    fn drift(
        &self,
        x: &mut Self::Buf,
        from: Option<&Self::Buf>,
        rho: &Self::Buf,
        h: f32,
        len: usize,
    ) -> Result<(), Self::Error>;
    /// ρ = decay ρ + grad g + noise η (η read, times 0, when `noise` is 0).
    fn kick(
        &self,
        rho: &mut Self::Buf,
        g: &Self::Buf,
        eta: &Self::View<'_>,
        coefficients: (f32, f32, f32),
        len: usize,
    ) -> Result<(), Self::Error>;
    /// The exact Ornstein-Uhlenbeck flow: x += drift ρ + x1 ζ1 + x2 ζ2, ρ = decay ρ + v1 ζ1, the
    /// coefficients `[decay, drift, v1, x1, x2]` of `Op::Ou`.
    fn ou(
        &self,
        state: (&mut Self::Buf, &mut Self::Buf),
        z: (&Self::View<'_>, &Self::View<'_>),
        coefficients: [f32; 5],
        len: usize,
    ) -> Result<(), Self::Error>;
    /// The error for what this engine cannot run.
    fn refuse(&self, what: String) -> Self::Error;
}

/// The buffers an operation acts on, as an engine lends them.
pub(crate) struct Parts<'a, B> {
    /// The transition's start, its positions and gradient, where the engine keeps two states;
    /// `None`: one state, stepped in place (no instruction then needs the start's).
    pub start: Option<(&'a B, &'a B)>,
    /// The new state's positions (in place: the one state's).
    pub x: &'a mut B,
    /// The gradient at the new state (in place: at the one state, as last evaluated).
    pub g: &'a B,
    /// The momenta.
    pub rho: &'a mut B,
    /// The draws.
    pub noise: &'a B,
}

/// An engine's chains as the program needs them: its buffers, and what only it knows how to do
/// (evaluate its target, refresh its momenta).
pub(crate) trait ChainBuffers<E: Elementwise> {
    /// The buffers of the next operation.
    fn parts(&mut self) -> Parts<'_, E::Buf>;
    /// The target's log density and gradient at the new state.
    fn evaluate(&mut self) -> Result<(), E::Error>;
    /// Fresh momenta from the draws `at` (HMC's refresh).
    fn refresh(&mut self, at: Range<usize>) -> Result<(), E::Error>;
}

/// The first operation of `kernel`'s transition that [`carry_out`] cannot run on chains that
/// `refresh` their momenta or not, or a transition that does not both move the positions and
/// evaluate the target (its new state would not be whole); `None`: every one it can. Engines ask
/// it where their chains are built, so that a scheme is refused before any work.
pub(crate) fn unknown_operation(kernel: &Kernel<f32>, refresh: bool) -> Option<String> {
    let known = |op: &Op<f32>| match op {
        Op::Drift(_) | Op::Kick { .. } | Op::Ou { .. } | Op::Gradient => true,
        Op::Refresh => refresh,
        _ => false,
    };
    if let Some(op) = kernel.ops().iter().find(|op| !known(op)) {
        return Some(format!("{op:?}"));
    }
    let moves = kernel.instructions().any(|step| step.first_move);
    let evaluates = kernel.ops().contains(&Op::Gradient);
    (!moves || !evaluates).then(|| "a transition that does not move and evaluate".into())
}

/// Carries out `program` on `chains` (the first `len` values of each buffer), the draw block k
/// of the instructions at `block(k)` of the draws. With two states the new state starts as the
/// start where the positions first move; what it held before is never read, since every
/// kernel's transition moves the positions and evaluates the target there.
pub(crate) fn carry_out<E: Elementwise>(
    e: &E,
    chains: &mut impl ChainBuffers<E>,
    program: &[Instruction<f32>],
    len: usize,
    block: impl Fn(usize) -> Range<usize>,
) -> Result<(), E::Error> {
    let drawn = |step: &Instruction<f32>| {
        step.draw
            .ok_or_else(|| e.refuse(format!("{:?} without its draws", step.op)))
    };
    for step in program {
        if step.first_move && !matches!(step.op, Op::Drift(_)) {
            let p = chains.parts();
            if let Some((xa, _)) = p.start {
                e.copy(xa, p.x, len)?;
            }
        }
        match step.op {
            Op::Gradient => chains.evaluate()?,
            Op::Refresh => chains.refresh(block(drawn(step)?))?,
            Op::Drift(h) => {
                let p = chains.parts();
                // ξ′ = ξ + hρ at the first move, else ξ′ += hρ.
                let from = p.start.filter(|_| step.first_move).map(|(xa, _)| xa);
                e.drift(p.x, from, p.rho, h, len)?;
            }
            Op::Kick { decay, grad, noise } => {
                let p = chains.parts();
                let g = match p.start {
                    Some((_, ga)) if !step.new_gradient => ga,
                    _ => p.g,
                };
                // A kick that draws none reads any len values times 0.
                let eta = e.view(p.noise, step.draw.map_or(0..len, &block));
                e.kick(p.rho, g, &eta, (decay, grad, noise), len)?;
            }
            Op::Ou {
                decay,
                drift,
                v1,
                x1,
                x2,
            } => {
                let k = drawn(step)?;
                let p = chains.parts();
                let (z1, z2) = (e.view(p.noise, block(k)), e.view(p.noise, block(k + 1)));
                e.ou((p.x, p.rho), (&z1, &z2), [decay, drift, v1, x1, x2], len)?;
            }
            other => {
                return Err(e.refuse(format!(
                    "these chains do not know the kernel operation {other:?}"
                )))
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use sagd::langevin::{Kernel, LangevinSettings, Scheme};
    use sagd::model::{IsoGaussian, LogDensity};
    use sagd::rng::NormalStream;

    /// The host as a backend, each operation written as the CUDA kernels write it.
    struct Host;

    impl Elementwise for Host {
        type Buf = Vec<f32>;
        type View<'a> = &'a [f32];
        type Error = String;
        fn view<'a>(&'a self, buf: &'a Vec<f32>, at: Range<usize>) -> &'a [f32] {
            &buf[at]
        }
        fn copy(&self, from: &Vec<f32>, to: &mut Vec<f32>, len: usize) -> Result<(), String> {
            to[..len].copy_from_slice(&from[..len]);
            Ok(())
        }
        fn drift(
            &self,
            x: &mut Vec<f32>,
            from: Option<&Vec<f32>>,
            rho: &Vec<f32>,
            h: f32,
            len: usize,
        ) -> Result<(), String> {
            for i in 0..len {
                x[i] = from.map_or(x[i], |f| f[i]) + h * rho[i];
            }
            Ok(())
        }
        fn kick(
            &self,
            rho: &mut Vec<f32>,
            g: &Vec<f32>,
            eta: &&[f32],
            (decay, grad, noise): (f32, f32, f32),
            len: usize,
        ) -> Result<(), String> {
            for i in 0..len {
                let v = decay * rho[i] + grad * g[i];
                rho[i] = if noise != 0.0 { v + noise * eta[i] } else { v };
            }
            Ok(())
        }
        fn ou(
            &self,
            (x, rho): (&mut Vec<f32>, &mut Vec<f32>),
            (z1, z2): (&&[f32], &&[f32]),
            [decay, drift, v1, x1, x2]: [f32; 5],
            len: usize,
        ) -> Result<(), String> {
            for i in 0..len {
                x[i] += drift * rho[i] + x1 * z1[i] + x2 * z2[i];
                rho[i] = decay * rho[i] + v1 * z1[i];
            }
            Ok(())
        }
        fn refuse(&self, what: String) -> String {
            what
        }
    }

    /// Chains on a Gaussian target: two states (a the start, b the new one) or one in place (b).
    struct Gauss<'t> {
        target: &'t IsoGaussian,
        two: bool,
        xa: Vec<f32>,
        ga: Vec<f32>,
        la: Vec<f32>,
        xb: Vec<f32>,
        gb: Vec<f32>,
        lb: Vec<f32>,
        rho: Vec<f32>,
        noise: Vec<f32>,
        evaluations: usize,
    }

    impl ChainBuffers<Host> for Gauss<'_> {
        fn parts(&mut self) -> Parts<'_, Vec<f32>> {
            Parts {
                start: self.two.then_some((&self.xa, &self.ga)),
                x: &mut self.xb,
                g: &self.gb,
                rho: &mut self.rho,
                noise: &self.noise,
            }
        }
        fn evaluate(&mut self) -> Result<(), String> {
            self.evaluations += 1;
            let (x, lp, g) = (&self.xb, &mut self.lb, &mut self.gb);
            self.target
                .logp_grad(0, x, lp, g)
                .map_err(|e| e.to_string())
        }
        fn refresh(&mut self, _: Range<usize>) -> Result<(), String> {
            Err("no refresh in a Langevin scheme".into())
        }
    }

    const TARGET: IsoGaussian = IsoGaussian {
        dim: 3,
        mean: 0.4,
        sd: 0.8,
    };
    const ROWS: usize = 4;
    const LEN: usize = ROWS * 3;

    fn kernel(scheme: Scheme) -> Kernel<f32> {
        LangevinSettings { scheme, gamma: 1.3 }
            .kernel::<f32>(0.2)
            .expect("valid settings")
    }

    /// Chains at the start `(x0, rho0)` with `blocks` blocks of draws, evaluated there.
    fn gauss(two: bool, blocks: usize) -> Gauss<'static> {
        let x0: Vec<f32> = (0..LEN).map(|i| 0.3 * i as f32 - 1.2).collect();
        let rho0: Vec<f32> = (0..LEN).map(|i| 0.5 - 0.1 * i as f32).collect();
        let mut noise = vec![0.0f32; blocks * LEN];
        NormalStream::new(7).fill(&mut noise);
        let mut c = Gauss {
            target: &TARGET,
            two,
            xa: x0.clone(),
            ga: vec![0.0; LEN],
            la: vec![0.0; ROWS],
            xb: x0,
            gb: vec![0.0; LEN],
            lb: vec![0.0; ROWS],
            rho: rho0,
            noise,
            evaluations: 0,
        };
        c.evaluate().expect("finite");
        (c.ga, c.la) = (c.gb.clone(), c.lb.clone());
        c.evaluations = 0;
        c
    }

    /// The CPU's chains on the same start and draws: positions and momenta after `steps`
    /// transitions (`whole`: every one whole, else the last up to its last move).
    fn cpu(kernel: &Kernel<f32>, steps: usize, whole: bool) -> (Vec<f32>, Vec<f32>) {
        let c = gauss(false, steps * kernel.normals_per_step());
        let (mut x, mut rho) = (c.xb.clone(), c.rho.clone());
        let draws = |i: usize| &c.noise[i * LEN..(i + 1) * LEN];
        let divergences = if whole {
            kernel.continue_with_noise(&TARGET, &mut x, &mut rho, steps, draws)
        } else {
            kernel.run_with_noise(&TARGET, &mut x, &mut rho, steps, draws)
        };
        assert_eq!(divergences.expect("runs"), 0);
        (x, rho)
    }

    /// E2's GPU chains' way: each transition from state a into b by `Kernel::instructions`, then
    /// b kept as the next start; the bits of the CPU's blocks, positions and momenta, whatever b
    /// held before.
    #[test]
    fn on_two_states_the_program_runs_as_the_cpu_s_blocks_bit_for_bit() {
        let steps = 3;
        for scheme in Scheme::ALL {
            let kernel = kernel(scheme);
            let per = kernel.normals_per_step();
            let program: Vec<_> = kernel.instructions().collect();
            let mut c = gauss(true, steps * per);
            for t in 0..steps {
                // What state b held before is not read: the start and the draws are.
                for b in [&mut c.xb, &mut c.gb, &mut c.lb] {
                    b.fill(f32::NAN);
                }
                let block = |k: usize| (t * per + k) * LEN..(t * per + k + 1) * LEN;
                carry_out(&Host, &mut c, &program, LEN, block).expect("runs");
                (c.xa, c.ga, c.la) = (c.xb.clone(), c.gb.clone(), c.lb.clone());
            }
            assert_eq!((c.xa, c.rho), cpu(&kernel, steps, true), "{scheme}");
        }
    }

    /// E3's GPU chains' way: K transitions unrolled and run in place on one state; the bits of
    /// `run_with_noise` (positions) and, unrolled whole, of `continue_with_noise` (positions and
    /// momenta), at one evaluation per transition's evaluation.
    #[test]
    fn in_place_the_unrolled_program_runs_as_the_cpu_bit_for_bit() {
        for scheme in Scheme::ALL {
            let kernel = kernel(scheme);
            let per = kernel.normals_per_step();
            let evaluations = kernel.ops().iter().filter(|&&o| o == Op::Gradient).count();
            for (steps, whole) in [(1, false), (4, false), (1, true), (4, true)] {
                let program = match whole {
                    true => kernel.unrolled_whole(steps),
                    false => kernel.unrolled(steps),
                };
                let mut c = gauss(false, steps * per);
                let block = |k: usize| k * LEN..(k + 1) * LEN;
                carry_out(&Host, &mut c, &program, LEN, block).expect("runs");
                let what = format!("{scheme}, {steps} steps, whole {whole}");
                let (x, rho) = cpu(&kernel, steps, whole);
                assert_eq!(c.xb, x, "{what}");
                if whole {
                    assert_eq!(c.rho, rho, "{what}");
                    assert_eq!(c.evaluations, evaluations * steps, "{what}");
                }
            }
        }
    }

    /// What the engine cannot do is its error, by name: HMC's refresh on chains without one.
    #[test]
    fn an_operation_the_engine_lacks_is_refused_by_name() {
        let hmc = sagd::hmc::HmcSettings::default()
            .kernel::<f32>()
            .expect("valid");
        let program: Vec<_> = hmc.instructions().collect();
        let per = hmc.normals_per_step();
        let mut c = gauss(true, per.max(1));
        let e = carry_out(&Host, &mut c, &program, LEN, |k| k * LEN..(k + 1) * LEN);
        assert!(e.is_err_and(|e| e.contains("refresh")));
    }

    /// Every scheme's transition is one the interpreter runs on chains stepped in place (E3's on
    /// a GPU), HMC's on chains that refresh their momenta (E2's); where chains cannot refresh,
    /// HMC's refresh is named. An operation the core adds fails here, not on a GPU.
    #[test]
    fn every_kernels_operations_are_checked_where_chains_are_built() {
        for scheme in Scheme::ALL {
            assert_eq!(unknown_operation(&kernel(scheme), false), None, "{scheme}");
        }
        let hmc = sagd::hmc::HmcSettings::default()
            .kernel::<f32>()
            .expect("valid");
        assert_eq!(unknown_operation(&hmc, true), None);
        assert_eq!(unknown_operation(&hmc, false).as_deref(), Some("Refresh"));
    }
}
