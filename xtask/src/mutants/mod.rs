//! `cargo xtask mutants`: apply each catalogued contract defect, alone, to a scratch copy of the
//! workspace, run the chosen transports' conformance cells against it, and check that every cell
//! the catalogue names turns red. Defects are compiled into one build behind switches
//! (`schemata`), each switched on alone for its run; one that cannot be switched is built alone.
//! The healthy code runs first: only a cell that passes healthy can count as a kill. The kill matrix goes to `ledger/mutants.tsv` and `ledger/MUTANTS.md`; a
//! defect that survives where the catalogue gives no reason fails the run.

mod catalogue;
mod matrix;
mod schemata;
mod scratch;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{bail, Context, Result};
use generator::Manifest;
use ledger::Behaviour;

use contract::BrokerSource;

use crate::libtest::TestResult;
use crate::root;
use crate::test_names::{TestCell, TestNames};
use crate::{build, conformance, evidence, runner};
use catalogue::{Catalogue, Expectation};
use matrix::{Outcome, Verdict};
use schemata::Schemata;
use scratch::Scratch;

#[derive(clap::Args)]
pub struct Args {
    /// A transport to run the mutants on (repeatable; default: memory). Valid choices are the
    /// manifest's transports
    #[arg(long = "transport", value_name = "TRANSPORT")]
    transports: Vec<String>,
    /// Only this mutant (repeatable; default: every mutant of mutants/catalogue.yaml)
    #[arg(long = "mutant", value_name = "ID")]
    mutants: Vec<String>,
    /// Where brokers come from (auto, env, containers, local), passed on as CONFORMANCE_BROKERS
    #[arg(long, value_enum, value_name = "SOURCE", default_value_t = BrokerSource::Auto)]
    brokers: BrokerSource,
    /// How many test binaries (each with its own broker) run at the same time: the transports of
    /// one mutant, and the next switched mutants' while one waits
    #[arg(long, value_name = "N", default_value_t = DEFAULT_JOBS)]
    jobs: std::num::NonZeroUsize,
}

/// Three binaries at once: on 2 cores the cells mostly wait (a defect that keeps a message
/// makes its cells wait out their 60 s bound), and the kill matrix came out the same as one
/// binary at a time (BENCHMARKS.md, "Mutation run").
const DEFAULT_JOBS: std::num::NonZeroUsize = std::num::NonZeroUsize::new(3).expect("not zero");

/// (configuration, behaviour number) -> passed in both pump variants.
type CellPasses = BTreeMap<(String, Behaviour), bool>;

struct Transport {
    name: String,
    feature: String,
    configurations: Vec<String>,
}

/// Every selected transport's test binary, by transport.
type Executables = BTreeMap<String, PathBuf>;

/// Builds every selected transport's test binary in the scratch copy as it is now, in one cargo
/// call, into the project's target folder (the scratch copy is a workspace of its own path).
fn build(scratch: &Scratch, transports: &[&Transport], label: &str, brokers: BrokerSource) -> Result<Executables> {
    eprintln!(
        "mutants: {label}: building {}",
        transports.iter().map(|t| t.name.as_str()).collect::<Vec<_>>().join(", ")
    );
    let selected: Vec<(&str, &str)> = transports.iter().map(|t| (t.name.as_str(), t.feature.as_str())).collect();
    // The selected features only: the scratch copy is a workspace of its own path, so nothing of
    // the README's build is reused but the dependencies.
    build::build_test_binaries(
        &scratch.root,
        Some(&root().join("target")),
        &selected,
        brokers,
        build::Features::Selected,
        build::Lints::Off,
    )
    .with_context(|| format!("{label}: the scratch workspace does not build; a mutant must compile"))
}

