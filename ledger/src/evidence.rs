//! Reading the run history as evidence: which run last exercised a cell or
//! a configuration, whether that was at the current source digest, every
//! recorded flake, and a cell's history.
//!
//! "Newest" is by `date` (RFC 3339 UTC, so string order is time order), and
//! for equal dates the later line of the file.
//!
//! A record with per-cell results (`cells`) is evidence for exactly those
//! cells; an older record without them is evidence for every cell of the
//! configurations it totals.

use std::collections::BTreeMap;
use std::fmt;

use crate::{Behaviour, BrokerProvenance, CellId, CellRun, ConfigurationRun, Flake, RunRecord};

/// The record's position in the log, for "newest first" orders.
fn newest_key(index: usize, record: &RunRecord) -> (&str, usize) {
    (record.date.as_str(), index)
}

/// Whether `record` is evidence for `cell`.
pub fn ran_cell(record: &RunRecord, cell: &CellId) -> bool {
    if record.cells.is_empty() {
        ran_configuration(record, &cell.configuration)
    } else {
        let cell = cell.to_string();
        record.cells.iter().any(|run| run.cell == cell)
    }
}

/// Whether `record` ran any cell of `configuration`.
pub fn ran_configuration(record: &RunRecord, configuration: &str) -> bool {
    record.configurations.iter().any(|run| run.configuration == configuration)
        || record.cells.iter().any(|run| configuration_of(&run.cell) == configuration)
}

fn configuration_of(cell: &str) -> &str {
    cell.split_once('/').map_or(cell, |(configuration, _)| configuration)
}

/// The newest record that is evidence for `cell`.
pub fn newest_for_cell<'a>(runs: &'a [RunRecord], cell: &CellId) -> Option<&'a RunRecord> {
    newest(runs, |record| ran_cell(record, cell))
}

/// The newest record that ran `configuration`.
pub fn last_run<'a>(runs: &'a [RunRecord], configuration: &str) -> Option<&'a RunRecord> {
    newest(runs, |record| ran_configuration(record, configuration))
}

fn newest(runs: &[RunRecord], matches: impl Fn(&RunRecord) -> bool) -> Option<&RunRecord> {
    runs.iter()
        .enumerate()
        .filter(|(_, record)| matches(record))
        .max_by_key(|(index, record)| newest_key(*index, record))
        .map(|(_, record)| record)
}

/// The broker a record names for `transport`.
pub fn broker_for<'a>(record: &'a RunRecord, transport: &str) -> Option<&'a BrokerProvenance> {
    record.brokers.iter().find(|broker| broker.transport == transport)
}

/// When and at what a piece of evidence was made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunStamp {
    pub date: String,
    pub commit: String,
    pub dirty: bool,
    pub digest: Option<String>,
}

impl RunStamp {
    pub fn of(record: &RunRecord) -> Self {
        RunStamp {
            date: record.date.clone(),
            commit: record.commit.clone(),
            dirty: record.dirty,
            digest: record.digest.clone(),
        }
    }
}

impl fmt::Display for RunStamp {
    /// `2026-11-30T07:17:25Z at 1e165c2 (dirty), source digest 0123456789ab`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} at {}", self.date, self.commit)?;
        if self.dirty {
            f.write_str(" (dirty)")?;
        }
        match &self.digest {
            Some(digest) => write!(f, ", source digest {}", short_digest(digest)),
            None => f.write_str(", source digest not recorded"),
        }
    }
}

/// The first 12 hex digits, as a reader compares them.
pub fn short_digest(digest: &str) -> &str {
    digest.get(..12).unwrap_or(digest)
}

/// Cells of one configuration whose newest evidence was not made at the
/// current source digest (or that have none).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StaleEvidence {
    pub configuration: String,
    /// The newest run that recorded these cells; None: never recorded.
    pub last: Option<RunStamp>,
    pub behaviours: Vec<Behaviour>,
    /// How many behaviours the configuration has, to say "all of them".
    pub of: usize,
}

impl fmt::Display for StaleEvidence {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: ", self.configuration)?;
        if self.behaviours.len() == self.of {
            write!(f, "all {} cells", self.of)?;
        } else {
            let list: Vec<String> = self.behaviours.iter().map(ToString::to_string).collect();
            f.write_str(&list.join(", "))?;
        }
        match &self.last {
            None => f.write_str(": no recorded run"),
            Some(stamp) => write!(f, ": last run {stamp}"),
        }
    }
}

