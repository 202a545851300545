//! Every workspace test but the cells (`cargo xtask test`'s workspace half): the test binaries
//! built in one cargo call (the cells' too, so the conformance check beside them builds
//! nothing), then run a few at a time instead of cargo's one after another. Most of their time
//! is waiting on a broker (a restart, a lease), so on two cores three at a time take the longest
//! binary's time rather than the sum (docs/RUNNING.md). Each binary's output, stdout and stderr
//! in the order written, is kept in a file and printed whole when it ends, so the log reads as
//! `cargo test`'s does, whatever runs beside it.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use contract::BrokerSource;

use crate::{build, libtest};

/// One test executable cargo built.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TestBinary {
    /// `<package> <kind> <target>`, as a person finds it in the workspace.
    label: String,
    package: String,
    /// The package folder: cargo runs a test binary there, and so does this.
    folder: PathBuf,
    executable: PathBuf,
    /// An integration test (`tests/`): these start brokers and run the harness end to end.
    integration: bool,
}

/// The test executables in cargo's `--message-format=json` output but the cells (the generated
/// package's: the conformance runner runs those), the long ones first: the integration tests,
/// xtask's (whole conformance runs) before providers' (a broker each), then the unit tests,
/// which fill the gaps beside them rather than delay them.
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
        if package == GENERATED {
            continue;
        }
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

/// The package whose test binaries are the cells.
const GENERATED: &str = "generated";
const WORKSPACE: [&str; 2] = ["--workspace", "--all-features"];
const BUT_THE_CELLS: [&str; 2] = ["--exclude", GENERATED];

/// Whether a build of the workspace's tests compiles the cells too.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Cells {
    /// For a conformance check to run beside the workspace's binaries: with nothing left to
    /// compile, it starts at once, and its build is not a second cargo call waiting for this one.
    Built,
    Left,
}

/// Builds every test binary of the workspace (the cells' too, if asked) in one cargo call, and
/// returns all but the cells.
pub(crate) fn build(root: &Path, cells: Cells) -> Result<Vec<TestBinary>> {
    let started = Instant::now();
    let mut command = build::cargo();
    command.current_dir(root).arg("test").args(WORKSPACE);
    if cells == Cells::Left {
        command.args(BUT_THE_CELLS);
    }
    let output = command
        .args(["--no-run", "--message-format=json-render-diagnostics"])
        .stderr(Stdio::inherit())
        .output()
        .context("cannot run cargo")?;
    if !output.status.success() {
        bail!("building the workspace's tests failed ({})", output.status);
    }
    let binaries = test_binaries(&String::from_utf8_lossy(&output.stdout))?;
    eprintln!("tests: built in {:.0} s", started.elapsed().as_secs_f64());
    Ok(binaries)
}

/// The folder each run's output is kept in.
fn logs_folder(root: &Path) -> Result<PathBuf> {
    let target = std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| root.join("target"), PathBuf::from);
    let logs = target.join("xtask-test");
    std::fs::create_dir_all(&logs).with_context(|| format!("cannot create {}", logs.display()))?;
    Ok(logs)
}

/// Calls `each` on every item, `at_once` at a time, in order.
fn run_pool<T: Sync>(items: &[T], at_once: usize, each: impl Fn(&T) + Sync) {
    let queue = Mutex::new(items.iter());
    std::thread::scope(|scope| {
        for _ in 0..at_once.max(1) {
            scope.spawn(|| {
                loop {
                    // Its own statement: a guard in a `while let` would be held for the whole
                    // body, and the binaries would run one at a time.
                    let next = queue.lock().expect("no runner panics").next();
                    let Some(item) = next else { break };
                    each(item);
                }
            });
        }
    });
}

