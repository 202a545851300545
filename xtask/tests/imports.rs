//! The import graph between a crate's modules, and its cycles.
//!
//! A module is a file (`src/a/b.rs` or `src/a/b/mod.rs` is `a::b`; inline `mod`s belong to their
//! file). A path in a file (`use crate::a::X`, `super::b::f()`, `self::c`) is an import of the
//! longest module it names. Imports between a module and its ancestors are containment, not
//! layering (a parent declares and re-exports its children, a child uses its parent's items), so
//! they are left out; any other import is read as one between the two siblings under the
//! modules' nearest common ancestor: `a::x` importing `b::y` is `a` importing `b`. A cycle among
//! siblings is what the tidy test refuses.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use syn::visit::Visit;

/// A module's path from the crate root (`[]` is the root).
type Module = Vec<String>;

/// One import between siblings: where it is written, for the message.
#[derive(Debug, Clone)]
struct Edge {
    from: Module,
    to: Module,
    at: String,
}

/// The cycles among sibling modules of the crate whose sources are under `src`, each as
/// `a -> b -> a` with the file and line of every import in it.
pub fn cycles(src: &Path) -> Vec<String> {
    let files = module_files(src);
    let modules: BTreeSet<Module> = files.keys().cloned().collect();
    let mut edges: BTreeMap<(Module, Module), String> = BTreeMap::new();
    for (module, file) in &files {
        let text = std::fs::read_to_string(file).unwrap();
        let syntax = syn::parse_file(&text).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        let mut collector =
            Collector { module, modules: &modules, inline_depth: 0, prefix: Vec::new(), found: Vec::new() };
        collector.visit_file(&syntax);
        for (target, line) in collector.found {
            if let Some(edge) = sibling_edge(module, &target) {
                edges.entry((edge.from, edge.to)).or_insert_with(|| format!("{}:{line}", file.display()));
            }
        }
    }
    let edges: Vec<Edge> = edges.into_iter().map(|((from, to), at)| Edge { from, to, at }).collect();
    find_cycles(&edges)
}

/// Every module of the crate under `src`, with its file.
fn module_files(src: &Path) -> BTreeMap<Module, PathBuf> {
    let mut files = BTreeMap::new();
    let mut pending = vec![src.to_path_buf()];
    while let Some(dir) = pending.pop() {
        for entry in std::fs::read_dir(&dir).unwrap().flatten() {
            let path = entry.path();
            if path.is_dir() {
                pending.push(path);
                continue;
            }
            if path.extension().is_none_or(|e| e != "rs") {
                continue;
            }
            let relative = path.strip_prefix(src).unwrap().with_extension("");
            let mut module: Module = relative.iter().map(|part| part.to_string_lossy().into_owned()).collect();
            if matches!(module.last().map(String::as_str), Some("mod" | "lib" | "main")) {
                module.pop();
            }
            files.insert(module, path);
        }
    }
    files
}

/// Walks a file's items and paths, collecting the modules its paths name.
struct Collector<'a> {
    module: &'a Module,
    modules: &'a BTreeSet<Module>,
    /// How deep inside inline `mod { }` blocks the walk is (`super` first leaves those).
    inline_depth: usize,
    /// The segments of the `use` tree around the walk.
    prefix: Vec<String>,
    found: Vec<(Module, usize)>,
}

impl Collector<'_> {
    /// The module `segments` name from this file, if they start at `crate`, `super` or `self`
    /// (or at a child of this module, as a 2018 `use` may).
    fn resolve(&self, segments: &[String]) -> Option<Module> {
        let (mut base, rest): (Module, &[String]) = match segments.first().map(String::as_str) {
            Some("crate") => (Vec::new(), &segments[1..]),
            Some("self") => (self.module.clone(), &segments[1..]),
            Some("super") => {
                let supers = segments.iter().take_while(|s| *s == "super").count();
                let up = supers.saturating_sub(self.inline_depth);
                let keep = self.module.len().checked_sub(up)?;
                (self.module[..keep].to_vec(), &segments[supers..])
            }
            Some(first) => {
                let mut child = self.module.clone();
                child.push(first.to_owned());
                if !self.modules.contains(&child) {
                    return None;
                }
                (self.module.clone(), segments)
            }
            None => return None,
        };
        for segment in rest {
            base.push(segment.clone());
            if !self.modules.contains(&base) {
                base.pop();
                break;
            }
        }
        Some(base)
    }

    fn record(&mut self, segments: &[String], line: usize) {
        if let Some(target) = self.resolve(segments) {
            self.found.push((target, line));
        }
    }
}

