//! The generator against the real repository and against scratch copies of it.

use std::path::{Path, PathBuf};

use generator::{generate, GenerateError, Mode};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap().flatten() {
        let target = to.join(entry.file_name());
        if entry.path().is_dir() {
            copy_tree(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).unwrap();
        }
    }
}

/// A copy of everything the generator reads and writes.
fn scratch_repository() -> tempfile::TempDir {
    let scratch = tempfile::tempdir().unwrap();
    for folder in ["templates", "generated", "ledger", "docs"] {
        copy_tree(&root().join(folder), &scratch.path().join(folder));
    }
    std::fs::copy(root().join("rustfmt.toml"), scratch.path().join("rustfmt.toml")).unwrap();
    scratch
}

#[test]
fn the_checked_in_generated_code_is_fresh() {
    if let Err(error) = generate(&root(), Mode::Check) {
        panic!("{error}");
    }
}

#[test]
fn a_hand_edit_in_generated_fails_the_check_with_a_diff_and_the_fix() {
    let scratch = scratch_repository();
    let edited = scratch.path().join("generated/tests/memory/memory/reactor/fr_23.rs");
    let text = std::fs::read_to_string(&edited).unwrap().replace("const R: i32 = 3;", "const R: i32 = 30;");
    std::fs::write(&edited, text).unwrap();

    let error = generate(scratch.path(), Mode::Check).unwrap_err();
    assert!(matches!(error, GenerateError::Stale { count: 1, .. }), "{error}");
    let message = error.to_string();
    assert!(message.contains("generated/tests/memory/memory/reactor/fr_23.rs"), "{message}");
    assert!(
        message.contains("-        const R: i32 = 30;") && message.contains("+        const R: i32 = 3;"),
        "{message}"
    );
    assert!(message.contains("Run `cargo xtask generate` to regenerate"), "{message}");

    // Write mode repairs it, and the output is byte-identical to what was checked in.
    generate(scratch.path(), Mode::Write).unwrap();
    assert_eq!(
        std::fs::read_to_string(&edited).unwrap(),
        std::fs::read_to_string(root().join("generated/tests/memory/memory/reactor/fr_23.rs")).unwrap()
    );
    generate(scratch.path(), Mode::Check).unwrap();
}

#[test]
fn a_stale_or_missing_ledger_picture_fails_the_check_and_write_restores_it() {
    let scratch = scratch_repository();
    let svg = scratch.path().join("ledger/LEDGER.svg");
    let checked_in = std::fs::read_to_string(root().join("ledger/LEDGER.svg")).unwrap();

    // A cell that changed status without a regeneration leaves the picture stale.
    std::fs::write(&svg, checked_in.replacen(">P</text>", ">D</text>", 1)).unwrap();
    let error = generate(scratch.path(), Mode::Check).unwrap_err();
    assert!(matches!(error, GenerateError::Stale { count: 1, .. }), "{error}");
    let message = error.to_string();
    assert!(message.contains("ledger/LEDGER.svg"), "{message}");
    assert!(message.contains("Run `cargo xtask generate` to regenerate"), "{message}");

    std::fs::remove_file(&svg).unwrap();
    let error = generate(scratch.path(), Mode::Check).unwrap_err().to_string();
    assert!(error.contains("ledger/LEDGER.svg"), "a missing picture is stale too: {error}");

    let outcome = generate(scratch.path(), Mode::Write).unwrap();
    assert_eq!(outcome.written, [Path::new("ledger/LEDGER.svg")]);
    assert_eq!(std::fs::read_to_string(&svg).unwrap(), checked_in);
    generate(scratch.path(), Mode::Check).unwrap();
}

#[test]
fn a_stray_file_in_generated_fails_the_check_and_write_removes_it() {
    let scratch = scratch_repository();
    let stray = scratch.path().join("generated/tests/memory/memory/reactor/fr_99.rs");
    std::fs::write(&stray, "// left behind\n").unwrap();
    let error = generate(scratch.path(), Mode::Check).unwrap_err().to_string();
    assert!(error.contains("fr_99.rs: not produced by any template (stale)"), "{error}");
    let outcome = generate(scratch.path(), Mode::Write).unwrap();
    assert_eq!(outcome.removed.len(), 1);
    assert!(!stray.exists());
}

#[test]
fn generation_is_deterministic() {
    let scratch = scratch_repository();
    std::fs::remove_dir_all(scratch.path().join("generated")).unwrap();
    std::fs::remove_file(scratch.path().join("ledger/LEDGER.md")).unwrap();
    std::fs::remove_file(scratch.path().join("ledger/LEDGER.svg")).unwrap();
    let first = generate(scratch.path(), Mode::Write).unwrap();
    // Everything the checked-in tree holds, plus the ledger's page and picture, is written again.
    assert_eq!(first.written.len(), files_under(&root().join("generated")) + 2);
    let second = generate(scratch.path(), Mode::Write).unwrap();
    assert!(second.written.is_empty(), "a second run rewrote {:?}", second.written);
}

fn files_under(folder: &Path) -> usize {
    std::fs::read_dir(folder)
        .unwrap()
        .flatten()
        .map(|entry| if entry.path().is_dir() { files_under(&entry.path()) } else { 1 })
        .sum()
}

