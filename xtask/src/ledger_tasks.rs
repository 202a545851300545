//! `cargo xtask ledger …`: show, defer, render and audit cells, read the run history
//! (flakes, a cell's history), the review diff (`ledger_diff`), and merge the shards of a
//! sharded conformance run.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use clap::Subcommand;
use generator::Manifest;
use ledger::evidence::{self, CellOutcome};
use ledger::{Behaviour, CellId, Ledger, RunRecord};

use crate::root;

#[derive(Subcommand)]
pub enum LedgerTask {
    /// Print the matrix (configurations x behaviours)
    Show,
    /// Defer a cell with a reference and a reason; its tests become ignored
    Defer {
        /// The cell, as CONFIGURATION/FR-N or CONFIGURATION/DC-N (e.g. sqs/FR-9)
        cell: CellId,
        /// An issue or ADR clause (e.g. #4, ADR-0077 R-11)
        #[arg(long = "ref")]
        reference: String,
        /// Why it cannot pass here
        #[arg(long)]
        reason: String,
    },
    /// Write ledger/LEDGER.md and ledger/LEDGER.svg from ledger/cells.tsv and ledger/runs.jsonl,
    /// and ledger/FIDELITY.md from ledger/fidelity.tsv (after a hand-written note) when it exists
    Render,
    /// Check that ignored tests and Deferred cells match, the ledger covers the manifest and
    /// ledger/runs.jsonl parses; warn about cells whose newest evidence is not at the current
    /// source digest
    Audit {
        /// Make stale or missing evidence an error instead of a warning
        #[arg(long)]
        fresh: bool,
    },
    /// On which versions of each broker (and which other implementations) the gateway conforms,
    /// cell by cell: the reference's ledger status beside every other version's verdict in
    /// ledger/fidelity.tsv, and whether they agree
    Versions {
        /// Only this transport's broker (e.g. rabbitmq); default: every broker
        #[arg(long)]
        transport: Option<String>,
    },
    /// List every recorded flake, newest first
    Flakes,
    /// List every recorded run of a cell, newest first
    History {
        /// The cell, as CONFIGURATION/FR-N (e.g. sqs-fifo/FR-23)
        cell: CellId,
    },
    /// Report what changed in the ledger since a base commit, as one pull-request comment:
    /// status counts, changed cells, flakes of the new run records
    Diff(crate::ledger_diff::Args),
    /// Apply the shards of a sharded run (`conformance --shard K/N --out DIR`) as one run: every
    /// K of one N, same commit, sources and selection, no cell twice; one record in runs.jsonl
    Merge {
        /// The --out folders of the shards (each holds shard-K-of-N.json files)
        #[arg(required = true, value_name = "DIR")]
        dirs: Vec<PathBuf>,
        /// The ledger folder to apply to. Default: the project's ledger/ (generated/ is then
        /// regenerated, as after an unsharded run)
        #[arg(long, value_name = "DIR")]
        ledger_dir: Option<PathBuf>,
    },
}

fn manifest() -> Result<Manifest> {
    let root = root();
    Ok(Manifest::load(&root.join(generator::MANIFEST), &root.join("templates"))?)
}

/// The matrix's rows: each configuration with its transport.
fn rows(manifest: &Manifest) -> Vec<(&str, &str)> {
    manifest.configurations.iter().map(|c| (c.name.as_str(), c.transport.as_str())).collect()
}

