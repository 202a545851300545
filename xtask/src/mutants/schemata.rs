//! Mutant schemata (as mutmut and Stryker build them): every catalogued defect compiled into one
//! scratch build, each behind a switch the run sets, so a defect costs its cells' run and not a
//! rebuild of the gateway and every test binary. A patch is switched on the smallest part of it
//! that differs and is a whole expression (`(if on { new } else { old })`) or whole statements
//! (`if on { new } else { old }`); a patch with neither, or whose text an earlier switch changed,
//! leaves its mutant to a build of its own, as before. A patch the catalogue marks `inert` (it
//! only adds what healthy code never reaches, such as a field) stands unswitched. With the
//! switches off the code behaves as the healthy code: the healthy run is made on this same build.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use anyhow::{Context, Result};

use super::catalogue::Mutant;
use crate::runner::MUTANT_VARIABLE;

/// The scratch files with every switchable mutant behind its switch.
pub struct Schemata {
    /// Relative path -> the file's text with the switches in.
    pub files: BTreeMap<String, String>,
    /// The mutants compiled in, by id, each with the files its switches are in.
    pub switched: BTreeMap<String, BTreeSet<String>>,
    /// The mutants that need a build of their own, by id, with why.
    pub separate: BTreeMap<String, String>,
}

/// Switches in every mutant of `mutants` but those in `excluded` (id -> why).
pub fn render(root: &Path, mutants: &[&Mutant], excluded: &BTreeMap<String, String>) -> Result<Schemata> {
    let mut schemata = Schemata { files: BTreeMap::new(), switched: BTreeMap::new(), separate: excluded.clone() };
    let mut arms: Vec<(String, String)> = Vec::new();
    // The widest changes first: a narrower patch of the same text then finds it, once, in the
    // wider switch's healthy arm and nests its own switch there (only one mutant is ever on).
    // In the catalogue's order, a narrow switch (requeue-ignores-delay's `delay`) split the text
    // a wider patch (requeue-republishes-a-stale-count's statement) looks for, and the wider
    // mutant needed a build of its own.
    let mut mutants = mutants.to_vec();
    mutants.sort_by_key(|mutant| std::cmp::Reverse(widest_change(mutant)));
    for mutant in mutants {
        if excluded.contains_key(&mutant.id) {
            continue;
        }
        let mut files = schemata.files.clone();
        let arms_before = arms.len();
        let mut touched = BTreeSet::new();
        let mut refused = None;
        for patch in &mutant.patches {
            let text = match files.get(&patch.file) {
                Some(text) => text.clone(),
                None => std::fs::read_to_string(root.join(&patch.file))
                    .with_context(|| format!("mutant {}: cannot read {}", mutant.id, patch.file))?,
            };
            let mut found = text.match_indices(&patch.find);
            let (Some((at, _)), None) = (found.next(), found.next()) else {
                refused = Some(format!("its text in {} is also in another mutant's switch", patch.file));
                break;
            };
            if patch.inert {
                // What it adds no healthy code reaches: it stands unswitched.
                files.insert(patch.file.clone(), text.replacen(&patch.find, &patch.replace, 1));
                touched.insert(patch.file.clone());
                continue;
            }
            // The new code waits outside the text as a placeholder, so no later patch can find
            // (and switch) text that only a mutant runs.
            let arm = format!("__conformance_mutant_arm_{}__", arms.len());
            if in_const_fn(&text[..at]) {
                refused = Some(format!("its patch of {} is in a const fn, where no switch can be read", patch.file));
                break;
            }
            let Some((switched, new_code)) = switch(&text, at, &patch.find, &patch.replace, &mutant.id, &arm) else {
                refused = Some(format!("its patch of {} is no whole expression or statement", patch.file));
                break;
            };
            arms.push((arm, new_code));
            let mut new = text[..at].to_owned();
            new.push_str(&switched);
            new.push_str(&text[at + patch.find.len()..]);
            files.insert(patch.file.clone(), new);
            touched.insert(patch.file.clone());
        }
        match refused {
            Some(why) => {
                arms.truncate(arms_before);
                schemata.separate.insert(mutant.id.clone(), why);
            }
            None => {
                schemata.files = files;
                schemata.switched.insert(mutant.id.clone(), touched);
            }
        }
    }
    for text in schemata.files.values_mut() {
        for (arm, code) in &arms {
            *text = text.replace(arm.as_str(), code);
        }
    }
    Ok(schemata)
}

