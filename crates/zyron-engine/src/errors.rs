//! From DataFusion's errors to PostgreSQL's SQLSTATE codes and messages.
//!
//! DataFusion reports errors by kind (planning, schema, execution, ...);
//! PostgreSQL clients branch on SQLSTATE. This module walks to the innermost
//! error, picks the code PostgreSQL would send for that condition, and
//! rewrites the common messages into PostgreSQL's wording
//! (`relation "t" does not exist`), so scripts written for PostgreSQL read
//! the same errors.

use datafusion::arrow::error::ArrowError;
use datafusion::common::SchemaError;
use datafusion::error::DataFusionError;
use datafusion::sql::sqlparser::parser::ParserError;

use zyron_common::{SqlState, ZyronError};

/// Converts a DataFusion error into a [`ZyronError`] with the matching SQLSTATE.
pub fn to_zyron_error(err: DataFusionError) -> ZyronError {
    classify(innermost(&err))
}

/// Skips the wrappers that add context but not meaning.
fn innermost(err: &DataFusionError) -> &DataFusionError {
    let mut current = err;
    loop {
        current = match current {
            DataFusionError::Context(_, inner) | DataFusionError::Diagnostic(_, inner) => inner,
            DataFusionError::Shared(inner) => inner.as_ref(),
            DataFusionError::Collection(errors) if !errors.is_empty() => &errors[0],
            DataFusionError::ArrowError(arrow, _) => match arrow.as_ref() {
                ArrowError::ExternalError(source) => match source.downcast_ref::<DataFusionError>()
                {
                    Some(inner) => inner,
                    None => return current,
                },
                _ => return current,
            },
            DataFusionError::External(source) => match source.downcast_ref::<DataFusionError>() {
                Some(inner) => inner,
                None => return current,
            },
            _ => return current,
        };
    }
}

fn classify(err: &DataFusionError) -> ZyronError {
    match err {
        DataFusionError::SQL(parser_error, _) => parser_error_to_zyron(parser_error),
        DataFusionError::SchemaError(schema_error, _) => schema_error_to_zyron(schema_error),
        DataFusionError::ArrowError(arrow, _) => arrow_error_to_zyron(arrow),
        DataFusionError::NotImplemented(message) => {
            ZyronError::new(SqlState::FEATURE_NOT_SUPPORTED, message.clone())
        }
        DataFusionError::ResourcesExhausted(message) => {
            ZyronError::new(SqlState::OUT_OF_MEMORY, message.clone())
        }
        DataFusionError::IoError(io) => ZyronError::io("I/O error", io),
        DataFusionError::Plan(message)
        | DataFusionError::Execution(message)
        | DataFusionError::Configuration(message) => message_to_zyron(message),
        DataFusionError::Internal(message) => ZyronError::internal(message.clone()),
        DataFusionError::External(source) => {
            if let Some(zyron) = source.downcast_ref::<ZyronError>() {
                // Raised by Zyron's own providers: already PostgreSQL's code and wording.
                return zyron.clone();
            }
            match source.downcast_ref::<zyron_format::FormatError>() {
                Some(format) => format.to_zyron(),
                None => message_to_zyron(&err.message()),
            }
        }
        other => message_to_zyron(&other.message()),
    }
}

fn parser_error_to_zyron(err: &ParserError) -> ZyronError {
    let message = match err {
        ParserError::ParserError(m) | ParserError::TokenizerError(m) => m.clone(),
        ParserError::RecursionLimitExceeded => {
            return ZyronError::new(
                SqlState::PROGRAM_LIMIT_EXCEEDED,
                "statement is too deeply nested",
            );
        }
    };
    ZyronError::new(SqlState::SYNTAX_ERROR, format!("syntax error: {message}"))
}

