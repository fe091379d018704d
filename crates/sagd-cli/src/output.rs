//! Output folders that are never left looking complete after a failure: files are written into a
//! staging folder inside the output folder and moved into place only when everything succeeded.

use std::fs;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// A staging area for one run's files.
pub struct Staging {
    out: PathBuf,
    dir: PathBuf,
    files: Vec<String>,
    done: bool,
}

impl Staging {
    /// Creates `out` (if needed) and a fresh staging folder in it.
    pub fn new(out: &Path) -> Result<Self> {
        fs::create_dir_all(out)
            .with_context(|| format!("cannot create the output folder {}", out.display()))?;
        let dir = out.join(format!(".staging-{}", std::process::id()));
        if dir.exists() {
            fs::remove_dir_all(&dir).ok();
        }
        fs::create_dir(&dir)
            .with_context(|| format!("cannot write into the output folder {}", out.display()))?;
        Ok(Staging {
            out: out.to_path_buf(),
            dir,
            files: Vec::new(),
            done: false,
        })
    }

    /// Removes earlier results named `names` from the output folder, so that a failed run cannot
    /// leave an older result looking like its own.
    pub fn clear(&self, names: &[&str]) {
        for n in names {
            let p = self.out.join(n);
            if p.is_file() {
                fs::remove_file(p).ok();
            }
        }
    }

    /// Where to write the file `name` now.
    pub fn path(&mut self, name: &str) -> PathBuf {
        self.files.push(name.to_string());
        self.dir.join(name)
    }

    /// Moves every staged file into the output folder, the first one named last (the result file
    /// goes last, so that it appears only when the figures are in place).
    pub fn commit(mut self, last: &str) -> Result<Vec<String>> {
        let mut order: Vec<String> = self.files.iter().filter(|f| *f != last).cloned().collect();
        if self.files.iter().any(|f| f == last) {
            order.push(last.to_string());
        }
        for f in &order {
            fs::rename(self.dir.join(f), self.out.join(f))
                .with_context(|| format!("moving {f} into {}", self.out.display()))?;
        }
        fs::remove_dir_all(&self.dir).ok();
        self.done = true;
        Ok(order)
    }
}

impl Drop for Staging {
    fn drop(&mut self) {
        if !self.done {
            fs::remove_dir_all(&self.dir).ok();
        }
    }
}

/// A progress bar over `total` updates on stderr (hidden with `quiet` or when stderr is not a
/// terminal).
pub fn progress_bar(quiet: bool, total: u64) -> ProgressBar {
    let bar = if quiet {
        ProgressBar::hidden()
    } else {
        ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stderr())
    };
    bar.set_style(
        ProgressStyle::with_template(
            "{msg:40} [{bar:30}] {pos}/{len} updates, {elapsed}, eta {eta}",
        )
        .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    bar
}