/// For each configuration (in the order given), the cells whose newest
/// evidence was made at another source digest than `digest`, or at an
/// unrecorded one, or that have none, grouped by that evidence (oldest
/// evidence first, cells never run before all).
pub fn stale_evidence(
    runs: &[RunRecord],
    configurations: &[&str],
    behaviours: &[Behaviour],
    digest: &str,
) -> Vec<StaleEvidence> {
    let mut stale = Vec::new();
    for configuration in configurations {
        // Keyed by the evidence's position (None: never run), so the groups come out in
        // file order and each group's cells in the order given.
        let mut groups: BTreeMap<Option<(&str, usize)>, Vec<Behaviour>> = BTreeMap::new();
        for &behaviour in behaviours {
            let cell = CellId::new(*configuration, behaviour);
            let evidence = runs
                .iter()
                .enumerate()
                .filter(|(_, record)| ran_cell(record, &cell))
                .max_by_key(|(index, record)| newest_key(*index, record));
            if evidence.is_some_and(|(_, record)| record.digest.as_deref() == Some(digest)) {
                continue;
            }
            groups.entry(evidence.map(|(index, record)| newest_key(index, record))).or_default().push(behaviour);
        }
        for (key, group) in groups {
            stale.push(StaleEvidence {
                configuration: (*configuration).to_owned(),
                last: key.map(|(_, index)| RunStamp::of(&runs[index])),
                behaviours: group,
                of: behaviours.len(),
            });
        }
    }
    stale
}

/// A flake and the run that recorded it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordedFlake<'a> {
    pub record: &'a RunRecord,
    pub configuration: &'a ConfigurationRun,
    pub flake: &'a Flake,
}

impl RecordedFlake<'_> {
    /// The first line of the first failure's message.
    pub fn first_line(&self) -> &str {
        self.flake.first_failure.lines().find(|line| !line.trim().is_empty()).unwrap_or("").trim()
    }
}

/// Every recorded flake, newest run first (in record order within a run).
pub fn flakes(runs: &[RunRecord]) -> Vec<RecordedFlake<'_>> {
    let mut order: Vec<(usize, &RunRecord)> = runs.iter().enumerate().collect();
    order.sort_by_key(|(index, record)| std::cmp::Reverse(newest_key(*index, record)));
    order
        .into_iter()
        .flat_map(|(_, record)| {
            record.configurations.iter().flat_map(move |configuration| {
                configuration.flakes.iter().map(move |flake| RecordedFlake { record, configuration, flake })
            })
        })
        .collect()
}

/// How many times each cell (as written in the records) has been recorded
/// as a flake, in any variant.
pub fn flake_counts(runs: &[RunRecord]) -> BTreeMap<&str, usize> {
    let mut counts = BTreeMap::new();
    for run in runs.iter().flat_map(|record| &record.configurations) {
        for flake in &run.flakes {
            *counts.entry(flake.cell.as_str()).or_insert(0) += 1;
        }
    }
    counts
}

