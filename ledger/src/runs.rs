//! Run history (`ledger/runs.jsonl`): one JSON object per conformance run,
//! appended, so the file only ever grows at the end.
//!
//! A record is evidence: besides the per-configuration totals it says what
//! was run (the commit, whether the tree had uncommitted changes, the source
//! digest, the toolchain), against which brokers, and how each cell did.
//! Every field added after the first records is `#[serde(default)]`, so the
//! old lines still parse.

use std::fs::{self, File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::Path;

use serde::{Deserialize, Serialize};
use time::format_description::well_known::Rfc3339;
use time::OffsetDateTime;

use crate::LedgerError;

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunRecord {
    /// RFC 3339, UTC; see [`now_rfc3339`].
    pub date: String,
    /// `git rev-parse --short HEAD`.
    pub commit: String,
    /// The working tree had uncommitted changes (so `commit` alone does not
    /// say what ran; `digest` does).
    #[serde(default)]
    pub dirty: bool,
    /// `rustc -V`; None when unknown.
    #[serde(default)]
    pub toolchain: Option<String>,
    /// [`crate::source_digest`] of the tree that ran; None when unknown.
    #[serde(default)]
    pub digest: Option<String>,
    /// The brokers the run talked to, one per transport run.
    #[serde(default)]
    pub brokers: Vec<BrokerProvenance>,
    pub configurations: Vec<ConfigurationRun>,
    /// Every cell run, per pump variant. Empty in records written before
    /// cells were recorded: those are evidence for whole configurations.
    #[serde(default)]
    pub cells: Vec<CellRun>,
}

/// Where one transport's broker came from.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BrokerProvenance {
    /// The manifest's transport name (`memory`, `sqs`, `gcp`, `rocketmq`).
    pub transport: String,
    /// The broker source that resolved: `env`, `containers`, `local` (or
    /// `in-process` for the memory transport).
    pub source: String,
    /// What answered, e.g. `moto`, `localstack`, `pstest`, an endpoint or an image.
    pub implementation: String,
    /// Its version, or an image tag; empty when unknown.
    pub version: String,
}

impl std::fmt::Display for BrokerProvenance {
    /// `moto 5.2.5 (local)`: what answered, its version, where it came from. A version that
    /// already names the implementation (`moto` / `moto 5.2.5`) is not preceded by it again.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let named = !self.implementation.is_empty()
            && self.version.to_lowercase().contains(&self.implementation.to_lowercase());
        match (self.version.is_empty(), named) {
            (true, _) => f.write_str(&self.implementation)?,
            (false, true) => f.write_str(&self.version)?,
            (false, false) => write!(f, "{} {}", self.implementation, self.version)?,
        }
        write!(f, " ({})", self.source)
    }
}

/// One cell under one pump variant.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CellRun {
    /// `<configuration>/FR-<n>`, e.g. `sqs-fifo/FR-23` (a [`crate::CellId`]).
    pub cell: String,
    /// "reactor" or "proactor".
    pub variant: String,
    /// One of [`CellRun::PASSED`], [`CellRun::FAILED`], [`CellRun::SKIPPED`], [`CellRun::FLAKY`].
    pub result: String,
    pub duration_ms: u64,
}

impl CellRun {
    pub const PASSED: &'static str = "passed";
    pub const FAILED: &'static str = "failed";
    pub const SKIPPED: &'static str = "skipped";
    /// Failed, then passed on retry; the run also lists it in its configuration's `flakes`.
    pub const FLAKY: &'static str = "flaky";
}

/// Totals for one configuration under one pump variant.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConfigurationRun {
    pub configuration: String,
    /// "reactor" or "proactor".
    pub variant: String,
    pub passed: u32,
    pub failed: u32,
    pub skipped: u32,
    pub wall_ms: u64,
    /// Tests that failed and then passed on retry.
    #[serde(default)]
    pub flakes: Vec<Flake>,
}

/// A cell that failed and then passed on retry.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Flake {
    /// `<configuration>/FR-<n>`.
    pub cell: String,
    /// "reactor" or "proactor".
    pub variant: String,
    /// The first failure's message (libtest's output for the test).
    pub first_failure: String,
}

