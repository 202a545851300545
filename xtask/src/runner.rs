//! Running the generated test binaries: one run of a transport's binary with every selected
//! cell at once, under a watchdog; what it reported (results, failure sections, its broker); and
//! a run of every binary, with the failed cells that are not Deferred run once more to tell a
//! flake from a regression.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use contract::{BrokerLine, BrokerSource, FatalLine, Implementation, CELL_TIMEOUT_VARIABLE};
use ledger::{CellId, Ledger, Status};

use crate::libtest::{self, TestResult};
use crate::selection::Selection;
use crate::test_names::{TestCell, TestNames};

/// One finished test of a generated binary.
pub(crate) struct Finished {
    pub(crate) name: String,
    pub(crate) result: TestResult,
    /// From the binary's start; every cell starts at once, so this is close to its own duration.
    pub(crate) elapsed: Duration,
}

pub(crate) struct BinaryRun {
    pub(crate) configurations: Vec<String>,
    pub(crate) finished: Vec<Finished>,
    pub(crate) failures: BTreeMap<String, String>,
    pub(crate) wall: Duration,
    pub(crate) flakes: Vec<Flaked>,
    pub(crate) broker: ledger::BrokerProvenance,
}

/// A test that failed, then passed when run again.
pub(crate) struct Flaked {
    pub(crate) cell: CellId,
    pub(crate) variant: String,
    pub(crate) first_failure: String,
}

/// The names of the tests `filters` select (all when empty).
pub(crate) fn list_tests(executable: &Path, filters: &[String]) -> Result<Vec<String>> {
    let output = Command::new(executable).args(["--list", "--include-ignored"]).args(filters).output()?;
    Ok(String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter_map(|line| line.strip_suffix(": test"))
        .map(str::to_owned)
        .collect())
}

/// libtest's `---- <name> stdout ----` sections, by test name.
fn failure_sections(lines: &[String]) -> BTreeMap<String, String> {
    let mut sections = BTreeMap::new();
    let mut current: Option<(String, String)> = None;
    for line in lines {
        if let Some(name) = line.strip_prefix("---- ").and_then(|rest| rest.strip_suffix(" stdout ----")) {
            sections.extend(current.take());
            current = Some((name.to_owned(), String::new()));
        } else if line == "failures:" || libtest::is_summary_line(line) {
            sections.extend(current.take());
        } else if let Some((_, text)) = current.as_mut() {
            text.push_str(line);
            text.push('\n');
        }
    }
    sections.extend(current);
    sections
}

/// One run of a transport's test binary.
pub(crate) struct BinaryCall<'a> {
    /// The workspace whose generated crate the binary runs from.
    pub workspace: &'a Path,
    pub transport: &'a str,
    pub brokers: BrokerSource,
    /// The second implementation the binary runs against, if any: every transport's variable is
    /// always passed (the reference's name when this is none or another transport's), so a
    /// CONFORMANCE_SQS_IMPL left in the shell cannot put another implementation's verdicts in the
    /// ledger.
    pub second: Option<Implementation>,
    pub executable: &'a Path,
    /// libtest filters (a test runs when any matches); empty runs every test.
    pub filters: Vec<String>,
    pub limits: Limits,
    /// The mutant a schemata build switches on (`cargo xtask mutants`); none runs healthy code.
    pub mutant: Option<&'a str>,
}

/// The variable that tells a mutation run's test binary which catalogued defect to switch on
/// (mutants::schemata writes the switches into the scratch copy; the project's sources read it
/// nowhere). Always set, so a value left in the shell cannot switch one on elsewhere.
pub(crate) const MUTANT_VARIABLE: &str = "CONFORMANCE_MUTANT";

/// The time limits of a run.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    /// The binary is killed after this long, and the run fails naming the tests still running.
    pub binary: Duration,
    /// A cell fails after this long (providers::ceiling, told through its variable).
    pub cell: Duration,
    /// How many test binaries (each with its own broker) run at the same time.
    pub at_once: usize,
}

impl Limits {
    /// The defaults of `--binary-timeout` and `--cell-timeout`, for callers with no flags for
    /// them (the mutation run).
    pub(crate) const DEFAULT: Limits =
        Limits { binary: Duration::from_secs(1200), cell: Duration::from_secs(300), at_once: usize::MAX };
}

/// The `[done/total]` count of a run's progress lines, shared by the binaries that run at once.
pub(crate) struct Progress {
    done: AtomicUsize,
    total: usize,
}

impl Progress {
    pub(crate) fn new(total: usize) -> Progress {
        Progress { done: AtomicUsize::new(0), total }
    }

