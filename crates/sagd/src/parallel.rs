//! How parallel passes are cut: into pieces fixed by the shapes, never by the threads, and summed
//! in piece order, so that any number of threads gives the same bits.

use rayon::prelude::*;

use crate::real::Real;

/// Independent pieces of work a parallel pass aims to offer per synchronisation: four for each
/// of 16 threads, so that uneven pieces still keep a big machine busy.
pub const PIECES: usize = 64;

/// Checks a requested thread count: at least 1, and at most 4 per core (64 on small machines):
/// more only wait on each other, and spawning 100 000 of them hangs. Results never depend on it.
pub fn check_threads(threads: usize) -> crate::error::Result<usize> {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let most = (4 * cores).max(64);
    if threads == 0 || threads > most {
        return Err(crate::error::SagdError::InvalidSetting {
            name: "threads",
            value: threads.to_string(),
            fix: format!(
                "use at least 1 and at most {most} (this machine has {cores} cores; results do not depend on the thread count)"
            ),
        });
    }
    Ok(threads)
}

/// Rows per piece when `n` rows are cut into about [`PIECES`] pieces or more: ⌊n / PIECES⌋, but
/// at least `min_rows` (below which a piece's products run inefficiently: wide layers) and at
/// most `max_rows` (what keeps one piece's buffers in a core's cache), and at least 1.
pub fn piece_rows(n: usize, min_rows: usize, max_rows: usize) -> usize {
    (n / PIECES).max(min_rows).min(max_rows).max(1)
}

/// Rows per piece of `rows` chains (or points) of dimension `d`, given the rows a pass would
/// take per piece for cheap rows: that, below 16 coordinates; beyond, few enough rows for eight
/// pieces when there are rows for them, since one long latent row is work enough for a task
/// (a single data point with several chains then keeps several cores busy).
pub fn rows_for_dim(rows: usize, d: usize, cheap: usize) -> usize {
    if d < 16 {
        cheap
    } else {
        cheap.min(rows.div_ceil(8)).max(1)
    }
}

/// Rows per parallel piece of the passes over chains or points of dimension `d` (cheap per-row
/// work: large pieces), fixed by the shapes; all rows in one piece when the model's calls are
/// costly.
pub(crate) fn rows_per_piece(rows: usize, d: usize, costly: bool) -> usize {
    if costly {
        rows.max(1)
    } else {
        rows_for_dim(rows, d, piece_rows(rows, 64, 4096))
    }
}

/// The fewest elements of the output per task of [`add_parts`] (long outputs are cut into about
/// 4 × [`PIECES`] tasks).
const SUM_CHUNK: usize = 256;

/// `out[j] += Σ_b parts[b][j]`, the parts added in order, each addition in f64 rounded once to
/// the output's type (for f32 that is f32 addition), the elements split among threads: the same
/// bits for any number of threads. Every part must be as long as `out`.
pub fn add_parts<T: Real, O: Real, P: AsRef<[T]> + Sync>(parts: &[P], out: &mut [O]) {
    debug_assert!(parts.iter().all(|p| p.as_ref().len() == out.len()));
    let chunk = SUM_CHUNK.max(out.len().div_ceil(4 * PIECES));
    out.par_chunks_mut(chunk).enumerate().for_each(|(c, o)| {
        let j0 = c * chunk;
        for p in parts {
            let p = &p.as_ref()[j0..j0 + o.len()];
            for (a, b) in o.iter_mut().zip(p) {
                *a = O::of(a.f64() + b.f64());
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thread_counts_are_bounded() {
        assert_eq!(check_threads(3).unwrap(), 3);
        assert!(check_threads(0).is_err());
        let e = check_threads(100_000).unwrap_err().to_string();
        assert!(
            e.contains("`threads` = 100000") && e.contains("cores"),
            "{e}"
        );
    }

    #[test]
    fn pieces_are_fixed_by_the_rows() {
        assert_eq!(piece_rows(1000, 8, 512), 15);
        assert_eq!(1000usize.div_ceil(piece_rows(1000, 8, 512)), 67);
        assert_eq!(piece_rows(500, 32, 128), 32);
        assert_eq!(piece_rows(500, 1, 2), 2);
        assert_eq!(piece_rows(10, 1, 512), 1);
        assert_eq!(piece_rows(100_000, 8, 128), 128);
        assert_eq!(piece_rows(0, 0, 0), 1);
    }

    #[test]
    fn parts_add_in_order_for_any_number_of_threads() {
        // Values whose f64 sum depends on the order: the result must equal the sequential sum.
        let parts: Vec<Vec<f32>> = (0..70)
            .map(|b| {
                (0..1000)
                    .map(|j| {
                        ((b * 7919 + j * 104_729) % 1000) as f32 * 1e-3 - 0.5 + 1e7 * (b % 2) as f32
                    })
                    .collect()
            })
            .collect();
        let mut seq = vec![0.25f64; 1000];
        for p in &parts {
            for (a, b) in seq.iter_mut().zip(p) {
                *a += *b as f64;
            }
        }
        for threads in [1, 3, 16] {
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .build()
                .unwrap();
            let mut out = vec![0.25f64; 1000];
            pool.install(|| add_parts(&parts, &mut out));
            assert_eq!(out, seq, "{threads} threads");
        }
    }
}
