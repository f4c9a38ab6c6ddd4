//! Parses of point statements sent as plain SQL text, reused across their literals.
//!
//! A client in the simple query protocol (pgbench `-M simple`, most ORMs' autocommit
//! writes) sends the same statement again and again with other numbers in it:
//!
//! ```text
//! UPDATE pgbench_accounts SET abalance = abalance + -4127 WHERE aid = 80911;
//! UPDATE pgbench_accounts SET abalance = abalance + 2210 WHERE aid = 35612;
//! ```
//!
//! Parsing one (DataFusion's parser, then the PostgreSQL compatibility rewrites) and
//! checking its shape cost about a sixth of a point statement's CPU. Here a statement is
//! tokenized, its number and string literals are taken out to form a key, and a statement
//! parsed before under the same key is cloned with the new literals put back in the places
//! the old ones held.
//!
//! The result is the statement the parser would have produced, because the parser never
//! branches on a literal's value: two texts with the same key differ only in the values of
//! literal tokens, and each such token becomes one [`Value`] in the tree. That one-to-one
//! correspondence is checked when a statement is remembered (its values, in visiting order,
//! must be its literal tokens in text order), so a statement whose literals the parser or the
//! compatibility rewrites change, merge or add is never remembered. The literals carry their
//! new positions; other nodes keep the positions of the text first parsed, which only
//! DataFusion's diagnostics read. Only point statements
//! ([`crate::heap::is_point_shape`]) are remembered: the OLTP statements this pays for.
//! Nothing here depends on the catalog, so no DDL invalidates an entry.

use std::collections::HashMap;
use std::fmt::Write;
use std::ops::ControlFlow;

use datafusion::sql::parser::Statement as DfStatement;
use datafusion::sql::sqlparser::ast::{Value, ValueWithSpan, Visit, VisitMut, Visitor, VisitorMut};
use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
use datafusion::sql::sqlparser::tokenizer::{Token, TokenWithSpan, Tokenizer};

/// Statements one session remembers; past this the cache starts again empty (a session
/// that sends this many shapes gains little from it).
const MAX_ENTRIES: usize = 256;

/// Literals a statement may have and still be remembered (an `INSERT` of many rows is
/// cheaper to parse than to match value by value).
const MAX_LITERALS: usize = 64;

/// SQL text with its literals taken out, and the literals.
pub struct Template {
    key: String,
    literals: Vec<TokenWithSpan>,
}

impl Template {
    /// The template of `sql`, if it is one statement without parameters; `None` for text
    /// that does not tokenize (the parser reports the error).
    pub fn of(sql: &str) -> Option<Template> {
        // Sized up front: growing the token list one doubling at a time was a
        // tenth of a simple-protocol statement's allocations. A token takes at
        // least one byte of text, and OLTP statements average about three.
        let mut tokens = Vec::with_capacity(sql.len() / 2 + 8);
        Tokenizer::new(&PostgreSqlDialect {}, sql)
            .tokenize_with_location_into_buf(&mut tokens)
            .ok()?;
        let mut key = String::with_capacity(sql.len());
        let mut literals = Vec::new();
        let mut ended = false;
        for token in tokens {
            match &token.token {
                // Whitespace and comments matter only as separators.
                Token::Whitespace(_) => key.push(' '),
                Token::SemiColon => ended = true,
                // Anything after the first statement: a script, parsed as such.
                _ if ended => return None,
                Token::Placeholder(_) => return None,
                Token::Number(..) => {
                    key.push_str("\u{1}n");
                    literals.push(token);
                }
                Token::SingleQuotedString(_) => {
                    key.push_str("\u{1}s");
                    literals.push(token);
                }
                other => {
                    // `\u{2}` keeps adjacent tokens apart (`a` `b` from `ab`).
                    let _ = write!(key, "{other}\u{2}");
                }
            }
        }
        (literals.len() <= MAX_LITERALS).then_some(Template { key, literals })
    }
}