impl<'ast> Visit<'ast> for Collector<'_> {
    fn visit_item_mod(&mut self, item: &'ast syn::ItemMod) {
        if item.content.is_some() {
            self.inline_depth += 1;
            syn::visit::visit_item_mod(self, item);
            self.inline_depth -= 1;
        }
    }

    fn visit_use_tree(&mut self, tree: &'ast syn::UseTree) {
        match tree {
            syn::UseTree::Path(path) => {
                self.prefix.push(path.ident.to_string());
                self.visit_use_tree(&path.tree);
                self.prefix.pop();
            }
            syn::UseTree::Name(name) => {
                let mut segments = self.prefix.clone();
                segments.push(name.ident.to_string());
                self.record(&segments, name.ident.span().start().line);
            }
            syn::UseTree::Rename(rename) => {
                let mut segments = self.prefix.clone();
                segments.push(rename.ident.to_string());
                self.record(&segments, rename.ident.span().start().line);
            }
            syn::UseTree::Glob(glob) => {
                let segments = self.prefix.clone();
                self.record(&segments, glob.star_token.spans[0].start().line);
            }
            syn::UseTree::Group(group) => group.items.iter().for_each(|item| self.visit_use_tree(item)),
        }
    }

    fn visit_path(&mut self, path: &'ast syn::Path) {
        let segments: Vec<String> = path.segments.iter().map(|s| s.ident.to_string()).collect();
        if let Some(first) = path.segments.first() {
            self.record(&segments, first.ident.span().start().line);
        }
        syn::visit::visit_path(self, path);
    }
}

/// `from` importing `to`, as an import between the siblings under their nearest common
/// ancestor; none when one contains the other.
fn sibling_edge(from: &Module, to: &Module) -> Option<Edge> {
    let common = from.iter().zip(to).take_while(|(a, b)| a == b).count();
    if common == from.len() || common == to.len() {
        return None;
    }
    Some(Edge { from: from[..=common].to_vec(), to: to[..=common].to_vec(), at: String::new() })
}

/// Every elementary cycle's first appearance, found by a depth-first walk from each module.
fn find_cycles(edges: &[Edge]) -> Vec<String> {
    let name = |module: &Module| if module.is_empty() { "crate".to_owned() } else { module.join("::") };
    let mut found = BTreeSet::new();
    let starts: BTreeSet<&Module> = edges.iter().map(|e| &e.from).collect();
    for start in starts {
        let mut stack: Vec<(&Module, Vec<&Edge>)> = vec![(start, Vec::new())];
        while let Some((at, path)) = stack.pop() {
            for edge in edges.iter().filter(|e| &e.from == at) {
                if &edge.to == start {
                    let mut cycle = path.clone();
                    cycle.push(edge);
                    // One spelling per cycle: rotated to start at its least module.
                    let least = cycle.iter().enumerate().min_by_key(|(_, e)| &e.from).map(|(i, _)| i).unwrap();
                    cycle.rotate_left(least);
                    let names: Vec<String> =
                        cycle.iter().map(|e| name(&e.from)).chain([name(&cycle[0].from)]).collect();
                    let places: Vec<&str> = cycle.iter().map(|e| e.at.as_str()).collect();
                    found.insert(format!("{} (imports at {})", names.join(" -> "), places.join(", ")));
                } else if !path.iter().any(|e| e.from == edge.to) && edge.to > *start {
                    let mut next = path.clone();
                    next.push(edge);
                    stack.push((&edge.to, next));
                }
            }
        }
    }
    found.into_iter().collect()
}
