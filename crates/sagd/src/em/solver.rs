//! Automated EM as a [`Solver`]: one iteration is one SAGD update; an M-step is a stage of T
//! updates, re-anchored at θ_k and burnt in, closed inside `next_iter` with its summary, the
//! stopping rule and, for a non-finite update, a back-off with the step halved.

use super::*;
use crate::metric::Preconditioned;

/// Whether an update failed for non-finite numbers (a step too large for Q's curvature), which a
/// smaller step avoids.
fn non_finite(e: &SagdError) -> bool {
    matches!(
        e,
        SagdError::NonFiniteUpdate { .. } | SagdError::Model(LogpError::NonFinite)
    )
}

/// Mean and sample standard deviation of column `j`.
fn column_mean_sd(rows: &[Vec<f64>], j: usize) -> (f64, f64) {
    mean_sd(&rows.iter().map(|r| r[j]).collect::<Vec<_>>())
}

/// The state of automated EM: the solver's (θ, chains, update rule) and the record so far.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct EmState {
    /// The SAGD state of the current M-step.
    pub sagd: SagdState<f64>,
    /// The record so far.
    pub trace: EmTrace,
}

/// What one update of automated EM did.
#[derive(Clone, Debug, PartialEq)]
pub struct EmInfo {
    /// The M-step (0-based).
    pub mstep: usize,
    /// The solver's report on the update.
    pub iter: IterInfo,
    /// The M-step, when this update finished it.
    pub finished: Option<MStep>,
    /// Back-offs taken before this update succeeded.
    pub backoffs: Vec<BackOff>,
}

/// Automated EM as a [`Solver`] for the [`Runner`]: one iteration is one SAGD update; an M-step
/// is a stage of T updates of the solver, anchored at θ_k, started with burn-in, and closed with
/// its summary and the stopping rule. (One runner over all M-steps rather than a runner per
/// M-step: a checkpoint can fall inside an M-step, and observers see one stream of updates.)
pub struct EmSolver<'a, M> {
    settings: &'a EmSettings,
    solver: Sagd,
    problem: Preconditioned<MaximumLikelihood<'a, M>>,
    identity: Identity,
    /// Whether the problem's metric is the state's (after a resume it is not, until set).
    metric_synced: bool,
}

impl<'a, M: LatentModel<f64>> EmSolver<'a, M> {
    /// Automated EM of `model` with `settings` from θ₀ and `seed`; these, the model's sizes and
    /// `data_key` (a fingerprint of the data) make its identity.
    pub fn new(
        model: &'a M,
        settings: &'a EmSettings,
        theta0: &[f64],
        seed: u64,
        data_key: u64,
    ) -> Result<Self> {
        let mut sagd_settings = settings.sagd.clone();
        sagd_settings.anchor = Anchor::Fixed;
        settings.validate(model.theta_dim())?;
        let n_chains = model
            .n_data()
            .saturating_mul(settings.chains_for(model.n_data()));
        crate::langevin::check_chains_fit(
            n_chains,
            model.latent_dim(),
            8,
            "chains (data points × chains_per_point)",
        )?;
        let dims = [model.n_data(), model.latent_dim(), model.theta_dim()];
        let identity = Identity::new()
            .with("EM settings", settings)?
            .with("theta0", theta0)?
            .with("seed", &seed)?
            .with("data sizes", &dims)?
            .with("data", &data_key)?;
        Ok(EmSolver {
            settings,
            solver: Sagd::new(sagd_settings),
            problem: Preconditioned::new(
                MaximumLikelihood::new(model, settings.chains_for(model.n_data())),
                model.n_data(),
            ),
            identity,
            metric_synced: false,
        })
    }

    /// The state at θ₀, chains at z = 0.
    pub fn init(&self, theta0: &[f64], seed: u64) -> Result<EmState> {
        let d = self.problem.inner.model().latent_dim();
        let z0 = vec![0.0; d];
        let mut sagd = self.solver.init(&self.problem, theta0, &z0, seed)?;
        // Blocks of chains as the M-step's passes cut their pieces: work for every thread and
        // every process of a split run.
        let costly = crate::model::Problem::<f64>::calls_are_costly(&self.problem);
        let n = sagd.chains.n_chains();
        sagd.chains
            .set_rows_per_block(crate::parallel::rows_per_piece(n, d, costly));
        Ok(EmState {
            sagd,
            trace: EmTrace {
                path: vec![theta0.to_vec()],
                ..Default::default()
            },
        })
    }

