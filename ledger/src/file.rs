//! The ledger file: parsing, formatting and atomic saving.
//!
//! Reviewers read this file as a diff, so the writer is deterministic: a
//! fixed header, then one cell per line in `CellId` order.

use std::collections::btree_map::Entry;
use std::collections::BTreeMap;
use std::fs;
use std::io::Write;
use std::path::Path;

use tempfile::NamedTempFile;

use crate::cell::{validate_configuration, CellId};
use crate::error::{LedgerError, ParseProblem};
use crate::{Ledger, Status};

/// The two comment lines every written file starts with.
pub const HEADER: &str = "\
# Conformance ledger: one cell per line (configuration, behaviour, status, reference, reason), tab-separated.
# Written by `cargo xtask conformance` and `cargo xtask ledger defer`; sorted; do not reorder by hand.
";

impl Ledger {
    /// Reads and parses the ledger file at `path`.
    pub fn load(path: &Path) -> Result<Ledger, LedgerError> {
        let text = fs::read_to_string(path).map_err(|error| LedgerError::Read { path: path.to_owned(), error })?;
        Ledger::parse(&text, path)
    }

    /// Parses ledger text; `origin` is only used in error messages.
    /// Lines starting with '#' and blank lines are ignored. Rows need not be
    /// sorted (`to_text` sorts them).
    pub fn parse(text: &str, origin: &Path) -> Result<Ledger, LedgerError> {
        // Line numbers are kept until the end so a duplicate can name both lines.
        let mut rows: BTreeMap<CellId, (usize, Status)> = BTreeMap::new();
        for (index, line) in text.lines().enumerate() {
            let number = index + 1;
            if line.trim().is_empty() || line.starts_with('#') {
                continue;
            }
            let error = |problem| LedgerError::Parse { path: origin.to_owned(), line: number, problem };
            let (cell, status) = parse_row(line).map_err(error)?;
            match rows.entry(cell) {
                Entry::Occupied(first) => {
                    let first_line = first.get().0;
                    let cell = first.key().clone();
                    return Err(error(ParseProblem::DuplicateCell { cell, first_line }));
                }
                Entry::Vacant(slot) => {
                    slot.insert((number, status));
                }
            }
        }
        let cells = rows.into_iter().map(|(cell, (_, status))| (cell, status)).collect();
        Ok(Ledger { cells })
    }

    /// The file contents: header, then one sorted row per cell.
    /// `parse(to_text())` gives back an equal ledger.
    pub fn to_text(&self) -> String {
        let mut text = String::from(HEADER);
        for (cell, status) in &self.cells {
            let fields = [cell.configuration.as_str(), &cell.behaviour.to_string(), status.name()].join("\t");
            text.push_str(&fields);
            match status {
                Status::Unknown | Status::Pass => {}
                Status::Fixed { reference } => {
                    text.push('\t');
                    text.push_str(reference);
                }
                Status::Deferred { reference, reason } => {
                    text.push('\t');
                    text.push_str(reference);
                    text.push('\t');
                    text.push_str(reason);
                }
            }
            text.push('\n');
        }
        text
    }

    /// Writes the ledger to `path` atomically (see [`write_atomically`]).
    pub fn save(&self, path: &Path) -> Result<(), LedgerError> {
        write_atomically(path, &self.text_for(path)?)
    }

    /// The text [`Ledger::save`] writes to `path`, for a caller that writes it together with
    /// other files ([`write_together`]).
    pub fn text_for(&self, path: &Path) -> Result<String, LedgerError> {
        // Cells added through `ensure_cells`/`apply` are not validated on the
        // way in; refuse here rather than write a file the next load rejects.
        for cell in self.cells.keys() {
            validate_configuration(&cell.configuration).map_err(|problem| LedgerError::InvalidCell {
                path: path.to_owned(),
                cell: cell.clone(),
                problem,
            })?;
        }
        Ok(self.to_text())
    }
}

