//! Parsing SQL text into statements, and the command tags PostgreSQL sends
//! for statements that return no rows.

use std::fmt;
use std::sync::OnceLock;

use datafusion::execution::session_state::SessionState;
use datafusion::logical_expr::{DdlStatement, LogicalPlan, WriteOp};
use datafusion::sql::parser::{CopyToSource, DFParserBuilder, Statement as DfStatement};
use datafusion::sql::sqlparser::ast::{self, Expr, ObjectName, Set, Value};
use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
use datafusion::sql::sqlparser::tokenizer::{Token, Tokenizer};
use datafusion_pg_catalog::sql::PostgresCompatibilityParser;
use datafusion_pg_catalog::sql::rules::{self, SqlStatementRewriteRule};

use zyron_common::{Result, SqlState, ZyronError};

use crate::errors::to_zyron_error;
use crate::lake::syntax::LakeStatement;
use crate::session::TransactionEffect;

/// The tag of a CommandComplete message: `INSERT 0 3`, `CREATE TABLE`, `SELECT 5`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommandTag {
    /// The command word(s), e.g. `INSERT`, `CREATE TABLE`.
    pub command: String,
    /// Rows affected or returned, where PostgreSQL reports a count.
    pub rows: Option<u64>,
    /// Whether the statement opened or closed a transaction block.
    pub transaction: TransactionEffect,
}

impl CommandTag {
    pub fn new(command: impl Into<String>) -> Self {
        Self {
            command: command.into(),
            rows: None,
            transaction: TransactionEffect::None,
        }
    }

    pub fn with_transaction(mut self, effect: TransactionEffect) -> Self {
        self.transaction = effect;
        self
    }

    pub fn with_rows(mut self, rows: u64) -> Self {
        self.rows = Some(rows);
        self
    }
}

impl fmt::Display for CommandTag {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.command.as_str(), self.rows) {
            // INSERT tags carry the (always zero) oid before the count.
            ("INSERT", Some(rows)) => write!(f, "INSERT 0 {rows}"),
            (command, Some(rows)) => write!(f, "{command} {rows}"),
            (command, None) => f.write_str(command),
        }
    }
}

/// Statements the session answers itself instead of planning them in DataFusion.
#[derive(Debug, Clone, PartialEq)]
pub enum Utility {
    /// BEGIN / START TRANSACTION, with its isolation level if one was given.
    Begin {
        isolation: Option<zyron_txn::Isolation>,
    },
    Commit,
    Rollback,
    Savepoint {
        name: String,
    },
    ReleaseSavepoint {
        name: String,
    },
    RollbackToSavepoint {
        name: String,
    },
    /// SET TRANSACTION ISOLATION LEVEL ...
    SetTransaction {
        isolation: Option<zyron_txn::Isolation>,
    },
    /// VACUUM [FULL] [ANALYZE] [table, ...]: garbage collection now for
    /// heap tables; a lake table's unreferenced files, 7 days old or more.
    Vacuum {
        tables: Vec<String>,
    },
    /// A lake statement run for its effect (`ALTER TABLE t CREATE TAG v1`):
    /// `query` calls a lake table function; the client gets `tag`.
    Lake {
        query: String,
        tag: &'static str,
    },
    /// CHECKPOINT: a checkpoint now.
    Checkpoint,
    /// COPY table [(columns)] FROM STDIN [WITH (...)].
    CopyFromStdin {
        table: String,
        columns: Vec<String>,
        format: crate::copy_in::CopyFormat,
    },
    /// `SET name = value` on a PostgreSQL parameter.
    Set {
        name: String,
        value: String,
    },
    /// `SHOW name` on a PostgreSQL parameter.
    Show {
        name: String,
    },
    ShowAll,
    /// Accepted and answered with this tag, nothing else to do
    /// (`DISCARD ALL`, `SET SESSION CHARACTERISTICS`, ...).
    NoOp {
        tag: &'static str,
    },
}

/// One parsed statement: either ours, or one DataFusion plans.
#[derive(Debug, Clone)]
pub enum Parsed {
    Utility(Utility),
    DataFusion(DfStatement),
}

