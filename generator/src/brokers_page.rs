//! docs/BROKERS.md's table, rendered from the broker facts (`contract::brokers`) between two
//! markers; the prose around it stays hand-written. Checked for freshness like every output.

use std::path::{Path, PathBuf};

use crate::GenerateError;

/// The page, from the workspace root.
pub(crate) const PAGE: &str = "docs/BROKERS.md";
const BEGIN: &str =
    "<!-- the table below is rendered by `cargo xtask generate` from providers/brokers/*/broker.toml -->";
const END: &str = "<!-- end of the rendered table -->";

/// The page with its table rendered from the facts.
pub(crate) fn render(root: &Path) -> Result<(PathBuf, String), GenerateError> {
    let path = root.join(PAGE);
    let page = std::fs::read_to_string(&path).map_err(|error| GenerateError::Io { path: path.clone(), error })?;
    let missing = |marker: &str| GenerateError::Manifest {
        path: PathBuf::from(PAGE),
        line: 1,
        problem: format!("the marker line {marker:?} is missing; the broker table goes between the two markers"),
    };
    let start = page.find(BEGIN).ok_or_else(|| missing(BEGIN))? + BEGIN.len();
    let end = page[start..].find(END).ok_or_else(|| missing(END))? + start;
    let mut table = String::from(
        "\n| transport | configurations | local process | container image (testcontainers) |\n| --- | --- | --- | --- |\n",
    );
    // The embedded transport has no broker, so no facts.
    table.push_str("| memory | `memory` | embedded, always | — |\n");
    for broker in contract::brokers::all() {
        let about = &broker.about;
        table.push_str(&format!(
            "| {} | {} | {} | {} |\n",
            broker.transport, about.configurations, about.local, about.container
        ));
    }
    Ok((PathBuf::from(PAGE), format!("{}{table}{}", &page[..start], &page[end..])))
}
