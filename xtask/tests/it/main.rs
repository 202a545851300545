//! End-to-end proofs that the harness can fail: run the real `cargo xtask conformance` on the
//! in-memory transport against a scratch ledger, with and without a deliberate fault; and
//! `ledger diff` against a scratch git repository (`ledger_diff`).

mod ledger_diff;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

/// A scratch ledger folder holding a copy of the project's cells.
fn scratch_ledger() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(root().join("ledger/cells.tsv"), dir.path().join("cells.tsv")).unwrap();
    dir
}

fn conformance(ledger: &Path, fault: Option<&str>) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_xtask"));
    command.args(["conformance", "--ledger-dir"]).arg(ledger);
    match fault {
        Some(fault) => command.env("CONFORMANCE_FAULT", fault),
        None => command.env_remove("CONFORMANCE_FAULT"),
    };
    command.output().unwrap()
}

fn row(ledger: &Path, cell: &str) -> String {
    let text = std::fs::read_to_string(ledger.join("cells.tsv")).unwrap();
    let (configuration, behaviour) = cell.split_once('/').unwrap();
    let prefix = format!("{configuration}\t{behaviour}\t");
    text.lines().find(|line| line.starts_with(&prefix)).unwrap_or_else(|| panic!("no row for {cell}")).to_owned()
}

#[test]
fn a_requeue_that_forgets_the_count_turns_fr23_red_and_names_the_regression() {
    let ledger = scratch_ledger();
    assert_eq!(row(ledger.path(), "memory/FR-23"), "memory\tFR-23\tPass", "the project's ledger must start green");

    let output = conformance(ledger.path(), Some("stale-requeue"));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "the run must fail:\n{stderr}");
    assert!(stderr.contains("regression: memory/FR-23 was Pass and now fails"), "{stderr}");
    assert!(stderr.contains("a budget of R = 3 rejects by dispatch 3"), "the failure says why: {stderr}");
    // The requeue cells see it too: a republishing transport must present the count it was
    // given. Every other cell still passes.
    for cell in ["memory/FR-2", "memory/FR-15", "memory/FR-22", "memory/DC-2", "memory/DC-3", "memory/DC-6"] {
        assert!(stderr.contains(&format!("regression: {cell} was Pass and now fails")), "{stderr}");
    }
    assert!(stderr.contains("the redelivery presents the handled count the channel was given"), "{stderr}");
    assert_eq!(stderr.matches("regression:").count(), 7, "{stderr}");
    // A regression is reported, never written down as a deferral.
    assert_eq!(row(ledger.path(), "memory/FR-23"), "memory\tFR-23\tPass");
    let runs = std::fs::read_to_string(ledger.path().join("runs.jsonl")).unwrap();
    // Per variant: the 7 regressions and the 2 Deferred cells (DC-1, DC-4) that fail as expected.
    assert!(runs.contains("\"failed\":9"), "the run record counts the failures: {runs}");
}

#[test]
fn a_healthy_run_keeps_every_memory_cell_pass_and_renders_the_matrix() {
    let ledger = scratch_ledger();
    let output = conformance(ledger.path(), None);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    assert!(stderr.contains("[ 36/36]"), "progress covers the matrix: {stderr}");
    let markdown = std::fs::read_to_string(ledger.path().join("LEDGER.md")).unwrap();
    let memory_row = markdown.lines().find(|line| line.starts_with("| memory |")).unwrap();
    // 18 behaviours: DC-1 and DC-4 are Deferred on memory (no broker counter, an in-process broker).
    assert_eq!(memory_row.matches("| Pass").count(), 16, "{memory_row}");
    // The picture is written beside the page, as `cargo xtask generate` writes it.
    let svg = std::fs::read_to_string(ledger.path().join("LEDGER.svg")).unwrap();
    assert!(svg.contains("<title>memory/FR-23: Pass</title>"), "{svg}");
}

#[test]
fn an_unknown_transport_is_refused_with_the_valid_choices() {
    let ledger = scratch_ledger();
    let output = Command::new(env!("CARGO_BIN_EXE_xtask"))
        .args(["conformance", "--transport", "pulsar", "--ledger-dir"])
        .arg(ledger.path())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success());
    assert!(stderr.contains("--transport pulsar: not in templates/manifest.yaml; valid choices: memory"), "{stderr}");
}

