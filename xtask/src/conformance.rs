//! `cargo xtask conformance`: build each selected transport's test binary, run every cell
//! (ignored ones too, so a Deferred cell that now passes is seen), map results to ledger cells,
//! apply the update rules, record the run, and regenerate so Fixed cells lose their ignore.
//! With `--shard K/N --out DIR` it runs only its shard's configurations and writes their results
//! to DIR for `cargo xtask ledger merge` instead (see `shard`).

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use generator::Manifest;
use ledger::{CellId, CellResult, ConfigurationRun, Ledger, RunRecord, Status, VariantResult};

use crate::libtest::{self, TestResult};
use crate::root;
use crate::selection::{self, Selection};
use contract::{BrokerLine, BrokerSource, FatalLine, Implementation, CELL_TIMEOUT_VARIABLE};

#[derive(clap::Args)]
pub struct Args {
    /// A transport to run (repeatable), or `all`. Default: memory, or the transports of the
    /// chosen configurations. Valid choices are the manifest's transports
    #[arg(long = "transport", value_name = "TRANSPORT")]
    transports: Vec<String>,
    /// Run only this configuration (repeatable). A narrowed run updates only the cells it ran
    #[arg(long = "configuration", value_name = "NAME")]
    configurations: Vec<String>,
    /// Run only this behaviour (repeatable), as FR-N
    #[arg(long = "behaviour", value_name = "FR-N")]
    behaviours: Vec<String>,
    /// Run only this pump variant (repeatable): reactor or proactor. A cell changes status only
    /// when both ran; one variant can still reveal a regression
    #[arg(long = "variant", value_name = "VARIANT")]
    variants: Vec<String>,
    /// Stop a transport's test binary that runs longer than this, naming the cells still
    /// running; the ledger is left untouched
    #[arg(long, value_name = "SECONDS", default_value_t = Limits::DEFAULT.binary.as_secs(), value_parser = clap::value_parser!(u64).range(1..))]
    binary_timeout: u64,
    /// Fail a cell that runs longer than this with "timed out after N s waiting for <the harness
    /// step it was in>" (set-up and teardown included); the other cells go on. Passed to the test
    /// binaries as CONFORMANCE_CELL_TIMEOUT
    #[arg(long, value_name = "SECONDS", default_value_t = Limits::DEFAULT.cell.as_secs(), value_parser = clap::value_parser!(u64).range(1..))]
    cell_timeout: u64,
    /// Run the selected tests N times and print each cell's pass rate (no reruns, no ledger
    /// change): a stability check before a cell is trusted
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    repeat: u32,
    /// Also write the results as JUnit XML to this file
    #[arg(long, value_name = "PATH")]
    junit: Option<PathBuf>,
    /// The ledger folder (cells.tsv, runs.jsonl, LEDGER.md, LEDGER.svg). Default: the project's ledger/.
    /// With another folder the generated code is not rewritten
    #[arg(long, value_name = "DIR")]
    ledger_dir: Option<PathBuf>,
    /// Where brokers come from: auto (env, then containers when a Docker daemon answers and the
    /// image is present, then local), env, containers (testcontainers) or local (local processes).
    /// Passed to the test binaries as CONFORMANCE_BROKERS
    #[arg(long, value_enum, value_name = "SOURCE", default_value_t = BrokerSource::Auto)]
    brokers: BrokerSource,
    /// Run only shard K of N (whole configurations, balanced by their recorded durations) and
    /// write its results to --out instead of the ledger; `cargo xtask ledger merge` applies them
    #[arg(long, value_name = "K/N", requires = "out", conflicts_with = "repeat")]
    shard: Option<crate::shard::Spec>,
    /// The folder a --shard run writes shard-K-of-N.json into (required with --shard)
    #[arg(long, value_name = "DIR", requires = "shard")]
    out: Option<PathBuf>,
    /// Check the results against the ledger and write nothing (no ledger row, run record, page
    /// or regenerated code): fail on a regression, on a failing cell that is not Deferred, and on
    /// any change the run would make to the ledger (a new cell, Unknown -> Pass, Deferred ->
    /// Fixed), since a check's findings are not recorded. What `cargo xtask test` runs
    #[arg(long, conflicts_with_all = ["shard", "repeat", "implementation"])]
    check: bool,
    /// The broker implementation to run a transport's cells against. Default: each transport's
    /// reference, recorded in the ledger (moto for sqs, apache for rocketmq). A second one is
    /// recorded in ledger/fidelity.tsv and FIDELITY.md, never in cells.tsv, and needs the local
    /// broker source: elasticmq (sqs and sqs-fifo only, as ElasticMQ has no SNS) or rocketmq-rust.
    /// Passed to the test binaries as CONFORMANCE_SQS_IMPL and CONFORMANCE_ROCKETMQ_IMPL
    #[arg(long = "impl", value_enum, value_name = "IMPLEMENTATION", conflicts_with = "shard")]
    implementation: Option<Implementation>,
}

