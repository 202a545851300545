use super::*;
use generator::Manifest;
use ledger::{BrokerProvenance, CellRun, ConfigurationRun, Ledger, Status};

fn spec(text: &str) -> Result<Spec, String> {
    text.parse()
}

#[test]
fn a_shard_is_k_of_n_with_k_between_1_and_n() {
    assert_eq!(spec("1/2"), Ok(Spec { index: 1, count: 2 }));
    assert_eq!(spec("3/3").unwrap().file_name(), "shard-3-of-3.json");
    for bad in ["0/2", "3/2", "2", "1/0", "a/b", "1/2/3", "-1/2", ""] {
        let error = spec(bad).unwrap_err();
        assert!(error.contains("valid form: K/N with 1 <= K <= N (e.g. 1/4)"), "{bad}: {error}");
    }
}

fn weights_of(list: &[(&str, u64)]) -> BTreeMap<String, Duration> {
    list.iter().map(|(name, secs)| (name.to_string(), Duration::from_secs(*secs))).collect()
}

#[test]
fn the_plan_is_greedy_longest_first_with_ties_by_name_and_lowest_shard() {
    let weights = weights_of(&[("e", 1), ("d", 5), ("c", 5), ("b", 8), ("a", 10)]);
    // a -> 1 (10); b -> 2 (8); c before d (tie by name) -> 2 (13); d -> 1 (15); e -> 2 (14).
    assert_eq!(plan(&weights, 2), [vec!["a", "d"], vec!["b", "c", "e"]]);
    assert_eq!(plan(&weights, 1), [vec!["a", "b", "c", "d", "e"]]);
    // More shards than configurations: the last are empty, never an error.
    let plan = plan(&weights_of(&[("memory", 5)]), 3);
    assert_eq!(plan, [vec!["memory".to_owned()], vec![], vec![]]);
}

fn cell_run(cell: &str, variant: &str, duration_ms: u64) -> CellRun {
    CellRun { cell: cell.into(), variant: variant.into(), result: CellRun::PASSED.into(), duration_ms }
}

#[test]
fn a_configuration_weighs_its_newest_timed_run_or_the_default() {
    let old = RunRecord {
        cells: vec![cell_run("sqs/FR-2", "reactor", 9_000), cell_run("sns/FR-2", "reactor", 1)],
        ..RunRecord::default()
    };
    let new = RunRecord {
        cells: vec![cell_run("sqs/FR-2", "reactor", 1_000), cell_run("sqs/FR-3", "proactor", 2_500)],
        ..RunRecord::default()
    };
    let weights = weights(&[old, new, RunRecord::default()], &["sqs", "sns", "gcp-pull"]);
    assert_eq!(weights["sqs"], Duration::from_millis(3_500), "the newest record with sqs cells, summed");
    assert_eq!(weights["sns"], Duration::from_millis(1), "an older record when no newer one has it");
    assert_eq!(weights["gcp-pull"], DEFAULT_WEIGHT);
}

fn manifest() -> Manifest {
    let root = crate::root();
    Manifest::load(&root.join(generator::MANIFEST), &root.join("templates")).unwrap()
}

/// A scratch ledger folder holding copies of the project's cells.tsv and runs.jsonl.
fn scratch() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for file in ["cells.tsv", "runs.jsonl"] {
        std::fs::copy(crate::root().join("ledger").join(file), dir.path().join(file)).unwrap();
    }
    dir
}

const CONFIGURATIONS: [&str; 4] = ["memory", "sns", "sqs", "sqs-fifo"];

fn broker(transport: &str) -> BrokerProvenance {
    BrokerProvenance {
        transport: transport.into(),
        source: "local".into(),
        implementation: format!("{transport}-impl"),
        version: "1".into(),
    }
}

