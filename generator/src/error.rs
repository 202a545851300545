use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum GenerateError {
    #[error("{path}:{line}: {problem}")]
    Manifest { path: PathBuf, line: usize, problem: String },
    #[error(transparent)]
    Ledger(#[from] ledger::LedgerError),
    #[error("rendering {template}: {chain}")]
    Template { template: String, chain: String },
    #[error("rustfmt on the output of {template}: {detail}")]
    Rustfmt { template: String, detail: String },
    #[error("{path}: {error}")]
    Io { path: PathBuf, error: std::io::Error },
    #[error("{count} generated file(s) differ from what the templates, manifest and ledger produce:\n{diff}\nRun `{command}` to regenerate; never edit generated files by hand")]
    Stale { count: usize, diff: String, command: &'static str },
}
