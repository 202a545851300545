//! The fidelity table: each cell's verdict on a broker implementation other than its transport's
//! reference one (ElasticMQ beside moto), next to the main ledger's status, which is the
//! reference implementation's. A Pass against one emulator says what that emulator does; a cell
//! whose verdict changes with the implementation is a claim about the emulator, not the library.
//!
//! Stored in `ledger/fidelity.tsv`, one row per cell and implementation (configuration,
//! behaviour, implementation, reactor verdict, proactor verdict, note), sorted, written
//! atomically; rendered to `ledger/FIDELITY.md`. The note says why the implementations disagree;
//! a run fills it with the failure's first line, and a hand-written explanation is kept for as
//! long as the verdicts it explains stay the same.

use std::collections::btree_map::Entry;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

use crate::error::{LedgerError, ParseProblem};
use crate::file::write_atomically;
use crate::update::VariantResult;
use crate::{CellId, Ledger, RunRecord, Status};

/// One pump variant's verdict on an implementation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Pass,
    Fail,
    /// Not run on this implementation (the note says why, e.g. it has no SNS API).
    NotRun,
}

impl Verdict {
    pub fn name(self) -> &'static str {
        match self {
            Verdict::Pass => "Pass",
            Verdict::Fail => "Fail",
            Verdict::NotRun => "NotRun",
        }
    }

    fn parse(text: &str) -> Result<Verdict, ParseProblem> {
        match text {
            "Pass" => Ok(Verdict::Pass),
            "Fail" => Ok(Verdict::Fail),
            "NotRun" => Ok(Verdict::NotRun),
            other => Err(ParseProblem::UnknownVerdict { found: other.to_owned() }),
        }
    }
}

impl From<VariantResult> for Verdict {
    fn from(result: VariantResult) -> Verdict {
        match result {
            VariantResult::Passed => Verdict::Pass,
            VariantResult::Failed => Verdict::Fail,
            VariantResult::NotRun => Verdict::NotRun,
        }
    }
}

/// A cell's verdicts on one implementation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FidelityRow {
    pub reactor: Verdict,
    pub proactor: Verdict,
    pub note: String,
}

impl FidelityRow {
    fn passes(&self) -> bool {
        self.reactor == Verdict::Pass && self.proactor == Verdict::Pass
    }

    fn ran(&self) -> bool {
        self.reactor != Verdict::NotRun && self.proactor != Verdict::NotRun
    }
}

/// Every recorded (cell, implementation) verdict.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Fidelity {
    rows: BTreeMap<(CellId, String), FidelityRow>,
}

const HEADER: &str = "\
# Fidelity table: each cell's verdict on a second broker implementation (configuration, behaviour,
# implementation, reactor, proactor, note), tab-separated. The reference implementation's verdicts
# are the main ledger's (cells.tsv). Written by `cargo xtask conformance --impl`; sorted.
";

/// How long a note may be: one line in a table.
const NOTE_LIMIT: usize = 300;

impl Fidelity {
    /// Reads `path`; a missing file is an empty table (no fidelity run yet).
    pub fn load(path: &Path) -> Result<Fidelity, LedgerError> {
        match std::fs::read_to_string(path) {
            Ok(text) => Fidelity::parse(&text, path),
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(Fidelity::default()),
            Err(error) => Err(LedgerError::Read { path: path.to_owned(), error }),
        }
    }

    /// Parses the table; `origin` is only used in error messages.
    pub fn parse(text: &str, origin: &Path) -> Result<Fidelity, LedgerError> {
        let mut lines: BTreeMap<(CellId, String), usize> = BTreeMap::new();
        let mut fidelity = Fidelity::default();
        for (index, line) in text.lines().enumerate() {
            let number = index + 1;
            if line.trim().is_empty() || line.starts_with('#') {
                continue;
            }
            let error = |problem| LedgerError::Parse { path: origin.to_owned(), line: number, problem };
            let (key, row) = parse_row(line).map_err(error)?;
            match lines.entry(key.clone()) {
                Entry::Occupied(first) => {
                    let (cell, implementation) = key;
                    let first_line = *first.get();
                    return Err(error(ParseProblem::DuplicateFidelityRow { cell, implementation, first_line }));
                }
                Entry::Vacant(slot) => {
                    slot.insert(number);
                }
            }
            fidelity.rows.insert(key, row);
        }
        Ok(fidelity)
    }

