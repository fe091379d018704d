//! The same bits on every instruction set: two M-steps of automated EM on a Poisson GLMM (the
//! Langevin blocks, the normals, the Newton M-steps), fingerprinted and checked against one
//! constant. CI runs it on each path the machine has (`SAGD_CPU_CAPABILITY=avx2`, `=portable`,
//! and the widest by default); see `crates/sagd-nn/tests/paths.rs` for the engine's.

use sagd::em::{AutomatedEm, EmSettings};
use sagd::glmm::{Family, Glmm};
use sagd::run::Control;

#[test]
fn every_instruction_set_gives_the_same_bits() {
    // 40 groups of 5 counts with a random intercept and slope, from a fixed recipe.
    let (groups, per) = (40, 5);
    let n = groups * per;
    let x: Vec<f64> = (0..n)
        .map(|i| ((i * 37 % 23) as f64 / 11.0) - 1.0)
        .collect();
    let y: Vec<f64> = (0..n).map(|i| ((i * 7 + i / per * 3) % 6) as f64).collect();
    let design: Vec<f64> = x.iter().flat_map(|&v| [1.0, v]).collect();
    let group: Vec<usize> = (0..n).map(|i| i / per).collect();
    let model = Glmm::new(Family::Poisson, y, design.clone(), &group, design, None).unwrap();
    let settings = EmSettings {
        max_msteps: 2,
        stopping: None,
        polish: None,
        ..EmSettings::default()
    };
    let trace = AutomatedEm::new(&model, settings)
        .run(&model.start(), 3, None, &mut |_| Control::Continue)
        .unwrap();
    let h = sagd::run::fnv1a(
        sagd::run::FNV_OFFSET,
        trace
            .path
            .iter()
            .flatten()
            .flat_map(|v| v.to_bits().to_le_bytes()),
    );
    let path = sagd::cpu::capability();
    println!("{}: {h:#018x}", path.name());
    assert_eq!(
        h,
        0x1cd0_eaad_3529_310b,
        "the fingerprint on the {} path differs from the one every path gave",
        path.name()
    );
}
