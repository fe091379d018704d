//! The IDX format of MNIST (and Fashion-MNIST): a big-endian header — two zero bytes, a type byte
//! (0x08: unsigned bytes), the number of dimensions, then each dimension as a u32 — followed by the
//! data. Files may be gzipped (recognised by their first two bytes, whatever their name).

use std::io::Read;
use std::path::{Path, PathBuf};

use thiserror::Error;

/// What is wrong with an IDX file.
#[derive(Debug, Error)]
pub enum IdxError {
    /// The file could not be opened or read (or its gzip stream is damaged).
    #[error("reading {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The header is not that of an unsigned-byte IDX file of the expected rank.
    #[error("{path} is not an IDX file of {expected}: its header starts {found:02x?} (expected {want:02x?}); pass the images file where images are asked for, and the labels file for labels")]
    Magic {
        /// The file.
        path: PathBuf,
        /// What it should hold.
        expected: &'static str,
        /// Its first four bytes.
        found: Vec<u8>,
        /// The four bytes expected.
        want: [u8; 4],
    },
    /// The file ends before the data its header announces.
    #[error("{path} is truncated: its header announces {expected} bytes of data, the file holds {found}; download it again")]
    Truncated {
        /// The file.
        path: PathBuf,
        /// Bytes of data announced.
        expected: usize,
        /// Bytes of data present.
        found: usize,
    },
    /// The file holds more than its header announces.
    #[error("{path} has {extra} bytes after the data its header announces: it is not an IDX file, or it is damaged")]
    Trailing {
        /// The file.
        path: PathBuf,
        /// Bytes too many.
        extra: usize,
    },
    /// Sizes that do not fit together: images and labels of different counts, or images of
    /// another shape than asked.
    #[error("{what}: {detail}")]
    Mismatch {
        /// Which files.
        what: String,
        /// What differs, and the fix.
        detail: String,
    },
}

/// An IDX array of unsigned bytes: its dimensions and its data, row-major.
#[derive(Clone, Debug, PartialEq)]
pub struct IdxArray {
    /// The dimensions (for MNIST images: count, rows, columns).
    pub dims: Vec<usize>,
    /// The values.
    pub data: Vec<u8>,
}

/// Reads an unsigned-byte IDX file of rank `rank` (3 for images, 1 for labels), gzipped or not.
pub fn read(path: &Path, rank: u8) -> Result<IdxArray, IdxError> {
    let read_err = |source| IdxError::Read {
        path: path.to_path_buf(),
        source,
    };
    let raw = std::fs::read(path).map_err(read_err)?;
    let bytes = if raw.starts_with(&[0x1f, 0x8b]) {
        let mut out = Vec::new();
        flate2::read::GzDecoder::new(&raw[..])
            .read_to_end(&mut out)
            .map_err(read_err)?;
        out
    } else {
        raw
    };
    parse(&bytes, rank, path)
}