/// How much of a torn line an error shows.
const TORN_TEXT_SHOWN: usize = 80;

/// Appends `record` as one line to `path`, creating the file if needed.
///
/// Refuses (and changes nothing) when the file does not end with a line end:
/// its last line is torn, by a crash or a hand edit, and a record appended
/// to it would be glued onto it and lost with it. That is reported, never
/// silently repaired; see [`LedgerError::TornRunLog`].
pub fn append_run(path: &Path, record: &RunRecord) -> Result<(), LedgerError> {
    let write_error = |error| LedgerError::Write { path: path.to_owned(), error };
    let mut line = serde_json::to_string(record).expect("a RunRecord always serializes");
    line.push('\n');
    let mut file = OpenOptions::new().read(true).create(true).append(true).open(path).map_err(write_error)?;
    if !ends_with_line_end(&mut file).map_err(|error| LedgerError::Read { path: path.to_owned(), error })? {
        let text = fs::read(path).map_err(|error| LedgerError::Read { path: path.to_owned(), error })?;
        return Err(torn(path, &String::from_utf8_lossy(&text)));
    }
    // One write call, so a concurrent reader never sees half a line from us.
    file.write_all(line.as_bytes()).map_err(write_error)
}

/// The text of the run log at `path` (none yet: empty) with `record` appended as its last line,
/// for a caller that writes it together with the ledger ([`crate::file::write_together`]).
/// Refuses a torn last line as [`append_run`] does.
pub fn with_run_appended(path: &Path, record: &RunRecord) -> Result<String, LedgerError> {
    let mut text = match fs::read_to_string(path) {
        Ok(text) => text,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(error) => return Err(LedgerError::Read { path: path.to_owned(), error }),
    };
    if !text.is_empty() && !text.ends_with('\n') {
        return Err(torn(path, &text));
    }
    text.push_str(&serde_json::to_string(record).expect("a RunRecord always serializes"));
    text.push('\n');
    Ok(text)
}

/// Whether the file is empty or its last byte is '\n'.
fn ends_with_line_end(file: &mut File) -> std::io::Result<bool> {
    let length = file.metadata()?.len();
    if length == 0 {
        return Ok(true);
    }
    file.seek(SeekFrom::Start(length - 1))?;
    let mut last = [0u8];
    file.read_exact(&mut last)?;
    Ok(last[0] == b'\n')
}

/// The error for `text`, which does not end with a line end.
fn torn(path: &Path, text: &str) -> LedgerError {
    let line = text.lines().count().max(1);
    let last = text.lines().last().unwrap_or_default();
    let mut start: String = last.chars().take(TORN_TEXT_SHOWN).collect();
    if start.len() < last.len() {
        start.push('…');
    }
    LedgerError::TornRunLog { path: path.to_owned(), line, start }
}

/// Reads every record from `path`, skipping blank lines. Errors name the
/// file and the line.
pub fn read_runs(path: &Path) -> Result<Vec<RunRecord>, LedgerError> {
    let text = fs::read_to_string(path).map_err(|error| LedgerError::Read { path: path.to_owned(), error })?;
    parse_runs(&text, path)
}

/// Parses the text of a run log; `origin` is only used in error messages.
pub fn parse_runs(text: &str, origin: &Path) -> Result<Vec<RunRecord>, LedgerError> {
    text.lines()
        .enumerate()
        .filter(|(_, line)| !line.trim().is_empty())
        .map(|(index, line)| {
            serde_json::from_str(line).map_err(|error| LedgerError::RunRecord {
                path: origin.to_owned(),
                line: index + 1,
                error,
            })
        })
        .collect()
}

/// Reads `path` as [`read_runs`] does, and also refuses a file whose last
/// line has no line end, which [`append_run`] would refuse to append to:
/// what the audit checks.
pub fn check_runs(path: &Path) -> Result<Vec<RunRecord>, LedgerError> {
    let text = fs::read_to_string(path).map_err(|error| LedgerError::Read { path: path.to_owned(), error })?;
    let runs = parse_runs(&text, path)?;
    if !text.is_empty() && !text.ends_with('\n') {
        return Err(torn(path, &text));
    }
    Ok(runs)
}