/// Runs `binaries`, `at_once` at a time, then the doc tests; fails naming every binary that
/// failed (all of them run).
pub(crate) fn run(root: &Path, binaries: &[TestBinary], brokers: BrokerSource, at_once: usize) -> Result<()> {
    let started = Instant::now();
    eprintln!("tests: running {} test binaries, {at_once} at a time", binaries.len());
    let logs = logs_folder(root)?;
    let failed = Mutex::new(Vec::new());
    run_pool(binaries, at_once, |binary| {
        let log = logs.join(format!("{}.log", binary.label.replace(' ', "-")));
        if let Err(error) = run_binary(binary, brokers, &log) {
            eprintln!("error: {}: {error:#}", binary.label);
            failed.lock().expect("no runner panics").push(binary.label.clone());
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
        .args(WORKSPACE)
        .args(BUT_THE_CELLS)
        .arg("--doc")
        .env(BrokerSource::VARIABLE, brokers.name())
        .status()?;
    if !status.success() {
        bail!("the workspace's doc tests failed ({status})");
    }
    eprintln!("tests: every workspace test passed, run in {:.0} s", started.elapsed().as_secs_f64());
    Ok(())
}

/// The binaries whose label contains one of `only` (all of them when `only` is empty); a pattern
/// no label contains is an error naming the labels.
fn chosen(binaries: Vec<TestBinary>, only: &[String]) -> Result<Vec<TestBinary>> {
    if let Some(unknown) = only.iter().find(|pattern| !binaries.iter().any(|b| b.label.contains(pattern.as_str()))) {
        let labels: Vec<&str> = binaries.iter().map(|binary| binary.label.as_str()).collect();
        bail!("--binary {unknown:?} names no test binary; valid choices (or any part of one): {}", labels.join(", "));
    }
    Ok(binaries.into_iter().filter(|b| only.is_empty() || only.iter().any(|p| b.label.contains(p.as_str()))).collect())
}

/// One run of one binary under `--repeat`: which round, and how it ended.
struct RepeatedRun {
    label: String,
    round: u32,
    passed: bool,
    /// The tests that printed `FAILED`.
    failed_tests: Vec<String>,
    log: PathBuf,
}

/// Runs the chosen binaries `times` times each, `at_once` at a time, round after round (so each
/// run meets the load of the others, as in CI), and reports every binary's pass rate and every
/// test that failed in any run. Fails when any run failed: a flake is a failure to trace.
pub(crate) fn repeat(root: &Path, brokers: BrokerSource, at_once: usize, times: u32, only: &[String]) -> Result<()> {
    let started = Instant::now();
    let binaries = chosen(build(root, Cells::Left)?, only)?;
    eprintln!("tests: running {} test binaries {times} times each, {at_once} at a time", binaries.len());
    let logs = logs_folder(root)?;
    let runs: Vec<(u32, &TestBinary)> =
        (1..=times).flat_map(|round| binaries.iter().map(move |b| (round, b))).collect();
    let results = Mutex::new(Vec::new());
    run_pool(&runs, at_once, |&(round, binary)| {
        let log = logs.join(format!("{}-{round}.log", binary.label.replace(' ', "-")));
        let passed = run_binary(binary, brokers, &log).is_ok();
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        let failed_tests = text
            .lines()
            .filter_map(libtest::parse_result_line)
            .filter(|(_, result)| *result == libtest::TestResult::Failed)
            .map(|(name, _)| name.to_owned())
            .collect();
        let run = RepeatedRun { label: binary.label.clone(), round, passed, failed_tests, log };
        results.lock().expect("no runner panics").push(run);
    });
    let results = results.into_inner().expect("no runner panics");
    let report = pass_rates(&results, times);
    eprintln!("\ntests: {times} runs of each binary in {:.0} s\n{report}", started.elapsed().as_secs_f64());
    if results.iter().any(|run| !run.passed) {
        bail!("a test binary failed in {} of its runs (above)", results.iter().filter(|run| !run.passed).count());
    }
    Ok(())
}

/// Each binary's passing runs of `times`, sorted by label, then every test that failed, with how
/// often and the logs of the runs it failed in. A run that failed with no test marked `FAILED`
/// (a crash, a timeout) is reported as such.
fn pass_rates(results: &[RepeatedRun], times: u32) -> String {
    let mut labels: Vec<&str> = results.iter().map(|run| run.label.as_str()).collect();
    labels.sort_unstable();
    labels.dedup();
    let mut report = String::new();
    for label in labels {
        let mut runs: Vec<&RepeatedRun> = results.iter().filter(|run| run.label == label).collect();
        runs.sort_by_key(|run| run.round);
        let passed = runs.iter().filter(|run| run.passed).count();
        report.push_str(&format!("  {label}: {passed} of {times} runs passed\n"));
        let mut tests: Vec<&str> = runs.iter().flat_map(|run| run.failed_tests.iter().map(String::as_str)).collect();
        tests.sort_unstable();
        tests.dedup();
        for test in tests {
            let failing: Vec<&&RepeatedRun> =
                runs.iter().filter(|run| run.failed_tests.iter().any(|t| t == test)).collect();
            let logs: Vec<String> = failing.iter().map(|run| run.log.display().to_string()).collect();
            report.push_str(&format!("    {test}: failed {} of {times} ({})\n", failing.len(), logs.join(", ")));
        }
        for run in runs.iter().filter(|run| !run.passed && run.failed_tests.is_empty()) {
            report.push_str(&format!(
                "    run {} failed with no test marked FAILED ({})\n",
                run.round,
                run.log.display()
            ));
        }
    }
    report
}

/// Runs one binary with its output in `log_path`, then prints that file whole.
fn run_binary(binary: &TestBinary, brokers: BrokerSource, log_path: &Path) -> Result<()> {
    let log = File::create(log_path).with_context(|| format!("cannot create {}", log_path.display()))?;
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
    let text = std::fs::read_to_string(log_path).unwrap_or_default();
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
    fn the_test_executables_but_the_cells_are_found_integration_tests_first() {
        let messages = [
            artifact("/w/gateway/Cargo.toml", "lib", "gateway", true, Some("/t/gateway-1")),
            artifact("/w/gateway/Cargo.toml", "lib", "gateway", false, None),
            artifact("/w/xtask/Cargo.toml", "bin", "xtask", false, Some("/t/xtask")),
            "Compiling gateway".to_owned(),
            artifact("/w/providers/Cargo.toml", "test", "kafka", true, Some("/t/kafka-2")),
            artifact("/w/generated/Cargo.toml", "test", "kafka", true, Some("/t/kafka-3")),
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

    fn binary(label: &str) -> TestBinary {
        let (folder, executable) = (PathBuf::from("/w"), PathBuf::from("/t/x"));
        TestBinary { label: label.to_owned(), package: String::new(), folder, executable, integration: true }
    }

    #[test]
    fn a_binary_pattern_that_names_none_is_refused_with_the_labels() {
        let binaries = vec![binary("providers test nats"), binary("providers test redis")];
        let picked = chosen(binaries.clone(), &["nats".to_owned()]).unwrap();
        assert_eq!(picked, [binary("providers test nats")]);
        assert_eq!(chosen(binaries.clone(), &[]).unwrap(), binaries);
        let error = chosen(binaries, &["natz".to_owned()]).unwrap_err().to_string();
        assert!(error.contains("\"natz\" names no test binary"), "{error}");
        assert!(error.contains("providers test nats, providers test redis"), "{error}");
    }

    #[test]
    fn pass_rates_name_each_failed_test_with_its_runs_and_a_crash_without_one() {
        let run = |label: &str, round, failed: &[&str], passed| RepeatedRun {
            label: label.to_owned(),
            round,
            passed,
            failed_tests: failed.iter().map(|t| t.to_string()).collect(),
            log: PathBuf::from(format!("/l/{label}-{round}.log")),
        };
        let results = [
            run("redis", 2, &["restart"], false),
            run("nats", 1, &[], true),
            run("redis", 1, &[], true),
            run("nats", 2, &[], false),
        ];
        assert_eq!(
            pass_rates(&results, 2),
            "  nats: 1 of 2 runs passed\n    run 2 failed with no test marked FAILED (/l/nats-2.log)\n  \
             redis: 1 of 2 runs passed\n    restart: failed 1 of 2 (/l/redis-2.log)\n"
        );
    }
}