    fn finished(&self, name: &str, result: TestResult, elapsed: Duration) {
        let done = self.done.fetch_add(1, Ordering::SeqCst) + 1;
        eprintln!("[{done:>3}/{}] {name} ... {result:?} ({:.1} s)", self.total, elapsed.as_secs_f64());
    }
}

/// Runs one transport's test binary, every selected cell at once.
pub(crate) fn run_binary(call: &BinaryCall, progress: &Progress) -> Result<BinaryOutcome> {
    let BinaryCall { workspace, transport, brokers, executable, .. } = *call;
    let tests = list_tests(executable, &call.filters)?;
    let started = Instant::now();
    let mut child = Command::new(executable)
        .current_dir(workspace.join(generator::GENERATED))
        // A thread per test, so every cell starts at once: the cells mostly wait (leases, settle
        // windows), and a cell that waited for a free thread would take twice its own time
        // (64 threads made the 96-cell sqs and gcp matrices run in two waves).
        .args(["--include-ignored", "--test-threads", &tests.len().max(1).to_string()])
        .args(&call.filters)
        .env(BrokerSource::VARIABLE, brokers.name())
        .envs(Implementation::REFERENCES.map(|reference| {
            let chosen = call.second.filter(|second| second.transport() == reference.transport());
            (reference.variable(), chosen.unwrap_or(reference).name())
        }))
        .env(CELL_TIMEOUT_VARIABLE, call.limits.cell.as_secs().to_string())
        .env(MUTANT_VARIABLE, call.mutant.unwrap_or_default())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("cannot start {}", executable.display()))?;
    let watchdog = Watchdog::start(child.id(), call.limits.binary);
    // The binary's stderr is passed through; a line in which providers::source stops it for its
    // broker (`error: <transport> broker: …`) voids the run even if libtest's summary got out.
    let broker_stopped = {
        let stderr = BufReader::new(child.stderr.take().expect("piped"));
        let transport = transport.to_owned();
        std::thread::spawn(move || {
            let (mut stopped, mut announced) = (None, None);
            for line in stderr.lines().map_while(Result::ok) {
                // The broker line is for xtask; the binary wrote a sentence for people beside it.
                if let Some(broker) = BrokerLine::parse(&line) {
                    announced.get_or_insert(broker.map_err(|error| format!("{line}: {error}")));
                    continue;
                }
                eprintln!("{line}");
                if stopped.is_none() && FatalLine::parse(&transport, &line).is_some() {
                    stopped = Some(line);
                }
            }
            (stopped, announced)
        })
    };
    let (mut finished, mut lines, mut summarised) = (Vec::new(), Vec::new(), false);
    for line in BufReader::new(child.stdout.take().expect("piped")).lines() {
        let line = line?;
        if let Some((name, result)) = libtest::parse_result_line(&line) {
            let elapsed = started.elapsed();
            progress.finished(name, result, elapsed);
            finished.push(Finished { name: name.to_owned(), result, elapsed });
        }
        summarised |= libtest::is_summary_line(&line);
        lines.push(line);
    }
    let status = child.wait()?;
    if watchdog.fired() && !summarised {
        let finished_names: BTreeSet<&str> = finished.iter().map(|f| f.name.as_str()).collect();
        let running: Vec<&str> =
            tests.iter().map(String::as_str).filter(|name| !finished_names.contains(name)).collect();
        bail!(
            "the {transport} conformance binary timed out after {} s (--binary-timeout) and was stopped; \
             still running: {}; the ledger is left untouched",
            call.limits.binary.as_secs(),
            running.join(", ")
        );
    }
    let (stopped, announced) = broker_stopped.join().expect("the stderr reader panicked");
    if let Some(line) = stopped {
        bail!(
            "the {transport} conformance binary stopped for its broker ({status}): {line}; the ledger is left untouched"
        );
    }
    if !summarised {
        bail!(
            "the {transport} conformance binary ended without a test summary ({status}): a broker or the binary died; \
             the ledger is left untouched"
        );
    }
    let announced = announced.transpose().map_err(|line| {
        anyhow::anyhow!("the {transport} binary's broker line does not read as the contract's: {line}")
    })?;
    let broker = provenance(transport, announced.as_ref());
    Ok(BinaryOutcome { finished, failures: failure_sections(&lines), wall: started.elapsed(), broker })
}

/// What one run of a test binary reported.
pub(crate) struct BinaryOutcome {
    pub(crate) finished: Vec<Finished>,
    /// libtest's failure sections, by test name.
    pub(crate) failures: BTreeMap<String, String>,
    pub(crate) wall: Duration,
    /// The broker the cells ran against, from the binary's `contract::BrokerLine`.
    pub(crate) broker: ledger::BrokerProvenance,
}