/// One finished test of a generated binary.
pub(crate) struct Finished {
    pub(crate) name: String,
    pub(crate) result: TestResult,
    /// From the binary's start; every cell starts at once, so this is close to its own duration.
    elapsed: Duration,
}

pub(crate) struct BinaryRun {
    pub(crate) configurations: Vec<String>,
    pub(crate) finished: Vec<Finished>,
    pub(crate) failures: BTreeMap<String, String>,
    pub(crate) wall: Duration,
    flakes: Vec<Flaked>,
    pub(crate) broker: ledger::BrokerProvenance,
}

/// A test that failed, then passed when run again alone.
struct Flaked {
    cell: CellId,
    variant: String,
    first_failure: String,
}

/// A cargo command without the variables `cargo run` and `cargo test` set about the xtask package
/// itself. Build scripts declare `rerun-if-env-changed` on some of them (ring's, through cc:
/// CARGO_MANIFEST_DIR, CARGO_PKG_NAME, OUT_DIR, …), so a cargo that inherits xtask's values
/// sees them changed and rebuilds ring and all that depends on it (rustls, every SDK), and the
/// next build from a shell rebuilds them back: about 5 minutes on two cores each way.
pub(crate) fn cargo() -> Command {
    let mut command = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
    for (name, _) in std::env::vars_os() {
        if name.to_str().is_some_and(is_package_variable) {
            command.env_remove(name);
        }
    }
    command
}

/// Whether `name` is one of the variables cargo sets for the package it runs or builds.
fn is_package_variable(name: &str) -> bool {
    name.starts_with("CARGO_PKG_")
        || name.starts_with("CARGO_BIN_")
        || name.starts_with("CARGO_CFG_")
        || matches!(
            name,
            "CARGO_MANIFEST_DIR"
                | "CARGO_MANIFEST_PATH"
                | "CARGO_MANIFEST_LINKS"
                | "CARGO_CRATE_NAME"
                | "CARGO_PRIMARY_PACKAGE"
                | "CARGO_TARGET_TMPDIR"
                | "CARGO_RUSTC_CURRENT_DIR"
                | "OUT_DIR"
        )
}

/// Which features the conformance test binaries are built with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Features {
    /// The union of the selected transports' features (with testcontainers unless the broker
    /// source rules containers out): the least to compile, for a run on its own.
    Selected,
    /// Every feature, as the README's test command (`cargo xtask test`) builds the generated
    /// crate: a run after it reuses its artifacts instead of recompiling the workspace for
    /// another feature set (5 to 6 minutes on two cores per set).
    All,
}

impl Features {
    /// A run of memory alone stays lean (it needs no SDK); any broker transport builds with every
    /// feature, since its SDK dominates the build and the README's test command built them all.
    pub(crate) fn for_run(transports: &[(&str, &str)]) -> Features {
        if transports.iter().all(|(transport, _)| *transport == "memory") {
            Features::Selected
        } else {
            Features::All
        }
    }
}

/// Builds the test binaries of `transports` (name, feature) from the workspace at `workspace`
/// (into `target_dir` when given, else cargo's default), in one cargo call, so the workspace
/// crates compile once for the whole run instead of once per transport's feature set.
pub(crate) fn build_test_binaries(
    workspace: &Path,
    target_dir: Option<&Path>,
    transports: &[(&str, &str)],
    brokers: BrokerSource,
    features: Features,
) -> Result<BTreeMap<String, PathBuf>> {
    let mut command = cargo();
    command.current_dir(workspace).args(["test", "--package", "generated"]);
    if let Some(target_dir) = target_dir {
        command.env("CARGO_TARGET_DIR", target_dir);
    }
    match features {
        Features::All => {
            command.arg("--all-features");
        }
        Features::Selected => {
            let mut selected: Vec<&str> = transports.iter().map(|(_, feature)| *feature).collect();
            if transports.iter().any(|(transport, _)| *transport != "memory") && brokers.may_use_containers() {
                selected.push("containers");
            }
            command.args(["--no-default-features", "--features", &selected.join(",")]);
        }
    }
    for (transport, _) in transports {
        command.args(["--test", transport]);
    }
    let output = command
        .args(["--no-run", "--message-format=json-render-diagnostics"])
        .stderr(Stdio::inherit())
        .output()
        .context("cannot run cargo")?;
    if !output.status.success() {
        bail!("building the conformance tests in {} failed ({})", workspace.display(), output.status);
    }
    let mut executables = BTreeMap::new();
    for line in String::from_utf8_lossy(&output.stdout).lines() {
        let Ok(message) = serde_json::from_str::<serde_json::Value>(line) else { continue };
        let name = message["target"]["name"].as_str().unwrap_or_default();
        if let (true, Some(executable)) = (message["reason"] == "compiler-artifact", message["executable"].as_str()) {
            executables.insert(name.to_owned(), PathBuf::from(executable));
        }
    }
    for (transport, _) in transports {
        if !executables.contains_key(*transport) {
            bail!("cargo built no {transport} test executable");
        }
    }
    Ok(executables)
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
}

