//! Applying test results to the ledger.
//!
//! The rules only ever move a cell towards better news (Unknown -> Pass,
//! Deferred -> Fixed). A failure never rewrites a status: it is reported, and
//! deferring a cell is a human decision made with `Ledger::defer`.

use crate::{CellId, Ledger, Status};

/// The outcome of one pump variant's generated test for a cell.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VariantResult {
    Passed,
    Failed,
    NotRun,
}

/// Both variants' results for one cell. A cell passes only if the reactor
/// and the proactor variant both passed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CellResult {
    pub cell: CellId,
    pub reactor: VariantResult,
    pub proactor: VariantResult,
}

/// A status change made by [`Ledger::apply`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transition {
    pub cell: CellId,
    pub from: Status,
    pub to: Status,
}

/// What [`Ledger::apply`] did and found. Every list is sorted by cell.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UpdateReport {
    /// Cells that had a result but no row; inserted as Unknown before the
    /// result was applied.
    pub added: Vec<CellId>,
    /// Status changes (Unknown -> Pass, Deferred -> Fixed).
    pub transitions: Vec<Transition>,
    /// Pass or Fixed cells that failed. Their status is left as it is.
    pub regressions: Vec<CellId>,
    /// Unknown cells that failed: candidates for fixing or deferring.
    pub failing: Vec<CellId>,
    /// Deferred cells that still fail, as expected.
    pub still_deferred: Vec<CellId>,
    /// Cells where one variant passed and the other did not run: not enough
    /// to call the cell passed, so the status is left as it is.
    pub incomplete: Vec<CellId>,
}

/// A cell's combined outcome over both variants.
enum Outcome {
    Passed,
    Failed,
    NotRun,
    Incomplete,
}

impl CellResult {
    fn outcome(&self) -> Outcome {
        use VariantResult::{Failed, NotRun, Passed};
        match (self.reactor, self.proactor) {
            (Failed, _) | (_, Failed) => Outcome::Failed,
            (Passed, Passed) => Outcome::Passed,
            (NotRun, NotRun) => Outcome::NotRun,
            (Passed, NotRun) | (NotRun, Passed) => Outcome::Incomplete,
        }
    }
}

impl Ledger {
    /// Applies test results by the rules in the module docs and reports
    /// what changed and what needs attention.
    pub fn apply(&mut self, results: &[CellResult]) -> UpdateReport {
        let mut report = UpdateReport::default();
        for result in results {
            let cell = result.cell.clone();
            if !self.cells.contains_key(&cell) {
                self.cells.insert(cell.clone(), Status::Unknown);
                report.added.push(cell.clone());
            }
            let status = self.cells.get_mut(&cell).expect("inserted above");
            match result.outcome() {
                Outcome::NotRun => {}
                Outcome::Incomplete => report.incomplete.push(cell),
                Outcome::Passed => {
                    let next = match status {
                        Status::Unknown => Status::Pass,
                        // The reference now points at the fix for the deferral.
                        Status::Deferred { reference, .. } => Status::Fixed { reference: reference.clone() },
                        Status::Pass | Status::Fixed { .. } => continue,
                    };
                    let from = std::mem::replace(status, next.clone());
                    report.transitions.push(Transition { cell, from, to: next });
                }
                Outcome::Failed => match status {
                    Status::Pass | Status::Fixed { .. } => report.regressions.push(cell),
                    Status::Deferred { .. } => report.still_deferred.push(cell),
                    Status::Unknown => report.failing.push(cell),
                },
            }
        }
        // Results may arrive in test-completion order; report in file order.
        report.added.sort();
        report.transitions.sort_by(|a, b| a.cell.cmp(&b.cell));
        report.regressions.sort();
        report.failing.sort();
        report.still_deferred.sort();
        report.incomplete.sort();
        report
    }
}

#[cfg(test)]
mod tests {
    use super::VariantResult::{Failed, NotRun, Passed};
    use super::*;
    use crate::Behaviour;

    fn cell(s: &str) -> CellId {
        s.parse().unwrap()
    }

    fn result(s: &str, reactor: VariantResult, proactor: VariantResult) -> CellResult {
        CellResult { cell: cell(s), reactor, proactor }
    }

    fn fixed(reference: &str) -> Status {
        Status::Fixed { reference: reference.into() }
    }

    fn deferred() -> Status {
        Status::Deferred { reference: "#4".into(), reason: "moto does not honour DelaySeconds".into() }
    }

    /// memory/FR-1 Unknown, FR-2 Pass, FR-3 Fixed (#3), FR-4 Deferred (#4: ...).
    fn ledger() -> Ledger {
        let mut ledger = Ledger::new();
        ledger.ensure_cells(&["memory"], &[Behaviour::fr(1), Behaviour::fr(2), Behaviour::fr(3), Behaviour::fr(4)]);
        ledger.cells.insert(cell("memory/FR-2"), Status::Pass);
        ledger.cells.insert(cell("memory/FR-3"), fixed("#3"));
        ledger.cells.insert(cell("memory/FR-4"), deferred());
        ledger
    }

