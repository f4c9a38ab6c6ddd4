//! `UPDATE t SET c = c + v, d = w WHERE key = k` on the row's bytes.
//!
//! pgbench's three UPDATEs have this shape, and so do most OLTP counters and
//! balances: integer columns set to a value or moved by one, the row named by
//! its whole primary key. The general path (`write::update`) turns the WHERE
//! clause and the assignments into DataFusion expressions, coerces and
//! compiles them, decodes the row into an Arrow batch, evaluates, casts and
//! encodes it again: most of an UPDATE's CPU, for one row. Here the key is
//! encoded straight from the statement's values and each assigned integer is
//! rewritten where it lies in the row.
//!
//! ```text
//! UPDATE pgbench_accounts SET abalance = abalance + $1 WHERE aid = $2
//!   -> key bytes of $2 -> slot -> the row's abalance bytes += $1
//! ```
//!
//! The answer is the general path's, with one difference that follows
//! PostgreSQL: an assignment whose result does not fit the column is SQLSTATE
//! 22003 (`integer out of range`), where DataFusion's arithmetic wraps around.
//! Anything else (another column on the right, a CHECK constraint, a non-integer
//! column or value, a partial key, a NULL value) goes to the general path.

use std::sync::Arc;

use datafusion::common::Result;
use datafusion::sql::sqlparser::ast;
use zyron_common::{SqlState, ZyronError};
use zyron_heap::row::RowCodec;
use zyron_heap::table::HeapTable;

use super::Translator;
use super::key::{ExactKey, exact_key, fits, integer, integer_width, read_integer, visible_row};
use crate::heap::{SessionTxn, no_transaction, to_df};

/// What an assignment does to an integer column.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Change {
    /// `c = c + v` (and `c = c - v`, `c = v + c`); NULL stays NULL.
    Add(i64),
    /// `c = v`.
    Set(i64),
}

#[derive(Debug)]
struct Assignment {
    column: usize,
    /// 2, 4 or 8: the column is SMALLINT, INTEGER or BIGINT.
    width: usize,
    change: Change,
}

/// An UPDATE of one row, by key, on its bytes.
#[derive(Debug)]
pub(super) struct RowUpdate {
    key: ExactKey,
    assignments: Vec<Assignment>,
}

impl RowUpdate {
    /// The plan for an UPDATE with this module's shape; `None` for any other.
    pub(super) fn plan(
        table: &HeapTable,
        translator: &Translator<'_>,
        assignments: &[ast::Assignment],
        selection: Option<&ast::Expr>,
    ) -> Option<RowUpdate> {
        if !table.def().checks.is_empty() {
            return None;
        }
        let key_columns = table.key_codec()?.key_columns();
        let key = exact_key(table, translator, selection?)?;
        let schema = table.codec().schema();
        let mut planned: Vec<Assignment> = Vec::with_capacity(assignments.len());
        for assignment in assignments {
            let ast::AssignmentTarget::ColumnName(target) = &assignment.target else {
                return None;
            };
            let column = schema.index_of(&translator.target(target)?).ok()?;
            let repeated = planned.iter().any(|a| a.column == column);
            if repeated || key_columns.contains(&column) {
                return None;
            }
            let width = integer_width(schema.field(column).data_type())?;
            let change = change(translator, column, &assignment.value)?;
            planned.push(Assignment {
                column,
                width,
                change,
            });
        }
        Some(RowUpdate {
            key,
            assignments: planned,
        })
    }

    /// Runs the update in the session's transaction: the rows changed (0 or 1).
    pub(super) async fn run(&self, table: &Arc<HeapTable>, session: &SessionTxn) -> Result<u64> {
        let mut guard = session.lock().await;
        let txn = guard.as_mut().ok_or_else(no_transaction)?;
        // The row must exist at the statement's snapshot, as the general
        // path's candidate fetch requires; a newer version is then updated
        // (or reported as a conflict) by the transaction.
        let Some((slot, _)) = visible_row(table, txn, &self.key) else {
            return Ok(0);
        };
        let codec = table.codec();
        // A writer that held the row may have left a version with another
        // key (see `ExactKey::matches`): then the WHERE clause no longer holds.
        let changed = txn
            .update(table, slot, |current| {
                match self.key.matches(codec, current) {
                    true => self.apply(codec, current).map(Some),
                    false => Ok(None),
                }
            })
            .await
            .map_err(to_df)?;
        Ok(u64::from(changed))
    }