/// Splits SQL text into statements.
///
/// DataFusion's parser (PostgreSQL dialect) comes first, since it also knows
/// DataFusion's own statements (`CREATE EXTERNAL TABLE`, `COPY ... TO`). What
/// it rejects goes through the PostgreSQL compatibility parser, which rewrites
/// the catalog queries psql and drivers send (`::regclass`,
/// `OPERATOR(pg_catalog.~)`, ...) into SQL DataFusion plans.
pub fn parse(sql: &str) -> Result<Vec<Parsed>> {
    if let Some(lake) = crate::lake::syntax::parse(sql) {
        return match lake? {
            LakeStatement::Query(query) => parse(&query),
            LakeStatement::Command { query, tag } => {
                Ok(vec![Parsed::Utility(Utility::Lake { query, tag })])
            }
        };
    }
    if let Some(utility) = maintenance_command(sql) {
        return utility.map(|u| vec![Parsed::Utility(u)]);
    }
    let copy_options = normalize_copy_freeze(sql);
    let sql = copy_options.as_deref().unwrap_or(sql);
    let dialect = PostgreSqlDialect {};
    let df_result = DFParserBuilder::new(sql)
        .with_dialect(&dialect)
        .build()
        .and_then(|mut parser| parser.parse_statements());
    let compat = compatibility_parser();
    let parsed: Vec<Parsed> = match df_result {
        Ok(statements) => statements
            .into_iter()
            .map(|statement| match statement {
                DfStatement::Statement(inner) => classify_sql(compatibility_rewrite(*inner)),
                other => Ok(Parsed::DataFusion(other)),
            })
            .collect(),
        Err(df_error) => match compat.parse(sql) {
            Ok(statements) => statements.into_iter().map(classify_sql).collect(),
            Err(_) => Err(to_zyron_error(df_error.into())),
        },
    }?;
    refuse_text_after_copy_from_stdin(sql, &parsed)?;
    Ok(parsed)
}

/// The SQL parser takes whatever follows `COPY ... FROM STDIN;` for inline
/// rows (psql's dump format) and Zyron reads COPY rows only as COPY data, so
/// statements after it in the same query would silently never run.
/// PostgreSQL runs them once the copy is done; Zyron refuses the whole query
/// before any of it runs. Statements are counted by their top-level
/// semicolons, so a block with semicolons inside (`IF ... THEN a; END IF`,
/// which Zyron does not run anyway) before the COPY makes it refused too.
fn refuse_text_after_copy_from_stdin(sql: &str, parsed: &[Parsed]) -> Result<()> {
    let Some(copy_index) = parsed
        .iter()
        .position(|p| matches!(p, Parsed::Utility(Utility::CopyFromStdin { .. })))
    else {
        return Ok(());
    };
    // The text parsed, so it tokenizes.
    let tokens = Tokenizer::new(&PostgreSqlDialect {}, sql)
        .tokenize()
        .map_err(|e| ZyronError::new(SqlState::SYNTAX_ERROR, e.to_string()))?;
    let (mut statement, mut inside_statement) = (0, false);
    for token in tokens {
        match token {
            Token::Whitespace(_) => {}
            // Runs of semicolons separate no empty statements, as in the parser.
            Token::SemiColon if inside_statement => {
                statement += 1;
                inside_statement = false;
            }
            Token::SemiColon => {}
            _ if statement > copy_index => {
                return Err(ZyronError::not_supported(
                    "COPY ... FROM STDIN must be the last statement of a query: its rows come as \
                     COPY data, not inline, and statements after it must be sent as a separate query",
                ));
            }
            _ => inside_statement = true,
        }
    }
    Ok(())
}

