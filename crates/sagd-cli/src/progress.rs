//! Progress on stderr: a bar on a terminal, a plain line every few seconds elsewhere (a pipe, CI,
//! a log file), from the root process alone.

use std::io::IsTerminal;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle, TermLike};

/// A progress bar over `total` units of work on stderr: drawn on a terminal; without one (a pipe,
/// CI, a log file), a plain line every few seconds instead; nothing with `quiet`.
pub fn progress_bar(quiet: bool, total: u64) -> ProgressBar {
    if quiet || !sagd::share::is_root() {
        return ProgressBar::hidden();
    }
    if std::io::stderr().is_terminal() {
        let bar = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stderr());
        bar.set_style(
            ProgressStyle::with_template("{msg:40} [{bar:30}] {percent:>3}%, {elapsed}, eta {eta}")
                .unwrap_or_else(|_| ProgressStyle::default_bar()),
        );
        return bar;
    }
    let target = ProgressDrawTarget::term_like_with_hz(Box::new(PlainLines::default()), 20);
    let bar = ProgressBar::with_draw_target(Some(total), target);
    bar.set_style(
        ProgressStyle::with_template("{msg}: {percent}% done, elapsed {elapsed}, eta {eta}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    bar
}

/// Time between two plain progress lines: five seconds, or `SAGD_PROGRESS_EVERY_MS`.
fn plain_every() -> Duration {
    std::env::var("SAGD_PROGRESS_EVERY_MS")
        .ok()
        .and_then(|v| v.parse().ok())
        .map_or(Duration::from_secs(5), Duration::from_millis)
}

/// A "terminal" for indicatif that prints the bar as a plain line on stderr every few seconds at
/// most ([`plain_every`]), and ignores cursor movement.
#[derive(Debug, Default)]
struct PlainLines {
    last: Mutex<Option<Instant>>,
}

impl TermLike for PlainLines {
    fn width(&self) -> u16 {
        120
    }
    fn move_cursor_up(&self, _: usize) -> std::io::Result<()> {
        Ok(())
    }
    fn move_cursor_down(&self, _: usize) -> std::io::Result<()> {
        Ok(())
    }
    fn move_cursor_right(&self, _: usize) -> std::io::Result<()> {
        Ok(())
    }
    fn move_cursor_left(&self, _: usize) -> std::io::Result<()> {
        Ok(())
    }
    fn write_line(&self, s: &str) -> std::io::Result<()> {
        let Ok(mut last) = self.last.lock() else {
            return Ok(());
        };
        // The first draw comes at the start; skip it and print every few seconds after.
        match *last {
            None => *last = Some(Instant::now()),
            Some(t) if t.elapsed() >= plain_every() && !s.trim().is_empty() => {
                *last = Some(Instant::now());
                say_err!("{}", s.trim_end());
            }
            Some(_) => {}
        }
        Ok(())
    }
    fn write_str(&self, s: &str) -> std::io::Result<()> {
        self.write_line(s)
    }
    fn clear_line(&self) -> std::io::Result<()> {
        Ok(())
    }
    fn flush(&self) -> std::io::Result<()> {
        Ok(())
    }
}