/// The time limits of a run.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    /// The binary is killed after this long, and the run fails naming the tests still running.
    pub binary: Duration,
    /// A cell fails after this long (providers::ceiling, told through its variable).
    pub cell: Duration,
}

impl Limits {
    /// The defaults of `--binary-timeout` and `--cell-timeout`, for callers with no flags for
    /// them (the mutation run).
    pub(crate) const DEFAULT: Limits = Limits { binary: Duration::from_secs(1200), cell: Duration::from_secs(300) };
}

/// Runs one transport's test binary, every selected cell at once.
pub(crate) fn run_binary(call: &BinaryCall, done: &mut usize, total: usize) -> Result<BinaryOutcome> {
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
            *done += 1;
            let elapsed = started.elapsed();
            eprintln!("[{done:>3}/{total}] {name} ... {result:?} ({:.1} s)", elapsed.as_secs_f64());
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

fn variant_result(results: &[&Finished], variant: &str) -> VariantResult {
    let mut found = results.iter().filter(|f| libtest::cell_of(&f.name).is_some_and(|(_, v, _)| v == variant));
    match found.next().map(|f| f.result) {
        Some(TestResult::Ok) => VariantResult::Passed,
        Some(TestResult::Failed) => VariantResult::Failed,
        Some(TestResult::Ignored) | None => VariantResult::NotRun,
    }
}

pub(crate) fn selected_transports<'m>(manifest: &'m Manifest, asked: &[String]) -> Result<Vec<(&'m str, &'m str)>> {
    let known = manifest.transports();
    let asked: Vec<&str> = if asked.is_empty() { vec!["memory"] } else { asked.iter().map(String::as_str).collect() };
    asked
        .iter()
        .map(|name| {
            known.iter().find(|(transport, _)| transport == name).copied().with_context(|| {
                let choices: Vec<&str> = known.iter().map(|(t, _)| *t).collect();
                format!(
                    "--transport {name}: no such transport in {}; valid choices: {}",
                    generator::MANIFEST,
                    choices.join(", ")
                )
            })
        })
        .collect()
}

/// Whether the working tree has changes git would show (the commit alone does not say what ran).
fn git_dirty() -> bool {
    Command::new("git")
        .current_dir(root())
        .args(["status", "--porcelain"])
        .output()
        .is_ok_and(|output| !output.stdout.is_empty())
}

/// `rustc -V` of the toolchain that built the cells.
fn toolchain() -> Option<String> {
    let output = Command::new("rustc").current_dir(root()).arg("-V").output().ok()?;
    output.status.success().then(|| String::from_utf8_lossy(&output.stdout).trim().to_owned())
}

pub(crate) fn git_commit() -> String {
    Command::new("git")
        .current_dir(root())
        .args(["rev-parse", "--short", "HEAD"])
        .output()
        .ok()
        .filter(|output| output.status.success())
        .map_or_else(|| "unknown".into(), |output| String::from_utf8_lossy(&output.stdout).trim().to_owned())
}