pub fn run(task: LedgerTask) -> Result<()> {
    // The review compares ledger files only; it needs no manifest, and may read another repository.
    if let LedgerTask::Diff(args) = &task {
        return crate::ledger_diff::run(args);
    }
    let root = root();
    let path = root.join(generator::LEDGER);
    let runs_path = root.join(generator::RUNS);
    let manifest = manifest()?;
    let behaviours = manifest.behaviour_ids();
    match task {
        LedgerTask::Show => {
            let runs = ledger::read_runs(&runs_path)?;
            print!("{}", Ledger::load(&path)?.render_markdown(&rows(&manifest), &behaviours, &runs));
        }
        LedgerTask::Defer { cell, reference, reason } => {
            check_cell(&manifest, &cell)?;
            let mut ledger = Ledger::load(&path)?;
            let previous = ledger.defer(&cell, &reference, &reason)?;
            ledger.save(&path)?;
            generator::generate(&root, generator::Mode::Write)?;
            eprintln!("{cell}: {previous} -> {}", ledger.get(&cell).expect("just deferred"));
        }
        LedgerTask::Render => {
            let runs = ledger::read_runs(&runs_path)?;
            let pages = Ledger::load(&path)?.render_pages(&rows(&manifest), &behaviours, &runs);
            ledger::pages::write_pages(&root.join(generator::LEDGER_DIR), &pages)?;
            let ledger_dir = root.join(generator::LEDGER_DIR);
            let table = ledger_dir.join(crate::fidelity::TABLE);
            if table.exists() {
                crate::fidelity::render(&ledger_dir, &ledger::Fidelity::load(&table)?, &Ledger::load(&path)?)?;
            }
            crate::mutants::render_matrix(&root, &manifest)?;
        }
        LedgerTask::Audit { fresh } => {
            let ledger = Ledger::load(&path)?;
            let report = audit(&root, &manifest, &ledger, fresh)?;
            for warning in &report.warnings {
                eprintln!("warning: {warning}");
            }
            if report.problems.is_empty() {
                eprintln!("ledger audit: {} cells, no problems", ledger.cells().count());
            } else {
                bail!("ledger audit found {} problem(s):\n{}", report.problems.len(), report.problems.join("\n"))
            }
        }
        LedgerTask::Versions { transport } => {
            let brokers = crate::versions::brokers(transport.as_deref())?;
            let table = ledger::Fidelity::load(&root.join(generator::LEDGER_DIR).join(crate::fidelity::TABLE))?;
            let ledger = Ledger::load(&path)?;
            print!("{}", crate::versions::render(&brokers, &rows(&manifest), &behaviours, &ledger, &table));
        }
        LedgerTask::Flakes => {
            let runs = ledger::read_runs(&runs_path)?;
            let lines = flake_lines(&runs);
            if lines.is_empty() {
                eprintln!("no flakes in {} ({} runs)", generator::RUNS, runs.len());
            }
            lines.iter().for_each(|line| println!("{line}"));
        }
        LedgerTask::Diff(_) => unreachable!("handled above"),
        LedgerTask::Merge { dirs, ledger_dir } => {
            merge(&root, &manifest, &dirs, &ledger_dir.unwrap_or_else(|| root.join("ledger")))?
        }
        LedgerTask::History { cell } => {
            check_cell(&manifest, &cell)?;
            // The status the runs below led to, so a failed result reads against it (a Deferred
            // cell's runs fail by design).
            println!("{}", status_line(&Ledger::load(&path)?, &cell));
            let lines = history_lines(&manifest, &ledger::read_runs(&runs_path)?, &cell);
            if lines.len() == 1 {
                eprintln!("{cell} has no recorded run in {}", generator::RUNS);
            } else {
                lines.iter().for_each(|line| println!("{line}"));
            }
        }
    }
    Ok(())
}

/// `ledger merge`: the shards' union through the path an unsharded run takes.
fn merge(root: &Path, manifest: &Manifest, dirs: &[PathBuf], ledger_dir: &Path) -> Result<()> {
    let files = crate::shard::read_dirs(dirs)?;
    let transports: Vec<&str> = manifest.transports().into_iter().map(|(t, _)| t).collect();
    let merged = crate::shard::merge(&files, &transports)?;
    let Some(record) = &merged.record else {
        bail!("the {} shard(s) ran no cell: nothing to merge", merged.count);
    };
    let mut ledger = Ledger::load(&ledger_dir.join("cells.tsv"))?;
    let applied =
        crate::record::apply(root, manifest, ledger_dir, &mut ledger, &merged.results, record, merged.every_variant)?;
    eprintln!(
        "merged {} shard(s): {} cells, {} cell runs into {}",
        merged.count,
        merged.results.len(),
        record.cells.len(),
        ledger_dir.display()
    );
    for transition in &applied.report.transitions {
        eprintln!("ledger: {} {} -> {}", transition.cell, transition.from, transition.to);
    }
    for cell in &applied.report.still_deferred {
        eprintln!("still deferred: {cell}");
    }
    if !applied.problems.is_empty() {
        bail!("{}", applied.problems.join("\n"));
    }
    Ok(())
}

/// Refuses a cell the manifest does not have, naming the valid choices.
fn check_cell(manifest: &Manifest, cell: &CellId) -> Result<()> {
    let (configurations, behaviours) = (manifest.configuration_names(), manifest.behaviour_ids());
    if !configurations.contains(&cell.configuration.as_str()) || !behaviours.contains(&cell.behaviour) {
        let behaviours: Vec<String> = behaviours.iter().map(ToString::to_string).collect();
        bail!(
            "{cell} is not a cell of {}; configurations: {}; behaviours: {}",
            generator::MANIFEST,
            configurations.join(", "),
            behaviours.join(", ")
        );
    }
    Ok(())
}