/// Fabricated results for `configurations`: Pass and Fixed cells pass, Deferred cells fail, except
/// sns/FR-9, which passes (and so becomes Fixed); with the run record an unsharded run of them
/// would write.
fn fabricated(
    ledger: &Ledger,
    manifest: &Manifest,
    configurations: &[&str],
    date: &str,
) -> (Vec<CellResult>, RunRecord) {
    let mut results = Vec::new();
    let mut cells = Vec::new();
    let mut totals = Vec::new();
    let now_fixed: CellId = "sns/FR-9".parse().unwrap();
    for configuration in configurations {
        for variant in ["proactor", "reactor"] {
            totals.push(ConfigurationRun {
                configuration: configuration.to_string(),
                variant: variant.into(),
                passed: 0,
                failed: 0,
                skipped: 0,
                wall_ms: 12_345,
                flakes: Vec::new(),
            });
        }
        for behaviour in manifest.behaviour_ids() {
            let cell = CellId::new(*configuration, behaviour);
            let deferred = matches!(ledger.get(&cell), Some(Status::Deferred { .. }));
            let passes = !deferred || cell == now_fixed;
            let result = if passes { VariantResult::Passed } else { VariantResult::Failed };
            for (index, variant) in ["proactor", "reactor"].into_iter().enumerate() {
                let total =
                    totals.iter_mut().find(|t| t.configuration == *configuration && t.variant == variant).unwrap();
                if passes {
                    total.passed += 1;
                } else {
                    total.failed += 1;
                }
                let outcome = if passes { CellRun::PASSED } else { CellRun::FAILED };
                cells.push(CellRun {
                    cell: cell.to_string(),
                    variant: variant.into(),
                    result: outcome.into(),
                    duration_ms: 1_000 + behaviour.number as u64 * 10 + index as u64,
                });
            }
            results.push(CellResult { cell, reactor: result, proactor: result });
        }
    }
    cells.sort_by(|a, b| (&a.cell, &a.variant).cmp(&(&b.cell, &b.variant)));
    totals.sort_by(|a, b| (&a.configuration, &a.variant).cmp(&(&b.configuration, &b.variant)));
    let mut brokers: Vec<BrokerProvenance> = Vec::new();
    for configuration in configurations {
        let transport = manifest.configurations.iter().find(|c| c.name == *configuration).unwrap().transport.as_str();
        if !brokers.iter().any(|b| b.transport == transport) {
            brokers.push(broker(transport));
        }
    }
    let record = RunRecord {
        date: date.into(),
        commit: "abc1234".into(),
        dirty: false,
        toolchain: Some("rustc 1.95.0".into()),
        digest: Some("d1g35t".into()),
        brokers,
        configurations: totals,
        cells,
    };
    (results, record)
}

fn selection_record() -> SelectionRecord {
    SelectionRecord {
        transports: vec!["memory".into(), "sqs".into()],
        configurations: CONFIGURATIONS.iter().map(|c| c.to_string()).collect(),
        behaviours: manifest().behaviour_ids().iter().map(ToString::to_string).collect(),
        variants: vec!["reactor".into(), "proactor".into()],
        every_variant: true,
    }
}

fn shard_file(
    index: u32,
    count: u32,
    plan: &[Vec<String>],
    results: &[CellResult],
    record: Option<RunRecord>,
) -> ShardFile {
    ShardFile::new(
        Spec { index, count },
        "abc1234".into(),
        "d1g35t".into(),
        selection_record(),
        plan.to_vec(),
        results,
        record,
    )
}

fn bytes(dir: &Path, file: &str) -> Vec<u8> {
    std::fs::read(dir.join(file)).unwrap()
}

/// The acceptance test: N shards merged give the same cells.tsv, runs.jsonl and LEDGER.md, byte
/// for byte, as one unsharded run of the same results, for N = 1, 2, 3 and 5 (one shard empty).
#[test]
fn merging_the_shards_writes_what_one_unsharded_run_writes_byte_for_byte() {
    let manifest = manifest();
    let root = crate::root();
    let reference = Ledger::load(&root.join("ledger/cells.tsv")).unwrap();
    let unsharded = scratch();
    let (results, record) = fabricated(&reference, &manifest, &CONFIGURATIONS, "2026-12-01T06:00:09Z");
    let mut ledger = Ledger::load(&unsharded.path().join("cells.tsv")).unwrap();
    let applied =
        crate::record::apply(&root, &manifest, unsharded.path(), &mut ledger, &results, &record, true).unwrap();
    assert_eq!(applied.report.transitions.len(), 1, "sns/FR-9 became Fixed");

    for count in [1, 2, 3, 5] {
        let plan = plan(&weights(&[], &CONFIGURATIONS), count);
        let folders: Vec<tempfile::TempDir> = (0..count).map(|_| tempfile::tempdir().unwrap()).collect();
        for (index, configurations) in plan.iter().enumerate() {
            let mine: Vec<&str> = configurations.iter().map(String::as_str).collect();
            // The last shard that ran anything finished last: the unsharded record's date.
            let last = plan.iter().rposition(|c| !c.is_empty()).unwrap();
            let date = if index == last { "2026-12-01T06:00:09Z" } else { "2026-12-01T05:59:58Z" };
            let file = if mine.is_empty() {
                shard_file(index as u32 + 1, count, &plan, &[], None)
            } else {
                let (results, record) = fabricated(&reference, &manifest, &mine, date);
                shard_file(index as u32 + 1, count, &plan, &results, Some(record))
            };
            file.write(folders[index].path()).unwrap();
        }
        let dirs: Vec<PathBuf> = folders.iter().map(|f| f.path().to_owned()).collect();
        let merged = merge(&read_dirs(&dirs).unwrap(), &["memory", "sqs", "gcp", "rocketmq"]).unwrap();
        assert_eq!(merged.record.as_ref(), Some(&record), "{count} shards: one record, the unsharded one");
        let sharded = scratch();
        let mut ledger = Ledger::load(&sharded.path().join("cells.tsv")).unwrap();
        let record = merged.record.unwrap();
        crate::record::apply(&root, &manifest, sharded.path(), &mut ledger, &merged.results, &record, true).unwrap();
        for file in ["cells.tsv", "runs.jsonl", "LEDGER.md"] {
            assert!(bytes(sharded.path(), file) == bytes(unsharded.path(), file), "{count} shards: {file} differs");
        }
    }
}