    /// Sets the estimate of a finished run: the rule's when it was met, else the last iterate.
    pub fn finish(&self, state: &mut EmState) {
        if !state.trace.converged {
            state.trace.estimate = state.sagd.theta.clone();
            state.trace.estimate_se = Vec::new();
        }
    }

    /// The solver's δ and γ for the current M-step.
    fn set_chain_step(&mut self, sigma: Option<f64>) {
        if let Some((delta, gamma)) = sigma.and_then(|s| self.settings.chain_step.at(s)) {
            self.solver.settings.schedules.step_size = Schedule::constant(delta);
            self.solver.settings.langevin.gamma = gamma;
        }
    }

    /// Starts an M-step at the current θ: the anchor moves there, and the burn-in runs before the
    /// first update, or, with [`ChainStep::Adaptive`], now: from the posterior modes, in two
    /// halves, σ̂ measured before each.
    fn begin_mstep(&mut self, state: &mut EmState) -> Result<()> {
        let anchor = state.sagd.theta.clone();
        let burn_in = self.settings.sagd.burn_in;
        self.solver
            .begin_stage(&self.problem, &mut state.sagd, Some(&anchor), burn_in)?;
        state.trace.in_mstep = true;
        let adapted = self.problem.adapt(
            &anchor,
            state.sagd.chains.positions(),
            self.settings.preconditioner,
        )?;
        if let Some(at_modes) = &adapted {
            let target = AnchoredTarget {
                problem: &self.problem,
                anchor: &anchor[..],
            };
            state.sagd.chains.set_positions(&target, at_modes)?;
            state.trace.metric = self.problem.metric().cloned();
        }
        self.metric_synced = true;
        if self.settings.chain_step == ChainStep::Schedule {
            return Ok(());
        }
        state.sagd.pending_burn_in = 0;
        let before = state.sagd.chains.steps;
        let sigma = mstep::settle_chains(
            &self.problem,
            &anchor,
            &mut state.sagd.chains,
            self.settings.chain_step,
            self.settings.sagd.langevin,
            burn_in,
            state.trace.posterior_scale,
            adapted.is_some(),
        )?;
        state.trace.posterior_scale = Some(sigma);
        state.trace.langevin_steps += state.sagd.chains.steps - before;
        Ok(())
    }

    /// One update: the solver's gradient estimate, then its step of α_t (scaled down by any
    /// back-offs) or a Newton step.
    fn update(&mut self, state: &mut EmState) -> Result<IterInfo> {
        self.set_chain_step(state.trace.posterior_scale);
        let factor = 0.5f64.powi(state.trace.backoffs.len() as i32);
        let rule = &self.settings.sagd.update;
        let mut info = self.solver.estimate(&self.problem, &mut state.sagd)?;
        let st = &mut state.sagd;
        match self.settings.mstep_update {
            MStepUpdate::Gradient => {
                // With no back-off the step is α_t exactly, as Algorithm 1's.
                let lr = if factor == 1.0 {
                    info.learning_rate
                } else {
                    info.learning_rate * factor
                };
                info.learning_rate = lr;
                let mut dir = st.grad.clone();
                rule.apply(&mut st.update, &mut st.theta, &mut dir, lr)
            }
            MStepUpdate::Newton { max_halvings } => {
                let step = mstep::newton_step(
                    &self.problem,
                    &st.theta,
                    &st.grad,
                    st.chains.positions(),
                    factor,
                    max_halvings,
                )?;
                info.learning_rate = step.fraction;
                rule.accept(&mut st.update, &mut st.theta, &step.to)
            }
        }
        .map_err(|e| match e {
            SagdError::NonFiniteUpdate { .. } => SagdError::NonFiniteUpdate { iteration: info.t },
            e => e,
        })?;
        Sagd::count_update(st);
        Ok(info)
    }