/// Builds the scratch copy with every switchable mutant of `mutants` behind its switch. A
/// switch that does not compile sends the mutants switched in the files the errors name (all of
/// them when the errors name none) to builds of their own, and the rest is built again.
fn build_schemata(
    root: &Path,
    scratch: &mut Scratch,
    mutants: &[&catalogue::Mutant],
    transports: &[&Transport],
    brokers: BrokerSource,
) -> Result<(Schemata, Executables)> {
    let mut excluded = BTreeMap::new();
    loop {
        let schemata = schemata::render(root, mutants, &excluded)?;
        scratch.apply(&schemata.files)?;
        let error = match build(scratch, transports, "schemata", brokers) {
            Ok(executables) => return Ok((schemata, executables)),
            Err(error) => error,
        };
        let failed = match error.downcast_ref::<build::BuildFailed>() {
            Some(failed) if !schemata.switched.is_empty() => failed,
            _ => return Err(error),
        };
        let in_error =
            |files: &BTreeSet<String>| files.iter().any(|f| failed.files.iter().any(|e| e.ends_with(f.as_str())));
        let mut broken: Vec<&String> =
            schemata.switched.iter().filter(|(_, files)| in_error(files)).map(|(id, _)| id).collect();
        if broken.is_empty() {
            broken = schemata.switched.keys().collect();
        }
        for id in broken {
            excluded.insert(id.clone(), "its switch did not compile".to_owned());
        }
    }
}

/// What every measurement of one mutation run shares.
struct Bench<'a> {
    scratch: &'a Scratch,
    manifest: &'a Manifest,
    brokers: BrokerSource,
}

/// One measurement: `mutant` switched on (none: the code as built) in the cells of `transports`.
struct Job<'a> {
    label: &'a str,
    mutant: Option<&'a str>,
    transports: Vec<&'a Transport>,
    limits: runner::Limits,
}

/// Runs every job's cells on `executables`, at most `at_once` test binaries at a time, and
/// returns each job's cell passes, in the jobs' order.
fn measure(bench: &Bench, executables: &Executables, jobs: &[Job], at_once: usize) -> Vec<Result<CellPasses>> {
    let runs: Vec<(usize, &Transport)> =
        jobs.iter().enumerate().flat_map(|(index, job)| job.transports.iter().map(move |t| (index, *t))).collect();
    let measured =
        runner::at_once(&runs, at_once, |(index, transport)| run_cells(bench, executables, &jobs[*index], transport));
    let mut passes: Vec<Result<CellPasses>> = jobs.iter().map(|_| Ok(CellPasses::new())).collect();
    for ((index, _), result) in runs.iter().zip(measured) {
        match (&mut passes[*index], result) {
            (Ok(all), Ok(mine)) => all.extend(mine),
            (slot @ Ok(_), Err(error)) => *slot = Err(error),
            (Err(_), _) => {}
        }
    }
    passes
}

/// One transport's cells for `job`: passed in both pump variants, by cell.
fn run_cells(bench: &Bench, executables: &Executables, job: &Job, transport: &Transport) -> Result<CellPasses> {
    let Bench { scratch, manifest, brokers } = *bench;
    let executable = executables
        .get(&transport.name)
        .with_context(|| format!("cargo built no {} test executable", transport.name))?;
    let total = runner::list_tests(executable, &[])?.len();
    let call = runner::BinaryCall {
        workspace: &scratch.root,
        transport: &transport.name,
        brokers,
        // Defects are judged against the reference implementation, as the ledger is.
        second: None,
        executable,
        filters: Vec::new(),
        limits: job.limits,
        mutant: job.mutant,
    };
    let runner::BinaryOutcome { finished, wall, .. } = runner::run_binary(&call, &runner::Progress::new(total))
        .with_context(|| format!("{}: the {} cells did not complete", job.label, transport.name))?;
    eprintln!("mutants: {}: {} ran in {:.1} s", job.label, transport.name, wall.as_secs_f64());
    let names = TestNames::new(manifest);
    let mut passes = CellPasses::new();
    for test in &finished {
        let Some(TestCell { cell, .. }) = names.cell(&test.name) else { continue };
        let passed = passes.entry((cell.configuration, cell.behaviour)).or_insert(true);
        *passed &= test.result == TestResult::Ok;
    }
    Ok(passes)
}

