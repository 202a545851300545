//! Writes rendered outputs, or checks them against the disk. Every output ends with exactly one
//! newline; a check failure shows a unified diff per file and the command that fixes it.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use similar::TextDiff;

use crate::{GenerateError, COMMAND, GENERATED};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Write,
    Check,
}

#[derive(Debug, Default)]
pub struct Outcome {
    pub written: Vec<PathBuf>,
    pub removed: Vec<PathBuf>,
    pub unchanged: usize,
}

fn normalise(text: &str) -> String {
    let mut text = text.replace("\r\n", "\n").trim_end().to_owned();
    text.push('\n');
    text
}

/// Files under `generated/tests` that no longer correspond to any output (a removed
/// configuration or behaviour): generated, so the generator owns their removal.
fn stale_files(root: &Path, outputs: &BTreeMap<PathBuf, String>) -> Vec<PathBuf> {
    fn walk(root: &Path, folder: &Path, found: &mut Vec<PathBuf>) {
        let Ok(entries) = std::fs::read_dir(root.join(folder)) else { return };
        for entry in entries.flatten() {
            let relative = folder.join(entry.file_name());
            if entry.path().is_dir() {
                walk(root, &relative, found);
            } else {
                found.push(relative);
            }
        }
    }
    let mut found = Vec::new();
    walk(root, &Path::new(GENERATED).join("tests"), &mut found);
    found.retain(|path| !outputs.contains_key(path));
    found.sort();
    found
}

pub(crate) fn apply(root: &Path, outputs: &BTreeMap<PathBuf, String>, mode: Mode) -> Result<Outcome, GenerateError> {
    let mut outcome = Outcome::default();
    let mut diffs = Vec::new();
    for (path, content) in outputs {
        let content = normalise(content);
        let full = root.join(path);
        let current = std::fs::read_to_string(&full).ok();
        if current.as_deref() == Some(content.as_str()) {
            outcome.unchanged += 1;
            continue;
        }
        match mode {
            Mode::Check => {
                let old = current.unwrap_or_default();
                let name = path.display().to_string();
                let diff = TextDiff::from_lines(&old, &content);
                diffs.push(
                    diff.unified_diff().context_radius(2).header(&name, &format!("{name} (expected)")).to_string(),
                );
            }
            Mode::Write => {
                let io = |error| GenerateError::Io { path: full.clone(), error };
                if let Some(parent) = full.parent() {
                    std::fs::create_dir_all(parent).map_err(io)?;
                }
                // Atomically, so an interrupted run leaves each file old or new, never cut short.
                ledger::file::write_atomically(&full, &content)?;
                outcome.written.push(path.clone());
            }
        }
    }
    for stale in stale_files(root, outputs) {
        match mode {
            Mode::Check => diffs.push(format!("{}: not produced by any template (stale)\n", stale.display())),
            Mode::Write => {
                let full = root.join(&stale);
                std::fs::remove_file(&full).map_err(|error| GenerateError::Io { path: full, error })?;
                outcome.removed.push(stale);
            }
        }
    }
    if diffs.is_empty() {
        Ok(outcome)
    } else {
        Err(GenerateError::Stale { count: diffs.len(), diff: diffs.concat(), command: COMMAND })
    }
}
