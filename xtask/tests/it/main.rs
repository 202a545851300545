//! End-to-end proofs that the harness can fail: run the real `cargo xtask conformance` on the
//! in-memory transport against a scratch ledger, with and without a deliberate fault.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

/// A scratch ledger folder holding a copy of the project's cells.
fn scratch_ledger() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(root().join("ledger/cells.tsv"), dir.path().join("cells.tsv")).unwrap();
    dir
}

fn conformance(ledger: &Path, fault: Option<&str>) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_xtask"));
    command.args(["conformance", "--ledger-dir"]).arg(ledger);
    match fault {
        Some(fault) => command.env("CONFORMANCE_FAULT", fault),
        None => command.env_remove("CONFORMANCE_FAULT"),
    };
    command.output().unwrap()
}

fn row(ledger: &Path, cell: &str) -> String {
    let text = std::fs::read_to_string(ledger.join("cells.tsv")).unwrap();
    let (configuration, behaviour) = cell.split_once('/').unwrap();
    let prefix = format!("{configuration}\t{behaviour}\t");
    text.lines().find(|line| line.starts_with(&prefix)).unwrap_or_else(|| panic!("no row for {cell}")).to_owned()
}

#[test]
fn a_requeue_that_forgets_the_count_turns_fr23_red_and_names_the_regression() {
    let ledger = scratch_ledger();
    assert_eq!(row(ledger.path(), "memory/FR-23"), "memory\tFR-23\tPass", "the project's ledger must start green");

    let output = conformance(ledger.path(), Some("stale-requeue"));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "the run must fail:\n{stderr}");
    assert!(stderr.contains("regression: memory/FR-23 was Pass and now fails"), "{stderr}");
    assert!(stderr.contains("a budget of R = 3 rejects by dispatch 3"), "the failure says why: {stderr}");
    // Only the budget depends on the count growing: every other cell still passes.
    assert_eq!(stderr.matches("regression:").count(), 1, "{stderr}");
    // A regression is reported, never written down as a deferral.
    assert_eq!(row(ledger.path(), "memory/FR-23"), "memory\tFR-23\tPass");
    let runs = std::fs::read_to_string(ledger.path().join("runs.jsonl")).unwrap();
    assert!(runs.contains("\"failed\":1"), "the run record counts the failure: {runs}");
}

#[test]
fn a_healthy_run_keeps_every_memory_cell_pass_and_renders_the_matrix() {
    let ledger = scratch_ledger();
    let output = conformance(ledger.path(), None);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    assert!(stderr.contains("[ 24/24]"), "progress covers the matrix: {stderr}");
    let markdown = std::fs::read_to_string(ledger.path().join("LEDGER.md")).unwrap();
    let memory_row = markdown.lines().find(|line| line.starts_with("| memory |")).unwrap();
    assert_eq!(memory_row.matches("| Pass").count(), 12, "{memory_row}");
}

#[test]
fn an_unknown_transport_is_refused_with_the_valid_choices() {
    let ledger = scratch_ledger();
    let output = Command::new(env!("CARGO_BIN_EXE_xtask"))
        .args(["conformance", "--transport", "kafka", "--ledger-dir"])
        .arg(ledger.path())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success());
    assert!(
        stderr.contains("--transport kafka: no such transport in templates/manifest.yaml; valid choices: memory"),
        "{stderr}"
    );
}