/// A scratch repository with a second, Deferred configuration, to snapshot what a reviewer
/// sees for a representative cell of each kind.
fn with_deferred_configuration() -> tempfile::TempDir {
    let scratch = scratch_repository();
    let manifest = scratch.path().join("templates/manifest.yaml");
    // Its own configurations, so the snapshots do not move when the project adds one.
    let text = std::fs::read_to_string(&manifest).unwrap();
    let mut text = text[..text.find("configurations:").unwrap()].to_owned();
    text.push_str(
        "configurations:\n  - name: memory\n    transport: memory\n    feature: memory\n    provider: memory\n    \
         counter: republished\n    redelivery_ms: 50\n",
    );
    // One configuration per counter kind, so each form of the oracle is in a snapshot.
    for (name, provider, counter) in
        [("slow-broker", "slow_broker", "exact"), ("vague-broker", "vague_broker", "approximate")]
    {
        text.push_str(&format!(
            "  - name: {name}\n    transport: slow\n    feature: slow\n    provider: {provider}\n    counter: {counter}\n    \
             lease_ms: 10000\n    redelivery_ms: 1000\n"
        ));
    }
    std::fs::write(&manifest, text).unwrap();
    let cells = scratch.path().join("ledger/cells.tsv");
    let mut text = std::fs::read_to_string(&cells).unwrap();
    text.push_str("slow-broker\tFR-9\tDeferred\t#4\tthe broker ignores \"DelaySeconds\"\n");
    std::fs::write(&cells, text).unwrap();
    // Fixed runs, so the matrix's flake marks and last runs do not move with the project's runs.
    std::fs::write(scratch.path().join("ledger/runs.jsonl"), RUNS).unwrap();
    generate(scratch.path(), Mode::Write).unwrap();
    scratch
}

/// An old record (totals only) and a newer one with provenance, per-cell results and a flake.
const RUNS: &str = concat!(
    r#"{"date":"2026-11-30T07:17:25Z","commit":"1e165c2","configurations":[{"configuration":"memory","variant":"reactor","passed":12,"failed":0,"skipped":0,"wall_ms":2009,"flakes":[]}]}"#,
    "\n",
    r#"{"date":"2026-12-01T09:00:00Z","commit":"bbb0002","dirty":true,"toolchain":"rustc 1.95.0","digest":"0123","brokers":[{"transport":"slow","source":"local","implementation":"slowmq","version":"1.2"}],"configurations":[{"configuration":"slow-broker","variant":"reactor","passed":1,"failed":0,"skipped":0,"wall_ms":900,"flakes":[{"cell":"slow-broker/FR-2","variant":"reactor","first_failure":"no arrival in 30 s"}]}],"cells":[{"cell":"slow-broker/FR-2","variant":"reactor","result":"flaky","duration_ms":900}]}"#,
    "\n",
);

fn read(scratch: &tempfile::TempDir, path: &str) -> String {
    std::fs::read_to_string(scratch.path().join(path)).unwrap()
}

#[test]
fn snapshots_of_representative_outputs() {
    let scratch = with_deferred_configuration();
    insta::assert_snapshot!(
        "deferred_cell_reactor_fr_9",
        read(&scratch, "generated/tests/slow/slow_broker/reactor/fr_9.rs")
    );
    insta::assert_snapshot!(
        "pump_cell_proactor_fr_23",
        read(&scratch, "generated/tests/slow/slow_broker/proactor/fr_23.rs")
    );
    insta::assert_snapshot!(
        "relaxed_oracle_reactor_fr_16",
        read(&scratch, "generated/tests/slow/slow_broker/reactor/fr_16.rs")
    );
    insta::assert_snapshot!(
        "approximate_pump_cell_reactor_fr_23",
        read(&scratch, "generated/tests/slow/vague_broker/reactor/fr_23.rs")
    );
    insta::assert_snapshot!(
        "republished_requeue_proactor_fr_15",
        read(&scratch, "generated/tests/memory/memory/proactor/fr_15.rs")
    );
    insta::assert_snapshot!(
        "settlement_reactor_fr_4",
        read(&scratch, "generated/tests/slow/slow_broker/reactor/fr_4.rs")
    );
    insta::assert_snapshot!("binary_main", read(&scratch, "generated/tests/slow/main.rs"));
    insta::assert_snapshot!("crate_manifest", read(&scratch, "generated/Cargo.toml"));
    insta::assert_snapshot!("ledger_markdown", read(&scratch, "ledger/LEDGER.md"));
    insta::assert_snapshot!("ledger_svg", read(&scratch, "ledger/LEDGER.svg"));
}

#[test]
fn a_template_that_renders_invalid_rust_is_named_in_the_error() {
    let scratch = scratch_repository();
    let template = scratch.path().join("templates/proactor/fr_16.rs.tera");
    let text =
        std::fs::read_to_string(&template).unwrap().replace("{% endblock body %}", "fn broken( {\n{% endblock body %}");
    std::fs::write(&template, text).unwrap();
    let error = generate(scratch.path(), Mode::Check).unwrap_err().to_string();
    assert!(error.starts_with("rustfmt on the output of templates/proactor/fr_16.rs.tera:"), "{error}");
}
