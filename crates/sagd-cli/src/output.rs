//! Output folders that are never left looking complete after a failure, and never lose a complete
//! earlier result to a run that fails: files are written into a staging folder inside the output
//! folder and swapped in only when everything succeeded; a lock keeps two runs out of one folder.

use std::fs;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use std::io::IsTerminal;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle, TermLike};

/// A staging area for one run's files, holding the output folder's lock while it lives.
pub struct Staging {
    out: PathBuf,
    dir: PathBuf,
    files: Vec<String>,
    owned: Vec<String>,
    lock: PathBuf,
    done: bool,
    _scratch: Option<tempfile::TempDir>,
}

/// Writes `bytes` to `path` whole or not at all: a temporary file named for this process, then a
/// rename.
pub fn write_atomic(path: &Path, bytes: impl AsRef<[u8]>) -> Result<()> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(format!(".tmp-{}", std::process::id()));
    let tmp = PathBuf::from(tmp);
    fs::write(&tmp, bytes).with_context(|| format!("writing {}", tmp.display()))?;
    fs::rename(&tmp, path).with_context(|| format!("writing {}", path.display()))?;
    sagd::run::remove_temporaries(path);
    Ok(())
}

/// Whether process `pid` is alive (Linux: its /proc entry exists; elsewhere assume it is).
fn alive(pid: u32) -> bool {
    if cfg!(target_os = "linux") {
        Path::new(&format!("/proc/{pid}")).exists()
    } else {
        true
    }
}

/// Who holds an output folder's lock: a process by its id, its start time (clock ticks since
/// boot) and the boot it ran in, so that a lock left by a dead run is told from a live run's
/// even after a reboot or when another process has been given the same id.
#[derive(Debug, PartialEq)]
struct Owner {
    pid: u32,
    start: u64,
    boot: String,
}

impl Owner {
    /// This process.
    fn me() -> Owner {
        let pid = std::process::id();
        Owner {
            pid,
            start: Self::start_of(pid).unwrap_or(0),
            boot: Self::boot(),
        }
    }

    /// The start time of process `pid` (field 22 of /proc/PID/stat), where there is a /proc.
    fn start_of(pid: u32) -> Option<u64> {
        let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        // The command name (field 2) may hold spaces and parentheses: count from its end.
        let rest = &stat[stat.rfind(')')? + 1..];
        rest.split_whitespace().nth(19)?.parse().ok()
    }

    fn boot() -> String {
        fs::read_to_string("/proc/sys/kernel/random/boot_id")
            .map(|b| b.trim().to_string())
            .unwrap_or_default()
    }

    /// The lock file's text: `pid P start S boot B`.
    fn to_line(&self) -> String {
        format!("pid {} start {} boot {}", self.pid, self.start, self.boot)
    }

    /// Reads a lock file's text; anything else (an older sagd's bare pid included) is no owner.
    fn parse(text: &str) -> Option<Owner> {
        let w: Vec<&str> = text.split_whitespace().collect();
        match w.as_slice() {
            ["pid", pid, "start", start, "boot", boot] => Some(Owner {
                pid: pid.parse().ok()?,
                start: start.parse().ok()?,
                boot: boot.to_string(),
            }),
            _ => None,
        }
    }

    /// Whether this owner is a live process: the same boot, and its id still names the process
    /// that started then.
    fn alive(&self) -> bool {
        if !cfg!(target_os = "linux") {
            return true;
        }
        self.boot == Self::boot() && Self::start_of(self.pid) == Some(self.start)
    }
}

/// Removes what dead runs left in `out`: their staging folders and a lock no live run holds.
/// Called by every run that uses the folder, also one that reuses a finished result.
pub fn clean_dead(out: &Path) {
    let me = std::process::id();
    if let Ok(entries) = fs::read_dir(out) {
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().to_string();
            if let Some(pid) = name
                .strip_prefix(".staging-")
                .and_then(|p| p.parse::<u32>().ok())
            {
                if pid != me && !alive(pid) {
                    fs::remove_dir_all(e.path()).ok();
                }
            }
        }
    }
    let lock = out.join(LOCK);
    if let Ok(text) = fs::read_to_string(&lock) {
        if !Owner::parse(&text).is_some_and(|o| o.alive()) {
            fs::remove_file(&lock).ok();
        }
    }
}

/// The lock file's name inside an output folder.
const LOCK: &str = ".sagd.lock";

/// The folder of a run's training checkpoints inside its output folder.
pub const CHECKPOINTS: &str = "checkpoints";

/// Checks every checkpoint in `dir` before a resume uses any: a damaged one is named at once,
/// not after the phases before it have been recomputed.
pub fn check_checkpoints(dir: &Path) -> Result<()> {
    let mut files: Vec<PathBuf> = fs::read_dir(dir)
        .with_context(|| format!("--resume: reading {}", dir.display()))?
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "ckpt"))
        .collect();
    files.sort();
    for f in files {
        sagd::run::read_framed(&f).with_context(|| "--resume: a checkpoint cannot be used")?;
    }
    Ok(())
}

