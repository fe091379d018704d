//! Several "processes" as threads of one process, for tests: a [`Collective`] over shared
//! memory, so that a split run and its exchanges can be checked without MPI.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Barrier, Condvar, Mutex};

use super::{within, Collective};
use crate::error::{Result, SagdError};

/// Messages sent and not yet received, by (from, to).
type Mailboxes = HashMap<(usize, usize), VecDeque<Vec<u8>>>;

/// `size` processes as threads of this one, for tests: run each thread's work inside
/// [`within`] with its own [`ThreadGroup::member`].
pub struct ThreadGroup {
    size: usize,
    slots: Mutex<Vec<Vec<u8>>>,
    barrier: Barrier,
    mail: Mutex<Mailboxes>,
    posted: Condvar,
}

/// `f()` on `processes` threads, each one process of a [`ThreadGroup`] (inside [`within`]):
/// every thread's result, in rank order. How tests split a run without MPI.
pub fn threads_as_processes<R: Send>(processes: usize, f: impl Fn() -> R + Sync) -> Vec<R> {
    let group = ThreadGroup::new(processes);
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..processes)
            .map(|r| {
                let (member, f) = (group.member(r), &f);
                s.spawn(move || within(member, f))
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
            .collect()
    })
}

/// One thread's place in a [`ThreadGroup`].
pub struct Member {
    group: Arc<ThreadGroup>,
    rank: usize,
}

impl ThreadGroup {
    /// A group of `size` threads.
    pub fn new(size: usize) -> Arc<Self> {
        Arc::new(ThreadGroup {
            size,
            slots: Mutex::new(vec![Vec::new(); size]),
            barrier: Barrier::new(size),
            mail: Mutex::new(HashMap::new()),
            posted: Condvar::new(),
        })
    }

    /// The collective of the thread of rank `rank`.
    pub fn member(self: &Arc<Self>, rank: usize) -> Arc<dyn Collective> {
        Arc::new(Member {
            group: self.clone(),
            rank,
        })
    }
}

impl Member {
    fn poisoned<T>(&self, _: T) -> SagdError {
        SagdError::Process {
            rank: self.rank,
            message: "another thread of the group panicked".into(),
        }
    }
}

impl Collective for Member {
    fn rank(&self) -> usize {
        self.rank
    }

    fn size(&self) -> usize {
        self.group.size
    }

    fn all_gather(&self, mine: &[u8]) -> Result<Vec<Vec<u8>>> {
        let g = &self.group;
        g.slots.lock().map_err(|e| self.poisoned(e))?[self.rank] = mine.to_vec();
        g.barrier.wait();
        let all = g.slots.lock().map_err(|e| self.poisoned(e))?.clone();
        // Nobody writes the next round's part before everyone has read this one.
        g.barrier.wait();
        Ok(all)
    }

    fn send(&self, to: usize, bytes: &[u8]) -> Result<()> {
        let g = &self.group;
        let mut mail = g.mail.lock().map_err(|e| self.poisoned(e))?;
        mail.entry((self.rank, to))
            .or_default()
            .push_back(bytes.to_vec());
        g.posted.notify_all();
        Ok(())
    }

    fn receive(&self, from: usize) -> Result<Vec<u8>> {
        let g = &self.group;
        let mut mail = g.mail.lock().map_err(|e| self.poisoned(e))?;
        loop {
            if let Some(bytes) = mail
                .get_mut(&(from, self.rank))
                .and_then(VecDeque::pop_front)
            {
                return Ok(bytes);
            }
            mail = g.posted.wait(mail).map_err(|e| self.poisoned(e))?;
        }
    }
}