fn schema_error_to_zyron(err: &SchemaError) -> ZyronError {
    match err {
        SchemaError::FieldNotFound { field, .. } => ZyronError::new(
            SqlState::UNDEFINED_COLUMN,
            format!("column \"{}\" does not exist", field.name),
        ),
        SchemaError::AmbiguousReference { field } => ZyronError::new(
            SqlState::AMBIGUOUS_COLUMN,
            format!("column reference \"{}\" is ambiguous", field.name),
        ),
        SchemaError::DuplicateQualifiedField { name, .. }
        | SchemaError::DuplicateUnqualifiedField { name } => ZyronError::new(
            SqlState::DUPLICATE_OBJECT,
            format!("column \"{name}\" specified more than once"),
        ),
    }
}

fn arrow_error_to_zyron(err: &ArrowError) -> ZyronError {
    if let ArrowError::ExternalError(source) = err
        && let Some(zyron) = source.downcast_ref::<ZyronError>()
    {
        return zyron.clone();
    }
    match err {
        ArrowError::DivideByZero => ZyronError::new(SqlState::DIVISION_BY_ZERO, "division by zero"),
        ArrowError::ArithmeticOverflow(m) => {
            ZyronError::new(SqlState::NUMERIC_VALUE_OUT_OF_RANGE, m.clone())
        }
        ArrowError::CastError(m) | ArrowError::ParseError(m) => out_of_range(m)
            .unwrap_or_else(|| ZyronError::new(SqlState::INVALID_TEXT_REPRESENTATION, m.clone())),
        ArrowError::MemoryError(m) => ZyronError::new(SqlState::OUT_OF_MEMORY, m.clone()),
        ArrowError::IoError(m, io) => ZyronError::io(m, io),
        other => ZyronError::new(SqlState::DATA_EXCEPTION, other.to_string()),
    }
}

/// A cast of a number its target type cannot hold ("Can't cast value 2147483648
/// to type Int32"): PostgreSQL's 22003 with its wording.
fn out_of_range(message: &str) -> Option<ZyronError> {
    let target = message
        .strip_prefix("Can't cast value ")?
        .rsplit("to type ")
        .next()?;
    let name = match target.trim() {
        "Int16" => "smallint",
        "Int32" => "integer",
        "Int64" => "bigint",
        _ => return None,
    };
    Some(ZyronError::new(
        SqlState::NUMERIC_VALUE_OUT_OF_RANGE,
        format!("{name} out of range"),
    ))
}

/// PostgreSQL's wording for a NULL in a NOT NULL column, with the column if
/// DataFusion named it.
fn not_null_message(message: &str) -> String {
    match between(message, "column '", "'").or_else(|| between(message, "Column '", "'")) {
        Some(column) => format!("null value in column \"{column}\" violates not-null constraint"),
        None => format!("null value violates not-null constraint ({message})"),
    }
}

