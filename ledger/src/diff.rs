//! The ledger review: what a change does to the ledger, between a base (the
//! ledger as it was at some commit) and the working tree, as one pull-request
//! comment.
//!
//! Pure: the caller reads both sides (`git show` for the base) and parses them
//! with [`Ledger::parse`] and [`crate::parse_runs`]; this module compares and
//! renders. The same [`LedgerDiff`] is printed as Markdown for people and
//! serialised as JSON for tools, so both say the same thing.

use std::fmt::Write;

use serde::Serialize;

use crate::evidence::flakes;
use crate::{Ledger, RunRecord, Status, StatusCounts};

/// Everything the review reports.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LedgerDiff {
    /// What the ledger is compared with, as the caller names it (e.g. `main (1a2b3c4)`).
    pub base: String,
    /// Status counts over every cell of each side's ledger.
    pub before: StatusCounts,
    pub after: StatusCounts,
    /// Cells whose row changed, in ledger order (configuration, then FR number).
    pub cells: Vec<CellChange>,
    /// How many run records the working tree has that the base does not.
    pub new_runs: usize,
    /// The flakes those new records observed, newest run first.
    pub new_flakes: Vec<NewFlake>,
}

/// One cell whose row differs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CellChange {
    /// `<configuration>/FR-<n>`.
    pub cell: String,
    pub change: Change,
    /// None for a new cell.
    pub before: Option<CellStatus>,
    /// None for a removed cell.
    pub after: Option<CellStatus>,
}

/// What kind of difference a [`CellChange`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Change {
    /// The status word changed (e.g. Deferred -> Fixed).
    Status,
    /// The cell has no row at the base.
    Added,
    /// The cell has no row in the working tree.
    Removed,
    /// Same status, another reference or reason.
    Note,
}

/// A status with its reference and reason, flattened for JSON readers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CellStatus {
    /// `Unknown`, `Pass`, `Fixed` or `Deferred`.
    pub status: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reference: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// As the ledger displays it: `Deferred (#4: reason)`.
    pub text: String,
}

impl From<&Status> for CellStatus {
    fn from(status: &Status) -> Self {
        let (reference, reason) = match status {
            Status::Unknown | Status::Pass => (None, None),
            Status::Fixed { reference } => (Some(reference.clone()), None),
            Status::Deferred { reference, reason } => (Some(reference.clone()), Some(reason.clone())),
        };
        CellStatus { status: status.name(), reference, reason, text: status.to_string() }
    }
}

/// A flake recorded by a run the base does not have.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NewFlake {
    pub cell: String,
    pub variant: String,
    /// The run that recorded it.
    pub date: String,
    pub commit: String,
    /// The first line of the first failure's message.
    pub first_failure: String,
}

impl LedgerDiff {
    /// Compares the base's ledger and run records with the working tree's.
    pub fn between(
        base: impl Into<String>,
        (before, before_runs): (&Ledger, &[RunRecord]),
        (after, after_runs): (&Ledger, &[RunRecord]),
    ) -> LedgerDiff {
        let new_records = new_records(before_runs, after_runs);
        let new_flakes = flakes(&new_records)
            .iter()
            .map(|flake| NewFlake {
                cell: flake.flake.cell.clone(),
                variant: flake.flake.variant.clone(),
                date: flake.record.date.clone(),
                commit: flake.record.commit.clone(),
                first_failure: flake.first_line().to_owned(),
            })
            .collect();
        LedgerDiff {
            base: base.into(),
            before: counts(before),
            after: counts(after),
            cells: cell_changes(before, after),
            new_runs: new_records.len(),
            new_flakes,
        }
    }

    /// No cell changed and no new run recorded a flake.
    pub fn is_empty(&self) -> bool {
        self.cells.is_empty() && self.new_flakes.is_empty()
    }

