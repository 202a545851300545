//! `cargo xtask lint-workflows`: lints `.github/workflows/*.yml` with actionlint, installed at a
//! pinned version into the git-ignored `.brokers/bin` by the machine's Go toolchain from the Go
//! module proxy (as `brokers install gcp` builds the pstest launcher), so every machine lints with
//! the same rules. actionlint also runs shellcheck over `run:` scripts when one is on PATH.

use std::path::PathBuf;
use std::process::Command;

use anyhow::{bail, Context, Result};

use crate::root;

/// The actionlint release the project lints with; bump it here, nowhere else.
pub const ACTIONLINT_VERSION: &str = "v1.7.12";
const ACTIONLINT_MODULE: &str = "github.com/rhysd/actionlint/cmd/actionlint";

/// Installs the pinned actionlint (quick when it is already there) and lints every workflow.
pub fn run() -> Result<()> {
    let actionlint = install()?;
    let workflows = root().join(".github/workflows");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&workflows)
        .with_context(|| format!("reading {}", workflows.display()))?
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .filter(|path| path.extension().is_some_and(|ext| ext == "yml" || ext == "yaml"))
        .collect();
    files.sort();
    let status = Command::new(&actionlint)
        .current_dir(root())
        .args(&files)
        .status()
        .with_context(|| format!("cannot run {}", actionlint.display()))?;
    if !status.success() {
        bail!("actionlint {ACTIONLINT_VERSION} found problems in .github/workflows ({status})");
    }
    eprintln!("actionlint {ACTIONLINT_VERSION}: {} workflow(s), no problems", files.len());
    Ok(())
}

/// `.brokers/bin/actionlint` at [`ACTIONLINT_VERSION`], built with `go install` when missing or
/// another version.
fn install() -> Result<PathBuf> {
    let bin = root().join(".brokers/bin");
    let actionlint = bin.join("actionlint");
    let installed = Command::new(&actionlint).arg("-version").output().ok().filter(|o| o.status.success());
    // `-version` prints the version alone on its first line.
    let version = installed.map(|o| String::from_utf8_lossy(&o.stdout).lines().next().unwrap_or_default().to_owned());
    if version.as_deref() == Some(ACTIONLINT_VERSION) {
        return Ok(actionlint);
    }
    eprintln!("lint-workflows: go install {ACTIONLINT_MODULE}@{ACTIONLINT_VERSION} into {}", bin.display());
    let output = Command::new("go")
        .env("GOBIN", &bin)
        .env("CGO_ENABLED", "0")
        .args(["install", &format!("{ACTIONLINT_MODULE}@{ACTIONLINT_VERSION}")])
        .output()
        .context("cannot run go (actionlint is built with the Go toolchain; install Go 1.22 or later)")?;
    if !output.status.success() {
        bail!(
            "go install {ACTIONLINT_MODULE}@{ACTIONLINT_VERSION} failed ({}):\n{}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        );
    }
    Ok(actionlint)
}
