//! PostgreSQL's name for the one column of a set-returning function in FROM.
//!
//! In PostgreSQL, `SELECT g FROM generate_series(1, 3) g` works: a function
//! that returns single values, given a table alias but no column list, names
//! its one column after the alias. DataFusion names it `value` (for
//! `generate_series`) or after the expression (for `unnest`), so the query
//! fails with "column g does not exist", and two aliased series in one FROM
//! both come out as `value`. The rewrite here gives such an alias the column
//! list PostgreSQL implies: `generate_series(1, 3) g` becomes
//! `generate_series(1, 3) AS g(g)`.
//!
//! Only aliased calls change, so `SELECT value FROM generate_series(1, 3)`
//! (DataFusion's spelling, used throughout Zyron's own tests) keeps working.
//! Calls `WITH ORDINALITY` and multi-array `unnest` return more than one
//! column and are left alone.

use std::ops::ControlFlow;

use datafusion::sql::sqlparser::ast::{
    ObjectName, Statement, TableAlias, TableAliasColumnDef, TableFactor, VisitMut, VisitorMut,
};

/// Table functions that return one column of single values.
const SINGLE_COLUMN_FUNCTIONS: &[&str] = &["generate_series"];

/// Names the column of every aliased single-column function call in
/// `statement` after its alias, as PostgreSQL does.
///
/// ```text
/// SELECT g FROM generate_series(1, 3) g
///   -> SELECT g FROM generate_series(1, 3) AS g(g)
/// ```
pub fn name_after_alias(statement: &mut Statement) {
    let _ = statement.visit(&mut NameAfterAlias);
}

struct NameAfterAlias;

impl VisitorMut for NameAfterAlias {
    type Break = ();

    fn pre_visit_table_factor(&mut self, factor: &mut TableFactor) -> ControlFlow<()> {
        match factor {
            TableFactor::Table {
                name,
                args: Some(_),
                alias: Some(alias),
                with_ordinality: false,
                ..
            } if is_single_column_function(name) => give_alias_its_column(alias),
            TableFactor::UNNEST {
                alias: Some(alias),
                array_exprs,
                with_offset: false,
                with_ordinality: false,
                ..
            } if array_exprs.len() == 1 => give_alias_its_column(alias),
            _ => {}
        }
        ControlFlow::Continue(())
    }
}

fn is_single_column_function(name: &ObjectName) -> bool {
    let Some(last) = name.0.last().and_then(|part| part.as_ident()) else {
        return false;
    };
    SINGLE_COLUMN_FUNCTIONS
        .iter()
        .any(|function| last.value.eq_ignore_ascii_case(function))
}

fn give_alias_its_column(alias: &mut TableAlias) {
    if alias.columns.is_empty() {
        // The alias as written, quoting and case included.
        alias.columns = vec![TableAliasColumnDef {
            name: alias.name.clone(),
            data_type: None,
        }];
    }
}

#[cfg(test)]
mod tests {
    use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
    use datafusion::sql::sqlparser::parser::Parser;

    use super::*;

    fn rewritten(sql: &str) -> String {
        let mut statement = Parser::parse_sql(&PostgreSqlDialect {}, sql)
            .unwrap()
            .remove(0);
        name_after_alias(&mut statement);
        statement.to_string()
    }

    #[test]
    fn an_aliased_series_names_its_column_after_the_alias() {
        assert_eq!(
            rewritten("SELECT g FROM generate_series(1, 3) g"),
            "SELECT g FROM generate_series(1, 3) g (g)"
        );
        assert_eq!(
            rewritten("SELECT x FROM unnest(ARRAY[1, 2]) AS x"),
            "SELECT x FROM UNNEST(ARRAY[1, 2]) AS x (x)"
        );
    }

    #[test]
    fn inside_insert_and_subqueries_too() {
        assert_eq!(
            rewritten("INSERT INTO t SELECT i FROM (SELECT i FROM GENERATE_SERIES(1, 2) i) s"),
            "INSERT INTO t SELECT i FROM (SELECT i FROM GENERATE_SERIES(1, 2) i (i)) s"
        );
    }

    #[test]
    fn other_shapes_are_left_alone() {
        for sql in [
            // No alias: DataFusion's `value`.
            "SELECT value FROM generate_series(1, 3)",
            // A column list already.
            "SELECT x FROM generate_series(1, 3) AS g (x)",
            // Two columns.
            "SELECT * FROM generate_series(1, 3) WITH ORDINALITY AS g",
            "SELECT * FROM UNNEST(ARRAY[1], ARRAY[2]) AS u",
            // A table, and another table function.
            "SELECT * FROM t AS g",
            "SELECT * FROM range(1, 3) AS r",
        ] {
            let original = Parser::parse_sql(&PostgreSqlDialect {}, sql)
                .unwrap()
                .remove(0);
            assert_eq!(rewritten(sql), original.to_string(), "{sql}");
        }
    }
}
