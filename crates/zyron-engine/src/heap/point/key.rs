//! The row a WHERE clause names by its whole primary key, read straight from
//! the statement: `k = 5`, `k1 = $1 AND k2 = $2`, with integer keys.
//!
//! Such a clause selects the one row whose key bytes equal the values' key
//! bytes, so the index alone answers it: no filter needs evaluating on the
//! row. That holds only where the values are exactly the key's values, so a
//! value that is not an integer, or does not fit its column, gives `None`
//! and the statement takes the general path (which compares as SQL does).

use datafusion::arrow::datatypes::DataType;
use datafusion::common::ScalarValue;
use datafusion::sql::sqlparser::ast;
use zyron_heap::Transaction;
use zyron_heap::row::RowCodec;
use zyron_heap::table::HeapTable;

use super::Translator;

/// A primary key a WHERE clause pins: its index bytes, and its value in each
/// key column.
#[derive(Debug)]
pub(super) struct ExactKey {
    bytes: Vec<u8>,
    /// `(column, width, value)` per key column.
    values: Vec<(usize, usize, i64)>,
}

impl ExactKey {
    /// Whether `row` has this key. The versions in one slot normally all do
    /// (an UPDATE of the key moves the row), but a key added by ALTER TABLE
    /// indexes a slot by its newest version, and an older version, or one
    /// whose writer then rolled back, may hold other values.
    pub(super) fn matches(&self, codec: &RowCodec, row: &[u8]) -> bool {
        self.values.iter().all(|&(column, width, value)| {
            let (at, null) = codec.locate(row, column);
            !null && read_integer(&row[at..at + width]) == value
        })
    }
}

/// The primary key a WHERE clause pins: `k1 = v1 AND k2 = v2 ...`, exactly
/// one integer equality per key column and nothing else.
pub(super) fn exact_key(
    table: &HeapTable,
    translator: &Translator<'_>,
    selection: &ast::Expr,
) -> Option<ExactKey> {
    let key_columns = table.key_codec()?.key_columns();
    let mut conjuncts = Vec::new();
    split_and(selection, &mut conjuncts);
    if conjuncts.len() != key_columns.len() {
        return None;
    }
    let schema = table.codec().schema();
    let mut key_values: Vec<Option<i64>> = vec![None; key_columns.len()];
    let mut values = Vec::with_capacity(key_columns.len());
    for conjunct in conjuncts {
        let ast::Expr::BinaryOp {
            left,
            op: ast::BinaryOperator::Eq,
            right,
        } = conjunct
        else {
            return None;
        };
        let (column, value) = match translator.column_index(left) {
            Some(column) => (column, integer(translator, right)?),
            None => (translator.column_index(right)?, integer(translator, left)?),
        };
        let position = key_columns.iter().position(|&c| c == column)?;
        let data_type = schema.field(column).data_type();
        let width = integer_width(data_type)?;
        if key_values[position].is_some() || !fits(value, width) {
            return None;
        }
        key_values[position] = Some(value);
        values.push((column, width, value));
    }
    let key_values: Vec<i64> = key_values.into_iter().collect::<Option<_>>()?;
    Some(ExactKey {
        bytes: table.key_codec()?.key_of_integers(&key_values)?,
        values,
    })
}

/// The slot of `key`'s row and the row's bytes, if `txn`'s snapshot sees one.
pub(super) fn visible_row(
    table: &HeapTable,
    txn: &Transaction,
    key: &ExactKey,
) -> Option<(u64, Vec<u8>)> {
    let slot = table.slot_for_key(&key.bytes)?;
    let row = table.visible_row(&txn.snapshot(), slot)?;
    key.matches(table.codec(), &row).then_some((slot, row))
}

/// The operands of a tree of ANDs (parentheses looked through).
fn split_and<'e>(expr: &'e ast::Expr, out: &mut Vec<&'e ast::Expr>) {
    match expr {
        ast::Expr::BinaryOp {
            left,
            op: ast::BinaryOperator::And,
            right,
        } => {
            split_and(left, out);
            split_and(right, out);
        }
        ast::Expr::Nested(inner) => split_and(inner, out),
        other => out.push(other),
    }
}

/// An integer literal or parameter, signs and parentheses applied; `None`
/// for anything else, NULL included.
pub(super) fn integer(translator: &Translator<'_>, expr: &ast::Expr) -> Option<i64> {
    match expr {
        ast::Expr::Value(value) => match translator.value(&value.value)? {
            ScalarValue::Int8(Some(v)) => Some(v.into()),
            ScalarValue::Int16(Some(v)) => Some(v.into()),
            ScalarValue::Int32(Some(v)) => Some(v.into()),
            ScalarValue::Int64(Some(v)) => Some(v),
            ScalarValue::UInt8(Some(v)) => Some(v.into()),
            ScalarValue::UInt16(Some(v)) => Some(v.into()),
            ScalarValue::UInt32(Some(v)) => Some(v.into()),
            ScalarValue::UInt64(Some(v)) => i64::try_from(v).ok(),
            _ => None,
        },
        ast::Expr::UnaryOp {
            op: ast::UnaryOperator::Minus,
            expr,
        } => integer(translator, expr)?.checked_neg(),
        ast::Expr::UnaryOp {
            op: ast::UnaryOperator::Plus,
            expr,
        } => integer(translator, expr),
        ast::Expr::Nested(inner) => integer(translator, inner),
        _ => None,
    }
}

/// The width of SMALLINT, INTEGER and BIGINT values; `None` for other types.
pub(super) fn integer_width(data_type: &DataType) -> Option<usize> {
    match data_type {
        DataType::Int16 => Some(2),
        DataType::Int32 => Some(4),
        DataType::Int64 => Some(8),
        _ => None,
    }
}

pub(super) fn fits(value: i64, width: usize) -> bool {
    match width {
        2 => i16::try_from(value).is_ok(),
        4 => i32::try_from(value).is_ok(),
        _ => true,
    }
}

/// A little-endian signed integer of 2, 4 or 8 bytes.
pub(super) fn read_integer(bytes: &[u8]) -> i64 {
    match bytes.len() {
        2 => i16::from_le_bytes([bytes[0], bytes[1]]).into(),
        4 => i32::from_le_bytes(bytes.try_into().expect("4 bytes")).into(),
        8 => i64::from_le_bytes(bytes.try_into().expect("8 bytes")),
        width => unreachable!("integer columns are 2, 4 or 8 bytes wide, not {width}"),
    }
}