/// Building the compatibility parser tokenizes its whole rewrite table, so it
/// is built once per process rather than once per statement.
/// VACUUM, CHECKPOINT and ANALYZE in PostgreSQL's forms, which the SQL
/// parser reads differently (or not at all): recognised by their first word.
fn maintenance_command(sql: &str) -> Option<Result<Utility>> {
    let text = sql.trim().trim_end_matches(';').trim();
    if text.contains(';') {
        return None;
    }
    let first = text.split_whitespace().next()?.to_ascii_lowercase();
    match first.as_str() {
        "vacuum" => Some(vacuum(&text[first.len()..])),
        "checkpoint" if text.eq_ignore_ascii_case("checkpoint") => Some(Ok(Utility::Checkpoint)),
        "analyze" | "analyse" => Some(Ok(Utility::NoOp { tag: "ANALYZE" })),
        _ => None,
    }
}

/// What follows VACUUM: PostgreSQL's options and tables (a lake table's
/// `RETAIN` and `DRY RUN` clauses are read before, by `lake::syntax`).
fn vacuum(rest: &str) -> Result<Utility> {
    let mut rest = rest.trim();
    // PostgreSQL's `(FULL, ANALYZE, ...)` options change nothing here.
    if rest.starts_with('(') {
        rest = rest.find(')').map_or("", |end| &rest[end + 1..]);
    }
    let mut tables = Vec::new();
    for part in rest.split(',') {
        // Forms this does not read (`public.t`, column lists) vacuum every
        // heap table, as VACUUM without names does.
        let Some(mut words) = crate::lake::syntax::words(part) else {
            return Ok(Utility::Vacuum { tables: vec![] });
        };
        if tables.is_empty() {
            const OPTIONS: [&str; 5] = ["full", "freeze", "verbose", "analyze", "analyse"];
            let options = words
                .iter()
                .take_while(|w| OPTIONS.contains(&w.as_str()))
                .count();
            words.drain(..options);
        }
        match words.as_slice() {
            [table] => tables.push(table.clone()),
            _ => return Ok(Utility::Vacuum { tables: vec![] }),
        }
    }
    Ok(Utility::Vacuum { tables })
}

/// The input format a COPY FROM names (text unless it says CSV).
fn copy_format(
    options: &[ast::CopyOption],
    legacy: &[ast::CopyLegacyOption],
) -> Result<crate::copy_in::CopyFormat> {
    use crate::copy_in::CopyFormat;
    let mut csv = false;
    let (mut delimiter, mut null, mut header, mut quote) = (None, None, false, b'"');
    let byte = |c: char| -> Result<u8> {
        u8::try_from(c as u32).map_err(|_| {
            ZyronError::not_supported("COPY delimiters and quotes must be one ASCII character")
        })
    };
    for option in options {
        match option {
            ast::CopyOption::Format(name) => match name.value.to_ascii_lowercase().as_str() {
                "csv" => csv = true,
                "text" => csv = false,
                other => {
                    return Err(ZyronError::not_supported(format!(
                        "COPY format \"{other}\" is not supported (text and csv are)"
                    )));
                }
            },
            ast::CopyOption::Delimiter(c) => delimiter = Some(byte(*c)?),
            ast::CopyOption::Null(text) => null = Some(text.clone()),
            ast::CopyOption::Header(on) => header = *on,
            ast::CopyOption::Quote(c) => quote = byte(*c)?,
            ast::CopyOption::Encoding(_) | ast::CopyOption::Freeze(_) => {}
            other => {
                return Err(ZyronError::not_supported(format!(
                    "COPY option {other} is not supported"
                )));
            }
        }
    }
    for option in legacy {
        match option {
            ast::CopyLegacyOption::Csv(_) => csv = true,
            ast::CopyLegacyOption::Delimiter(c) => delimiter = Some(byte(*c)?),
            ast::CopyLegacyOption::Null(text) => null = Some(text.clone()),
            ast::CopyLegacyOption::Header => header = true,
            other => {
                return Err(ZyronError::not_supported(format!(
                    "COPY option {other} is not supported"
                )));
            }
        }
    }
    Ok(if csv {
        CopyFormat::Csv {
            delimiter: delimiter.unwrap_or(b','),
            quote,
            null: null.unwrap_or_default(),
            header,
        }
    } else {
        CopyFormat::Text {
            delimiter: delimiter.unwrap_or(b'\t'),
            null: null.unwrap_or_else(|| "\\N".into()),
        }
    })
}