/// Two consistent shards of memory + sqs, in memory, for the refusal tests.
fn two_shards() -> Vec<(PathBuf, ShardFile)> {
    let manifest = manifest();
    let reference = Ledger::load(&crate::root().join("ledger/cells.tsv")).unwrap();
    let plan = plan(&weights(&[], &CONFIGURATIONS), 2);
    plan.iter()
        .enumerate()
        .map(|(index, configurations)| {
            let mine: Vec<&str> = configurations.iter().map(String::as_str).collect();
            let (results, record) = fabricated(&reference, &manifest, &mine, "2026-12-01T06:00:00Z");
            let path = PathBuf::from(format!("out-{}/shard-{}-of-2.json", index + 1, index + 1));
            (path, shard_file(index as u32 + 1, 2, &plan, &results, Some(record)))
        })
        .collect()
}

fn refusal(files: &[(PathBuf, ShardFile)]) -> String {
    merge(files, &["memory", "sqs"]).unwrap_err().to_string()
}

#[test]
fn a_missing_or_doubled_shard_is_refused_naming_the_files() {
    let shards = two_shards();
    let error = refusal(&shards[..1]);
    assert_eq!(error, "missing shard(s) 2/2; have 1/2 (out-1/shard-1-of-2.json); pass the folder of every shard");
    let error = refusal(&[shards[0].clone(), shards[0].clone(), shards[1].clone()]);
    assert_eq!(error, "shard 1/2 is given twice: out-1/shard-1-of-2.json and out-1/shard-1-of-2.json");
}

#[test]
fn shards_of_different_runs_are_refused_naming_the_files() {
    let shards = two_shards();
    let with = |change: fn(&mut ShardFile)| {
        let mut second = shards[1].clone();
        change(&mut second.1);
        refusal(&[shards[0].clone(), second])
    };
    let error = with(|f| f.shard.count = 3);
    assert!(error.starts_with("out-1/shard-1-of-2.json and out-2/shard-2-of-2.json are not shards of one run: their shard counts N differ (2 vs 3)"), "{error}");
    assert!(with(|f| f.commit = "fffffff".into()).contains("their commits differ (\"abc1234\" vs \"fffffff\")"));
    assert!(with(|f| f.digest = "other".into()).contains("their source digests differ"));
    assert!(with(|f| f.selection.behaviours.pop().map(drop).unwrap_or_default()).contains("their selections differ"));
    assert!(with(|f| f.plan.swap(0, 1)).contains("their plans"));
}

#[test]
fn a_cell_in_two_shards_is_refused_naming_both_files() {
    let mut shards = two_shards();
    let stolen = shards[0].1.cells[0].clone();
    shards[1].1.cells.push(stolen.clone());
    let error = refusal(&shards);
    assert_eq!(
        error,
        format!("cell {} is in two shards: out-1/shard-1-of-2.json and out-2/shard-2-of-2.json", stolen.cell)
    );
}

#[test]
fn a_folder_without_shard_files_is_refused_naming_it() {
    let empty = tempfile::tempdir().unwrap();
    let error = read_dirs(&[empty.path().to_owned()]).unwrap_err().to_string();
    assert!(error.contains("no shard-K-of-N.json file"), "{error}");
    assert!(error.starts_with(&empty.path().display().to_string()), "{error}");
}
