//! Running the chains: single steps, burn-in, and K steps of every block of rows in parallel,
//! with each block's hook or accumulator seeing its states (and the fused θ-gradient) as it goes.

use serde::de::DeserializeOwned;

use super::*;
use crate::share::{self, Collective, WireError};

/// One block's transitions as the processes of a split run exchange them: what the block's task
/// returned and the block's rows of state after its last step (the random streams stay with the
/// process that steps the block).
#[derive(Serialize, Deserialize)]
#[serde(bound = "T: Real, A: Serialize + DeserializeOwned")]
struct BlockWire<T, A> {
    result: std::result::Result<(Vec<BlockStats>, A), WireError>,
    x: Vec<T>,
    g: Vec<T>,
    lp: Vec<T>,
    rho: Vec<T>,
}

type BlockResult<A> = Result<(Vec<BlockStats>, A)>;

/// What every block of one [`ChainSet::run_steps_fold`] call shares.
struct BlockRun<'r, D, K, I, F> {
    target: &'r D,
    kernel: &'r K,
    steps: usize,
    with_aux: bool,
    rows: usize,
    /// The buffer (0 or 1) that holds the current state.
    cur: usize,
    init: &'r I,
    fold: &'r F,
}

impl<T, D, I, F, A> BlockRun<'_, D, Kernel<T>, I, F>
where
    T: Real,
    D: LogDensity<T>,
    I: Fn(usize) -> A,
    F: Fn(&mut A, BlockStep<'_, T>),
{
    /// Block `i` through all the steps, each step's state handed to `fold`: buffers `a` hold the
    /// current state, `b` the next.
    fn steps_of(&self, i: usize, parts: BlockBuffers<'_, T>) -> BlockResult<A> {
        let (target, kernel, with_aux) = (self.target, self.kernel, self.with_aux);
        let (xs, gs, ls, rho, noise, rngs) = parts;
        let ((mut xa, mut xb), (mut ga, mut gb), (mut la, mut lb)) = if self.cur == 0 {
            (xs, gs, ls)
        } else {
            ((xs.1, xs.0), (gs.1, gs.0), (ls.1, ls.0))
        };
        let first_row = i * self.rows;
        let noise_len = kernel.noise_per_coord() * xa.len();
        // The block's own buffer for the target's auxiliary output, reused by every step.
        let mut aux_buf = vec![T::zero(); if with_aux { target.aux_len() } else { 0 }];
        let mut stats = Vec::with_capacity(self.steps);
        let mut acc = (self.init)(i);
        for _ in 0..self.steps {
            let parts = (
                &*xa,
                &mut *xb,
                &*ga,
                &mut *gb,
                &*la,
                &mut *lb,
                &mut *rho,
                &mut noise[..noise_len],
                &mut *rngs,
            );
            let aux = with_aux.then_some(&mut aux_buf[..]);
            let st = run_block(target, kernel, Block::new(first_row, parts), aux)?;
            (self.fold)(
                &mut acc,
                BlockStep {
                    first_row,
                    positions: &*xb,
                    divergences: st.divergences,
                    aux: (with_aux && st.divergences == 0).then_some(&aux_buf[..]),
                },
            );
            stats.push(st);
            std::mem::swap(&mut xa, &mut xb);
            std::mem::swap(&mut ga, &mut gb);
            std::mem::swap(&mut la, &mut lb);
        }
        Ok((stats, acc))
    }
}

impl<T: Real> ChainSet<T> {
    /// One transition of every chain under `kernel`, with the target evaluated at the chains'
    /// current parameters.
    pub fn step(&mut self, target: &impl LogDensity<T>, kernel: &Kernel<T>) -> Result<StepInfo> {
        let (infos, _) = self.run_steps(target, kernel, 1, false, |_| ())?;
        Ok(infos[0])
    }

    /// `steps` transitions (burn-in), discarding the states; returns the divergences.
    pub fn burn_in(
        &mut self,
        target: &impl LogDensity<T>,
        kernel: &Kernel<T>,
        steps: usize,
    ) -> Result<usize> {
        let (infos, _) = self.run_steps(target, kernel, steps, false, |_| ())?;
        Ok(infos.iter().map(|i| i.divergences).sum())
    }

    /// `steps` transitions of every chain, each block of rows taking all of them in one parallel
    /// task (chains are independent, so this is the same as stepping all chains together
    /// `steps` times, without a synchronisation per step). After each transition of a block,
    /// `after` runs on that block's [`BlockStep`] in the same task; its values come back per step,
    /// in block order. With `aux`, each evaluation also computes the target's auxiliary output
    /// (the fused θ-gradient), handed to `after` with the step. Returns one [`StepInfo`] per step.
    pub fn run_steps<R, F>(
        &mut self,
        target: &impl LogDensity<T>,
        kernel: &Kernel<T>,
        steps: usize,
        aux: bool,
        after: F,
    ) -> Result<(Vec<StepInfo>, Vec<Vec<R>>)>
    where
        R: Send + Serialize + DeserializeOwned,
        F: Fn(BlockStep<'_, T>) -> R + Sync,
    {
        let (infos, per_block) = self.run_steps_fold(
            target,
            kernel,
            steps,
            aux,
            |_| Vec::with_capacity(steps),
            |acc: &mut Vec<R>, b| acc.push(after(b)),
        )?;
        let mut values: Vec<Vec<R>> = (0..infos.len())
            .map(|_| Vec::with_capacity(per_block.len()))
            .collect();
        for vals in per_block {
            for (s, v) in vals.into_iter().enumerate() {
                values[s].push(v);
            }
        }
        Ok((infos, values))
    }

    /// [`ChainSet::run_steps`] with one accumulator per block instead of one value per block and
    /// step: `init(block)` makes it, `fold` takes each of the block's steps into it in the block's
    /// task. The accumulators come back in block order, so a sum over them in that order is the
    /// same for any number of threads, and no step's value outlives its step.
    ///
    /// In a run split over processes ([`crate::share`]) each process steps its share of the
    /// blocks and the processes exchange the blocks' states and accumulators, so every process
    /// ends with all of them, the same bits as one process.
    pub fn run_steps_fold<A, I, F>(
        &mut self,
        target: &impl LogDensity<T>,
        kernel: &Kernel<T>,
        steps: usize,
        aux: bool,
        init: I,
        fold: F,
    ) -> Result<(Vec<StepInfo>, Vec<A>)>
    where
        A: Send + Serialize + DeserializeOwned,
        I: Fn(usize) -> A + Sync,
        F: Fn(&mut A, BlockStep<'_, T>) + Sync,
    {
        if !self.initialized {
            return Err(SagdError::InvalidSetting {
                name: "chains",
                value: "uninitialised".into(),
                fix: "call ChainSet::init with starting positions before stepping".into(),
            });
        }
        check_len("target dimension", self.d, target.dim())?;
        if steps == 0 {
            return Ok((Vec::new(), Vec::new()));
        }
        let (n, d) = (self.n, self.d);
        let noise_len = n * d * kernel.noise_per_coord();
        if self.scratch.0.len() < noise_len {
            self.scratch.0.resize(noise_len, T::zero());
        }
        let with_aux = aux && target.aux_len() > 0 && kernel.ends_at_gradient();
        let rows = self.rows_per_block.min(n.max(1));
        let group = share::current();
        if self.stale.0.is_some() && (group.is_none() || self.stale.0 != Some(rows)) {
            // Stepped before by other processes' blocks, or now whole: streams first.
            self.sync_streams()?;
        }
        let run = BlockRun {
            target,
            kernel,
            steps,
            with_aux,
            rows,
            cur: self.cur,
            init: &init,
            fold: &fold,
        };
        let n_blocks = n.div_ceil(rows).max(1);
        let mine = group
            .as_ref()
            .map_or(0..n_blocks, |c| share::owned(n_blocks, c.rank(), c.size()));
        let per_block = self.each_block(kernel, rows, mine, |i, parts| run.steps_of(i, parts));
        let per_block = match group {
            None => per_block,
            Some(group) => {
                let last = if steps % 2 == 1 { 1 - run.cur } else { run.cur };
                self.share_blocks(&*group, per_block, n_blocks, rows, last)?
            }
        };
        let mut blocks = Vec::with_capacity(per_block.len());
        for b in per_block {
            blocks.push(b?);
        }
        let infos = self.record(&blocks, steps, kernel);
        Ok((infos, blocks.into_iter().map(|(_, acc)| acc).collect()))
    }

    /// `block(i, buffers)` for every block `i` of `rows` rows in `mine`, each on its rows' states,
    /// momenta, streams and noise buffer (sized for `kernel`), side by side on the thread pool
    /// (in turn when there is one block or one thread, without the tasks' cost); results in
    /// block order.
    fn each_block<R: Send>(
        &mut self,
        kernel: &Kernel<T>,
        rows: usize,
        mine: std::ops::Range<usize>,
        block: impl Fn(usize, BlockBuffers<'_, T>) -> R + Sync,
    ) -> Vec<R> {
        let d = self.d;
        let bd = (rows * d).max(1);
        let nb = (kernel.noise_per_coord().max(1) * rows * d).max(1);
        let n_blocks = self.n.div_ceil(rows).max(1);
        let [x0, x1] = &mut self.x;
        let [g0, g1] = &mut self.g;
        let [l0, l1] = &mut self.lp;
        // One noise buffer per block (empty for kernels that draw none).
        let mut noise_chunks: Vec<&mut [T]> = self.scratch.0.chunks_mut(nb).collect();
        noise_chunks.resize_with(n_blocks, Default::default);
        if n_blocks == 1 || rayon::current_num_threads() == 1 {
            x0.chunks_mut(bd)
                .zip(x1.chunks_mut(bd))
                .zip(g0.chunks_mut(bd).zip(g1.chunks_mut(bd)))
                .zip(l0.chunks_mut(rows).zip(l1.chunks_mut(rows)))
                .zip(self.rho.chunks_mut(bd))
                .zip(noise_chunks)
                .zip(self.rngs.chunks_mut(rows))
                .enumerate()
                .filter(|(i, _)| mine.contains(i))
                .map(|(i, ((((((xa, xb), gs), ls), rho), noise), rngs))| {
                    block(i, ((xa, xb), gs, ls, rho, noise, rngs))
                })
                .collect()
        } else {
            (
                x0.par_chunks_mut(bd),
                x1.par_chunks_mut(bd),
                g0.par_chunks_mut(bd),
                g1.par_chunks_mut(bd),
                l0.par_chunks_mut(rows),
                l1.par_chunks_mut(rows),
                self.rho.par_chunks_mut(bd),
                noise_chunks.into_par_iter(),
                self.rngs.par_chunks_mut(rows),
            )
                .into_par_iter()
                .enumerate()
                .filter(|(i, _)| mine.contains(i))
                .map(|(i, (xa, xb, ga, gb, la, lb, rho, noise, rngs))| {
                    block(i, ((xa, xb), (ga, gb), (la, lb), rho, noise, rngs))
                })
                .collect()
        }
    }

    /// Each step's sums over the blocks (in block order) as its [`StepInfo`]; the divergences,
    /// steps and current buffer of the set moved on.
    fn record<A>(
        &mut self,
        blocks: &[(Vec<BlockStats>, A)],
        steps: usize,
        kernel: &Kernel<T>,
    ) -> Vec<StepInfo> {
        let (n, d) = (self.n, self.d);
        let mut infos = Vec::with_capacity(steps);
        let nf = n.max(1) as f64;
        for s in 0..steps {
            let mut total = BlockStats::default();
            for (st, _) in blocks {
                total.add(&st[s]);
            }
            self.divergences += total.divergences as u64;
            infos.push(StepInfo {
                divergences: total.divergences,
                mean_log_density: total.logp / nf,
                kinetic_temperature: total.rho2 / (nf * d.max(1) as f64),
                acceptance: kernel.metropolis.then(|| total.accept / nf),
                energy_change: kernel
                    .metropolis
                    .then(|| total.dh / total.dh_count.max(1) as f64),
            });
        }
        if steps % 2 == 1 {
            self.cur = 1 - self.cur;
        }
        self.steps += steps as u64;
        infos
    }

    /// Sends this process's blocks (results and rows of state in buffer `last`) to the others and
    /// takes theirs: every block's result in block order, every row's state in place.
    fn share_blocks<A: Serialize + DeserializeOwned>(
        &mut self,
        group: &dyn Collective,
        results: Vec<BlockResult<A>>,
        n_blocks: usize,
        rows: usize,
        last: usize,
    ) -> Result<Vec<BlockResult<A>>> {
        let (n, d, size) = (self.n, self.d, group.size());
        let span = |b: usize| (b * rows).min(n)..((b + 1) * rows).min(n);
        let mine = share::owned(n_blocks, group.rank(), size);
        let part: Vec<BlockWire<T, A>> = mine
            .zip(results)
            .map(|(b, result)| {
                let r = span(b);
                let e = r.start * d..r.end * d;
                BlockWire {
                    result: result.map_err(|e| WireError::of(&e)),
                    x: self.x[last][e.clone()].to_vec(),
                    g: self.g[last][e.clone()].to_vec(),
                    lp: self.lp[last][r.clone()].to_vec(),
                    rho: self.rho[e].to_vec(),
                }
            })
            .collect();
        let parts = share::all_gather(group, &share::encode_plain(&part)?)?;
        let mut out = Vec::with_capacity(n_blocks);
        for (rank, bytes) in parts.iter().enumerate() {
            let theirs = share::owned(n_blocks, rank, size);
            let wires: Vec<BlockWire<T, A>> = share::decode_plain(bytes, rank)?;
            if wires.len() != theirs.len() {
                return Err(share::out_of_step(
                    rank,
                    format_args!(
                        "sent {} blocks of chains where {} were due",
                        wires.len(),
                        theirs.len()
                    ),
                ));
            }
            for (b, w) in theirs.zip(wires) {
                if rank != group.rank() {
                    let r = span(b);
                    let e = r.start * d..r.end * d;
                    let fits = w.x.len() == e.len() && w.lp.len() == r.len();
                    if !fits || w.g.len() != e.len() || w.rho.len() != e.len() {
                        return Err(share::out_of_step(
                            rank,
                            format_args!("sent block {b} of chains with the wrong shape"),
                        ));
                    }
                    self.x[last][e.clone()].copy_from_slice(&w.x);
                    self.g[last][e.clone()].copy_from_slice(&w.g);
                    self.lp[last][r.clone()].copy_from_slice(&w.lp);
                    self.rho[e].copy_from_slice(&w.rho);
                }
                out.push(w.result.map_err(|e| e.into_error(rank)));
            }
        }
        self.stale = Stale(Some(rows));
        Ok(out)
    }

    /// Brings every chain's random stream up to date in every process after blocks were stepped
    /// by several: each sends its own blocks' streams. Collective: every process calls it at the
    /// same point (the runner does, through the solvers' `sync`, before each checkpoint). A no-op
    /// unless stepped so.
    pub fn sync_streams(&mut self) -> Result<()> {
        let Some(rows) = self.stale.0 else {
            return Ok(());
        };
        let group = share::current().ok_or_else(|| SagdError::Process {
            rank: share::rank(),
            message: "chains stepped by several processes were used where one process works alone: call ChainSet::sync_streams where every process is".into(),
        })?;
        let (n, size) = (self.n, group.size());
        let n_blocks = n.div_ceil(rows).max(1);
        let span = |rank: usize| {
            let b = share::owned(n_blocks, rank, size);
            (b.start * rows).min(n)..(b.end * rows).min(n)
        };
        let mine = &self.rngs[span(group.rank())];
        let parts = share::all_gather(&*group, &share::encode_plain(mine)?)?;
        for (rank, bytes) in parts.iter().enumerate() {
            if rank == group.rank() {
                continue;
            }
            let theirs: Vec<ChainRng> = share::decode_plain(bytes, rank)?;
            let r = span(rank);
            if theirs.len() != r.len() {
                return Err(share::out_of_step(
                    rank,
                    format_args!(
                        "sent {} random streams where {} were due",
                        theirs.len(),
                        r.len()
                    ),
                ));
            }
            self.rngs[r].clone_from_slice(&theirs);
        }
        self.stale = Stale(None);
        Ok(())
    }
}
