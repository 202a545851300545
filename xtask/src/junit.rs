//! The run as JUnit XML: one suite per configuration and variant, one case per behaviour.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{Context, Result};

use crate::libtest::TestResult;
use crate::runner::BinaryRun;
use crate::test_names::{TestCell, TestNames};
use quick_junit::{NonSuccessKind, Report, TestCase, TestCaseStatus, TestSuite};

pub fn write(path: &Path, runs: &[BinaryRun], names: &TestNames) -> Result<()> {
    let mut suites: BTreeMap<String, TestSuite> = BTreeMap::new();
    for run in runs {
        for finished in &run.finished {
            let Some(TestCell { cell, variant }) = names.cell(&finished.name) else { continue };
            let (configuration, number) = (&cell.configuration, cell.behaviour);
            let status = match finished.result {
                TestResult::Ok => TestCaseStatus::success(),
                TestResult::Ignored => TestCaseStatus::skipped(),
                TestResult::Failed => {
                    let mut status = TestCaseStatus::non_success(NonSuccessKind::Failure);
                    if let Some(text) = run.failures.get(&finished.name) {
                        status.set_description(text.clone());
                    }
                    status
                }
            };
            let mut case = TestCase::new(format!("{number} {}", finished.name), status);
            case.set_classname(format!("{configuration}.{variant}"));
            case.set_time(finished.elapsed);
            suites
                .entry(format!("{configuration}/{variant}"))
                .or_insert_with_key(|name| TestSuite::new(name.clone()))
                .add_test_case(case);
        }
    }
    let mut report = Report::new("conformance");
    report.add_test_suites(suites.into_values());
    let xml = report.to_string().context("rendering JUnit XML")?;
    // Atomically: a report cut short by an interrupt would read as a different run.
    ledger::file::write_atomically(path, &xml).with_context(|| format!("writing {}", path.display()))
}
