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
    let (binaries, ()) = side_by_side(
        ["the build", "the brokers' install"],
        || workspace_tests::build(&root(), workspace_tests::Cells::Built),
        install,
    )?;
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
    side_by_side(
        ["the workspace's tests", "the cells"],
        || workspace_tests::run(&root(), &binaries, brokers, usize::from(jobs)),
        || conformance::run(&check),
    )
    .map(drop)
}

/// `first` here and `second` on a thread of its own, at once; both results, or an error saying
/// which of the two (named by `names`) failed, and that the other went through.
fn side_by_side<A, B: Send>(
    names: [&str; 2],
    first: impl FnOnce() -> Result<A>,
    second: impl FnOnce() -> Result<B> + Send,
) -> Result<(A, B)> {
    let (first, second) = std::thread::scope(|scope| {
        let second = scope.spawn(second);
        let first = first();
        (first, second.join().unwrap_or_else(|_| Err(anyhow::anyhow!("it panicked"))))
    });
    let [first_name, second_name] = names;
    match (first, second) {
        (Ok(first), Ok(second)) => Ok((first, second)),
        (Err(failed), Ok(_)) => Err(failed.context(format!("{second_name} went through; {first_name} did not"))),
        (Ok(_), Err(failed)) => Err(failed.context(format!("{first_name} went through; {second_name} did not"))),
        (Err(first), Err(second)) => {
            bail!("neither {first_name} ({first:#}) nor {second_name} ({second:#}) went through")
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

#[cfg(test)]
mod tests {
    use std::sync::mpsc;

    use super::*;

    #[test]
    fn side_by_side_names_the_half_that_failed_and_the_one_that_went_through() {
        let both = side_by_side(["the build", "the install"], || Ok(1), || Ok("two")).unwrap();
        assert_eq!(both, (1, "two"));
        let failed = side_by_side(["the build", "the install"], || Ok(1), || bail!("no network") as Result<()>);
        assert_eq!(format!("{:#}", failed.unwrap_err()), "the build went through; the install did not: no network");
        let failed = side_by_side(["the build", "the install"], || bail!("E0432") as Result<()>, || Ok(()));
        assert_eq!(format!("{:#}", failed.unwrap_err()), "the install went through; the build did not: E0432");
        let failed = side_by_side(["a", "b"], || bail!("one") as Result<()>, || bail!("two") as Result<()>);
        assert_eq!(failed.unwrap_err().to_string(), "neither a (one) nor b (two) went through");
    }

    #[test]
    fn side_by_side_runs_the_two_at_once() {
        let ((to_second, from_first), (to_first, from_second)) = (mpsc::channel(), mpsc::channel());
        // A rendezvous: each waits for the other's message, so run one after the other, in
        // either order, the first to run times out.
        let timeout = std::time::Duration::from_secs(10);
        let (got, ()) = side_by_side(
            ["first", "second"],
            || {
                to_second.send("from the first")?;
                Ok(from_second.recv_timeout(timeout)?)
            },
            move || {
                assert_eq!(from_first.recv_timeout(timeout)?, "from the first");
                to_first.send("from the second")?;
                Ok(())
            },
        )
        .unwrap();
        assert_eq!(got, "from the second");
    }
}