/// `COPY ... WITH (FREEZE ON)` (what pgbench sends) in the form the SQL
/// parser reads: a bare FREEZE, or FREEZE FALSE. `None` if nothing changes.
fn normalize_copy_freeze(sql: &str) -> Option<String> {
    let lower = sql.to_ascii_lowercase();
    if !lower.trim_start().starts_with("copy") || !lower.contains("freeze") {
        return None;
    }
    let mut out = sql.to_owned();
    for (from, to) in [
        ("freeze on", "FREEZE"),
        ("freeze true", "FREEZE"),
        ("freeze off", "FREEZE FALSE"),
    ] {
        while let Some(at) = out.to_ascii_lowercase().find(from) {
            out.replace_range(at..at + from.len(), to);
        }
    }
    Some(out)
}

fn isolation_of(modes: &[ast::TransactionMode]) -> Option<zyron_txn::Isolation> {
    modes.iter().find_map(|mode| match mode {
        ast::TransactionMode::IsolationLevel(level) => {
            Some(crate::settings::parse_isolation(&level.to_string()))
        }
        _ => None,
    })
}

/// The rewrites of `datafusion-pg-catalog`'s compatibility parser, for
/// statements DataFusion's parser accepted. One of them,
/// `RemoveSubqueryFromProjection`, is made for the catalog queries of psql and
/// BI tools: it answers NULL for every correlated subquery in a select list
/// and cuts uncorrelated ones to their first row. Applied to user queries it
/// gave wrong answers without an error, so it runs only on statements that
/// read the catalog.
fn compatibility_rewrite(mut statement: ast::Statement) -> ast::Statement {
    static RULES: OnceLock<Vec<Box<dyn SqlStatementRewriteRule>>> = OnceLock::new();
    let rules = RULES.get_or_init(|| {
        vec![
            Box::new(rules::ResolveUnqualifiedIdentifier),
            Box::new(rules::PrependUnqualifiedPgTableName),
            Box::new(rules::StripCallableQualifier),
            Box::new(rules::FixArrayLiteral),
            Box::new(rules::CurrentUserVariableToSessionUserFunctionCall),
            Box::new(rules::StripCollate),
            Box::new(rules::RewritePgCatalogOperator),
            Box::new(rules::RewriteRegCastToSubquery::new()),
            Box::new(rules::FixVersionColumnName),
        ]
    });
    for rule in rules {
        statement = rule.rewrite(statement);
    }
    // It turns `x = ANY (..)` into `array_contains(.., x)`, right for an array
    // and wrong for a subquery, which DataFusion compares itself.
    if !compares_with_subquery(&statement) {
        statement = rules::RewriteArrayAnyAllOperation.rewrite(statement);
    }
    if reads_catalog(&statement) {
        statement = rules::RemoveSubqueryFromProjection.rewrite(statement);
    }
    statement
}

/// Whether `statement` has `x op ANY (SELECT ..)` or `x op ALL (SELECT ..)`.
fn compares_with_subquery(statement: &ast::Statement) -> bool {
    let outcome = ast::visit_expressions(statement, |expr| match expr {
        ast::Expr::AnyOp { right, .. } | ast::Expr::AllOp { right, .. }
            if matches!(right.as_ref(), ast::Expr::Subquery(_)) =>
        {
            std::ops::ControlFlow::Break(())
        }
        _ => std::ops::ControlFlow::Continue(()),
    });
    outcome.is_break()
}

/// Whether `statement` names a relation of `pg_catalog` or `information_schema`
/// (or a `pg_` relation without a schema, which resolves to `pg_catalog`'s).
fn reads_catalog(statement: &ast::Statement) -> bool {
    let outcome = ast::visit_relations(statement, |name| {
        let parts: Vec<String> = name
            .0
            .iter()
            .filter_map(|part| part.as_ident())
            .map(|ident| ident.value.to_ascii_lowercase())
            .collect();
        let catalog = parts
            .iter()
            .any(|part| part == "pg_catalog" || part == "information_schema")
            || (parts.len() == 1 && parts[0].starts_with("pg_"));
        if catalog {
            std::ops::ControlFlow::Break(())
        } else {
            std::ops::ControlFlow::Continue(())
        }
    });
    outcome.is_break()
}