/// The broker behind a run, from the binary's [`BrokerLine`] and the project's pins.
fn provenance(transport: &str, announced: Option<&BrokerLine>) -> ledger::BrokerProvenance {
    let Some(line) = announced else {
        // The in-memory transport has no broker process: it runs in the test binary.
        return ledger::BrokerProvenance {
            transport: transport.to_owned(),
            source: "in-process".to_owned(),
            implementation: format!("gateway {transport}"),
            version: env!("CARGO_PKG_VERSION").to_owned(),
        };
    };
    let version = match line.source.as_str() {
        "local" => crate::brokers::pinned_version(transport, &line.implementation).unwrap_or_default(),
        _ => String::new(),
    };
    ledger::BrokerProvenance {
        transport: transport.to_owned(),
        source: line.source.clone(),
        implementation: line.implementation.clone(),
        version,
    }
}

/// Kills a process that outlives its limit, from a thread of its own.
struct Watchdog {
    done: std::sync::mpsc::Sender<()>,
    fired: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl Watchdog {
    fn start(pid: u32, limit: Duration) -> Watchdog {
        let (done, finished) = std::sync::mpsc::channel::<()>();
        let fired = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = fired.clone();
        std::thread::spawn(move || {
            if let Err(std::sync::mpsc::RecvTimeoutError::Timeout) = finished.recv_timeout(limit) {
                flag.store(true, std::sync::atomic::Ordering::SeqCst);
                // SIGKILL: a hung binary may not answer anything gentler. Its local brokers
                // read their stdin from it, and stop when it dies.
                let _ = Command::new("kill").args(["-KILL", &pid.to_string()]).status();
            }
        });
        Watchdog { done, fired }
    }

    fn fired(&self) -> bool {
        let _ = self.done.send(());
        self.fired.load(std::sync::atomic::Ordering::SeqCst)
    }
}

/// What the test binaries are told about their brokers.
#[derive(Clone, Copy)]
pub(crate) struct RunWith {
    pub(crate) brokers: BrokerSource,
    pub(crate) second: Option<Implementation>,
}

/// A built test binary and the filters selecting this run's tests in it.
pub(crate) type Built<'a> = (&'a str, PathBuf, Vec<String>);

/// Runs every binary once, up to `limits.at_once` of them at the same time (the cells mostly
/// wait out leases, so the run takes about its slowest binary, not their sum), and checks each
/// reported every selected test. With `ledger`, the failed tests whose cells are not Deferred run
/// again, together in one more run of their binary: passing then makes a test a flake (recorded,
/// and counted as the pass it is), failing again leaves the failure. Every binary is let finish;
/// a binary that fails the run fails it with the others' failures named too.
pub(crate) fn run_all(
    root: &Path,
    run_with: RunWith,
    binaries: &[Built],
    selection: &Selection,
    names: &TestNames,
    limits: Limits,
    ledger: Option<&Ledger>,
) -> Result<Vec<BinaryRun>> {
    let total: usize = binaries.iter().map(|(_, exe, filters)| list_tests(exe, filters).map_or(0, |t| t.len())).sum();
    let progress = Progress::new(total);
    let runs = at_once(binaries, limits.at_once, |(transport, executable, filters)| {
        let call = |filters: Vec<String>| BinaryCall {
            workspace: root,
            transport,
            brokers: run_with.brokers,
            second: run_with.second,
            executable,
            filters,
            limits,
            mutant: None,
        };
        run_one(&call(filters.clone()), selection, names, ledger, &progress, |names| {
            // A count of its own: the line above it says how many are rerun.
            let rerun = Progress::new(names.len());
            run_binary(&call(names), &rerun)
        })
    });
    let failed: Vec<String> = runs.iter().filter_map(|run| run.as_ref().err()).map(|e| format!("{e:#}")).collect();
    if !failed.is_empty() {
        bail!("{}", failed.join("\n"));
    }
    Ok(runs.into_iter().map(|run| run.expect("checked above")).collect())
}

/// `work` on each of `items`, at most `limit` at a time, each on a thread of its own; the
/// results in the items' order.
pub(crate) fn at_once<I: Sync, T: Send>(items: &[I], limit: usize, work: impl Fn(&I) -> T + Sync) -> Vec<T> {
    let next = AtomicUsize::new(0);
    let results: Vec<Mutex<Option<T>>> = items.iter().map(|_| Mutex::new(None)).collect();
    std::thread::scope(|scope| {
        for _ in 0..limit.clamp(1, items.len().max(1)) {
            scope.spawn(|| loop {
                let index = next.fetch_add(1, Ordering::SeqCst);
                let Some(item) = items.get(index) else { break };
                let result = work(item);
                *results[index].lock().unwrap_or_else(|p| p.into_inner()) = Some(result);
            });
        }
    });
    results.into_iter().map(|result| result.into_inner().unwrap().expect("every item ran")).collect()
}

