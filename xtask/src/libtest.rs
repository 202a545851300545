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
}
