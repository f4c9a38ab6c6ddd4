//! The lake's maintenance and versioning statements, rewritten into calls of
//! the lake table functions (one implementation per operation):
//!
//! ```sql
//! OPTIMIZE t;                                  -- lake_optimize('t'): compact, or
//!                                              -- cluster if t has a CLUSTER BY
//! OPTIMIZE t ZORDER BY (x, y);                 -- lake_cluster('t', 'zorder', 'x, y')
//! OPTIMIZE t HILBERT BY (ts / 3600, region);
//! ALTER TABLE t CLUSTER BY HILBERT (x, y);     -- remembered; OPTIMIZE t applies it
//! ALTER TABLE t CLUSTER BY NONE;
//! ALTER TABLE t CREATE TAG v1 [AS OF VERSION 3];
//! ALTER TABLE t DROP TAG v1;
//! ALTER TABLE t CREATE BRANCH dev [AS OF VERSION 3];
//! ALTER TABLE t MERGE BRANCH dev;
//! ALTER TABLE t DROP BRANCH dev;
//! VACUUM t RETAIN 24 HOURS [DRY RUN];          -- lake_vacuum('t', '24', 'false')
//! VACUUM t DRY RUN;                            -- 7 days' retention
//! VACUUM t;                                    -- PostgreSQL's form: a heap table
//!                                              -- or a lake table, 7 days' retention
//! ```

use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
use datafusion::sql::sqlparser::tokenizer::{Token, Tokenizer};
use zyron_common::{Result, SqlState, ZyronError};

/// How long VACUUM keeps unreferenced files of a lake table unless `RETAIN`
/// says otherwise: 7 days, as Delta Lake's default.
pub const DEFAULT_VACUUM_RETAIN_HOURS: i64 = 7 * 24;

