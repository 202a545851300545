//! Cross-checking the ledger against the generated tests: a test is
//! `#[ignore]`d exactly when its cell is Deferred.

use std::collections::BTreeSet;
use std::fmt;

use crate::{CellId, Ledger, Status};

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AuditProblem {
    /// The generated test is ignored, but the ledger does not excuse it.
    IgnoredButNotDeferred { cell: CellId, status: Status },
    /// The generated test is ignored, and the ledger has no row for it.
    IgnoredButNotInLedger { cell: CellId },
    /// The ledger excuses the cell, but its test still runs.
    DeferredButNotIgnored { cell: CellId },
}

impl AuditProblem {
    pub fn cell(&self) -> &CellId {
        match self {
            AuditProblem::IgnoredButNotDeferred { cell, .. }
            | AuditProblem::IgnoredButNotInLedger { cell }
            | AuditProblem::DeferredButNotIgnored { cell } => cell,
        }
    }
}

impl fmt::Display for AuditProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AuditProblem::IgnoredButNotDeferred { cell, status } => write!(
                f,
                "{cell}: the generated test is #[ignore]d but the ledger says {status}; only Deferred cells may be ignored"
            ),
            AuditProblem::IgnoredButNotInLedger { cell } => write!(
                f,
                "{cell}: the generated test is #[ignore]d but the cell is not in the ledger; only Deferred cells may be ignored"
            ),
            AuditProblem::DeferredButNotIgnored { cell } => write!(
                f,
                "{cell}: the ledger says Deferred but the generated test is not #[ignore]d"
            ),
        }
    }
}

impl Ledger {
    /// Compares the ledger with the set of cells whose generated tests are
    /// `#[ignore]`d. Problems are sorted by cell.
    pub fn audit(&self, ignored_tests: &BTreeSet<CellId>) -> Vec<AuditProblem> {
        let mut problems = Vec::new();
        for (cell, status) in self.cells() {
            let ignored = ignored_tests.contains(cell);
            match status {
                Status::Deferred { .. } if !ignored => {
                    problems.push(AuditProblem::DeferredButNotIgnored { cell: cell.clone() })
                }
                Status::Deferred { .. } => {}
                _ if ignored => {
                    problems.push(AuditProblem::IgnoredButNotDeferred { cell: cell.clone(), status: status.clone() })
                }
                _ => {}
            }
        }
        for cell in ignored_tests {
            if self.get(cell).is_none() {
                problems.push(AuditProblem::IgnoredButNotInLedger { cell: cell.clone() });
            }
        }
        problems.sort_by(|a, b| a.cell().cmp(b.cell()));
        problems
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn cell(s: &str) -> CellId {
        s.parse().unwrap()
    }

    fn ledger() -> Ledger {
        let text = "\
memory\tFR-2\tPass
sqs\tFR-9\tDeferred\t#4\tmoto does not honour DelaySeconds
sqs\tFR-10\tDeferred\t#5\tno dead-letter queue in moto
";
        Ledger::parse(text, Path::new("cells.tsv")).unwrap()
    }

    #[test]
    fn consistent_ledger_has_no_problems() {
        let ignored = BTreeSet::from([cell("sqs/FR-9"), cell("sqs/FR-10")]);
        assert_eq!(ledger().audit(&ignored), []);
    }

    #[test]
    fn finds_problems_in_both_directions() {
        let ignored = BTreeSet::from([cell("memory/FR-2"), cell("sqs/FR-9"), cell("gcp-pull/FR-1")]);
        let problems = ledger().audit(&ignored);
        assert_eq!(
            problems,
            [
                AuditProblem::IgnoredButNotInLedger { cell: cell("gcp-pull/FR-1") },
                AuditProblem::IgnoredButNotDeferred { cell: cell("memory/FR-2"), status: Status::Pass },
                AuditProblem::DeferredButNotIgnored { cell: cell("sqs/FR-10") },
            ]
        );
        let messages: Vec<String> = problems.iter().map(ToString::to_string).collect();
        assert_eq!(
            messages,
            [
                "gcp-pull/FR-1: the generated test is #[ignore]d but the cell is not in the ledger; only Deferred cells may be ignored",
                "memory/FR-2: the generated test is #[ignore]d but the ledger says Pass; only Deferred cells may be ignored",
                "sqs/FR-10: the ledger says Deferred but the generated test is not #[ignore]d",
            ]
        );
    }
}