    /// The header, then one sorted row per (cell, implementation).
    pub fn to_text(&self) -> String {
        let mut text = HEADER.to_owned();
        for ((cell, implementation), row) in &self.rows {
            let _ = write!(
                text,
                "{}\t{}\t{implementation}\t{}\t{}",
                cell.configuration,
                cell.behaviour,
                row.reactor.name(),
                row.proactor.name()
            );
            if !row.note.is_empty() {
                let _ = write!(text, "\t{}", row.note);
            }
            text.push('\n');
        }
        text
    }

    pub fn save(&self, path: &Path) -> Result<(), LedgerError> {
        write_atomically(path, &self.to_text())
    }

    pub fn get(&self, cell: &CellId, implementation: &str) -> Option<&FidelityRow> {
        self.rows.get(&(cell.clone(), implementation.to_owned()))
    }

    /// Records a run's verdicts for `cell` on `implementation`. `measured` (e.g. the failure's
    /// first line, or why the cell cannot run) becomes the note, unless the verdicts are the
    /// ones already recorded with a note: that note may be a hand-written explanation of them.
    pub fn record(&mut self, cell: CellId, implementation: &str, reactor: Verdict, proactor: Verdict, measured: &str) {
        let key = (cell, implementation.to_owned());
        let kept = self
            .rows
            .get(&key)
            .filter(|old| old.reactor == reactor && old.proactor == proactor && !old.note.is_empty())
            .map(|old| old.note.clone());
        let note = kept.unwrap_or_else(|| one_line(measured));
        self.rows.insert(key, FidelityRow { reactor, proactor, note });
    }

    /// Replaces the note of a recorded row (a hand-written explanation); false when no row.
    pub fn explain(&mut self, cell: &CellId, implementation: &str, note: &str) -> bool {
        match self.rows.get_mut(&(cell.clone(), implementation.to_owned())) {
            Some(row) => {
                row.note = one_line(note);
                true
            }
            None => false,
        }
    }

    /// The implementations with rows, sorted.
    pub fn implementations(&self) -> Vec<&str> {
        let mut names: Vec<&str> = self.rows.keys().map(|(_, name)| name.as_str()).collect();
        names.dedup();
        names.sort_unstable();
        names.dedup();
        names
    }

    /// `FIDELITY.md`: per implementation, each cell's verdicts beside the reference's status in
    /// `ledger`, whether they agree, and the note; `reference_of` names the reference
    /// implementation an implementation stands beside (e.g. "moto" for "elasticmq"); `runs` are
    /// the fidelity runs, the last of each implementation giving its provenance and wall times.
    pub fn render_markdown(
        &self,
        ledger: &Ledger,
        reference_of: &dyn Fn(&str) -> String,
        runs: &[RunRecord],
    ) -> String {
        let mut out = String::from(
            "<!-- Generated by `cargo xtask conformance --impl <implementation>` from ledger/fidelity.tsv and \
             ledger/cells.tsv; do not edit by hand (explanations go in the note column of fidelity.tsv). -->\n\
             # Fidelity\n\n\
             Each cell's verdict on a second implementation of its transport's broker, beside the main \
             ledger's status, which is the reference implementation's (see docs/BROKERS.md). A cell that \
             differs is a claim about the emulator as much as about the library; the note says what the \
             broker did.\n",
        );
        for implementation in self.implementations() {
            let reference = reference_of(implementation);
            let rows: Vec<(&CellId, &FidelityRow)> =
                self.rows.iter().filter(|((_, name), _)| name == implementation).map(|((c, _), r)| (c, r)).collect();
            let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
            for (cell, row) in &rows {
                *counts.entry(agreement(ledger.get(cell), row)).or_default() += 1;
            }
            let summary: Vec<String> = counts.iter().map(|(what, n)| format!("{n} {what}")).collect();
            let _ = write!(
                out,
                "\n## {implementation} beside {reference}\n\n{} cells: {}.\n",
                rows.len(),
                summary.join(", ")
            );
            if let Some(run) =
                runs.iter().rev().find(|run| run.brokers.iter().any(|b| b.implementation == implementation))
            {
                let versions: Vec<String> = run
                    .brokers
                    .iter()
                    .filter(|b| b.implementation == implementation)
                    .map(|b| format!("{} ({} from {})", b.version, b.transport, b.source))
                    .collect();
                let mut walls: Vec<u64> = run.configurations.iter().map(|c| c.wall_ms).collect();
                walls.dedup();
                let walls: Vec<String> = walls.iter().map(|ms| format!("{:.1} s", *ms as f64 / 1000.0)).collect();
                let _ = write!(
                    out,
                    "\nLast run: {} at {}{}, against {}; wall time of the binary: {}.\n",
                    run.date,
                    run.commit,
                    if run.dirty { " (dirty)" } else { "" },
                    versions.join(", "),
                    walls.join(", ")
                );
            }
            let _ = write!(
                out,
                "\n| cell | {reference} (ledger) | {implementation} reactor | {implementation} proactor | agreement | note |\n\
                 | --- | --- | --- | --- | --- | --- |\n"
            );
            for (cell, row) in rows {
                let status = ledger.get(cell).map_or_else(|| "(not in ledger)".to_owned(), status_word);
                let _ = writeln!(
                    out,
                    "| {cell} | {status} | {} | {} | {} | {} |",
                    row.reactor.name(),
                    row.proactor.name(),
                    agreement(ledger.get(cell), row),
                    row.note.replace('|', "\\|")
                );
            }
        }
        out
    }
}