/// The longest stretch of text one of `mutant`'s patches changes (its find without what it
/// shares with its replacement at either end).
fn widest_change(mutant: &Mutant) -> usize {
    let changed = |find: &str, replace: &str| {
        let prefix = common_prefix(find, replace);
        find.len() - prefix - common_suffix(&find[prefix..], &replace[prefix..])
    };
    mutant.patches.iter().map(|patch| changed(&patch.find, &patch.replace)).max().unwrap_or(0)
}

/// Whether the function the text ends in is a `const fn` (a switch reads the environment).
fn in_const_fn(before: &str) -> bool {
    before.rfind("fn ").is_some_and(|at| before[..at].trim_end().ends_with("const"))
}

/// The test a switch makes: whether `id` is the mutant this process runs.
fn on(id: &str) -> String {
    format!("::std::env::var_os({MUTANT_VARIABLE:?}).is_some_and(|active| active == {id:?})")
}

/// `find` (found at byte `at` of `file`) with the part `replace` changes behind `id`'s switch
/// (the shortest differing middle that is a whole expression or whole statements in place), its
/// new code written as `arm`; and that new code.
fn switch(file: &str, at: usize, find: &str, replace: &str, id: &str, arm: &str) -> Option<(String, String)> {
    let prefix = common_prefix(find, replace);
    let suffix = common_suffix(&find[prefix..], &replace[prefix..]);
    let starts: Vec<usize> = (0..=prefix).rev().filter(|&p| find.is_char_boundary(p)).collect();
    let ends: Vec<usize> = (0..=suffix).rev().filter(|&s| find.is_char_boundary(find.len() - s)).collect();
    let mut candidates: Vec<(usize, usize)> = starts.iter().flat_map(|&p| ends.iter().map(move |&s| (p, s))).collect();
    // The least shrunk first: the switch holds as little shared text as it can.
    candidates.sort_by_key(|&(p, s)| (prefix - p) + (suffix - s));
    candidates.into_iter().find_map(|(p, s)| {
        let old = &find[p..find.len() - s];
        let new = &replace[p..replace.len() - s];
        let before = &file[..at + p];
        let after = &file[at + find.len() - s..];
        let fits = || {
            !takes_a_block(before)
                && ((is_value(old) && is_value(new) && starts_apart(before)) || expression_fits(before, after))
        };
        let middle = if is_expression(old) && is_expression(new) && fits() {
            format!("(if {} {{ {arm} }} else {{ {old} }})", on(id))
        } else if is_statements(old, true) && is_statements(new, false) && statement_fits(before) {
            format!("if {} {{\n{arm}\n}} else {{\n{old}\n}}\n", on(id))
        } else {
            return None;
        };
        Some((format!("{}{middle}{}", &find[..p], &find[find.len() - s..]), new.to_owned()))
    })
}

fn common_prefix(a: &str, b: &str) -> usize {
    a.char_indices().zip(b.chars()).take_while(|((_, x), y)| x == y).last().map_or(0, |((i, x), _)| i + x.len_utf8())
}

fn common_suffix(a: &str, b: &str) -> usize {
    a.chars().rev().zip(b.chars().rev()).take_while(|(x, y)| x == y).map(|(x, _)| x.len_utf8()).sum()
}

/// An expression that can be one arm of an `if` whose other arm is another such: not `let x = y`
/// (syn reads it as one, for `if let` chains), nor a closure or an `async` block, each a type of
/// its own that the other arm's never is.
fn is_expression(text: &str) -> bool {
    use syn::Expr;
    !text.trim().is_empty()
        && syn::parse_str::<Expr>(text).is_ok_and(|e| !matches!(e, Expr::Let(_) | Expr::Closure(_) | Expr::Async(_)))
}

/// A value no operator or method around it can split (a call, a method call, an `.await`, a `?`,
/// a literal, a block, …), and no place (a path, field or index) a `&mut` or `+=` could take:
/// in parentheses it means what it meant bare, wherever it stands.
fn is_value(text: &str) -> bool {
    use syn::Expr;
    matches!(
        syn::parse_str::<Expr>(text),
        Ok(Expr::Call(_)
            | Expr::MethodCall(_)
            | Expr::Await(_)
            | Expr::Try(_)
            | Expr::Macro(_)
            | Expr::Lit(_)
            | Expr::Paren(_)
            | Expr::Block(_)
            | Expr::If(_)
            | Expr::Match(_)
            | Expr::Tuple(_))
    )
}

