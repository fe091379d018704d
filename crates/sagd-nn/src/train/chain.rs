//! Chains on the decoder's posterior p(u | x; θ) as gradient estimators: HMC from an encoder draw
//! at every update, or SAGD's persistent underdamped Langevin chains; under any [`Likelihood`] of
//! the decoder's output.

use sagd::error::{LogpError, Result, SagdError};
use sagd::langevin::ChainSet;
use sagd::model::{AnchoredTarget, MaximumLikelihood, Problem};
use sagd::parallel::add_parts;
use sagd::rng::{NormalStream, Seed};
use sagd::run::{decode, encode};
use serde::{Deserialize, Serialize};
use std::borrow::Cow;

use super::chain_settings::{ChainCourse, ChainPlan, HmcChains, LangevinChains};
use super::{encoder_draw, gather_rows, GradientEstimator};
use crate::likelihood::{Likelihood, UnitGaussian};
use crate::net::WorkspacePool;
use crate::vae::{DecoderPosterior, Vae, VaeParams};

/// What a chain run returns to the estimator: each step's summary, and each block's sum of ∇θ f
/// (or the target's error).
type StepsRun = (
    Vec<sagd::langevin::StepInfo>,
    Vec<std::result::Result<Vec<f32>, LogpError>>,
);

/// HMC (fresh chains from an encoder draw at every update) or SAGD (persistent chains) on the
/// decoder's posterior; the gradient is the chain average of ∇θ of −log p(x | u; θ). The data's
/// likelihood N(x; h, I) by default ([`ChainEstimator::hmc_with`], [`ChainEstimator::sagd_with`]
/// for another).
pub struct ChainEstimator<'a, L: Likelihood = UnitGaussian> {
    vae: &'a Vae,
    lik: L,
    /// The data points, each `chains_per_point` times (copy m of point i is row m n + i): one
    /// chain per row.
    x: Cow<'a, [f32]>,
    /// A batch of points as rows of `x` (every copy of each).
    rows: Vec<usize>,
    chains: ChainSet<f32>,
    /// The chains along the run: kernel, K, starts, restarts, δ_t and K_t, the updates done.
    course: ChainCourse,
    stream: NormalStream,
    pool: WorkspacePool,
    grad: Vec<f64>,
    acceptance: Vec<f64>,
    divergences: usize,
    xb: Vec<f32>,
    fused: bool,
    reused: usize,
    /// The blocks' gradient sums of the last update, reused as the next one's buffers.
    spare: Vec<Vec<f32>>,
}

impl<'a> ChainEstimator<'a> {
    /// HMC: K transitions of L leapfrog steps of size ε from an encoder draw, every update; the
    /// paper's likelihood, N(x; h, I).
    pub fn hmc(vae: &'a Vae, x: &'a [f32], s: &HmcChains, seed: u64) -> Result<Self> {
        Self::hmc_with(vae, UnitGaussian, x, s, seed)
    }

    /// SAGD: persistent underdamped Langevin chains started from an encoder draw, burn-in once;
    /// the paper's likelihood, N(x; h, I).
    pub fn sagd(vae: &'a Vae, x: &'a [f32], s: &LangevinChains, seed: u64) -> Result<Self> {
        Self::sagd_with(vae, UnitGaussian, x, s, seed)
    }
}

impl<'a, L: Likelihood> ChainEstimator<'a, L> {
    /// [`ChainEstimator::hmc`] under the likelihood `lik`, the data `x` points of
    /// [`Vae::data_dim`] values.
    pub fn hmc_with(vae: &'a Vae, lik: L, x: &'a [f32], s: &HmcChains, seed: u64) -> Result<Self> {
        let course = ChainCourse::hmc(s)?;
        Ok(Self::with((vae, lik), Cow::Borrowed(x), course, seed))
    }

    /// [`ChainEstimator::sagd`] under the likelihood `lik`, the data `x` points of
    /// [`Vae::data_dim`] values.
    pub fn sagd_with(
        vae: &'a Vae,
        lik: L,
        x: &'a [f32],
        s: &LangevinChains,
        seed: u64,
    ) -> Result<Self> {
        let plan = ChainPlan::new(s)?;
        let x = plan.chain_rows(x, (vae.data_dim(), vae.d))?;
        let course = ChainCourse::sagd(plan, s);
        // Schemes that end a step at their last evaluation return the θ-gradient with it.
        let fused = course.kernel.ends_at_gradient();
        let mut e = Self::with((vae, lik), x, course, seed);
        e.fused = fused;
        Ok(e)
    }