fn conformance_with(ledger: &Path, args: &[&str]) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_xtask"));
    command.args(["conformance", "--ledger-dir"]).arg(ledger).args(args).env_remove("CONFORMANCE_FAULT");
    command.output().unwrap()
}

#[test]
fn a_run_narrowed_to_one_cell_runs_exactly_that_cell_and_changes_no_other_row() {
    let ledger = scratch_ledger();
    let before = std::fs::read(ledger.path().join("cells.tsv")).unwrap();
    let output = conformance_with(
        ledger.path(),
        &["--configuration", "memory", "--behaviour", "FR-23", "--variant", "proactor"],
    );
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    assert!(stderr.contains("[  1/1] memory::proactor::fr_23::"), "exactly one test ran: {stderr}");
    assert_eq!(std::fs::read(ledger.path().join("cells.tsv")).unwrap(), before, "no row changed");
    let runs = std::fs::read_to_string(ledger.path().join("runs.jsonl")).unwrap();
    assert!(runs.contains("\"configuration\":\"memory\",\"variant\":\"proactor\",\"passed\":1,"), "{runs}");
    assert!(!runs.contains("\"variant\":\"reactor\""), "the reactor variant did not run: {runs}");
}

/// The worst moment for a page: the cells ran, the new statuses and their run record are ready,
/// and a page cannot be written (a folder where LEDGER.svg goes). The statuses, the record and
/// the pages are staged together, so none of them changes.
#[test]
fn a_page_that_cannot_be_written_after_the_cells_ran_leaves_the_whole_ledger_as_it_was() {
    let ledger = scratch_ledger();
    let cells_path = ledger.path().join("cells.tsv");
    // A missing row: the run would add memory/FR-23 as Pass.
    let cells: String = std::fs::read_to_string(&cells_path)
        .unwrap()
        .lines()
        .filter(|line| !line.starts_with("memory\tFR-23\t"))
        .map(|line| format!("{line}\n"))
        .collect();
    std::fs::write(&cells_path, &cells).unwrap();
    std::fs::create_dir(ledger.path().join("LEDGER.svg")).unwrap();
    let output = conformance_with(ledger.path(), &["--configuration", "memory", "--behaviour", "FR-23"]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success() && stderr.contains("LEDGER.svg"), "the run fails naming the page: {stderr}");
    assert!(stderr.contains("[  2/2] memory::"), "the cells ran before the write: {stderr}");
    assert!(std::fs::read_to_string(&cells_path).unwrap() == cells, "no status changed");
    assert!(!ledger.path().join("runs.jsonl").exists(), "no run record without its pages");
    assert!(!ledger.path().join("LEDGER.md").exists(), "no page without the others");
}

/// `cargo xtask test` runs the cells as `--check`: a result the ledger does not hold fails the
/// run, and nothing is written either way (a check's findings would otherwise be lost).
#[test]
fn a_check_run_writes_nothing_and_fails_on_any_change_it_would_make() {
    let ledger = scratch_ledger();
    let cells = ledger.path().join("cells.tsv");
    let text = std::fs::read_to_string(&cells).unwrap().replace("memory\tFR-23\tPass", "memory\tFR-23\tUnknown");
    std::fs::write(&cells, &text).unwrap();
    let narrowed = ["--check", "--configuration", "memory", "--behaviour", "FR-23", "--behaviour", "FR-22"];
    let output = conformance_with(ledger.path(), &narrowed);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        !output.status.success(),
        "a change left unrecorded fails the check:
{stderr}"
    );
    assert!(stderr.contains("unrecorded: memory/FR-23 would go Unknown -> Pass"), "{stderr}");
    assert!(!stderr.contains("memory/FR-22 would"), "a cell the ledger holds is not named: {stderr}");
    let files: Vec<_> = std::fs::read_dir(ledger.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(files, ["cells.tsv"], "a check writes no run record or page");
    assert_eq!(std::fs::read_to_string(&cells).unwrap(), text, "a check leaves the rows alone");

    let healthy = scratch_ledger();
    let output = conformance_with(healthy.path(), &narrowed);
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
}

