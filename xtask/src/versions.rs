//! `cargo xtask ledger versions`: on which versions of each broker (and which other
//! implementations) the gateway conforms, cell by cell. The reference version's column is the
//! ledger's status (`cells.tsv`); every other version's is its verdict in the fidelity table
//! (`fidelity.tsv`), with whether it agrees with the reference. Nothing is run or written.

use std::fmt::Write as _;

use anyhow::{bail, Result};
use contract::brokers::Broker;
use ledger::fidelity::{agreement, FidelityRow, Verdict};
use ledger::{Behaviour, CellId, Fidelity, Ledger, Status};

/// The brokers to answer for: `transport`'s alone, or every broker's; an unknown transport is an
/// error naming the valid ones.
pub(crate) fn brokers(transport: Option<&str>) -> Result<Vec<&'static Broker>> {
    let all = contract::brokers::all();
    match transport {
        None => Ok(all.iter().collect()),
        Some(name) => match contract::brokers::of(name) {
            Some(broker) => Ok(vec![broker]),
            None => {
                let valid: Vec<&str> = all.iter().map(|b| b.transport.as_str()).collect();
                bail!("--transport {name}: no broker transport of that name; valid: {}", valid.join(", "))
            }
        },
    }
}

/// One section per broker: a summary line per version, then a row per cell of its
/// configurations (`rows` are every configuration with its transport, in the manifest's order).
pub(crate) fn render(
    brokers: &[&Broker],
    rows: &[(&str, &str)],
    behaviours: &[Behaviour],
    ledger: &Ledger,
    fidelity: &Fidelity,
) -> String {
    let mut out = String::new();
    for broker in brokers {
        let cells: Vec<CellId> = rows
            .iter()
            .filter(|(_, transport)| *transport == broker.transport)
            .flat_map(|(configuration, _)| behaviours.iter().map(|b| CellId::new(*configuration, *b)))
            .collect();
        let _ = writeln!(out, "## {}\n", broker.transport);
        let _ = writeln!(out, "- {} (reference, the ledger): {}", broker.version, reference_summary(ledger, &cells));
        for other in &broker.implementations {
            let _ = writeln!(
                out,
                "- {} ({}): {}",
                other.version,
                other.name,
                summary(ledger, fidelity, &other.name, &cells)
            );
        }
        let versions: Vec<&str> = std::iter::once(broker.version.as_str())
            .chain(broker.implementations.iter().map(|other| other.version.as_str()))
            .collect();
        let _ = writeln!(out, "\n| cell | {} |", versions.join(" | "));
        let _ = writeln!(out, "|{}", " --- |".repeat(versions.len() + 1));
        for cell in &cells {
            let reference = ledger.get(cell);
            let _ = write!(out, "| {cell} | {} |", reference.map_or_else(|| "Unknown".to_owned(), status_word));
            for other in &broker.implementations {
                let _ = write!(out, " {} |", verdict_word(reference, fidelity.get(cell, &other.name)));
            }
            out.push('\n');
        }
        out.push('\n');
    }
    out
}

/// How the reference's cells stand: how many pass, how many are Deferred, how many unknown.
fn reference_summary(ledger: &Ledger, cells: &[CellId]) -> String {
    let (mut passing, mut deferred, mut unknown) = (0, 0, 0);
    for cell in cells {
        match ledger.get(cell) {
            Some(Status::Pass | Status::Fixed { .. }) => passing += 1,
            Some(Status::Deferred { .. }) => deferred += 1,
            Some(Status::Unknown) | None => unknown += 1,
        }
    }
    let mut text = format!("{passing} of {} cells pass", cells.len());
    if deferred > 0 {
        let _ = write!(text, ", {deferred} Deferred");
    }
    if unknown > 0 {
        let _ = write!(text, ", {unknown} never run");
    }
    text
}

/// How another version's cells stand beside the reference's: how many agree, differ, or were
/// not run there.
fn summary(ledger: &Ledger, fidelity: &Fidelity, implementation: &str, cells: &[CellId]) -> String {
    let (mut agree, mut differ, mut not_run, mut passing) = (0, 0, 0, 0);
    for cell in cells {
        match fidelity.get(cell, implementation) {
            None => not_run += 1,
            Some(row) => {
                if row.reactor == Verdict::Pass && row.proactor == Verdict::Pass {
                    passing += 1;
                }
                match agreement(ledger.get(cell), row) {
                    "agree" => agree += 1,
                    "not run" => not_run += 1,
                    _ => differ += 1,
                }
            }
        }
    }
    let mut text = format!("{agree} of {} cells agree with the reference ({passing} pass)", cells.len());
    if differ > 0 {
        let _ = write!(text, ", {differ} differ");
    }
    if not_run > 0 {
        let _ = write!(text, ", {not_run} not run on it");
    }
    text
}