/// One session's remembered point statements, by [`Template`] key.
#[derive(Default)]
pub struct ParseCache {
    entries: HashMap<String, DfStatement>,
}

impl ParseCache {
    /// The statement `template`'s text parses to, if one of its shape was remembered.
    pub fn get(&self, template: &Template) -> Option<DfStatement> {
        let mut statement = self.entries.get(&template.key)?.clone();
        let mut put = PutLiterals {
            literals: &template.literals,
            next: 0,
        };
        let DfStatement::Statement(inner) = &mut statement else {
            return None;
        };
        let filled = VisitMut::visit(inner.as_mut(), &mut put).is_continue();
        // Same key, so the same tree: every literal has its place. Were one left over, the
        // tree would not be the text's, so the caller parses instead.
        (filled && put.next == template.literals.len()).then_some(statement)
    }

    /// Remembers `statement`, which `template`'s text parsed to, if each of its literal
    /// values is one of the template's literal tokens, in order.
    pub fn remember(&mut self, template: Template, statement: &DfStatement) {
        let DfStatement::Statement(inner) = statement else {
            return;
        };
        let mut values = CollectLiterals(Vec::new());
        let _ = Visit::visit(inner.as_ref(), &mut values);
        let matches = values.0.len() == template.literals.len()
            && values
                .0
                .iter()
                .zip(&template.literals)
                .all(|(value, token)| literal_value(&token.token).as_ref() == Some(value));
        if !matches {
            return;
        }
        if self.entries.len() >= MAX_ENTRIES {
            self.entries.clear();
        }
        self.entries.insert(template.key, statement.clone());
    }
}

/// The value a literal token becomes.
fn literal_value(token: &Token) -> Option<Value> {
    match token {
        Token::Number(digits, long) => Some(Value::Number(digits.clone(), *long)),
        Token::SingleQuotedString(s) => Some(Value::SingleQuotedString(s.clone())),
        _ => None,
    }
}

/// Whether `value` is of a kind [`Template::of`] takes out.
fn is_literal(value: &Value) -> bool {
    matches!(value, Value::Number(..) | Value::SingleQuotedString(_))
}

/// The tree's literal values, in visiting order.
struct CollectLiterals(Vec<Value>);

impl Visitor for CollectLiterals {
    type Break = ();
    fn pre_visit_value(&mut self, value: &ValueWithSpan) -> ControlFlow<()> {
        if is_literal(&value.value) {
            self.0.push(value.value.clone());
        }
        ControlFlow::Continue(())
    }
}

/// Replaces the tree's literal values, in visiting order, with `literals`.
struct PutLiterals<'a> {
    literals: &'a [TokenWithSpan],
    next: usize,
}