    /// The chains (re)started where due, this update's δ_t and K_t (burn-in ran at the base δ),
    /// and the update counted.
    fn begin_update(&mut self, p: &VaeParams) -> Result<()> {
        if self.course.starts() {
            self.start_chains(p)?;
        }
        self.course.schedule()?;
        Ok(())
    }

    /// An update's chain run taken in: its steps' divergences and acceptance rates into the
    /// diagnostics, its blocks' sums of ∇θ f added in block order into `grad` (their buffers kept
    /// for the next update). The steps' mean log densities summed, and the first error.
    fn absorb(&mut self, run: Result<StepsRun>) -> (f64, Result<()>) {
        let (infos, parts) = match run {
            Ok(run) => run,
            Err(e) => return (0.0, Err(e)),
        };
        let mut logp = 0.0;
        for info in &infos {
            self.divergences += info.divergences;
            logp += info.mean_log_density;
            if let Some(a) = info.acceptance {
                self.acceptance.push(a);
            }
        }
        let mut result = Ok(());
        let mut sums = Vec::with_capacity(parts.len());
        for part in parts {
            match part {
                Ok(g) => sums.push(g),
                Err(e) => result = Err(SagdError::Model(e)),
            }
        }
        add_parts(&sums, &mut self.grad);
        self.spare = sums;
        (logp, result)
    }

    /// Every chain starts from an encoder draw and burns in under the decoder `p` (the
    /// pre-trained one, or the current one when refreshed), at the course's kernel (the base δ's).
    fn start_chains(&mut self, p: &VaeParams) -> Result<()> {
        let all = DecoderPosterior::with_likelihood(&self.vae.dec, &self.lik, &self.x);
        let all_problem = MaximumLikelihood::new(&all, 1);
        let all_target = AnchoredTarget {
            problem: &all_problem,
            anchor: &p.dec[..],
        };
        let u0 = encoder_draw(self.vae, p, &self.x, &mut self.stream, &mut self.pool);
        let course = &mut self.course;
        self.chains.init(&all_target, &u0, course.momentum)?;
        self.divergences += self
            .chains
            .burn_in(&all_target, &course.kernel, course.burn_in)?;
        course.started = true;
        Ok(())
    }

    fn with((vae, lik): (&'a Vae, L), x: Cow<'a, [f32]>, course: ChainCourse, seed: u64) -> Self {
        let n = x.len() / vae.data_dim().max(1);
        let mut chains = ChainSet::new(n, vae.d, seed);
        // Blocks of rows step in parallel; the block boundaries, not the threads, fix the results.
        chains.set_rows_per_block(vae.dec.piece_rows(n));
        ChainEstimator {
            vae,
            lik,
            x,
            rows: Vec::new(),
            chains,
            course,
            stream: Seed::new(seed).stream("starts").normals(),
            pool: WorkspacePool::default(),
            grad: Vec::new(),
            acceptance: Vec::new(),
            divergences: 0,
            xb: Vec::new(),
            fused: false,
            reused: 0,
            spare: Vec::new(),
        }
    }
}

/// What a [`ChainEstimator`] carries from one update to the next.
#[derive(Serialize, Deserialize)]
struct ChainRecord {
    chains: ChainSet<f32>,
    stream: NormalStream,
    acceptance: Vec<f64>,
    divergences: usize,
    started: bool,
    reused: usize,
    #[serde(default)]
    update: usize,
}

impl<L: Likelihood> GradientEstimator for ChainEstimator<'_, L> {
    fn trains_encoder(&self) -> bool {
        false
    }

    fn save_state(&self) -> Result<Vec<u8>> {
        encode(&ChainRecord {
            chains: self.chains.clone(),
            stream: self.stream.clone(),
            acceptance: self.acceptance.clone(),
            divergences: self.divergences,
            started: self.course.started,
            reused: self.reused,
            update: self.course.update,
        })
    }

    fn load_state(&mut self, bytes: &[u8]) -> Result<()> {
        let r: ChainRecord = decode(bytes)?;
        let rows = self.chains.rows_per_block();
        self.chains = r.chains;
        self.chains.set_rows_per_block(rows);
        self.stream = r.stream;
        self.acceptance = r.acceptance;
        self.divergences = r.divergences;
        self.course.started = r.started;
        self.reused = r.reused;
        self.course.update = r.update;
        Ok(())
    }