    fn all(reactor: VariantResult, proactor: VariantResult) -> Vec<CellResult> {
        ["memory/FR-1", "memory/FR-2", "memory/FR-3", "memory/FR-4"]
            .iter()
            .map(|c| result(c, reactor, proactor))
            .collect()
    }

    #[test]
    fn passing_promotes_unknown_and_deferred_only() {
        let mut ledger = ledger();
        let report = ledger.apply(&all(Passed, Passed));
        assert_eq!(
            report.transitions,
            [
                Transition { cell: cell("memory/FR-1"), from: Status::Unknown, to: Status::Pass },
                // Deferred -> Fixed keeps the reference.
                Transition { cell: cell("memory/FR-4"), from: deferred(), to: fixed("#4") },
            ]
        );
        assert_eq!(ledger.get(&cell("memory/FR-1")), Some(&Status::Pass));
        assert_eq!(ledger.get(&cell("memory/FR-2")), Some(&Status::Pass));
        assert_eq!(ledger.get(&cell("memory/FR-3")), Some(&fixed("#3")));
        assert_eq!(ledger.get(&cell("memory/FR-4")), Some(&fixed("#4")));
        assert_eq!(report, UpdateReport { transitions: report.transitions.clone(), ..UpdateReport::default() });
    }

    #[test]
    fn failing_changes_nothing_and_is_classified() {
        let mut ledger = ledger();
        let before = ledger.clone();
        let report = ledger.apply(&all(Passed, Failed));
        assert_eq!(ledger, before, "a failure never rewrites a status");
        assert_eq!(
            report,
            UpdateReport {
                regressions: vec![cell("memory/FR-2"), cell("memory/FR-3")],
                failing: vec![cell("memory/FR-1")],
                still_deferred: vec![cell("memory/FR-4")],
                ..UpdateReport::default()
            }
        );
    }

    #[test]
    fn either_variant_failing_fails_the_cell() {
        for (reactor, proactor) in
            [(Failed, Passed), (Passed, Failed), (Failed, NotRun), (NotRun, Failed), (Failed, Failed)]
        {
            let mut ledger = ledger();
            let report = ledger.apply(&[result("memory/FR-2", reactor, proactor)]);
            assert_eq!(report.regressions, [cell("memory/FR-2")], "{reactor:?}/{proactor:?}");
            assert_eq!(ledger.get(&cell("memory/FR-2")), Some(&Status::Pass));
        }
    }

    #[test]
    fn not_run_leaves_everything_alone() {
        let mut ledger = ledger();
        let before = ledger.clone();
        let report = ledger.apply(&all(NotRun, NotRun));
        assert_eq!(ledger, before);
        assert_eq!(report, UpdateReport::default());
    }

    #[test]
    fn one_variant_not_run_is_incomplete() {
        let mut ledger = ledger();
        let before = ledger.clone();
        let report = ledger.apply(&[result("memory/FR-1", Passed, NotRun), result("memory/FR-4", NotRun, Passed)]);
        assert_eq!(ledger, before);
        assert_eq!(
            report,
            UpdateReport { incomplete: vec![cell("memory/FR-1"), cell("memory/FR-4")], ..UpdateReport::default() }
        );
    }

    #[test]
    fn never_produces_deferred() {
        for reactor in [Passed, Failed, NotRun] {
            for proactor in [Passed, Failed, NotRun] {
                let mut ledger = ledger();
                ledger.apply(&all(reactor, proactor));
                let deferred: Vec<_> = ledger
                    .cells()
                    .filter(|(_, s)| matches!(s, Status::Deferred { .. }))
                    .map(|(c, _)| c.clone())
                    .collect();
                // Only the cell that started Deferred may still be Deferred.
                assert!(deferred.iter().all(|c| *c == cell("memory/FR-4")), "{deferred:?}");
            }
        }
    }

    #[test]
    fn results_for_new_cells_insert_them_first() {
        let mut ledger = ledger();
        let report = ledger.apply(&[result("sqs/FR-2", Failed, Passed), result("gcp-pull/FR-2", Passed, Passed)]);
        assert_eq!(report.added, [cell("gcp-pull/FR-2"), cell("sqs/FR-2")]);
        assert_eq!(report.failing, [cell("sqs/FR-2")]);
        assert_eq!(
            report.transitions,
            [Transition { cell: cell("gcp-pull/FR-2"), from: Status::Unknown, to: Status::Pass }]
        );
        assert_eq!(ledger.get(&cell("sqs/FR-2")), Some(&Status::Unknown));
        assert_eq!(ledger.get(&cell("gcp-pull/FR-2")), Some(&Status::Pass));
    }
}
