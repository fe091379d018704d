//! Progress of `sagd reproduce`: on a terminal, a bar per experiment and an overall bar whose ETA
//! weighs each experiment by its expected duration; elsewhere (a pipe, CI, a log file), a plain
//! line every ten seconds.

use std::io::IsTerminal;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};

use super::plan::Experiment;

/// Seconds as `1 h 02 min`, `3 min 05 s` or `12 s`.
pub fn duration(s: f64) -> String {
    let s = s.max(0.0).round() as u64;
    match s {
        0..=59 => format!("{s} s"),
        60..=3599 => format!("{} min {:02} s", s / 60, s % 60),
        _ => format!("{} h {:02} min", s / 3600, (s % 3600) / 60),
    }
}

struct Shared {
    bars: Vec<Option<ProgressBar>>,
    done: Vec<bool>,
    /// Where each bar stood when its length was first known: a resumed phase starts part-way,
    /// and only the work from there on is this run's.
    offsets: Vec<Option<u64>>,
}

/// The progress display of one reproduction.
pub struct Ticker {
    multi: MultiProgress,
    overall: ProgressBar,
    names: Vec<String>,
    weights: Vec<f64>,
    shared: Arc<Mutex<Shared>>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
    quiet: bool,
    terminal: bool,
}

const STYLE: &str = "{msg:28} [{bar:30}] {percent:>3}% {elapsed:>4} eta {eta:>4}";

impl Ticker {
    /// A display for `plan` (nothing at all with `quiet`); `estimates[i]`: the expected seconds of
    /// experiment i in this run (0 when an earlier run finished it).
    pub fn new(quiet: bool, plan: &[Experiment], estimates: &[f64]) -> Self {
        let terminal = std::io::stderr().is_terminal();
        let target = if quiet || !terminal {
            ProgressDrawTarget::hidden()
        } else {
            ProgressDrawTarget::stderr()
        };
        let multi = MultiProgress::with_draw_target(target);
        // This run's work only: what an earlier run finished weighs nothing.
        let weights: Vec<f64> = estimates
            .iter()
            .map(|&e| if e > 0.0 { e.max(1.0) } else { 0.0 })
            .collect();
        let overall = multi.add(ProgressBar::new(1000));
        overall.set_style(
            ProgressStyle::with_template(STYLE).unwrap_or_else(|_| ProgressStyle::default_bar()),
        );
        overall.set_message("overall");
        let shared = Arc::new(Mutex::new(Shared {
            bars: vec![None; plan.len()],
            done: vec![false; plan.len()],
            offsets: vec![None; plan.len()],
        }));
        let stop = Arc::new(AtomicBool::new(false));
        let mut t = Ticker {
            multi,
            overall,
            names: plan.iter().map(|e| e.name.clone()).collect(),
            weights,
            shared,
            stop,
            thread: None,
            quiet,
            terminal,
        };
        t.thread = Some(t.spawn());
        t
    }

    /// The fraction of this run's work done, weighting experiments by their expected duration
    /// and counting a bar's progress from where it stood when this run first saw it.
    fn fraction(shared: &mut Shared, weights: &[f64]) -> f64 {
        let progress: Vec<Option<(u64, u64)>> = shared
            .bars
            .iter()
            .map(|b| b.as_ref().map(|b| (b.position(), b.length().unwrap_or(0))))
            .collect();
        for (o, p) in shared.offsets.iter_mut().zip(&progress) {
            if let (None, Some((pos, len))) = (*o, p) {
                if *len > 0 {
                    *o = Some(*pos);
                }
            }
        }
        work_done(weights, &shared.done, &progress, &shared.offsets)
    }

    fn spawn(&self) -> std::thread::JoinHandle<()> {
        let (shared, stop, weights, overall) = (
            self.shared.clone(),
            self.stop.clone(),
            self.weights.clone(),
            self.overall.clone(),
        );
        let (names, plain) = (self.names.clone(), !self.quiet && !self.terminal);
        let (quiet, multi) = (self.quiet, self.multi.clone());
        let planned: f64 = weights.iter().sum();
        std::thread::spawn(move || {
            let start = Instant::now();
            let mut last_line = Instant::now();
            let mut warned_at = 1.0;
            while !stop.load(Ordering::SeqCst) {
                std::thread::sleep(Duration::from_millis(200));
                let Ok(mut sh) = shared.lock() else { return };
                let f = Self::fraction(&mut sh, &weights);
                overall.set_position((1000.0 * f) as u64);
                let el = start.elapsed().as_secs_f64();
                if let Some(pace) = behind_plan(el, f, planned, warned_at) {
                    warned_at = pace;
                    if !quiet {
                        let line = format!(
                            "reproduce: {pace:.1}× slower than planned ({} of work took {}): this machine is slower or busier than the one the plan was timed on; the eta follows the pace measured",
                            duration(f * planned),
                            duration(el)
                        );
                        if plain {
                            say_err!("{line}");
                        } else {
                            multi.println(line).ok();
                        }
                    }
                }
                if plain && last_line.elapsed() >= Duration::from_secs(10) {
                    last_line = Instant::now();
                    let eta = if f > 0.0 {
                        el * (1.0 - f) / f
                    } else {
                        f64::NAN
                    };
                    let current = sh
                        .bars
                        .iter()
                        .enumerate()
                        .find(|(i, b)| b.is_some() && !sh.done[*i]);
                    let what = match current {
                        Some((i, Some(b))) => format!(
                            "{} {:.0}%",
                            names[i],
                            100.0 * b.position() as f64 / b.length().unwrap_or(0).max(1) as f64
                        ),
                        _ => "between experiments".into(),
                    };
                    let eta = if eta.is_finite() {
                        duration(eta)
                    } else {
                        "?".into()
                    };
                    say_err!(
                        "reproduce: {what}; overall {:.0}% done, elapsed {}, eta {eta}",
                        100.0 * f,
                        duration(el)
                    );
                }
            }
        })
    }

