//! Building the generated test binaries: a cargo that does not inherit xtask's own package
//! variables, the feature set, and one cargo call for every selected transport.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{bail, Context, Result};
use contract::BrokerSource;

/// A cargo command without the variables `cargo run` and `cargo test` set about the xtask package
/// itself. Build scripts declare `rerun-if-env-changed` on some of them (ring's, through cc:
/// CARGO_MANIFEST_DIR, CARGO_PKG_NAME, OUT_DIR, …), so a cargo that inherits xtask's values
/// sees them changed and rebuilds ring and all that depends on it (rustls, every SDK), and the
/// next build from a shell rebuilds them back: about 5 minutes on two cores each way.
pub(crate) fn cargo() -> Command {
    let mut command = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
    for (name, _) in std::env::vars_os() {
        if name.to_str().is_some_and(is_package_variable) {
            command.env_remove(name);
        }
    }
    command
}

/// Whether `name` is one of the variables cargo sets for the package it runs or builds.
fn is_package_variable(name: &str) -> bool {
    name.starts_with("CARGO_PKG_")
        || name.starts_with("CARGO_BIN_")
        || name.starts_with("CARGO_CFG_")
        || matches!(
            name,
            "CARGO_MANIFEST_DIR"
                | "CARGO_MANIFEST_PATH"
                | "CARGO_MANIFEST_LINKS"
                | "CARGO_CRATE_NAME"
                | "CARGO_PRIMARY_PACKAGE"
                | "CARGO_TARGET_TMPDIR"
                | "CARGO_RUSTC_CURRENT_DIR"
                | "OUT_DIR"
        )
}

/// Which features the conformance test binaries are built with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Features {
    /// The union of the selected transports' features (with testcontainers unless the broker
    /// source rules containers out): the least to compile, for a run on its own.
    Selected,
    /// Every feature of every workspace package, as the README's test command (`cargo xtask
    /// test`) builds: a run after it reuses its artifacts. The whole workspace is selected, not
    /// only the generated crate, because cargo enables a dependency's features per selection:
    /// `-p generated` alone leaves out those xtask's tests enable (proc-macro2's span locations
    /// among them), so every proc macro and all that depends on one compiled again, about 6
    /// minutes on two cores.
    All,
}

impl Features {
    /// A run of memory alone stays lean (it needs no SDK); any broker transport builds with every
    /// feature, since its SDK dominates the build and the README's test command built them all.
    pub(crate) fn for_run(transports: &[(&str, &str)]) -> Features {
        if transports.iter().all(|(transport, _)| *transport == "memory") {
            Features::Selected
        } else {
            Features::All
        }
    }
}

/// A build that did not compile, with the files its errors are in (as cargo names them,
/// relative to the workspace), so a mutation run can tell which switched patches broke it.
#[derive(Debug)]
pub(crate) struct BuildFailed {
    workspace: PathBuf,
    status: std::process::ExitStatus,
    pub files: std::collections::BTreeSet<String>,
}

impl std::fmt::Display for BuildFailed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "building the conformance tests in {} failed ({})", self.workspace.display(), self.status)
    }
}

impl std::error::Error for BuildFailed {}

/// The files named by the error diagnostics of cargo's JSON messages.
fn error_files(messages: &[serde_json::Value]) -> std::collections::BTreeSet<String> {
    messages
        .iter()
        .filter(|message| message["reason"] == "compiler-message" && message["message"]["level"] == "error")
        .flat_map(|message| {
            let spans = message["message"]["spans"].as_array().cloned().unwrap_or_default();
            spans.into_iter().filter_map(|span| span["file_name"].as_str().map(str::to_owned))
        })
        .collect()
}

/// Whether a build lints the workspace's crates as the caller's environment says (`.ci/run` sets
/// clippy's driver as cargo's workspace wrapper, with warnings denied), or lets no lint fail it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Lints {
    AsCalled,
    /// A mutant's scratch copy: a catalogued defect may well leave a warning behind.
    Off,
}

/// Builds the test binaries of `transports` (name, feature) from the workspace at `workspace`
/// (into `target_dir` when given, else cargo's default), in one cargo call, so the workspace
/// crates compile once for the whole run instead of once per transport's feature set.
pub(crate) fn build_test_binaries(
    workspace: &Path,
    target_dir: Option<&Path>,
    transports: &[(&str, &str)],
    brokers: BrokerSource,
    features: Features,
    lints: Lints,
) -> Result<BTreeMap<String, PathBuf>> {
    let mut command = cargo();
    command.current_dir(workspace).arg("test");
    if let Some(target_dir) = target_dir {
        command.env("CARGO_TARGET_DIR", target_dir);
    }
    if lints == Lints::Off {
        // Capped rather than the driver removed: build scripts (proc-macro2's among them) rerun
        // when the wrapper changes, and every proc macro would compile again.
        command.env("CLIPPY_ARGS", "--cap-lints=allow");
    }
    match features {
        Features::All => {
            command.args(["--workspace", "--all-features"]);
        }
        Features::Selected => {
            command.args(["--package", "generated"]);
            let mut selected: Vec<&str> = transports.iter().map(|(_, feature)| *feature).collect();
            if transports.iter().any(|(transport, _)| *transport != "memory") && brokers.may_use_containers() {
                selected.push("containers");
            }
            command.args(["--no-default-features", "--features", &selected.join(",")]);
        }
    }
    for (transport, _) in transports {
        command.args(["--test", transport]);
    }
    let output = command
        // Diagnostics in the JSON (rendered below), so a failed build names its files.
        .args(["--no-run", "--message-format=json"])
        .stderr(Stdio::inherit())
        .output()
        .context("cannot run cargo")?;
    // Cargo's JSON messages, one a line, parsed once (a line that is not JSON is not cargo's).
    let messages: Vec<serde_json::Value> =
        String::from_utf8_lossy(&output.stdout).lines().filter_map(|line| serde_json::from_str(line).ok()).collect();
    for message in &messages {
        if let (true, Some(rendered)) =
            (message["reason"] == "compiler-message", message["message"]["rendered"].as_str())
        {
            eprint!("{rendered}");
        }
    }
    if !output.status.success() {
        let files = error_files(&messages);
        return Err(BuildFailed { workspace: workspace.to_path_buf(), status: output.status, files }.into());
    }
    // Another package may have a test of the same name (providers' bespoke broker tests).
    let manifest = workspace.join("generated").join("Cargo.toml");
    let mut executables = BTreeMap::new();
    for message in &messages {
        let name = message["target"]["name"].as_str().unwrap_or_default();
        let generated = message["manifest_path"].as_str().is_some_and(|path| Path::new(path) == manifest);
        if let (true, true, Some(executable)) =
            (message["reason"] == "compiler-artifact", generated, message["executable"].as_str())
        {
            executables.insert(name.to_owned(), PathBuf::from(executable));
        }
    }
    for (transport, _) in transports {
        if !executables.contains_key(*transport) {
            bail!("cargo built no {transport} test executable");
        }
    }
    Ok(executables)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cargo_is_run_without_the_variables_cargo_set_for_xtask() {
        for name in ["CARGO_MANIFEST_DIR", "CARGO_PKG_NAME", "CARGO_PKG_VERSION_MAJOR", "OUT_DIR", "CARGO_CRATE_NAME"] {
            assert!(is_package_variable(name), "{name}");
        }
        for name in ["CARGO", "CARGO_HOME", "CARGO_TARGET_DIR", "RUSTFLAGS", "PATH"] {
            assert!(!is_package_variable(name), "{name}");
        }
    }
}
