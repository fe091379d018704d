//! The chains' settings (SAGD's Langevin chains, HMC's, the schedule of δ_t and K_t) and what
//! they change along a run, shared by the chain estimators of both devices ([`ChainPlan`],
//! [`ChainCourse`]).

use sagd::error::{Result, SagdError};
use sagd::hmc::HmcSettings;
use sagd::langevin::{Kernel, LangevinSettings, LangevinStep, Momentum, Scheme};
use sagd::schedule::Schedule;
use serde::{Deserialize, Serialize};
use std::borrow::Cow;

/// SAGD's chains: persistent underdamped Langevin chains on u, one per data point. The defaults
/// are experiment E2's, except BAOAB for the paper's Euler scheme (less bias at the same cost).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct LangevinChains {
    /// The integrator and the friction γ.
    pub langevin: LangevinSettings,
    /// The Langevin step δ.
    pub step_size: f64,
    /// Steps per update K.
    pub steps: usize,
    /// Burn-in steps before the first update.
    pub burn_in: usize,
    /// How momenta start.
    pub initial_momentum: Momentum,
    /// δ_t and K_t along the run (the paper's Theorems 3-4); `None`: δ and K fixed.
    #[serde(default)]
    pub schedule: Option<ChainSchedule>,
    /// Every so many updates, every chain starts again from an encoder draw and burns in (at the
    /// current decoder); `None`: the chains persist for the whole run, as the paper's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refresh_every: Option<usize>,
    /// Chains per data point M, each started from its own encoder draw; the gradient averages
    /// them (M times the cost, 1/M the chains' share of its variance). `None`: one, as the paper.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chains_per_point: Option<usize>,
}

/// δ_t = δ (1 + t)^−`decay` and K_t ∝ (1 + t)^`growth` over the `updates` of a run, K_t scaled so
/// that the run takes as many Langevin steps in all as K fixed would (cost-matched): the shrinking
/// step and lengthening chains that Theorems 3-4 prescribe, at today's price.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct ChainSchedule {
    /// The exponent of δ_t's decay (0: δ fixed).
    pub decay: f64,
    /// The exponent of K_t's growth (0: K fixed).
    pub growth: f64,
    /// The run's updates (K_t's scale depends on them).
    pub updates: usize,
}

impl ChainSchedule {
    /// The factor of K_t = round(scale (1 + t)^growth) that makes the run's steps those of K
    /// fixed (computed once per run: it sums over every update).
    pub fn k_scale(&self, k: usize) -> f64 {
        let total: f64 = (0..self.updates.max(1))
            .map(|t| ((1 + t) as f64).powf(self.growth))
            .sum();
        (k * self.updates.max(1)) as f64 / total
    }

    /// (δ_t, K_t) at update `t` (from 0) for the base δ and the run's [`ChainSchedule::k_scale`]:
    /// δ_t by the core's power law ([`Schedule::power`]), K_t rounded to the nearest step.
    pub fn at(&self, t: usize, delta: f64, k_scale: f64) -> (f64, usize) {
        let k_t = (k_scale * ((1 + t) as f64).powf(self.growth))
            .round()
            .max(1.0) as usize;
        (Schedule::power(delta, self.decay).at(1 + t), k_t)
    }

    /// Checks the exponents: finite and ≥ 0.
    pub fn validate(&self) -> Result<()> {
        let fine = |v: f64| v.is_finite() && v >= 0.0;
        if fine(self.decay) && fine(self.growth) {
            return Ok(());
        }
        Err(SagdError::InvalidSetting {
            name: "sagd schedule",
            value: format!("decay {}, growth {}", self.decay, self.growth),
            fix: "use exponents ≥ 0 (δ_t may only shrink, K_t only grow)".into(),
        })
    }
}

impl LangevinChains {
    /// Checks every setting, with messages that say what to change: γ and δ for the scheme, the
    /// schedule's exponents, and at least one update between restarts and one chain per point.
    /// The chain estimators of both devices check it when built; a caller that has work to do
    /// first (pre-training) checks it before.
    pub fn validate(&self) -> Result<()> {
        self.checked().map(|_| ())
    }

    /// The integrator, γ and the base δ, checked ([`LangevinStep::new`]): what the chains'
    /// estimators keep.
    pub fn step(&self) -> Result<LangevinStep> {
        self.langevin.step(self.step_size)
    }

    /// [`LangevinChains::validate`]'s checks, giving the checked step.
    fn checked(&self) -> Result<LangevinStep> {
        let step = self.step()?;
        if let Some(p) = self.schedule {
            p.validate()?;
        }
        if self.refresh_every == Some(0) {
            return Err(SagdError::InvalidSetting {
                name: "sagd refresh_every",
                value: "0".into(),
                fix: "refresh the chains every 1 update or more, or never (leave it out)".into(),
            });
        }
        if self.chains_per_point == Some(0) {
            return Err(SagdError::InvalidSetting {
                name: "sagd chains_per_point",
                value: "0".into(),
                fix: "run 1 chain per data point or more".into(),
            });
        }
        Ok(step)
    }
}