    fn estimate(
        &mut self,
        p: &VaeParams,
        batch: &[usize],
        g_dec: &mut [f32],
        _g_enc: &mut [f32],
    ) -> Result<f64> {
        self.begin_update(p)?;
        let (d, px) = (self.vae.d, self.vae.data_dim());
        let batch = self
            .course
            .batch_rows(batch, self.x.len() / px, &mut self.rows);
        let full =
            batch.len() == self.chains.n_chains() && batch.iter().enumerate().all(|(k, &i)| k == i);
        gather_rows(&self.x, px, batch, &mut self.xb);
        // Without fusion, each step's θ-gradient reuses the forward pass at the step's last
        // evaluation for the chains that stayed there (HMC: the accepted proposals).
        let model = DecoderPosterior::with_likelihood(&self.vae.dec, &self.lik, &self.xb)
            .keeping_passes(!self.fused);
        let problem = MaximumLikelihood::new(&model, 1);
        let target = AnchoredTarget {
            problem: &problem,
            anchor: &p.dec[..],
        };
        let mut sub = if full {
            std::mem::replace(&mut self.chains, ChainSet::new(0, d, 0))
        } else {
            self.chains.gather(batch)?
        };
        if self.course.fresh_from_encoder {
            let u0 = encoder_draw(self.vae, p, &self.xb, &mut self.stream, &mut self.pool);
            sub.set_positions(&target, &u0)?;
        } else {
            // θ moved since the chains' gradients were computed.
            sub.evaluate(&target)?;
        }
        self.grad.clear();
        self.grad.resize(p.dec.len(), 0.0);
        sub.set_rows_per_block(self.vae.dec.piece_rows(sub.n_chains()));
        // Each block of chains takes all K steps in one task and sums ∇θ f at its new states
        // after each (the step's own evaluation computed it when fused; f = −log p, as the
        // problem defines); the blocks' sums are then added in block order.
        let theta = &p.dec[..];
        let spare = std::sync::Mutex::new(std::mem::take(&mut self.spare));
        let run = sub.run_steps_fold(
            &target,
            &self.course.kernel,
            self.course.steps,
            self.fused,
            |_| {
                let mut g = spare
                    .lock()
                    .ok()
                    .and_then(|mut s| s.pop())
                    .unwrap_or_default();
                g.clear();
                g.resize(theta.len(), 0.0);
                Ok(g)
            },
            |acc: &mut std::result::Result<Vec<f32>, LogpError>, b| {
                let Ok(sum) = acc else { return };
                match b.aux {
                    Some(g) => sum.iter_mut().zip(g).for_each(|(s, v)| *s += *v),
                    None => {
                        if let Err(e) = problem.add_grad_f(theta, b.first_row, b.positions, sum) {
                            *acc = Err(e);
                        }
                    }
                }
            },
        );
        let reused = model.reused_passes();
        if full {
            self.chains = sub;
        } else {
            self.chains.scatter(&sub, batch)?;
        }
        let rows = batch.len();
        let (logp, result) = self.absorb(run);
        self.reused += reused;
        result?;
        let scale = 1.0 / (self.course.steps * rows) as f64;
        for (g, v) in g_dec.iter_mut().zip(&self.grad) {
            *g += (v * scale) as f32;
        }
        Ok(-logp / self.course.steps as f64)
    }