pub fn run(args: &Args) -> Result<()> {
    let root = root();
    let manifest = Manifest::load(&root.join(generator::MANIFEST), &root.join("templates"))?;
    let default_dir = root.join("ledger");
    let ledger_dir = args.ledger_dir.clone().unwrap_or(default_dir);
    let cells_path = ledger_dir.join("cells.tsv");
    let mut ledger = Ledger::load(&cells_path)?;
    // A reference implementation named with --impl is the run without it.
    let second = args.implementation.filter(|implementation| !implementation.is_reference());
    let brokers = brokers_for(args.brokers, second)?;
    let configurations = configurations_for(&manifest, second, &args.transports, &args.configurations)?;
    let asked = selection::Asked {
        transports: args.transports.clone(),
        configurations: configurations.clone(),
        behaviours: args.behaviours.clone(),
        variants: args.variants.clone(),
    };
    let mut selection = Selection::new(&manifest, &asked)?;
    let modules: BTreeMap<String, &str> =
        manifest.configurations.iter().map(|c| (c.module(), c.name.as_str())).collect();
    // The binaries are built from generated/: stale code would test what the templates no
    // longer say.
    generator::generate(&root, generator::Mode::Check).context("generated/ must be fresh before a conformance run")?;
    let every_variant = selection.every_variant(&manifest);
    let shard = match args.shard {
        Some(spec) => Some(slice(spec, &ledger_dir, &mut selection, every_variant)?),
        None => None,
    };
    if let Some(shard) = shard.as_ref().filter(|_| selection.configurations.is_empty()) {
        let path = shard.write(&[], None, args.out.as_deref().expect("clap: --shard requires --out"))?;
        eprintln!("shard {}: its slice is empty (no configuration assigned); wrote {}", shard.spec, path.display());
        return Ok(());
    }

    // Build everything first, so the progress count covers the whole matrix.
    eprintln!("brokers: {} (each transport says below which source it used)", brokers.name());
    if brokers.may_use_local() {
        for (transport, _) in &selection.transports {
            crate::brokers::install_implementation(transport, second)?;
        }
    }
    let names: Vec<&str> = selection.transports.iter().map(|(transport, _)| *transport).collect();
    eprintln!("building the conformance tests of {}", names.join(", "));
    let mut executables =
        build_test_binaries(&root, None, &selection.transports, brokers, Features::for_run(&selection.transports))?;
    let mut binaries = Vec::new();
    for (transport, _) in &selection.transports {
        let executable = executables.remove(*transport).expect("build_test_binaries checks every transport");
        binaries.push((*transport, executable, selection.filters(&manifest, transport)));
    }
    let limits =
        Limits { binary: Duration::from_secs(args.binary_timeout), cell: Duration::from_secs(args.cell_timeout) };
    // What the cells are about to exercise: evidence is tied to these sources.
    let digest = ledger::source_digest(&root)?;
    let run_with = RunWith { brokers, second };
    if args.repeat > 1 {
        return repeat(&root, args, run_with, &binaries, &selection, &modules, limits, &ledger);
    }
    let runs = run_all(&root, run_with, &binaries, &selection, &modules, limits, Some(&ledger))?;
    // Every binary completed: only now may the ledger (or the fidelity table) change.
    let (results, timings) = cell_results(&runs, &selection, &modules);
    let record = run_record(&runs, &modules, digest);
    if let Some(implementation) = second {
        let fidelity = crate::fidelity::FidelityRun {
            ledger_dir: &ledger_dir,
            implementation,
            results: &results,
            runs: &runs,
            modules: &modules,
            not_run: not_served(&manifest, implementation, &args.transports),
            behaviours: &selection.behaviours,
            ledger: &ledger,
        };
        fidelity.record(&record)?;
        print_summary(&record, &ledger::UpdateReport::default(), &timings, &runs);
        return Ok(());
    }
    let applied = match &shard {
        None if args.check => crate::record::check(&ledger, &results, every_variant),
        // A shard leaves the ledger alone; it says what the merge will find.
        Some(shard) => {
            let path = shard.write(&results, Some(record.clone()), args.out.as_deref().expect("clap"))?;
            eprintln!("shard {}: wrote {} (apply with cargo xtask ledger merge)", shard.spec, path.display());
            crate::record::preview(&ledger, &results, every_variant)
        }
        None => crate::record::apply(&root, &manifest, &ledger_dir, &mut ledger, &results, &record, every_variant)?,
    };
    if let Some(path) = &args.junit {
        crate::conformance::junit::write(path, &runs, &modules)?;
    }
    print_summary(&record, &applied.report, &timings, &runs);
    if !applied.problems.is_empty() {
        bail!("{}", applied.problems.join("\n"));
    }
    Ok(())
}

/// Each selected cell's result over both variants, and its slowest variant's time.
fn cell_results(
    runs: &[BinaryRun],
    selection: &Selection,
    modules: &BTreeMap<String, &str>,
) -> (Vec<CellResult>, BTreeMap<CellId, Duration>) {
    let mut results = Vec::new();
    let mut timings: BTreeMap<CellId, Duration> = BTreeMap::new();
    for run in runs {
        for configuration in &run.configurations {
            for &behaviour in &selection.behaviours {
                let cell = CellId::new(configuration.clone(), behaviour);
                let mine: Vec<&Finished> = run
                    .finished
                    .iter()
                    .filter(|f| {
                        libtest::cell_of(&f.name).is_some_and(|(module, _, n)| {
                            modules.get(module) == Some(&configuration.as_str()) && n == behaviour
                        })
                    })
                    .collect();
                if let Some(slowest) = mine.iter().map(|f| f.elapsed).max() {
                    timings.insert(cell.clone(), slowest);
                }
                results.push(CellResult {
                    reactor: variant_result(&mine, "reactor"),
                    proactor: variant_result(&mine, "proactor"),
                    cell,
                });
            }
        }
    }
    (results, timings)
}