/// A conformance run of memory/FR-23 (with `flags`) whose cells fail their first attempt on
/// purpose; its stderr, once it has passed (a flake is not a regression).
fn flaky_fr_23(ledger: &Path, flags: &[&str]) -> String {
    let output = Command::new(env!("CARGO_BIN_EXE_xtask"))
        .args(["conformance", "--configuration", "memory", "--behaviour", "FR-23"])
        .args(flags)
        .arg("--ledger-dir")
        .arg(ledger)
        .env("CONFORMANCE_FAULT", "fails-first-attempt")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(output.status.success(), "a flake is not a regression:\n{stderr}");
    stderr
}

#[test]
fn a_cell_that_fails_only_its_first_attempt_is_recorded_as_a_flake_and_stays_pass() {
    let ledger = scratch_ledger();
    let before = std::fs::read(ledger.path().join("cells.tsv")).unwrap();
    let stderr = flaky_fr_23(ledger.path(), &[]);
    assert!(stderr.contains("flake: memory/FR-23 (reactor) failed, then passed on its rerun"), "{stderr}");
    assert!(stderr.contains("flake: memory/FR-23 (proactor) failed, then passed on its rerun"), "{stderr}");
    // Both variants' reruns are one run of the binary, as the first run was.
    assert_eq!(stderr.matches("rerunning 2 failed test(s)").count(), 1, "{stderr}");
    assert_eq!(std::fs::read(ledger.path().join("cells.tsv")).unwrap(), before, "the cell keeps its status");
    let runs = std::fs::read_to_string(ledger.path().join("runs.jsonl")).unwrap();
    let record: serde_json::Value = serde_json::from_str(runs.lines().last().unwrap()).unwrap();
    let flakes: Vec<&serde_json::Value> =
        record["configurations"].as_array().unwrap().iter().flat_map(|c| c["flakes"].as_array().unwrap()).collect();
    assert_eq!(flakes.len(), 2, "{runs}");
    assert_eq!(flakes[0]["cell"], "memory/FR-23");
    let first_failure = flakes[0]["first_failure"].as_str().unwrap();
    assert!(first_failure.contains("fails-first-attempt: the first attempt at memory-FR-23-"), "{first_failure}");
}

/// A check run records no evidence: its log must say what a flake's first attempt said.
#[test]
fn a_check_run_prints_what_a_flakes_first_attempt_said() {
    let ledger = scratch_ledger();
    let stderr = flaky_fr_23(ledger.path(), &["--check"]);
    let said = "flake: memory/FR-23 (reactor) failed, then passed on its rerun; it first said:\n    ";
    let at = stderr.find(said).unwrap_or_else(|| panic!("{stderr}")) + said.len();
    assert!(
        stderr[at..].starts_with("CONFORMANCE_FAULT=fails-first-attempt: the first attempt at memory-FR-23-"),
        "{stderr}"
    );
}

#[test]
fn a_binary_over_its_time_limit_is_stopped_naming_the_cells_and_the_ledger_is_untouched() {
    let ledger = scratch_ledger();
    let before = ledger_files(ledger.path());
    let output = conformance_with(ledger.path(), &["--binary-timeout", "1"]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "{stderr}");
    assert!(stderr.contains("the memory conformance binary timed out after 1 s (--binary-timeout)"), "{stderr}");
    assert!(stderr.contains("still running: memory::"), "{stderr}");
    assert_eq!(ledger_files(ledger.path()), before, "the ledger is left untouched");
}

#[test]
fn a_cell_over_its_time_limit_fails_naming_what_it_waited_for_and_keeps_its_status() {
    // FR-2 waits out a 3 s requeue delay, so a 1 s ceiling stops it while it polls: the same
    // path a hung broker call takes (the mutation catalogue's acknowledge-hangs proves that one).
    let ledger = scratch_ledger();
    let before = std::fs::read(ledger.path().join("cells.tsv")).unwrap();
    let output = conformance_with(
        ledger.path(),
        &["--configuration", "memory", "--behaviour", "FR-2", "--variant", "reactor", "--cell-timeout", "1"],
    );
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "{stderr}");
    assert!(stderr.contains("timed out after 1 s waiting for "), "the failure names the ceiling: {stderr}");
    assert!(stderr.contains("to arrive on memory-fr-2-reactor-"), "and what the cell waited for: {stderr}");
    assert!(stderr.contains("regression: memory/FR-2 was Pass and now fails"), "{stderr}");
    assert_eq!(std::fs::read(ledger.path().join("cells.tsv")).unwrap(), before, "one variant changes no status");
}

