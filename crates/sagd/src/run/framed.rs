//! The files the runner writes and reads back: frames (magic, format, body, FNV-1a checksum)
//! written through a per-process temporary file and a rename, read back whole or refused; and
//! the encoding of the records inside them.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::error::{Result, SagdError};

pub(super) const MAGIC: &[u8; 8] = b"SAGDCKPT";
pub(super) const FORMAT: u32 = 3;

/// FNV-1a, 64 bits: the checksum of checkpoints and the fingerprint of data.
#[doc(hidden)]
pub fn fnv1a(h: u64, bytes: impl IntoIterator<Item = u8>) -> u64 {
    bytes
        .into_iter()
        .fold(h, |h, b| (h ^ b as u64).wrapping_mul(0x0100_0000_01b3))
}

/// FNV-1a's starting value.
#[doc(hidden)]
pub const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;

/// Writes magic, format, `body` and its checksum to a per-process temporary file, then renames it
/// onto `path`: the one checksummed format of every file sagd reads back (checkpoints, caches).
/// In a run split over processes one process writes each file ([`crate::share::writes_here`]).
#[doc(hidden)]
pub fn write_framed(path: &Path, body: &[u8]) -> Result<()> {
    if crate::share::writes_here() {
        write_file(path, body)?;
    }
    // In a split run no process goes on before the file is whole: one that then stops (an
    // interruption every process meets) would otherwise end the job while it is written.
    crate::share::barrier()
}

pub(super) fn write_file(path: &Path, body: &[u8]) -> Result<()> {
    let io = |source| SagdError::Io {
        action: "writing checkpoint",
        path: path.display().to_string(),
        source,
    };
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(format!(".tmp-{}", std::process::id()));
    let tmp = PathBuf::from(tmp);
    {
        let mut f = fs::File::create(&tmp).map_err(io)?;
        f.write_all(MAGIC).map_err(io)?;
        f.write_all(&FORMAT.to_le_bytes()).map_err(io)?;
        f.write_all(body).map_err(io)?;
        f.write_all(&fnv1a(FNV_OFFSET, body.iter().copied()).to_le_bytes())
            .map_err(io)?;
        f.sync_all().map_err(io)?;
    }
    fs::rename(&tmp, path).map_err(io)?;
    remove_temporaries(path);
    Ok(())
}

/// Removes the temporary files (`NAME.tmp-PID`) that runs killed between writing and renaming
/// left beside `path`. A live process's temporary is left alone: the processes of a run split
/// over MPI may write the same file at once.
#[doc(hidden)]
pub fn remove_temporaries(path: &Path) {
    let (Some(dir), Some(name)) = (path.parent(), path.file_name()) else {
        return;
    };
    let prefix = format!("{}.tmp-", name.to_string_lossy());
    let dir = if dir.as_os_str().is_empty() {
        Path::new(".")
    } else {
        dir
    };
    if let Ok(entries) = fs::read_dir(dir) {
        for e in entries.flatten() {
            let file = e.file_name().to_string_lossy().into_owned();
            let Some(pid) = file.strip_prefix(&prefix) else {
                continue;
            };
            let live = pid
                .parse::<u32>()
                .is_ok_and(|pid| pid != std::process::id() && process_alive(pid));
            if !live {
                fs::remove_file(e.path()).ok();
            }
        }
    }
}

/// Whether process `pid` is alive (Linux: its /proc entry exists; elsewhere it is assumed to be).
#[doc(hidden)]
pub fn process_alive(pid: u32) -> bool {
    if cfg!(target_os = "linux") {
        Path::new(&format!("/proc/{pid}")).exists()
    } else {
        true
    }
}

/// Reads a file written by [`write_framed`] and checks its header and checksum: any change to
/// the file (every single-bit flip among them) is an error.
#[doc(hidden)]
pub fn read_framed(path: &Path) -> Result<Vec<u8>> {
    let p = path.display().to_string();
    let bytes = fs::read(path).map_err(|source| SagdError::Io {
        action: "reading checkpoint",
        path: p.clone(),
        source,
    })?;
    let bad = |problem: String| SagdError::Checkpoint {
        path: p.clone(),
        problem,
    };
    if bytes.len() < 20 || &bytes[..8] != MAGIC {
        return Err(bad(
            "not a sagd checkpoint (wrong header): give the file that the run wrote".into(),
        ));
    }
    let format = u32::from_le_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]);
    if format != FORMAT {
        return Err(bad(format!(
            "format {format}, this version reads {FORMAT}: start afresh"
        )));
    }
    let (body, sum) = bytes[12..].split_at(bytes.len() - 20);
    let mut want = [0u8; 8];
    want.copy_from_slice(sum);
    if fnv1a(FNV_OFFSET, body.iter().copied()) != u64::from_le_bytes(want) {
        return Err(bad(
            "damaged (checksum mismatch): delete it and start afresh".into(),
        ));
    }
    Ok(body.to_vec())
}

/// Encodes an observer's or solver's record for a checkpoint.
#[doc(hidden)]
pub fn encode<V: Serialize>(v: &V) -> Result<Vec<u8>> {
    postcard::to_allocvec(v).map_err(|e| SagdError::Checkpoint {
        path: String::new(),
        problem: format!("a record cannot be encoded ({e})"),
    })
}

/// Decodes what [`encode`] wrote.
#[doc(hidden)]
pub fn decode<V: DeserializeOwned>(bytes: &[u8]) -> Result<V> {
    postcard::from_bytes(bytes).map_err(|e| SagdError::Checkpoint {
        path: String::new(),
        problem: format!("a record in it cannot be read ({e}): start afresh"),
    })
}
