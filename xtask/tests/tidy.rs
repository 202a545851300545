//! Tidy tests, in the manner of rust-analyzer's: the architecture invariants of ARCHITECTURE.md
//! that a reader would otherwise have to take on trust, checked over the source tree.

use std::path::{Path, PathBuf};

mod imports;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

fn rust_files(folder: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let mut pending = vec![folder.to_path_buf()];
    while let Some(dir) = pending.pop() {
        for entry in std::fs::read_dir(&dir).unwrap().flatten() {
            let path = entry.path();
            if path.is_dir() {
                pending.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                files.push(path);
            }
        }
    }
    files.sort();
    files
}

/// The file's lines before its unit tests, numbered from 1: tests may spell out what production
/// code must not.
fn production_lines(path: &Path) -> Vec<(usize, String)> {
    let text = std::fs::read_to_string(path).unwrap();
    let end = text.find("#[cfg(test)]").unwrap_or(text.len());
    text[..end].lines().enumerate().map(|(i, l)| (i + 1, l.to_owned())).collect()
}

fn relative(path: &Path) -> String {
    path.strip_prefix(root()).unwrap().display().to_string()
}

/// Lines of transport code that break `rule`, as `file:line: text`.
fn transport_violations(rule: impl Fn(&str) -> bool) -> Vec<String> {
    let mut found = Vec::new();
    for file in rust_files(&root().join("gateway/src/transport")) {
        for (number, line) in production_lines(&file) {
            let code = line.split("//").next().unwrap_or_default();
            if rule(code) {
                found.push(format!("{}:{number}: {}", relative(&file), line.trim()));
            }
        }
    }
    found
}

#[test]
fn transports_name_rejection_keys_through_rejection_keys_never_as_literals() {
    let keys = ["rejectionReason", "rejectionMessage", "rejectionTimestamp", "originalTopic", "originalMessageType"];
    let found = transport_violations(|code| keys.iter().any(|key| code.contains(&format!("\"{key}\""))));
    assert!(found.is_empty(), "use gateway::rejection::keys instead of literals:\n{}", found.join("\n"));
}

#[test]
fn transports_never_count_deliveries_the_pump_and_the_broker_do() {
    let found = transport_violations(|code| {
        let code = code.replace(' ', "");
        code.contains("handled_count+") || code.contains(".handled_count=") && !code.contains(".handled_count==")
    });
    assert!(
        found.is_empty(),
        "a transport resolves the handled count through delivery_count::resolve and never changes it:\n{}",
        found.join("\n")
    );
}

#[test]
fn the_gateway_depends_on_no_harness_crate() {
    let manifest = std::fs::read_to_string(root().join("gateway/Cargo.toml")).unwrap();
    let harness =
        ["providers", "generator", "ledger", "xtask", "generated", "testcontainers", "testcontainers-modules"];
    let found: Vec<&str> = manifest
        .lines()
        .filter_map(|line| line.split(['=', ' ', '.']).next())
        .filter(|name| harness.contains(name))
        .collect();
    assert!(found.is_empty(), "gateway/Cargo.toml names harness crates: {found:?}");
}

/// Mutant switches (xtask's mutants::schemata) are written into the mutation run's scratch copy
/// only: no source a build of the project compiles reads the switch, so no defect can be turned
/// on outside a mutation run.
#[test]
fn the_project_sources_carry_no_mutant_switch() {
    let mut pending: Vec<PathBuf> =
        ["contract", "gateway", "ledger", "generator", "providers", "generated", "templates"]
            .map(|f| root().join(f))
            .into();
    let mut files = Vec::new();
    while let Some(path) = pending.pop() {
        if path.is_dir() {
            pending.extend(std::fs::read_dir(&path).unwrap().flatten().map(|entry| entry.path()));
        } else {
            files.push(path);
        }
    }
    let found: Vec<String> = files
        .into_iter()
        .filter(|path| std::fs::read_to_string(path).unwrap_or_default().contains("CONFORMANCE_MUTANT"))
        .map(|path| relative(&path))
        .collect();
    assert!(found.is_empty(), "these sources read the mutant switch: {found:?}");
}