fn compatibility_parser() -> &'static PostgresCompatibilityParser {
    static PARSER: OnceLock<PostgresCompatibilityParser> = OnceLock::new();
    PARSER.get_or_init(PostgresCompatibilityParser::new)
}

/// Plans `statement` as PostgreSQL would type it (see `integer_arithmetic`).
/// Kept apart from parsing so that point statements, which never plan, keep
/// their literals as written.
pub async fn plan_statement(
    state: &datafusion::execution::session_state::SessionState,
    mut statement: DfStatement,
) -> Result<LogicalPlan> {
    prepare_for_planning(state, &mut statement).await;
    state
        .statement_to_plan(statement)
        .await
        .map_err(to_zyron_error)
}

/// The rewrites that make DataFusion plan `statement` as PostgreSQL would,
/// also where it is the statement an EXPLAIN or a COPY reads.
async fn prepare_for_planning(state: &SessionState, statement: &mut DfStatement) {
    match statement {
        DfStatement::Statement(inner) => {
            crate::using_joins::merge_join_columns(state, inner).await;
            crate::integer_arithmetic::type_integer_literals(inner);
        }
        DfStatement::Explain(explain) => {
            Box::pin(prepare_for_planning(state, &mut explain.statement)).await
        }
        DfStatement::CopyTo(copy) => {
            if let CopyToSource::Query(query) = &mut copy.source {
                let mut inner = ast::Statement::Query(query.clone());
                crate::using_joins::merge_join_columns(state, &mut inner).await;
                crate::integer_arithmetic::type_integer_literals(&mut inner);
                if let ast::Statement::Query(rewritten) = inner {
                    *query = rewritten;
                }
            }
        }
        _ => {}
    }
}

/// Classifies a plain SQL statement, named the way PostgreSQL names things.
fn classify_sql(mut statement: ast::Statement) -> Result<Parsed> {
    crate::function_columns::name_after_alias(&mut statement);
    crate::output_names::name_columns(&mut statement);
    classify(DfStatement::Statement(Box::new(statement)))
}

fn classify(statement: DfStatement) -> Result<Parsed> {
    let DfStatement::Statement(inner) = &statement else {
        return Ok(Parsed::DataFusion(statement));
    };
    let utility = match inner.as_ref() {
        ast::Statement::StartTransaction { modes, .. } => Utility::Begin {
            isolation: isolation_of(modes),
        },
        ast::Statement::Commit { chain: false, .. } => Utility::Commit,
        ast::Statement::Rollback {
            chain: false,
            savepoint: None,
        } => Utility::Rollback,
        ast::Statement::Rollback {
            savepoint: Some(name),
            ..
        } => Utility::RollbackToSavepoint {
            name: name.value.clone(),
        },
        ast::Statement::Savepoint { name } => Utility::Savepoint {
            name: name.value.clone(),
        },
        ast::Statement::ReleaseSavepoint { name } => Utility::ReleaseSavepoint {
            name: name.value.clone(),
        },
        ast::Statement::Set(set) => match set_to_utility(set)? {
            Some(utility) => utility,
            None => return Ok(Parsed::DataFusion(statement)),
        },
        ast::Statement::ShowVariable { variable } => {
            let name = variable
                .iter()
                .map(|ident| ident.value.as_str())
                .collect::<Vec<_>>()
                .join(" ");
            match name.to_ascii_lowercase().as_str() {
                "all" => Utility::ShowAll,
                n if n.starts_with("datafusion.") => return Ok(Parsed::DataFusion(statement)),
                "time zone" => Utility::Show {
                    name: "timezone".into(),
                },
                "transaction isolation level" => Utility::Show {
                    name: "transaction_isolation".into(),
                },
                _ => Utility::Show { name },
            }
        }
        ast::Statement::Discard { .. } => Utility::NoOp { tag: "DISCARD ALL" },
        ast::Statement::Copy {
            source:
                ast::CopySource::Table {
                    table_name,
                    columns,
                },
            to: false,
            target: ast::CopyTarget::Stdin,
            options,
            legacy_options,
            ..
        } => Utility::CopyFromStdin {
            table: object_name(table_name),
            columns: columns.iter().map(|c| c.value.clone()).collect(),
            format: copy_format(options, legacy_options)?,
        },
        _ => return Ok(Parsed::DataFusion(statement)),
    };
    Ok(Parsed::Utility(utility))
}

