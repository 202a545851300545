//! Cell identity: a configuration crossed with a behaviour (an `FR-<n>` or `DC-<n>` id).

use std::fmt;
use std::str::FromStr;

/// Where a behaviour's id comes from. `FR` numbers are the original library's functional
/// requirements; `DC` numbers are this project's own delivery-count conditions (restarted,
/// competing and crashed consumers), numbered apart so neither can be mistaken for the other.
/// FR columns come before DC columns.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Family {
    Fr,
    Dc,
}

impl Family {
    /// The id's prefix, `FR` or `DC`.
    pub fn prefix(self) -> &'static str {
        match self {
            Family::Fr => "FR",
            Family::Dc => "DC",
        }
    }

    /// The generated module's prefix, `fr` or `dc`.
    pub fn module_prefix(self) -> &'static str {
        match self {
            Family::Fr => "fr",
            Family::Dc => "dc",
        }
    }

    const ALL: [Family; 2] = [Family::Fr, Family::Dc];
}

/// A behaviour id; displayed and parsed as `FR-<n>` or `DC-<n>`. Ordered by family, then
/// numerically, so FR-2 sorts before FR-10 and every FR before DC-1.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Behaviour {
    pub family: Family,
    pub number: u32,
}

impl Behaviour {
    /// The original library's `FR-<n>`.
    pub const fn fr(number: u32) -> Behaviour {
        Behaviour { family: Family::Fr, number }
    }

    /// This project's `DC-<n>`.
    pub const fn dc(number: u32) -> Behaviour {
        Behaviour { family: Family::Dc, number }
    }

    /// The generated test module holding this behaviour's test: `fr_<n>` or `dc_<n>`.
    pub fn module(self) -> String {
        format!("{}_{}", self.family.module_prefix(), self.number)
    }

    /// The behaviour whose module is `module` (`fr_23`, `dc_1`), if any.
    pub fn from_module(module: &str) -> Option<Behaviour> {
        let (prefix, digits) = module.split_once('_')?;
        let family = Family::ALL.into_iter().find(|f| f.module_prefix() == prefix)?;
        Some(Behaviour { family, number: canonical_number(digits)? })
    }
}

/// Only the canonical spelling (no sign, no leading zeros), so that a parsed file is written
/// back byte for byte.
fn canonical_number(digits: &str) -> Option<u32> {
    let canonical =
        !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()) && (digits == "0" || !digits.starts_with('0'));
    if canonical {
        digits.parse().ok()
    } else {
        None
    }
}

impl fmt::Display for Behaviour {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}", self.family.prefix(), self.number)
    }
}

impl FromStr for Behaviour {
    type Err = NameError;

    fn from_str(s: &str) -> Result<Self, NameError> {
        let invalid = || NameError::Behaviour(s.to_owned());
        let (prefix, digits) = s.split_once('-').ok_or_else(invalid)?;
        let family = Family::ALL.into_iter().find(|f| f.prefix() == prefix).ok_or_else(invalid)?;
        let number = canonical_number(digits).ok_or_else(invalid)?;
        Ok(Behaviour { family, number })
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
    #[error("invalid behaviour {0:?}; expected FR-<n> or DC-<n> with <n> a number without leading zeros, e.g. FR-23")]
    Behaviour(String),

    #[error("invalid configuration {0:?}; expected lowercase ASCII letters, digits and '-', starting with a letter, e.g. sqs-fifo")]
    Configuration(String),

    #[error("invalid cell {0:?}; expected <configuration>/FR-<n> or <configuration>/DC-<n>, e.g. memory/FR-23")]
    Cell(String),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn behaviour_round_trips_and_orders_numerically() {
        let b: Behaviour = "FR-23".parse().unwrap();
        assert_eq!(b, Behaviour::fr(23));
        assert_eq!(b.to_string(), "FR-23");
        assert!(Behaviour::fr(2) < Behaviour::fr(10));
        assert!(Behaviour::fr(23) < Behaviour::dc(1));
        assert_eq!("DC-3".parse::<Behaviour>(), Ok(Behaviour::dc(3)));
        assert_eq!(Behaviour::dc(3).to_string(), "DC-3");
    }

    #[test]
    fn modules_round_trip() {
        assert_eq!(Behaviour::fr(23).module(), "fr_23");
        assert_eq!(Behaviour::dc(1).module(), "dc_1");
        assert_eq!(Behaviour::from_module("dc_1"), Some(Behaviour::dc(1)));
        assert_eq!(Behaviour::from_module("fr_23"), Some(Behaviour::fr(23)));
        for bad in ["fr_", "fr_02", "xx_1", "fr23", "dc_1a"] {
            assert_eq!(Behaviour::from_module(bad), None, "{bad}");
        }
    }

    #[test]
    fn behaviour_rejects_non_canonical_forms() {
        for bad in
            ["FR2", "fr-2", "DC2", "dc-2", "XX-2", "DC-01", "FR-", "FR-02", "FR-+2", "FR-2a", "FR-99999999999", " FR-2"]
        {
            let err = bad.parse::<Behaviour>().unwrap_err();
            assert_eq!(err, NameError::Behaviour(bad.to_owned()));
            assert!(err.to_string().contains("expected FR-<n>"), "{err}");
        }
        assert_eq!("FR-0".parse::<Behaviour>(), Ok(Behaviour::fr(0)));
    }

    #[test]
    fn cell_id_parses_and_displays() {
        let cell: CellId = "sqs-fifo/FR-9".parse().unwrap();
        assert_eq!(cell, CellId::new("sqs-fifo", Behaviour::fr(9)));
        assert_eq!(cell.to_string(), "sqs-fifo/FR-9");
    }

    #[test]
    fn cell_id_errors_name_the_expected_form() {
        assert_eq!(
            "memory".parse::<CellId>().unwrap_err().to_string(),
            r#"invalid cell "memory"; expected <configuration>/FR-<n> or <configuration>/DC-<n>, e.g. memory/FR-23"#
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
            CellId::new("sqs", Behaviour::fr(2)),
            CellId::new("memory", Behaviour::fr(10)),
            CellId::new("memory", Behaviour::fr(2)),
        ];
        cells.sort();
        let shown: Vec<String> = cells.iter().map(ToString::to_string).collect();
        assert_eq!(shown, ["memory/FR-2", "memory/FR-10", "sqs/FR-2"]);
    }
}