    /// `row` with the assignments made.
    fn apply(&self, codec: &RowCodec, row: &[u8]) -> zyron_common::Result<Vec<u8>> {
        let mut row = row.to_vec();
        for assignment in &self.assignments {
            let width = assignment.width;
            let (at, null) = codec.locate(&row, assignment.column);
            match (assignment.change, null) {
                (Change::Add(_), true) => {}
                (Change::Add(delta), false) => {
                    let current = read_integer(&row[at..at + width]);
                    let sum = current
                        .checked_add(delta)
                        .ok_or_else(|| out_of_range(width))?;
                    write_integer(&mut row[at..at + width], sum)?;
                }
                (Change::Set(value), false) => write_integer(&mut row[at..at + width], value)?,
                (Change::Set(value), true) => {
                    codec.set_null(&mut row, assignment.column, false);
                    row.splice(at..at, std::iter::repeat_n(0, width));
                    write_integer(&mut row[at..at + width], value)?;
                }
            }
        }
        Ok(row)
    }
}

/// What `SET column = value` does, if it is one of [`Change`]'s forms.
fn change(translator: &Translator<'_>, column: usize, value: &ast::Expr) -> Option<Change> {
    if let Some(value) = integer(translator, value) {
        return Some(Change::Set(value));
    }
    let ast::Expr::BinaryOp { left, op, right } = strip_nested(value) else {
        return None;
    };
    let is_column = |e: &ast::Expr| translator.column_index(e) == Some(column);
    match op {
        ast::BinaryOperator::Plus if is_column(left) => {
            Some(Change::Add(integer(translator, right)?))
        }
        ast::BinaryOperator::Plus if is_column(right) => {
            Some(Change::Add(integer(translator, left)?))
        }
        ast::BinaryOperator::Minus if is_column(left) => {
            Some(Change::Add(integer(translator, right)?.checked_neg()?))
        }
        _ => None,
    }
}

fn strip_nested(expr: &ast::Expr) -> &ast::Expr {
    match expr {
        ast::Expr::Nested(inner) => strip_nested(inner),
        other => other,
    }
}

/// Writes `value` into `bytes` (2, 4 or 8 of them), or 22003 if it does not fit.
fn write_integer(bytes: &mut [u8], value: i64) -> zyron_common::Result<()> {
    let width = bytes.len();
    if !fits(value, width) {
        return Err(out_of_range(width));
    }
    bytes.copy_from_slice(&value.to_le_bytes()[..width]);
    Ok(())
}

/// PostgreSQL's error for an integer result its type cannot hold.
fn out_of_range(width: usize) -> ZyronError {
    let name = match width {
        2 => "smallint",
        4 => "integer",
        _ => "bigint",
    };
    ZyronError::new(
        SqlState::NUMERIC_VALUE_OUT_OF_RANGE,
        format!("{name} out of range"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integers_are_read_and_written_at_their_width() {
        for (width, value) in [(2, -2i64), (4, -123_456), (8, i64::MIN)] {
            let mut bytes = vec![0u8; width];
            write_integer(&mut bytes, value).unwrap();
            assert_eq!(read_integer(&bytes), value);
        }
    }

    #[test]
    fn a_value_past_the_type_is_22003() {
        let mut bytes = [0u8; 4];
        let error = write_integer(&mut bytes, i64::from(i32::MAX) + 1).unwrap_err();
        assert_eq!(error.sqlstate(), SqlState::NUMERIC_VALUE_OUT_OF_RANGE);
        assert_eq!(error.message(), "integer out of range");
        assert_eq!(bytes, [0; 4], "nothing is written");
        let mut bytes = [0u8; 2];
        assert!(write_integer(&mut bytes, 40_000).is_err());
        assert!(write_integer(&mut bytes, -32_768).is_ok());
    }
}