/// A lake statement, as the query that carries it out.
#[derive(Debug, Clone, PartialEq)]
pub enum LakeStatement {
    /// A query whose rows are the statement's result (OPTIMIZE's figures).
    Query(String),
    /// A query run for its effect; the client gets `tag`.
    Command { query: String, tag: &'static str },
}

/// The lake statement `sql` is, if it is one (`None` for anything else,
/// which the SQL parser then reads). Errors are for statements that are
/// recognisably lake statements but malformed.
pub fn parse(sql: &str) -> Option<Result<LakeStatement>> {
    if !may_be_lake_statement(sql) {
        return None;
    }
    let text = sql.trim().trim_end_matches(';').trim_end();
    // One statement only: in `OPTIMIZE t ZORDER BY (x); DELETE ...` the
    // keys must not run on into the next statement.
    if text.contains(';') {
        return None;
    }
    // Everything from the first parenthesis on is a list of keys.
    let (head, keys) = match text.find('(') {
        Some(i) => (&text[..i], Some(&text[i..])),
        None => (text, None),
    };
    let words = words(head)?;
    let upper: Vec<String> = words.iter().map(|w| w.to_ascii_uppercase()).collect();
    let upper: Vec<&str> = upper.iter().map(String::as_str).collect();
    let statement = match upper.as_slice() {
        ["OPTIMIZE", _] if keys.is_none() => {
            Ok(LakeStatement::Query(call("lake_optimize", &[&words[1]])))
        }
        ["OPTIMIZE", _, curve @ ("ZORDER" | "HILBERT"), "BY"] => keys_of(keys).map(|keys| {
            let curve = curve.to_ascii_lowercase();
            LakeStatement::Query(call("lake_cluster", &[&words[1], &curve, &keys]))
        }),
        ["OPTIMIZE", ..] => Err(syntax(
            "expected OPTIMIZE <table> [ZORDER BY (<keys>) | HILBERT BY (<keys>)]",
        )),
        ["ALTER", "TABLE", _, rest @ ..] => alter(&words[2], rest, &words[3..], keys)?,
        ["VACUUM", ..] if keys.is_none() => {
            vacuum_clauses(&words[1..])?.map(|(table, hours, dry_run)| {
                let (hours, dry_run) = (hours.to_string(), dry_run.to_string());
                LakeStatement::Query(call("lake_vacuum", &[&table, &hours, &dry_run]))
            })
        }
        _ => return None,
    };
    Some(statement)
}

/// Whether `sql` begins with a word a lake statement begins with, or with a comment. Every
/// statement passes here, and most are not lake statements: this spares them the tokenizer.
fn may_be_lake_statement(sql: &str) -> bool {
    let text = sql.trim_start();
    if text.starts_with("--") || text.starts_with("/*") {
        return true;
    }
    let first = text
        .split(|c: char| !c.is_ascii_alphabetic())
        .next()
        .unwrap_or_default();
    ["optimize", "alter", "vacuum"]
        .iter()
        .any(|word| first.eq_ignore_ascii_case(word))
}

/// `ALTER TABLE <table> ...` forms that are lake statements.
fn alter(
    table: &str,
    upper: &[&str],
    words: &[String],
    keys: Option<&str>,
) -> Option<Result<LakeStatement>> {
    let command = |name: &str, args: &[&str]| {
        let mut all = vec![table];
        all.extend_from_slice(args);
        Ok(LakeStatement::Command {
            query: call(name, &all),
            tag: "ALTER TABLE",
        })
    };
    let version = |rest: &[&str], i: usize| -> Result<Option<String>> {
        match rest {
            [] => Ok(None),
            ["AS", "OF", "VERSION", v] if v.parse::<u64>().is_ok() => Ok(Some(words[i].clone())),
            _ => Err(syntax("expected AS OF VERSION <number>")),
        }
    };
    Some(match upper {
        ["CLUSTER", "BY", "NONE"] => command("lake_cluster_by", &["none"]),
        ["CLUSTER", "BY", curve @ ("ZORDER" | "HILBERT")] => keys_of(keys)
            .and_then(|keys| command("lake_cluster_by", &[&curve.to_ascii_lowercase(), &keys])),
        ["CLUSTER", "BY"] => {
            keys_of(keys).and_then(|keys| command("lake_cluster_by", &["hilbert", &keys]))
        }
        ["CREATE", kind @ ("TAG" | "BRANCH"), _, rest @ ..] if keys.is_none() => {
            let function = match *kind {
                "TAG" => "lake_tag",
                _ => "lake_branch",
            };
            version(rest, 6).and_then(|v| match v {
                Some(v) => command(function, &[&words[2], &v]),
                None => command(function, &[&words[2]]),
            })
        }
        ["DROP", "TAG", _] => command("lake_drop_tag", &[&words[2]]),
        ["DROP", "BRANCH", _] => command("lake_drop_branch", &[&words[2]]),
        ["MERGE", "BRANCH", _] => command("lake_merge", &[&words[2]]),
        _ => return None,
    })
}

/// `VACUUM` with a lake table's clauses: `VACUUM t [RETAIN n HOURS] [DRY RUN]`.
/// `None` when `words` (after VACUUM) have neither clause: then it is
/// PostgreSQL's VACUUM, whose tables may still be lake tables.
fn vacuum_clauses(words: &[String]) -> Option<Result<(String, i64, bool)>> {
    let upper: Vec<String> = words.iter().map(|w| w.to_ascii_uppercase()).collect();
    let upper: Vec<&str> = upper.iter().map(String::as_str).collect();
    let parsed = match upper.as_slice() {
        [_, "RETAIN", hours, "HOURS"] => hours_of(hours).map(|h| (h, false)),
        [_, "RETAIN", hours, "HOURS", "DRY", "RUN"] => hours_of(hours).map(|h| (h, true)),
        [_, "DRY", "RUN"] => Ok((DEFAULT_VACUUM_RETAIN_HOURS, true)),
        [_, rest @ ..] if rest.contains(&"RETAIN") || rest.contains(&"DRY") => Err(syntax(
            "expected VACUUM <table> [RETAIN <hours> HOURS] [DRY RUN]",
        )),
        _ => return None,
    };
    Some(parsed.map(|(hours, dry_run)| (words[0].clone(), hours, dry_run)))
}

fn hours_of(text: &str) -> Result<i64> {
    text.parse().map_err(|_| {
        ZyronError::new(
            SqlState::INVALID_PARAMETER_VALUE,
            format!("RETAIN takes a whole number of hours, not {text:?}"),
        )
    })
}

/// `VACUUM t`'s query for a lake table: the default retention.
pub fn default_vacuum(table: &str) -> String {
    call(
        "lake_vacuum",
        &[table, &DEFAULT_VACUUM_RETAIN_HOURS.to_string(), "false"],
    )
}

/// The query that runs lake table function `name` on `args`: a
/// `SELECT * FROM name('a', 'b')`, each argument a quoted literal.
pub fn call(name: &str, args: &[&str]) -> String {
    let args: Vec<String> = args
        .iter()
        .map(|a| format!("'{}'", a.replace('\'', "''")))
        .collect();
    format!("SELECT * FROM {name}({})", args.join(", "))
}

/// The words of `text` (identifiers folded to lower case unless quoted,
/// keywords and numbers as written); `None` if it holds anything else.
pub fn words(text: &str) -> Option<Vec<String>> {
    let tokens = Tokenizer::new(&PostgreSqlDialect {}, text)
        .tokenize()
        .ok()?;
    tokens
        .into_iter()
        .filter(|t| !matches!(t, Token::Whitespace(_)))
        .map(|t| match t {
            Token::Word(w) if w.quote_style.is_some() => Some(w.value),
            Token::Word(w) => Some(w.value.to_ascii_lowercase()),
            Token::Number(n, _) => Some(n),
            _ => None,
        })
        .collect()
}

/// The keys inside `(...)`, as written.
fn keys_of(keys: Option<&str>) -> Result<String> {
    keys.and_then(|k| k.strip_prefix('('))
        .and_then(|k| k.strip_suffix(')'))
        .map(|k| k.trim().to_owned())
        .filter(|k| !k.is_empty())
        .ok_or_else(|| syntax("expected a parenthesized list of clustering keys"))
}

fn syntax(message: &str) -> ZyronError {
    ZyronError::new(SqlState::SYNTAX_ERROR, message)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn query(sql: &str) -> String {
        match parse(sql) {
            Some(Ok(LakeStatement::Query(q) | LakeStatement::Command { query: q, .. })) => q,
            other => panic!("{sql}: {other:?}"),
        }
    }

    #[test]
    fn statements_become_function_calls() {
        assert_eq!(
            query("OPTIMIZE events;"),
            "SELECT * FROM lake_optimize('events')"
        );
        assert_eq!(
            query("optimize Events zorder by (x, y / 10)"),
            "SELECT * FROM lake_cluster('events', 'zorder', 'x, y / 10')"
        );
        assert_eq!(
            query("ALTER TABLE t CLUSTER BY (lower(name), 'a''b')"),
            "SELECT * FROM lake_cluster_by('t', 'hilbert', 'lower(name), ''a''''b''')"
        );
        assert_eq!(
            query("ALTER TABLE t CREATE TAG v1 AS OF VERSION 3"),
            "SELECT * FROM lake_tag('t', 'v1', '3')"
        );
        assert_eq!(
            query("alter table t create branch \"Dev\""),
            "SELECT * FROM lake_branch('t', 'Dev')"
        );
        assert_eq!(
            query("ALTER TABLE t MERGE BRANCH dev"),
            "SELECT * FROM lake_merge('t', 'dev')"
        );
        assert_eq!(
            query("ALTER TABLE t DROP TAG v1"),
            "SELECT * FROM lake_drop_tag('t', 'v1')"
        );
        assert_eq!(
            query("VACUUM t RETAIN 0 HOURS DRY RUN"),
            "SELECT * FROM lake_vacuum('t', '0', 'true')"
        );
        // The first-word check lets leading whitespace and comments through.
        assert_eq!(
            query("  /* nightly */ -- compact\n OPTIMIZE events"),
            "SELECT * FROM lake_optimize('events')"
        );
        assert_eq!(
            query("\n\tVacuum t RETAIN 1 HOURS"),
            "SELECT * FROM lake_vacuum('t', '1', 'false')"
        );
    }

    #[test]
    fn other_statements_are_left_to_the_parser() {
        for sql in [
            "ALTER TABLE t ADD PRIMARY KEY (id)",
            "ALTER TABLE t ADD COLUMN x INT",
            "SELECT 1",
            "OPTIMIZE t ZORDER BY (x); DELETE FROM t",
            "VACUUM retain",
            "VACUUM",
            "VACUUM t",
            "VACUUM ANALYZE t",
            "OPTIMIZED t",
            "altered t",
            "UPDATE optimize SET x = 1",
        ] {
            assert_eq!(parse(sql), None, "{sql}");
        }
    }

    #[test]
    fn malformed_lake_statements_are_syntax_errors() {
        for sql in [
            "OPTIMIZE t ZORDER BY ()",
            "OPTIMIZE t HILBERT BY x",
            "ALTER TABLE t CREATE TAG v1 AS OF VERSION x",
            "VACUUM t RETAIN 3",
        ] {
            let error = parse(sql).expect(sql).expect_err(sql);
            assert_eq!(error.sqlstate(), SqlState::SYNTAX_ERROR, "{sql}");
        }
        let error = parse("VACUUM t RETAIN x HOURS").unwrap().unwrap_err();
        assert_eq!(error.sqlstate(), SqlState::INVALID_PARAMETER_VALUE);
    }

    #[test]
    fn vacuum_clauses_are_read() {
        let w = |s: &str| words(s).unwrap();
        assert_eq!(
            vacuum_clauses(&w("t RETAIN 0 HOURS DRY RUN"))
                .unwrap()
                .unwrap(),
            ("t".into(), 0, true)
        );
        assert_eq!(
            vacuum_clauses(&w("t DRY RUN")).unwrap().unwrap(),
            ("t".into(), DEFAULT_VACUUM_RETAIN_HOURS, true)
        );
        assert!(vacuum_clauses(&w("t")).is_none());
        assert!(vacuum_clauses(&w("t RETAIN x HOURS")).unwrap().is_err());
    }
}
