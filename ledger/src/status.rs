//! The status of one cell.

use std::fmt;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Status {
    /// Never run.
    Unknown,
    Pass,
    /// Was Deferred and now passes; keeps the reference to the fix.
    Fixed {
        reference: String,
    },
    /// Known not to pass; the generated test is `#[ignore]`d.
    Deferred {
        reference: String,
        reason: String,
    },
}

impl Status {
    /// The status keyword as written in the ledger file.
    pub fn name(&self) -> &'static str {
        match self {
            Status::Unknown => "Unknown",
            Status::Pass => "Pass",
            Status::Fixed { .. } => "Fixed",
            Status::Deferred { .. } => "Deferred",
        }
    }
}

impl fmt::Display for Status {
    /// `Unknown`, `Pass`, `Fixed (#4)`, `Deferred (#4: reason)`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Status::Unknown | Status::Pass => f.write_str(self.name()),
            Status::Fixed { reference } => write!(f, "Fixed ({reference})"),
            Status::Deferred { reference, reason } => write!(f, "Deferred ({reference}: {reason})"),
        }
    }
}

/// How many cells have each status: the summary the Markdown page, the SVG
/// matrix and the review diff all print, counted one way so they agree.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct StatusCounts {
    pub pass: usize,
    pub fixed: usize,
    pub deferred: usize,
    pub unknown: usize,
    /// Cells of the matrix with no ledger row (always 0 when counting a
    /// ledger's own cells).
    pub missing: usize,
}

impl StatusCounts {
    /// Counts one cell; None is a cell without a row.
    pub fn add(&mut self, status: Option<&Status>) {
        match status {
            None => self.missing += 1,
            Some(Status::Pass) => self.pass += 1,
            Some(Status::Fixed { .. }) => self.fixed += 1,
            Some(Status::Deferred { .. }) => self.deferred += 1,
            Some(Status::Unknown) => self.unknown += 1,
        }
    }

    pub fn total(&self) -> usize {
        self.pass + self.fixed + self.deferred + self.unknown + self.missing
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display() {
        assert_eq!(Status::Unknown.to_string(), "Unknown");
        assert_eq!(Status::Pass.to_string(), "Pass");
        let fixed = Status::Fixed { reference: "#4".into() };
        assert_eq!(fixed.to_string(), "Fixed (#4)");
        let deferred = Status::Deferred { reference: "#4".into(), reason: "moto does not honour DelaySeconds".into() };
        assert_eq!(deferred.to_string(), "Deferred (#4: moto does not honour DelaySeconds)");
    }

    #[test]
    fn counts_every_status_and_missing_rows() {
        let mut counts = StatusCounts::default();
        let fixed = Status::Fixed { reference: "#4".into() };
        for status in [Some(&Status::Pass), Some(&Status::Pass), Some(&fixed), Some(&Status::Unknown), None] {
            counts.add(status);
        }
        assert_eq!(counts, StatusCounts { pass: 2, fixed: 1, deferred: 0, unknown: 1, missing: 1 });
        assert_eq!(counts.total(), 5);
    }
}
