//! Renders the conformance templates into the `generated` crate, deterministically.
//!
//! Inputs: `templates/manifest.yaml` (behaviours, configurations, variants), the templates, and
//! the ledger (a Deferred cell renders as an ignored test carrying its reason). Outputs: the
//! `generated/` crate and the ledger's matrix (`LEDGER.md` and `LEDGER.svg`). Check mode compares instead of writing.

mod brokers_page;
mod error;
mod files;
pub mod manifest;
mod render;

use std::path::Path;

pub use error::GenerateError;
pub use files::{Mode, Outcome};
pub use manifest::Manifest;

/// The command that regenerates everything; printed in headers and in check failures.
pub const COMMAND: &str = "cargo xtask generate";

/// The manifest's place in the repository.
pub const MANIFEST: &str = "templates/manifest.yaml";
/// The ledger's data file and its rendered matrix, as a page and as a picture (the rendered
/// pages are written beside the data file: `ledger::pages`).
pub const LEDGER_DIR: &str = "ledger";
pub const LEDGER: &str = "ledger/cells.tsv";
pub const LEDGER_MARKDOWN: &str = "ledger/LEDGER.md";
pub const LEDGER_SVG: &str = "ledger/LEDGER.svg";
/// The run history, which the matrix reads for flakes and last runs.
pub const RUNS: &str = "ledger/runs.jsonl";
/// The generated crate.
pub const GENERATED: &str = "generated";

/// Renders every output from the repository at `root` and writes it (or, in check mode,
/// compares it with what is on disk).
pub fn generate(root: &Path, mode: Mode) -> Result<Outcome, GenerateError> {
    let manifest = Manifest::load(&root.join(MANIFEST), &root.join("templates"))?;
    let ledger = ledger::Ledger::load(&root.join(LEDGER))?;
    let runs = ledger::read_runs(&root.join(RUNS))?;
    let outputs = render::render_all(root, &manifest, &ledger, &runs)?;
    files::apply(root, &outputs, mode)
}
