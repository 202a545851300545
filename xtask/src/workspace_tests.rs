//! Every workspace test but the cells (`cargo xtask test`'s first half): the test binaries built
//! in one cargo call, then run a few at a time instead of cargo's one after another. Most of their
//! time is waiting on a broker (a restart, a lease), so on two cores three at a time take the
//! longest binary's time rather than the sum (docs/RUNNING.md). Each binary's output, stdout and
//! stderr in the order written, is kept in a file and printed whole when it ends, so the log
//! reads as `cargo test`'s does.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use contract::BrokerSource;

use crate::build;

/// One test executable cargo built.
#[derive(Debug, Clone, PartialEq, Eq)]
struct TestBinary {
    /// `<package> <kind> <target>`, as a person finds it in the workspace.
    label: String,
    package: String,
    /// The package folder: cargo runs a test binary there, and so does this.
    folder: PathBuf,
    executable: PathBuf,
    /// An integration test (`tests/`): these start brokers and run the harness end to end.
    integration: bool,
}

/// The test executables in cargo's `--message-format=json` output, the long ones first: the
/// integration tests, xtask's (whole conformance runs) before providers' (a broker each), then
/// the unit tests, which fill the gaps beside them rather than delay them.
fn test_binaries(messages: &str) -> Result<Vec<TestBinary>> {
    let mut binaries = Vec::new();
    for line in messages.lines() {
        let Ok(message) = serde_json::from_str::<serde_json::Value>(line) else { continue };
        let (true, true, Some(executable)) = (
            message["reason"] == "compiler-artifact",
            message["profile"]["test"] == true,
            message["executable"].as_str(),
        ) else {
            continue;
        };
        let manifest = message["manifest_path"].as_str().context("a compiler artifact without its manifest_path")?;
        let folder = Path::new(manifest).parent().context("a manifest_path without a folder")?.to_path_buf();
        let package = folder.file_name().map(|name| name.to_string_lossy().into_owned()).unwrap_or_default();
        let kind = message["target"]["kind"][0].as_str().unwrap_or("test").to_owned();
        let target = message["target"]["name"].as_str().unwrap_or_default();
        binaries.push(TestBinary {
            label: format!("{package} {kind} {target}"),
            package,
            folder,
            executable: PathBuf::from(executable),
            integration: kind == "test",
        });
    }
    binaries.sort_by(|a, b| b.integration.cmp(&a.integration).then_with(|| b.package.cmp(&a.package)));
    Ok(binaries)
}

/// Builds and runs every test of the workspace but the generated cells, `at_once` binaries at a
/// time, then the doc tests; fails naming every binary that failed (all of them run).
pub(crate) fn run(root: &Path, brokers: BrokerSource, at_once: usize) -> Result<()> {
    let started = Instant::now();
    let workspace = ["--workspace", "--all-features", "--exclude", "generated"];
    let output = build::cargo()
        .current_dir(root)
        .arg("test")
        .args(workspace)
        .args(["--no-run", "--message-format=json-render-diagnostics"])
        .stderr(Stdio::inherit())
        .output()
        .context("cannot run cargo")?;
    if !output.status.success() {
        bail!("building the workspace's tests failed ({})", output.status);
    }
    let binaries = test_binaries(&String::from_utf8_lossy(&output.stdout))?;
    eprintln!(
        "tests: built in {:.0} s; running {} test binaries, {at_once} at a time",
        started.elapsed().as_secs_f64(),
        binaries.len()
    );
    let target = std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| root.join("target"), PathBuf::from);
    let logs = target.join("xtask-test");
    std::fs::create_dir_all(&logs).with_context(|| format!("cannot create {}", logs.display()))?;
    let queue = Mutex::new(binaries.iter());
    let failed = Mutex::new(Vec::new());
    std::thread::scope(|scope| {
        for _ in 0..at_once.max(1) {
            scope.spawn(|| {
                loop {
                    // Its own statement: a guard in a `while let` would be held for the whole
                    // body, and the binaries would run one at a time.
                    let next = queue.lock().expect("no runner panics").next();
                    let Some(binary) = next else { break };
                    if let Err(error) = run_binary(binary, brokers, &logs) {
                        eprintln!("error: {}: {error:#}", binary.label);
                        failed.lock().expect("no runner panics").push(binary.label.clone());
                    }
                }
            });
        }
    });
    let failed = failed.into_inner().expect("no runner panics");
    if !failed.is_empty() {
        bail!(
            "{} test binaries failed: {} (their output is above and in {})",
            failed.len(),
            failed.join(", "),
            logs.display()
        );
    }
    // Cargo runs these after the binaries; none is an executable of its own.
    let status = build::cargo()
        .current_dir(root)
        .arg("test")
        .args(workspace)
        .arg("--doc")
        .env(BrokerSource::VARIABLE, brokers.name())
        .status()?;
    if !status.success() {
        bail!("the workspace's doc tests failed ({status})");
    }
    eprintln!("tests: every workspace test passed in {:.0} s", started.elapsed().as_secs_f64());
    Ok(())
}

/// Runs one binary with its output in a file of its own, then prints that file whole.
fn run_binary(binary: &TestBinary, brokers: BrokerSource, logs: &Path) -> Result<()> {
    let log_path = logs.join(format!("{}.log", binary.label.replace(' ', "-")));
    let log = File::create(&log_path).with_context(|| format!("cannot create {}", log_path.display()))?;
    let started = Instant::now();
    let status = Command::new(&binary.executable)
        .current_dir(&binary.folder)
        // What cargo sets for a test it runs (insta finds the package by it).
        .env("CARGO_MANIFEST_DIR", &binary.folder)
        .env("CARGO_PKG_NAME", &binary.package)
        .env(BrokerSource::VARIABLE, brokers.name())
        .stdout(log.try_clone()?)
        .stderr(log)
        .status()
        .with_context(|| format!("cannot start {}", binary.executable.display()))?;
    let text = std::fs::read_to_string(&log_path).unwrap_or_default();
    let took = Duration::as_secs_f64(&started.elapsed());
    eprint!("\n     Running {} ({}) in {took:.1} s\n{text}", binary.label, binary.executable.display());
    if !status.success() {
        bail!("failed ({status})");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn artifact(manifest: &str, kind: &str, name: &str, test: bool, executable: Option<&str>) -> String {
        serde_json::json!({
            "reason": "compiler-artifact",
            "manifest_path": manifest,
            "target": { "kind": [kind], "name": name },
            "profile": { "test": test },
            "executable": executable,
        })
        .to_string()
    }

    #[test]
    fn the_test_executables_are_found_integration_tests_first() {
        let messages = [
            artifact("/w/gateway/Cargo.toml", "lib", "gateway", true, Some("/t/gateway-1")),
            artifact("/w/gateway/Cargo.toml", "lib", "gateway", false, None),
            artifact("/w/xtask/Cargo.toml", "bin", "xtask", false, Some("/t/xtask")),
            "Compiling gateway".to_owned(),
            artifact("/w/providers/Cargo.toml", "test", "kafka", true, Some("/t/kafka-2")),
            serde_json::json!({ "reason": "build-finished", "success": true }).to_string(),
        ]
        .join("\n");
        let binaries = test_binaries(&messages).unwrap();
        let labels: Vec<&str> = binaries.iter().map(|binary| binary.label.as_str()).collect();
        assert_eq!(labels, ["providers test kafka", "gateway lib gateway"]);
        assert_eq!(binaries[0].folder, Path::new("/w/providers"));
        assert_eq!(binaries[0].package, "providers");
        assert_eq!(binaries[1].executable, Path::new("/t/gateway-1"));
    }
}
