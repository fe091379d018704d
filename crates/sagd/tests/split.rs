//! Runs split over processes (`sagd::share`), the processes simulated by threads of this one:
//! automated EM split over 2 and 3 processes gives the same bits as one process, every process
//! ends with the whole result, and a checkpoint written by 2 processes resumes on 3 to the
//! uninterrupted run's result.

use std::path::Path;

mod common;
use common::glmm::simulate;
use sagd::em::{AutomatedEm, EmEvent, EmSettings, EmTrace};
use sagd::glmm::{Family, Glmm};
use sagd::run::Control;
use sagd::share::threads_as_processes;

fn settings() -> EmSettings {
    EmSettings {
        max_msteps: 4,
        ..EmSettings::default()
    }
}

/// EM on `processes` threads as processes, each from the checkpoint at `resume` if given,
/// checkpointing into `ckpt` and stopping after `stop_after` updates if given; every process's
/// trace.
fn fit(
    model: &Glmm,
    processes: usize,
    ckpt: Option<&Path>,
    resume: bool,
    stop_after: Option<usize>,
) -> Vec<EmTrace> {
    let start = model.start();
    let run = || {
        let mut em = AutomatedEm::new(model, settings());
        em.checkpoint = ckpt.map(|p| (p.to_path_buf(), 25));
        let mut updates = 0;
        em.run(&start, 7, ckpt.filter(|_| resume), &mut |e| {
            if let EmEvent::Update { .. } = e {
                updates += 1;
            }
            if stop_after.is_some_and(|s| updates >= s) {
                Control::Stop
            } else {
                Control::Continue
            }
        })
        .unwrap()
    };
    if processes == 1 {
        return vec![run()];
    }
    threads_as_processes(processes, run)
}

#[test]
fn em_split_over_processes_gives_the_same_bits() {
    let model = simulate(Family::Poisson, 5);
    let whole = fit(&model, 1, None, false, None).remove(0);
    assert!(whole.polished.is_some() && whole.msteps.len() == 4);
    for processes in [2, 3] {
        for (rank, trace) in fit(&model, processes, None, false, None).iter().enumerate() {
            assert_eq!(trace, &whole, "{processes} processes, rank {rank}");
        }
    }
}

#[test]
fn a_checkpoint_of_two_processes_resumes_on_three() {
    let model = simulate(Family::Poisson, 5);
    let dir = tempfile::tempdir().unwrap();
    let ckpt = dir.path().join("em.ckpt");
    let whole = fit(&model, 1, None, false, None).remove(0);
    let stopped = fit(&model, 2, Some(&ckpt), false, Some(130));
    assert!(stopped.iter().all(|t| t.interrupted));
    // One checkpoint, written by the first process, and no temporaries of the others.
    let files: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
    assert_eq!(files.len(), 1, "{files:?}");
    for trace in fit(&model, 3, Some(&ckpt), true, None) {
        assert_eq!(trace, whole);
    }
}
