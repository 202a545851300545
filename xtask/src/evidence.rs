//! What a run record says about a run: each cell's result, the configurations' tallies and
//! flakes, and where the evidence came from (commit, a dirty tree, toolchain, source digest, the
//! brokers).

use std::collections::BTreeMap;
use std::process::Command;

use ledger::{ConfigurationRun, RunRecord};

use crate::libtest::TestResult;
use crate::root;
use crate::runner::BinaryRun;
use crate::test_names::{TestCell, TestNames};

/// Whether the working tree has changes git would show (the commit alone does not say what ran).
pub(crate) fn git_dirty() -> bool {
    Command::new("git")
        .current_dir(root())
        .args(["status", "--porcelain"])
        .output()
        .is_ok_and(|output| !output.stdout.is_empty())
}

/// `rustc -V` of the toolchain that built the cells.
pub(crate) fn toolchain() -> Option<String> {
    let output = Command::new("rustc").current_dir(root()).arg("-V").output().ok()?;
    output.status.success().then(|| String::from_utf8_lossy(&output.stdout).trim().to_owned())
}

pub(crate) fn git_commit() -> String {
    Command::new("git")
        .current_dir(root())
        .args(["rev-parse", "--short", "HEAD"])
        .output()
        .ok()
        .filter(|output| output.status.success())
        .map_or_else(|| "unknown".into(), |output| String::from_utf8_lossy(&output.stdout).trim().to_owned())
}

pub(crate) fn run_record(runs: &[BinaryRun], names: &TestNames, digest: String) -> RunRecord {
    let mut tallies: BTreeMap<(String, String), ConfigurationRun> = BTreeMap::new();
    let mut cells = Vec::new();
    for run in runs {
        for finished in &run.finished {
            let Some(TestCell { cell, variant }) = names.cell(&finished.name) else { continue };
            let configuration = &cell.configuration;
            let flaky = run.flakes.iter().any(|f| f.cell == cell && f.variant == variant);
            let result = match finished.result {
                TestResult::Ok if flaky => ledger::CellRun::FLAKY,
                TestResult::Ok => ledger::CellRun::PASSED,
                TestResult::Failed => ledger::CellRun::FAILED,
                TestResult::Ignored => ledger::CellRun::SKIPPED,
            };
            cells.push(ledger::CellRun {
                cell: cell.to_string(),
                variant: variant.to_owned(),
                result: result.to_owned(),
                duration_ms: finished.elapsed.as_millis() as u64,
            });
            let tally =
                tallies.entry((configuration.to_string(), variant.to_owned())).or_insert_with(|| ConfigurationRun {
                    configuration: configuration.to_string(),
                    variant: variant.to_owned(),
                    passed: 0,
                    failed: 0,
                    skipped: 0,
                    wall_ms: run.wall.as_millis() as u64,
                    flakes: run
                        .flakes
                        .iter()
                        .filter(|f| f.cell.configuration == *configuration && f.variant == variant)
                        .map(|f| ledger::Flake {
                            cell: f.cell.to_string(),
                            variant: f.variant.clone(),
                            first_failure: f.first_failure.clone(),
                        })
                        .collect(),
                });
            match finished.result {
                TestResult::Ok => tally.passed += 1,
                TestResult::Failed => tally.failed += 1,
                TestResult::Ignored => tally.skipped += 1,
            }
        }
    }
    cells.sort_by(|a, b| (&a.cell, &a.variant).cmp(&(&b.cell, &b.variant)));
    RunRecord {
        date: ledger::now_rfc3339(),
        commit: git_commit(),
        dirty: git_dirty(),
        toolchain: toolchain(),
        digest: Some(digest),
        brokers: runs.iter().map(|run| run.broker.clone()).collect(),
        configurations: tallies.into_values().collect(),
        cells,
    }
}