/// A --shard run's slice: plans the whole selection (see `shard`) and narrows `selection` to
/// shard K's configurations.
fn slice(spec: crate::shard::Spec, ledger_dir: &Path, selection: &mut Selection, every_variant: bool) -> Result<Slice> {
    let runs_path = ledger_dir.join("runs.jsonl");
    // A scratch ledger may have no history yet: every configuration then weighs the default.
    let runs = if runs_path.exists() { ledger::read_runs(&runs_path)? } else { Vec::new() };
    let names: Vec<&str> = selection.configurations.iter().map(|c| c.name.as_str()).collect();
    let weights = crate::shard::weights(&runs, &names);
    let plan = crate::shard::plan(&weights, spec.count);
    let full = crate::shard::SelectionRecord::of(selection, every_variant);
    let mine = &plan[spec.index as usize - 1];
    let listed = if mine.is_empty() { "none".to_owned() } else { mine.join(", ") };
    eprintln!("shard {spec}: {} of {} configuration(s): {listed}", mine.len(), names.len());
    selection.configurations.retain(|c| mine.contains(&c.name));
    let kept: BTreeSet<&str> = selection.configurations.iter().map(|c| c.transport.as_str()).collect();
    selection.transports.retain(|(transport, _)| kept.contains(transport));
    Ok(Slice { spec, selection: full, plan, digest: ledger::source_digest(&root())? })
}

/// What a --shard run writes besides its results.
struct Slice {
    spec: crate::shard::Spec,
    selection: crate::shard::SelectionRecord,
    plan: Vec<Vec<String>>,
    digest: String,
}

impl Slice {
    fn write(&self, results: &[CellResult], record: Option<RunRecord>, out: &Path) -> Result<PathBuf> {
        crate::shard::ShardFile::new(
            self.spec,
            git_commit(),
            self.digest.clone(),
            self.selection.clone(),
            self.plan.clone(),
            results,
            record,
        )
        .write(out)
    }
}

/// What the test binaries are told about their brokers.
#[derive(Clone, Copy)]
struct RunWith {
    brokers: BrokerSource,
    second: Option<Implementation>,
}

/// The broker source a run uses: a second implementation exists only as a local process, so
/// `--impl elasticmq` (or rocketmq-rust) turns `auto` into `local` and refuses `env` and
/// `containers` (their broker is whatever the endpoint or image is, which would be recorded under
/// the wrong name).
fn brokers_for(brokers: BrokerSource, second: Option<Implementation>) -> Result<BrokerSource> {
    match (second, brokers) {
        (None, brokers) => Ok(brokers),
        (Some(_), BrokerSource::Auto | BrokerSource::Local) => Ok(BrokerSource::Local),
        (Some(implementation), other) => bail!(
            "--impl {} runs the local {} server; --brokers {} cannot give it (valid choices with --impl {0}: auto, local)",
            implementation.name(),
            implementation.name(),
            other.name()
        ),
    }
}

/// The configurations a run asks for: with a second implementation, only its transport's, and of
/// them only the configurations the implementation serves (all of them when none is named). The
/// others are recorded as not run (see [`not_served`]), never silently dropped.
fn configurations_for(
    manifest: &Manifest,
    second: Option<Implementation>,
    transports: &[String],
    asked: &[String],
) -> Result<Vec<String>> {
    let Some(implementation) = second else {
        return Ok(asked.to_vec());
    };
    let (name, transport) = (implementation.name(), implementation.transport());
    if transports.iter().any(|t| t != transport) || (transports.is_empty() && asked.is_empty()) {
        bail!("--impl {name} is an implementation of the {transport} transport; run it with --transport {transport}");
    }
    let own = manifest.configurations.iter().filter(|c| c.transport == transport).map(|c| c.name.as_str());
    if asked.is_empty() {
        return Ok(own.filter(|c| implementation.serves(c)).map(str::to_owned).collect());
    }
    for configuration in asked {
        let on_it = manifest.configurations.iter().any(|c| c.name == *configuration && c.transport == transport);
        if !on_it || !implementation.serves(configuration) {
            let served: Vec<&str> = own.clone().filter(|c| implementation.serves(c)).collect();
            bail!(
                "--configuration {configuration}: not served by {name}; valid choices with --impl {name}: {}",
                served.join(", ")
            );
        }
    }
    Ok(asked.to_vec())
}

/// The configurations of its transport a second implementation cannot carry, for the fidelity
/// table's not-run rows.
fn not_served<'m>(manifest: &'m Manifest, implementation: Implementation, transports: &[String]) -> Vec<&'m str> {
    let transport = implementation.transport();
    if !transports.iter().any(|t| t == transport) {
        return Vec::new();
    }
    manifest
        .configurations
        .iter()
        .filter(|c| c.transport == transport && !implementation.serves(&c.name))
        .map(|c| c.name.as_str())
        .collect()
}

/// A built test binary and the filters selecting this run's tests in it.
type Built<'a> = (&'a str, PathBuf, Vec<String>);

