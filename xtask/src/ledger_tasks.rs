//! `cargo xtask ledger …`: show, defer, render and audit cells.

use std::collections::BTreeSet;
use std::path::Path;

use anyhow::{bail, Context, Result};
use clap::Subcommand;
use generator::Manifest;
use ledger::{Behaviour, CellId, Ledger};

use crate::root;

#[derive(Subcommand)]
pub enum LedgerTask {
    /// Print the matrix (configurations x behaviours)
    Show,
    /// Defer a cell with a reference and a reason; its tests become ignored
    Defer {
        /// The cell, as CONFIGURATION/FR-N (e.g. sqs/FR-9)
        cell: CellId,
        /// An issue or ADR clause (e.g. #4, ADR-0077 R-11)
        #[arg(long = "ref")]
        reference: String,
        /// Why it cannot pass here
        #[arg(long)]
        reason: String,
    },
    /// Write ledger/LEDGER.md from ledger/cells.tsv and ledger/runs.jsonl
    Render,
    /// Check that ignored tests and Deferred cells match, the ledger covers the manifest, and
    /// ledger/runs.jsonl parses
    Audit,
}

/// The matrix's rows: each configuration with its transport.
fn rows(manifest: &Manifest) -> Vec<(&str, &str)> {
    manifest.configurations.iter().map(|c| (c.name.as_str(), c.transport.as_str())).collect()
}

fn manifest() -> Result<Manifest> {
    let root = root();
    Ok(Manifest::load(&root.join(generator::MANIFEST), &root.join("templates"))?)
}

pub fn run(task: LedgerTask) -> Result<()> {
    let root = root();
    let path = root.join(generator::LEDGER);
    let manifest = manifest()?;
    let (configurations, behaviours) = (manifest.configuration_names(), manifest.behaviour_ids());
    match task {
        LedgerTask::Show => {
            let runs = ledger::read_runs(&root.join(generator::RUNS))?;
            print!("{}", Ledger::load(&path)?.render_markdown(&rows(&manifest), &behaviours, &runs));
        }
        LedgerTask::Defer { cell, reference, reason } => {
            if !configurations.contains(&cell.configuration.as_str()) || !behaviours.contains(&cell.behaviour) {
                bail!("{cell} is not a cell of {}; configurations: {}", generator::MANIFEST, configurations.join(", "));
            }
            let mut ledger = Ledger::load(&path)?;
            let previous = ledger.defer(&cell, &reference, &reason)?;
            ledger.save(&path)?;
            generator::generate(&root, generator::Mode::Write)?;
            eprintln!("{cell}: {previous} -> {}", ledger.get(&cell).expect("just deferred"));
        }
        LedgerTask::Render => {
            let runs = ledger::read_runs(&root.join(generator::RUNS))?;
            let markdown = Ledger::load(&path)?.render_markdown(&rows(&manifest), &behaviours, &runs);
            let target = root.join(generator::LEDGER_MARKDOWN);
            std::fs::write(&target, markdown).with_context(|| format!("writing {}", target.display()))?;
        }
        LedgerTask::Audit => audit(&root, &manifest, &Ledger::load(&path)?)?,
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
                    ignored.insert(CellId::new(configuration.name.clone(), Behaviour(behaviour.number())));
                }
            }
        }
    }
    Ok(ignored)
}

fn audit(root: &Path, manifest: &Manifest, ledger: &Ledger) -> Result<()> {
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
    // The run log must parse, and end with a line end so the next record can be appended.
    if let Err(error) = ledger::check_runs(&root.join(generator::RUNS)) {
        problems.push(error.to_string());
    }
    if problems.is_empty() {
        eprintln!("ledger audit: {} cells, no problems", ledger.cells().count());
        Ok(())
    } else {
        bail!("ledger audit found {} problem(s):\n{}", problems.len(), problems.join("\n"))
    }
}
