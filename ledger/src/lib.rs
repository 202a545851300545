//! The conformance ledger: a status for every cell (configuration x
//! behaviour), stored in a sorted, tab-separated file that reviewers read as
//! a diff.
//!
//! Modules, one concept each: [`cell`] (ids), [`status`], [`file`](mod@file) (parse,
//! format, atomic save), [`update`] (applying test results), [`markdown`],
//! [`svg`] (the matrix as a picture), [`fidelity`] (verdicts on a second broker implementation), [`pages`] (the rendered set, written together),
//! [`audit`] (ledger vs `#[ignore]`d tests), [`runs`] (run history),
//! [`evidence`] (what the history says of each cell), [`digest`] (the
//! source digest a run is recorded at), [`diff`] (a change's effect on the
//! ledger, for review), [`error`].

use std::collections::BTreeMap;

pub mod audit;
pub mod cell;
pub mod diff;
pub mod digest;
pub mod error;
pub mod evidence;
pub mod fidelity;
pub mod file;
pub mod markdown;
pub mod pages;
pub mod runs;
pub mod status;
pub mod svg;
pub mod update;

pub use audit::AuditProblem;
pub use cell::{validate_configuration, Behaviour, CellId, NameError};
pub use diff::LedgerDiff;
pub use digest::source_digest;
pub use error::{LedgerError, ParseProblem};
pub use fidelity::{Fidelity, FidelityRow, Verdict};
pub use runs::{
    append_run, check_runs, now_rfc3339, parse_runs, read_runs, with_run_appended, BrokerProvenance, CellRun,
    ConfigurationRun, Flake, RunRecord,
};
pub use status::{Status, StatusCounts};
pub use update::{CellResult, Transition, UpdateReport, VariantResult};

/// Every known cell and its status, kept in file order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Ledger {
    cells: BTreeMap<CellId, Status>,
}

impl Ledger {
    /// An empty ledger.
    pub fn new() -> Self {
        Self::default()
    }

    pub fn get(&self, cell: &CellId) -> Option<&Status> {
        self.cells.get(cell)
    }

    /// All cells in file order (configuration, then FR number).
    pub fn cells(&self) -> impl Iterator<Item = (&CellId, &Status)> {
        self.cells.iter()
    }

    /// Adds every (configuration x behaviour) cell missing as Unknown;
    /// returns the ids it added, in file order.
    pub fn ensure_cells(&mut self, configurations: &[&str], behaviours: &[Behaviour]) -> Vec<CellId> {
        let mut added = Vec::new();
        for configuration in configurations {
            for &behaviour in behaviours {
                let cell = CellId::new(*configuration, behaviour);
                if !self.cells.contains_key(&cell) {
                    self.cells.insert(cell.clone(), Status::Unknown);
                    added.push(cell);
                }
            }
        }
        added.sort();
        added
    }

    /// Cells whose configuration or behaviour is not in the given lists:
    /// stale rows, for the caller to report. Nothing is removed, because a
    /// Deferred row carries a reason that someone wrote by hand.
    pub fn unknown_cells(&self, configurations: &[&str], behaviours: &[Behaviour]) -> Vec<CellId> {
        self.cells
            .keys()
            .filter(|cell| {
                !configurations.contains(&cell.configuration.as_str()) || !behaviours.contains(&cell.behaviour)
            })
            .cloned()
            .collect()
    }

    /// Marks an existing cell Deferred and returns its previous status.
    /// Surrounding whitespace is trimmed from `reference` and `reason`.
    pub fn defer(&mut self, cell: &CellId, reference: &str, reason: &str) -> Result<Status, LedgerError> {
        let reference = deferral_field(cell, "reference", reference)?;
        let reason = deferral_field(cell, "reason", reason)?;
        let status = self.cells.get_mut(cell).ok_or_else(|| LedgerError::UnknownCell { cell: cell.clone() })?;
        Ok(std::mem::replace(status, Status::Deferred { reference, reason }))
    }
}