    /// The pull-request comment: a headline of counts, the changed cells by
    /// kind, then the new flakes; or one line when nothing changed.
    pub fn to_markdown(&self) -> String {
        let mut out = String::new();
        if self.is_empty() {
            let _ = writeln!(
                out,
                "Ledger: no cell changed since {} ({}; {}, no new flakes).",
                self.base,
                totals(&self.after),
                runs_phrase(self.new_runs)
            );
            return out;
        }
        let _ = writeln!(out, "### Conformance ledger since {}\n", self.base);
        let _ = writeln!(out, "{}\n", headline(&self.before, &self.after));
        for (change, title) in [
            (Change::Status, "Status changes"),
            (Change::Added, "New cells"),
            (Change::Removed, "Removed cells"),
            (Change::Note, "Reference or reason changes"),
        ] {
            let lines: Vec<&CellChange> = self.cells.iter().filter(|cell| cell.change == change).collect();
            if lines.is_empty() {
                continue;
            }
            let _ = writeln!(out, "**{title}** ({})\n", lines.len());
            for line in lines {
                let _ = writeln!(out, "- {}", change_line(line));
            }
            out.push('\n');
        }
        if self.new_flakes.is_empty() {
            let _ = writeln!(out, "No new flakes ({}).", runs_phrase(self.new_runs));
        } else {
            let _ = writeln!(out, "**New flakes** ({}, in {})\n", self.new_flakes.len(), runs_phrase(self.new_runs));
            for flake in &self.new_flakes {
                let _ = writeln!(
                    out,
                    "- `{}` {} ({} at {}): {}",
                    flake.cell,
                    flake.variant,
                    flake.date,
                    flake.commit,
                    inline_code(&flake.first_failure)
                );
            }
        }
        out
    }
}

/// Records of `after` that `before` does not have. The log is append-only but
/// merged from branches and shards, so this is a multiset difference, not a
/// suffix: each base record cancels one equal record of the working tree.
fn new_records(before: &[RunRecord], after: &[RunRecord]) -> Vec<RunRecord> {
    let mut unmatched: Vec<&RunRecord> = before.iter().collect();
    let mut new = Vec::new();
    for record in after {
        match unmatched.iter().position(|old| *old == record) {
            Some(index) => {
                unmatched.swap_remove(index);
            }
            None => new.push(record.clone()),
        }
    }
    new
}

fn counts(ledger: &Ledger) -> StatusCounts {
    let mut counts = StatusCounts::default();
    ledger.cells().for_each(|(_, status)| counts.add(Some(status)));
    counts
}

fn cell_changes(before: &Ledger, after: &Ledger) -> Vec<CellChange> {
    let mut cells: Vec<_> = before.cells().map(|(cell, _)| cell).chain(after.cells().map(|(cell, _)| cell)).collect();
    cells.sort();
    cells.dedup();
    cells
        .into_iter()
        .filter_map(|cell| {
            let (old, new) = (before.get(cell), after.get(cell));
            let change = match (old, new) {
                (Some(old), Some(new)) if old == new => return None,
                (Some(old), Some(new)) if old.name() == new.name() => Change::Note,
                (Some(_), Some(_)) => Change::Status,
                (None, Some(_)) => Change::Added,
                (Some(_), None) => Change::Removed,
                (None, None) => return None,
            };
            Some(CellChange {
                cell: cell.to_string(),
                change,
                before: old.map(CellStatus::from),
                after: new.map(CellStatus::from),
            })
        })
        .collect()
}

/// `Pass 113 -> 112 (-1) · Fixed 0 -> 1 (+1) · Deferred 7 -> 7`; Unknown only when either side has one.
fn headline(before: &StatusCounts, after: &StatusCounts) -> String {
    let mut parts = vec![
        count_change("Pass", before.pass, after.pass),
        count_change("Fixed", before.fixed, after.fixed),
        count_change("Deferred", before.deferred, after.deferred),
    ];
    if before.unknown + after.unknown > 0 {
        parts.push(count_change("Unknown", before.unknown, after.unknown));
    }
    format!("{} ({} -> {} cells)", parts.join(" · "), before.total(), after.total())
}

fn count_change(name: &str, before: usize, after: usize) -> String {
    let delta = after as i64 - before as i64;
    match delta {
        0 => format!("{name} {before} -> {after}"),
        _ => format!("**{name} {before} -> {after}** ({delta:+})"),
    }
}

