//! `cargo xtask conformance --impl <second implementation>`: records a run's verdicts in the
//! fidelity table (`ledger/fidelity.tsv`), its run record in `ledger/fidelity-runs.jsonl`, and
//! renders `ledger/FIDELITY.md`. The main ledger (cells.tsv, runs.jsonl) is never touched: it is
//! the reference implementation's, and its history must not mix in another emulator's verdicts.

use std::path::Path;

use anyhow::Result;
use ledger::{Behaviour, CellId, CellResult, Fidelity, Ledger, RunRecord, Verdict};

use crate::brokers::Implementation;
use crate::runner::{panic_message, BinaryRun};
use crate::test_names::TestNames;

pub const TABLE: &str = "fidelity.tsv";
pub const RUNS: &str = "fidelity-runs.jsonl";
pub const PAGE: &str = "FIDELITY.md";

/// Why an SNS configuration is not run on an SQS-only implementation. goaws v0.4.5, the SNS->SQS
/// candidate, was tried (served on loopback through its router package): it routes on the Query
/// protocol's form field `Action` only, and answers the AWS JSON 1.0 requests of aws-sdk-sqs
/// (the gateway's SQS client, which has no Query fallback) with 400 Bad Request.
const NO_SNS: &str = "has no SNS API; goaws v0.4.5 cannot stand in: it reads only Query-protocol requests \
                      (form field Action) and answers the SQS client's AWS JSON 1.0 CreateQueue with 400 Bad Request";

/// One finished run on a second implementation.
pub(crate) struct FidelityRun<'a> {
    pub ledger_dir: &'a Path,
    pub implementation: Implementation,
    pub results: &'a [CellResult],
    pub runs: &'a [BinaryRun],
    pub names: &'a TestNames,
    /// Configurations of the transport the implementation cannot carry: recorded as not run.
    pub not_run: Vec<&'a str>,
    pub behaviours: &'a [Behaviour],
    pub ledger: &'a Ledger,
}

impl FidelityRun<'_> {
    pub fn record(&self, record: &RunRecord) -> Result<()> {
        let name = self.implementation.name();
        let table_path = self.ledger_dir.join(TABLE);
        let mut table = Fidelity::load(&table_path)?;
        for result in self.results {
            let note = self.failure(&result.cell).unwrap_or_default();
            table.record(result.cell.clone(), name, result.reactor.into(), result.proactor.into(), &note);
        }
        for configuration in &self.not_run {
            let why = format!("not run: {name} {NO_SNS}");
            eprintln!("fidelity: {configuration} {why}");
            for &behaviour in self.behaviours {
                let cell = CellId::new(*configuration, behaviour);
                table.record(cell.clone(), name, Verdict::NotRun, Verdict::NotRun, &why);
                // The reason is the harness's, not a hand-written explanation: always current.
                table.explain(&cell, name, &why);
            }
        }
        table.save(&table_path)?;
        let runs_path = self.ledger_dir.join(RUNS);
        ledger::append_run(&runs_path, record)?;
        render(self.ledger_dir, &table, self.ledger)?;
        eprintln!("fidelity: {name} verdicts written to {} and {PAGE}; cells.tsv untouched", table_path.display());
        Ok(())
    }

    /// The panic message of the first failing variant of `cell`, as one line's worth.
    fn failure(&self, cell: &CellId) -> Option<String> {
        self.runs
            .iter()
            .flat_map(|run| &run.failures)
            .find_map(|(test, text)| (self.names.cell(test)?.cell == *cell).then(|| panic_message(text)))
    }
}

/// Writes FIDELITY.md from the table, the ledger and the fidelity runs.
pub(crate) fn render(ledger_dir: &Path, table: &Fidelity, ledger: &Ledger) -> Result<()> {
    let runs_path = ledger_dir.join(RUNS);
    // No file yet: no fidelity run has been recorded; a malformed one is an error like runs.jsonl.
    let runs = if runs_path.exists() { ledger::read_runs(&runs_path)? } else { Vec::new() };
    let page = table.render_markdown(ledger, &reference_of, &runs);
    ledger::file::write_atomically(&ledger_dir.join(PAGE), &page)?;
    Ok(())
}

/// The reference implementation a second one stands beside: moto for every SQS implementation,
/// Apache RocketMQ for every RocketMQ one.
fn reference_of(implementation: &str) -> String {
    match Implementation::named(implementation) {
        Some(implementation) => format!("{} (reference)", implementation.reference().name()),
        None => format!("the reference of {implementation}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_not_run_reason_is_one_table_line() {
        assert!(!NO_SNS.contains("  ") && !NO_SNS.contains('\n') && !NO_SNS.contains('\t'), "{NO_SNS}");
        assert_eq!(reference_of("elasticmq"), "moto (reference)");
        assert_eq!(reference_of("rocketmq-rust"), "apache (reference)");
        assert_eq!(reference_of("goaws"), "the reference of goaws");
    }
}