fn outcome(
    expectation: Expectation,
    red: Vec<Behaviour>,
    healthy: &BTreeSet<Behaviour>,
    commit: &str,
) -> Option<Outcome> {
    let (verdict, note) = match expectation {
        Expectation::NotApplicable => return None,
        Expectation::Survives(reason) => (Verdict::Excused, reason),
        Expectation::Kills(expected) => {
            let live: BTreeSet<Behaviour> = expected.intersection(healthy).copied().collect();
            let green: Vec<String> = live.iter().filter(|n| !red.contains(n)).map(ToString::to_string).collect();
            if live.is_empty() {
                (Verdict::Survived, "none of the expected cells passes on the healthy workspace".to_owned())
            } else if green.is_empty() {
                (Verdict::Killed, String::new())
            } else {
                (Verdict::Survived, format!("stayed green: {}", green.join(", ")))
            }
        }
    };
    Some(Outcome { verdict, red, note, commit: commit.to_owned() })
}

/// Every transport of the manifest with its configurations: the kill matrix's columns.
fn transports(manifest: &Manifest) -> Vec<Transport> {
    manifest
        .transports()
        .into_iter()
        .map(|(name, feature)| Transport {
            name: name.to_owned(),
            feature: feature.to_owned(),
            configurations: manifest
                .configurations
                .iter()
                .filter(|c| c.transport == name)
                .map(|c| c.name.clone())
                .collect(),
        })
        .collect()
}

fn write_matrix(root: &Path, catalogue: &Catalogue, transports: &[Transport], results: &matrix::Results) -> Result<()> {
    let columns: Vec<(String, Vec<String>)> =
        transports.iter().map(|t| (t.name.clone(), t.configurations.clone())).collect();
    ledger::file::write_atomically(&root.join(matrix::MATRIX), &matrix::render(&catalogue.mutants, &columns, results))?;
    Ok(())
}

/// Renders `ledger/MUTANTS.md` again from `ledger/mutants.tsv` and the catalogue, without a run
/// (`cargo xtask ledger render`): after merging two branches' kill matrices, say.
pub fn render_matrix(root: &Path, manifest: &Manifest) -> Result<()> {
    let catalogue = Catalogue::load(root, manifest)?;
    let results = matrix::load(&root.join(matrix::RESULTS))?;
    write_matrix(root, &catalogue, &transports(manifest), &results)
}