/// The cells whose generated test carries `#[ignore`, read from the files on disk.
fn ignored_cells(root: &Path, manifest: &Manifest) -> Result<BTreeSet<CellId>> {
    let mut ignored = BTreeSet::new();
    for configuration in &manifest.configurations {
        for variant in &manifest.variants {
            for behaviour in &manifest.behaviours {
                let file = root
                    .join(generator::GENERATED)
                    .join("tests")
                    .join(&configuration.transport)
                    .join(configuration.module())
                    .join(variant)
                    .join(format!("{}.rs", behaviour.module()));
                let text = std::fs::read_to_string(&file).with_context(|| format!("reading {}", file.display()))?;
                if text.contains("#[ignore") {
                    ignored.insert(CellId::new(configuration.name.clone(), behaviour.behaviour()));
                }
            }
        }
    }
    Ok(ignored)
}

/// What the audit found: problems fail it, warnings are printed.
struct AuditReport {
    problems: Vec<String>,
    warnings: Vec<String>,
}

fn audit(root: &Path, manifest: &Manifest, ledger: &Ledger, fresh: bool) -> Result<AuditReport> {
    let (configurations, behaviours) = (manifest.configuration_names(), manifest.behaviour_ids());
    let mut problems: Vec<String> =
        ledger.audit(&ignored_cells(root, manifest)?).iter().map(ToString::to_string).collect();
    for cell in ledger.unknown_cells(&configurations, &behaviours) {
        problems.push(format!("{cell} is in the ledger but not in {}", generator::MANIFEST));
    }
    let mut complete = ledger.clone();
    for cell in complete.ensure_cells(&configurations, &behaviours) {
        problems.push(format!("{cell} is in {} but has no ledger row", generator::MANIFEST));
    }
    let mut warnings = Vec::new();
    // The run log must parse (and take the next record); only then can it say what is stale.
    match ledger::check_runs(&root.join(generator::RUNS)) {
        Err(error) => problems.push(error.to_string()),
        Ok(runs) => {
            let digest = ledger::source_digest(root)?;
            if let Some(stale) = stale_report(&runs, &configurations, &behaviours, &digest) {
                if fresh {
                    problems.push(stale);
                } else {
                    warnings.push(stale);
                }
            }
        }
    }
    Ok(AuditReport { problems, warnings })
}

/// One message for the cells whose newest evidence is not at `digest`, grouped by
/// configuration, or None when every cell's is.
fn stale_report(runs: &[RunRecord], configurations: &[&str], behaviours: &[Behaviour], digest: &str) -> Option<String> {
    let stale = evidence::stale_evidence(runs, configurations, behaviours, digest);
    if stale.is_empty() {
        return None;
    }
    let cells: usize = stale.iter().map(|group| group.behaviours.len()).sum();
    let mut message = format!(
        "stale evidence: {cells} of {} cells were last run at another source digest than the current one ({}), \
         at an unrecorded one, or never (a conformance run of the configuration records fresh evidence; \
         `cargo xtask ledger audit --fresh` makes this an error):",
        configurations.len() * behaviours.len(),
        evidence::short_digest(digest)
    );
    for group in &stale {
        message.push_str(&format!("\n  {group}"));
    }
    Some(message)
}

/// `date  commit  cell  variant  first line of the first failure`, newest first.
fn flake_lines(runs: &[RunRecord]) -> Vec<String> {
    evidence::flakes(runs)
        .iter()
        .map(|flake| {
            format!(
                "{}  {:<9} {:<22} {:<9} {}",
                flake.record.date,
                commit_text(flake.record),
                flake.flake.cell,
                flake.flake.variant,
                flake.first_line()
            )
        })
        .collect()
}

/// A header, then `date  commit  variant  result  duration  broker (source)` per recorded run, newest
/// first. An older record has no per-cell result: its line shows the configuration's totals.
fn history_lines(manifest: &Manifest, runs: &[RunRecord], cell: &CellId) -> Vec<String> {
    let transport = manifest.configurations.iter().find(|c| c.name == cell.configuration).map(|c| c.transport.as_str());
    let mut lines =
        vec![format!("{:<20}  {:<15} {:<9} {:<8} {:>8}  broker", "date", "commit", "variant", "result", "duration")];
    for entry in evidence::cell_history(runs, cell) {
        let (result, duration, note) = match entry.outcome {
            CellOutcome::Cell(run) => {
                (run.result.clone(), format!("{:.1} s", run.duration_ms as f64 / 1000.0), String::new())
            }
            CellOutcome::Totals(run) => (
                "-".to_owned(),
                "-".to_owned(),
                format!(
                    "  (no per-cell result; {} {}: {} passed, {} failed, {} skipped)",
                    run.configuration, run.variant, run.passed, run.failed, run.skipped
                ),
            ),
        };
        let broker = match transport.and_then(|transport| evidence::broker_for(entry.record, transport)) {
            Some(broker) => broker.to_string(),
            None => "-".to_owned(),
        };
        lines.push(format!(
            "{:<20}  {:<15} {:<9} {result:<8} {duration:>8}  {broker}{note}",
            entry.record.date,
            commit_text(entry.record),
            entry.variant()
        ));
    }
    lines
}