/// Whole statements (or nothing): each ends in `;` or a block. The replaced side may not bind a
/// name (`let x = …`), since the code after it would lose the binding inside the switch.
fn is_statements(text: &str, old: bool) -> bool {
    let trimmed = text.trim();
    if trimmed.is_empty() {
        return true;
    }
    if !(trimmed.ends_with(';') || trimmed.ends_with('}')) {
        return false;
    }
    let Ok(block) = syn::parse_str::<syn::Block>(&format!("{{{text}}}")) else { return false };
    block.stmts.iter().all(|statement| match statement {
        syn::Stmt::Local(local) => !old || matches!(local.pat, syn::Pat::Wild(_)),
        syn::Stmt::Item(_) => false,
        syn::Stmt::Expr(expression, semicolon) => {
            semicolon.is_some()
                || matches!(
                    expression,
                    syn::Expr::If(_) | syn::Expr::Match(_) | syn::Expr::Block(_) | syn::Expr::Unsafe(_)
                )
        }
        syn::Stmt::Macro(_) => true,
    })
}

/// An expression in parentheses means what it meant bare only between these: an opening bracket,
/// a comma, an assignment, a match arm, a closure's parameters or a keyword before; a closing
/// bracket, a comma, a semicolon, a block's brace or a match arm after.
fn expression_fits(before: &str, after: &str) -> bool {
    let before = before.trim_end();
    let after = after.trim_start();
    let keyword = ["if", "match", "return", "while", "in"].iter().any(|word| {
        before.strip_suffix(word).is_some_and(|rest| !rest.ends_with(|c: char| c.is_alphanumeric() || c == '_'))
    });
    let assignment = before.ends_with('=')
        && !before.ends_with("==")
        && !before[..before.len() - 1].ends_with(['!', '<', '>', '+', '-', '*', '/', '%', '&', '|', '^']);
    let closure = before.ends_with('|')
        && before
            .lines()
            .last()
            .is_some_and(|line| ["async |", "move |", "= |", "(|", ", |"].iter().any(|head| line.contains(head)));
    let opens = before.ends_with(['(', '[', '{', ',', ';']) || before.ends_with("=>");
    let closes = after.starts_with([')', ']', '}', ',', ';', '{']) || after.starts_with("=>");
    (opens || keyword || assignment || closure) && closes
}

/// Whether what follows `before` starts an expression of its own: after a name, a closing
/// bracket, a `?`, a `.` or a `!`, a `(` would call or index what came before.
fn starts_apart(before: &str) -> bool {
    !before.trim_end().ends_with(|c: char| c.is_alphanumeric() || "_)]?.!>".contains(c))
}

/// Whether a keyword the text ends in takes a block, never a parenthesised expression.
fn takes_a_block(before: &str) -> bool {
    let before = before.trim_end();
    ["async", "move", "unsafe", "loop", "else", "const"].iter().any(|word| {
        before.strip_suffix(word).is_some_and(|rest| !rest.ends_with(|c: char| c.is_alphanumeric() || c == '_'))
    })
}