fn status_word(status: &Status) -> String {
    match status {
        Status::Deferred { reference, .. } => format!("Deferred ({reference})"),
        other => other.to_string(),
    }
}

/// Whether an implementation's verdicts agree with the reference's status. A Deferred cell is
/// expected to fail, so failing there too agrees.
pub fn agreement(reference: Option<&Status>, row: &FidelityRow) -> &'static str {
    if !row.ran() {
        return "not run";
    }
    match (reference, row.passes()) {
        (Some(Status::Pass | Status::Fixed { .. }), true) | (Some(Status::Deferred { .. }), false) => "agree",
        (Some(Status::Pass | Status::Fixed { .. }), false) => "differs: fails here",
        (Some(Status::Deferred { .. }), true) => "differs: passes here",
        (Some(Status::Unknown) | None, _) => "reference not run",
    }
}

/// `text` as one table-safe line: control characters become spaces, runs of spaces one, and it
/// is cut at [`NOTE_LIMIT`] characters.
fn one_line(text: &str) -> String {
    let spaced: String = text.chars().map(|c| if c.is_control() { ' ' } else { c }).collect();
    let words: Vec<&str> = spaced.split_whitespace().collect();
    let line = words.join(" ");
    match line.char_indices().nth(NOTE_LIMIT) {
        Some((cut, _)) => format!("{}…", &line[..cut]),
        None => line,
    }
}

