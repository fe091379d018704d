//! Runs split over processes (data parallelism, e.g. over MPI): every process runs the same
//! program on the same data, and each pass that is cut into pieces by the data's shape (blocks
//! of chains, points of a grid) runs only this process's share of the pieces and exchanges the
//! results, so that every process ends the pass with all of them. Because the pieces and the
//! order in which their results are combined are fixed by the shapes, never by the number of
//! processes, a run split over any number of processes gives the same bits as one process.
//!
//! The crate has no MPI of its own: an engine implements [`Collective`] (the `sagd-mpi` crate
//! over MPI, [`ThreadGroup`] over threads for tests) and [`install`]s it once per process.
//! Without one, every pass runs whole and nothing is exchanged.

use std::cell::RefCell;
use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Instant;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::error::{LogpError, Result, SagdError};

mod threads;
#[doc(hidden)]
pub use threads::{threads_as_processes, Member, ThreadGroup};

/// The processes a run is split over, and the one exchange it needs.
pub trait Collective: Send + Sync {
    /// This process's place, `0..size()`.
    fn rank(&self) -> usize;
    /// The number of processes.
    fn size(&self) -> usize;
    /// This process's place among the processes on its own machine (how it picks its GPU); by
    /// default all run on one machine.
    fn local_rank(&self) -> usize {
        self.rank()
    }
    /// Every process's `mine`, in rank order. Every process must call it at the same point of
    /// the program (it is collective); an engine that loses a process ends the job rather than
    /// wait for it.
    fn all_gather(&self, mine: &[u8]) -> Result<Vec<Vec<u8>>>;
    /// Sends `bytes` to process `to`, which takes them with [`Collective::receive`]: for sums
    /// that must pass from process to process in order ([`relay_sum`]).
    fn send(&self, to: usize, bytes: &[u8]) -> Result<()>;
    /// What process `from` sends to this one next (waiting for it).
    fn receive(&self, from: usize) -> Result<Vec<u8>>;
}

static PROCESS: OnceLock<Arc<dyn Collective>> = OnceLock::new();