fn status_word(status: &Status) -> String {
    match status {
        Status::Deferred { reference, .. } => format!("Deferred ({reference})"),
        other => other.to_string(),
    }
}

/// A version's verdict on a cell: both pump variants' when they differ, and whether it differs
/// from the reference's status.
fn verdict_word(reference: Option<&Status>, row: Option<&FidelityRow>) -> String {
    let Some(row) = row else { return "not run".to_owned() };
    let verdict = if row.reactor == row.proactor {
        row.reactor.name().to_owned()
    } else {
        format!("reactor {}, proactor {}", row.reactor.name(), row.proactor.name())
    };
    match agreement(reference, row) {
        "agree" => verdict,
        "not run" => "not run".to_owned(),
        other => format!("{verdict} ({other})"),
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    fn fixture() -> (Ledger, Fidelity) {
        let ledger = Ledger::parse(
            "rabbitmq\tFR-2\tPass\nrabbitmq\tFR-9\tDeferred\t#16\tno delay\nrabbitmq-quorum\tFR-2\tPass\n\
             rabbitmq-quorum\tFR-9\tPass\n",
            Path::new("cells.tsv"),
        )
        .unwrap();
        let fidelity = Fidelity::parse(
            "rabbitmq\tFR-2\trabbitmq-4.0.5\tPass\tPass\nrabbitmq\tFR-9\trabbitmq-4.0.5\tFail\tFail\n\
             rabbitmq-quorum\tFR-2\trabbitmq-4.0.5\tPass\tFail\tcount did not grow\n",
            Path::new("fidelity.tsv"),
        )
        .unwrap();
        (ledger, fidelity)
    }

    #[test]
    fn each_version_of_a_broker_gets_a_column_and_a_summary_cell_by_cell() {
        let (ledger, fidelity) = fixture();
        let rows = [("rabbitmq", "rabbitmq"), ("rabbitmq-quorum", "rabbitmq"), ("redis-streams", "redis")];
        let behaviours: Vec<Behaviour> = ["FR-2", "FR-9"].iter().map(|b| b.parse().unwrap()).collect();
        let page = render(&brokers(Some("rabbitmq")).unwrap(), &rows, &behaviours, &ledger, &fidelity);
        let expected = "\
## rabbitmq

- RabbitMQ 3.10.8 (reference, the ledger): 3 of 4 cells pass, 1 Deferred
- RabbitMQ 4.0.5 (rabbitmq-4.0.5): 2 of 4 cells agree with the reference (1 pass), 1 differ, 1 not run on it

| cell | RabbitMQ 3.10.8 | RabbitMQ 4.0.5 |
| --- | --- | --- |
| rabbitmq/FR-2 | Pass | Pass |
| rabbitmq/FR-9 | Deferred (#16) | Fail |
| rabbitmq-quorum/FR-2 | Pass | reactor Pass, proactor Fail (differs: fails here) |
| rabbitmq-quorum/FR-9 | Pass | not run |

";
        assert_eq!(page, expected);
    }

    #[test]
    fn a_broker_run_at_its_reference_version_alone_has_one_column() {
        let (ledger, fidelity) = fixture();
        let nats = brokers(Some("nats")).unwrap();
        assert!(nats[0].implementations.is_empty(), "the fixture needs a broker without other versions");
        let behaviours: Vec<Behaviour> = vec!["FR-2".parse().unwrap()];
        let page = render(&nats, &[("nats-jetstream", "nats")], &behaviours, &ledger, &fidelity);
        assert!(page.contains("(reference, the ledger): 0 of 1 cells pass, 1 never run\n"), "{page}");
        assert!(
            page.contains("\n| cell | nats-server v2.15.3 |\n| --- | --- |\n| nats-jetstream/FR-2 | Unknown |\n"),
            "{page}"
        );
    }

    #[test]
    fn an_unknown_transport_names_the_valid_ones() {
        let error = brokers(Some("rabbit")).unwrap_err().to_string();
        assert!(
            error.contains("--transport rabbit") && error.contains("rabbitmq") && error.contains("kafka"),
            "{error}"
        );
        assert!(brokers(Some("memory")).is_err(), "memory has no broker, so no versions");
        assert_eq!(brokers(None).unwrap().len(), contract::brokers::all().len());
    }
}
