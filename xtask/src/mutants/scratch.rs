//! The scratch copy of the workspace a mutant is applied to (`target/mutants/<transports>/`), so
//! the project's own sources are never patched. One copy per set of transports, so the memory
//! part and a broker part can run side by side. Files are copied only when they differ, so cargo's
//! incremental build sees just the mutant's files change; the copy shares the project's target
//! folder, so dependencies are built once.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context, Result};

pub struct Scratch {
    pub root: PathBuf,
    source: PathBuf,
    patched: Vec<String>,
    lock: PathBuf,
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = self.restore();
        let _ = std::fs::remove_file(&self.lock);
    }
}

/// One mutation run at a time owns the scratch copy: a lock file holding its process id, taken
/// over when that process is gone.
fn take_lock(lock: &Path) -> Result<()> {
    std::fs::create_dir_all(lock.parent().expect("the lock is in a folder"))?;
    loop {
        match std::fs::OpenOptions::new().write(true).create_new(true).open(lock) {
            Ok(mut file) => {
                use std::io::Write as _;
                return Ok(write!(file, "{}", std::process::id())?);
            }
            Err(error) if error.kind() == std::io::ErrorKind::AlreadyExists => {
                let holder = std::fs::read_to_string(lock).unwrap_or_default();
                if !holder.is_empty() && Path::new("/proc").join(holder.trim()).exists() {
                    bail!("another mutation run (process {}) is using {}", holder.trim(), lock.display());
                }
                std::fs::remove_file(lock)?;
            }
            Err(error) => return Err(error).with_context(|| format!("cannot create {}", lock.display())),
        }
    }
}

/// Writes `text` to `path` unless it already holds it (a rewrite would make cargo rebuild).
fn write_if_changed(path: &Path, text: &[u8]) -> Result<()> {
    if std::fs::read(path).is_ok_and(|old| old == text) {
        return Ok(());
    }
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)?;
    }
    std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))
}

/// The workspace's files as git sees them: tracked, and untracked but not ignored.
fn workspace_files(source: &Path) -> Result<Vec<String>> {
    let output = Command::new("git")
        .current_dir(source)
        .args(["ls-files", "--cached", "--others", "--exclude-standard", "-z"])
        .output()
        .context("cannot run git ls-files")?;
    if !output.status.success() {
        bail!("git ls-files failed: {}", String::from_utf8_lossy(&output.stderr));
    }
    Ok(String::from_utf8_lossy(&output.stdout).split('\0').filter(|f| !f.is_empty()).map(str::to_owned).collect())
}

impl Scratch {
    /// Brings the scratch copy up to date with `source` (the workspace as it is, uncommitted
    /// changes included). Installed brokers (`.brokers/`) are linked, not copied.
    pub fn sync(source: &Path, transports: &[&str]) -> Result<Scratch> {
        let folder = source.join("target/mutants").join(transports.join("-"));
        let root = folder.join("workspace");
        let lock = folder.join("lock");
        take_lock(&lock)?;
        for file in workspace_files(source)? {
            let from = source.join(&file);
            if from.is_file() {
                write_if_changed(&root.join(&file), &std::fs::read(&from)?)?;
            }
        }
        let brokers = root.join(".brokers");
        if !brokers.exists() {
            std::fs::create_dir_all(source.join(".brokers"))?;
            std::os::unix::fs::symlink(source.join(".brokers"), &brokers)?;
        }
        Ok(Scratch { root, source: source.to_path_buf(), patched: Vec::new(), lock })
    }

    /// Writes a mutant's patched files into the copy (after restoring the previous mutant's).
    pub fn apply(&mut self, files: &BTreeMap<String, String>) -> Result<()> {
        self.restore()?;
        for (file, text) in files {
            write_if_changed(&self.root.join(file), text.as_bytes())?;
            self.patched.push(file.clone());
        }
        Ok(())
    }

    /// Puts the healthy sources back.
    pub fn restore(&mut self) -> Result<()> {
        for file in self.patched.drain(..) {
            write_if_changed(&self.root.join(&file), &std::fs::read(self.source.join(&file))?)?;
        }
        Ok(())
    }
}