thread_local! {
    static THREAD: RefCell<Option<Arc<dyn Collective>>> = const { RefCell::new(None) };
    /// Whether this thread is inside an item of [`map`], whose passes run whole.
    static IN_ITEM: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// `f()` with every pass inside it run whole by this process: how an item of [`map`] runs (one
/// process computes the item), and how a pass that a caller has already cut into each process's
/// share runs its share (a device that runs its share as one piece).
#[doc(hidden)]
pub fn whole<R>(f: impl FnOnce() -> R) -> R {
    let outer = IN_ITEM.with(|c| c.replace(true));
    let r = f();
    IN_ITEM.with(|c| c.set(outer));
    r
}

/// Splits every later pass of this process over `group`'s processes. Once per process.
pub fn install(group: Arc<dyn Collective>) -> Result<()> {
    PROCESS.set(group).map_err(|_| SagdError::InvalidSetting {
        name: "processes",
        value: "installed twice".into(),
        fix: "install the collective once, at the start of the process".into(),
    })
}

/// Runs `f` on this thread as one process of `group` (overriding any installed collective): how
/// tests run several "processes" as threads of one.
#[doc(hidden)]
pub fn within<R>(group: Arc<dyn Collective>, f: impl FnOnce() -> R) -> R {
    let old = THREAD.with(|t| t.replace(Some(group)));
    let r = f();
    THREAD.with(|t| *t.borrow_mut() = old);
    r
}

/// The collective of this thread's run, if it is split over two processes or more. None inside
/// an item of [`map`] (one process computes it whole) and inside a parallel task (a rayon
/// worker): tasks would meet the exchange in no fixed order.
#[doc(hidden)]
pub fn current() -> Option<Arc<dyn Collective>> {
    if IN_ITEM.with(|c| c.get()) || rayon::current_thread_index().is_some() {
        return None;
    }
    group()
}

/// The processes this one belongs to, if two or more, wherever it is asked.
fn group() -> Option<Arc<dyn Collective>> {
    THREAD
        .with(|t| t.borrow().clone())
        .or_else(|| PROCESS.get().cloned())
        .filter(|c| c.size() > 1)
}

/// This process's rank (0 without a collective).
#[doc(hidden)]
pub fn rank() -> usize {
    group().map_or(0, |c| c.rank())
}

/// This process's rank among those on its machine (0 without a collective).
#[doc(hidden)]
pub fn local_rank() -> usize {
    group().map_or(0, |c| c.local_rank())
}

/// The number of processes (1 without a collective).
#[doc(hidden)]
pub fn size() -> usize {
    group().map_or(1, |c| c.size())
}

/// Whether this process writes the run's files: the first, or the only one.
#[doc(hidden)]
pub fn is_root() -> bool {
    rank() == 0
}

/// Whether this process writes the files of what it is computing now (checkpoints, caches):
/// outside a split run, always; in one, the first process writes what every process computes,
/// and the process that computes an item of [`map`] alone writes that item's.
#[doc(hidden)]
pub fn writes_here() -> bool {
    is_root() || IN_ITEM.with(|c| c.get())
}

/// The pieces of `0..n` that process `rank` of `size` runs: a contiguous run, the first
/// `n mod size` processes taking one more.
#[doc(hidden)]
pub fn owned(n: usize, rank: usize, size: usize) -> Range<usize> {
    let size = size.max(1);
    let (q, r) = (n / size, n % size);
    let start = rank * q + rank.min(r);
    start..start + q + usize::from(rank < r)
}

/// An error carried from the process where it happened to the others: model errors keep their
/// kind (automated EM backs off from a non-finite one on every process alike); any other
/// arrives as [`SagdError::Process`].
#[derive(Clone, Debug, Serialize, Deserialize)]
#[doc(hidden)]
pub enum WireError {
    /// A model's error.
    Model(LogpError),
    /// A chain started where the target is not finite.
    NonFiniteStart(usize),
    /// An error that already came from another process.
    Process(usize, String),
    /// Anything else, by its message.
    Other(String),
}

impl WireError {
    /// The wire form of `e`.
    pub fn of(e: &SagdError) -> Self {
        match e {
            SagdError::Model(m) => WireError::Model(m.clone()),
            SagdError::NonFiniteStart { chain } => WireError::NonFiniteStart(*chain),
            SagdError::Process { rank, message } => WireError::Process(*rank, message.clone()),
            e => WireError::Other(e.to_string()),
        }
    }

    /// The error as every process sees it; `rank` is where it happened.
    pub fn into_error(self, rank: usize) -> SagdError {
        match self {
            WireError::Model(m) => SagdError::Model(m),
            WireError::NonFiniteStart(chain) => SagdError::NonFiniteStart { chain },
            WireError::Process(rank, message) => SagdError::Process { rank, message },
            WireError::Other(message) => SagdError::Process { rank, message },
        }
    }
}

/// What this process has exchanged so far: calls, bytes sent, bytes received, seconds spent.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
#[doc(hidden)]
pub struct Exchanged {
    /// Exchanges ([`Collective::all_gather`] calls).
    pub calls: u64,
    /// Bytes this process sent (its parts).
    pub sent: u64,
    /// Bytes it received (every process's parts, its own included).
    pub received: u64,
    /// Seconds inside the exchanges: the transfer and the wait for the slowest process.
    pub seconds: f64,
}

impl Exchanged {
    /// What was exchanged after `earlier` was read.
    pub fn since(&self, earlier: &Exchanged) -> Exchanged {
        Exchanged {
            calls: self.calls - earlier.calls,
            sent: self.sent - earlier.sent,
            received: self.received - earlier.received,
            seconds: self.seconds - earlier.seconds,
        }
    }
}

static CALLS: AtomicU64 = AtomicU64::new(0);
static SENT: AtomicU64 = AtomicU64::new(0);
static RECEIVED: AtomicU64 = AtomicU64::new(0);
static NANOS: AtomicU64 = AtomicU64::new(0);

/// What this process has exchanged since it started.
#[doc(hidden)]
pub fn exchanged() -> Exchanged {
    Exchanged {
        calls: CALLS.load(Ordering::Relaxed),
        sent: SENT.load(Ordering::Relaxed),
        received: RECEIVED.load(Ordering::Relaxed),
        seconds: NANOS.load(Ordering::Relaxed) as f64 * 1e-9,
    }
}

/// `exchange()`, counted in [`exchanged`] with the bytes it sent and received.
fn counted<R>(
    sent: usize,
    exchange: impl FnOnce() -> Result<R>,
    received: impl Fn(&R) -> usize,
) -> Result<R> {
    let t0 = Instant::now();
    let r = exchange()?;
    CALLS.fetch_add(1, Ordering::Relaxed);
    SENT.fetch_add(sent as u64, Ordering::Relaxed);
    RECEIVED.fetch_add(received(&r) as u64, Ordering::Relaxed);
    NANOS.fetch_add(t0.elapsed().as_nanos() as u64, Ordering::Relaxed);
    Ok(r)
}

/// `group.all_gather(mine)`, counted in [`exchanged`].
#[doc(hidden)]
pub fn all_gather(group: &dyn Collective, mine: &[u8]) -> Result<Vec<Vec<u8>>> {
    counted(
        mine.len(),
        || group.all_gather(mine),
        |all| all.iter().map(Vec::len).sum(),
    )
}

/// Waits until every process of a split run is here (nothing outside one).
#[doc(hidden)]
pub fn barrier() -> Result<()> {
    match current() {
        Some(group) => all_gather(&*group, &[]).map(|_| ()),
        None => Ok(()),
    }
}

/// The share of `n` pieces that this process runs: all of them outside a split run, and inside
/// an item of [`map`] or a parallel task.
#[doc(hidden)]
pub fn mine(n: usize) -> Range<usize> {
    current().map_or(0..n, |g| owned(n, g.rank(), g.size()))
}

/// Every process's `part` (its items of a pass cut by [`mine`], in order) joined in rank order:
/// every item of the pass, in piece order. Outside a split run, `part` itself. Plain data only
/// ([`encode_plain`]).
#[doc(hidden)]
pub fn gather<T: Serialize + DeserializeOwned>(part: Vec<T>) -> Result<Vec<T>> {
    let Some(group) = current() else {
        return Ok(part);
    };
    let parts = all_gather(&*group, &encode_plain(&part)?)?;
    let mut all = Vec::new();
    for (r, bytes) in parts.iter().enumerate() {
        all.extend(decode_plain::<Vec<T>>(bytes, r)?);
    }
    Ok(all)
}

/// The sum of `n` pieces' arrays, cut over processes by [`mine`], added in piece order exactly
/// as one process adds them: floating-point addition is not associative, so the running sum
/// passes from process to process (rank order is piece order) and no process adds partial sums
/// of its own. `add(out)` adds this process's pieces into `out` in order; `out` holds, on the
/// process of the first piece, what that piece wrote, and on the others the running sum of the
/// pieces before theirs, received from the previous process. The last process's sum then goes
/// to every process. Outside a split run, `add(out)`.
#[doc(hidden)]
pub fn relay_sum(n: usize, out: &mut [f32], add: impl FnOnce(&mut [f32])) -> Result<()> {
    let Some(group) = current() else {
        add(out);
        return Ok(());
    };
    let (rank, owners) = (group.rank(), n.min(group.size()));
    if owners == 0 {
        return Ok(());
    }
    if rank < owners {
        if rank > 0 {
            let bytes = counted(0, || group.receive(rank - 1), Vec::len)?;
            read_f32s(&bytes, out, rank - 1)?;
        }
        add(out);
        if rank + 1 < owners {
            let bytes = f32_bytes(out);
            counted(bytes.len(), || group.send(rank + 1, &bytes), |_| 0)?;
        }
    }
    let last = owners - 1;
    let sum = if rank == last {
        f32_bytes(out)
    } else {
        Vec::new()
    };
    let all = all_gather(&*group, &sum)?;
    if rank != last {
        read_f32s(&all[last], out, last)?;
    }
    Ok(())
}

fn f32_bytes(xs: &[f32]) -> Vec<u8> {
    xs.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// `out` from what process `rank` sent as [`f32_bytes`].
fn read_f32s(bytes: &[u8], out: &mut [f32], rank: usize) -> Result<()> {
    if bytes.len() != 4 * out.len() {
        return Err(out_of_step(
            rank,
            format_args!(
                "it sent a sum of {} bytes where {} were due",
                bytes.len(),
                4 * out.len()
            ),
        ));
    }
    for (o, b) in out.iter_mut().zip(bytes.chunks_exact(4)) {
        *o = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
    }
    Ok(())
}

/// The error for what process `rank` sent when it does not fit what this process expects: the
/// processes are out of step.
#[doc(hidden)]
pub fn out_of_step(rank: usize, what: impl std::fmt::Display) -> SagdError {
    SagdError::Process {
        rank,
        message: format!("{what}: the processes must run the same program on the same data"),
    }
}

/// Encodes this process's part for [`Collective::all_gather`], in CBOR: self-describing, so any
/// serde type travels (results written for JSON too), floats bit for bit, NaN included.
#[doc(hidden)]
pub fn encode<W: Serialize + ?Sized>(part: &W) -> Result<Vec<u8>> {
    let mut bytes = Vec::new();
    ciborium::into_writer(part, &mut bytes).map_err(|e| SagdError::InvalidSetting {
        name: "results of a split run",
        value: e.to_string(),
        fix: "they cannot be encoded for the other processes: run as one process".into(),
    })?;
    Ok(bytes)
}

/// Encodes plain data (no skipped or flattened fields) compactly: postcard, floats as their 8
/// bytes. For the chains' blocks, exchanged at every update.
#[doc(hidden)]
pub fn encode_plain<W: Serialize + ?Sized>(part: &W) -> Result<Vec<u8>> {
    postcard::to_allocvec(part).map_err(|e| SagdError::InvalidSetting {
        name: "results of a split run",
        value: e.to_string(),
        fix: "they cannot be encoded for the other processes: run as one process".into(),
    })
}

/// Decodes what [`encode_plain`] encoded in process `rank`.
#[doc(hidden)]
pub fn decode_plain<R: DeserializeOwned>(bytes: &[u8], rank: usize) -> Result<R> {
    postcard::from_bytes(bytes)
        .map_err(|e| out_of_step(rank, format_args!("its results arrived damaged ({e})")))
}

/// Decodes the part that process `rank` sent.
#[doc(hidden)]
pub fn decode<R: DeserializeOwned>(bytes: &[u8], rank: usize) -> Result<R> {
    ciborium::from_reader(bytes)
        .map_err(|e| out_of_step(rank, format_args!("its results arrived damaged ({e})")))
}

/// `f(i)` for every `i` in `0..n`, in order, each computed by one process (in parallel threads
/// there) and sent to all: the same values as computing them all here, split over processes.
/// Every item runs to its end; errors travel as [`WireError`]s, and the first in order is
/// returned.
#[doc(hidden)]
pub fn map<R, F>(n: usize, f: F) -> Result<Vec<R>>
where
    R: Serialize + DeserializeOwned + Send,
    F: Fn(usize) -> Result<R> + Sync,
{
    use rayon::prelude::*;
    let Some(group) = current() else {
        // Every item runs to its end (its checkpoint written) before the first error returns.
        let all: Vec<Result<R>> = (0..n).into_par_iter().map(|i| whole(|| f(i))).collect();
        return all.into_iter().collect();
    };
    let mine = owned(n, group.rank(), group.size());
    let part: Vec<std::result::Result<R, WireError>> = mine
        .into_par_iter()
        .map(|i| whole(|| f(i)).map_err(|e| WireError::of(&e)))
        .collect();
    let parts = all_gather(&*group, &encode(&part)?)?;
    let mut out = Vec::with_capacity(n);
    for (r, bytes) in parts.iter().enumerate() {
        let values: Vec<std::result::Result<R, WireError>> = decode(bytes, r)?;
        for v in values {
            out.push(v.map_err(|e| e.into_error(r))?);
        }
    }
    Ok(out)
}

/// [`map`] over the chunks of `chunk` elements of `xs` (the last may be shorter): `f(b, chunk_b)`
/// for every chunk, in order, split over processes as [`map`] is.
#[doc(hidden)]
pub fn map_chunks<T, R, F>(xs: &[T], chunk: usize, f: F) -> Result<Vec<R>>
where
    T: Sync,
    R: Serialize + DeserializeOwned + Send,
    F: Fn(usize, &[T]) -> Result<R> + Sync,
{
    let chunk = chunk.max(1);
    map(xs.len().div_ceil(chunk), |b| {
        f(b, &xs[b * chunk..((b + 1) * chunk).min(xs.len())])
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shares_cover_the_pieces_once_in_order() {
        for n in [0, 1, 5, 64, 65] {
            for size in 1..6 {
                let all: Vec<usize> = (0..size).flat_map(|r| owned(n, r, size)).collect();
                assert_eq!(all, (0..n).collect::<Vec<_>>(), "n {n}, size {size}");
            }
        }
        assert_eq!(owned(10, 0, 3), 0..4);
        assert_eq!(owned(10, 2, 3), 7..10);
    }

    #[test]
    fn map_over_threads_as_processes_gives_every_value_to_every_process() {
        let f = |i: usize| -> Result<f64> {
            if i == 7 {
                Err(SagdError::Model(LogpError::NonFinite))
            } else {
                Ok((i as f64).sqrt())
            }
        };
        let whole: Vec<f64> = (0..7).map(|i| f(i).unwrap()).collect();
        let results = threads_as_processes(3, || {
            assert_eq!(size(), 3);
            (map(7, f).unwrap(), map(9, f).err().map(|e| e.to_string()))
        });
        for (values, err) in results {
            assert_eq!(values, whole);
            // The model error arrives with its kind, whichever process computed it.
            assert_eq!(
                err.as_deref(),
                Some("model error: the log density or its gradient is not finite")
            );
        }
        assert_eq!(size(), 1, "the group ends with its threads");
    }

    #[test]
    fn a_relayed_sum_has_one_processs_bits_on_any_number_of_processes() {
        // Pieces whose sum rounds differently in any other order.
        let piece = |b: usize| -> Vec<f32> {
            (0..300)
                .map(|j| ((b * 7919 + j * 104_729) % 1000) as f32 * 10f32.powi((b % 5) as i32 - 2))
                .collect()
        };
        let sum = |n: usize| -> Vec<f32> {
            let mine = mine(n);
            let mut out = vec![f32::NAN; 300];
            let own: Vec<Vec<f32>> = mine.clone().map(piece).collect();
            let first = mine.start == 0 && !mine.is_empty();
            if first {
                out.copy_from_slice(&own[0]);
            }
            let rest = &own[usize::from(first)..];
            relay_sum(n, &mut out, |o| crate::parallel::add_parts(rest, o)).unwrap();
            out
        };
        for n in [1, 2, 5, 7] {
            let whole = sum(n);
            let reassociated: Vec<f32> = (0..300)
                .map(|j| piece(0)[j] + (1..n).map(|b| piece(b)[j]).sum::<f32>())
                .collect();
            if n > 2 {
                assert_ne!(
                    whole, reassociated,
                    "the test's pieces must tell orders apart"
                );
            }
            for processes in 1..6 {
                for got in threads_as_processes(processes, || sum(n)) {
                    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                    assert_eq!(
                        bits(&got),
                        bits(&whole),
                        "{n} pieces, {processes} processes"
                    );
                }
            }
        }
    }

    #[test]
    fn gathered_shares_are_every_item_in_order() {
        for processes in 1..5 {
            for all in threads_as_processes(processes, || {
                gather(mine(10).map(|i| i as f64 * 0.5).collect()).unwrap()
            }) {
                assert_eq!(all, (0..10).map(|i| i as f64 * 0.5).collect::<Vec<_>>());
            }
        }
    }
}
