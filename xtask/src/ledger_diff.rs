//! `cargo xtask ledger diff`: the git side of the ledger review. Reads the ledger and run log
//! at a base commit with `git show`, the working tree's from disk, and prints
//! [`ledger::LedgerDiff`] (the comparison itself lives in the ledger crate).
//!
//! The pull-request workflow posts this command's stdout as one comment, so stdout carries
//! the report and nothing else; errors go to stderr.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context, Result};
use clap::{Args as ClapArgs, ValueEnum};
use ledger::{Ledger, LedgerDiff, RunRecord};

/// The branch the default base is the merge base with.
const MAIN: &str = "main";

#[derive(ClapArgs, Debug)]
pub struct Args {
    /// The commit (branch, tag or hash) to compare with; default: `git merge-base HEAD main`
    #[arg(long, value_name = "REV")]
    pub base: Option<String>,
    /// markdown: the pull-request comment; json: the same content for tools
    #[arg(long, value_enum, default_value_t = Format::Markdown)]
    pub format: Format,
    /// The git repository whose ledger/ is compared; default: this workspace
    #[arg(long, value_name = "DIR")]
    pub repo: Option<PathBuf>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Format {
    Markdown,
    Json,
}

pub fn run(args: &Args) -> Result<()> {
    let repo = args.repo.clone().unwrap_or_else(crate::root);
    let (label, commit) = match &args.base {
        Some(rev) => (rev.clone(), resolve(&repo, rev)?),
        None => {
            let commit = merge_base(&repo)?;
            (format!("the merge base with {MAIN}"), commit)
        }
    };
    let short = &commit[..commit.len().min(7)];
    let base = if label == commit || short == label { short.to_owned() } else { format!("{label} ({short})") };

    let before = Ledger::parse(&show(&repo, &commit, generator::LEDGER)?, &origin(short, generator::LEDGER))?;
    let before_runs = ledger::parse_runs(&show(&repo, &commit, generator::RUNS)?, &origin(short, generator::RUNS))?;
    let after = Ledger::load(&repo.join(generator::LEDGER))?;
    let after_runs = working_runs(&repo.join(generator::RUNS))?;

    let diff = LedgerDiff::between(base, (&before, &before_runs), (&after, &after_runs));
    match args.format {
        Format::Markdown => print!("{}", diff.to_markdown()),
        Format::Json => println!("{}", serde_json::to_string_pretty(&diff)?),
    }
    Ok(())
}

/// Where a parse error in the base's files points: `1a2b3c4:ledger/cells.tsv:5: …`.
fn origin(commit: &str, path: &str) -> PathBuf {
    PathBuf::from(format!("{commit}:{path}"))
}

/// A run log the working tree does not have yet is an empty one, as at the base.
fn working_runs(path: &Path) -> Result<Vec<RunRecord>> {
    if !path.exists() {
        return Ok(Vec::new());
    }
    Ok(ledger::read_runs(path)?)
}

fn git(repo: &Path, args: &[&str]) -> Result<std::process::Output> {
    Command::new("git")
        .arg("-C")
        .arg(repo)
        .args(args)
        .output()
        .with_context(|| format!("running git {} in {}", args.join(" "), repo.display()))
}

fn stdout_line(output: &std::process::Output) -> String {
    String::from_utf8_lossy(&output.stdout).trim().to_owned()
}

fn stderr_line(output: &std::process::Output) -> String {
    let text = String::from_utf8_lossy(&output.stderr);
    let line = text.lines().find(|line| !line.trim().is_empty()).unwrap_or("no message").trim();
    line.to_owned()
}

/// The full hash of the commit `rev` names, or an error naming `rev`.
fn resolve(repo: &Path, rev: &str) -> Result<String> {
    let output = git(repo, &["rev-parse", "--verify", "--quiet", "--end-of-options", &format!("{rev}^{{commit}}")])?;
    if !output.status.success() {
        bail!(
            "--base {rev}: not a commit in {} (give a branch, tag or commit hash, e.g. --base {MAIN} or --base HEAD~1)",
            repo.display()
        );
    }
    Ok(stdout_line(&output))
}

/// `git merge-base HEAD main`, or an error that asks for --base.
fn merge_base(repo: &Path) -> Result<String> {
    let output = git(repo, &["merge-base", "HEAD", MAIN])?;
    if !output.status.success() {
        bail!(
            "cannot find the merge base of HEAD and {MAIN} in {} (git merge-base: {}); pass the commit to compare \
             with as --base REV",
            repo.display(),
            stderr_line(&output)
        );
    }
    Ok(stdout_line(&output))
}

/// The text of `path` at `commit`; a file the commit does not have is an empty ledger or log.
fn show(repo: &Path, commit: &str, path: &str) -> Result<String> {
    let object = format!("{commit}:{path}");
    // `cat-file -e` tells "no such file at that commit" apart from a git failure.
    if !git(repo, &["cat-file", "-e", &object])?.status.success() {
        return Ok(String::new());
    }
    let output = git(repo, &["show", &object])?;
    if !output.status.success() {
        bail!("git show {object} failed: {}", stderr_line(&output));
    }
    String::from_utf8(output.stdout).with_context(|| format!("{object} is not UTF-8"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    /// `ledger diff`'s flags alone, as clap parses them within the command.
    #[derive(Parser)]
    struct Diff {
        #[command(flatten)]
        args: Args,
    }

    fn parse(args: &[&str]) -> std::result::Result<Args, String> {
        let diff = Diff::try_parse_from(["cargo xtask ledger diff"].iter().chain(args)).map_err(|e| e.to_string())?;
        Ok(diff.args)
    }

    #[test]
    fn defaults_to_markdown_against_the_merge_base() {
        let args = parse(&[]).unwrap();
        assert_eq!((args.base, args.format), (None, Format::Markdown));
        let args = parse(&["--base", "v1", "--format", "json"]).unwrap();
        assert_eq!((args.base.as_deref(), args.format), (Some("v1"), Format::Json));
    }

    #[test]
    fn a_bad_format_names_the_valid_choices() {
        let error = parse(&["--format", "html"]).unwrap_err();
        assert!(error.contains("invalid value 'html' for '--format <FORMAT>'"), "{error}");
        assert!(error.contains("[possible values: markdown, json]"), "{error}");
    }

    #[test]
    fn an_unknown_base_is_named() {
        let error = resolve(&crate::root(), "no-such-rev-anywhere").unwrap_err().to_string();
        assert!(error.starts_with("--base no-such-rev-anywhere: not a commit in "), "{error}");
        assert!(error.ends_with("(give a branch, tag or commit hash, e.g. --base main or --base HEAD~1)"), "{error}");
    }
}
