//! Output folders that are never left looking complete after a failure, and never lose a complete
//! earlier result to a run that fails: files are written into a staging folder inside the output
//! folder and swapped in only when everything succeeded; a lock keeps two runs out of one folder.

use std::fs;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use std::sync::atomic::{AtomicBool, Ordering};

/// A staging area for one run's files, holding the output folder's lock while it lives.
pub struct Staging {
    out: PathBuf,
    dir: PathBuf,
    files: Vec<String>,
    owned: Vec<String>,
    lock: PathBuf,
    command: String,
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

/// Removes what dead runs left in `out`: their staging folders, their lock's temporaries and a
/// lock no live run holds.
/// Called by every run that uses the folder, also one that reuses a finished result.
pub fn clean_dead(out: &Path) {
    let me = std::process::id();
    if let Ok(entries) = fs::read_dir(out) {
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().to_string();
            // `.staging-PID` folders, and the lock's `.new-PID` and `.dead-PID` files.
            let temporary = name.starts_with(".staging-") || name.starts_with(&format!("{LOCK}."));
            let pid = name.rsplit('-').next().and_then(|p| p.parse::<u32>().ok());
            if pid.is_some_and(|p| temporary && p != me && !sagd::run::process_alive(p)) {
                fs::remove_dir_all(e.path())
                    .or_else(|_| fs::remove_file(e.path()))
                    .ok();
            }
        }
    }
    let lock = out.join(LOCK);
    if fs::read_to_string(&lock).is_ok_and(|t| !Owner::parse(&t).is_some_and(|o| o.alive())) {
        set_aside_dead(&lock, me);
    }
}

/// Takes the lock file `lock` for `mine`. The file appears with its owner line already in it (a
/// hard link to a file written first), so that no other run can read it empty and take it too;
/// a lock whose owner is dead is set aside and the link tried again.
fn take_lock(lock: &Path, mine: &Owner) -> Result<()> {
    let line = lock.with_file_name(format!("{LOCK}.new-{}", mine.pid));
    fs::write(&line, mine.to_line()).with_context(|| format!("writing {}", line.display()))?;
    let taken = (|| {
        for _ in 0..16 {
            match fs::hard_link(&line, lock) {
                Ok(()) => return Ok(()),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                    match fs::read_to_string(lock).ok().as_deref().and_then(Owner::parse) {
                        Some(o) if o == *mine => return Ok(()),
                        Some(o) if o.alive() => anyhow::bail!(
                            "another sagd run (process {}) is writing into {}: wait for it to finish, or give another --out. If no such run is alive (it was killed, or the machine restarted), remove {} and run again",
                            o.pid,
                            lock.parent().unwrap_or(lock).display(),
                            lock.display()
                        ),
                        _ => set_aside_dead(lock, mine.pid),
                    }
                }
                Err(e) => {
                    return Err(e).with_context(|| format!("cannot take the lock {}", lock.display()))
                }
            }
        }
        anyhow::bail!(
            "cannot take the lock {}: other runs keep replacing it; give another --out",
            lock.display()
        )
    })();
    fs::remove_file(&line).ok();
    taken
}

/// Removes a lock whose owner is dead. It is first renamed aside (one run's rename wins), so that
/// a live run's lock that replaced it in the meantime is put back, not deleted.
fn set_aside_dead(lock: &Path, me: u32) {
    let aside = lock.with_file_name(format!("{LOCK}.dead-{me}"));
    if fs::rename(lock, &aside).is_ok() {
        let live = fs::read_to_string(&aside)
            .ok()
            .and_then(|t| Owner::parse(&t))
            .is_some_and(|o| o.alive());
        if live {
            fs::hard_link(&aside, lock).ok();
        }
        fs::remove_file(&aside).ok();
    }
}

/// The lock file's name inside an output folder.
const LOCK: &str = ".sagd.lock";

/// The folder of a run's training checkpoints inside its output folder.
pub const CHECKPOINTS: &str = "checkpoints";

/// The file naming the command whose result an output folder (or whose interrupted run a
/// checkpoints folder) holds: its first line the command, then one line per file of the result.
const COMMAND: &str = ".sagd-command";

/// Whether `--replace` lets a run replace another command's result ([`claim`]).
static REPLACE: AtomicBool = AtomicBool::new(false);

/// Lets this process's runs replace another command's result or checkpoints (`--replace`).
pub fn allow_replace() {
    REPLACE.store(true, Ordering::Relaxed);
}