/// `None` means the statement is DataFusion's own (`SET datafusion.x = ...`).
fn set_to_utility(set: &Set) -> Result<Option<Utility>> {
    let utility = match set {
        Set::SingleAssignment {
            variable, values, ..
        } => {
            let name = object_name(variable);
            if name.to_ascii_lowercase().starts_with("datafusion.") {
                return Ok(None);
            }
            let value = values
                .iter()
                .map(expr_to_setting)
                .collect::<Vec<_>>()
                .join(", ");
            Utility::Set { name, value }
        }
        Set::SetTimeZone { value, .. } => Utility::Set {
            name: "timezone".into(),
            value: expr_to_setting(value),
        },
        Set::SetNames { charset_name, .. } => Utility::Set {
            name: "client_encoding".into(),
            value: charset_name.value.clone(),
        },
        Set::SetTransaction { modes, .. } => Utility::SetTransaction {
            isolation: isolation_of(modes),
        },
        Set::SetSessionParam(_) | Set::SetRole { .. } => Utility::NoOp { tag: "SET" },
        other => {
            return Err(ZyronError::not_supported(format!(
                "this form of SET is not supported: {other}"
            )));
        }
    };
    Ok(Some(utility))
}

fn object_name(name: &ObjectName) -> String {
    name.0
        .iter()
        .map(|part| match part.as_ident() {
            Some(ident) => ident.value.clone(),
            None => part.to_string(),
        })
        .collect::<Vec<_>>()
        .join(".")
}

/// `SET x = 'a'`, `SET x TO a`, `SET x = 3`: the value as PostgreSQL stores it.
fn expr_to_setting(expr: &Expr) -> String {
    match expr {
        Expr::Value(value) => match &value.value {
            Value::SingleQuotedString(s) | Value::DoubleQuotedString(s) => s.clone(),
            other => other.to_string(),
        },
        Expr::Identifier(ident) => ident.value.clone(),
        other => other.to_string(),
    }
}

/// The command tag for a plan that returns no rows to the client, or `None`
/// for plans whose rows are the result.
pub fn command_for_plan(plan: &LogicalPlan) -> Option<&'static str> {
    let tag = match plan {
        LogicalPlan::Dml(dml) => match dml.op {
            WriteOp::Insert(_) | WriteOp::Ctas => "INSERT",
            WriteOp::Update => "UPDATE",
            WriteOp::Delete => "DELETE",
            WriteOp::Truncate => "TRUNCATE TABLE",
            _ => "DML",
        },
        LogicalPlan::Copy(_) => "COPY",
        LogicalPlan::Ddl(ddl) => match ddl {
            DdlStatement::CreateExternalTable(_) => "CREATE EXTERNAL TABLE",
            DdlStatement::CreateMemoryTable(_) => "CREATE TABLE",
            DdlStatement::CreateView(_) => "CREATE VIEW",
            DdlStatement::CreateCatalogSchema(_) => "CREATE SCHEMA",
            DdlStatement::CreateCatalog(_) => "CREATE DATABASE",
            DdlStatement::CreateIndex(_) => "CREATE INDEX",
            DdlStatement::DropTable(_) => "DROP TABLE",
            DdlStatement::DropView(_) => "DROP VIEW",
            DdlStatement::DropCatalogSchema(_) => "DROP SCHEMA",
            DdlStatement::CreateFunction(_) => "CREATE FUNCTION",
            DdlStatement::DropFunction(_) => "DROP FUNCTION",
        },
        LogicalPlan::Statement(_) => "SET",
        _ => return None,
    };
    Some(tag)
}