/// Parses the bytes of an IDX file (see [`read`]); `path` names it in errors.
pub fn parse(bytes: &[u8], rank: u8, path: &Path) -> Result<IdxArray, IdxError> {
    let want = [0, 0, 0x08, rank];
    let expected = if rank == 1 {
        "labels (unsigned bytes, 1 dimension)"
    } else {
        "images (unsigned bytes, 3 dimensions)"
    };
    if bytes.len() < 4 || bytes[..4] != want {
        return Err(IdxError::Magic {
            path: path.to_path_buf(),
            expected,
            found: bytes[..bytes.len().min(4)].to_vec(),
            want,
        });
    }
    let header = 4 + 4 * rank as usize;
    if bytes.len() < header {
        return Err(IdxError::Truncated {
            path: path.to_path_buf(),
            expected: header,
            found: bytes.len(),
        });
    }
    let dims: Vec<usize> = bytes[4..header]
        .chunks_exact(4)
        .map(|c| u32::from_be_bytes([c[0], c[1], c[2], c[3]]) as usize)
        .collect();
    let expected_len = dims
        .iter()
        .try_fold(1usize, |a, &d| a.checked_mul(d))
        .unwrap_or(usize::MAX);
    let found = bytes.len() - header;
    if found < expected_len {
        return Err(IdxError::Truncated {
            path: path.to_path_buf(),
            expected: expected_len,
            found,
        });
    }
    if found > expected_len {
        return Err(IdxError::Trailing {
            path: path.to_path_buf(),
            extra: found - expected_len,
        });
    }
    Ok(IdxArray {
        dims,
        data: bytes[header..].to_vec(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(rank: u8, dims: &[u32], data: &[u8]) -> Vec<u8> {
        let mut b = vec![0, 0, 8, rank];
        for d in dims {
            b.extend_from_slice(&d.to_be_bytes());
        }
        b.extend_from_slice(data);
        b
    }

    #[test]
    fn a_good_file_reads_back() {
        let p = Path::new("x");
        let a = parse(
            &file(3, &[2, 2, 3], &[1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12]),
            3,
            p,
        )
        .unwrap();
        assert_eq!(a.dims, vec![2, 2, 3]);
        assert_eq!(a.data[11], 12);
        let l = parse(&file(1, &[3], &[7, 2, 1]), 1, p).unwrap();
        assert_eq!(l.data, vec![7, 2, 1]);
    }

    #[test]
    fn bad_files_say_what_is_wrong() {
        let p = Path::new("train-images");
        // Labels where images are asked for.
        let e = parse(&file(1, &[3], &[7, 2, 1]), 3, p).unwrap_err();
        assert!(matches!(e, IdxError::Magic { .. }), "{e}");
        assert!(e.to_string().contains("train-images"), "{e}");
        // A float file.
        let mut f = file(3, &[1, 1, 1], &[0]);
        f[2] = 0x0d;
        assert!(matches!(parse(&f, 3, p), Err(IdxError::Magic { .. })));
        // Truncated data, and a truncated header.
        let e = parse(&file(3, &[2, 2, 2], &[0; 7]), 3, p).unwrap_err();
        assert!(
            matches!(
                e,
                IdxError::Truncated {
                    expected: 8,
                    found: 7,
                    ..
                }
            ),
            "{e}"
        );
        assert!(matches!(
            parse(&file(3, &[2], &[]), 3, p),
            Err(IdxError::Truncated { .. })
        ));
        // Too many bytes.
        assert!(matches!(
            parse(&file(1, &[2], &[1, 2, 3]), 1, p),
            Err(IdxError::Trailing { extra: 1, .. })
        ));
        // Nothing at all.
        assert!(matches!(parse(&[], 1, p), Err(IdxError::Magic { .. })));
    }

    #[test]
    fn gzipped_and_plain_files_read_the_same() {
        use std::io::Write;
        let dir = tempfile::tempdir().unwrap();
        let bytes = file(3, &[1, 2, 2], &[9, 8, 7, 6]);
        let plain = dir.path().join("plain");
        std::fs::write(&plain, &bytes).unwrap();
        let gz = dir.path().join("data.gz");
        let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        enc.write_all(&bytes).unwrap();
        std::fs::write(&gz, enc.finish().unwrap()).unwrap();
        assert_eq!(read(&plain, 3).unwrap(), read(&gz, 3).unwrap());
        // A damaged gzip stream and a missing file are read errors naming the file.
        let mut damaged = std::fs::read(&gz).unwrap();
        damaged.truncate(damaged.len() / 2);
        std::fs::write(&gz, damaged).unwrap();
        let e = read(&gz, 3).unwrap_err();
        assert!(matches!(e, IdxError::Read { .. }), "{e}");
        let e = read(&dir.path().join("missing"), 3).unwrap_err();
        assert!(e.to_string().contains("missing"), "{e}");
    }
}