#[test]
fn every_generated_file_carries_its_header() {
    let mut files = rust_files(&root().join("generated"));
    files.push(root().join("generated/Cargo.toml"));
    files.push(root().join("ledger/LEDGER.md"));
    files.push(root().join("ledger/LEDGER.svg"));
    files.push(root().join("ledger/MUTANTS.md"));
    let missing: Vec<String> = files
        .iter()
        .filter(|file| {
            let first = std::fs::read_to_string(file).unwrap().lines().next().unwrap_or_default().to_owned();
            !["// @generated", "# @generated", "<!-- @generated"].iter().any(|header| first.starts_with(header))
        })
        .map(|file| relative(file))
        .collect();
    assert!(missing.is_empty(), "generated files without an @generated first line: {missing:?}");
}

/// The `localhost/conformance-…` image names in `text`.
fn stand_in_names(text: &str) -> Vec<String> {
    text.split(|c: char| c.is_whitespace() || "\"'`=(),;".contains(c))
        .filter(|word| word.starts_with("localhost/conformance-"))
        .map(|word| word.trim_end_matches(['.', ':']).to_owned())
        .collect()
}

#[test]
fn every_stand_in_the_scripts_and_docs_name_is_one_brokers_images_builds() {
    let built: Vec<&str> = contract::brokers::all().iter().map(|b| b.image.stand_in.as_str()).collect();
    let mut unbuilt = Vec::new();
    for path in [".ci/run", ".ci/broad", "docs/BROKERS.md", "xtask/tests/it/main.rs"] {
        for name in stand_in_names(&std::fs::read_to_string(root().join(path)).unwrap()) {
            if !built.contains(&name.as_str()) && !name.starts_with("localhost/conformance-base:") {
                unbuilt.push(format!("{path}: {name}"));
            }
        }
    }
    assert!(unbuilt.is_empty(), "stand-ins no providers/brokers/*/broker.toml builds: {unbuilt:?}");
}

#[test]
fn every_version_a_broker_file_states_is_the_one_its_pin_file_fetches() {
    let mut stale = Vec::new();
    for broker in contract::brokers::all() {
        let pins = broker.pin.iter().chain(broker.implementations.iter().filter_map(|other| other.pin.as_ref()));
        for pin in pins {
            let text = std::fs::read_to_string(root().join("providers/brokers").join(&pin.file)).unwrap();
            if !text.lines().any(|line| line.trim() == pin.line) {
                stale.push(format!(
                    "providers/brokers/{}/broker.toml: {} has no line {:?}",
                    broker.folder, pin.file, pin.line
                ));
            }
        }
    }
    assert!(stale.is_empty(), "{}", stale.join("\n"));
}

/// The workspace's hand-written crates (`generated` is rendered, one root per test binary).
const CRATES: [&str; 6] = ["contract", "gateway", "ledger", "generator", "providers", "xtask"];

#[test]
fn no_module_imports_a_sibling_that_imports_it_back() {
    let found: Vec<String> = CRATES
        .iter()
        .flat_map(|krate| {
            imports::cycles(&root().join(krate).join("src")).into_iter().map(move |c| format!("{krate}: {c}"))
        })
        .collect();
    assert!(
        found.is_empty(),
        "import cycles between modules (move what both need into a module of its own):\n{}",
        found.join("\n")
    );
}

#[test]
fn the_import_check_finds_a_cycle_made_on_purpose() {
    let src = tempfile::tempdir().unwrap();
    let write = |path: &str, text: &str| {
        let path = src.path().join(path);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    };
    write("lib.rs", "mod a; mod b; mod c; mod d;\n");
    // a -> b through a nested module and a use group; b -> a through super; a child's use of its
    // parent (d::e -> d) and a test module's `super::*` are containment, never a cycle.
    write("a.rs", "use crate::{b::inner::X, c};\n");
    write("b/mod.rs", "pub mod inner;\n");
    write("b/inner.rs", "pub struct X;\nfn f() { super::super::a::g(); }\n");
    write("c.rs", "#[cfg(test)]\nmod tests { use super::*; }\n");
    write("d/mod.rs", "mod e; pub use e::Y;\n");
    write("d/e.rs", "pub struct Y(super::Z);\n");
    let cycles = imports::cycles(src.path());
    assert_eq!(cycles.len(), 1, "{cycles:?}");
    assert!(cycles[0].starts_with("a -> b -> a (imports at "), "{cycles:?}");
    assert!(cycles[0].contains("a.rs:1") && cycles[0].contains("inner.rs:2"), "{cycles:?}");
}
