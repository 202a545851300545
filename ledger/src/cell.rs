//! Cell identity: a configuration crossed with a behaviour (an FR id).

use std::fmt;
use std::str::FromStr;

/// A functional requirement number; displayed and parsed as `FR-<n>`.
/// Ordered numerically, so FR-2 sorts before FR-10.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Behaviour(pub u32);

impl fmt::Display for Behaviour {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "FR-{}", self.0)
    }
}

impl FromStr for Behaviour {
    type Err = NameError;

    fn from_str(s: &str) -> Result<Self, NameError> {
        let invalid = || NameError::Behaviour(s.to_owned());
        let digits = s.strip_prefix("FR-").ok_or_else(invalid)?;
        // Only the canonical spelling (no sign, no leading zeros), so that a
        // parsed file is written back byte for byte.
        let canonical = !digits.is_empty()
            && digits.bytes().all(|b| b.is_ascii_digit())
            && (digits == "0" || !digits.starts_with('0'));
        if !canonical {
            return Err(invalid());
        }
        digits.parse().map(Behaviour).map_err(|_| invalid())
    }
}

/// One configuration x one behaviour. Ordered by configuration (string
/// order), then behaviour (numeric), which is the order of the ledger file.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct CellId {
    pub configuration: String,
    pub behaviour: Behaviour,
}

impl CellId {
    /// Does not validate the configuration name; `Ledger::save` does.
    pub fn new(configuration: impl Into<String>, behaviour: Behaviour) -> Self {
        CellId { configuration: configuration.into(), behaviour }
    }
}

impl fmt::Display for CellId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.configuration, self.behaviour)
    }
}

impl FromStr for CellId {
    type Err = NameError;

    /// Parses `memory/FR-23`.
    fn from_str(s: &str) -> Result<Self, NameError> {
        let (configuration, behaviour) = s.split_once('/').ok_or_else(|| NameError::Cell(s.to_owned()))?;
        validate_configuration(configuration)?;
        Ok(CellId::new(configuration, behaviour.parse()?))
    }
}

/// Checks that `name` is a configuration name: lowercase ASCII letters,
/// digits and '-', starting with a letter.
pub fn validate_configuration(name: &str) -> Result<(), NameError> {
    let starts_with_letter = name.starts_with(|c: char| c.is_ascii_lowercase());
    let allowed = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-';
    if starts_with_letter && name.chars().all(allowed) {
        Ok(())
    } else {
        Err(NameError::Configuration(name.to_owned()))
    }
}

/// A malformed configuration, behaviour or cell name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NameError {
    #[error("invalid behaviour {0:?}; expected FR-<n> with <n> a number without leading zeros, e.g. FR-23")]
    Behaviour(String),

    #[error("invalid configuration {0:?}; expected lowercase ASCII letters, digits and '-', starting with a letter, e.g. sqs-fifo")]
    Configuration(String),

    #[error("invalid cell {0:?}; expected <configuration>/FR-<n>, e.g. memory/FR-23")]
    Cell(String),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn behaviour_round_trips_and_orders_numerically() {
        let b: Behaviour = "FR-23".parse().unwrap();
        assert_eq!(b, Behaviour(23));
        assert_eq!(b.to_string(), "FR-23");
        assert!(Behaviour(2) < Behaviour(10));
    }

    #[test]
    fn behaviour_rejects_non_canonical_forms() {
        for bad in ["FR2", "fr-2", "FR-", "FR-02", "FR-+2", "FR-2a", "FR-99999999999", " FR-2"] {
            let err = bad.parse::<Behaviour>().unwrap_err();
            assert_eq!(err, NameError::Behaviour(bad.to_owned()));
            assert!(err.to_string().contains("expected FR-<n>"), "{err}");
        }
        assert_eq!("FR-0".parse::<Behaviour>(), Ok(Behaviour(0)));
    }

    #[test]
    fn cell_id_parses_and_displays() {
        let cell: CellId = "sqs-fifo/FR-9".parse().unwrap();
        assert_eq!(cell, CellId::new("sqs-fifo", Behaviour(9)));
        assert_eq!(cell.to_string(), "sqs-fifo/FR-9");
    }

    #[test]
    fn cell_id_errors_name_the_expected_form() {
        assert_eq!(
            "memory".parse::<CellId>().unwrap_err().to_string(),
            r#"invalid cell "memory"; expected <configuration>/FR-<n>, e.g. memory/FR-23"#
        );
        assert_eq!("Memory/FR-2".parse::<CellId>().unwrap_err(), NameError::Configuration("Memory".into()));
        assert_eq!("memory/FR2".parse::<CellId>().unwrap_err(), NameError::Behaviour("FR2".into()));
    }

    #[test]
    fn configuration_names() {
        for good in ["memory", "sqs-fifo", "gcp-pull", "a1"] {
            assert_eq!(validate_configuration(good), Ok(()));
        }
        for bad in ["", "Memory", "1sqs", "-sqs", "sqs_fifo", "sqs fifo", "sqs/fifo"] {
            assert!(validate_configuration(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn cells_order_by_configuration_then_number() {
        let mut cells = [
            CellId::new("sqs", Behaviour(2)),
            CellId::new("memory", Behaviour(10)),
            CellId::new("memory", Behaviour(2)),
        ];
        cells.sort();
        let shown: Vec<String> = cells.iter().map(ToString::to_string).collect();
        assert_eq!(shown, ["memory/FR-2", "memory/FR-10", "sqs/FR-2"]);
    }
}