/// The mark of `folder`: the command whose result (or checkpoints) it holds and the files of that
/// result (none listed in a mark written before sagd listed them).
fn read_mark(folder: &Path) -> Option<(String, Vec<String>)> {
    let text = fs::read_to_string(folder.join(COMMAND)).ok()?;
    let mut lines = text.lines().map(str::trim).filter(|l| !l.is_empty());
    let command = lines.next()?.to_string();
    Some((command, lines.map(String::from).collect()))
}

/// Refuses to let `command` write into `out` when the folder holds another command's result or
/// checkpoints: one command's files would be mixed with the other's, or its checkpoints removed.
/// With `--replace` ([`allow_replace`]) the other command's checkpoints are removed at once, and
/// its result's files when this run's result replaces it ([`Staging::commit`]). Folders written
/// before the mark existed carry none and are not refused.
pub fn claim(out: &Path, command: &str) -> Result<()> {
    let replace = REPLACE.load(Ordering::Relaxed);
    for (place, what) in [
        (out.to_path_buf(), "the result"),
        (
            out.join(CHECKPOINTS),
            "the checkpoints of an interrupted run",
        ),
    ] {
        let Some((other, files)) = read_mark(&place) else {
            continue;
        };
        if other == command {
            continue;
        }
        if !replace {
            anyhow::bail!(
                "{} holds {what} of `sagd {other}`: `sagd {command}` would mix its files with them or remove them. Give another --out, remove that folder first, or pass --replace to replace them",
                out.display()
            );
        }
        if place != out {
            fs::remove_dir_all(&place)
                .with_context(|| format!("--replace: removing {}", place.display()))?;
        } else if files.is_empty() {
            say_err!(
                "--replace: {} holds the result of `sagd {other}` written by an earlier sagd, which did not list its files: they stay beside this run's",
                out.display()
            );
        }
    }
    Ok(())
}

/// Refuses, before any work, a folder given by `flag` that cannot be written (created if need be,
/// then a file made and removed in it): a read-only cache would otherwise fail only when the
/// work it was to keep is done.
pub fn writable_folder(dir: &Path, flag: &str) -> Result<()> {
    let fail = |e: std::io::Error| {
        anyhow::anyhow!(
            "{flag} {}: cannot write there ({e}): give a folder you can write to, or leave {flag} out",
            dir.display()
        )
    };
    fs::create_dir_all(dir).map_err(fail)?;
    tempfile::NamedTempFile::new_in(dir).map_err(fail)?;
    Ok(())
}

/// The checkpoint flags of the commands that train in phases (`debias`, `mnist`) or refit in
/// bootstraps (`glmm`).
#[derive(clap::Args, Debug, Clone, serde::Serialize)]
pub struct Checkpointing {
    /// Checkpoint into OUT/checkpoints every this many updates of a training phase (and at its
    /// end), or refits of a bootstrap; 0: off.
    #[arg(long, default_value_t = 0)]
    pub checkpoint_every: usize,
    /// Continue an interrupted run from OUT/checkpoints (same flags as the interrupted run).
    #[arg(long)]
    pub resume: bool,
    /// Stop every training phase (or bootstrap) after this many updates (refits), checkpointed
    /// (to try --resume).
    #[arg(long, hide = true)]
    pub interrupt_after: Option<usize>,
}

impl Checkpointing {
    /// The checkpoints folder of a run of `command` into `out` ([`checkpoints`]), on when any of
    /// the flags asks for checkpoints.
    pub fn folder(&self, out: &Path, command: &str) -> Result<Option<PathBuf>> {
        checkpoints(out, command, self.resume, self.asked())
    }

    /// Whether any of the flags asks for checkpoints.
    pub fn asked(&self) -> bool {
        self.checkpoint_every > 0 || self.resume || self.interrupt_after.is_some()
    }
}

/// The checkpoints folder of a run of `command` into `out`, when checkpointing is `on`: `--resume`
/// is refused without one and with a damaged one, and the folder is refused when it holds another
/// command's result or checkpoints ([`claim`]). A new checkpoints folder is marked as `command`'s.
pub fn checkpoints(out: &Path, command: &str, resume: bool, on: bool) -> Result<Option<PathBuf>> {
    let dir = out.join(CHECKPOINTS);
    claim(out, command)?;
    if resume && !dir.is_dir() {
        anyhow::bail!(
            "--resume: no checkpoints at {}: run with --checkpoint-every first",
            dir.display()
        );
    }
    if resume {
        check_checkpoints(&dir)?;
    }
    if !on {
        return Ok(None);
    }
    fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    // The processes of a split run share the folder; the first marks it.
    if sagd::share::is_root() {
        write_atomic(&dir.join(COMMAND), command)?;
    }
    Ok(Some(dir))
}