/// DataFusion reports many conditions only as text; recognise the common ones.
fn message_to_zyron(message: &str) -> ZyronError {
    if let Some(name) = between(message, "table '", "' not found") {
        return undefined_table(name);
    }
    if let Some(name) = between(message, "No table named '", "'") {
        return undefined_table(name);
    }
    if let Some(name) = between(message, "Table '", "' doesn't exist") {
        return undefined_table(name);
    }
    if let Some(name) = between(message, "Table '", "' already exists") {
        return ZyronError::new(
            SqlState::DUPLICATE_TABLE,
            format!("relation \"{}\" already exists", last_part(name)),
        );
    }
    if let Some(name) = between(message, "Schema '", "' already exists") {
        return ZyronError::new(
            SqlState::DUPLICATE_SCHEMA,
            format!("schema \"{name}\" already exists"),
        );
    }
    let lower = message.to_ascii_lowercase();
    if lower.contains("non-nullable") || lower.contains("non nullable") {
        return ZyronError::new(SqlState::NOT_NULL_VIOLATION, not_null_message(message));
    }
    if lower.contains("divide by zero") || lower.contains("division by zero") {
        return ZyronError::new(SqlState::DIVISION_BY_ZERO, "division by zero");
    }
    if lower.contains("invalid function") || lower.contains("unknown function") {
        return ZyronError::new(SqlState::UNDEFINED_FUNCTION, message.to_owned());
    }
    if lower.contains("overflow") {
        return ZyronError::new(SqlState::NUMERIC_VALUE_OUT_OF_RANGE, message.to_owned());
    }
    if let Some(error) = out_of_range(message) {
        return error;
    }
    if lower.contains("scalar subquery returned more than one row") {
        return ZyronError::new(
            SqlState::CARDINALITY_VIOLATION,
            "more than one row returned by a subquery used as an expression",
        );
    }
    if lower.contains("cannot cast") || lower.contains("cast error") {
        return ZyronError::new(SqlState::INVALID_TEXT_REPRESENTATION, message.to_owned());
    }
    if lower.contains("no function matches") || lower.contains("does not support") {
        return ZyronError::new(SqlState::UNDEFINED_FUNCTION, message.to_owned());
    }
    if lower.contains("unsupported") || lower.contains("not supported") {
        return ZyronError::new(SqlState::FEATURE_NOT_SUPPORTED, message.to_owned());
    }
    if lower.contains("type") && (lower.contains("mismatch") || lower.contains("coerce")) {
        return ZyronError::new(SqlState::DATATYPE_MISMATCH, message.to_owned());
    }
    ZyronError::new(
        SqlState::SYNTAX_ERROR_OR_ACCESS_RULE_VIOLATION,
        message.to_owned(),
    )
}

fn undefined_table(qualified_name: &str) -> ZyronError {
    ZyronError::new(
        SqlState::UNDEFINED_TABLE,
        format!("relation \"{}\" does not exist", last_part(qualified_name)),
    )
}

/// `zyron.public.t` is shown as `t`, as PostgreSQL shows the name the user wrote.
fn last_part(qualified_name: &str) -> &str {
    qualified_name.rsplit('.').next().unwrap_or(qualified_name)
}

fn between<'a>(text: &'a str, start: &str, end: &str) -> Option<&'a str> {
    let from = text.find(start)? + start.len();
    let len = text[from..].find(end)?;
    Some(&text[from..from + len])
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::prelude::SessionContext;

    async fn error_of(sql: &str) -> ZyronError {
        let ctx = SessionContext::new();
        ctx.sql("CREATE TABLE t (a INT)").await.unwrap();
        let result = match ctx.sql(sql).await {
            Ok(df) => df.collect().await.map(|_| ()),
            Err(e) => Err(e),
        };
        to_zyron_error(result.expect_err("statement should fail"))
    }

    #[tokio::test]
    async fn common_errors_get_postgres_codes_and_wording() {
        let err = error_of("SELEC 1").await;
        assert_eq!(err.sqlstate(), SqlState::SYNTAX_ERROR, "{err}");
        let err = error_of("SELECT * FROM missing").await;
        assert_eq!(err.sqlstate(), SqlState::UNDEFINED_TABLE, "{err}");
        assert_eq!(err.message(), "relation \"missing\" does not exist");
        let err = error_of("SELECT nope FROM t").await;
        assert_eq!(err.sqlstate(), SqlState::UNDEFINED_COLUMN, "{err}");
        assert_eq!(err.message(), "column \"nope\" does not exist");
        let err = error_of("SELECT 1 / 0").await;
        assert_eq!(err.sqlstate(), SqlState::DIVISION_BY_ZERO, "{err}");
        let err = error_of("CREATE TABLE t (b INT)").await;
        assert_eq!(err.sqlstate(), SqlState::DUPLICATE_TABLE, "{err}");
        let err = error_of("SELECT no_such_function(1)").await;
        assert_eq!(err.sqlstate(), SqlState::UNDEFINED_FUNCTION, "{err}");
    }
}