/// Validates one field of a deferral. Control characters are refused because
/// the file is tab-separated and line-based: a tab or newline would corrupt
/// the row, and a trailing '\r' would be lost on the next read.
fn deferral_field(cell: &CellId, field: &'static str, value: &str) -> Result<String, LedgerError> {
    let value = value.trim();
    if value.is_empty() {
        return Err(LedgerError::EmptyField { cell: cell.clone(), field });
    }
    if value.chars().any(char::is_control) {
        return Err(LedgerError::ControlCharacter { cell: cell.clone(), field, value: value.to_owned() });
    }
    Ok(value.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cell(s: &str) -> CellId {
        s.parse().unwrap()
    }

    fn ledger() -> Ledger {
        let mut ledger = Ledger::new();
        ledger.ensure_cells(&["memory", "sqs"], &[Behaviour::fr(2), Behaviour::fr(9)]);
        ledger
    }

    #[test]
    fn ensure_cells_adds_only_missing_cells_as_unknown() {
        let mut ledger = Ledger::new();
        let added = ledger.ensure_cells(&["sqs", "memory"], &[Behaviour::fr(10), Behaviour::fr(2)]);
        assert_eq!(added, [cell("memory/FR-2"), cell("memory/FR-10"), cell("sqs/FR-2"), cell("sqs/FR-10")]);
        ledger.defer(&cell("sqs/FR-2"), "#4", "why").unwrap();
        let added = ledger.ensure_cells(&["memory", "sqs", "gcp-pull"], &[Behaviour::fr(2)]);
        assert_eq!(added, [cell("gcp-pull/FR-2")]);
        assert_eq!(ledger.get(&cell("gcp-pull/FR-2")), Some(&Status::Unknown));
        assert_eq!(ledger.get(&cell("sqs/FR-2")).unwrap().name(), "Deferred");
    }

    #[test]
    fn unknown_cells_lists_stale_rows() {
        let ledger = ledger();
        assert_eq!(
            ledger.unknown_cells(&["memory"], &[Behaviour::fr(2)]),
            [cell("memory/FR-9"), cell("sqs/FR-2"), cell("sqs/FR-9")]
        );
        assert!(ledger.unknown_cells(&["memory", "sqs"], &[Behaviour::fr(2), Behaviour::fr(9)]).is_empty());
    }

    #[test]
    fn defer_returns_previous_status_and_trims() {
        let mut ledger = ledger();
        let previous = ledger.defer(&cell("sqs/FR-9"), " #4 ", " moto is slow\n").unwrap();
        assert_eq!(previous, Status::Unknown);
        assert_eq!(
            ledger.get(&cell("sqs/FR-9")),
            Some(&Status::Deferred { reference: "#4".into(), reason: "moto is slow".into() })
        );
    }

    #[test]
    fn defer_rejects_unknown_cells() {
        let mut ledger = ledger();
        let err = ledger.defer(&cell("memory/FR-99"), "#4", "why").unwrap_err();
        assert_eq!(err.to_string(), "cell memory/FR-99 is not in the ledger");
    }

    #[test]
    fn defer_rejects_empty_fields() {
        let mut ledger = ledger();
        let err = ledger.defer(&cell("sqs/FR-9"), " ", "why").unwrap_err();
        assert_eq!(
            err.to_string(),
            "cannot defer sqs/FR-9: the reference is empty; a Deferred cell needs a reference (e.g. #4) and a reason"
        );
        let err = ledger.defer(&cell("sqs/FR-9"), "#4", "").unwrap_err();
        assert!(matches!(err, LedgerError::EmptyField { field: "reason", .. }), "{err}");
        assert_eq!(ledger.get(&cell("sqs/FR-9")), Some(&Status::Unknown));
    }

    #[test]
    fn defer_rejects_tabs_and_newlines() {
        let mut ledger = ledger();
        let err = ledger.defer(&cell("sqs/FR-9"), "#4", "one\ttwo").unwrap_err();
        assert_eq!(
            err.to_string(),
            r#"cannot defer sqs/FR-9: the reason "one\ttwo" contains a tab, line break or other control character, which the tab-separated, one-cell-per-line ledger cannot hold"#
        );
        let err = ledger.defer(&cell("sqs/FR-9"), "#4\n#5", "why").unwrap_err();
        assert!(matches!(err, LedgerError::ControlCharacter { field: "reference", .. }), "{err}");
        assert_eq!(ledger.get(&cell("sqs/FR-9")), Some(&Status::Unknown));
    }
}
