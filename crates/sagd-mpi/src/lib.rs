//! sagd's runs split over processes with MPI (`mpirun -np N sagd …`, or `srun` under Slurm).
//!
//! Every process runs the same program on the same data; [`sagd::share`] gives each its share
//! of every pass and exchanges the results, so the run ends with the same bits on any number of
//! processes. This crate supplies the exchange over MPI ([`start`] with the `mpi` feature) and
//! what a launcher needs around it: a refusal when a binary built without MPI is launched on
//! several processes (each would run the whole job), and the end of the whole job when one
//! process fails ([`Processes::fail`]).

#[cfg(feature = "mpi")]
mod engine;

/// The processes of this run, from [`start`]; hold it until the run ends (dropping it closes MPI).
pub struct Processes {
    rank: usize,
    size: usize,
    #[cfg(feature = "mpi")]
    _universe: Option<mpi::environment::Universe>,
}

impl Processes {
    /// This process's rank.
    pub fn rank(&self) -> usize {
        self.rank
    }

    /// The number of processes.
    pub fn size(&self) -> usize {
        self.size
    }

    /// Whether this process writes the run's output and shows its progress.
    pub fn is_root(&self) -> bool {
        self.rank == 0
    }

    /// Ends the whole job after an error in this process: prints it with the rank and, when
    /// there are other processes, aborts them all (no process waits for one that has gone).
    /// The first process prints at once. Another waits a second first, so that an error every
    /// process met (bad input) is printed once, by the first; one that only relays another
    /// process's error (`SagdError::Process`) prints nothing and leaves the abort to the
    /// processes that print, aborting itself only if none has within ten seconds.
    pub fn fail(&self, message: &str, relayed: bool) -> ! {
        if self.size <= 1 {
            say(&format!("error: {message}"));
            std::process::exit(1);
        }
        if !self.is_root() {
            let wait = if relayed { 10 } else { 1 };
            std::thread::sleep(std::time::Duration::from_secs(wait));
        }
        if self.is_root() || !relayed {
            say(&format!(
                "error (process {} of {}): {message}",
                self.rank, self.size
            ));
        }
        #[cfg(feature = "mpi")]
        engine::abort(1);
        #[cfg(not(feature = "mpi"))]
        std::process::exit(1);
    }
}

/// `line` on standard error in one write: the processes of a job share it, and a line written
/// piece by piece (as `eprintln!` writes its arguments, standard error being unbuffered) would
/// interleave with another process's.
pub fn say(line: &str) {
    use std::io::Write;
    let _ = std::io::stderr()
        .lock()
        .write_all(format!("{line}\n").as_bytes());
}

/// The number of processes a launcher (Open MPI's mpirun, MPICH's or Slurm's) started this one
/// among, from the environment it sets; `None` when not launched by one.
pub fn launched_size() -> Option<usize> {
    [
        "OMPI_COMM_WORLD_SIZE",
        "PMI_SIZE",
        "PMIX_SIZE",
        "SLURM_STEP_NUM_TASKS",
    ]
    .iter()
    .find_map(|v| std::env::var(v).ok()?.trim().parse().ok())
}

/// Starts this process's part in the run. With the `mpi` feature: initialises MPI and, over two
/// processes or more, installs the exchange in [`sagd::share`]. Without it: one process, and an
/// error if a launcher started several (each would run the whole job and write the same files).
pub fn start() -> Result<Processes, String> {
    #[cfg(feature = "mpi")]
    {
        engine::start()
    }
    #[cfg(not(feature = "mpi"))]
    {
        match launched_size() {
            Some(n) if n > 1 => Err(format!(
                "launched as one of {n} processes, but this sagd was built without MPI: every process would run the whole job; build it with `cargo build --release -p sagd-cli --features mpi` (needs an MPI such as Debian's libopenmpi-dev, and libclang-dev), or run one process"
            )),
            _ => Ok(Processes { rank: 0, size: 1 }),
        }
    }
}