impl Staging {
    /// Creates `out` (if needed), takes its lock (refused while another live run holds it),
    /// removes staging folders that dead runs left, and makes a fresh staging folder in it.
    pub fn new(out: &Path) -> Result<Self> {
        // In a run split over processes the first writes the result; the others, which hold
        // the same, stage theirs in a folder of their own that goes when they end.
        let scratch = if sagd::share::is_root() {
            None
        } else {
            Some(tempfile::tempdir().context("cannot make a temporary folder")?)
        };
        let out = scratch.as_ref().map_or(out, |t| t.path());
        fs::create_dir_all(out)
            .with_context(|| format!("cannot create the output folder {}", out.display()))?;
        let me = std::process::id();
        let lock = out.join(LOCK);
        clean_dead(out);
        let mine = Owner::me();
        match fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&lock)
        {
            Ok(mut f) => {
                use std::io::Write;
                write!(f, "{}", mine.to_line())
                    .with_context(|| format!("writing {}", lock.display()))?;
            }
            Err(_) => {
                let holder = fs::read_to_string(&lock).ok();
                if let Some(o) = holder.as_deref().and_then(Owner::parse) {
                    if o.alive() && o != mine {
                        anyhow::bail!(
                            "another sagd run (process {}) is writing into {}: wait for it to finish, or give another --out. If no such run is alive (it was killed, or the machine restarted), remove {} and run again",
                            o.pid,
                            out.display(),
                            lock.display()
                        );
                    }
                }
                // A lock that its run left when it died, taken between clean_dead and here.
                fs::write(&lock, mine.to_line())
                    .with_context(|| format!("writing {}", lock.display()))?;
            }
        }
        let dir = out.join(format!(".staging-{me}"));
        if dir.exists() {
            fs::remove_dir_all(&dir).ok();
        }
        fs::create_dir(&dir)
            .with_context(|| format!("cannot write into the output folder {}", out.display()))?;
        Ok(Staging {
            out: out.to_path_buf(),
            dir,
            files: Vec::new(),
            owned: Vec::new(),
            lock,
            done: false,
            _scratch: scratch,
        })
    }

    /// Names the files a result of this kind consists of: at commit, those of an earlier result
    /// that the new one does not write are removed with it. Until then the earlier result stays
    /// whole, whatever happens to this run.
    pub fn owns(&mut self, names: &[&str]) {
        self.owned.extend(names.iter().map(|n| n.to_string()));
    }

    /// Where to write the file `name` now.
    pub fn path(&mut self, name: &str) -> PathBuf {
        self.files.push(name.to_string());
        self.dir.join(name)
    }

    /// Replaces the earlier result by the staged one: the earlier result file goes first (so that
    /// an interruption leaves no complete-looking mixture), the new result file `last` comes last,
    /// when its figures are in place; then the run's checkpoints folder is removed.
    pub fn commit(mut self, last: &str) -> Result<Vec<String>> {
        fs::remove_file(self.out.join(last)).ok();
        for f in &self.owned {
            if !self.files.contains(f) {
                fs::remove_file(self.out.join(f)).ok();
            }
        }
        let mut order: Vec<String> = self.files.iter().filter(|f| *f != last).cloned().collect();
        if self.files.iter().any(|f| f == last) {
            order.push(last.to_string());
        }
        for f in &order {
            fs::rename(self.dir.join(f), self.out.join(f))
                .with_context(|| format!("moving {f} into {}", self.out.display()))?;
        }
        fs::remove_dir_all(&self.dir).ok();
        // A finished result needs no checkpoints: the training phases' (hundreds of MB for E3)
        // go with the success that makes them useless.
        fs::remove_dir_all(self.out.join(CHECKPOINTS)).ok();
        self.done = true;
        Ok(order)
    }
}

impl Drop for Staging {
    fn drop(&mut self) {
        if !self.done {
            fs::remove_dir_all(&self.dir).ok();
        }
        let mine = fs::read_to_string(&self.lock)
            .ok()
            .and_then(|t| Owner::parse(&t))
            .is_some_and(|o| o.pid == std::process::id());
        if mine {
            fs::remove_file(&self.lock).ok();
        }
    }
}

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
                eprintln!("{}", s.trim_end());
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

#[cfg(test)]
mod tests {
    use super::Owner;
    use proptest::prelude::*;

    #[test]
    fn a_lock_names_this_live_process_and_reads_back() {
        let me = Owner::me();
        let back = Owner::parse(&me.to_line()).expect("its own line");
        assert_eq!(back, me);
        assert!(back.alive());
        // The same process id with another start time is another process: not this run.
        let other = Owner {
            start: me.start + 1,
            ..Owner::parse(&me.to_line()).unwrap()
        };
        assert!(!other.alive());
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(10_000))]
        #[test]
        fn any_lock_text_is_read_without_panic(text in "\\PC{0,80}") {
            if let Some(o) = Owner::parse(&text) {
                prop_assert_eq!(Owner::parse(&o.to_line()), Some(o));
            }
        }
    }
}
