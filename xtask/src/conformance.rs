//! `cargo xtask conformance`: build each selected transport's test binary, run every cell
//! (ignored ones too, so a Deferred cell that now passes is seen), map results to ledger cells,
//! apply the update rules, record the run, and regenerate so Fixed cells lose their ignore.
//! With `--shard K/N --out DIR` it runs only its shard's configurations and writes their results
//! to DIR for `cargo xtask ledger merge` instead (see `shard`).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use generator::Manifest;
use ledger::{CellId, CellResult, Ledger, RunRecord, Status, VariantResult};

use crate::build::{build_test_binaries, Features, Lints};
use crate::evidence::{git_commit, run_record};
use crate::libtest::TestResult;
use crate::root;
use crate::runner::{run_all, BinaryRun, Built, Finished, Limits, RunWith};
use crate::selection::{self, Selection};
use crate::test_names::{TestCell, TestNames};
use contract::{BrokerSource, Implementation};

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
    /// Run at most N transports' test binaries (each with its own broker) at the same time.
    /// Default: all of them, so a run takes about its slowest binary
    #[arg(long, value_name = "N")]
    jobs: Option<std::num::NonZeroUsize>,
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

fn variant_result(results: &[&Finished], names: &TestNames, variant: &str) -> VariantResult {
    let mut found = results.iter().filter(|f| names.cell(&f.name).is_some_and(|test| test.variant == variant));
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
    let names = TestNames::new(&manifest);
    preflight(args, &ledger_dir)?;
    // The binaries are built from generated/: stale code would test what the templates no
    // longer say.
    generator::generate(&root, generator::Mode::Check).context("generated/ must be fresh before a conformance run")?;
    let every_variant = selection.every_variant(&manifest);
    let mode = match (args.repeat, second, args.shard) {
        (rounds, _, _) if rounds > 1 => Mode::Repeat,
        (_, Some(implementation), _) => Mode::Once(Verdicts::Fidelity(implementation)),
        (_, _, Some(spec)) => Mode::Once(Verdicts::Shard(slice(spec, &ledger_dir, &mut selection, every_variant)?)),
        _ if args.check => Mode::Once(Verdicts::Check),
        _ => Mode::Once(Verdicts::Record),
    };
    if let Mode::Once(Verdicts::Shard(shard)) = &mode {
        if selection.configurations.is_empty() {
            let path = shard.write(&[], None, args.out.as_deref().expect("clap: --shard requires --out"))?;
            eprintln!("shard {}: its slice is empty (no configuration assigned); wrote {}", shard.spec, path.display());
            return Ok(());
        }
    }

    // Build everything first, so the progress count covers the whole matrix.
    eprintln!("brokers: {} (each transport says below which source it used)", brokers.name());
    if brokers.may_use_local() {
        for (transport, _) in &selection.transports {
            crate::brokers::install_implementation(transport, second)?;
        }
    }
    let transports: Vec<&str> = selection.transports.iter().map(|(transport, _)| *transport).collect();
    eprintln!("building the conformance tests of {}", transports.join(", "));
    let mut executables = build_test_binaries(
        &root,
        None,
        &selection.transports,
        brokers,
        Features::for_run(&selection.transports),
        Lints::AsCalled,
    )?;
    let mut binaries = Vec::new();
    for (transport, _) in &selection.transports {
        let executable = executables.remove(*transport).expect("build_test_binaries checks every transport");
        binaries.push((*transport, executable, selection.filters(&manifest, &names, transport)));
    }
    let limits = Limits {
        binary: Duration::from_secs(args.binary_timeout),
        cell: Duration::from_secs(args.cell_timeout),
        at_once: args.jobs.map_or(usize::MAX, std::num::NonZeroUsize::get),
    };
    // What the cells are about to exercise: evidence is tied to these sources.
    let digest = ledger::source_digest(&root)?;
    let run_with = RunWith { brokers, second };
    let verdicts = match mode {
        Mode::Repeat => return repeat(&root, args, run_with, &binaries, &selection, &names, limits, &ledger),
        Mode::Once(verdicts) => verdicts,
    };
    let runs = run_all(&root, run_with, &binaries, &selection, &names, limits, Some(&ledger))?;
    // Every binary completed: only now may the ledger (or the fidelity table) change.
    let (results, timings) = cell_results(&runs, &selection, &names);
    let record = run_record(&runs, &names, digest);
    // Outputs first, the ledger last: an output that cannot be written leaves the ledger as it was.
    if let (Some(path), false) = (&args.junit, matches!(verdicts, Verdicts::Fidelity(_))) {
        crate::junit::write(path, &runs, &names)?;
    }
    let applied = match &verdicts {
        Verdicts::Fidelity(implementation) => {
            let fidelity = crate::fidelity::FidelityRun {
                ledger_dir: &ledger_dir,
                implementation: *implementation,
                results: &results,
                runs: &runs,
                names: &names,
                not_run: not_served(&manifest, *implementation, &args.transports),
                behaviours: &selection.behaviours,
                ledger: &ledger,
            };
            fidelity.record(&record)?;
            print_summary(&record, &ledger::UpdateReport::default(), &timings, &runs);
            return Ok(());
        }
        Verdicts::Check => crate::record::check(&ledger, &results, every_variant),
        // A shard leaves the ledger alone; it says what the merge will find.
        Verdicts::Shard(shard) => {
            let path = shard.write(&results, Some(record.clone()), args.out.as_deref().expect("clap"))?;
            eprintln!("shard {}: wrote {} (apply with cargo xtask ledger merge)", shard.spec, path.display());
            crate::record::preview(&ledger, &results, every_variant)
        }
        Verdicts::Record => {
            crate::record::apply(&root, &manifest, &ledger_dir, &mut ledger, &results, &record, every_variant)?
        }
    };
    print_summary(&record, &applied.report, &timings, &runs);
    if !applied.problems.is_empty() {
        bail!("{}", applied.problems.join("\n"));
    }
    Ok(())
}