/// A conformance run of the gcp cells against a scratch ledger, with `environment` set.
fn gcp_run(ledger: &Path, brokers: &str, environment: &[(&str, &str)]) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_xtask"));
    command.args(["conformance", "--transport", "gcp", "--brokers", brokers, "--ledger-dir"]).arg(ledger);
    command.env_remove("CONFORMANCE_FAULT").env_remove("PUBSUB_EMULATOR_HOST");
    command.envs(environment.iter().copied());
    command.output().unwrap()
}

#[test]
fn a_broker_that_does_not_answer_stops_the_run_once_naming_it_and_leaves_the_ledger() {
    let ledger = scratch_ledger();
    let before = ledger_files(ledger.path());
    // Port 1 on loopback: nothing listens there.
    let output = gcp_run(ledger.path(), "env", &[("PUBSUB_EMULATOR_HOST", "127.0.0.1:1")]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "{stderr}");
    assert!(stderr.contains("error: gcp broker: the broker from env at 127.0.0.1:1 does not answer:"), "{stderr}");
    assert!(stderr.contains("Connection refused"), "the cause is named: {stderr}");
    assert_eq!(stderr.matches("does not answer").count(), 2, "stopped once (and xtask says why): {stderr}");
    assert!(!stderr.contains("regression"), "an outage is not a regression: {stderr}");
    assert_eq!(ledger_files(ledger.path()), before, "the ledger is left untouched");
}

#[test]
fn a_local_broker_dying_mid_run_stops_the_run_naming_it_and_leaves_the_ledger() {
    let ledger = scratch_ledger();
    let before = ledger_files(ledger.path());
    let output = gcp_run(ledger.path(), "local", &[("CONFORMANCE_FAULT", "kill-broker")]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "{stderr}");
    assert!(stderr.contains("error: gcp broker: pstest exited (signal: 9"), "{stderr}");
    assert!(stderr.contains("the gcp conformance binary stopped for its broker"), "{stderr}");
    assert!(!stderr.contains("regression"), "an outage is not a regression: {stderr}");
    assert_eq!(ledger_files(ledger.path()), before, "the ledger is left untouched");
}

/// The stand-in `cargo xtask brokers images` builds for `transport` (its broker facts').
fn stand_in(transport: &str) -> &'static str {
    &contract::brokers::of(transport).unwrap().image.stand_in
}

/// Every file of a ledger folder, by name, as bytes.
fn ledger_files(dir: &Path) -> std::collections::BTreeMap<String, Vec<u8>> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .map(|path| (path.file_name().unwrap().to_string_lossy().into_owned(), std::fs::read(&path).unwrap()))
        .collect()
}

/// Needs a Docker daemon and the stand-in image, so it is ignored in `cargo xtask test` (which
/// must pass on machines without Docker); `.ci/run` runs it with `--ignored` once its engine is
/// up, and there a missing daemon or image makes it fail, never skip.
#[test]
#[ignore = "needs a Docker daemon and the Pub/Sub stand-in image (cargo xtask brokers images gcp); .ci/run runs it with --ignored"]
fn a_broker_container_dying_mid_run_fails_the_run_names_the_broker_and_leaves_the_ledger() {
    container_dies_mid_run("gcp", "CONFORMANCE_PUBSUB_IMAGE", stand_in("gcp"), "the Pub/Sub emulator container");
}

/// The same on RocketMQ, whose container runs on the host network (no published port to lose).
#[test]
#[ignore = "needs a Docker daemon and the RocketMQ image (cargo xtask brokers images rocketmq); .ci/broad runs it with --ignored"]
fn a_rocketmq_container_dying_mid_run_fails_the_run_names_the_broker_and_leaves_the_ledger() {
    container_dies_mid_run("rocketmq", "CONFORMANCE_ROCKETMQ_IMAGE", stand_in("rocketmq"), "the RocketMQ container");
}