pub fn run(args: &Args) -> Result<()> {
    let started = Instant::now();
    let root = root();
    let manifest = Manifest::load(&root.join(generator::MANIFEST), &root.join("templates"))?;
    let catalogue = Catalogue::load(&root, &manifest)?;
    let selected = catalogue.select(&args.mutants)?;
    let all_transports = transports(&manifest);
    let chosen: Vec<&Transport> = conformance::selected_transports(&manifest, &args.transports)?
        .into_iter()
        .map(|(name, _)| all_transports.iter().find(|t| t.name == name).expect("a manifest transport"))
        .collect();
    if args.brokers.may_use_local() {
        for transport in &chosen {
            crate::brokers::install(&transport.name)?;
        }
    }

    let names: Vec<&str> = chosen.iter().map(|t| t.name.as_str()).collect();
    let mut scratch = Scratch::sync(&root, &names)?;
    let (schemata, executables) = build_schemata(&root, &mut scratch, &selected, &chosen, args.brokers)?;
    eprintln!("mutants: {} mutant(s) switched into one build", schemata.switched.len());
    for (id, why) in &schemata.separate {
        eprintln!("mutants: {id} is built alone: {why}");
    }
    let bench = Bench { scratch: &scratch, manifest: &manifest, brokers: args.brokers };
    let at_once = args.jobs.get();
    let healthy = Job { label: "healthy", mutant: None, transports: chosen.clone(), limits: runner::Limits::DEFAULT };
    let healthy = measure(&bench, &executables, &[healthy], at_once).remove(0)?;
    let commit = evidence::git_commit();
    let results_path = root.join(matrix::RESULTS);
    let mut results = matrix::load(&results_path)?;
    results.retain(|(mutant, _), _| catalogue.mutants.iter().any(|m| &m.id == mutant));
    let mut survivors = Vec::new();
    let touched = |mutant: &catalogue::Mutant| -> Vec<&Transport> {
        let applies = |t: &Transport| {
            t.configurations.iter().any(|c| mutant.expectation(&t.name, c) != Expectation::NotApplicable)
        };
        chosen.iter().copied().filter(|t| applies(t)).collect()
    };
    let mut record = |mutant: &catalogue::Mutant, passes: &CellPasses| -> Result<()> {
        for transport in touched(mutant) {
            for configuration in &transport.configurations {
                let was_green = |n: &Behaviour| healthy.get(&(configuration.clone(), *n)) == Some(&true);
                let healthy_cells: BTreeSet<Behaviour> =
                    manifest.behaviour_ids().into_iter().filter(was_green).collect();
                let red: Vec<Behaviour> = healthy_cells
                    .iter()
                    .copied()
                    .filter(|n| passes.get(&(configuration.clone(), *n)) != Some(&true))
                    .collect();
                let key = (mutant.id.clone(), configuration.clone());
                match outcome(mutant.expectation(&transport.name, configuration), red, &healthy_cells, &commit) {
                    Some(result) => {
                        eprintln!("mutants: {} on {configuration}: {:?} {}", mutant.id, result.verdict, result.note);
                        if result.verdict == Verdict::Survived {
                            survivors.push(format!("{} survived on {configuration}: {}", mutant.id, result.note));
                        }
                        results.insert(key, result);
                    }
                    None => {
                        results.remove(&key);
                    }
                }
            }
        }
        matrix::save(&results_path, &results)
    };
    // The switched mutants, some at once on the one build; each measured alone on its cells.
    let (switched, alone): (Vec<&catalogue::Mutant>, Vec<&catalogue::Mutant>) = selected
        .iter()
        .copied()
        .filter(|m| !touched(m).is_empty())
        .partition(|m| schemata.switched.contains_key(&m.id));
    let jobs: Vec<Job> = switched
        .iter()
        .map(|m| Job { label: &m.id, mutant: Some(&m.id), transports: touched(m), limits: m.limits() })
        .collect();
    for (mutant, passes) in switched.iter().zip(measure(&bench, &executables, &jobs, at_once)) {
        record(mutant, &passes?)?;
    }
    for mutant in alone {
        let mutant_started = Instant::now();
        let id = mutant.id.as_str();
        scratch.apply(&mutant.patched(&root)?)?;
        let built = build(&scratch, &touched(mutant), id, args.brokers)?;
        let bench = Bench { scratch: &scratch, manifest: &manifest, brokers: args.brokers };
        let job = Job { label: id, mutant: None, transports: touched(mutant), limits: mutant.limits() };
        record(mutant, &measure(&bench, &built, &[job], at_once).remove(0)?)?;
        eprintln!("mutants: {id} done in {:.1} s", mutant_started.elapsed().as_secs_f64());
    }
    scratch.restore()?;
    write_matrix(&root, &catalogue, &all_transports, &results)?;
    eprintln!(
        "mutants: {} mutant(s) on {} in {:.1} s; the kill matrix is {}",
        selected.len(),
        chosen.iter().map(|t| t.name.as_str()).collect::<Vec<_>>().join(", "),
        started.elapsed().as_secs_f64(),
        matrix::MATRIX
    );
    if !survivors.is_empty() {
        bail!("{}", survivors.join("\n"));
    }
    Ok(())
}
