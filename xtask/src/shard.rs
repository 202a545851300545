//! Sharded conformance runs: the matrix spread over several machines.
//!
//! `cargo xtask conformance --shard K/N --out DIR` runs whole configurations only (a
//! configuration's cells share one broker and run at once, so splitting one would pay its broker
//! start and its lease waits twice). The plan is deterministic, so every machine that checks out
//! the same commit computes the same one without talking to the others:
//!
//! * a configuration weighs the sum of its cells' durations (both variants) in the newest record
//!   of `runs.jsonl` that has cells of it, or [`DEFAULT_WEIGHT`] when none has;
//! * heaviest first (ties by name), each goes to the lightest shard so far (ties to the lowest K).
//!
//! A shard never touches the ledger: it writes `shard-K-of-N.json` (its spec, the whole
//! selection and plan, its cells' variant results and its run record) into DIR. `cargo xtask
//! ledger merge` checks that the files are one complete run (every K of one N, the same commit,
//! sources, selection and plan, no cell twice) and applies their union through
//! [`crate::record::apply`], the path an unsharded run takes. The merged run is ONE record in
//! `runs.jsonl`, as an unsharded run of the same results would write: same cells, totals and
//! brokers (each broker once), and the latest shard's date. So history, flakes and the "last run"
//! of `LEDGER.md` read a sharded run exactly as an unsharded one.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use ledger::{CellId, CellResult, RunRecord, VariantResult};
use serde::{Deserialize, Serialize};

use crate::selection::Selection;

/// The weight of a configuration no run record has timed: about a broker configuration's
/// slowest cells (the committed ledger's sqs configurations sum to 60–80 s), so an untimed
/// configuration is neither piled onto one shard nor treated as free.
pub const DEFAULT_WEIGHT: Duration = Duration::from_secs(60);

/// The shard file format; a merge refuses files of another.
const FORMAT: u32 = 1;

/// `K/N`: shard K of N, 1 <= K <= N.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Spec {
    pub index: u32,
    pub count: u32,
}

impl FromStr for Spec {
    type Err = String;

    fn from_str(text: &str) -> Result<Spec, String> {
        let invalid = || format!("{text:?} is not a shard; valid form: K/N with 1 <= K <= N (e.g. 1/4)");
        let (index, count) = text.split_once('/').ok_or_else(invalid)?;
        let (index, count): (u32, u32) =
            (index.trim().parse().map_err(|_| invalid())?, count.trim().parse().map_err(|_| invalid())?);
        if index == 0 || index > count {
            return Err(invalid());
        }
        Ok(Spec { index, count })
    }
}

impl fmt::Display for Spec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.index, self.count)
    }
}

impl Spec {
    pub fn file_name(&self) -> String {
        format!("shard-{}-of-{}.json", self.index, self.count)
    }
}

/// Each configuration's weight: the summed cell durations of the newest record that has any of
/// its cells, or [`DEFAULT_WEIGHT`].
pub fn weights(runs: &[RunRecord], configurations: &[&str]) -> BTreeMap<String, Duration> {
    let configuration_of = |cell: &str| cell.rsplit_once('/').map_or(cell.to_owned(), |(c, _)| c.to_owned());
    configurations
        .iter()
        .map(|&configuration| {
            let recorded = runs.iter().rev().find_map(|run| {
                let mine: Vec<u64> = run
                    .cells
                    .iter()
                    .filter(|c| configuration_of(&c.cell) == configuration)
                    .map(|c| c.duration_ms)
                    .collect();
                (!mine.is_empty()).then(|| Duration::from_millis(mine.iter().sum()))
            });
            (configuration.to_owned(), recorded.unwrap_or(DEFAULT_WEIGHT))
        })
        .collect()
}

/// The configurations of each shard (index 0 is shard 1), each list sorted by name: greedy
/// longest-first, ties by name, each to the lightest shard so far, ties to the lowest index.
pub fn plan(weights: &BTreeMap<String, Duration>, count: u32) -> Vec<Vec<String>> {
    let mut heaviest_first: Vec<(&String, &Duration)> = weights.iter().collect();
    heaviest_first.sort_by(|a, b| b.1.cmp(a.1).then_with(|| a.0.cmp(b.0)));
    let mut shards: Vec<(Duration, Vec<String>)> = vec![(Duration::ZERO, Vec::new()); count as usize];
    for (configuration, weight) in heaviest_first {
        // min_by_key keeps the first of equal loads: the lowest index.
        let lightest = shards.iter_mut().min_by_key(|(load, _)| *load).expect("count >= 1");
        lightest.0 += *weight;
        lightest.1.push(configuration.clone());
    }
    shards
        .into_iter()
        .map(|(_, mut configurations)| {
            configurations.sort();
            configurations
        })
        .collect()
}