    fn diagnostics(&self) -> serde_json::Value {
        let pos = self.chains.positions();
        serde_json::json!({
            "acceptance": (!self.acceptance.is_empty()).then(|| self.acceptance.iter().sum::<f64>() / self.acceptance.len() as f64),
            "divergences": self.divergences,
            "reused_forward_passes": self.reused,
            "chain_abs_max": pos.iter().fold(0.0f32, |m, v| m.max(v.abs())),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::train::ChainSchedule;

    /// A VAE with `hidden` units initialised from `seed`, `n` points of smooth 1-D data, and the
    /// batch of all of them.
    fn problem(n: usize, hidden: usize, seed: u64) -> (Vae, VaeParams, Vec<f32>, Vec<usize>) {
        let vae = Vae::new(1, hidden);
        let p = vae.init(seed);
        let x = (0..n).map(|i| ((i as f32) * 0.37).sin() * 2.0).collect();
        (vae, p, x, (0..n).collect())
    }

    /// One update's decoder gradient on `batch`, from zero.
    fn update(e: &mut ChainEstimator, p: &VaeParams, batch: &[usize]) -> Vec<f32> {
        let mut g = vec![0.0f32; p.dec.len()];
        let mut ge = vec![0.0f32; p.enc.len()];
        e.estimate(p, batch, &mut g, &mut ge).unwrap();
        g
    }

    #[test]
    fn the_fused_sagd_gradient_equals_the_separate_pass() {
        let vae = Vae::new(1, 16);
        let p = vae.init(2);
        // Three blocks of chains.
        let x: Vec<f32> = (0..1100)
            .map(|i| ((i as f32) * 0.37).sin() * 2.0 + 1.0)
            .collect();
        let batch: Vec<usize> = (0..1100).collect();
        let s = LangevinChains::default();
        let run = |fused: bool| {
            let mut e = ChainEstimator::sagd(&vae, &x, &s, 5).unwrap();
            e.fused = fused;
            let mut g = vec![0.0f32; p.dec.len()];
            let mut ge = vec![0.0f32; p.enc.len()];
            let mut q = p.clone();
            for _ in 0..3 {
                g.iter_mut().for_each(|v| *v = 0.0);
                e.estimate(&q, &batch, &mut g, &mut ge).unwrap();
                // Move θ as training would, so that later estimates re-evaluate the chains.
                q.dec.iter_mut().zip(&g).for_each(|(w, gi)| *w -= 1e-3 * gi);
            }
            (g, e.chains.positions().to_vec())
        };
        let (g1, c1) = run(true);
        let (g2, c2) = run(false);
        assert_eq!(
            c1, c2,
            "the chains do not depend on how the gradient is taken"
        );
        let scale = g2.iter().fold(0.0f32, |m, v| m.max(v.abs()));
        for (a, b) in g1.iter().zip(&g2) {
            assert!((a - b).abs() <= 1e-4 * scale, "{a} vs {b}");
        }
    }

    #[test]
    fn refreshed_chains_start_again_from_the_encoder_and_resume_across_a_refresh() {
        let (vae, p, x, batch) = problem(200, 16, 2);
        let kept = LangevinChains::default();
        let refreshed = LangevinChains {
            refresh_every: Some(2),
            ..kept
        };
        let step = |e: &mut ChainEstimator| (update(e, &p, &batch), e.chains.positions().to_vec());
        let mut a = ChainEstimator::sagd(&vae, &x, &kept, 5).unwrap();
        let mut b = ChainEstimator::sagd(&vae, &x, &refreshed, 5).unwrap();
        // The first two updates are the persistent chains'; the third starts from new draws.
        for k in 0..2 {
            assert_eq!(step(&mut a), step(&mut b), "update {k}");
        }
        let saved = b.save_state().unwrap();
        let (ga, ca) = step(&mut a);
        let (gb, cb) = step(&mut b);
        assert_ne!(ca, cb, "refreshed");
        assert_ne!(ga, gb);
        // Resumed from before the refresh: the same update as the uninterrupted estimator.
        let mut c = ChainEstimator::sagd(&vae, &x, &refreshed, 5).unwrap();
        c.load_state(&saved).unwrap();
        assert_eq!(step(&mut c), (gb, cb));
        assert!(ChainEstimator::sagd(
            &vae,
            &x,
            &LangevinChains {
                refresh_every: Some(0),
                ..kept
            },
            5
        )
        .is_err());
    }

    #[test]
    fn chains_per_point_average_independent_chains_and_keep_minibatches_apart() {
        let (vae, p, x, all) = problem(64, 8, 3);
        let with = |m: usize| LangevinChains {
            chains_per_point: Some(m),
            burn_in: 20,
            ..LangevinChains::default()
        };
        let first_gradient = |s: &LangevinChains, seed: u64| {
            update(
                &mut ChainEstimator::sagd(&vae, &x, s, seed).unwrap(),
                &p,
                &all,
            )
        };
        // M = 1 is the paper's estimator, bit for bit.
        let paper = LangevinChains {
            burn_in: 20,
            ..LangevinChains::default()
        };
        assert_eq!(first_gradient(&with(1), 9), first_gradient(&paper, 9));
        // M independent chains per point: the gradient's spread over seeds (its trace) falls
        // to 1/M. Over S = 200 seeds, each coordinate's variance ratio has a log-standard error
        // of at most √(2/(S − 1) · 2) ≈ 0.14 (the trace's is smaller): 3 of them either side of ½.
        let spread = |m: usize| {
            let gs: Vec<Vec<f32>> = (0..200)
                .map(|s| first_gradient(&with(m), 100 + s))
                .collect();
            (0..p.dec.len())
                .map(|j| {
                    let mean = gs.iter().map(|g| g[j] as f64).sum::<f64>() / gs.len() as f64;
                    gs.iter().map(|g| (g[j] as f64 - mean).powi(2)).sum::<f64>()
                })
                .sum::<f64>()
        };
        let ratio = spread(2) / spread(1);
        assert!(
            (0.5 * (-0.42f64).exp()..0.5 * 0.42f64.exp()).contains(&ratio),
            "{ratio}"
        );
        // A minibatch moves every copy of its points' chains and no other chain.
        let mut e = ChainEstimator::sagd(&vae, &x, &with(3), 4).unwrap();
        update(&mut e, &p, &all);
        let before = e.chains.positions().to_vec();
        update(&mut e, &p, &[5, 40]);
        let after = e.chains.positions();
        assert_eq!(after.len(), 3 * 64);
        for (row, (a, b)) in after.iter().zip(&before).enumerate() {
            assert_eq!(a != b, [5, 40].contains(&(row % 64)), "row {row}");
        }
        assert!(ChainEstimator::sagd(&vae, &x, &with(0), 5).is_err());
    }

    #[test]
    fn a_refresh_burns_in_at_the_base_step_whatever_the_schedule() {
        let (vae, p, x, all) = problem(64, 8, 3);
        let plain = LangevinChains {
            refresh_every: Some(1),
            ..LangevinChains::default()
        };
        // δ_t = δ (1 + t)^−20: after the first update, almost no step at all.
        let scheduled = LangevinChains {
            schedule: Some(ChainSchedule {
                decay: 20.0,
                growth: 0.0,
                updates: 10,
            }),
            ..plain
        };
        let restarted = |s: &LangevinChains| {
            let mut e = ChainEstimator::sagd(&vae, &x, s, 7).unwrap();
            update(&mut e, &p, &all);
            update(&mut e, &p, &all);
            // The third update's beginning: a restart, burnt in before δ_t is taken.
            e.begin_update(&p).unwrap();
            e.chains.positions().to_vec()
        };
        // The same draws and the same noise: the same burnt-in chains only at the same step.
        assert_eq!(restarted(&scheduled), restarted(&plain));
    }

    #[test]
    fn a_schedule_shrinks_delta_and_lengthens_chains_at_the_same_cost() {
        let plan = ChainSchedule {
            decay: 0.5,
            growth: 1.0,
            updates: 1000,
        };
        let scale = plan.k_scale(10);
        let steps: Vec<(f64, usize)> = (0..1000).map(|t| plan.at(t, 0.1, scale)).collect();
        let total: usize = steps.iter().map(|s| s.1).sum();
        // Cost-matched to rounding (each K_t rounds by at most a half-step, and is at least 1).
        assert!((total as f64 - 10_000.0).abs() < 500.0, "{total}");
        assert_eq!(steps[0], (0.1, 1));
        assert_eq!(steps[999].1, 20);
        assert!((steps[99].0 - 0.01).abs() < 1e-12);
        assert!(steps
            .windows(2)
            .all(|w| w[1].0 < w[0].0 && w[1].1 >= w[0].1));
        // No schedule exponents: the fixed δ and K.
        let fixed = ChainSchedule {
            decay: 0.0,
            growth: 0.0,
            updates: 1000,
        };
        let scale = fixed.k_scale(10);
        assert!((0..1000).all(|t| fixed.at(t, 0.02, scale) == (0.02, 10)));
    }

    #[test]
    fn hmc_at_a_step_far_too_large_refuses_every_proposal_and_estimates_at_the_start() {
        // ε so large that a proposal's forward pass overflows: every proposal is refused, so
        // the estimate is ∇θ f at the encoder's draws, as at an ε that only refuses. The pass
        // kept for the θ-gradient is not reused where a refused row overflowed (0 × ∞ made the
        // whole gradient NaN).
        let (vae, p, x, batch) = problem(50, 16, 2);
        let estimate = |step_size: f64| {
            let s = HmcChains {
                hmc: sagd::hmc::HmcSettings {
                    step_size,
                    n_leapfrog: 5,
                },
                transitions: 10,
            };
            let mut e = ChainEstimator::hmc(&vae, &x, &s, 5).unwrap();
            let g = update(&mut e, &p, &batch);
            assert_eq!(e.diagnostics()["acceptance"], 0.0, "ε = {step_size}");
            g
        };
        let refused = estimate(1e3);
        assert!(refused.iter().all(|v| v.is_finite()));
        let scale = refused.iter().fold(0.0f32, |m, v| m.max(v.abs()));
        for step_size in [1e6, 1e9] {
            let g = estimate(step_size);
            for (a, b) in g.iter().zip(&refused) {
                assert!((a - b).abs() <= 1e-5 * scale, "ε = {step_size}: {a} vs {b}");
            }
        }
    }
}