fn parse_row(line: &str) -> Result<((CellId, String), FidelityRow), ParseProblem> {
    let fields: Vec<&str> = line.split('\t').collect();
    if !(5..=6).contains(&fields.len()) {
        return Err(ParseProblem::FidelityFieldCount { found: fields.len() });
    }
    crate::validate_configuration(fields[0])?;
    let cell = CellId::new(fields[0], fields[1].parse()?);
    let implementation = fields[2];
    // '.': a broker version named as an implementation (rabbitmq-4.0.5).
    if implementation.is_empty()
        || !implementation.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.')
    {
        return Err(ParseProblem::Implementation { found: implementation.to_owned() });
    }
    let row = FidelityRow {
        reactor: Verdict::parse(fields[3])?,
        proactor: Verdict::parse(fields[4])?,
        note: fields.get(5).copied().unwrap_or_default().to_owned(),
    };
    Ok(((cell, implementation.to_owned()), row))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Behaviour;

    fn cell(configuration: &str, n: u32) -> CellId {
        CellId::new(configuration, Behaviour::fr(n))
    }

    #[test]
    fn the_table_round_trips_sorted_and_with_its_notes() {
        let text = format!(
            "{HEADER}sqs\tFR-9\telasticmq\tFail\tPass\tcounter read 2 on the first delivery\nsqs\tFR-2\telasticmq\tPass\tPass\n"
        );
        let fidelity = Fidelity::parse(&text, Path::new("fidelity.tsv")).unwrap();
        let row = fidelity.get(&cell("sqs", 9), "elasticmq").unwrap();
        assert_eq!(
            (row.reactor, row.proactor, row.note.as_str()),
            (Verdict::Fail, Verdict::Pass, "counter read 2 on the first delivery")
        );
        let written = fidelity.to_text();
        assert!(written.ends_with("sqs\tFR-2\telasticmq\tPass\tPass\nsqs\tFR-9\telasticmq\tFail\tPass\tcounter read 2 on the first delivery\n"), "{written}");
        assert_eq!(Fidelity::parse(&written, Path::new("x")).unwrap(), fidelity);
    }

    #[test]
    fn a_bad_row_names_the_file_the_line_and_the_valid_choices() {
        let error = |text: &str| Fidelity::parse(text, Path::new("ledger/fidelity.tsv")).unwrap_err().to_string();
        assert_eq!(
            error("# h\nsqs\tFR-2\telasticmq\tPassed\tPass\n"),
            "ledger/fidelity.tsv:2: unknown verdict \"Passed\"; expected one of Pass, Fail, NotRun"
        );
        assert!(error("sqs\tFR-2\telasticmq\tPass\n")
            .starts_with("ledger/fidelity.tsv:1: expected 5 or 6 tab-separated fields"));
        assert!(error("sqs\tFR-2\tElasticMQ\tPass\tPass\n").contains("implementation \"ElasticMQ\" is not a name"));
        assert!(error("sqs\tFR-2\trabbitmq 4\tPass\tPass\n").contains("implementation \"rabbitmq 4\" is not a name"));
        let versioned = "rabbitmq\tFR-2\trabbitmq-4.0.5\tPass\tPass\n";
        assert!(
            Fidelity::parse(versioned, Path::new("x")).unwrap().to_text().ends_with(versioned),
            "a version is a name"
        );
        assert_eq!(
            error("sqs\tFR-2\telasticmq\tPass\tPass\nsqs\tFR-2\telasticmq\tFail\tPass\n"),
            "ledger/fidelity.tsv:2: duplicate row for sqs/FR-2 on elasticmq; it is already on line 1"
        );
    }

    #[test]
    fn a_hand_written_note_stays_while_its_verdicts_do() {
        let mut fidelity = Fidelity::default();
        fidelity.record(cell("sqs", 9), "elasticmq", Verdict::Fail, Verdict::Fail, "assertion failed:\n left: 1");
        assert_eq!(fidelity.get(&cell("sqs", 9), "elasticmq").unwrap().note, "assertion failed: left: 1");
        assert!(fidelity.explain(&cell("sqs", 9), "elasticmq", "the broker counts the delayed send as a receive"));
        fidelity.record(cell("sqs", 9), "elasticmq", Verdict::Fail, Verdict::Fail, "assertion failed again");
        assert_eq!(
            fidelity.get(&cell("sqs", 9), "elasticmq").unwrap().note,
            "the broker counts the delayed send as a receive"
        );
        fidelity.record(cell("sqs", 9), "elasticmq", Verdict::Pass, Verdict::Pass, "");
        assert_eq!(fidelity.get(&cell("sqs", 9), "elasticmq").unwrap().note, "");
        assert!(!fidelity.explain(&cell("sqs", 2), "elasticmq", "no such row"));
    }

    #[test]
    fn agreement_reads_a_deferred_reference_as_an_expected_failure() {
        let row = |reactor, proactor| FidelityRow { reactor, proactor, note: String::new() };
        let deferred = Status::Deferred { reference: "#4".into(), reason: "r".into() };
        assert_eq!(agreement(Some(&Status::Pass), &row(Verdict::Pass, Verdict::Pass)), "agree");
        assert_eq!(agreement(Some(&Status::Pass), &row(Verdict::Pass, Verdict::Fail)), "differs: fails here");
        assert_eq!(agreement(Some(&deferred), &row(Verdict::Fail, Verdict::Fail)), "agree");
        assert_eq!(agreement(Some(&deferred), &row(Verdict::Pass, Verdict::Pass)), "differs: passes here");
        assert_eq!(agreement(Some(&Status::Pass), &row(Verdict::NotRun, Verdict::NotRun)), "not run");
        assert_eq!(agreement(None, &row(Verdict::Pass, Verdict::Pass)), "reference not run");
    }

    #[test]
    fn the_page_sets_each_cell_beside_the_reference_status() {
        let ledger =
            Ledger::parse("sqs\tFR-2\tPass\nsqs\tFR-9\tPass\nsns\tFR-2\tPass\n", Path::new("cells.tsv")).unwrap();
        let mut fidelity = Fidelity::default();
        fidelity.record(cell("sqs", 2), "elasticmq", Verdict::Pass, Verdict::Pass, "");
        fidelity.record(cell("sqs", 9), "elasticmq", Verdict::Fail, Verdict::Fail, "count | 2");
        fidelity.record(cell("sns", 2), "elasticmq", Verdict::NotRun, Verdict::NotRun, "ElasticMQ has no SNS API");
        let page = fidelity.render_markdown(&ledger, &|_| "moto".to_owned(), &[]);
        assert!(page.starts_with("<!-- Generated by `cargo xtask conformance --impl"), "{page}");
        assert!(
            page.contains("## elasticmq beside moto\n\n3 cells: 1 agree, 1 differs: fails here, 1 not run.\n"),
            "{page}"
        );
        assert!(page.contains("| sqs/FR-9 | Pass | Fail | Fail | differs: fails here | count \\| 2 |"), "{page}");
        assert!(page.contains("| sns/FR-2 | Pass | NotRun | NotRun | not run | ElasticMQ has no SNS API |"), "{page}");
    }
}