impl Default for LangevinChains {
    fn default() -> Self {
        LangevinChains {
            langevin: LangevinSettings {
                scheme: Scheme::Baoab,
                gamma: 2.0,
            },
            step_size: 0.02,
            steps: 10,
            burn_in: 50,
            initial_momentum: Momentum::Normal,
            schedule: None,
            refresh_every: None,
            chains_per_point: None,
        }
    }
}

/// HMC's chains: from an encoder draw at every update, `transitions` Metropolis-tested
/// trajectories.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct HmcChains {
    /// Leapfrog step and steps per proposal.
    pub hmc: HmcSettings,
    /// Transitions per update.
    pub transitions: usize,
}

/// What SAGD's chain settings change along a run, the same on either device: the data's rows
/// (each point `chains_per_point` times), restarts from the encoder every `refresh_every`
/// updates, and δ_t and K_t by the schedule (a (re)start burns in at the base δ). Made from
/// settings checked once, here.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ChainPlan {
    chains: LangevinChains,
    /// The integrator, γ and the base δ, checked once.
    base: LangevinStep,
    /// K_t's scale over the run, when scheduled.
    k_scale: f64,
}

impl ChainPlan {
    /// The plan of `s`, every setting checked ([`LangevinChains::validate`]).
    pub(crate) fn new(s: &LangevinChains) -> Result<ChainPlan> {
        Ok(ChainPlan {
            chains: *s,
            base: s.checked()?,
            k_scale: s.schedule.map_or(1.0, |p| p.k_scale(s.steps)),
        })
    }

    /// Chains per data point.
    pub(crate) fn copies(&self) -> usize {
        self.chains.chains_per_point.unwrap_or(1)
    }

    /// One chain per row: the data `x` (points of `px` values, latents of `d`) each
    /// [`ChainPlan::copies`] times, copy m of point i as row m n + i; refused if the chains would
    /// not fit in memory.
    pub(crate) fn chain_rows<'x>(
        &self,
        x: &'x [f32],
        (px, d): (usize, usize),
    ) -> Result<Cow<'x, [f32]>> {
        let copies = self.copies();
        let rows = (x.len() / px.max(1)).saturating_mul(copies);
        sagd::langevin::check_chains_fit(rows, d, 4, "sagd chains_per_point")?;
        Ok(if copies == 1 {
            Cow::Borrowed(x)
        } else {
            Cow::Owned(x.repeat(copies))
        })
    }

    /// Whether the chains start again from the encoder before update `t` (from 0).
    pub(crate) fn restarts_at(&self, t: usize) -> bool {
        self.chains
            .refresh_every
            .is_some_and(|r| t > 0 && t.is_multiple_of(r))
    }

    /// The kernel at the base δ: the burn-in's, and every update's without a schedule.
    pub(crate) fn base_kernel(&self) -> Kernel<f32> {
        self.base.kernel()
    }

    /// Update `t`'s δ_t, its kernel and K_t, when scheduled.
    pub(crate) fn scheduled_at(&self, t: usize) -> Result<Option<(f64, Kernel<f32>, usize)>> {
        let Some(plan) = self.chains.schedule else {
            return Ok(None);
        };
        let (delta, k) = plan.at(t, self.base.delta(), self.k_scale);
        Ok(Some((delta, self.base.with_delta(delta)?.kernel(), k)))
    }
}

/// An estimator's chains along a run, the same on either device: the kernel and K of the
/// coming update, how the chains start (from an encoder draw at every update for HMC; once,
/// burnt in from the given momenta, for SAGD), whether they have, and the updates done; SAGD's
/// [`ChainPlan`] decides its restarts, δ_t and K_t.
#[derive(Clone, Debug)]
pub(crate) struct ChainCourse {
    /// The kernel and the transitions of the coming update.
    pub(crate) kernel: Kernel<f32>,
    pub(crate) steps: usize,
    /// HMC: the chains start from an encoder draw at every update.
    pub(crate) fresh_from_encoder: bool,
    pub(crate) burn_in: usize,
    pub(crate) momentum: Momentum,
    pub(crate) plan: Option<ChainPlan>,
    /// Whether the chains have started (a restart clears it).
    pub(crate) started: bool,
    /// The updates begun.
    pub(crate) update: usize,
}

impl ChainCourse {
    /// HMC's course: `s.transitions` transitions from an encoder draw at every update.
    pub(crate) fn hmc(s: &HmcChains) -> Result<ChainCourse> {
        Ok(ChainCourse {
            kernel: s.hmc.kernel()?,
            steps: s.transitions.max(1),
            fresh_from_encoder: true,
            burn_in: 0,
            momentum: Momentum::Normal,
            plan: None,
            started: false,
            update: 0,
        })
    }