/// Checks every checkpoint in `dir` before a resume uses any: a damaged one is named at once,
/// not after the phases before it have been recomputed.
fn check_checkpoints(dir: &Path) -> Result<()> {
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
    /// refuses it when it holds another command's result ([`claim`]), removes staging folders
    /// that dead runs left, and makes a fresh staging folder in it. `command` names the result.
    pub fn new(out: &Path, command: &str) -> Result<Self> {
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
        take_lock(&lock, &Owner::me())?;
        if let Err(e) = claim(out, command) {
            fs::remove_file(&lock).ok();
            return Err(e);
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
            command: command.to_string(),
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
        // What goes: the files of this kind of result that this one does not write, and those of
        // another command's result that `--replace` replaces ([`claim`] refused it otherwise).
        let mut old = self.owned.clone();
        if let Some((other, files)) = read_mark(&self.out) {
            if other != self.command {
                fs::remove_file(self.out.join(COMMAND)).ok();
                old.extend(files);
            }
        }
        for f in &old {
            if !self.files.contains(f) && is_plain_name(f) {
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
        let mark: Vec<&str> = std::iter::once(self.command.as_str())
            .chain(order.iter().map(String::as_str))
            .collect();
        write_atomic(&self.out.join(COMMAND), mark.join("\n") + "\n")?;
        self.done = true;
        Ok(order)
    }
}

/// Whether `name`, read from a folder's mark, names a file inside the folder: a mark edited by
/// hand must not make a run remove files elsewhere.
fn is_plain_name(name: &str) -> bool {
    let p = Path::new(name);
    p.components().count() == 1
        && matches!(p.components().next(), Some(std::path::Component::Normal(_)))
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

#[cfg(test)]
mod tests {
    use super::{take_lock, Owner, LOCK};
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

    /// Another live process (this one's parent) as an owner.
    fn parent() -> Owner {
        let pid = std::os::unix::process::parent_id();
        Owner {
            pid,
            start: Owner::start_of(pid).unwrap_or(0),
            boot: Owner::boot(),
        }
    }

    #[test]
    fn of_two_runs_taking_one_lock_at_once_exactly_one_gets_it() {
        // The race: the lock was created empty and given its owner line afterwards, so
        // a second run could read it empty, take it for a dead run's and proceed too.
        for _ in 0..300 {
            let dir = tempfile::tempdir().unwrap();
            let lock = dir.path().join(LOCK);
            let gate = std::sync::Barrier::new(2);
            let owners = [Owner::me(), parent()];
            let taken: Vec<bool> = std::thread::scope(|sc| {
                let hs: Vec<_> = owners
                    .iter()
                    .map(|o| {
                        sc.spawn(|| {
                            gate.wait();
                            take_lock(&lock, o).is_ok()
                        })
                    })
                    .collect();
                hs.into_iter().map(|h| h.join().unwrap()).collect()
            });
            assert_eq!(taken.iter().filter(|t| **t).count(), 1, "{taken:?}");
            let holder = Owner::parse(&std::fs::read_to_string(&lock).unwrap()).unwrap();
            assert_eq!(holder == owners[0], taken[0]);
            // Nothing but the lock is left behind.
            assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
        }
    }

    #[test]
    fn a_dead_run_s_lock_is_taken_over_and_a_live_one_is_not() {
        let dir = tempfile::tempdir().unwrap();
        let lock = dir.path().join(LOCK);
        let me = Owner::me();
        let dead = Owner {
            start: parent().start + 1,
            ..parent()
        };
        std::fs::write(&lock, dead.to_line()).unwrap();
        take_lock(&lock, &me).unwrap();
        assert_eq!(std::fs::read_to_string(&lock).unwrap(), me.to_line());
        let err = take_lock(&lock, &parent()).unwrap_err().to_string();
        assert!(err.contains("another sagd run"), "{err}");
        assert_eq!(std::fs::read_to_string(&lock).unwrap(), me.to_line());
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
