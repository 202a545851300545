//! The ledger's rendered pages, named once: every writer (`cargo xtask generate`, `ledger
//! render`, a conformance run into another ledger folder) writes this same set, so none can
//! forget one and the freshness check covers them all.

use crate::{Behaviour, Ledger, RunRecord};

/// The Markdown page, which embeds the picture.
pub const MARKDOWN: &str = "LEDGER.md";
/// The picture of the matrix.
pub const SVG: &str = "LEDGER.svg";

impl Ledger {
    /// Every rendered page as (file name in the ledger folder, contents), in a fixed order; the
    /// arguments are those of [`Ledger::render_markdown`].
    pub fn render_pages(
        &self,
        configurations: &[(&str, &str)],
        behaviours: &[Behaviour],
        runs: &[RunRecord],
    ) -> [(&'static str, String); 2] {
        [
            (MARKDOWN, self.render_markdown(configurations, behaviours, runs)),
            (SVG, self.render_svg(configurations, behaviours, runs)),
        ]
    }
}

/// Writes every page into `dir` (the ledger folder), each atomically.
pub fn write_pages(dir: &std::path::Path, pages: &[(&'static str, String)]) -> Result<(), crate::LedgerError> {
    pages.iter().try_for_each(|(name, text)| crate::file::write_atomically(&dir.join(name), text))
}