/// Runs every binary once and checks each reported every selected test. With `ledger`, a failed
/// test whose cell is not Deferred is run again, alone: passing then makes it a flake (recorded,
/// and counted as the pass it is), failing again leaves the failure.
fn run_all(
    root: &Path,
    run_with: RunWith,
    binaries: &[Built],
    selection: &Selection,
    modules: &BTreeMap<String, &str>,
    limits: Limits,
    ledger: Option<&Ledger>,
) -> Result<Vec<BinaryRun>> {
    let total: usize = binaries.iter().map(|(_, exe, filters)| list_tests(exe, filters).map_or(0, |t| t.len())).sum();
    let (mut done, mut runs) = (0, Vec::new());
    let RunWith { brokers, second } = run_with;
    for (transport, executable, filters) in binaries {
        let call = |filters: Vec<String>| BinaryCall {
            workspace: root,
            transport,
            brokers,
            second,
            executable,
            filters,
            limits,
        };
        let BinaryOutcome { mut finished, mut failures, wall, broker } =
            run_binary(&call(filters.clone()), &mut done, total)?;
        let missing: Vec<String> = selection
            .expected(transport)
            .into_iter()
            .filter(|expected| !finished.iter().any(|f| expected.is(&f.name)))
            .map(|t| format!("{}/{} ({})", modules.get(&t.module).copied().unwrap_or("?"), t.behaviour, t.variant))
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
            for test in finished.iter_mut().filter(|f| f.result == TestResult::Failed) {
                let Some((module, variant, number)) = libtest::cell_of(&test.name) else { continue };
                let Some(configuration) = modules.get(module) else { continue };
                let cell = CellId::new(*configuration, number);
                if matches!(ledger.get(&cell), Some(Status::Deferred { .. })) {
                    continue;
                }
                eprintln!("rerunning {} alone: {cell} is not Deferred", test.name);
                let again = run_binary(&call(vec![test.name.clone()]), &mut 0, 1)?.finished;
                if again.iter().any(|r| r.name == test.name && r.result == TestResult::Ok) {
                    let first = failures.remove(&test.name).unwrap_or_default();
                    eprintln!("flake: {cell} ({variant}) failed, then passed alone");
                    flakes.push(Flaked { cell, variant: variant.to_owned(), first_failure: panic_message(&first) });
                    test.result = TestResult::Ok;
                }
            }
        }
        let configurations = selection.configurations_of(transport).iter().map(|c| c.name.clone()).collect();
        runs.push(BinaryRun { configurations, finished, failures, wall, flakes, broker });
    }
    Ok(runs)
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

/// `--repeat N`: the selected tests N times over, and each cell's pass rate. Nothing is rerun
/// (the point is to see the raw rate) and the ledger is not touched.
#[allow(clippy::too_many_arguments)]
fn repeat(
    root: &Path,
    args: &Args,
    run_with: RunWith,
    binaries: &[Built],
    selection: &Selection,
    modules: &BTreeMap<String, &str>,
    limits: Limits,
    ledger: &Ledger,
) -> Result<()> {
    let mut passes: BTreeMap<(CellId, String), (u32, u32)> = BTreeMap::new();
    for round in 1..=args.repeat {
        eprintln!("round {round} of {}", args.repeat);
        for run in run_all(root, run_with, binaries, selection, modules, limits, None)? {
            for test in &run.finished {
                let Some((module, variant, number)) = libtest::cell_of(&test.name) else { continue };
                let Some(configuration) = modules.get(module) else { continue };
                let tally = passes.entry((CellId::new(*configuration, number), variant.to_owned())).or_default();
                tally.0 += u32::from(test.result == TestResult::Ok);
                tally.1 += 1;
            }
        }
    }
    println!("| cell | variant | status | passed | runs | pass rate |\n| --- | --- | --- | ---: | ---: | ---: |");
    let mut unstable = 0;
    for ((cell, variant), (passed, runs)) in &passes {
        let status = ledger.get(cell).map_or_else(|| "(missing)".to_owned(), ToString::to_string);
        let rate = 100.0 * f64::from(*passed) / f64::from(*runs);
        println!("| {cell} | {variant} | {status} | {passed} | {runs} | {rate:.0}% |");
        // A Deferred cell is expected to fail: only the others must pass every time.
        unstable += usize::from(passed != runs && !matches!(ledger.get(cell), Some(Status::Deferred { .. })));
    }
    eprintln!("{} cell variants; {unstable} not Deferred and below 100%", passes.len());
    Ok(())
}