/// Every file a run will write, checked before the build: a run log that cannot take a record
/// (torn, malformed), or an output that cannot be written, is found before the cells run,
/// never after the ledger changed.
fn preflight(args: &Args, ledger_dir: &Path) -> Result<()> {
    let runs = ledger_dir.join("runs.jsonl");
    if runs.exists() {
        ledger::read_runs(&runs)?;
    }
    let writable = |flag: &str, dir: &Path| {
        tempfile::NamedTempFile::new_in(dir).map(drop).with_context(|| {
            format!("{flag}: cannot write into {}; give a folder that exists and is writable", dir.display())
        })
    };
    if let Some(path) = &args.junit {
        if path.is_dir() {
            bail!("--junit {}: a folder; give the path of the XML file to write", path.display());
        }
        let parent = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
        writable("--junit", parent)?;
    }
    if let Some(out) = &args.out {
        std::fs::create_dir_all(out).with_context(|| format!("--out {}: cannot create the folder", out.display()))?;
        writable("--out", out)?;
    }
    Ok(())
}

/// What a run does, resolved once from the flags (clap keeps apart the ones that exclude each
/// other: --check, --shard, --repeat, --impl).
enum Mode {
    /// Run the selection N times and print each cell's pass rate; nothing written (`--repeat N`).
    Repeat,
    /// Run it once; its verdicts go where this says.
    Once(Verdicts),
}

/// Where a single run's verdicts go.
enum Verdicts {
    /// Into the ledger (the default).
    Record,
    /// Compared with the ledger; nothing written (`--check`).
    Check,
    /// Into this slice's file for `ledger merge`, leaving the ledger alone (`--shard K/N`).
    Shard(Slice),
    /// A second implementation's, into the fidelity table, not the ledger (`--impl`).
    Fidelity(Implementation),
}

/// Each selected cell's result over both variants, and its slowest variant's time.
fn cell_results(
    runs: &[BinaryRun],
    selection: &Selection,
    names: &TestNames,
) -> (Vec<CellResult>, BTreeMap<CellId, Duration>) {
    let mut results = Vec::new();
    let mut timings: BTreeMap<CellId, Duration> = BTreeMap::new();
    for run in runs {
        for configuration in &run.configurations {
            for &behaviour in &selection.behaviours {
                let cell = CellId::new(configuration.clone(), behaviour);
                let mine: Vec<&Finished> =
                    run.finished.iter().filter(|f| names.cell(&f.name).is_some_and(|test| test.cell == cell)).collect();
                if let Some(slowest) = mine.iter().map(|f| f.elapsed).max() {
                    timings.insert(cell.clone(), slowest);
                }
                results.push(CellResult {
                    reactor: variant_result(&mine, names, "reactor"),
                    proactor: variant_result(&mine, names, "proactor"),
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

/// `--repeat N`: the selected tests N times over, and each cell's pass rate. Nothing is rerun
/// (the point is to see the raw rate) and the ledger is not touched.
#[allow(clippy::too_many_arguments)]
fn repeat(
    root: &Path,
    args: &Args,
    run_with: RunWith,
    binaries: &[Built],
    selection: &Selection,
    names: &TestNames,
    limits: Limits,
    ledger: &Ledger,
) -> Result<()> {
    let mut passes: BTreeMap<(CellId, String), (u32, u32)> = BTreeMap::new();
    let mut failures = Vec::new();
    for round in 1..=args.repeat {
        eprintln!("round {round} of {}", args.repeat);
        for run in run_all(root, run_with, binaries, selection, names, limits, None)? {
            for test in &run.finished {
                let Some(TestCell { cell, variant }) = names.cell(&test.name) else { continue };
                let passed = test.result == TestResult::Ok;
                if !passed && !matches!(ledger.get(&cell), Some(Status::Deferred { .. })) {
                    let message = run.failures.get(&test.name).map(|text| crate::runner::panic_message(text));
                    failures.push(format!("{cell} ({variant}), round {round}: {}", message.unwrap_or_default()));
                }
                let tally = passes.entry((cell, variant)).or_default();
                tally.0 += u32::from(passed);
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
    // What each failure said: a flake is traced from its message, not from its rate.
    for failure in &failures {
        eprintln!("failed: {failure}");
    }
    eprintln!("{} cell variants; {unstable} not Deferred and below 100%", passes.len());
    Ok(())
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
    fn an_unknown_implementation_is_refused_naming_the_choices() {
        let error = Command::try_parse_from(["conformance", "--impl", "ElasticMQ"]).err().expect("refused").to_string();
        assert!(error.contains("invalid value 'ElasticMQ' for '--impl <IMPLEMENTATION>'"), "{error}");
        assert!(
            error.contains("[possible values: moto, elasticmq, apache, rocketmq-rust, rabbitmq, rabbitmq-4.0.5, redis, redis-8.0.2, mosquitto, mosquitto-2.0.21, postgres, postgres-17, kafka, kafka-4.4.0]"),
            "{error}"
        );
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