    /// SAGD's course under `plan`, the plan of `s`.
    pub(crate) fn sagd(plan: ChainPlan, s: &LangevinChains) -> ChainCourse {
        ChainCourse {
            kernel: plan.base_kernel(),
            steps: s.steps.max(1),
            fresh_from_encoder: false,
            burn_in: s.burn_in,
            momentum: s.initial_momentum,
            plan: Some(plan),
            started: false,
            update: 0,
        }
    }

    /// Whether the chains (re)start before the coming update (not yet started, or a restart of
    /// the plan's); if so, the kernel is the base δ's, at which a start burns in (a schedule's
    /// late δ_t would leave the chains near the encoder's draws).
    pub(crate) fn starts(&mut self) -> bool {
        if self.plan.is_some_and(|plan| plan.restarts_at(self.update)) {
            self.started = false;
        }
        if self.started {
            return false;
        }
        if let Some(plan) = self.plan {
            self.kernel = plan.base_kernel();
        }
        true
    }

    /// After any start: the coming update's kernel and K_t where the plan schedules them (its
    /// δ_t returned), and the update counted.
    pub(crate) fn schedule(&mut self) -> Result<Option<f64>> {
        let scheduled = self.plan.map(|plan| plan.scheduled_at(self.update));
        let delta = match scheduled.transpose()?.flatten() {
            Some((delta, kernel, k)) => {
                self.kernel = kernel;
                self.steps = k;
                Some(delta)
            }
            None => None,
        };
        self.update += 1;
        Ok(delta)
    }

    /// The rows of a batch of points' indices among `chains` chains (the rows of
    /// [`ChainPlan::chain_rows`]): every copy of them, copy by copy (the batch itself with one
    /// copy), in `rows`.
    pub(crate) fn batch_rows<'b>(
        &self,
        batch: &'b [usize],
        chains: usize,
        rows: &'b mut Vec<usize>,
    ) -> &'b [usize] {
        let copies = self.plan.map_or(1, |plan| plan.copies());
        if copies == 1 {
            return batch;
        }
        let points = chains / copies;
        rows.clear();
        for m in 0..copies {
            rows.extend(batch.iter().map(|&i| m * points + i));
        }
        rows
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The plan both devices follow: restarts at every r-th update after the first, every copy
    /// of a batch copy by copy, K_t growing under a schedule, and bad settings refused by name.
    #[test]
    fn the_plan_restarts_copies_and_schedules_as_the_settings_say() {
        let chains = LangevinChains {
            refresh_every: Some(3),
            chains_per_point: Some(2),
            schedule: Some(ChainSchedule {
                decay: 0.5,
                growth: 1.0,
                updates: 3,
            }),
            ..LangevinChains::default()
        };
        let plan = ChainPlan::new(&chains).expect("valid settings");
        let restarts: Vec<usize> = (0..10).filter(|&t| plan.restarts_at(t)).collect();
        assert_eq!(restarts, [3, 6, 9]);
        let mut rows = Vec::new();
        let course = ChainCourse::sagd(plan, &chains);
        assert_eq!(course.batch_rows(&[4, 1], 10, &mut rows), [4, 1, 9, 6]);
        let x = [1.0f32, 2.0, 3.0];
        assert_eq!(
            &*plan.chain_rows(&x, (1, 1)).expect("fits"),
            [1.0, 2.0, 3.0, 1.0, 2.0, 3.0]
        );
        // K = 10 over 3 updates, K_t ∝ 1 + t: 5, 10, 15 (30 steps, as K fixed); δ_t shrinks.
        let at: Vec<(f64, usize)> = (0..3)
            .map(|t| {
                let (delta, _, k) = plan.scheduled_at(t).expect("valid").expect("scheduled");
                (delta, k)
            })
            .collect();
        assert_eq!(at.iter().map(|a| a.1).collect::<Vec<_>>(), [5, 10, 15]);
        assert!(at[0].0 > at[1].0 && at[1].0 > at[2].0, "{at:?}");
        let fixed = ChainPlan::new(&LangevinChains::default()).expect("valid");
        assert!(fixed.scheduled_at(7).expect("valid").is_none());
        assert!(!(0..10).any(|t| fixed.restarts_at(t)));
        for (bad, name) in [
            (
                LangevinChains {
                    refresh_every: Some(0),
                    ..chains
                },
                "sagd refresh_every",
            ),
            (
                LangevinChains {
                    chains_per_point: Some(0),
                    ..chains
                },
                "sagd chains_per_point",
            ),
            (
                LangevinChains {
                    step_size: -1.0,
                    ..chains
                },
                "delta",
            ),
        ] {
            match ChainPlan::new(&bad) {
                Err(SagdError::InvalidSetting { name: got, .. }) => assert_eq!(got, name),
                other => panic!("{name}: {other:?}"),
            }
        }
    }
}