/// Runs `transport`'s cells on a container killed mid-run (fault kill-broker): the run fails
/// naming the container, no cell is judged, the ledger is byte-identical and the container gone.
fn container_dies_mid_run(transport: &str, variable: &str, stand_in: &str, name: &str) {
    let ledger = scratch_ledger();
    for file in ["runs.jsonl", "LEDGER.md", "LEDGER.svg"] {
        std::fs::copy(root().join("ledger").join(file), ledger.path().join(file)).unwrap();
    }
    let before = ledger_files(ledger.path());
    let image = std::env::var(variable).unwrap_or_else(|_| stand_in.to_owned());
    let output = Command::new(env!("CARGO_BIN_EXE_xtask"))
        .args(["conformance", "--transport", transport, "--brokers", "containers", "--ledger-dir"])
        .arg(ledger.path())
        .env("CONFORMANCE_FAULT", "kill-broker")
        .env(variable, &image)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "the run must fail:\n{stderr}");
    let up = format!("{transport}: broker from containers (image {image}, container ");
    let id = stderr
        .lines()
        .find_map(|line| line.strip_prefix(up.as_str()))
        .and_then(|rest| rest.split_whitespace().next())
        .unwrap_or_else(|| panic!("the broker must have come from a container ({up}…):\n{stderr}"))
        .to_owned();
    assert!(stderr.contains(&format!("fault kill-broker: killing container {id}")), "{stderr}");
    assert!(
        stderr
            .contains(&format!("error: {transport} broker: {name} {id} (image {image}) died mid-run (exit code 137)")),
        "the failure names the broker: {stderr}"
    );
    assert!(stderr.contains("the ledger is left untouched"), "{stderr}");
    assert!(!stderr.contains("regression:"), "no cell may be judged: {stderr}");
    assert_eq!(ledger_files(ledger.path()), before, "the ledger folder must be byte-identical");
    // The exit hook removed the killed container.
    let left = Command::new("docker").args(["ps", "-a", "-q", "--filter"]).arg(format!("id={id}")).output().unwrap();
    assert!(left.status.success() && left.stdout.is_empty(), "container {id} was left behind");
}

fn xtask(args: &[&str], paths: &[&Path]) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_xtask"));
    command.args(args).args(paths).env_remove("CONFORMANCE_FAULT");
    command.output().unwrap()
}

/// A run record with what differs between two runs of the same results blanked: when it ran and
/// how long each cell and binary took.
fn timeless(runs: &Path) -> serde_json::Value {
    let text = std::fs::read_to_string(runs).unwrap();
    let records: Vec<&str> = text.lines().collect();
    assert_eq!(records.len(), 1, "one record per run, sharded or not: {text}");
    let mut record: serde_json::Value = serde_json::from_str(records[0]).unwrap();
    record["date"] = "-".into();
    record["cells"].as_array_mut().unwrap().iter_mut().for_each(|cell| cell["duration_ms"] = 0.into());
    record["configurations"].as_array_mut().unwrap().iter_mut().for_each(|run| run["wall_ms"] = 0.into());
    record
}

