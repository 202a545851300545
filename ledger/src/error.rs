//! The crate's error types. Messages carry no trailing period and name the
//! file (and line) they concern, so callers can print them as they are.
//!
//! Underlying I/O and JSON errors are part of the message rather than exposed
//! as `source()`, so that error-chain printers do not show them twice.

use std::path::PathBuf;

use crate::cell::{CellId, NameError};

#[derive(Debug, thiserror::Error)]
pub enum LedgerError {
    #[error("cannot read {}: {error}", path.display())]
    Read { path: PathBuf, error: std::io::Error },

    #[error("cannot write {}: {error}", path.display())]
    Write { path: PathBuf, error: std::io::Error },

    #[error("{}:{line}: {problem}", path.display())]
    Parse {
        path: PathBuf,
        /// 1-based.
        line: usize,
        problem: ParseProblem,
    },

    #[error("refusing to write {}: cell {cell} cannot be written: {problem}", path.display())]
    InvalidCell { path: PathBuf, cell: CellId, problem: NameError },

    #[error("cell {cell} is not in the ledger")]
    UnknownCell { cell: CellId },

    #[error("cannot defer {cell}: the {field} is empty; a Deferred cell needs a reference (e.g. #4) and a reason")]
    EmptyField { cell: CellId, field: &'static str },

    #[error("cannot defer {cell}: the {field} {value:?} contains a tab, line break or other control character, which the tab-separated, one-cell-per-line ledger cannot hold")]
    ControlCharacter { cell: CellId, field: &'static str, value: String },

    #[error("{}:{line}: invalid run record: {error}", path.display())]
    RunRecord {
        path: PathBuf,
        /// 1-based.
        line: usize,
        error: serde_json::Error,
    },

    #[error("{}:{line}: the last line is torn (it has no line end): {start:?}; refusing to append a run record after it: finish or remove that line by hand", path.display())]
    TornRunLog {
        path: PathBuf,
        /// 1-based: the last line.
        line: usize,
        /// The start of the torn line.
        start: String,
    },
}

/// What is wrong with one line of the ledger file.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParseProblem {
    #[error(
        "expected 3 to 5 tab-separated fields (configuration, behaviour, status, reference, reason), found {found}"
    )]
    FieldCount { found: usize },

    #[error(transparent)]
    Name(#[from] NameError),

    #[error("unknown status {found:?}; expected one of Unknown, Pass, Fixed, Deferred")]
    UnknownStatus { found: String },

    #[error("{status} takes {} tab-separated fields ({}), found {found}", layout(.status).0, layout(.status).1)]
    StatusFields { status: &'static str, found: usize },

    #[error("{status} has an empty {field}; Fixed needs a reference and Deferred needs a reference and a reason")]
    EmptyField { status: &'static str, field: &'static str },

    #[error("duplicate cell {cell}; it is already on line {first_line}")]
    DuplicateCell { cell: CellId, first_line: usize },

    #[error(
        "expected 5 or 6 tab-separated fields (configuration, behaviour, implementation, reactor, proactor, note), found {found}"
    )]
    FidelityFieldCount { found: usize },

    #[error("unknown verdict {found:?}; expected one of Pass, Fail, NotRun")]
    UnknownVerdict { found: String },

    #[error("implementation {found:?} is not a name (lowercase ASCII letters, digits, '-' and '.')")]
    Implementation { found: String },

    #[error("duplicate row for {cell} on {implementation}; it is already on line {first_line}")]
    DuplicateFidelityRow { cell: CellId, implementation: String, first_line: usize },
}

/// Field count and field names a line with `status` must have.
fn layout(status: &str) -> (usize, &'static str) {
    match status {
        "Fixed" => (4, "configuration, behaviour, Fixed, reference"),
        "Deferred" => (5, "configuration, behaviour, Deferred, reference, reason"),
        "Pass" => (3, "configuration, behaviour, Pass"),
        _ => (3, "configuration, behaviour, Unknown"),
    }
}
