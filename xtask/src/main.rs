//! The project's task runner (the cargo-xtask convention): `cargo xtask <task>`.

mod brokers;
mod build;
mod conformance;
mod evidence;
mod fidelity;
mod images;
mod interrupts;
mod junit;
mod ledger_diff;
mod ledger_tasks;
mod libtest;
mod mutants;
mod record;
mod runner;
mod selection;
mod shard;
mod test_names;
mod versions;
mod workflows;
mod workspace_tests;

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use anyhow::{bail, Result};
use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "cargo xtask",
    about = "Generate, run and record the delivery-count conformance matrix",
    arg_required_else_help = true
)]
struct Cli {
    #[command(subcommand)]
    task: Task,
}

#[derive(Subcommand)]
enum Task {
    /// Render templates/ into generated/ and ledger/LEDGER.md
    Generate {
        /// Fail with a diff instead of writing when anything differs
        #[arg(long)]
        check: bool,
    },
    /// Run the generated conformance cells (both pump variants) and record them in the ledger
    Conformance(conformance::Args),
    /// Apply each catalogued contract defect to a scratch copy and check the cells catch it
    Mutants(mutants::Args),
    /// Read, defer, render, audit or review (diff) ledger cells
    #[command(subcommand)]
    Ledger(ledger_tasks::LedgerTask),
    /// Install local brokers, or build stand-in broker images
    #[command(subcommand)]
    Brokers(brokers::BrokersTask),
    /// Run every test: install the local brokers, build every test binary of `cargo test
    /// --workspace --all-features` once, then run them a few at a time and, beside them, the
    /// generated conformance cells through `conformance --transport all --check` (all at once,
    /// checked against the ledger, nothing written)
    Test {
        /// Where brokers come from (auto, env, containers, local); default: CONFORMANCE_BROKERS, else auto
        #[arg(long, value_enum, value_name = "SOURCE")]
        brokers: Option<contract::BrokerSource>,
        /// How many of the workspace's test binaries run at the same time (each may start a broker)
        #[arg(long, default_value_t = 3, value_name = "N", value_parser = clap::value_parser!(u16).range(1..=64))]
        jobs: u16,
        /// Run the workspace's test binaries N times each, round after round, and report every
        /// binary's pass rate and every test that failed in any run (a flake fails the command).
        /// Neither the cells (`conformance --repeat` is theirs) nor the doc tests run
        #[arg(long, default_value_t = 1, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=1000))]
        repeat: u32,
        /// Only the test binaries whose label (`providers test nats`) contains this (repeatable),
        /// run and reported as --repeat runs them
        #[arg(long, value_name = "PART")]
        binary: Vec<String>,
    },
    /// Lint .github/workflows with actionlint (the pinned version, installed into .brokers/bin with Go)
    LintWorkflows,
}

/// The workspace root: the xtask lives one folder below it.
pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("xtask is inside the workspace").to_path_buf()
}

fn generate(check: bool) -> Result<()> {
    let started = Instant::now();
    let mode = if check { generator::Mode::Check } else { generator::Mode::Write };
    let outcome = generator::generate(&root(), mode)?;
    let verb = if check { "checked" } else { "generated" };
    eprintln!(
        "{verb}: {} written, {} removed, {} unchanged in {:.2} s",
        outcome.written.len(),
        outcome.removed.len(),
        outcome.unchanged,
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

/// Every test of the workspace, broker-backed ones included. The broker source reaches the test
/// binaries as CONFORMANCE_BROKERS (providers::source resolves it there).
fn test(brokers: Option<contract::BrokerSource>, jobs: u16, repeat: u32, binary: &[String]) -> Result<()> {
    let brokers = match brokers {
        Some(brokers) => brokers,
        None => contract::BrokerSource::from_environment()?,
    };
    eprintln!("brokers: {} (each broker-backed test binary says which source it used)", brokers.name());
    let install = || {
        let started = std::time::Instant::now();
        brokers::installable().into_iter().try_for_each(brokers::install)?;
        eprintln!("brokers: every local broker installed, in {:.0} s", started.elapsed().as_secs_f64());
        anyhow::Ok(())
    };
    if repeat > 1 || !binary.is_empty() {
        install()?;
        return workspace_tests::repeat(&root(), brokers, usize::from(jobs), repeat, binary);
    }
    // One build for everything below, the cells included; the brokers install beside it, since
    // most of an install is waiting on a download, and nothing built needs a broker.
    let (installed, built) = std::thread::scope(|scope| {
        let installing = scope.spawn(install);
        let built = workspace_tests::build(&root(), workspace_tests::Cells::Built);
        (installing.join().expect("installing the brokers does not panic"), built)
    });
    let binaries = match (installed, built) {
        (Ok(()), Ok(binaries)) => binaries,
        (Err(failed), Ok(_)) => return Err(failed.context("the tests built; the brokers did not install")),
        (Ok(()), Err(failed)) => return Err(failed),
        (Err(install), Err(build)) => {
            bail!("the brokers did not install ({install:#}) and the tests did not build ({build:#})")
        }
    };
    // The cells through the conformance runner, checked against the ledger and writing nothing:
    // each binary runs all its cells at once (each waits out its broker's lease, so a binary
    // takes its slowest cell, not the sum), Deferred cells too (one that passes now fails the
    // check), and a failed cell is rerun alone to tell a flake from a regression. A plain `cargo
    // test` of the generated crate would add nothing to this but a second run of every cell.
    // In this process: the build above may have rebuilt this very binary (the xtask tests run
    // it), so the file this process started from may be gone.
    let check = ["xtask", "conformance", "--transport", "all", "--check", "--brokers", brokers.name()];
    let Task::Conformance(check) = Cli::try_parse_from(check)?.task else {
        unreachable!("parsed as a conformance run")
    };
    // Beside the workspace's test binaries: both halves spend most of their time waiting on
    // brokers (leases, restarts), so on two cores together they take little more than the
    // longer one (BENCHMARKS.md), and each starts brokers of its own.
    let (workspace, cells) = std::thread::scope(|scope| {
        let cells = scope.spawn(|| conformance::run(&check));
        let workspace = workspace_tests::run(&root(), &binaries, brokers, usize::from(jobs));
        (workspace, cells.join().expect("the conformance check does not panic"))
    });
    match (workspace, cells) {
        (Ok(()), Ok(())) => Ok(()),
        (Err(failed), Ok(())) => Err(failed.context("the cells passed; the workspace's tests did not")),
        (Ok(()), Err(failed)) => Err(failed.context("the workspace's tests passed; the cells did not")),
        (Err(workspace), Err(cells)) => {
            bail!("both halves failed: the workspace's tests ({workspace:#}) and the cells ({cells:#})")
        }
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.task {
        Task::Generate { check } => generate(check),
        Task::Conformance(args) => conformance::run(&args),
        Task::Mutants(args) => mutants::run(&args),
        Task::Ledger(task) => ledger_tasks::run(task),
        Task::Brokers(brokers::BrokersTask::Images { transports }) => images::build(&transports),
        Task::Brokers(brokers::BrokersTask::Install { transports, implementation }) => {
            brokers::install_all(&transports, implementation)
        }
        Task::Test { brokers, jobs, repeat, binary } => test(brokers, jobs, repeat, &binary),
        Task::LintWorkflows => workflows::run(),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {error:#}");
            ExitCode::FAILURE
        }
    }
}
