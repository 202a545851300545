//! Run history (`ledger/runs.jsonl`): one JSON object per conformance run,
//! appended, so the file only ever grows at the end.

use std::fs::{self, OpenOptions};
use std::io::Write;
use std::path::Path;

use serde::{Deserialize, Serialize};
use time::format_description::well_known::Rfc3339;
use time::OffsetDateTime;

use crate::LedgerError;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunRecord {
    /// RFC 3339, UTC; see [`now_rfc3339`].
    pub date: String,
    pub commit: String,
    pub configurations: Vec<ConfigurationRun>,
}

/// Totals for one configuration under one pump variant.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConfigurationRun {
    pub configuration: String,
    /// "reactor" or "proactor".
    pub variant: String,
    pub passed: u32,
    pub failed: u32,
    pub skipped: u32,
    pub wall_ms: u64,
    /// Tests that failed and then passed on retry.
    pub flakes: Vec<String>,
}

/// Appends `record` as one line to `path`, creating the file if needed.
pub fn append_run(path: &Path, record: &RunRecord) -> Result<(), LedgerError> {
    let write_error = |error| LedgerError::Write { path: path.to_owned(), error };
    let mut line = serde_json::to_string(record).expect("a RunRecord always serializes");
    line.push('\n');
    let mut file = OpenOptions::new().create(true).append(true).open(path).map_err(write_error)?;
    // One write call, so a concurrent reader never sees half a line from us.
    file.write_all(line.as_bytes()).map_err(write_error)
}

/// Reads every record from `path`, skipping blank lines.
pub fn read_runs(path: &Path) -> Result<Vec<RunRecord>, LedgerError> {
    let text = fs::read_to_string(path).map_err(|error| LedgerError::Read { path: path.to_owned(), error })?;
    text.lines()
        .enumerate()
        .filter(|(_, line)| !line.trim().is_empty())
        .map(|(index, line)| {
            serde_json::from_str(line).map_err(|error| LedgerError::RunRecord {
                path: path.to_owned(),
                line: index + 1,
                error,
            })
        })
        .collect()
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
                flakes: vec!["memory/FR-9".into()],
            }],
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
            r#"{"date":"2025-01-31T12:00:00Z","commit":"abc123","configurations":[{"configuration":"memory","variant":"reactor","passed":40,"failed":1,"skipped":2,"wall_ms":1234,"flakes":["memory/FR-9"]}]}"#
        );
        assert_eq!(read_runs(&path).unwrap(), [record("abc123"), record("def456")]);
    }

    #[test]
    fn append_run_into_missing_directory_names_the_path() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("missing").join("runs.jsonl");
        let err = append_run(&path, &record("abc")).unwrap_err().to_string();
        assert!(err.starts_with(&format!("cannot write {}: ", path.display())), "{err}");
    }

    #[test]
    fn read_runs_names_file_and_line() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("runs.jsonl");
        append_run(&path, &record("abc")).unwrap();
        fs::write(&path, fs::read_to_string(&path).unwrap() + "\n{oops\n").unwrap();
        let err = read_runs(&path).unwrap_err().to_string();
        assert!(err.starts_with(&format!("{}:3: invalid run record: ", path.display())), "{err}");
    }

    #[test]
    fn now_is_rfc3339_utc_in_whole_seconds() {
        let now = now_rfc3339();
        // The `parsing` feature of `time` is not enabled, so check the shape.
        let shape: String = now.chars().map(|c| if c.is_ascii_digit() { '9' } else { c }).collect();
        assert_eq!(shape, "9999-99-99T99:99:99Z");
    }
}