/// One recorded run of one cell under one variant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CellOutcome<'a> {
    /// The record has the cell's own result.
    Cell(&'a CellRun),
    /// An older record: only its configuration's totals for the variant.
    Totals(&'a ConfigurationRun),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HistoryEntry<'a> {
    pub record: &'a RunRecord,
    pub outcome: CellOutcome<'a>,
}

impl HistoryEntry<'_> {
    pub fn variant(&self) -> &str {
        match self.outcome {
            CellOutcome::Cell(run) => &run.variant,
            CellOutcome::Totals(run) => &run.variant,
        }
    }
}

/// Every recorded run of `cell`, newest first; within a run, in record order.
pub fn cell_history<'a>(runs: &'a [RunRecord], cell: &CellId) -> Vec<HistoryEntry<'a>> {
    let name = cell.to_string();
    let mut order: Vec<(usize, &RunRecord)> = runs.iter().enumerate().collect();
    order.sort_by_key(|(index, record)| std::cmp::Reverse(newest_key(*index, record)));
    let mut history = Vec::new();
    for (_, record) in order {
        if record.cells.is_empty() {
            for run in record.configurations.iter().filter(|run| run.configuration == cell.configuration) {
                history.push(HistoryEntry { record, outcome: CellOutcome::Totals(run) });
            }
        } else {
            for run in record.cells.iter().filter(|run| run.cell == name) {
                history.push(HistoryEntry { record, outcome: CellOutcome::Cell(run) });
            }
        }
    }
    history
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) fn cell(s: &str) -> CellId {
        s.parse().unwrap()
    }

    /// An old record: totals only.
    pub(crate) fn old(date: &str, commit: &str, configurations: &[&str]) -> RunRecord {
        RunRecord {
            date: date.into(),
            commit: commit.into(),
            configurations: configurations
                .iter()
                .flat_map(|configuration| {
                    ["proactor", "reactor"].map(|variant| ConfigurationRun {
                        configuration: (*configuration).into(),
                        variant: variant.into(),
                        passed: 2,
                        ..ConfigurationRun::default()
                    })
                })
                .collect(),
            ..RunRecord::default()
        }
    }

    /// A record with per-cell results: `cells` as (cell, variant, result).
    pub(crate) fn new(date: &str, commit: &str, digest: &str, cells: &[(&str, &str, &str)]) -> RunRecord {
        let mut record = RunRecord {
            date: date.into(),
            commit: commit.into(),
            digest: Some(digest.into()),
            toolchain: Some("rustc 1.95.0".into()),
            ..RunRecord::default()
        };
        for (name, variant, result) in cells {
            record.cells.push(CellRun {
                cell: (*name).into(),
                variant: (*variant).into(),
                result: (*result).into(),
                duration_ms: 1500,
            });
            let configuration = name.split_once('/').unwrap().0;
            let position = record
                .configurations
                .iter()
                .position(|run| run.configuration == configuration && run.variant == *variant)
                .unwrap_or_else(|| {
                    record.configurations.push(ConfigurationRun {
                        configuration: configuration.into(),
                        variant: (*variant).into(),
                        ..ConfigurationRun::default()
                    });
                    record.configurations.len() - 1
                });
            let run = &mut record.configurations[position];
            match *result {
                "passed" => run.passed += 1,
                "failed" => run.failed += 1,
                "skipped" => run.skipped += 1,
                _ => {
                    run.passed += 1;
                    run.flakes.push(Flake {
                        cell: (*name).into(),
                        variant: (*variant).into(),
                        first_failure: format!("\nthread '{name}' panicked at cell.rs:9:\nno arrival in 30 s\n"),
                    })
                }
            }
        }
        record
    }

    fn runs() -> Vec<RunRecord> {
        vec![
            old("2026-11-30T07:00:00Z", "aaa0001", &["memory", "sqs"]),
            new(
                "2026-12-01T09:00:00Z",
                "bbb0002",
                "d1",
                &[("memory/FR-2", "reactor", "passed"), ("memory/FR-2", "proactor", "flaky")],
            ),
            old("2026-11-30T08:00:00Z", "aaa0003", &["sqs"]),
            new(
                "2026-12-01T10:00:00Z",
                "ccc0004",
                "d2",
                &[("memory/FR-9", "reactor", "flaky"), ("memory/FR-9", "proactor", "failed")],
            ),
        ]
    }

    #[test]
    fn newest_evidence_is_by_date_then_file_order() {
        let runs = runs();
        assert_eq!(newest_for_cell(&runs, &cell("memory/FR-2")).unwrap().commit, "bbb0002");
        assert_eq!(newest_for_cell(&runs, &cell("memory/FR-9")).unwrap().commit, "ccc0004");
        // An old record counts for every cell of its configurations; the later one in time wins
        // although it is earlier in the file.
        assert_eq!(newest_for_cell(&runs, &cell("memory/FR-4")).unwrap().commit, "aaa0001");
        assert_eq!(newest_for_cell(&runs, &cell("sqs/FR-4")).unwrap().commit, "aaa0003");
        assert_eq!(newest_for_cell(&runs, &cell("gcp-pull/FR-4")), None);
        let mut same_date = runs.clone();
        same_date.push(old("2026-11-30T08:00:00Z", "aaa0005", &["sqs"]));
        assert_eq!(newest_for_cell(&same_date, &cell("sqs/FR-4")).unwrap().commit, "aaa0005");

        assert_eq!(last_run(&runs, "memory").unwrap().commit, "ccc0004");
        assert_eq!(last_run(&runs, "sqs").unwrap().commit, "aaa0003");
        assert_eq!(last_run(&runs, "gcp-pull"), None);
    }

    #[test]
    fn stale_evidence_groups_by_configuration_and_run() {
        let runs = runs();
        let behaviours = [Behaviour::fr(2), Behaviour::fr(4), Behaviour::fr(9)];
        let stale = stale_evidence(&runs, &["memory", "sqs", "gcp-pull"], &behaviours, "d2");
        let shown: Vec<String> = stale.iter().map(ToString::to_string).collect();
        assert_eq!(
            shown,
            [
                "memory: FR-4: last run 2026-11-30T07:00:00Z at aaa0001, source digest not recorded",
                "memory: FR-2: last run 2026-12-01T09:00:00Z at bbb0002, source digest d1",
                "sqs: all 3 cells: last run 2026-11-30T08:00:00Z at aaa0003, source digest not recorded",
                "gcp-pull: all 3 cells: no recorded run",
            ]
        );
        assert_eq!(stale[1].last.as_ref().unwrap().digest.as_deref(), Some("d1"));
        // At d1, FR-2 is fresh and FR-9 (run at d2) is stale.
        let stale = stale_evidence(&runs, &["memory"], &behaviours, "d1");
        let cells: Vec<Vec<Behaviour>> = stale.iter().map(|group| group.behaviours.clone()).collect();
        assert_eq!(cells, [vec![Behaviour::fr(4)], vec![Behaviour::fr(9)]]);
    }

    #[test]
    fn everything_recorded_at_the_digest_is_fresh() {
        let runs = vec![new("2026-12-01T10:00:00Z", "c", "d", &[("memory/FR-2", "reactor", "passed")])];
        assert_eq!(stale_evidence(&runs, &["memory"], &[Behaviour::fr(2)], "d"), []);
        let mut dirty = runs[0].clone();
        dirty.dirty = true;
        dirty.digest = Some("0123456789abcdef".into());
        assert_eq!(RunStamp::of(&dirty).to_string(), "2026-12-01T10:00:00Z at c (dirty), source digest 0123456789ab");
    }

    #[test]
    fn flakes_newest_first_with_first_lines() {
        let runs = runs();
        let flakes = flakes(&runs);
        let listed: Vec<(&str, &str, &str, &str)> = flakes
            .iter()
            .map(|f| (f.record.commit.as_str(), f.flake.cell.as_str(), f.flake.variant.as_str(), f.first_line()))
            .collect();
        assert_eq!(
            listed,
            [
                ("ccc0004", "memory/FR-9", "reactor", "thread 'memory/FR-9' panicked at cell.rs:9:"),
                ("bbb0002", "memory/FR-2", "proactor", "thread 'memory/FR-2' panicked at cell.rs:9:"),
            ]
        );
        assert_eq!(flake_counts(&runs), BTreeMap::from([("memory/FR-2", 1), ("memory/FR-9", 1)]));
    }

    #[test]
    fn history_has_cell_results_and_old_totals_newest_first() {
        let runs = runs();
        let history = cell_history(&runs, &cell("memory/FR-2"));
        let listed: Vec<(&str, &str, String)> = history
            .iter()
            .map(|entry| {
                let outcome = match entry.outcome {
                    CellOutcome::Cell(run) => run.result.clone(),
                    CellOutcome::Totals(run) => format!("totals {}", run.passed),
                };
                (entry.record.commit.as_str(), entry.variant(), outcome)
            })
            .collect();
        assert_eq!(
            listed,
            [
                ("bbb0002", "reactor", "passed".to_owned()),
                ("bbb0002", "proactor", "flaky".to_owned()),
                ("aaa0001", "proactor", "totals 2".to_owned()),
                ("aaa0001", "reactor", "totals 2".to_owned()),
            ]
        );
        assert!(cell_history(&runs, &cell("gcp-pull/FR-2")).is_empty());
    }

    #[test]
    fn broker_by_transport() {
        let mut record = old("2026-11-30T07:00:00Z", "a", &["sqs"]);
        record.brokers.push(BrokerProvenance {
            transport: "sqs".into(),
            source: "local".into(),
            implementation: "moto".into(),
            version: "5.1.0".into(),
        });
        assert_eq!(broker_for(&record, "sqs").unwrap().implementation, "moto");
        assert_eq!(broker_for(&record, "gcp"), None);
    }
}
