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
}