fn run_record(runs: &[BinaryRun], modules: &BTreeMap<String, &str>, digest: String) -> RunRecord {
    let mut tallies: BTreeMap<(String, String), ConfigurationRun> = BTreeMap::new();
    let mut cells = Vec::new();
    for run in runs {
        for finished in &run.finished {
            let Some((module, variant, number)) = libtest::cell_of(&finished.name) else { continue };
            let Some(configuration) = modules.get(module) else { continue };
            let cell = CellId::new(*configuration, number);
            let flaky = run.flakes.iter().any(|f| f.cell == cell && f.variant == variant);
            let result = match finished.result {
                TestResult::Ok if flaky => ledger::CellRun::FLAKY,
                TestResult::Ok => ledger::CellRun::PASSED,
                TestResult::Failed => ledger::CellRun::FAILED,
                TestResult::Ignored => ledger::CellRun::SKIPPED,
            };
            cells.push(ledger::CellRun {
                cell: cell.to_string(),
                variant: variant.to_owned(),
                result: result.to_owned(),
                duration_ms: finished.elapsed.as_millis() as u64,
            });
            let tally =
                tallies.entry((configuration.to_string(), variant.to_owned())).or_insert_with(|| ConfigurationRun {
                    configuration: configuration.to_string(),
                    variant: variant.to_owned(),
                    passed: 0,
                    failed: 0,
                    skipped: 0,
                    wall_ms: run.wall.as_millis() as u64,
                    flakes: run
                        .flakes
                        .iter()
                        .filter(|f| f.cell.configuration == *configuration && f.variant == variant)
                        .map(|f| ledger::Flake {
                            cell: f.cell.to_string(),
                            variant: f.variant.clone(),
                            first_failure: f.first_failure.clone(),
                        })
                        .collect(),
                });
            match finished.result {
                TestResult::Ok => tally.passed += 1,
                TestResult::Failed => tally.failed += 1,
                TestResult::Ignored => tally.skipped += 1,
            }
        }
    }
    cells.sort_by(|a, b| (&a.cell, &a.variant).cmp(&(&b.cell, &b.variant)));
    RunRecord {
        date: ledger::now_rfc3339(),
        commit: git_commit(),
        dirty: git_dirty(),
        toolchain: toolchain(),
        digest: Some(digest),
        brokers: runs.iter().map(|run| run.broker.clone()).collect(),
        configurations: tallies.into_values().collect(),
        cells,
    }
}

fn print_summary(
    record: &RunRecord,
    report: &ledger::UpdateReport,
    timings: &BTreeMap<CellId, Duration>,
    runs: &[BinaryRun],
) {
    eprintln!("\n{:<24} {:<9} {:>6} {:>6} {:>7}", "configuration", "variant", "passed", "failed", "skipped");
    for run in &record.configurations {
        eprintln!(
            "{:<24} {:<9} {:>6} {:>6} {:>7}",
            run.configuration, run.variant, run.passed, run.failed, run.skipped
        );
    }
    for run in runs {
        eprintln!("wall time of {}: {:.1} s", run.configurations.join(", "), run.wall.as_secs_f64());
    }
    if let Some((cell, time)) = timings.iter().max_by_key(|(_, time)| **time) {
        eprintln!("slowest cell: {cell} ({:.1} s)", time.as_secs_f64());
    }
    for transition in &report.transitions {
        eprintln!("ledger: {} {} -> {}", transition.cell, transition.from, transition.to);
    }
    for cell in &report.still_deferred {
        eprintln!("still deferred: {cell}");
    }
    for run in runs {
        for (name, text) in &run.failures {
            // The panic message is what a reader needs; a backtrace (RUST_BACKTRACE) buries it.
            let message = text.split("stack backtrace:").next().unwrap_or_default();
            eprintln!("\n---- {name} ----\n{}", message.trim_end());
        }
    }
}

mod junit {
    //! The run as JUnit XML: one suite per configuration and variant, one case per behaviour.

    use super::*;
    use quick_junit::{NonSuccessKind, Report, TestCase, TestCaseStatus, TestSuite};

