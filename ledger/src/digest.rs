//! The source digest: what a run's evidence was made from, independent of
//! git (a dirty tree has no commit that names it) and of file times.

use std::fs;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use crate::LedgerError;

/// The folders, relative to the workspace root, whose files decide how a
/// conformance cell behaves: the library, the brokers' side of the harness,
/// the templates and what they render to.
pub const DIGEST_FOLDERS: [&str; 4] = ["gateway", "providers", "templates", "generated"];

/// A SHA-256 (64 lowercase hex digits) over the relative path and the bytes
/// of every file under [`DIGEST_FOLDERS`] of `root`, in sorted path order.
/// Hidden entries (names starting with '.') and folders named `target` are
/// skipped; a missing folder contributes nothing. A symbolic link
/// contributes its target path, not what it points to.
///
/// Deterministic: it depends on names and contents only, never on
/// modification times, permissions or the order the file system lists a
/// folder in. Each path and content is length-prefixed, so moving bytes
/// between a name and a file changes the digest.
pub fn source_digest(root: &Path) -> Result<String, LedgerError> {
    let mut files = Vec::new();
    for folder in DIGEST_FOLDERS {
        let dir = root.join(folder);
        if dir.is_dir() {
            collect(&dir, folder.as_bytes().to_vec(), &mut files)?;
        }
    }
    files.sort();
    let mut hasher = Sha256::new();
    for (relative, entry) in &files {
        let bytes = match entry {
            Entry::File(path) => fs::read(path).map_err(|error| read_error(path, error))?,
            Entry::Link(target) => target.clone(),
        };
        hasher.update((relative.len() as u64).to_le_bytes());
        hasher.update(relative);
        hasher.update([u8::from(matches!(entry, Entry::Link(_)))]);
        hasher.update((bytes.len() as u64).to_le_bytes());
        hasher.update(&bytes);
    }
    Ok(hasher.finalize().iter().map(|byte| format!("{byte:02x}")).collect())
}

#[derive(PartialEq, Eq, PartialOrd, Ord)]
enum Entry {
    File(PathBuf),
    /// The link's target path.
    Link(Vec<u8>),
}

/// Adds every file under `dir` (whose relative path is `relative`, with '/'
/// separators) to `files`.
fn collect(dir: &Path, relative: Vec<u8>, files: &mut Vec<(Vec<u8>, Entry)>) -> Result<(), LedgerError> {
    for entry in fs::read_dir(dir).map_err(|error| read_error(dir, error))? {
        let entry = entry.map_err(|error| read_error(dir, error))?;
        let name = entry.file_name();
        let name = name.as_encoded_bytes();
        if name.starts_with(b".") {
            continue;
        }
        let path = entry.path();
        let mut child = relative.clone();
        child.push(b'/');
        child.extend_from_slice(name);
        let kind = entry.file_type().map_err(|error| read_error(&path, error))?;
        if kind.is_dir() {
            if name != b"target" {
                collect(&path, child, files)?;
            }
        } else if kind.is_symlink() {
            let target = fs::read_link(&path).map_err(|error| read_error(&path, error))?;
            files.push((child, Entry::Link(target.as_os_str().as_encoded_bytes().to_vec())));
        } else {
            files.push((child, Entry::File(path)));
        }
    }
    Ok(())
}

fn read_error(path: &Path, error: std::io::Error) -> LedgerError {
    LedgerError::Read { path: path.to_owned(), error }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(root: &Path, relative: &str, text: &str) {
        let path = root.join(relative);
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(path, text).unwrap();
    }

    fn tree() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), "gateway/src/lib.rs", "pub fn f() {}\n");
        write(dir.path(), "gateway/Cargo.toml", "[package]\n");
        write(dir.path(), "templates/manifest.yaml", "behaviours: []\n");
        write(dir.path(), "generated/tests/memory/main.rs", "// @generated\n");
        dir
    }

    fn digest(root: &Path) -> String {
        source_digest(root).unwrap()
    }

    #[test]
    fn is_sha256_hex_and_deterministic() {
        let dir = tree();
        let first = digest(dir.path());
        assert_eq!(first.len(), 64);
        assert!(first.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)), "{first}");
        assert_eq!(digest(dir.path()), first);
        // The same files written in another order into another folder.
        let other = tempfile::tempdir().unwrap();
        write(other.path(), "generated/tests/memory/main.rs", "// @generated\n");
        write(other.path(), "templates/manifest.yaml", "behaviours: []\n");
        write(other.path(), "gateway/Cargo.toml", "[package]\n");
        write(other.path(), "gateway/src/lib.rs", "pub fn f() {}\n");
        assert_eq!(digest(other.path()), first);
    }

    #[test]
    fn of_nothing_is_the_digest_of_no_bytes() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(digest(dir.path()), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    }

    #[test]
    fn ignores_mtimes_target_hidden_entries_and_other_folders() {
        let dir = tree();
        let before = digest(dir.path());
        // Rewriting a file with the same bytes changes its mtime only.
        std::thread::sleep(std::time::Duration::from_millis(20));
        write(dir.path(), "gateway/src/lib.rs", "pub fn f() {}\n");
        write(dir.path(), "gateway/target/debug/build.log", "noise\n");
        write(dir.path(), "generated/target/x", "noise\n");
        write(dir.path(), "providers/.venv/lib.py", "noise\n");
        write(dir.path(), "providers/.hidden", "noise\n");
        write(dir.path(), "ledger/runs.jsonl", "{}\n");
        write(dir.path(), "xtask/src/main.rs", "fn main() {}\n");
        write(dir.path(), ".git/HEAD", "ref\n");
        assert_eq!(digest(dir.path()), before);
    }

    #[test]
    fn changes_with_any_content_name_or_new_file() {
        let dir = tree();
        let before = digest(dir.path());

        write(dir.path(), "gateway/src/lib.rs", "pub fn g() {}\n");
        let edited = digest(dir.path());
        assert_ne!(edited, before);
        write(dir.path(), "gateway/src/lib.rs", "pub fn f() {}\n");
        assert_eq!(digest(dir.path()), before, "restoring the bytes restores the digest");

        fs::rename(dir.path().join("gateway/src/lib.rs"), dir.path().join("gateway/src/main.rs")).unwrap();
        assert_ne!(digest(dir.path()), before, "a rename counts");
        fs::rename(dir.path().join("gateway/src/main.rs"), dir.path().join("gateway/src/lib.rs")).unwrap();

        write(dir.path(), "providers/src/lib.rs", "");
        assert_ne!(digest(dir.path()), before, "a new, even empty, file counts");
    }

    #[test]
    fn a_name_and_its_content_cannot_trade_bytes() {
        let one = tempfile::tempdir().unwrap();
        write(one.path(), "gateway/ab", "c");
        let two = tempfile::tempdir().unwrap();
        write(two.path(), "gateway/a", "bc");
        assert_ne!(digest(one.path()), digest(two.path()));
    }

    #[test]
    fn an_unreadable_folder_is_named() {
        let dir = tree();
        // A file where a folder is expected cannot be listed.
        let err = collect(&dir.path().join("gateway/Cargo.toml"), b"gateway".to_vec(), &mut Vec::new())
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with(&format!("cannot read {}: ", dir.path().join("gateway/Cargo.toml").display())),
            "{err}"
        );
    }
}
