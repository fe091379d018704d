//! The exchange over MPI: `MPI_Allgatherv` of bytes, and `MPI_Send`/`MPI_Recv` for sums passed
//! from process to process, from the main thread only (rayon's threads never call MPI, so MPI
//! is initialised for funnelled threads).

use std::sync::Arc;

use mpi::datatype::PartitionMut;
use mpi::environment::Threading;
use mpi::point_to_point::{Destination, Source};
use mpi::topology::{Communicator, SimpleCommunicator};
use mpi::traits::CommunicatorCollectives;
use mpi::Count;
use sagd::error::{Result, SagdError};
use sagd::share::{self, Collective};

use crate::Processes;

/// MPI_COMM_WORLD as a [`Collective`]. Holds no MPI object (they are not `Sync`): the world's
/// handle is taken at each call.
struct World {
    rank: usize,
    size: usize,
    /// The rank among the processes that share this one's memory (MPI_Comm_split_type).
    local: usize,
}

fn count(n: usize, what: &str) -> Result<Count> {
    Count::try_from(n).map_err(|_| SagdError::Process {
        rank: share::rank(),
        message: format!("{what} of {n} bytes is over MPI's 2 GiB limit per message: use more processes or fewer chains per process"),
    })
}

impl Collective for World {
    fn rank(&self) -> usize {
        self.rank
    }

    fn size(&self) -> usize {
        self.size
    }

    fn local_rank(&self) -> usize {
        self.local
    }

    fn all_gather(&self, mine: &[u8]) -> Result<Vec<Vec<u8>>> {
        let world = SimpleCommunicator::world();
        let len = count(mine.len(), "this process's part")?;
        let mut counts = vec![0 as Count; self.size];
        world.all_gather_into(&len, &mut counts[..]);
        let mut displs = Vec::with_capacity(self.size);
        let mut total = 0usize;
        for &c in &counts {
            displs.push(count(total, "the exchange")?);
            total += c as usize;
        }
        count(total, "the exchange")?;
        if total == 0 {
            // Every process sees the same counts: all skip (Open MPI refuses an empty Allgatherv's
            // buffers, MPI_ERR_ARG). The counts' exchange was the synchronisation.
            return Ok(vec![Vec::new(); self.size]);
        }
        let mut all = vec![0u8; total];
        {
            let mut parts = PartitionMut::new(&mut all[..], &counts[..], &displs[..]);
            world.all_gather_varcount_into(mine, &mut parts);
        }
        Ok(counts
            .iter()
            .zip(&displs)
            .map(|(&c, &d)| all[d as usize..d as usize + c as usize].to_vec())
            .collect())
    }

    fn send(&self, to: usize, bytes: &[u8]) -> Result<()> {
        count(bytes.len(), "a sum sent on")?;
        let world = SimpleCommunicator::world();
        world.process_at_rank(to as i32).send(bytes);
        Ok(())
    }

    fn receive(&self, from: usize) -> Result<Vec<u8>> {
        let world = SimpleCommunicator::world();
        let (bytes, _) = world.process_at_rank(from as i32).receive_vec::<u8>();
        Ok(bytes)
    }
}

pub(crate) fn start() -> std::result::Result<Processes, String> {
    let (universe, _) = mpi::initialize_with_threading(Threading::Funneled)
        .ok_or("MPI was already initialised in this process")?;
    let world = universe.world();
    let (rank, size) = (world.rank() as usize, world.size() as usize);
    if size > 1 {
        let local = world.split_shared(world.rank()).rank() as usize;
        share::install(Arc::new(World { rank, size, local })).map_err(|e| e.to_string())?;
    }
    if rank > 0 {
        silence_stdout();
    }
    Ok(Processes {
        rank,
        size,
        _universe: Some(universe),
    })
}

pub(crate) fn abort(code: i32) -> ! {
    SimpleCommunicator::world().abort(code)
}

/// The other processes print what the first prints: their standard output goes to /dev/null
/// (their errors still reach standard error).
fn silence_stdout() {
    use std::os::fd::AsRawFd;
    if let Ok(null) = std::fs::OpenOptions::new().write(true).open("/dev/null") {
        // SAFETY: dup2 on two open descriptors; stdout is replaced atomically.
        unsafe {
            libc::dup2(null.as_raw_fd(), libc::STDOUT_FILENO);
        }
    }
}
