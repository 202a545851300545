//! Writing a run's results into a ledger folder: the one path by which results become ledger
//! state, shared by an unsharded `cargo xtask conformance` and `cargo xtask ledger merge`, so a
//! merged sharded run cannot drift from an unsharded one. The update rules themselves are
//! `ledger::Ledger::apply`; this module only sequences the writes around them.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use generator::Manifest;
use ledger::{CellResult, Ledger, RunRecord, UpdateReport};

/// What applying results did, and what fails the run.
pub(crate) struct Applied {
    pub(crate) report: UpdateReport,
    /// One line per regression, failing cell and (when every variant ran) incomplete cell.
    pub(crate) problems: Vec<String>,
}

/// Applies `results` to `ledger` by the update rules and writes the folder as one change:
/// `cells.tsv`, `runs.jsonl` with `record` appended, and the pages rendered from them (`LEDGER.md`,
/// `LEDGER.svg`) are staged, then renamed into place together, so a failure leaves every one as it
/// was. For the project's own ledger/ the generated code is regenerated after (a Fixed cell loses
/// its `#[ignore]`): derived from the ledger just written, it is redone by `cargo xtask generate`
/// if that fails, and `generate --check` finds it stale until then.
/// `every_variant`: whether the run covered both pump variants, so a cell missing one is a problem.
pub(crate) fn apply(
    root: &Path,
    manifest: &Manifest,
    ledger_dir: &Path,
    ledger: &mut Ledger,
    results: &[CellResult],
    record: &RunRecord,
    every_variant: bool,
) -> Result<Applied> {
    let report = ledger.apply(results);
    let (cells_path, runs_path) = (ledger_dir.join("cells.tsv"), ledger_dir.join("runs.jsonl"));
    let cells = ledger.text_for(&cells_path)?;
    let runs = ledger::with_run_appended(&runs_path, record)?;
    let rows: Vec<(&str, &str)> =
        manifest.configurations.iter().map(|c| (c.name.as_str(), c.transport.as_str())).collect();
    let pages = ledger.render_pages(&rows, &manifest.behaviour_ids(), &ledger::runs::parse_runs(&runs, &runs_path)?);
    let page_paths: Vec<PathBuf> = pages.iter().map(|(name, _)| ledger_dir.join(name)).collect();
    let mut files = vec![(cells_path.as_path(), cells.as_str()), (runs_path.as_path(), runs.as_str())];
    files.extend(page_paths.iter().zip(&pages).map(|(path, (_, page))| (path.as_path(), page.as_str())));
    // An interrupt waits until the generated code is written too.
    let _interrupts_wait = crate::interrupts::Deferred::begin();
    ledger::file::write_together(&files)?;
    if ledger_dir == root.join(generator::LEDGER_DIR) {
        generator::generate(root, generator::Mode::Write).with_context(|| {
            format!(
                "the ledger in {} is written, but generated/ could not be regenerated from it; run `{}`",
                ledger_dir.display(),
                generator::COMMAND
            )
        })?;
    }
    Ok(Applied { problems: problems(ledger, &report, every_variant), report })
}

/// What [`apply`] would report, on a copy: a shard's run says what the merge will find without
/// touching the ledger.
pub(crate) fn preview(ledger: &Ledger, results: &[CellResult], every_variant: bool) -> Applied {
    let mut copy = ledger.clone();
    let report = copy.apply(results);
    Applied { problems: problems(&copy, &report, every_variant), report }
}

/// What a `--check` run finds: [`preview`]'s problems, and every change the run would make to
/// the ledger, as a check writes nothing and a change left unrecorded would be lost.
pub(crate) fn check(ledger: &Ledger, results: &[CellResult], every_variant: bool) -> Applied {
    let mut applied = preview(ledger, results, every_variant);
    let record = "run `cargo xtask conformance` and commit the ledger";
    for cell in &applied.report.added {
        applied.problems.push(format!("unrecorded: {cell} has no ledger row; {record}"));
    }
    for transition in applied.report.transitions.iter().filter(|t| !applied.report.added.contains(&t.cell)) {
        applied.problems.push(format!(
            "unrecorded: {} would go {} -> {}; {record}",
            transition.cell, transition.from, transition.to
        ));
    }
    applied
}

fn problems(ledger: &Ledger, report: &UpdateReport, every_variant: bool) -> Vec<String> {
    let mut problems = Vec::new();
    for cell in &report.regressions {
        problems.push(format!(
            "regression: {cell} was {} and now fails",
            ledger.get(cell).map_or("?".into(), ToString::to_string)
        ));
    }
    for cell in &report.failing {
        problems.push(format!("failing: {cell} fails and is not Deferred (defer it with a reason, or fix it)"));
    }
    // A run narrowed to one variant cannot complete a cell; that is what was asked for.
    if every_variant {
        for cell in &report.incomplete {
            problems.push(format!("incomplete: {cell} did not run in both pump variants"));
        }
    }
    problems
}

#[cfg(test)]
mod tests {
    use super::*;
    use ledger::{CellId, VariantResult};

    /// The worst moment for the generated tree: the ledger is written, then regenerating fails
    /// (here: a root without templates). The ledger is complete, and the error says how to finish.
    #[test]
    fn a_generated_tree_that_cannot_be_regenerated_leaves_the_ledger_complete_and_says_so() {
        let project = crate::root();
        let manifest = Manifest::load(&project.join(generator::MANIFEST), &project.join("templates")).unwrap();
        let root = tempfile::tempdir().unwrap();
        let ledger_dir = root.path().join(generator::LEDGER_DIR);
        std::fs::create_dir(&ledger_dir).unwrap();
        let cells_path = ledger_dir.join("cells.tsv");
        std::fs::copy(project.join(generator::LEDGER), &cells_path).unwrap();
        let mut ledger = Ledger::load(&cells_path).unwrap();
        let cell: CellId = "memory/DC-1".parse().unwrap();
        let passed = CellResult { cell: cell.clone(), reactor: VariantResult::Passed, proactor: VariantResult::Passed };
        let record =
            RunRecord { date: "2026-12-03T00:00:00Z".into(), commit: "abc1234".into(), ..RunRecord::default() };

        let outcome = apply(root.path(), &manifest, &ledger_dir, &mut ledger, &[passed], &record, true);
        let message = format!("{:#}", outcome.err().expect("regenerating fails"));
        assert!(message.contains("is written, but generated/ could not be regenerated"), "{message}");
        assert!(message.contains("run `cargo xtask generate`"), "{message}");
        // Complete: the new status, its record and the pages rendered from them.
        let written = Ledger::load(&cells_path).unwrap();
        assert_eq!(
            written.get(&cell).map(ToString::to_string).as_deref(),
            Some("Fixed (#26)"),
            "Deferred, now passing"
        );
        assert_eq!(ledger::read_runs(&ledger_dir.join("runs.jsonl")).unwrap(), [record]);
        let page = std::fs::read_to_string(ledger_dir.join(ledger::pages::MARKDOWN)).unwrap();
        let row = page.lines().find(|line| line.starts_with("| memory |")).expect("a row for memory");
        assert!(row.contains("| Fixed (#26) |"), "the page shows the new status: {row}");
        assert!(ledger_dir.join(ledger::pages::SVG).exists());
    }
}