    /// Restarts the current M-step from its θ_k after a non-finite update, with the steps halved
    /// from now on; the chains, whose target is at θ_k, keep their states.
    fn back_off(&mut self, state: &mut EmState, reason: String) -> Result<BackOff> {
        let trace = &mut state.trace;
        let done = state.sagd.t;
        let update = done + 1;
        trace.path.truncate(trace.path.len() - done);
        let anchor = state.sagd.anchor.clone();
        state.sagd.theta.clone_from(&anchor);
        self.solver
            .begin_stage(&self.problem, &mut state.sagd, Some(&anchor), 0)?;
        Ok(BackOff {
            mstep: state.trace.msteps.len(),
            update,
            reason,
            step_factor: 0.5f64.powi(state.trace.backoffs.len() as i32 + 1),
        })
    }

    fn close_mstep(&self, state: &mut EmState) -> MStep {
        let (trace, t_max) = (&mut state.trace, self.settings.updates_per_mstep);
        let p = state.sagd.theta.len();
        let start = trace.path.len() - t_max;
        let tail = &trace.path[start + t_max / 2..];
        let (tail_mean, tail_sd): (Vec<f64>, Vec<f64>) =
            (0..p).map(|j| column_mean_sd(tail, j)).unzip();
        let divergences = state.sagd.chains.divergences as usize
            - trace.msteps.iter().map(|m| m.divergences).sum::<usize>();
        let m = MStep {
            theta_start: trace.path[start - 1].clone(),
            theta_end: state.sagd.theta.clone(),
            tail_mean,
            tail_sd,
            divergences,
            step_size: trace
                .posterior_scale
                .and_then(|sigma| self.settings.chain_step.at(sigma))
                .map(|(delta, _)| delta),
        };
        trace.msteps.push(m.clone());
        trace.in_mstep = false;
        if let Some(rule) = self.settings.stopping {
            let means: Vec<Vec<f64>> = trace.msteps.iter().map(|m| m.tail_mean.clone()).collect();
            if let Some((est, se)) = rule.check(&means) {
                trace.converged = true;
                trace.estimate = est;
                trace.estimate_se = se;
            } else if self.settings.polish.is_some() && trace.em_resumed.is_none() {
                // Slow EM: Newton steps on ℓ cover in a few what many more M-steps would.
                trace.handover_rate = super::slow_rate(&means);
            }
        }
        m
    }
}

impl<M: LatentModel<f64>> Solver for EmSolver<'_, M> {
    type State = EmState;
    type Info = EmInfo;

    fn identity(&self) -> Result<Identity> {
        Ok(self.identity.clone())
    }

    fn next_iter(&mut self, state: &mut EmState) -> Result<EmInfo> {
        if !self.metric_synced {
            self.problem.set_metric(state.trace.metric.clone());
            self.metric_synced = true;
        }
        if !state.trace.in_mstep {
            self.begin_mstep(state)?;
        }
        let mstep = state.trace.msteps.len();
        let mut backoffs = Vec::new();
        let iter = loop {
            let steps_before = state.sagd.chains.steps;
            let result = self.update(state);
            state.trace.langevin_steps += state.sagd.chains.steps - steps_before;
            match result {
                Ok(iter) => break iter,
                Err(e) if non_finite(&e) && state.trace.backoffs.len() < MAX_BACKOFFS => {
                    let b = self.back_off(state, e.to_string())?;
                    state.trace.backoffs.push(b.clone());
                    backoffs.push(b);
                }
                Err(e) => {
                    return Err(SagdError::Context {
                        what: format!("automated EM, M-step {}", mstep + 1),
                        cause: Box::new(e),
                    })
                }
            }
        };
        state.trace.path.push(state.sagd.theta.clone());
        let finished =
            (state.sagd.t >= self.settings.updates_per_mstep).then(|| self.close_mstep(state));
        Ok(EmInfo {
            mstep,
            iter,
            finished,
            backoffs,
        })
    }

    fn sync(&mut self, state: &mut EmState) -> Result<()> {
        state.sagd.chains.sync_streams()
    }

    fn terminate(&self, state: &EmState) -> bool {
        !state.trace.in_mstep
            && (state.trace.converged
                || (state.trace.handover_rate.is_some() && state.trace.em_resumed.is_none())
                || state.trace.msteps.len() >= self.settings.max_msteps)
    }

    fn iterations(&self, state: &EmState) -> usize {
        state.sagd.t
    }

    fn at_boundary(&self, state: &EmState) -> bool {
        !state.trace.in_mstep && state.sagd.t > 0
    }
}