/// What a sharded run selected in full (before its shard's slice), so a merge can refuse shards
/// of different runs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SelectionRecord {
    pub transports: Vec<String>,
    pub configurations: Vec<String>,
    /// `FR-n`.
    pub behaviours: Vec<String>,
    pub variants: Vec<String>,
    /// Whether every pump variant ran: only then is a cell missing one a problem.
    pub every_variant: bool,
}

impl SelectionRecord {
    pub fn of(selection: &Selection, every_variant: bool) -> SelectionRecord {
        SelectionRecord {
            transports: selection.transports.iter().map(|(t, _)| (*t).to_owned()).collect(),
            configurations: selection.configurations.iter().map(|c| c.name.clone()).collect(),
            behaviours: selection.behaviours.iter().map(ToString::to_string).collect(),
            variants: selection.variants.iter().map(|v| (*v).to_owned()).collect(),
            every_variant,
        }
    }
}

/// One pump variant's result, as a shard file spells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Variant {
    Passed,
    Failed,
    NotRun,
}

impl From<VariantResult> for Variant {
    fn from(result: VariantResult) -> Variant {
        match result {
            VariantResult::Passed => Variant::Passed,
            VariantResult::Failed => Variant::Failed,
            VariantResult::NotRun => Variant::NotRun,
        }
    }
}

impl From<Variant> for VariantResult {
    fn from(result: Variant) -> VariantResult {
        match result {
            Variant::Passed => VariantResult::Passed,
            Variant::Failed => VariantResult::Failed,
            Variant::NotRun => VariantResult::NotRun,
        }
    }
}

/// A cell's result over both variants, as [`CellResult`] (which the ledger keeps free of serde).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShardCell {
    /// `<configuration>/FR-<n>`.
    pub cell: String,
    pub reactor: Variant,
    pub proactor: Variant,
}

/// `shard-K-of-N.json`: one shard's part of a run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShardFile {
    pub format: u32,
    pub shard: Spec,
    /// `git rev-parse --short HEAD` of the machine that ran it.
    pub commit: String,
    /// `ledger::source_digest` of the sources it ran.
    pub digest: String,
    pub selection: SelectionRecord,
    /// Every shard's configurations (index 0 is shard 1), as this machine planned them.
    pub plan: Vec<Vec<String>>,
    pub cells: Vec<ShardCell>,
    /// None when the shard's slice was empty: it ran nothing, but a merge still counts it.
    pub record: Option<RunRecord>,
}

impl ShardFile {
    pub fn new(
        shard: Spec,
        commit: String,
        digest: String,
        selection: SelectionRecord,
        plan: Vec<Vec<String>>,
        results: &[CellResult],
        record: Option<RunRecord>,
    ) -> ShardFile {
        let cells = results
            .iter()
            .map(|r| ShardCell { cell: r.cell.to_string(), reactor: r.reactor.into(), proactor: r.proactor.into() })
            .collect();
        ShardFile { format: FORMAT, shard, commit, digest, selection, plan, cells, record }
    }

    /// Writes `DIR/shard-K-of-N.json` atomically, creating DIR; returns the path.
    pub fn write(&self, dir: &Path) -> Result<PathBuf> {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        let path = dir.join(self.shard.file_name());
        let mut text = serde_json::to_string_pretty(self).expect("a shard file always serializes");
        text.push('\n');
        ledger::file::write_atomically(&path, &text)?;
        Ok(path)
    }
}

/// Every `shard-*-of-*.json` in `dirs`; a folder without one is an error naming it.
pub fn read_dirs(dirs: &[PathBuf]) -> Result<Vec<(PathBuf, ShardFile)>> {
    let mut files = Vec::new();
    for dir in dirs {
        let entries = std::fs::read_dir(dir)
            .with_context(|| format!("reading {} (ledger merge takes the folders given to --out)", dir.display()))?;
        let mut found: Vec<PathBuf> = entries
            .filter_map(|entry| entry.ok().map(|e| e.path()))
            .filter(|path| {
                path.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with("shard-") && n.ends_with(".json"))
            })
            .collect();
        if found.is_empty() {
            bail!(
                "{}: no shard-K-of-N.json file (written by cargo xtask conformance --shard K/N --out DIR)",
                dir.display()
            );
        }
        found.sort();
        for path in found {
            let text = std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
            let file: ShardFile =
                serde_json::from_str(&text).with_context(|| format!("{}: not a shard file", path.display()))?;
            if file.format != FORMAT {
                bail!("{}: shard file format {}, this xtask reads format {FORMAT}", path.display(), file.format);
            }
            files.push((path, file));
        }
    }
    Ok(files)
}

/// The union of a complete set of shards, ready for [`crate::record::apply`].
#[derive(Debug)]
pub struct Merged {
    pub results: Vec<CellResult>,
    /// The shards' run records as one; None when no shard ran a cell.
    pub record: Option<RunRecord>,
    pub every_variant: bool,
    pub count: u32,
}