/// Statements may stand here: after a statement or a brace.
fn statement_fits(before: &str) -> bool {
    before.trim_end().ends_with([';', '{', '}'])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn switched(file: &str, find: &str, replace: &str) -> Option<String> {
        let at = file.find(find).unwrap();
        let (switched, new) = switch(file, at, find, replace, "m", "ARM")?;
        Some(format!("{}{}{}", &file[..at], switched.replace("ARM", &new), &file[at + find.len()..]))
    }

    const ON: &str = "::std::env::var_os(\"CONFORMANCE_MUTANT\").is_some_and(|active| active == \"m\")";

    #[test]
    fn the_switch_holds_only_the_expression_that_differs() {
        let file = "fn f() { self.settle(message, Some(delay), \"requeue\").await }";
        let out = switched(
            file,
            "self.settle(message, Some(delay), \"requeue\").await",
            "self.settle(message, Some(delay * 0), \"requeue\").await",
        );
        assert_eq!(
            out.unwrap(),
            format!("fn f() {{ self.settle(message, Some((if {ON} {{ delay * 0 }} else {{ delay }})), \"requeue\").await }}")
        );
    }

    #[test]
    fn an_operator_alone_grows_to_the_whole_comparison() {
        let file = "match c { Some(count) if count > 1 => {} }";
        let out = switched(file, "Some(count) if count > 1 => {", "Some(count) if count >= 1 => {").unwrap();
        assert!(
            out.contains(&format!("Some(count) if (if {ON} {{ count >= 1 }} else {{ count > 1 }}) => {{")),
            "{out}"
        );
    }

    #[test]
    fn a_part_that_would_bind_differently_in_parentheses_is_not_switched_alone() {
        // `a * b + c` -> `a * b - c`: `b + c` is an expression, but not one in `a * b + c`.
        let file = "fn f() -> u8 { a * b + c }";
        let out = switched(file, "a * b + c", "a * b - c").unwrap();
        assert!(out.contains(&format!("{{ (if {ON} {{ a * b - c }} else {{ a * b + c }}) }}")), "{out}");
    }

    #[test]
    fn statements_are_switched_as_statements() {
        let file = "fn f() {\n    settle(m)?;\n    publish(m);\n    Ok(())\n}";
        let out = switched(file, "settle(m)?;\n    publish(m);", "let _ = m;").unwrap();
        assert!(
            out.contains(&format!("if {ON} {{\nlet _ = m;\n}} else {{\nsettle(m)?;\n    publish(m);\n}}\n")),
            "{out}"
        );
    }

    #[test]
    fn an_argument_list_is_never_switched_apart_from_its_function() {
        let file = "async fn f() { let r = insert(t, q)\n    .await\n    .map_err(e); }";
        let out = switched(file, "insert(t, q)\n    .await", "insert(t, q).await.and(insert(t, q).await)").unwrap();
        assert!(out.contains(&format!("= (if {ON} {{ insert(t, q).await.and(insert(t, q).await) }} else {{ insert(t, q)\n    .await }})\n    .map_err(e)")), "{out}");
    }

    /// The project's catalogue renders to files that still parse as Rust, every mutant switched,
    /// and each switched patch's switch in its file.
    #[test]
    fn the_project_catalogue_renders_to_rust_with_every_mutant_accounted_for() {
        let root = crate::root();
        let manifest = generator::Manifest::load(&root.join(generator::MANIFEST), &root.join("templates")).unwrap();
        let catalogue = super::super::catalogue::Catalogue::load(&root, &manifest).unwrap();
        let all: Vec<&Mutant> = catalogue.mutants.iter().collect();
        let schemata = render(&root, &all, &BTreeMap::new()).unwrap();
        for (file, text) in &schemata.files {
            if let Err(error) = syn::parse_file(text) {
                panic!("{file} does not parse with the switches in: {error} at {:?}", error.span().start());
            }
        }
        for mutant in &all {
            match schemata.switched.get(&mutant.id) {
                Some(_) => {
                    // Every patch but an inert one is behind the mutant's switch in its file.
                    let switch = format!("active == {:?}", mutant.id);
                    for patch in mutant.patches.iter().filter(|patch| !patch.inert) {
                        assert!(schemata.files[&patch.file].contains(&switch), "{}: {}", mutant.id, patch.file);
                    }
                }
                None => assert!(schemata.separate.contains_key(&mutant.id), "{} is neither", mutant.id),
            }
        }
        // Every defect in the one build: one built alone costs a rebuild of every test binary
        // (minutes on the broker transports). Write its patch as a whole expression or
        // statements, or mark a patch that only adds what healthy code never reaches `inert`.
        assert!(schemata.separate.is_empty(), "built alone: {:#?}", schemata.separate);
    }

    #[test]
    fn a_replaced_binding_or_an_item_is_not_switched() {
        assert!(!is_statements("let x = 1;", true));
        assert!(is_statements("let _ = x;", true));
        assert!(is_statements("let x = 1; use_it(x);", false));
        assert!(!is_statements("fn lease() {}", false));
        assert_eq!(
            switched(
                "impl A {\n    type B = ();\n}",
                "impl A {\n    type B = ();",
                "impl A {\n    type B = ();\n    fn c() {}"
            ),
            None
        );
    }
}