    /// The bar of experiment `i`, now starting.
    pub fn start(&self, i: usize) -> ProgressBar {
        let bar = self.multi.add(ProgressBar::new(0));
        bar.set_style(
            ProgressStyle::with_template(STYLE).unwrap_or_else(|_| ProgressStyle::default_bar()),
        );
        bar.set_message(self.names[i].clone());
        if let Ok(mut sh) = self.shared.lock() {
            sh.bars[i] = Some(bar.clone());
        }
        bar
    }

    /// Experiment `i` has ended.
    pub fn finish(&self, i: usize) {
        if let Ok(mut sh) = self.shared.lock() {
            sh.done[i] = true;
            if let Some(b) = &sh.bars[i] {
                b.finish_and_clear();
            }
        }
    }
}

/// How many times slower than planned the run goes, when that is news: `elapsed` seconds for the
/// fraction `done` of a plan of `planned` seconds, at least twice the pace last reported
/// (`reported`, 1 at first) and at least 2×, once a minute has passed (before that, a start-up's
/// noise).
fn behind_plan(elapsed: f64, done: f64, planned: f64, reported: f64) -> Option<f64> {
    if elapsed < 60.0 || planned <= 0.0 {
        return None;
    }
    // Work done so far, in planned seconds; none yet counts as a sliver, so that a first phase
    // that never moves its bar is seen too.
    let pace = elapsed / (done * planned).max(1.0);
    (pace >= 2.0 && pace >= 2.0 * reported).then_some(pace)
}

/// The fraction of the weighted work done: finished experiments whole, running ones by their
/// bar's progress beyond its offset, over the total weight.
fn work_done(
    weights: &[f64],
    done: &[bool],
    progress: &[Option<(u64, u64)>],
    offsets: &[Option<u64>],
) -> f64 {
    let total: f64 = weights.iter().sum();
    if total <= 0.0 {
        return 1.0;
    }
    let mut sum = 0.0;
    for (i, w) in weights.iter().enumerate() {
        if done[i] {
            sum += w;
        } else if let (Some((pos, len)), Some(off)) = (progress[i], offsets[i]) {
            let left = len.saturating_sub(off).max(1) as f64;
            sum += w * (pos.saturating_sub(off) as f64 / left).min(1.0);
        }
    }
    (sum / total).min(1.0)
}

impl Drop for Ticker {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            t.join().ok();
        }
        self.overall.finish_and_clear();
    }
}

#[cfg(test)]
mod tests {
    use super::{behind_plan, work_done};

    #[test]
    fn a_run_far_behind_its_plan_is_told_at_each_doubling() {
        // A plan of 600 s, a quarter done: on pace after 150 s, 2.4× behind after 360 s.
        assert_eq!(behind_plan(150.0, 0.25, 600.0, 1.0), None);
        let pace = behind_plan(360.0, 0.25, 600.0, 1.0).unwrap();
        assert!((pace - 2.4).abs() < 1e-12, "{pace}");
        // Told once: again only when twice as far behind as last told.
        assert_eq!(behind_plan(400.0, 0.25, 600.0, pace), None);
        assert!(behind_plan(800.0, 0.25, 600.0, pace).is_some());
        // Not in the first minute, however slow it looks.
        assert_eq!(behind_plan(50.0, 0.0, 600.0, 1.0), None);
    }

    #[test]
    fn this_runs_work_leaves_out_reused_experiments_and_resumed_progress() {
        // Three experiments: the first reused (weight 0), the second resumed at 60 of 100 and now
        // at 80, the third not started.
        let weights = [0.0, 10.0, 30.0];
        let done = [true, false, false];
        let progress = [None, Some((80, 100)), None];
        let offsets = [None, Some(60), None];
        let f = work_done(&weights, &done, &progress, &offsets);
        // Half of the second's remaining 40: 5 of 40 weighted seconds.
        assert!((f - 5.0 / 40.0).abs() < 1e-12, "{f}");
        // Everything reused: all done, not a division by zero.
        assert_eq!(
            work_done(&[0.0, 0.0], &[true, true], &[None, None], &[None, None]),
            1.0
        );
        // A fresh run counts from zero.
        let f = work_done(&[10.0], &[false], &[Some((25, 100))], &[Some(0)]);
        assert!((f - 0.25).abs() < 1e-12);
    }
}