/// Writes several files as one change: every text first goes to a temporary file beside its
/// target (any failure there, or a target that is a directory, changes nothing), then each is
/// renamed over its target. A rename within one directory does not fail once its temporary
/// exists, so the files end all old or all new.
pub fn write_together(files: &[(&Path, &str)]) -> Result<(), LedgerError> {
    let mut staged = Vec::new();
    for (path, text) in files {
        let write_error = |error| LedgerError::Write { path: path.to_path_buf(), error };
        if path.is_dir() {
            return Err(write_error(std::io::Error::other("a directory is in the way of the file")));
        }
        let dir = match path.parent() {
            Some(dir) if !dir.as_os_str().is_empty() => dir,
            _ => Path::new("."),
        };
        let mut temp = NamedTempFile::new_in(dir).map_err(write_error)?;
        temp.write_all(text.as_bytes()).map_err(write_error)?;
        if let Some(permissions) = permissions_for(path) {
            fs::set_permissions(temp.path(), permissions).map_err(write_error)?;
        }
        temp.as_file().sync_all().map_err(write_error)?;
        staged.push((temp, *path));
    }
    for (temp, path) in staged {
        temp.persist(path).map_err(|e| LedgerError::Write { path: path.to_path_buf(), error: e.error })?;
    }
    Ok(())
}

/// Writes `text` to `path` atomically: the text goes to a temporary file in
/// the same directory, which is then renamed over `path`, so a reader (or a
/// crash) sees either the old file or the new one. Every file the ledger
/// crate's callers write (cells, rendered pages) goes through here.
pub fn write_atomically(path: &Path, text: &str) -> Result<(), LedgerError> {
    write_together(&[(path, text)])
}

/// The permissions the saved file should have. Temporary files are created
/// owner-only (0600); without this the rename would quietly change the mode
/// of the checked-in file.
fn permissions_for(path: &Path) -> Option<fs::Permissions> {
    match fs::metadata(path) {
        Ok(metadata) => Some(metadata.permissions()),
        Err(_) => default_permissions(),
    }
}

#[cfg(unix)]
fn default_permissions() -> Option<fs::Permissions> {
    use std::os::unix::fs::PermissionsExt;
    Some(fs::Permissions::from_mode(0o644))
}

#[cfg(not(unix))]
fn default_permissions() -> Option<fs::Permissions> {
    None
}

/// Parses one non-comment line.
fn parse_row(line: &str) -> Result<(CellId, Status), ParseProblem> {
    let fields: Vec<&str> = line.split('\t').collect();
    if !(3..=5).contains(&fields.len()) {
        return Err(ParseProblem::FieldCount { found: fields.len() });
    }
    validate_configuration(fields[0])?;
    let cell = CellId::new(fields[0], fields[1].parse()?);
    Ok((cell, parse_status(&fields[2..])?))
}

/// Parses the status keyword and the fields that follow it.
fn parse_status(fields: &[&str]) -> Result<Status, ParseProblem> {
    let found = fields.len() + 2;
    match fields {
        ["Unknown"] => Ok(Status::Unknown),
        ["Pass"] => Ok(Status::Pass),
        ["Fixed", reference] => Ok(Status::Fixed { reference: non_empty("Fixed", "reference", reference)? }),
        ["Deferred", reference, reason] => Ok(Status::Deferred {
            reference: non_empty("Deferred", "reference", reference)?,
            reason: non_empty("Deferred", "reason", reason)?,
        }),
        ["Unknown", ..] => Err(ParseProblem::StatusFields { status: "Unknown", found }),
        ["Pass", ..] => Err(ParseProblem::StatusFields { status: "Pass", found }),
        ["Fixed", ..] => Err(ParseProblem::StatusFields { status: "Fixed", found }),
        ["Deferred", ..] => Err(ParseProblem::StatusFields { status: "Deferred", found }),
        [other, ..] => Err(ParseProblem::UnknownStatus { found: (*other).to_owned() }),
        [] => Err(ParseProblem::FieldCount { found }),
    }
}

