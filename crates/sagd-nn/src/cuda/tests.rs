//! What can be checked of the backend without a GPU: where processes' GPUs fall, and the kernels
//! against the sources that launch them (names, arguments, NVRTC's compilation).

use super::{compile_kernels, process_ordinal, KERNELS};
use std::path::Path;

#[test]
fn processes_on_a_machine_take_its_gpus_in_turn() {
    // Four processes, four GPUs, from GPU 0: one each.
    assert_eq!(
        (0..4).map(|r| process_ordinal(0, r, 4)).collect::<Vec<_>>(),
        [0, 1, 2, 3]
    );
    // More processes than GPUs share them in turn; starting at GPU 1 shifts the turn.
    assert_eq!(
        (0..5).map(|r| process_ordinal(1, r, 2)).collect::<Vec<_>>(),
        [1, 0, 1, 0, 1]
    );
    // Each process shown only its own GPU (e.g. by Slurm): GPU 0 for all.
    assert!((0..8).all(|r| process_ordinal(0, r, 1) == 0));
    // The first process (and one run alone) opens the GPU asked for.
    assert_eq!(process_ordinal(3, 0, 8), 3);
}

/// The names after each `marker` in `text`, up to the first character that cannot be in one.
fn names_after<'a>(text: &'a str, marker: &str) -> Vec<&'a str> {
    text.match_indices(marker)
        .map(|(i, _)| {
            let rest = &text[i + marker.len()..];
            let end = rest
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .unwrap_or(rest.len());
            &rest[..end]
        })
        .collect()
}

/// The `.rs` files under `dir`, recursively.
fn sources(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("the workspace's sources are readable") {
        let path = entry.expect("a directory entry").path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The text from the opening parenthesis at `open` to its match (both included).
fn parenthesised(text: &str, open: usize) -> &str {
    let mut depth = 0;
    for (i, c) in text[open..].char_indices() {
        depth += match c {
            '(' => 1,
            ')' => -1,
            _ => 0,
        };
        if depth == 0 {
            return &text[open..=open + i];
        }
    }
    panic!("unbalanced parentheses after {}", &text[open..]);
}

/// Each kernel of `kernels.cu` and how many parameters it takes.
fn parameter_counts(src: &str) -> std::collections::HashMap<&str, usize> {
    let marker = "__global__ void ";
    src.match_indices(marker)
        .map(|(i, _)| {
            let rest = &src[i + marker.len()..];
            let open = rest.find('(').expect("a kernel's parameter list");
            let params = parenthesised(rest, open);
            let count = match params.trim_matches(['(', ')']).trim() {
                "" => 0,
                p => p.matches(',').count() + 1,
            };
            (rest[..open].trim(), count)
        })
        .collect()
}

/// Every launch in `text` (the backend's `launch!`): the kernels it may name (the quoted names
/// before its `;`) and the number of arguments after it.
fn launches(text: &str) -> Vec<(Vec<String>, usize)> {
    let code: String = text
        .lines()
        .map(|l| l.split("//").next().unwrap_or(""))
        .collect::<Vec<_>>()
        .join("\n");
    // Split so that this test's own source holds no launch.
    let marker = concat!("launch", "!(");
    code.match_indices(marker)
        .map(|(i, _)| {
            let call = parenthesised(&code, i + marker.len() - 1);
            let inner = &call[1..call.len() - 1];
            // The top-level separators: the `;` after the launch shape, the commas between
            // arguments.
            let mut depth = 0;
            let (mut semi, mut commas) = (None, 0);
            for (k, c) in inner.char_indices() {
                match c {
                    '(' | '[' | '{' => depth += 1,
                    ')' | ']' | '}' => depth -= 1,
                    ';' if depth == 0 => semi = Some(k),
                    ',' if depth == 0 && semi.is_some() => commas += 1,
                    _ => {}
                }
            }
            let semi = semi.expect("a launch's shape is followed by `;` and its arguments");
            let names = inner[..semi]
                .split('"')
                .skip(1)
                .step_by(2)
                .map(String::from)
                .collect();
            let args = if inner.trim_end().ends_with(',') {
                commas
            } else {
                commas + 1
            };
            (names, args)
        })
        .collect()
}

/// Kernels are looked up by name when a GPU opens and when they launch, and a launch with an
/// argument too many or too few reads garbage: either would fail only on a GPU. Checked here
/// from the sources: the kernels `kernels.cu` defines are those the backend loads, and every
/// launch in the workspace names them and passes as many arguments as its kernel takes.
#[test]
fn every_launch_passes_its_kernels_parameters() {
    let params = parameter_counts(include_str!("kernels.cu"));
    let mut defined: Vec<&str> = params.keys().copied().collect();
    defined.sort_unstable();
    let mut listed = KERNELS.to_vec();
    listed.sort_unstable();
    assert_eq!(
        listed, defined,
        "KERNELS against kernels.cu's __global__ functions"
    );
    let crates = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut files = Vec::new();
    sources(&crates, &mut files);
    let mut checked = std::collections::BTreeSet::new();
    for f in files {
        let text = std::fs::read_to_string(&f).expect("a source file is readable");
        // Every launch goes through the backend's one macro, so that this test sees it.
        assert!(
            f.ends_with("cuda/mod.rs") || !text.contains(concat!("launch_", "builder(")),
            "{}: launch kernels with `launch!`",
            f.display()
        );
        for (names, args) in launches(&text) {
            assert!(
                !names.is_empty(),
                "{}: a launch names no kernel",
                f.display()
            );
            for name in names {
                let want = params.get(name.as_str()).copied();
                assert_eq!(
                    Some(args),
                    want,
                    "{}: kernel {name:?} launched with {args} arguments",
                    f.display()
                );
                checked.insert(name);
            }
        }
    }
    assert_eq!(
        checked.len(),
        KERNELS.len(),
        "kernels launched: {checked:?}"
    );
}

/// The kernels compile: NVRTC runs without a GPU, so a kernel that would not compile fails
/// here rather than when a GPU opens. Where NVRTC's library is absent the test says so and
/// passes, unless `SAGD_REQUIRE_NVRTC=1` (CI installs the library from PyPI and sets it).
#[test]
fn kernels_compile_with_nvrtc() {
    // SAFETY: only tries to open the library with `dlopen` and closes it again.
    if !unsafe { cudarc::nvrtc::sys::is_culib_present() } {
        assert!(
            !std::env::var("SAGD_REQUIRE_NVRTC").is_ok_and(|v| v == "1"),
            "SAGD_REQUIRE_NVRTC=1 but no libnvrtc.so was found: point LD_LIBRARY_PATH at \
             the folder of the nvidia-cuda-nvrtc wheel's library"
        );
        eprintln!("kernels_compile_with_nvrtc: no libnvrtc.so here, the kernels not compiled");
        return;
    }
    let ptx = compile_kernels().unwrap_or_else(|log| panic!("kernels.cu: {log}"));
    let mut entries = names_after(&ptx, ".entry ");
    entries.sort_unstable();
    let mut listed = KERNELS.to_vec();
    listed.sort_unstable();
    assert_eq!(entries, listed, "the PTX's entry points against KERNELS");
}