/// The current time in UTC as RFC 3339, to whole seconds
/// (e.g. `2025-01-31T12:00:00Z`).
pub fn now_rfc3339() -> String {
    let now = OffsetDateTime::now_utc();
    // Sub-second digits are noise in a run log.
    let now = now.replace_nanosecond(0).unwrap_or(now);
    now.format(&Rfc3339).expect("a UTC time between years 0 and 9999 formats as RFC 3339")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(commit: &str) -> RunRecord {
        RunRecord {
            date: "2025-01-31T12:00:00Z".into(),
            commit: commit.into(),
            configurations: vec![ConfigurationRun {
                configuration: "memory".into(),
                variant: "reactor".into(),
                passed: 40,
                failed: 1,
                skipped: 2,
                wall_ms: 1234,
                flakes: vec![Flake {
                    cell: "memory/FR-9".into(),
                    variant: "reactor".into(),
                    first_failure: "assertion failed".into(),
                }],
            }],
            ..RunRecord::default()
        }
    }

    fn full_record() -> RunRecord {
        RunRecord {
            dirty: true,
            toolchain: Some("rustc 1.95.0 (abc 2026-01-01)".into()),
            digest: Some("ab".repeat(32)),
            brokers: vec![BrokerProvenance {
                transport: "sqs".into(),
                source: "local".into(),
                implementation: "moto".into(),
                version: "5.0.0".into(),
            }],
            cells: vec![CellRun {
                cell: "sqs-fifo/FR-23".into(),
                variant: "proactor".into(),
                result: CellRun::FLAKY.into(),
                duration_ms: 4200,
            }],
            ..record("abc123")
        }
    }

    #[test]
    fn append_run_creates_then_appends_one_line_each() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("runs.jsonl");
        append_run(&path, &record("abc123")).unwrap();
        append_run(&path, &record("def456")).unwrap();

        let text = fs::read_to_string(&path).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 2);
        assert!(text.ends_with('\n'));
        assert_eq!(
            lines[0],
            r#"{"date":"2025-01-31T12:00:00Z","commit":"abc123","dirty":false,"toolchain":null,"digest":null,"brokers":[],"configurations":[{"configuration":"memory","variant":"reactor","passed":40,"failed":1,"skipped":2,"wall_ms":1234,"flakes":[{"cell":"memory/FR-9","variant":"reactor","first_failure":"assertion failed"}]}],"cells":[]}"#
        );
        assert_eq!(read_runs(&path).unwrap(), [record("abc123"), record("def456")]);
    }

    #[test]
    fn a_broker_is_shown_with_its_version_and_source_once() {
        let broker = |implementation: &str, version: &str| {
            BrokerProvenance {
                transport: "sqs".into(),
                source: "local".into(),
                implementation: implementation.into(),
                version: version.into(),
            }
            .to_string()
        };
        assert_eq!(broker("moto", "5.0.0"), "moto 5.0.0 (local)");
        assert_eq!(broker("moto", "moto 5.2.5"), "moto 5.2.5 (local)");
        assert_eq!(broker("rocketmq", "Apache RocketMQ 5.3.3"), "Apache RocketMQ 5.3.3 (local)");
        assert_eq!(broker("localhost:4566", ""), "localhost:4566 (local)");
    }

    #[test]
    fn every_field_round_trips() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("runs.jsonl");
        append_run(&path, &full_record()).unwrap();
        assert_eq!(read_runs(&path).unwrap(), [full_record()]);
        assert!(fs::read_to_string(&path)
            .unwrap()
            .contains(r#""brokers":[{"transport":"sqs","source":"local","implementation":"moto","version":"5.0.0"}]"#));
    }

    #[test]
    fn an_old_record_parses_with_empty_provenance() {
        let old = r#"{"date":"2026-11-30T07:17:25Z","commit":"1e165c2","configurations":[{"configuration":"memory","variant":"proactor","passed":12,"failed":0,"skipped":0,"wall_ms":2009,"flakes":[]}]}"#;
        let runs = parse_runs(old, Path::new("runs.jsonl")).unwrap();
        assert_eq!(
            runs,
            [RunRecord {
                date: "2026-11-30T07:17:25Z".into(),
                commit: "1e165c2".into(),
                configurations: vec![ConfigurationRun {
                    configuration: "memory".into(),
                    variant: "proactor".into(),
                    passed: 12,
                    wall_ms: 2009,
                    ..ConfigurationRun::default()
                }],
                ..RunRecord::default()
            }]
        );
    }

    #[test]
    fn the_project_run_log_parses() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("runs.jsonl");
        let runs = check_runs(&path).unwrap_or_else(|error| panic!("{error}"));
        assert!(!runs.is_empty(), "{} holds no runs", path.display());
        assert!(runs.iter().all(|run| !run.date.is_empty() && !run.commit.is_empty()));
    }

    #[test]
    fn append_run_into_missing_directory_names_the_path() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("missing").join("runs.jsonl");
        let err = append_run(&path, &record("abc")).unwrap_err().to_string();
        assert!(err.starts_with(&format!("cannot write {}: ", path.display())), "{err}");
    }

    #[test]
    fn append_run_refuses_a_torn_last_line_and_changes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("runs.jsonl");
        append_run(&path, &record("abc")).unwrap();
        let torn_text = fs::read_to_string(&path).unwrap() + r#"{"date":"2025-02-01T00:00:00Z","comm"#;
        fs::write(&path, &torn_text).unwrap();

        let err = append_run(&path, &record("def")).unwrap_err();
        assert!(matches!(err, LedgerError::TornRunLog { line: 2, .. }), "{err}");
        assert_eq!(
            err.to_string(),
            format!(
                r#"{}:2: the last line is torn (it has no line end): "{{\"date\":\"2025-02-01T00:00:00Z\",\"comm"; refusing to append a run record after it: finish or remove that line by hand"#,
                path.display()
            )
        );
        assert_eq!(fs::read_to_string(&path).unwrap(), torn_text, "nothing is repaired or appended");
        assert_eq!(
            check_runs(&path).unwrap_err().to_string().split(": ").next(),
            Some(&*format!("{}:2", path.display()))
        );
    }

    #[test]
    fn a_complete_last_line_without_line_end_is_still_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("runs.jsonl");
        let line = serde_json::to_string(&record("abc")).unwrap();
        fs::write(&path, &line).unwrap();
        // It reads, but appending would glue the next record onto it.
        assert_eq!(read_runs(&path).unwrap(), [record("abc")]);
        let err = append_run(&path, &record("def")).unwrap_err().to_string();
        assert!(err.starts_with(&format!("{}:1: the last line is torn", path.display())), "{err}");
        assert!(err.contains('…'), "a long line is shown cut: {err}");
        assert!(check_runs(&path).is_err());
    }

    #[test]
    fn read_runs_names_file_and_line() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("runs.jsonl");
        append_run(&path, &record("abc")).unwrap();
        fs::write(&path, fs::read_to_string(&path).unwrap() + "\n{oops\n").unwrap();
        let err = read_runs(&path).unwrap_err().to_string();
        assert!(err.starts_with(&format!("{}:3: invalid run record: ", path.display())), "{err}");
        let err = check_runs(&path).unwrap_err().to_string();
        assert!(err.starts_with(&format!("{}:3: invalid run record: ", path.display())), "{err}");
    }

    #[test]
    fn read_runs_of_a_missing_file_names_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("runs.jsonl");
        let err = read_runs(&path).unwrap_err().to_string();
        assert!(err.starts_with(&format!("cannot read {}: ", path.display())), "{err}");
    }

    #[test]
    fn now_is_rfc3339_utc_in_whole_seconds() {
        let now = now_rfc3339();
        // The `parsing` feature of `time` is not enabled, so check the shape.
        let shape: String = now.chars().map(|c| if c.is_ascii_digit() { '9' } else { c }).collect();
        assert_eq!(shape, "9999-99-99T99:99:99Z");
    }
}