/// Checks that `files` are every shard of one run and merges them. `transports` is the
/// manifest's transport order, the order an unsharded record lists its brokers in.
pub fn merge(files: &[(PathBuf, ShardFile)], transports: &[&str]) -> Result<Merged> {
    let Some((first_path, first)) = files.first() else { bail!("ledger merge: no shard files given") };
    let name = |path: &Path| path.display().to_string();
    for (path, file) in &files[1..] {
        let differ = |what: &str, a: &dyn fmt::Debug, b: &dyn fmt::Debug| {
            anyhow::anyhow!(
                "{} and {} are not shards of one run: their {what} differ ({a:?} vs {b:?})",
                name(first_path),
                name(path)
            )
        };
        if file.shard.count != first.shard.count {
            return Err(differ("shard counts N", &first.shard.count, &file.shard.count));
        }
        if file.commit != first.commit {
            return Err(differ("commits", &first.commit, &file.commit));
        }
        if file.digest != first.digest {
            return Err(differ("source digests", &first.digest, &file.digest));
        }
        if file.selection != first.selection {
            return Err(differ("selections", &first.selection, &file.selection));
        }
        if file.plan != first.plan {
            return Err(differ("plans (ledger/runs.jsonl differed?)", &first.plan, &file.plan));
        }
    }
    let count = first.shard.count;
    let mut by_index: BTreeMap<u32, &Path> = BTreeMap::new();
    for (path, file) in files {
        if let Some(other) = by_index.insert(file.shard.index, path) {
            bail!("shard {} is given twice: {} and {}", file.shard, name(other), name(path));
        }
    }
    let missing: Vec<String> =
        (1..=count).filter(|k| !by_index.contains_key(k)).map(|k| format!("{k}/{count}")).collect();
    if !missing.is_empty() {
        let have: Vec<String> = by_index.iter().map(|(k, path)| format!("{k}/{count} ({})", name(path))).collect();
        bail!("missing shard(s) {}; have {}; pass the folder of every shard", missing.join(", "), have.join(", "));
    }

    let mut owner: BTreeMap<String, &Path> = BTreeMap::new();
    let mut results = Vec::new();
    for (path, file) in files {
        let assigned: BTreeSet<&str> = file.plan[file.shard.index as usize - 1].iter().map(String::as_str).collect();
        for cell in &file.cells {
            if let Some(other) = owner.insert(cell.cell.clone(), path) {
                bail!("cell {} is in two shards: {} and {}", cell.cell, name(other), name(path));
            }
            let id: CellId =
                cell.cell.parse().map_err(|e| anyhow::anyhow!("{}: cell {}: {e}", name(path), cell.cell))?;
            if !assigned.contains(id.configuration.as_str()) {
                bail!("{}: cell {} is not of shard {}'s configurations ({:?})", name(path), id, file.shard, assigned);
            }
            results.push(CellResult { cell: id, reactor: cell.reactor.into(), proactor: cell.proactor.into() });
        }
    }
    results.sort_by(|a, b| a.cell.cmp(&b.cell));
    let records: Vec<(&Path, &RunRecord)> =
        files.iter().filter_map(|(path, file)| file.record.as_ref().map(|r| (path.as_path(), r))).collect();
    Ok(Merged {
        results,
        record: merge_records(&records, transports)?,
        every_variant: first.selection.every_variant,
        count,
    })
}

/// The shards' records as the one record an unsharded run of the same results writes: cells and
/// totals in its order, each broker once in manifest transport order, the latest date, dirty if
/// any shard's tree was.
fn merge_records(records: &[(&Path, &RunRecord)], transports: &[&str]) -> Result<Option<RunRecord>> {
    let Some((first_path, first)) = records.first() else { return Ok(None) };
    let mut merged =
        RunRecord { brokers: Vec::new(), configurations: Vec::new(), cells: Vec::new(), ..(*first).clone() };
    for (path, record) in records {
        if record.toolchain != first.toolchain {
            bail!(
                "{} and {} ran on different toolchains ({:?} vs {:?}); rust-toolchain.toml pins one",
                first_path.display(),
                path.display(),
                first.toolchain,
                record.toolchain
            );
        }
        merged.date = merged.date.max(record.date.clone());
        merged.dirty |= record.dirty;
        for broker in &record.brokers {
            if !merged.brokers.contains(broker) {
                merged.brokers.push(broker.clone());
            }
        }
        merged.configurations.extend(record.configurations.iter().cloned());
        merged.cells.extend(record.cells.iter().cloned());
    }
    let position = |transport: &str| transports.iter().position(|t| *t == transport).unwrap_or(usize::MAX);
    merged.brokers.sort_by_key(|b| position(&b.transport));
    merged.configurations.sort_by(|a, b| (&a.configuration, &a.variant).cmp(&(&b.configuration, &b.variant)));
    merged.cells.sort_by(|a, b| (&a.cell, &a.variant).cmp(&(&b.cell, &b.variant)));
    Ok(Some(merged))
}

#[cfg(test)]
mod tests;
