//! `cargo xtask ledger diff` against a scratch git repository: a cell deferred on `main`, fixed
//! on a branch, with a flaky run recorded on the way.

use std::path::Path;
use std::process::{Command, Output};

const DEFERRED: &str = "\
memory\tFR-2\tPass
memory\tFR-23\tPass
sqs-fifo\tFR-23\tDeferred\t#4\tmoto does not keep the receive count
";

const FIXED: &str = "\
memory\tFR-2\tPass
memory\tFR-23\tPass
sqs-fifo\tFR-23\tFixed\t#12
";

const BASE_RUN: &str = r#"{"date":"2026-12-01T09:00:00Z","commit":"aaa0001","configurations":[{"configuration":"memory","variant":"reactor","passed":2,"failed":0,"skipped":0,"wall_ms":900,"flakes":[]}]}"#;

const FLAKY_RUN: &str = r#"{"date":"2026-12-01T10:00:00Z","commit":"bbb0002","configurations":[{"configuration":"sqs-fifo","variant":"proactor","passed":1,"failed":0,"skipped":0,"wall_ms":4000,"flakes":[{"cell":"sqs-fifo/FR-23","variant":"proactor","first_failure":"\nthread 'fr_23' panicked at cell.rs:9:\nno arrival in 30 s\n"}]}],"cells":[{"cell":"sqs-fifo/FR-23","variant":"proactor","result":"flaky","duration_ms":4000}]}"#;

fn git(repo: &Path, args: &[&str]) -> String {
    let output = Command::new("git")
        .arg("-C")
        .arg(repo)
        .args(["-c", "user.name=it", "-c", "user.email=it@example.invalid", "-c", "commit.gpgsign=false"])
        .args(args)
        .output()
        .unwrap();
    assert!(output.status.success(), "git {args:?}: {}", String::from_utf8_lossy(&output.stderr));
    String::from_utf8(output.stdout).unwrap().trim().to_owned()
}

fn write_ledger(repo: &Path, cells: &str, runs: &[&str]) {
    std::fs::create_dir_all(repo.join("ledger")).unwrap();
    std::fs::write(repo.join("ledger/cells.tsv"), cells).unwrap();
    let log: String = runs.iter().map(|line| format!("{line}\n")).collect();
    std::fs::write(repo.join("ledger/runs.jsonl"), log).unwrap();
}

/// `main` with the cell Deferred, then a branch `fix` where it is Fixed and a flaky run was recorded.
fn deferred_then_fixed() -> (tempfile::TempDir, String) {
    let repo = tempfile::tempdir().unwrap();
    git(repo.path(), &["init", "-q", "-b", "main"]);
    write_ledger(repo.path(), DEFERRED, &[BASE_RUN]);
    git(repo.path(), &["add", "ledger"]);
    git(repo.path(), &["commit", "-q", "-m", "defer sqs-fifo/FR-23"]);
    let base = git(repo.path(), &["rev-parse", "--short=7", "HEAD"]);
    git(repo.path(), &["checkout", "-q", "-b", "fix"]);
    write_ledger(repo.path(), FIXED, &[BASE_RUN, FLAKY_RUN]);
    git(repo.path(), &["commit", "-q", "-am", "fix sqs-fifo/FR-23"]);
    (repo, base)
}

fn diff(repo: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_xtask")).args(["ledger", "diff", "--repo"]).arg(repo).args(args).output().unwrap()
}

fn stdout(output: &Output) -> String {
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    String::from_utf8(output.stdout.clone()).unwrap()
}

#[test]
fn a_cell_deferred_on_main_and_fixed_on_a_branch_is_reported_against_the_merge_base() {
    let (repo, base) = deferred_then_fixed();
    assert_eq!(
        stdout(&diff(repo.path(), &[])),
        format!(
            "\
### Conformance ledger since the merge base with main ({base})

Pass 2 -> 2 · **Fixed 0 -> 1** (+1) · **Deferred 1 -> 0** (-1) (3 -> 3 cells)

**Status changes** (1)

- `sqs-fifo/FR-23`: Deferred (#4: moto does not keep the receive count) -> Fixed (#12)

**New flakes** (1, in 1 new run record)

- `sqs-fifo/FR-23` proactor (2026-12-01T10:00:00Z at bbb0002): `thread 'fr_23' panicked at cell.rs:9:`
"
        )
    );
    // The same against an explicit base, as JSON.
    let json: serde_json::Value =
        serde_json::from_str(&stdout(&diff(repo.path(), &["--base", &base, "--format", "json"]))).unwrap();
    assert_eq!(json["base"], base.as_str());
    assert_eq!(json["cells"][0]["before"]["status"], "Deferred");
    assert_eq!(json["cells"][0]["after"]["reference"], "#12");
    assert_eq!(json["new_flakes"][0]["cell"], "sqs-fifo/FR-23");
}

#[test]
fn the_branch_against_itself_and_a_base_without_a_ledger() {
    let (repo, _) = deferred_then_fixed();
    assert_eq!(
        stdout(&diff(repo.path(), &["--base", "fix"])),
        format!(
            "Ledger: no cell changed since fix ({}) (2 Pass, 1 Fixed, 0 Deferred; 0 new run records, no new flakes).\n",
            git(repo.path(), &["rev-parse", "--short=7", "HEAD"])
        )
    );
    // A commit without ledger/ is an empty ledger: every cell is new.
    std::fs::write(repo.path().join("README"), "x").unwrap();
    git(repo.path(), &["checkout", "-q", "--orphan", "bare"]);
    git(repo.path(), &["rm", "-rq", "--cached", "ledger"]);
    git(repo.path(), &["add", "README"]);
    git(repo.path(), &["commit", "-q", "-m", "no ledger"]);
    let report = stdout(&diff(repo.path(), &["--base", "bare"]));
    assert!(report.contains("**New cells** (3)"), "{report}");
    assert!(report.contains("**New flakes** (1, in 2 new run records)"), "{report}");
}

#[test]
fn an_unknown_base_or_a_missing_main_is_a_clear_error() {
    let (repo, _) = deferred_then_fixed();
    let output = diff(repo.path(), &["--base", "no-such-branch"]);
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("error: --base no-such-branch: not a commit in "), "{stderr}");
    assert!(output.stdout.is_empty(), "nothing to post on an error");

    git(repo.path(), &["branch", "-q", "-m", "main", "trunk"]);
    let output = diff(repo.path(), &[]);
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("error: cannot find the merge base of HEAD and main in "), "{stderr}");
    assert!(stderr.contains("pass the commit to compare with as --base REV"), "{stderr}");
}