/// LEDGER.md with the run dates in the last-runs table blanked.
fn dateless(markdown: &Path) -> String {
    let text = std::fs::read_to_string(markdown).unwrap();
    text.lines()
        .map(|line| match line.split(" | ").collect::<Vec<_>>().as_slice() {
            [configuration, date, rest @ ..] if date.ends_with('Z') => {
                format!("{configuration} | - | {}", rest.join(" | "))
            }
            _ => line.to_owned(),
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Memory has one configuration, so 2 shards are memory and an empty one: the merge must still
/// count the empty shard, and write what an unsharded run writes (byte for byte in cells.tsv; in
/// runs.jsonl and LEDGER.md up to the dates and durations, which two real runs cannot share; the
/// byte-for-byte proof with fabricated results is `shard::tests` in the xtask binary).
#[test]
fn memory_in_two_shards_merged_writes_what_one_unsharded_run_writes() {
    let (sharded, unsharded) = (scratch_ledger(), scratch_ledger());
    let before = ledger_files(sharded.path());
    let (one, two) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let shard = |spec: &str, out: &Path| {
        let output =
            xtask(&["conformance", "--shard", spec, "--out"], &[out, Path::new("--ledger-dir"), sharded.path()]);
        let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
        assert!(output.status.success(), "shard {spec}:\n{stderr}");
        stderr
    };
    let stderr = shard("1/2", one.path());
    assert!(stderr.contains("shard 1/2: 1 of 1 configuration(s): memory"), "{stderr}");
    assert!(stderr.contains("[ 36/36]"), "the shard ran every memory cell: {stderr}");
    let stderr = shard("2/2", two.path());
    assert!(stderr.contains("shard 2/2: its slice is empty"), "{stderr}");
    assert!(two.path().join("shard-2-of-2.json").exists(), "an empty shard still writes its file");
    assert_eq!(ledger_files(sharded.path()), before, "a shard never touches the ledger");

    let output = xtask(&["ledger", "merge"], &[one.path(), Path::new("--ledger-dir"), sharded.path()]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success());
    assert!(stderr.contains("missing shard(s) 2/2; have 1/2 ("), "{stderr}");
    assert_eq!(ledger_files(sharded.path()), before, "a refused merge leaves the ledger");

    let output = xtask(&["ledger", "merge"], &[one.path(), two.path(), Path::new("--ledger-dir"), sharded.path()]);
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let output = conformance(unsharded.path(), None);
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));

    let (a, b) = (sharded.path(), unsharded.path());
    assert_eq!(std::fs::read(a.join("cells.tsv")).unwrap(), std::fs::read(b.join("cells.tsv")).unwrap());
    assert_eq!(timeless(&a.join("runs.jsonl")), timeless(&b.join("runs.jsonl")));
    assert_eq!(dateless(&a.join("LEDGER.md")), dateless(&b.join("LEDGER.md")));
}

#[test]
fn a_bad_shard_is_refused_naming_the_valid_form() {
    let out = tempfile::tempdir().unwrap();
    for bad in ["3/2", "0/1", "two"] {
        let output = xtask(&["conformance", "--shard", bad, "--out"], &[out.path()]);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success());
        assert!(stderr.contains("valid form: K/N with 1 <= K <= N (e.g. 1/4)"), "{bad}: {stderr}");
    }
    let output = xtask(&["conformance", "--shard", "1/2"], &[]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success());
    assert!(stderr.contains("--out <DIR>"), "--shard needs --out: {stderr}");
}

/// A run's outputs are checked before the build: each case below fails at once, naming the
/// place, with every ledger file as it was (a run that failed only after the cells would have
/// changed the ledger and then lost its report, or recorded the run twice on the retry).
#[test]
fn an_output_that_cannot_be_written_stops_the_run_before_the_build_and_leaves_the_ledger() {
    let ledger = scratch_ledger();
    let torn = "{\"date\":\"2026-12-02T00:00:00Z\"";
    std::fs::write(ledger.path().join("runs.jsonl"), torn).unwrap();
    let before = ledger_files(ledger.path());
    let output = conformance_with(ledger.path(), &[]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success() && stderr.contains("runs.jsonl"), "{stderr}");
    assert!(!stderr.contains("building the conformance tests"), "found after the build: {stderr}");
    assert_eq!(ledger_files(ledger.path()), before, "a torn run log leaves the ledger as it was");

    let ledger = scratch_ledger();
    let before = ledger_files(ledger.path());
    let missing = ledger.path().join("no-such-folder/report.xml");
    let output = conformance_with(ledger.path(), &["--junit", missing.to_str().unwrap()]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success() && stderr.contains("--junit: cannot write into"), "{stderr}");
    assert!(!stderr.contains("building the conformance tests"), "found after the build: {stderr}");
    assert_eq!(ledger_files(ledger.path()), before, "an unwritable report leaves the ledger as it was");

    let output = conformance_with(ledger.path(), &["--junit", ledger.path().to_str().unwrap()]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success() && stderr.contains("a folder; give the path of the XML file"), "{stderr}");
    assert_eq!(ledger_files(ledger.path()), before);
}