    pub fn write(path: &Path, runs: &[BinaryRun], modules: &BTreeMap<String, &str>) -> Result<()> {
        let mut suites: BTreeMap<String, TestSuite> = BTreeMap::new();
        for run in runs {
            for finished in &run.finished {
                let Some((module, variant, number)) = libtest::cell_of(&finished.name) else { continue };
                let configuration = modules.get(module).copied().unwrap_or(module);
                let status = match finished.result {
                    TestResult::Ok => TestCaseStatus::success(),
                    TestResult::Ignored => TestCaseStatus::skipped(),
                    TestResult::Failed => {
                        let mut status = TestCaseStatus::non_success(NonSuccessKind::Failure);
                        if let Some(text) = run.failures.get(&finished.name) {
                            status.set_description(text.clone());
                        }
                        status
                    }
                };
                let mut case = TestCase::new(format!("{number} {}", finished.name), status);
                case.set_classname(format!("{configuration}.{variant}"));
                case.set_time(finished.elapsed);
                suites
                    .entry(format!("{configuration}/{variant}"))
                    .or_insert_with_key(|name| TestSuite::new(name.clone()))
                    .add_test_case(case);
            }
        }
        let mut report = Report::new("conformance");
        report.add_test_suites(suites.into_values());
        let xml = report.to_string().context("rendering JUnit XML")?;
        std::fs::write(path, xml).with_context(|| format!("writing {}", path.display()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Command {
        #[command(flatten)]
        args: Args,
    }

    fn manifest() -> Manifest {
        Manifest::load(&root().join(generator::MANIFEST), &root().join("templates")).unwrap()
    }

    fn strings(values: &[&str]) -> Vec<String> {
        values.iter().map(|v| v.to_string()).collect()
    }

    #[test]
    fn cargo_is_run_without_the_variables_cargo_set_for_xtask() {
        for name in ["CARGO_MANIFEST_DIR", "CARGO_PKG_NAME", "CARGO_PKG_VERSION_MAJOR", "OUT_DIR", "CARGO_CRATE_NAME"] {
            assert!(is_package_variable(name), "{name}");
        }
        for name in ["CARGO", "CARGO_HOME", "CARGO_TARGET_DIR", "RUSTFLAGS", "PATH"] {
            assert!(!is_package_variable(name), "{name}");
        }
    }

    #[test]
    fn an_unknown_implementation_is_refused_naming_the_choices() {
        let error = Command::try_parse_from(["conformance", "--impl", "ElasticMQ"]).err().expect("refused").to_string();
        assert!(error.contains("invalid value 'ElasticMQ' for '--impl <IMPLEMENTATION>'"), "{error}");
        assert!(error.contains("[possible values: moto, elasticmq, apache, rocketmq-rust]"), "{error}");
        let parsed = Command::try_parse_from(["conformance", "--transport", "sqs", "--impl", "elasticmq"]).unwrap();
        assert_eq!(parsed.args.implementation, Some(Implementation::ElasticMq));
        let parsed = Command::try_parse_from(["conformance", "--transport", "rocketmq", "--impl", "rocketmq-rust"]);
        assert_eq!(parsed.unwrap().args.implementation, Some(Implementation::RocketMqRust));
        assert_eq!(Command::try_parse_from(["conformance"]).unwrap().args.implementation, None);
    }

    #[test]
    fn a_second_implementation_runs_locally_or_not_at_all() {
        assert!(brokers_for(BrokerSource::Auto, Some(Implementation::ElasticMq)).unwrap() == BrokerSource::Local);
        assert!(brokers_for(BrokerSource::Local, Some(Implementation::RocketMqRust)).unwrap() == BrokerSource::Local);
        assert!(brokers_for(BrokerSource::Containers, None).unwrap() == BrokerSource::Containers);
        let error = brokers_for(BrokerSource::Env, Some(Implementation::ElasticMq)).err().unwrap().to_string();
        assert_eq!(
            error,
            "--impl elasticmq runs the local elasticmq server; --brokers env cannot give it (valid choices with --impl \
             elasticmq: auto, local)"
        );
        let error =
            brokers_for(BrokerSource::Containers, Some(Implementation::RocketMqRust)).err().unwrap().to_string();
        assert!(error.starts_with("--impl rocketmq-rust runs the local rocketmq-rust server"), "{error}");
    }

    #[test]
    fn elasticmq_runs_the_sqs_configurations_it_serves_and_names_the_others() {
        let manifest = manifest();
        let sqs = strings(&["sqs"]);
        let elasticmq = Some(Implementation::ElasticMq);
        assert_eq!(configurations_for(&manifest, elasticmq, &sqs, &[]).unwrap(), strings(&["sqs", "sqs-fifo"]));
        assert_eq!(not_served(&manifest, Implementation::ElasticMq, &sqs), vec!["sns", "sns-fifo"]);
        let error = configurations_for(&manifest, elasticmq, &sqs, &strings(&["sns"])).unwrap_err().to_string();
        assert_eq!(
            error,
            "--configuration sns: not served by elasticmq; valid choices with --impl elasticmq: sqs, sqs-fifo"
        );
        let error = configurations_for(&manifest, elasticmq, &strings(&["gcp"]), &[]).unwrap_err().to_string();
        assert_eq!(error, "--impl elasticmq is an implementation of the sqs transport; run it with --transport sqs");
        // The reference implementation changes nothing.
        assert_eq!(configurations_for(&manifest, None, &[], &[]).unwrap(), Vec::<String>::new());
    }

    #[test]
    fn rocketmq_rust_runs_the_rocketmq_configuration_and_nothing_else() {
        let manifest = manifest();
        let rocketmq = strings(&["rocketmq"]);
        let rust = Some(Implementation::RocketMqRust);
        assert_eq!(configurations_for(&manifest, rust, &rocketmq, &[]).unwrap(), rocketmq);
        assert!(not_served(&manifest, Implementation::RocketMqRust, &rocketmq).is_empty());
        let error = configurations_for(&manifest, rust, &strings(&["sqs"]), &[]).unwrap_err().to_string();
        assert_eq!(
            error,
            "--impl rocketmq-rust is an implementation of the rocketmq transport; run it with --transport rocketmq"
        );
        let error = configurations_for(&manifest, rust, &[], &strings(&["sqs"])).unwrap_err().to_string();
        assert_eq!(
            error,
            "--configuration sqs: not served by rocketmq-rust; valid choices with --impl rocketmq-rust: rocketmq"
        );
    }
}
