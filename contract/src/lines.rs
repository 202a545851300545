//! What a test binary writes back on stderr for `cargo xtask conformance` to read: which broker
//! its cells ran against, or why it stopped for its broker. Each is one line whose form is owned
//! here, written by `providers` and read by xtask.

use serde::{Deserialize, Serialize};

/// The broker a binary's cells ran against, once per transport and binary. The binary writes
/// a sentence for people ([`BrokerLine::sentence`]) and this line for xtask ([`BrokerLine::line`]),
/// which xtask records as the run's provenance and does not echo.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BrokerLine {
    pub transport: String,
    /// `env`, `containers` or `local` (what `auto` resolved to).
    pub source: String,
    /// What served: the local process (`moto`, `pstest`, …), the container image, or the
    /// endpoint variable an `env` broker was named by (never its value, which may hold
    /// credentials).
    pub implementation: String,
    /// Where clients reached it, for people: `127.0.0.1:<port>` (a container's: `container <id>
    /// on 127.0.0.1:<port>`), or the variable for `env`.
    pub endpoint: String,
    pub ready_seconds: f64,
    /// Why `auto` did not use a container, when it did not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

impl BrokerLine {
    /// What starts the line xtask reads.
    pub const MARK: &'static str = "conformance-broker ";

    pub fn line(&self) -> String {
        format!("{}{}", BrokerLine::MARK, serde_json::to_string(self).expect("a BrokerLine serialises"))
    }

    /// The line, if `line` is one; a marked line that does not parse is an error (the two sides
    /// disagree on the form).
    pub fn parse(line: &str) -> Option<Result<BrokerLine, serde_json::Error>> {
        line.strip_prefix(BrokerLine::MARK).map(serde_json::from_str)
    }

    /// The line for people: `gcp: broker from local (pstest on 127.0.0.1:4000; ready in 0.1 s)`.
    pub fn sentence(&self) -> String {
        let what = match self.source.as_str() {
            "containers" => format!("image {}, {}", self.implementation, self.endpoint),
            "env" => format!("{} from the environment", self.endpoint),
            _ => format!("{} on {}", self.implementation, self.endpoint),
        };
        let note = self.note.as_ref().map(|note| format!("; {note}")).unwrap_or_default();
        format!("{}: broker from {} ({what}{note}; ready in {:.1} s)", self.transport, self.source, self.ready_seconds)
    }
}

/// A binary stopping for its broker: without one no cell can be judged, so xtask fails the run
/// and leaves the ledger alone when it sees this line, even if libtest's summary got out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FatalLine {
    pub transport: String,
    pub message: String,
}

impl FatalLine {
    pub fn line(&self) -> String {
        format!("error: {} broker: {}", self.transport, self.message)
    }

    /// The line, if `line` is `transport`'s.
    pub fn parse(transport: &str, line: &str) -> Option<FatalLine> {
        let message = line.strip_prefix("error: ")?.strip_prefix(transport)?.strip_prefix(" broker: ")?;
        Some(FatalLine { transport: transport.to_owned(), message: message.to_owned() })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn local() -> BrokerLine {
        BrokerLine {
            transport: "gcp".into(),
            source: "local".into(),
            implementation: "pstest".into(),
            endpoint: "127.0.0.1:4000".into(),
            ready_seconds: 0.12,
            note: Some("auto did not use containers: no daemon".into()),
        }
    }

    #[test]
    fn a_broker_line_round_trips_and_reads_as_a_sentence() {
        let line = local();
        assert_eq!(BrokerLine::parse(&line.line()).unwrap().unwrap(), line);
        assert_eq!(
            line.sentence(),
            "gcp: broker from local (pstest on 127.0.0.1:4000; auto did not use containers: no daemon; ready in 0.1 s)"
        );
        assert!(BrokerLine::parse(&line.sentence()).is_none(), "the sentence is not the line");
        assert!(BrokerLine::parse("conformance-broker {\"transport\":1}").unwrap().is_err());
    }

    #[test]
    fn a_fatal_line_is_found_only_for_its_transport() {
        let fatal = FatalLine { transport: "sqs".into(), message: "moto did not start".into() };
        assert_eq!(fatal.line(), "error: sqs broker: moto did not start");
        assert_eq!(FatalLine::parse("sqs", &fatal.line()), Some(fatal.clone()));
        assert_eq!(FatalLine::parse("sns", &fatal.line()), None);
        assert_eq!(FatalLine::parse("sqs", "error: sqs: something else"), None);
    }
}