/// `sqs-fifo/FR-9: Deferred (#4: reason) in ledger/cells.tsv`.
fn status_line(ledger: &Ledger, cell: &CellId) -> String {
    match ledger.get(cell) {
        Some(status) => format!("{cell}: {status} in {}", generator::LEDGER),
        None => format!("{cell}: no row in {}", generator::LEDGER),
    }
}

fn commit_text(record: &RunRecord) -> String {
    if record.dirty {
        format!("{}+dirty", record.commit)
    } else {
        record.commit.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;
    use ledger::{BrokerProvenance, CellRun, ConfigurationRun, Flake};

    fn task(args: &[&str]) -> LedgerTask {
        let cli = crate::Cli::try_parse_from(["cargo xtask", "ledger"].iter().chain(args)).unwrap();
        match cli.task {
            crate::Task::Ledger(task) => task,
            _ => unreachable!("a ledger task"),
        }
    }

    fn old(date: &str, commit: &str) -> RunRecord {
        RunRecord {
            date: date.into(),
            commit: commit.into(),
            configurations: vec![ConfigurationRun {
                configuration: "memory".into(),
                variant: "reactor".into(),
                passed: 12,
                ..ConfigurationRun::default()
            }],
            ..RunRecord::default()
        }
    }

    fn new(date: &str, commit: &str, digest: &str) -> RunRecord {
        RunRecord {
            date: date.into(),
            commit: commit.into(),
            dirty: true,
            digest: Some(digest.into()),
            brokers: vec![BrokerProvenance {
                transport: "memory".into(),
                source: "in-process".into(),
                implementation: "gateway".into(),
                version: "0.1.0".into(),
            }],
            configurations: vec![ConfigurationRun {
                configuration: "memory".into(),
                variant: "proactor".into(),
                passed: 1,
                flakes: vec![Flake {
                    cell: "memory/FR-23".into(),
                    variant: "proactor".into(),
                    first_failure: "thread 'fr_23' panicked at budget.rs:4:\nleft: 3".into(),
                }],
                ..ConfigurationRun::default()
            }],
            cells: vec![CellRun {
                cell: "memory/FR-23".into(),
                variant: "proactor".into(),
                result: CellRun::FLAKY.into(),
                duration_ms: 2345,
            }],
            ..RunRecord::default()
        }
    }

    #[test]
    fn the_commands_parse() {
        assert!(matches!(task(&["audit"]), LedgerTask::Audit { fresh: false }));
        assert!(matches!(task(&["audit", "--fresh"]), LedgerTask::Audit { fresh: true }));
        assert!(matches!(task(&["flakes"]), LedgerTask::Flakes));
        let LedgerTask::History { cell } = task(&["history", "sqs-fifo/FR-23"]) else { panic!("history") };
        assert_eq!(cell.to_string(), "sqs-fifo/FR-23");
        let error = crate::Cli::try_parse_from(["cargo xtask", "ledger", "history", "sqs-fifo"]).err().unwrap();
        assert!(error.to_string().contains("expected <configuration>/FR-<n>"), "{error}");
    }

    #[test]
    fn history_of_a_cell_not_in_the_manifest_lists_the_configurations() {
        let error = run(task(&["history", "pulsar/FR-2"])).unwrap_err().to_string();
        assert!(
            error.starts_with("pulsar/FR-2 is not a cell of templates/manifest.yaml; configurations: memory, "),
            "{error}"
        );
        let error = run(task(&["history", "memory/FR-99"])).unwrap_err().to_string();
        assert!(error.contains("; behaviours: FR-2, "), "{error}");
    }

    #[test]
    fn history_lists_cell_results_and_old_totals_newest_first() {
        let manifest = manifest().unwrap();
        let runs = [old("2026-11-30T07:00:00Z", "aaa0001"), new("2026-12-01T09:00:00Z", "bbb0002", "d")];
        let lines = history_lines(&manifest, &runs, &"memory/FR-23".parse().unwrap());
        assert_eq!(
            lines,
            [
                "date                  commit          variant   result   duration  broker",
                "2026-12-01T09:00:00Z  bbb0002+dirty   proactor  flaky       2.3 s  gateway 0.1.0 (in-process)",
                "2026-11-30T07:00:00Z  aaa0001         reactor   -               -  -  (no per-cell result; memory reactor: 12 passed, 0 failed, 0 skipped)",
            ]
        );
        let ledger = Ledger::parse("memory\tFR-23\tDeferred\t#4\twhy\n", Path::new("cells.tsv")).unwrap();
        assert_eq!(
            status_line(&ledger, &"memory/FR-23".parse().unwrap()),
            "memory/FR-23: Deferred (#4: why) in ledger/cells.tsv"
        );
        assert_eq!(status_line(&ledger, &"memory/FR-2".parse().unwrap()), "memory/FR-2: no row in ledger/cells.tsv");
        // A new record without the cell is no evidence for it.
        assert_eq!(history_lines(&manifest, &runs[1..], &"memory/FR-2".parse().unwrap()).len(), 1);
    }

    #[test]
    fn flakes_are_listed_newest_first_with_the_first_line() {
        let runs = [new("2026-12-01T09:00:00Z", "bbb0002", "d"), new("2026-12-02T09:00:00Z", "ccc0003", "e")];
        assert_eq!(
            flake_lines(&runs),
            [
                "2026-12-02T09:00:00Z  ccc0003+dirty memory/FR-23           proactor  thread 'fr_23' panicked at budget.rs:4:",
                "2026-12-01T09:00:00Z  bbb0002+dirty memory/FR-23           proactor  thread 'fr_23' panicked at budget.rs:4:",
            ]
        );
        assert!(flake_lines(&[old("2026-11-30T07:00:00Z", "a")]).is_empty());
    }

    #[test]
    fn stale_report_groups_by_configuration_and_names_the_evidence() {
        let runs = [old("2026-11-30T07:00:00Z", "aaa0001"), new("2026-12-01T09:00:00Z", "bbb0002", "d")];
        let behaviours = [Behaviour::fr(2), Behaviour::fr(23)];
        let report = stale_report(&runs, &["memory", "sqs"], &behaviours, "d").unwrap();
        assert_eq!(
            report,
            "stale evidence: 3 of 4 cells were last run at another source digest than the current one (d), at an \
             unrecorded one, or never (a conformance run of the configuration records fresh evidence; \
             `cargo xtask ledger audit --fresh` makes this an error):\n  \
             memory: FR-2: last run 2026-11-30T07:00:00Z at aaa0001, source digest not recorded\n  \
             sqs: all 2 cells: no recorded run"
        );
        assert_eq!(stale_report(&runs, &["memory"], &[Behaviour::fr(23)], "d"), None);
    }

    #[test]
    fn fresh_turns_the_stale_warning_of_the_real_tree_into_an_error() {
        let (root, manifest) = (root(), manifest().unwrap());
        let ledger = Ledger::load(&root.join(generator::LEDGER)).unwrap();
        let lenient = audit(&root, &manifest, &ledger, false).unwrap();
        let strict = audit(&root, &manifest, &ledger, true).unwrap();
        assert!(strict.warnings.is_empty());
        assert!(
            lenient.warnings.iter().all(|warning| warning.starts_with("stale evidence: ")),
            "{:?}",
            lenient.warnings
        );
        let mut expected = lenient.problems.clone();
        expected.extend(lenient.warnings.clone());
        assert_eq!(strict.problems, expected);
        // Through the command: --fresh fails exactly when there is stale evidence.
        let result = run(task(&["audit", "--fresh"]));
        assert_eq!(result.is_err(), !strict.problems.is_empty(), "{result:?}");
    }

    #[test]
    fn a_torn_run_log_is_an_audit_problem() {
        // A scratch root with the real manifest, templates and generated tests, and a torn log.
        let scratch = tempfile::tempdir().unwrap();
        let torn = scratch.path().join(generator::RUNS);
        std::fs::create_dir_all(torn.parent().unwrap()).unwrap();
        std::fs::write(&torn, "{\"date\":\"2026-").unwrap();
        let manifest = Manifest { configurations: Vec::new(), ..manifest().unwrap() };
        let report = audit(scratch.path(), &manifest, &Ledger::new(), false).unwrap();
        assert_eq!(report.problems.len(), 1, "{:?}", report.problems);
        assert!(
            report.problems[0].starts_with(&format!("{}:1: invalid run record", torn.display())),
            "{:?}",
            report.problems
        );
        assert!(report.warnings.is_empty(), "no stale report from a log that does not parse");
    }
}
