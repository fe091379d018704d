//! The MNIST files that ship with the project: their checksums, counts and the known first images;
//! and the reader's errors on files that do not belong together.

use std::io::{Read, Write};

use sagd_apps::mnist::{self, IdxError};
use sha2::{Digest, Sha256};

#[test]
fn the_shipped_files_are_mnist() {
    let dir = mnist::shipped_dir();
    for (name, sum) in [
        (
            "train-images-idx3-ubyte",
            "ba891046e6505d7aadcbbe25680a0738ad16aec93bde7f9b65e87a2fc25776db",
        ),
        (
            "train-labels-idx1-ubyte",
            "65a50cbbf4e906d70832878ad85ccda5333a97f0f4c3dd2ef09a8a9eef7101c5",
        ),
        (
            "t10k-images-idx3-ubyte",
            "0fa7898d509279e482958e8ce81c8e77db3f2f8254e26661ceb7762c4d494ce7",
        ),
        (
            "t10k-labels-idx1-ubyte",
            "ff7bcfd416de33731a308c3f266cc351222c34898ecbeaf847f06e48f7ec33f2",
        ),
    ] {
        let gz = std::fs::read(dir.join(format!("{name}.gz"))).unwrap();
        let mut raw = Vec::new();
        flate2::read::GzDecoder::new(&gz[..])
            .read_to_end(&mut raw)
            .unwrap();
        let hex: String = Sha256::digest(&raw)
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        assert_eq!(hex, sum, "{name}");
    }
    let m = mnist::load(&dir).unwrap();
    assert_eq!((m.train.len(), m.test.len()), (60000, 10000));
    let mut counts = [0usize; 10];
    m.train.labels.iter().for_each(|&l| counts[l as usize] += 1);
    assert_eq!(
        counts,
        [5923, 6742, 5958, 6131, 5842, 5421, 5918, 6265, 5851, 5949]
    );
    let mean = |px: &[u8]| px.iter().map(|&v| v as f64).sum::<f64>() / px.len() as f64;
    assert_eq!(m.train.labels[0], 5);
    assert!((mean(m.train.image(0)) - 35.108).abs() < 5e-4);
    assert_eq!(m.test.labels[0], 7);
    assert!((mean(m.test.image(0)) - 23.538).abs() < 5e-4);
}

/// Writes an IDX file of unsigned bytes.
fn write_idx(path: &std::path::Path, dims: &[u32], data: &[u8]) {
    let mut b = vec![0, 0, 8, dims.len() as u8];
    for d in dims {
        b.extend_from_slice(&d.to_be_bytes());
    }
    b.extend_from_slice(data);
    std::fs::File::create(path).unwrap().write_all(&b).unwrap();
}

#[test]
fn files_that_do_not_fit_together_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (px, n) = (mnist::PIXELS, 3);
    for prefix in ["train", "t10k"] {
        write_idx(
            &d.join(format!("{prefix}-images-idx3-ubyte")),
            &[n, 28, 28],
            &vec![0; n as usize * px],
        );
        write_idx(
            &d.join(format!("{prefix}-labels-idx1-ubyte")),
            &[n],
            &[1, 2, 3],
        );
    }
    let m = mnist::load(d).unwrap();
    assert_eq!(m.test.len(), 3);
    // Two labels for three images.
    write_idx(&d.join("t10k-labels-idx1-ubyte"), &[2], &[1, 2]);
    let e = mnist::load(d).unwrap_err();
    assert!(matches!(e, IdxError::Mismatch { .. }), "{e}");
    assert!(e.to_string().contains("3 images but 2 labels"), "{e}");
    // Images of another size.
    write_idx(&d.join("t10k-labels-idx1-ubyte"), &[3], &[1, 2, 3]);
    write_idx(
        &d.join("t10k-images-idx3-ubyte"),
        &[3, 32, 32],
        &vec![0; 3 * 32 * 32],
    );
    let e = mnist::load(d).unwrap_err();
    assert!(e.to_string().contains("32 × 32"), "{e}");
    // A missing folder names the file it looked for.
    let e = mnist::load(&d.join("nowhere")).unwrap_err();
    assert!(e.to_string().contains("train-images-idx3-ubyte"), "{e}");
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(10_000))]
    /// Any bytes, with the images' or labels' magic in front or not: the reader returns an
    /// array whose dimensions account for every byte, or an error; it never panics.
    #[test]
    fn any_bytes_are_read_whole_or_refused(
        rank in proptest::prop_oneof![proptest::strategy::Just(1u8), proptest::strategy::Just(3u8)],
        magic in proptest::bool::ANY,
        body in proptest::collection::vec(proptest::num::u8::ANY, 0..64),
    ) {
        let mut bytes = if magic { vec![0, 0, 0x08, rank] } else { Vec::new() };
        bytes.extend(&body);
        if let Ok(a) = mnist::idx::parse(&bytes, rank, std::path::Path::new("random.idx")) {
            proptest::prop_assert_eq!(a.dims.len(), rank as usize);
            proptest::prop_assert_eq!(a.dims.iter().product::<usize>(), a.data.len());
        }
    }
}
