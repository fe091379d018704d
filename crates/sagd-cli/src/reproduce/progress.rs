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
    /// A display for `plan` (nothing at all with `quiet`).
    pub fn new(quiet: bool, plan: &[Experiment], threads: usize) -> Self {
        let terminal = std::io::stderr().is_terminal();
        let target = if quiet || !terminal {
            ProgressDrawTarget::hidden()
        } else {
            ProgressDrawTarget::stderr()
        };
        let multi = MultiProgress::with_draw_target(target);
        let weights: Vec<f64> = plan
            .iter()
            .map(|e| e.estimate_s(threads).max(1.0))
            .collect();
        let overall = multi.add(ProgressBar::new(1000));
        overall.set_style(
            ProgressStyle::with_template(STYLE).unwrap_or_else(|_| ProgressStyle::default_bar()),
        );
        overall.set_message("overall");
        let shared = Arc::new(Mutex::new(Shared {
            bars: vec![None; plan.len()],
            done: vec![false; plan.len()],
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

    /// The fraction of the whole plan done, weighting experiments by their expected duration.
    fn fraction(shared: &Shared, weights: &[f64]) -> f64 {
        let total: f64 = weights.iter().sum();
        let done: f64 = weights
            .iter()
            .enumerate()
            .map(|(i, w)| {
                if shared.done[i] {
                    return *w;
                }
                match &shared.bars[i] {
                    Some(b) => w * b.position() as f64 / b.length().unwrap_or(0).max(1) as f64,
                    None => 0.0,
                }
            })
            .sum();
        (done / total.max(1e-9)).min(1.0)
    }

    fn spawn(&self) -> std::thread::JoinHandle<()> {
        let (shared, stop, weights, overall) = (
            self.shared.clone(),
            self.stop.clone(),
            self.weights.clone(),
            self.overall.clone(),
        );
        let (names, plain) = (self.names.clone(), !self.quiet && !self.terminal);
        std::thread::spawn(move || {
            let start = Instant::now();
            let mut last_line = Instant::now();
            while !stop.load(Ordering::SeqCst) {
                std::thread::sleep(Duration::from_millis(200));
                let Ok(sh) = shared.lock() else { return };
                let f = Self::fraction(&sh, &weights);
                overall.set_position((1000.0 * f) as u64);
                if plain && last_line.elapsed() >= Duration::from_secs(10) {
                    last_line = Instant::now();
                    let el = start.elapsed().as_secs_f64();
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
                    eprintln!(
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

impl Drop for Ticker {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            t.join().ok();
        }
        self.overall.finish_and_clear();
    }
}
