//! Typed errors. Every message says what was wrong and what to change.

use thiserror::Error;

/// An error from a model's log density or gradient.
#[derive(Debug, Clone, Error, PartialEq, serde::Serialize, serde::Deserialize)]
#[non_exhaustive]
pub enum LogpError {
    /// The value or gradient is not finite at this point. The sampler treats it as a divergence of
    /// the chains concerned and recovers them.
    #[error("the log density or its gradient is not finite")]
    NonFinite,
    /// Anything else: the run stops with this message.
    #[error("{0}")]
    Fatal(String),
}

impl LogpError {
    /// Whether the sampler may recover from this error by resetting the chains concerned.
    pub fn is_recoverable(&self) -> bool {
        matches!(self, LogpError::NonFinite)
    }
}

/// The library's error type. Its `Debug` form is its explanation (with its cause's), so that a
/// `main` returning `Result<_, Box<dyn Error>>` prints what went wrong and what to change.
#[derive(Error)]
#[non_exhaustive]
pub enum SagdError {
    /// A setting is out of its valid range.
    #[error("invalid setting `{name}` = {value}: {fix}")]
    InvalidSetting {
        /// The setting's name.
        name: &'static str,
        /// The offending value, as text.
        value: String,
        /// What to change.
        fix: String,
    },
    /// Buffers or parameters of the wrong size.
    #[error("size mismatch for {what}: expected {expected}, got {got}")]
    Dimension {
        /// What has the wrong size.
        what: &'static str,
        /// The expected length.
        expected: usize,
        /// The length given.
        got: usize,
    },
    /// The model failed in a way the sampler cannot recover from.
    #[error("model error: {0}")]
    Model(LogpError),
    /// Every chain diverged at the start, so there is no finite state to recover to.
    #[error("the target is not finite at the initial position of chain {chain}: start the chains where the log density and its gradient are finite")]
    NonFiniteStart {
        /// The first chain at fault.
        chain: usize,
    },
    /// The gradient estimate or the parameters became non-finite.
    #[error("the parameter update at iteration {iteration} is not finite: the likely causes are extreme values in the data, a learning rate too large, or a Langevin step size too large")]
    NonFiniteUpdate {
        /// The 1-based iteration.
        iteration: usize,
    },
    /// Reading or writing a file.
    #[error("{action} {path}: {source}")]
    Io {
        /// What was being done ("writing checkpoint", ...).
        action: &'static str,
        /// The file.
        path: String,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// A checkpoint that cannot be used.
    #[error("checkpoint {path}: {problem}")]
    Checkpoint {
        /// The file.
        path: String,
        /// What is wrong with it, and what to do.
        problem: String,
    },
    /// The run was stopped before it finished (on request); its checkpoints can resume it.
    #[error("interrupted after {updates} updates of {phase}; checkpoints are in {dir}: rerun the same command with --resume")]
    Interrupted {
        /// The phase that stopped first.
        phase: String,
        /// Updates of that phase done.
        updates: usize,
        /// The checkpoint folder.
        dir: String,
    },
    /// An error inside a named part of a larger run (a replication, a method). Its message
    /// carries the cause's, so it is not repeated as a source.
    #[error("{what}: {cause}")]
    Context {
        /// The part.
        what: String,
        /// What went wrong there.
        cause: Box<SagdError>,
    },
    /// A cache file (saved intermediate results) that cannot be read or written.
    #[error("cache file {path}: {problem}")]
    Cache {
        /// The file.
        path: String,
        /// What is wrong with it, and what to do.
        problem: String,
    },
    /// A compute device (a GPU) that cannot be used or failed.
    #[error("device: {0}")]
    Device(String),
    /// An error in another process of a run split over processes (`crate::share`).
    #[error("process {rank}: {message}")]
    Process {
        /// The process where it happened.
        rank: usize,
        /// What happened there.
        message: String,
    },
}

impl std::fmt::Debug for SagdError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Every message already carries its cause's.
        write!(f, "{self}")
    }
}

/// The library's result type.
pub type Result<T, E = SagdError> = std::result::Result<T, E>;

/// The error for input `name` with `value`, and how to fix it.
pub(crate) fn invalid(name: &'static str, value: String, fix: &str) -> SagdError {
    SagdError::InvalidSetting {
        name,
        value,
        fix: fix.into(),
    }
}

/// Checks that `value` is finite and positive.
#[doc(hidden)]
pub fn positive(name: &'static str, value: f64, fix: &str) -> Result<()> {
    if value.is_finite() && value > 0.0 {
        Ok(())
    } else {
        Err(SagdError::InvalidSetting {
            name,
            value: value.to_string(),
            fix: fix.to_string(),
        })
    }
}

/// Checks a buffer length, with an error that names the buffer.
#[doc(hidden)]
pub fn check_len(what: &'static str, expected: usize, got: usize) -> Result<()> {
    if expected == got {
        Ok(())
    } else {
        Err(SagdError::Dimension {
            what,
            expected,
            got,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_prints_the_explanation() {
        // What `main() -> Result<(), Box<dyn Error>>` shows when it returns an error.
        let e: Box<dyn std::error::Error> = Box::new(SagdError::NonFiniteUpdate { iteration: 4 });
        assert_eq!(format!("{e:?}"), e.to_string());
        let nested = SagdError::Context {
            what: "replication 3".into(),
            cause: Box::new(SagdError::Device("no GPU".into())),
        };
        assert!(format!("{nested:?}").contains("no GPU"), "{nested:?}");
        assert!(!format!("{nested:?}").contains("Context {"));
    }
}
