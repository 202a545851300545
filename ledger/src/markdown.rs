//! Rendering the ledger as a Markdown page (`ledger/LEDGER.md`).
//!
//! The table holds only short status words so it stays readable in a diff and
//! on narrow screens; deferral reasons are listed below it.

use std::fmt::Write;

use crate::{Behaviour, CellId, Ledger, Status};

/// Table text for a cell that has no row in the ledger.
const MISSING: &str = "(missing)";

impl Ledger {
    /// Renders the table for the given configurations (rows) and behaviours
    /// (columns), in the order given. Cells outside those lists are not shown;
    /// see [`Ledger::unknown_cells`].
    pub fn render_markdown(&self, configurations: &[&str], behaviours: &[Behaviour]) -> String {
        let mut out = String::new();
        let mut deferred = Vec::new();
        // Pass, Fixed, Deferred, Unknown, missing.
        let mut counts = [0usize; 5];

        out.push_str("# Conformance ledger\n\n");
        out.push_str("Rendered from `ledger/cells.tsv` by `cargo xtask ledger render`; do not edit by hand.\n\n");
        out.push_str("| configuration |");
        for behaviour in behaviours {
            let _ = write!(out, " {behaviour} |");
        }
        out.push_str("\n| --- |");
        out.push_str(&" --- |".repeat(behaviours.len()));
        out.push('\n');

        for configuration in configurations {
            let _ = write!(out, "| {configuration} |");
            for &behaviour in behaviours {
                let cell = CellId::new(*configuration, behaviour);
                let text = match self.get(&cell) {
                    None => {
                        counts[4] += 1;
                        MISSING.to_owned()
                    }
                    Some(Status::Pass) => {
                        counts[0] += 1;
                        "Pass".to_owned()
                    }
                    Some(Status::Fixed { reference }) => {
                        counts[1] += 1;
                        format!("Fixed ({})", escape_cell(reference))
                    }
                    Some(Status::Deferred { reference, reason }) => {
                        counts[2] += 1;
                        deferred.push(format!("- {cell} ({reference}): {reason}\n"));
                        format!("Deferred ({})", escape_cell(reference))
                    }
                    Some(Status::Unknown) => {
                        counts[3] += 1;
                        "Unknown".to_owned()
                    }
                };
                let _ = write!(out, " {text} |");
            }
            out.push('\n');
        }

        if !deferred.is_empty() {
            out.push_str("\n## Deferred cells\n\n");
            out.extend(deferred);
        }

        let [pass, fixed, deferred, unknown, missing] = counts;
        let total: usize = counts.iter().sum();
        let _ =
            write!(out, "\nSummary: {total} cells: {pass} Pass, {fixed} Fixed, {deferred} Deferred, {unknown} Unknown");
        if missing > 0 {
            let _ = write!(out, ", {missing} {MISSING}");
        }
        out.push('\n');
        out
    }
}

/// A '|' inside a table cell would end the cell.
fn escape_cell(text: &str) -> String {
    text.replace('|', "\\|")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    #[test]
    fn renders_table_deferred_list_and_summary() {
        let text = "\
memory\tFR-2\tPass
memory\tFR-10\tFixed\t#4
sqs\tFR-2\tDeferred\t#4\tmoto does not honour DelaySeconds
sqs\tFR-10\tUnknown
stale\tFR-2\tPass
";
        let ledger = Ledger::parse(text, Path::new("cells.tsv")).unwrap();
        let rendered = ledger.render_markdown(&["sqs", "memory"], &[Behaviour(2), Behaviour(10)]);
        assert_eq!(
            rendered,
            "\
# Conformance ledger

Rendered from `ledger/cells.tsv` by `cargo xtask ledger render`; do not edit by hand.

| configuration | FR-2 | FR-10 |
| --- | --- | --- |
| sqs | Deferred (#4) | Unknown |
| memory | Pass | Fixed (#4) |

## Deferred cells

- sqs/FR-2 (#4): moto does not honour DelaySeconds

Summary: 4 cells: 1 Pass, 1 Fixed, 1 Deferred, 1 Unknown
"
        );
        // Deterministic.
        assert_eq!(rendered, ledger.render_markdown(&["sqs", "memory"], &[Behaviour(2), Behaviour(10)]));
    }

    #[test]
    fn marks_missing_cells_and_escapes_pipes() {
        let ledger = Ledger::parse("memory\tFR-2\tFixed\ta|b\n", Path::new("cells.tsv")).unwrap();
        assert_eq!(
            ledger.render_markdown(&["memory"], &[Behaviour(2), Behaviour(3)]),
            "\
# Conformance ledger

Rendered from `ledger/cells.tsv` by `cargo xtask ledger render`; do not edit by hand.

| configuration | FR-2 | FR-3 |
| --- | --- | --- |
| memory | Fixed (a\\|b) | (missing) |

Summary: 2 cells: 0 Pass, 1 Fixed, 0 Deferred, 0 Unknown, 1 (missing)
"
        );
    }
}