/// One binary's run within [`run_all`]: its results checked complete, and with `ledger` its
/// failed tests that are not Deferred rerun through `rerun` (given their names).
fn run_one(
    call: &BinaryCall,
    selection: &Selection,
    names: &TestNames,
    ledger: Option<&Ledger>,
    progress: &Progress,
    rerun: impl Fn(Vec<String>) -> Result<BinaryOutcome>,
) -> Result<BinaryRun> {
    let transport = call.transport;
    let BinaryOutcome { mut finished, mut failures, wall, broker } = run_binary(call, progress)?;
    let missing: Vec<String> = selection
        .expected(transport)
        .into_iter()
        .filter(|expected| !finished.iter().any(|f| names.cell(&f.name).as_ref() == Some(expected)))
        .map(|test| format!("{} ({})", test.cell, test.variant))
        .collect();
    if !missing.is_empty() {
        bail!(
            "the {transport} run reported no result for {} selected test(s): {}; the ledger is left untouched",
            missing.len(),
            missing.join(", ")
        );
    }
    let mut flakes = Vec::new();
    if let Some(ledger) = ledger {
        // Every failed test whose cell is not Deferred runs once more, all of them in one
        // run of the binary (one broker start, at once as the first run ran them): a test
        // that passes then is a flake, one that fails again a regression.
        let suspects: Vec<(usize, CellId, String)> = finished
            .iter()
            .enumerate()
            .filter(|(_, test)| test.result == TestResult::Failed)
            .filter_map(|(index, test)| {
                let TestCell { cell, variant } = names.cell(&test.name)?;
                let deferred = matches!(ledger.get(&cell), Some(Status::Deferred { .. }));
                (!deferred).then_some((index, cell, variant))
            })
            .collect();
        if !suspects.is_empty() {
            let names: Vec<String> = suspects.iter().map(|(index, ..)| finished[*index].name.clone()).collect();
            eprintln!("rerunning {} failed test(s) whose cells are not Deferred: {}", names.len(), names.join(", "));
            let again = rerun(names)?.finished;
            for (index, cell, variant) in suspects {
                let test = &mut finished[index];
                if again.iter().any(|r| r.name == test.name && r.result == TestResult::Ok) {
                    let first = panic_message(&failures.remove(&test.name).unwrap_or_default());
                    // Printed too: a check run records no evidence, and its log is then the only
                    // place the flake can be traced from.
                    let said = first.lines().map(|line| format!("\n    {line}")).collect::<String>();
                    eprintln!("flake: {cell} ({variant}) failed, then passed on its rerun; it first said:{said}");
                    flakes.push(Flaked { cell, variant, first_failure: first });
                    test.result = TestResult::Ok;
                }
            }
        }
    }
    let configurations = selection.configurations_of(transport).iter().map(|c| c.name.clone()).collect();
    Ok(BinaryRun { configurations, finished, failures, wall, flakes, broker })
}

/// The panic message of a libtest failure section, without the backtrace and the "thread …
/// panicked at" line.
pub(crate) fn panic_message(section: &str) -> String {
    let text = section.split("stack backtrace:").next().unwrap_or_default();
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty() && !l.starts_with("note: ")).collect();
    match lines.iter().position(|l| l.starts_with("thread ") && l.contains("panicked at")) {
        Some(at) => lines[at + 1..].join("\n"),
        None => lines.join("\n"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn at_once_runs_at_most_its_limit_together_and_keeps_the_items_order() {
        let (running, most) = (AtomicUsize::new(0), AtomicUsize::new(0));
        let items: Vec<u64> = (0..9).collect();
        let doubled = at_once(&items, 3, |item| {
            most.fetch_max(running.fetch_add(1, Ordering::SeqCst) + 1, Ordering::SeqCst);
            // The first three wait for each other, so "three together" does not depend on how
            // the scheduler of a loaded machine happens to overlap the threads (CI saw two).
            let waited_since = Instant::now();
            while *item < 3 && running.load(Ordering::SeqCst) < 3 && waited_since.elapsed() < Duration::from_secs(30) {
                std::thread::sleep(Duration::from_millis(1));
            }
            // Later items finish first, so the order cannot come from finishing times.
            std::thread::sleep(Duration::from_millis(60 - 5 * item));
            running.fetch_sub(1, Ordering::SeqCst);
            item * 2
        });
        assert_eq!(doubled, (0..9).map(|i| i * 2).collect::<Vec<_>>());
        assert_eq!(most.load(Ordering::SeqCst), 3, "three at a time, never more");
        assert_eq!(at_once(&items, usize::MAX, |item| *item).len(), 9, "no limit: one thread per item");
        assert!(at_once(&Vec::<u64>::new(), 3, |item| *item).is_empty());
    }
}