fn totals(counts: &StatusCounts) -> String {
    let mut text = format!("{} Pass, {} Fixed, {} Deferred", counts.pass, counts.fixed, counts.deferred);
    if counts.unknown > 0 {
        let _ = write!(text, ", {} Unknown", counts.unknown);
    }
    text
}

fn runs_phrase(runs: usize) -> String {
    match runs {
        1 => "1 new run record".to_owned(),
        n => format!("{n} new run records"),
    }
}

/// `sqs-fifo/FR-9: Deferred (#4: reason) -> Fixed (#12)`; a new cell shows its status, a
/// removed one what it was.
fn change_line(change: &CellChange) -> String {
    match (&change.before, &change.after) {
        (Some(before), Some(after)) => format!("`{}`: {} -> {}", change.cell, before.text, after.text),
        (None, Some(after)) => format!("`{}`: {}", change.cell, after.text),
        (Some(before), None) => format!("`{}`: was {}", change.cell, before.text),
        (None, None) => format!("`{}`", change.cell),
    }
}

/// A failure message as inline code, so Markdown in it is shown as written. A
/// backtick inside would end the span: use a longer fence, as CommonMark allows.
fn inline_code(text: &str) -> String {
    if text.is_empty() {
        return "(no message)".to_owned();
    }
    let fence = if text.contains('`') { "``" } else { "`" };
    let pad = if text.starts_with('`') || text.ends_with('`') { " " } else { "" };
    format!("{fence}{pad}{text}{pad}{fence}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::evidence::tests::new;
    use std::path::Path;

    fn ledger(rows: &str) -> Ledger {
        Ledger::parse(rows, Path::new("cells.tsv")).unwrap()
    }

    const BASE: &str = "\
memory\tFR-2\tPass
memory\tFR-9\tPass
sqs-fifo\tFR-9\tDeferred\t#4\tSQS FIFO queues take no per-message DelaySeconds
sqs-fifo\tFR-23\tDeferred\t#4\tmoto is slow
sqs\tFR-2\tPass
";

    const HEAD: &str = "\
memory\tFR-2\tPass
memory\tFR-9\tDeferred\t#7\tthe requeue forgets the count
memory\tFR-10\tUnknown
sqs-fifo\tFR-9\tDeferred\t#4\tSQS FIFO queues have no per-message delay
sqs-fifo\tFR-23\tFixed\t#12
";

    fn runs() -> (Vec<RunRecord>, Vec<RunRecord>) {
        let old = new("2026-12-01T09:00:00Z", "aaa0001", "d1", &[("memory/FR-2", "reactor", "flaky")]);
        let fixed = new("2026-12-01T10:00:00Z", "bbb0002", "d2", &[("sqs-fifo/FR-23", "proactor", "passed")]);
        let flaky = new("2026-12-01T11:00:00Z", "ccc0003", "d2", &[("memory/FR-2", "proactor", "flaky")]);
        (vec![old.clone()], vec![old, fixed, flaky])
    }

    fn diff() -> LedgerDiff {
        let (before_runs, after_runs) = runs();
        LedgerDiff::between("main (aaa0001)", (&ledger(BASE), &before_runs), (&ledger(HEAD), &after_runs))
    }

    #[test]
    fn finds_status_changes_new_removed_and_note_changes_in_ledger_order() {
        let diff = diff();
        let listed: Vec<(&str, Change)> = diff.cells.iter().map(|c| (c.cell.as_str(), c.change)).collect();
        assert_eq!(
            listed,
            [
                ("memory/FR-9", Change::Status),
                ("memory/FR-10", Change::Added),
                ("sqs/FR-2", Change::Removed),
                ("sqs-fifo/FR-9", Change::Note),
                ("sqs-fifo/FR-23", Change::Status),
            ]
        );
        assert_eq!(diff.before, StatusCounts { pass: 3, fixed: 0, deferred: 2, unknown: 0, missing: 0 });
        assert_eq!(diff.after, StatusCounts { pass: 1, fixed: 1, deferred: 2, unknown: 1, missing: 0 });
        assert_eq!(diff.new_runs, 2);
    }

    #[test]
    fn only_flakes_of_new_records_are_reported() {
        let diff = diff();
        assert_eq!(
            diff.new_flakes,
            [NewFlake {
                cell: "memory/FR-2".into(),
                variant: "proactor".into(),
                date: "2026-12-01T11:00:00Z".into(),
                commit: "ccc0003".into(),
                first_failure: "thread 'memory/FR-2' panicked at cell.rs:9:".into(),
            }]
        );
    }

    #[test]
    fn new_records_is_a_multiset_difference() {
        let a = new("2026-12-01T09:00:00Z", "a", "d", &[]);
        let b = new("2026-12-01T10:00:00Z", "b", "d", &[]);
        // A record merged in before the base's own, and a second copy of one: both new.
        let after = [b.clone(), a.clone(), a.clone()];
        assert_eq!(new_records(std::slice::from_ref(&a), &after), [b, a]);
        assert_eq!(new_records(&after, &after[..1]), []);
    }

    #[test]
    fn renders_the_review_comment() {
        assert_eq!(
            diff().to_markdown(),
            "\
### Conformance ledger since main (aaa0001)

**Pass 3 -> 1** (-2) · **Fixed 0 -> 1** (+1) · Deferred 2 -> 2 · **Unknown 0 -> 1** (+1) (5 -> 5 cells)

**Status changes** (2)

- `memory/FR-9`: Pass -> Deferred (#7: the requeue forgets the count)
- `sqs-fifo/FR-23`: Deferred (#4: moto is slow) -> Fixed (#12)

**New cells** (1)

- `memory/FR-10`: Unknown

**Removed cells** (1)

- `sqs/FR-2`: was Pass

**Reference or reason changes** (1)

- `sqs-fifo/FR-9`: Deferred (#4: SQS FIFO queues take no per-message DelaySeconds) -> Deferred (#4: SQS FIFO queues have no per-message delay)

**New flakes** (1, in 2 new run records)

- `memory/FR-2` proactor (2026-12-01T11:00:00Z at ccc0003): `thread 'memory/FR-2' panicked at cell.rs:9:`
"
        );
    }

    #[test]
    fn nothing_changed_is_one_line() {
        let same = ledger(BASE);
        let (runs, _) = runs();
        let diff = LedgerDiff::between("main (aaa0001)", (&same, &runs), (&same, &runs));
        assert!(diff.is_empty());
        assert_eq!(
            diff.to_markdown(),
            "Ledger: no cell changed since main (aaa0001) (3 Pass, 0 Fixed, 2 Deferred; 0 new run records, no new flakes).\n"
        );
    }

    #[test]
    fn a_missing_base_is_an_empty_ledger_and_every_cell_is_new() {
        let diff = LedgerDiff::between("v0", (&Ledger::new(), &[]), (&ledger("memory\tFR-2\tPass\n"), &[]));
        assert_eq!(
            diff.to_markdown(),
            "\
### Conformance ledger since v0

**Pass 0 -> 1** (+1) · Fixed 0 -> 0 · Deferred 0 -> 0 (0 -> 1 cells)

**New cells** (1)

- `memory/FR-2`: Pass

No new flakes (0 new run records).
"
        );
    }

    #[test]
    fn serialises_the_same_content_as_json() {
        let json = serde_json::to_value(diff()).unwrap();
        assert_eq!(json["base"], "main (aaa0001)");
        assert_eq!(json["before"]["pass"], 3);
        assert_eq!(json["after"]["fixed"], 1);
        assert_eq!(
            json["cells"][4],
            serde_json::json!({
                "cell": "sqs-fifo/FR-23",
                "change": "status",
                "before": {"status": "Deferred", "reference": "#4", "reason": "moto is slow", "text": "Deferred (#4: moto is slow)"},
                "after": {"status": "Fixed", "reference": "#12", "text": "Fixed (#12)"},
            })
        );
        assert_eq!(json["cells"][1]["before"], serde_json::Value::Null);
        assert_eq!(json["new_runs"], 2);
        assert_eq!(json["new_flakes"][0]["commit"], "ccc0003");
    }

    #[test]
    fn a_backtick_in_a_failure_message_keeps_the_code_span_whole() {
        assert_eq!(inline_code("left: `3`"), "`` left: `3` ``");
        assert_eq!(inline_code("plain"), "`plain`");
        assert_eq!(inline_code(""), "(no message)");
    }
}