fn non_empty(status: &'static str, field: &'static str, value: &str) -> Result<String, ParseProblem> {
    if value.trim().is_empty() {
        Err(ParseProblem::EmptyField { status, field })
    } else {
        Ok(value.to_owned())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_written_together_change_all_or_none() {
        let dir = tempfile::tempdir().unwrap();
        let (cells, runs) = (dir.path().join("cells.tsv"), dir.path().join("runs.jsonl"));
        fs::write(&cells, "old cells\n").unwrap();
        fs::create_dir(&runs).unwrap();
        let error = write_together(&[(&cells, "new cells\n"), (&runs, "new runs\n")]).unwrap_err();
        assert!(error.to_string().contains("runs.jsonl"), "{error}");
        assert_eq!(fs::read_to_string(&cells).unwrap(), "old cells\n", "nothing changed when one target failed");
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 2, "no temporary file left behind");
        fs::remove_dir(&runs).unwrap();
        write_together(&[(&cells, "new cells\n"), (&runs, "new runs\n")]).unwrap();
        assert_eq!(fs::read_to_string(&cells).unwrap(), "new cells\n");
        assert_eq!(fs::read_to_string(&runs).unwrap(), "new runs\n");
    }
    use crate::Behaviour;

    const SAMPLE: &str = "\
# Conformance ledger: one cell per line (configuration, behaviour, status, reference, reason), tab-separated.
# Written by `cargo xtask conformance` and `cargo xtask ledger defer`; sorted; do not reorder by hand.
memory\tFR-2\tPass
memory\tFR-23\tPass
sqs\tFR-9\tDeferred\t#4\tmoto does not honour DelaySeconds
sqs\tFR-16\tFixed\t#4
sqs-fifo\tFR-1\tUnknown
";

    fn parse(text: &str) -> Result<Ledger, LedgerError> {
        Ledger::parse(text, Path::new("ledger/cells.tsv"))
    }

    fn parse_error(body: &str) -> String {
        parse(&format!("{HEADER}{body}")).unwrap_err().to_string()
    }

    fn cell(s: &str) -> CellId {
        s.parse().unwrap()
    }

    #[test]
    fn round_trips_exactly() {
        let ledger = parse(SAMPLE).unwrap();
        assert_eq!(ledger.to_text(), SAMPLE);
        assert_eq!(parse(&ledger.to_text()).unwrap(), ledger);
        assert_eq!(
            ledger.get(&cell("sqs/FR-9")),
            Some(&Status::Deferred { reference: "#4".into(), reason: "moto does not honour DelaySeconds".into() })
        );
        assert_eq!(ledger.get(&cell("sqs/FR-16")), Some(&Status::Fixed { reference: "#4".into() }));
    }

    #[test]
    fn empty_ledger_is_just_the_header() {
        assert_eq!(Ledger::new().to_text(), HEADER);
        assert_eq!(parse("").unwrap(), Ledger::new());
    }

    #[test]
    fn writes_sorted_by_configuration_then_fr_number() {
        let text = "sqs\tFR-2\tPass\nmemory\tFR-10\tPass\n\n# note\nmemory\tFR-2\tPass\ngcp-pull\tFR-3\tUnknown\n";
        let rows: Vec<String> = parse(text).unwrap().to_text().lines().skip(2).map(str::to_owned).collect();
        assert_eq!(rows, ["gcp-pull\tFR-3\tUnknown", "memory\tFR-2\tPass", "memory\tFR-10\tPass", "sqs\tFR-2\tPass"]);
    }

    #[test]
    fn accepts_crlf_line_endings() {
        let ledger = parse("memory\tFR-2\tFixed\t#4\r\n").unwrap();
        assert_eq!(ledger.get(&cell("memory/FR-2")), Some(&Status::Fixed { reference: "#4".into() }));
    }

    #[test]
    fn unknown_status_lists_the_choices() {
        assert_eq!(
            parse_error("memory\tFR-2\tPass\nmemory\tFR-3\tPassed\n"),
            r#"ledger/cells.tsv:4: unknown status "Passed"; expected one of Unknown, Pass, Fixed, Deferred"#
        );
    }

    #[test]
    fn wrong_field_count() {
        assert_eq!(
            parse_error("memory\tFR-2\n"),
            "ledger/cells.tsv:3: expected 3 to 5 tab-separated fields (configuration, behaviour, status, reference, reason), found 2"
        );
        assert_eq!(
            parse_error("memory FR-2 Pass\n"),
            "ledger/cells.tsv:3: expected 3 to 5 tab-separated fields (configuration, behaviour, status, reference, reason), found 1"
        );
        assert_eq!(
            parse_error("sqs\tFR-9\tDeferred\t#4\twhy\textra\n"),
            "ledger/cells.tsv:3: expected 3 to 5 tab-separated fields (configuration, behaviour, status, reference, reason), found 6"
        );
        assert_eq!(
            parse_error("memory\tFR-2\tPass\t#4\n"),
            "ledger/cells.tsv:3: Pass takes 3 tab-separated fields (configuration, behaviour, Pass), found 4"
        );
        assert_eq!(
            parse_error("memory\tFR-2\tUnknown\t\t\n"),
            "ledger/cells.tsv:3: Unknown takes 3 tab-separated fields (configuration, behaviour, Unknown), found 5"
        );
    }

    #[test]
    fn bad_behaviour() {
        assert_eq!(
            parse_error("memory\tFR2\tPass\n"),
            r#"ledger/cells.tsv:3: invalid behaviour "FR2"; expected FR-<n> or DC-<n> with <n> a number without leading zeros, e.g. FR-23"#
        );
    }

    #[test]
    fn bad_configuration() {
        assert_eq!(
            parse_error("Memory\tFR-2\tPass\n"),
            r#"ledger/cells.tsv:3: invalid configuration "Memory"; expected lowercase ASCII letters, digits and '-', starting with a letter, e.g. sqs-fifo"#
        );
    }

    #[test]
    fn duplicate_cell_names_both_lines() {
        assert_eq!(
            parse_error("memory\tFR-2\tPass\nsqs\tFR-2\tPass\nmemory\tFR-2\tUnknown\n"),
            "ledger/cells.tsv:5: duplicate cell memory/FR-2; it is already on line 3"
        );
    }

    #[test]
    fn deferred_needs_reference_and_reason() {
        assert_eq!(
            parse_error("sqs\tFR-9\tDeferred\t#4\n"),
            "ledger/cells.tsv:3: Deferred takes 5 tab-separated fields (configuration, behaviour, Deferred, reference, reason), found 4"
        );
        assert_eq!(
            parse_error("sqs\tFR-9\tDeferred\n"),
            "ledger/cells.tsv:3: Deferred takes 5 tab-separated fields (configuration, behaviour, Deferred, reference, reason), found 3"
        );
        assert_eq!(
            parse_error("sqs\tFR-9\tDeferred\t#4\t \n"),
            "ledger/cells.tsv:3: Deferred has an empty reason; Fixed needs a reference and Deferred needs a reference and a reason"
        );
        assert_eq!(
            parse_error("sqs\tFR-9\tDeferred\t\twhy\n"),
            "ledger/cells.tsv:3: Deferred has an empty reference; Fixed needs a reference and Deferred needs a reference and a reason"
        );
    }

    #[test]
    fn fixed_needs_reference() {
        assert_eq!(
            parse_error("sqs\tFR-16\tFixed\n"),
            "ledger/cells.tsv:3: Fixed takes 4 tab-separated fields (configuration, behaviour, Fixed, reference), found 3"
        );
        assert_eq!(
            parse_error("sqs\tFR-16\tFixed\t\n"),
            "ledger/cells.tsv:3: Fixed has an empty reference; Fixed needs a reference and Deferred needs a reference and a reason"
        );
        assert_eq!(
            parse_error("sqs\tFR-16\tFixed\t#4\twhy\n"),
            "ledger/cells.tsv:3: Fixed takes 4 tab-separated fields (configuration, behaviour, Fixed, reference), found 5"
        );
    }

    #[test]
    fn load_of_missing_file_names_the_path() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cells.tsv");
        let err = Ledger::load(&path).unwrap_err().to_string();
        assert!(err.starts_with(&format!("cannot read {}: ", path.display())), "{err}");
    }

    #[test]
    fn load_reports_the_real_path() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cells.tsv");
        fs::write(&path, "memory\tFR-2\tPassed\n").unwrap();
        let err = Ledger::load(&path).unwrap_err().to_string();
        assert!(err.starts_with(&format!("{}:1: unknown status", path.display())), "{err}");
    }

    fn dir_entries(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> =
            fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
        names.sort();
        names
    }

    #[test]
    fn save_then_load_round_trips_and_leaves_no_temp_files() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cells.tsv");
        let mut ledger = parse(SAMPLE).unwrap();
        ledger.save(&path).unwrap();
        assert_eq!(fs::read_to_string(&path).unwrap(), SAMPLE);

        // Saving over an existing file replaces it.
        ledger.ensure_cells(&["memory"], &[Behaviour::fr(4)]);
        ledger.save(&path).unwrap();
        assert_eq!(Ledger::load(&path).unwrap(), ledger);
        assert_eq!(dir_entries(dir.path()), ["cells.tsv"]);
    }

    #[cfg(unix)]
    #[test]
    fn save_keeps_the_file_mode() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cells.tsv");
        Ledger::new().save(&path).unwrap();
        assert_eq!(fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o644);
        fs::set_permissions(&path, fs::Permissions::from_mode(0o640)).unwrap();
        Ledger::new().save(&path).unwrap();
        assert_eq!(fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o640);
    }

    #[test]
    fn save_into_missing_directory_fails_without_creating_anything() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("missing").join("cells.tsv");
        let err = parse(SAMPLE).unwrap().save(&path).unwrap_err().to_string();
        assert!(err.starts_with(&format!("cannot write {}: ", path.display())), "{err}");
        assert!(dir_entries(dir.path()).is_empty());
    }

    #[test]
    fn failed_rename_leaves_the_target_and_no_temp_file() {
        // A non-empty directory at the target path makes the final rename fail.
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cells.tsv");
        fs::create_dir(&path).unwrap();
        fs::write(path.join("keep"), "old").unwrap();
        let err = parse(SAMPLE).unwrap().save(&path).unwrap_err().to_string();
        assert!(err.starts_with(&format!("cannot write {}: ", path.display())), "{err}");
        assert_eq!(dir_entries(dir.path()), ["cells.tsv"]);
        assert_eq!(fs::read_to_string(path.join("keep")).unwrap(), "old");
    }

    #[test]
    fn invalid_cell_is_refused_and_old_file_kept() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cells.tsv");
        fs::write(&path, SAMPLE).unwrap();
        let mut ledger = parse(SAMPLE).unwrap();
        ledger.ensure_cells(&["Bad Name"], &[Behaviour::fr(2)]);
        let err = ledger.save(&path).unwrap_err().to_string();
        assert_eq!(
            err,
            format!(
                r#"refusing to write {}: cell Bad Name/FR-2 cannot be written: invalid configuration "Bad Name"; expected lowercase ASCII letters, digits and '-', starting with a letter, e.g. sqs-fifo"#,
                path.display()
            )
        );
        assert_eq!(fs::read_to_string(&path).unwrap(), SAMPLE);
        assert_eq!(dir_entries(dir.path()), ["cells.tsv"]);
    }
}