/// Rejects an empty statement list where exactly one statement is required.
pub fn single(mut statements: Vec<Parsed>) -> Result<Option<Parsed>> {
    match statements.len() {
        0 => Ok(None),
        1 => Ok(statements.pop()),
        _ => Err(ZyronError::new(
            SqlState::SYNTAX_ERROR,
            "cannot insert multiple commands into a prepared statement",
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transaction_and_parameter_statements_are_utilities() {
        let parsed =
            parse("BEGIN; SET extra_float_digits = 3; SHOW TimeZone; COMMIT; SELECT 1").unwrap();
        assert!(matches!(parsed[0], Parsed::Utility(Utility::Begin { .. })));
        assert!(matches!(
            &parsed[1],
            Parsed::Utility(Utility::Set { name, value }) if name == "extra_float_digits" && value == "3"
        ));
        assert!(
            matches!(&parsed[2], Parsed::Utility(Utility::Show { name }) if name == "TimeZone")
        );
        assert!(matches!(parsed[3], Parsed::Utility(Utility::Commit)));
        assert!(matches!(parsed[4], Parsed::DataFusion(_)));
    }

    #[test]
    fn copy_from_stdin_with_pgbench_options_is_a_utility() {
        for sql in [
            "copy pgbench_accounts from stdin with (freeze on)",
            "COPY t (a, b) FROM STDIN WITH (FORMAT csv, HEADER true)",
            "copy t from stdin",
            "COPY t FROM STDIN;",
            "BEGIN;; COPY t FROM STDIN; -- the rows follow\n",
        ] {
            let parsed = parse(sql).unwrap();
            assert!(
                matches!(
                    parsed.last(),
                    Some(Parsed::Utility(Utility::CopyFromStdin { .. }))
                ),
                "{sql}: {parsed:?}"
            );
        }
        for sql in [
            "COPY t FROM STDIN; SELECT 1",
            "BEGIN; COPY t FROM STDIN; COMMIT",
            "COPY t FROM STDIN;\n1\tone\n\\.\n",
        ] {
            let err = parse(sql).unwrap_err();
            assert_eq!(err.sqlstate(), SqlState::FEATURE_NOT_SUPPORTED, "{sql}");
            assert!(err.to_string().contains("last statement"), "{sql}: {err}");
        }
        assert!(matches!(
            &parse("VACUUM ANALYZE pgbench_branches").unwrap()[0],
            Parsed::Utility(Utility::Vacuum { tables }) if tables == &["pgbench_branches"]
        ));
        assert!(matches!(
            &parse("vacuum (full, analyze) a, b").unwrap()[0],
            Parsed::Utility(Utility::Vacuum { tables }) if tables == &["a", "b"]
        ));
        assert!(matches!(
            &parse("VACUUM events RETAIN 0 HOURS").unwrap()[0],
            Parsed::DataFusion(_)
        ));
    }

    #[test]
    fn set_with_quoted_and_to_forms() {
        let parsed = parse("SET application_name TO 'psql'; SET TIME ZONE 'Europe/Paris'").unwrap();
        assert!(matches!(
            &parsed[0],
            Parsed::Utility(Utility::Set { value, .. }) if value == "psql"
        ));
        assert!(matches!(
            &parsed[1],
            Parsed::Utility(Utility::Set { name, value }) if name == "timezone" && value == "Europe/Paris"
        ));
    }

    #[test]
    fn tags_print_like_postgres() {
        assert_eq!(
            CommandTag::new("INSERT").with_rows(3).to_string(),
            "INSERT 0 3"
        );
        assert_eq!(
            CommandTag::new("DELETE").with_rows(2).to_string(),
            "DELETE 2"
        );
        assert_eq!(CommandTag::new("CREATE TABLE").to_string(), "CREATE TABLE");
    }

    #[test]
    fn syntax_errors_are_42601() {
        let err = parse("SELEC 1").unwrap_err();
        assert_eq!(err.sqlstate(), SqlState::SYNTAX_ERROR);
    }
}
