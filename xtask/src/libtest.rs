//! Reads libtest's plain output: one `test <name> ... <result>` line per finished test, and the
//! `test result:` summary that tells a complete run from a crashed one.

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TestResult {
    Ok,
    Failed,
    Ignored,
}

/// `test memory::reactor::fr_2::name ... ok` → the name and result.
pub fn parse_result_line(line: &str) -> Option<(&str, TestResult)> {
    let rest = line.strip_prefix("test ")?;
    let (name, outcome) = rest.split_once(" ... ")?;
    let result = match outcome.trim() {
        "ok" => TestResult::Ok,
        "FAILED" => TestResult::Failed,
        outcome if outcome.starts_with("ignored") => TestResult::Ignored,
        _ => return None,
    };
    Some((name, result))
}

pub fn is_summary_line(line: &str) -> bool {
    line.starts_with("test result: ")
}

/// A generated test's path, `<configuration module>::<variant>::<fr_n|dc_n>::<function>`, as its parts.
pub fn cell_of(name: &str) -> Option<(&str, &str, ledger::Behaviour)> {
    let mut parts = name.split("::");
    let (module, variant, behaviour) = (parts.next()?, parts.next()?, parts.next()?);
    parts.next()?;
    Some((module, variant, ledger::Behaviour::from_module(behaviour)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn result_lines_parse_and_other_lines_do_not() {
        assert_eq!(
            parse_result_line("test memory::reactor::fr_2::x ... ok"),
            Some(("memory::reactor::fr_2::x", TestResult::Ok))
        );
        assert_eq!(parse_result_line("test a::b ... FAILED"), Some(("a::b", TestResult::Failed)));
        assert_eq!(parse_result_line("test a::b ... ignored, Deferred (#4: x)"), Some(("a::b", TestResult::Ignored)));
        assert_eq!(parse_result_line("running 24 tests"), None);
        assert_eq!(parse_result_line("test result: ok. 24 passed"), None);
        assert!(is_summary_line("test result: FAILED. 23 passed; 1 failed;"));
    }

    #[test]
    fn generated_test_paths_name_their_cell() {
        assert_eq!(
            cell_of("sqs_fifo::proactor::fr_23::always_defers"),
            Some(("sqs_fifo", "proactor", ledger::Behaviour::fr(23)))
        );
        assert_eq!(cell_of("kafka::reactor::dc_5::f"), Some(("kafka", "reactor", ledger::Behaviour::dc(5))));
        assert_eq!(cell_of("bespoke::lease_lapse"), None);
        assert_eq!(cell_of("a::reactor::fr_x::f"), None);
    }
}