impl VisitorMut for PutLiterals<'_> {
    type Break = ();
    fn pre_visit_value(&mut self, value: &mut ValueWithSpan) -> ControlFlow<()> {
        if !is_literal(&value.value) {
            return ControlFlow::Continue(());
        }
        let Some(token) = self.literals.get(self.next) else {
            return ControlFlow::Break(());
        };
        if let Some(literal) = literal_value(&token.token) {
            value.value = literal;
            value.span = token.span;
        }
        self.next += 1;
        ControlFlow::Continue(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::statement::{Parsed, parse};

    fn parse_one(sql: &str) -> DfStatement {
        match parse(sql).unwrap().as_slice() {
            [Parsed::DataFusion(statement)] => statement.clone(),
            other => panic!("{sql}: not one DataFusion statement: {other:?}"),
        }
    }

    /// Remembers `first`, then checks that each of `others` comes out of the cache as the
    /// parser's own tree for it (same tree, same text), literal spans included.
    fn assert_reused(first: &str, others: &[&str]) {
        let mut cache = ParseCache::default();
        cache.remember(Template::of(first).unwrap(), &parse_one(first));
        for sql in others {
            let cached = cache
                .get(&Template::of(sql).unwrap())
                .unwrap_or_else(|| panic!("{sql}: not found after {first}"));
            let parsed = parse_one(sql);
            assert_eq!(cached, parsed, "{sql}");
            assert_eq!(cached.to_string(), parsed.to_string(), "{sql}");
            let spans = |s: &DfStatement| {
                let mut spans = Vec::new();
                if let DfStatement::Statement(inner) = s {
                    let _ =
                        datafusion::sql::sqlparser::ast::visit_expressions(inner.as_ref(), |e| {
                            match e {
                                datafusion::sql::sqlparser::ast::Expr::Value(v)
                                    if is_literal(&v.value) =>
                                {
                                    spans.push(v.span)
                                }
                                _ => {}
                            }
                            ControlFlow::<()>::Continue(())
                        });
                }
                spans
            };
            assert_eq!(spans(&cached), spans(&parsed), "{sql}: literal spans");
        }
    }

    #[test]
    fn pgbench_statements_come_back_as_the_parser_gives_them() {
        // A negative delta is a minus sign and a number: another key than a positive one.
        assert_reused(
            "UPDATE pgbench_accounts SET abalance = abalance + -4127 WHERE aid = 80911;",
            &["UPDATE pgbench_accounts SET abalance = abalance + -5000 WHERE aid = 1"],
        );
        assert_reused(
            "UPDATE pgbench_accounts SET abalance = abalance + 2210 WHERE aid = 35612;",
            &["UPDATE pgbench_accounts SET abalance = abalance + 0 WHERE aid = 999999"],
        );
        assert_reused(
            "SELECT abalance FROM pgbench_accounts WHERE aid = 80911",
            &["SELECT abalance FROM pgbench_accounts WHERE aid = 12345678901234567890"],
        );
        assert_reused(
            "INSERT INTO pgbench_history (tid, bid, aid, delta, mtime) VALUES (3, 1, 80911, -4127, CURRENT_TIMESTAMP)",
            &[
                "INSERT INTO pgbench_history (tid, bid, aid, delta, mtime) VALUES (97, 10, 5, -12, CURRENT_TIMESTAMP)",
            ],
        );
    }

    #[test]
    fn strings_decimals_and_typed_literals_are_put_back() {
        assert_reused(
            "UPDATE t SET name = 'x', price = 1.5, d = DATE '2024-01-01' WHERE id = 7 AND flag = true",
            &[
                "UPDATE t SET name = 'it''s', price = 2.25e3, d = DATE '1999-12-31' WHERE id = 8 AND flag = true",
                "UPDATE t SET name = 'Zürich', price = .5, d = DATE '2000-02-29' WHERE id = 0 AND flag = true",
            ],
        );
        assert_reused(
            "DELETE FROM t WHERE id IN (1, 2, 3) AND note IS NULL",
            &["DELETE FROM t WHERE id IN (4, 5, 6) AND note IS NULL"],
        );
    }

    #[test]
    fn keys_keep_everything_but_literals() {
        let key = |sql: &str| Template::of(sql).map(|t| t.key);
        // Literal values, and their kind, and whitespace runs.
        assert_eq!(
            key("SELECT a FROM t WHERE k = 1"),
            key("SELECT a FROM t WHERE k = 2")
        );
        assert_ne!(
            key("SELECT a FROM t WHERE k = 1"),
            key("SELECT a FROM t WHERE k = '1'")
        );
        assert_ne!(
            key("SELECT a FROM t WHERE k = 1"),
            key("SELECT b FROM t WHERE k = 1")
        );
        assert_ne!(
            key("SELECT a FROM t WHERE k = 1"),
            key("SELECT a FROM t WHERE k < 1")
        );
        assert_ne!(key(r#"SELECT "A" FROM t"#), key("SELECT A FROM t"));
        assert_ne!(key("SELECT a.b FROM t"), key("SELECT a . b FROM t"));
        // Not one statement without parameters: not cached.
        assert_eq!(key("SELECT a FROM t WHERE k = $1"), None);
        assert_eq!(key("BEGIN; SELECT 1"), None);
        assert!(key("SELECT 1;").is_some());
    }

    #[test]
    fn a_tree_whose_literals_are_not_the_texts_is_not_remembered() {
        let mut cache = ParseCache::default();
        let template = || Template::of("SELECT a FROM t WHERE k = 1").unwrap();
        cache.remember(template(), &parse_one("SELECT a FROM t WHERE k = 2"));
        cache.remember(
            template(),
            &parse_one("SELECT a FROM t WHERE k = 1 AND j = 1"),
        );
        cache.remember(template(), &parse_one("SELECT a FROM t WHERE k = '1'"));
        assert!(cache.get(&template()).is_none());
        // Were a remembered tree to have fewer places than its key has literals, the cache
        // answers nothing (and the caller parses) rather than a tree missing a literal.
        let two = Template::of("SELECT a FROM t WHERE k = 1 AND j = 2").unwrap();
        let one = parse_one("SELECT a FROM t WHERE k = 1 AND j = k");
        cache.entries.insert(two.key.clone(), one);
        assert!(cache.get(&two).is_none());
    }

    #[test]
    fn whatever_is_remembered_comes_back_as_the_parser_gives_it() {
        // Pairs of texts with the same key: if the first is remembered, the second must come
        // out of the cache exactly as the parser reads it.
        let pairs = [
            (
                "SELECT a FROM t WHERE k = 'pg_class'::regclass",
                "SELECT a FROM t WHERE k = 'pg_type'::regclass",
            ),
            (
                "SELECT a FROM t WHERE k = E'\\n' AND j = 1",
                "SELECT a FROM t WHERE k = E'\\t' AND j = 2",
            ),
            (
                "SELECT a FROM t WHERE k = ANY(ARRAY[1, 2])",
                "SELECT a FROM t WHERE k = ANY(ARRAY[3, 4])",
            ),
            (
                "SELECT CASE WHEN a > 1 THEN 'x' ELSE 'y' END FROM t WHERE k = 5",
                "SELECT CASE WHEN a > 2 THEN 'p' ELSE 'q' END FROM t WHERE k = 6",
            ),
            (
                "SELECT a FROM t WHERE k = 1 LIMIT 10 OFFSET 2",
                "SELECT a FROM t WHERE k = 3 LIMIT 20 OFFSET 4",
            ),
            (
                "SELECT substr(s, 1, 2) FROM t WHERE k BETWEEN 1 AND 9",
                "SELECT substr(s, 3, 4) FROM t WHERE k BETWEEN 5 AND 6",
            ),
            (
                "SELECT a FROM t WHERE ts > TIMESTAMP '2024-01-01' - INTERVAL '1 day'",
                "SELECT a FROM t WHERE ts > TIMESTAMP '2023-01-01' - INTERVAL '2 days'",
            ),
            ("SELECT a FROM t ORDER BY 1", "SELECT a FROM t ORDER BY 2"),
            ("SELECT 1", "SELECT 2"),
        ];
        let mut remembered = 0;
        for (first, second) in pairs {
            let mut cache = ParseCache::default();
            cache.remember(Template::of(first).unwrap(), &parse_one(first));
            let template = Template::of(second).unwrap();
            if let Some(cached) = cache.get(&template) {
                assert_eq!(cached, parse_one(second), "{second}");
                remembered += 1;
            }
        }
        assert!(
            remembered >= 5,
            "only {remembered} of the pairs were remembered"
        );
    }

    #[test]
    fn the_cache_is_bounded() {
        let mut cache = ParseCache::default();
        for i in 0..MAX_ENTRIES + 10 {
            let sql = format!("SELECT c{i} FROM t WHERE k = 1");
            cache.remember(Template::of(&sql).unwrap(), &parse_one(&sql));
            assert!(cache.entries.len() <= MAX_ENTRIES);
        }
        let many = format!(
            "INSERT INTO t VALUES {}",
            vec!["(1)"; MAX_LITERALS + 1].join(", ")
        );
        assert!(Template::of(&many).is_none());
    }
}
