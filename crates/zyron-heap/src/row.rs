//! The row format of the heap, and the order-preserving key format of the
//! primary-key index.
//!
//! A row is one byte string:
//!
//! ```text
//! null bitmap   ceil(columns / 8) bytes, bit i set = column i is NULL
//! values        each non-NULL column in order:
//!                 fixed-width types: their little-endian bytes (bool: 1 byte)
//!                 strings and binary: u32 LE length, then the bytes
//! ```
//!
//! Rows are encoded and decoded a column at a time over many rows (one cursor
//! per row), so each column's loop is one tight, typed loop.

use std::sync::Arc;

use arrow::array::{
    Array, ArrayData, ArrayRef, AsArray, BinaryBuilder, BooleanBufferBuilder, LargeStringBuilder,
    RecordBatch, StringBuilder, StringViewBuilder, downcast_primitive_array, make_array,
};
use arrow::buffer::{Buffer, MutableBuffer, NullBuffer};
use arrow::datatypes::{DataType, Schema, SchemaRef};

use zyron_common::{Result, SqlState, ZyronError};

/// How one column is laid out in a row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Layout {
    Bool,
    Fixed(usize),
    Utf8,
    LargeUtf8,
    Utf8View,
    Binary,
}

fn layout(data_type: &DataType) -> Option<Layout> {
    use DataType::*;
    Some(match data_type {
        Boolean => Layout::Bool,
        Int8 | UInt8 => Layout::Fixed(1),
        Int16 | UInt16 => Layout::Fixed(2),
        Int32 | UInt32 | Float32 | Date32 | Time32(_) => Layout::Fixed(4),
        Int64 | UInt64 | Float64 | Date64 | Time64(_) | Timestamp(_, _) | Duration(_) => {
            Layout::Fixed(8)
        }
        Decimal128(_, _) => Layout::Fixed(16),
        Utf8 => Layout::Utf8,
        LargeUtf8 => Layout::LargeUtf8,
        Utf8View => Layout::Utf8View,
        Binary => Layout::Binary,
        _ => return None,
    })
}

/// Whether heap tables can store a column of this type.
pub fn supported(data_type: &DataType) -> bool {
    layout(data_type).is_some()
}

/// Encodes and decodes rows of one table schema.
#[derive(Debug, Clone)]
pub struct RowCodec {
    schema: SchemaRef,
    /// `schema` with every column nullable, built once: see [`RowCodec::nullable_schema`].
    nullable_schema: SchemaRef,
    layouts: Vec<Layout>,
    bitmap_bytes: usize,
}

impl RowCodec {
    pub fn new(schema: SchemaRef) -> Result<Self> {
        let layouts = schema
            .fields()
            .iter()
            .map(|f| {
                layout(f.data_type()).ok_or_else(|| {
                    ZyronError::not_supported(format!(
                        "column \"{}\" has type {} which heap tables cannot store yet",
                        f.name(),
                        f.data_type()
                    ))
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let bitmap_bytes = layouts.len().div_ceil(8);
        Ok(Self {
            nullable_schema: all_nullable(&schema),
            schema,
            layouts,
            bitmap_bytes,
        })
    }

    pub fn schema(&self) -> &SchemaRef {
        &self.schema
    }

    /// The schema with every column nullable, as SQL engines see a table:
    /// NOT NULL is enforced here, in [`RowCodec::encode`], with PostgreSQL's
    /// message naming the table's column. Built once, since every statement
    /// on the table asks for it.
    pub fn nullable_schema(&self) -> &SchemaRef {
        &self.nullable_schema
    }

    /// Encodes every row of `batch` (whose columns must match the schema's types).
    /// NULLs in NOT NULL columns are refused with SQLSTATE 23502.
    pub fn encode(&self, batch: &RecordBatch) -> Result<Vec<Vec<u8>>> {
        assert_eq!(
            batch.num_columns(),
            self.layouts.len(),
            "batch does not match the table"
        );
        let rows = batch.num_rows();
        let mut out: Vec<Vec<u8>> = (0..rows).map(|_| vec![0u8; self.bitmap_bytes]).collect();
        for (c, (column, layout)) in batch.columns().iter().zip(&self.layouts).enumerate() {
            let field = self.schema.field(c);
            if column.data_type() != field.data_type() {
                return Err(ZyronError::internal(format!(
                    "column \"{}\" arrived as {}, the table stores {}",
                    field.name(),
                    column.data_type(),
                    field.data_type()
                )));
            }
            if !field.is_nullable() && column.null_count() > 0 {
                return Err(ZyronError::new(
                    SqlState::NOT_NULL_VIOLATION,
                    format!(
                        "null value in column \"{}\" violates not-null constraint",
                        field.name()
                    ),
                ));
            }
            encode_column(column.as_ref(), *layout, c, &mut out);
        }
        Ok(out)
    }

    /// Decodes `rows` into a batch of the `projection` columns (all if `None`).
    pub fn decode(&self, rows: &[&[u8]], projection: Option<&[usize]>) -> Result<RecordBatch> {
        let all: Vec<usize>;
        let wanted = match projection {
            Some(p) => p,
            None => {
                all = (0..self.layouts.len()).collect();
                &all
            }
        };
        let mut cursors: Vec<usize> = vec![self.bitmap_bytes; rows.len()];
        let mut arrays: Vec<Option<ArrayRef>> = vec![None; self.layouts.len()];
        let last_wanted = wanted.iter().copied().max();
        for (c, layout) in self.layouts.iter().enumerate() {
            if Some(c) > last_wanted {
                break;
            }
            let keep = wanted.contains(&c);
            let data_type = self.schema.field(c).data_type();
            arrays[c] = decode_column(rows, &mut cursors, c, *layout, data_type, keep);
        }
        let columns: Vec<ArrayRef> = wanted
            .iter()
            .map(|&c| arrays[c].clone().expect("projected columns are decoded"))
            .collect();
        let schema = Arc::new(
            self.schema
                .project(wanted)
                .map_err(|e| ZyronError::internal(e.to_string()))?,
        );
        let options = arrow::array::RecordBatchOptions::new().with_row_count(Some(rows.len()));
        RecordBatch::try_new_with_options(schema, columns, &options)
            .map_err(|e| ZyronError::internal(e.to_string()))
    }
}

/// `schema` with every column nullable (its metadata kept).
pub fn all_nullable(schema: &Schema) -> SchemaRef {
    Arc::new(Schema::new_with_metadata(
        schema
            .fields()
            .iter()
            .map(|f| f.as_ref().clone().with_nullable(true))
            .collect::<Vec<_>>(),
        schema.metadata().clone(),
    ))
}

impl RowCodec {
    /// Where `column`'s value starts in `row` (where it would start, were it
    /// NULL) and whether it is NULL: a walk over the columns before it, for
    /// statements that change one value in place instead of decoding the row.
    pub fn locate(&self, row: &[u8], column: usize) -> (usize, bool) {
        let mut at = self.bitmap_bytes;
        for (c, layout) in self.layouts[..column].iter().enumerate() {
            if !is_null(row, c) {
                at += match layout {
                    Layout::Bool => 1,
                    Layout::Fixed(width) => *width,
                    _ => 4 + read_len(row, at),
                };
            }
        }
        (at, is_null(row, column))
    }

    /// The width in bytes of `column`'s values, if they all have one.
    pub fn fixed_width(&self, column: usize) -> Option<usize> {
        match self.layouts[column] {
            Layout::Fixed(width) => Some(width),
            _ => None,
        }
    }

    /// Marks `column` NULL (`true`) or not in `row`'s bitmap; the caller
    /// removes or inserts the value's bytes to match.
    pub fn set_null(&self, row: &mut [u8], column: usize, null: bool) {
        let bit = 1 << (column % 8);
        if null {
            row[column / 8] |= bit;
        } else {
            row[column / 8] &= !bit;
        }
    }
}

fn is_null(row: &[u8], column: usize) -> bool {
    row[column / 8] & (1 << (column % 8)) != 0
}

fn encode_column(column: &dyn Array, layout: Layout, c: usize, out: &mut [Vec<u8>]) {
    let nulls = column.logical_nulls();
    let valid = |r: usize| nulls.as_ref().is_none_or(|n| n.is_valid(r));
    for (r, row) in out.iter_mut().enumerate() {
        if !valid(r) {
            row[c / 8] |= 1 << (c % 8);
        }
    }
    let put_bytes = |row: &mut Vec<u8>, bytes: &[u8]| {
        row.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
        row.extend_from_slice(bytes);
    };
    match layout {
        Layout::Bool => {
            let values = column.as_boolean();
            for (r, row) in out.iter_mut().enumerate().filter(|(r, _)| valid(*r)) {
                row.push(values.value(r) as u8);
            }
        }
        Layout::Fixed(width) => {
            let data = column.to_data();
            let bytes = &data.buffers()[0].as_slice()[data.offset() * width..];
            for (r, row) in out.iter_mut().enumerate().filter(|(r, _)| valid(*r)) {
                row.extend_from_slice(&bytes[r * width..(r + 1) * width]);
            }
        }
        Layout::Utf8 => {
            let values = column.as_string::<i32>();
            for (r, row) in out.iter_mut().enumerate().filter(|(r, _)| valid(*r)) {
                put_bytes(row, values.value(r).as_bytes());
            }
        }
        Layout::LargeUtf8 => {
            let values = column.as_string::<i64>();
            for (r, row) in out.iter_mut().enumerate().filter(|(r, _)| valid(*r)) {
                put_bytes(row, values.value(r).as_bytes());
            }
        }
        Layout::Utf8View => {
            let values = column.as_string_view();
            for (r, row) in out.iter_mut().enumerate().filter(|(r, _)| valid(*r)) {
                put_bytes(row, values.value(r).as_bytes());
            }
        }
        Layout::Binary => {
            let values = column.as_binary::<i32>();
            for (r, row) in out.iter_mut().enumerate().filter(|(r, _)| valid(*r)) {
                put_bytes(row, values.value(r));
            }
        }
    }
}

fn read_len(row: &[u8], at: usize) -> usize {
    u32::from_le_bytes(row[at..at + 4].try_into().expect("4 bytes")) as usize
}

fn decode_column(
    rows: &[&[u8]],
    cursors: &mut [usize],
    c: usize,
    layout: Layout,
    data_type: &DataType,
    keep: bool,
) -> Option<ArrayRef> {
    let n = rows.len();
    let nulls = NullBuffer::from_iter(rows.iter().map(|row| !is_null(row, c)));
    let nulls = (nulls.null_count() > 0).then_some(nulls);
    let present = |r: usize| !is_null(rows[r], c);
    match layout {
        Layout::Bool => {
            let mut values = BooleanBufferBuilder::new(n);
            for r in 0..n {
                if present(r) {
                    values.append(rows[r][cursors[r]] != 0);
                    cursors[r] += 1;
                } else {
                    values.append(false);
                }
            }
            keep.then(|| {
                Arc::new(arrow::array::BooleanArray::new(values.finish(), nulls)) as ArrayRef
            })
        }
        Layout::Fixed(width) => {
            let mut values = MutableBuffer::new(n * width);
            let zeros = [0u8; 16];
            for r in 0..n {
                if present(r) {
                    if keep {
                        values.extend_from_slice(&rows[r][cursors[r]..cursors[r] + width]);
                    }
                    cursors[r] += width;
                } else if keep {
                    values.extend_from_slice(&zeros[..width]);
                }
            }
            if !keep {
                return None;
            }
            let data = ArrayData::builder(data_type.clone())
                .len(n)
                .add_buffer(Buffer::from(values))
                .nulls(nulls)
                .build()
                .expect("fixed-width column data is well formed");
            Some(make_array(data))
        }
        Layout::Utf8 | Layout::LargeUtf8 | Layout::Utf8View | Layout::Binary => {
            let mut builder = VarBuilder::new(layout, n, keep);
            for r in 0..n {
                if present(r) {
                    let len = read_len(rows[r], cursors[r]);
                    let start = cursors[r] + 4;
                    builder.append(Some(&rows[r][start..start + len]));
                    cursors[r] = start + len;
                } else {
                    builder.append(None);
                }
            }
            builder.finish()
        }
    }
}

enum VarBuilder {
    Skip,
    Utf8(StringBuilder),
    LargeUtf8(LargeStringBuilder),
    Utf8View(StringViewBuilder),
    Binary(BinaryBuilder),
}

impl VarBuilder {
    fn new(layout: Layout, rows: usize, keep: bool) -> Self {
        if !keep {
            return VarBuilder::Skip;
        }
        match layout {
            Layout::Utf8 => VarBuilder::Utf8(StringBuilder::with_capacity(rows, rows * 16)),
            Layout::LargeUtf8 => {
                VarBuilder::LargeUtf8(LargeStringBuilder::with_capacity(rows, rows * 16))
            }
            Layout::Utf8View => VarBuilder::Utf8View(StringViewBuilder::with_capacity(rows)),
            _ => VarBuilder::Binary(BinaryBuilder::with_capacity(rows, rows * 16)),
        }
    }

    fn append(&mut self, value: Option<&[u8]>) {
        // Strings were valid UTF-8 when encoded, and rows on disk are checksummed.
        let text = || value.map(|v| std::str::from_utf8(v).expect("stored strings are UTF-8"));
        match self {
            VarBuilder::Skip => {}
            VarBuilder::Utf8(b) => b.append_option(text()),
            VarBuilder::LargeUtf8(b) => b.append_option(text()),
            VarBuilder::Utf8View(b) => b.append_option(text()),
            VarBuilder::Binary(b) => b.append_option(value),
        }
    }

    fn finish(self) -> Option<ArrayRef> {
        Some(match self {
            VarBuilder::Skip => return None,
            VarBuilder::Utf8(mut b) => Arc::new(b.finish()),
            VarBuilder::LargeUtf8(mut b) => Arc::new(b.finish()),
            VarBuilder::Utf8View(mut b) => Arc::new(b.finish()),
            VarBuilder::Binary(mut b) => Arc::new(b.finish()),
        })
    }
}

/// Builds order-preserving keys: comparing two keys as bytes gives the same
/// answer as comparing the values column by column.
///
/// Each column starts with a marker byte (0 NULL, 1 a value). Integers are big-endian with the sign bit flipped; floats use the IEEE
/// total-order trick; strings escape `0x00` as `0x00 0xFF` and end with
/// `0x00 0x00`, so a prefix sorts first.
#[derive(Debug, Clone)]
pub struct KeyCodec {
    columns: Vec<(usize, DataType)>,
    /// The table column of each key column, in key order.
    column_indices: Vec<usize>,
}

impl KeyCodec {
    pub fn new(schema: &SchemaRef, key_columns: &[usize]) -> Result<Self> {
        let columns = key_columns
            .iter()
            .map(|&c| {
                let field = schema.field(c);
                if key_kind(field.data_type()).is_none() {
                    return Err(ZyronError::not_supported(format!(
                        "primary key column \"{}\" has type {}, which cannot be indexed yet",
                        field.name(),
                        field.data_type()
                    )));
                }
                Ok((c, field.data_type().clone()))
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Self {
            columns,
            column_indices: key_columns.to_vec(),
        })
    }

    /// The table column of each key column, in key order.
    pub fn key_columns(&self) -> &[usize] {
        &self.column_indices
    }

    /// The key of row `r` of `batch` (in table column order).
    pub fn key(&self, batch: &RecordBatch, r: usize) -> Vec<u8> {
        let mut key = Vec::with_capacity(16);
        for (c, data_type) in &self.columns {
            append_key(&mut key, batch.column(*c).as_ref(), r, data_type);
        }
        key
    }

    /// Keys for values given one per key column (each a one-row array).
    pub fn key_of(&self, values: &[ArrayRef]) -> Vec<u8> {
        assert_eq!(values.len(), self.columns.len());
        let mut key = Vec::with_capacity(16);
        for ((_, data_type), value) in self.columns.iter().zip(values) {
            append_key(&mut key, value.as_ref(), 0, data_type);
        }
        key
    }

    /// The key of integer values given one per key column, in key order;
    /// `None` unless every key column is a SMALLINT, INTEGER or BIGINT the
    /// value fits. The same bytes as [`KeyCodec::key_of`] on arrays of
    /// those values, without building arrays: a point statement's key.
    pub fn key_of_integers(&self, values: &[i64]) -> Option<Vec<u8>> {
        assert_eq!(values.len(), self.columns.len());
        let mut key = Vec::with_capacity(9 * values.len());
        for ((_, data_type), &value) in self.columns.iter().zip(values) {
            let little_endian = value.to_le_bytes();
            let width = match data_type {
                DataType::Int16 if i16::try_from(value).is_ok() => 2,
                DataType::Int32 if i32::try_from(value).is_ok() => 4,
                DataType::Int64 => 8,
                _ => return None,
            };
            key.push(1);
            push_signed_key(&mut key, &little_endian[..width]);
        }
        Some(key)
    }

    /// Types of the key columns, in key order.
    pub fn key_column_types(&self) -> Vec<DataType> {
        self.columns.iter().map(|(_, t)| t.clone()).collect()
    }
}

#[derive(Clone, Copy)]
enum KeyKind {
    Signed(usize),
    Unsigned(usize),
    Float32,
    Float64,
    Bool,
    Bytes,
}

fn key_kind(data_type: &DataType) -> Option<KeyKind> {
    use DataType::*;
    Some(match data_type {
        Int8 => KeyKind::Signed(1),
        Int16 => KeyKind::Signed(2),
        Int32 | Date32 | Time32(_) => KeyKind::Signed(4),
        Int64 | Date64 | Time64(_) | Timestamp(_, _) | Duration(_) => KeyKind::Signed(8),
        Decimal128(_, _) => KeyKind::Signed(16),
        UInt8 => KeyKind::Unsigned(1),
        UInt16 => KeyKind::Unsigned(2),
        UInt32 => KeyKind::Unsigned(4),
        UInt64 => KeyKind::Unsigned(8),
        Float32 => KeyKind::Float32,
        Float64 => KeyKind::Float64,
        Boolean => KeyKind::Bool,
        Utf8 | LargeUtf8 | Utf8View | Binary => KeyKind::Bytes,
        _ => return None,
    })
}

fn append_key(key: &mut Vec<u8>, array: &dyn Array, r: usize, data_type: &DataType) {
    // Primary keys refuse NULL before a key is built; the marker byte keeps a
    // stray NULL (a row not yet checked) ordered first instead of crashing.
    if array.is_null(r) {
        key.push(0);
        return;
    }
    key.push(1);
    let fixed = |width: usize| fixed_bytes(array, r, width);
    match key_kind(data_type).expect("checked when the codec was built") {
        KeyKind::Signed(width) => push_signed_key(key, fixed(width)),
        KeyKind::Unsigned(width) => key.extend(fixed(width).iter().rev()),
        KeyKind::Float32 => {
            let bits = u32::from_le_bytes(fixed(4).try_into().expect("4 bytes"));
            let ordered = if bits >> 31 == 1 {
                !bits
            } else {
                bits | (1 << 31)
            };
            key.extend_from_slice(&ordered.to_be_bytes());
        }
        KeyKind::Float64 => {
            let bits = u64::from_le_bytes(fixed(8).try_into().expect("8 bytes"));
            let ordered = if bits >> 63 == 1 {
                !bits
            } else {
                bits | (1 << 63)
            };
            key.extend_from_slice(&ordered.to_be_bytes());
        }
        KeyKind::Bool => key.push(array.as_boolean().value(r) as u8),
        KeyKind::Bytes => {
            let bytes: &[u8] = match data_type {
                DataType::Utf8 => array.as_string::<i32>().value(r).as_bytes(),
                DataType::LargeUtf8 => array.as_string::<i64>().value(r).as_bytes(),
                DataType::Utf8View => array.as_string_view().value(r).as_bytes(),
                _ => array.as_binary::<i32>().value(r),
            };
            for &b in bytes {
                key.push(b);
                if b == 0 {
                    key.push(0xFF);
                }
            }
            key.extend_from_slice(&[0, 0]);
        }
    }
}

/// Row `r`'s value in a primitive array of `width`-byte values, as its
/// little-endian bytes: read in place (the array's data is not copied, as
/// `to_data` would).
fn fixed_bytes(array: &dyn Array, r: usize, width: usize) -> &[u8] {
    downcast_primitive_array!(
        array => {
            assert_eq!(
                std::mem::size_of_val(&array.values()[r]),
                width,
                "a key value's width matches its type"
            );
            &array.values().inner().as_slice()[r * width..(r + 1) * width]
        }
        other => unreachable!("a fixed-width key column holds {other}"),
    )
}

/// A signed integer's key bytes: big-endian, sign bit flipped, so that
/// negative values sort first.
fn push_signed_key(key: &mut Vec<u8>, little_endian: &[u8]) {
    let start = key.len();
    key.extend(little_endian.iter().rev());
    key[start] ^= 0x80;
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{
        BooleanArray, Decimal128Array, Float64Array, Int32Array, Int64Array, StringArray,
        StringViewArray,
    };
    use arrow::datatypes::{Field, Schema};

    #[test]
    fn locate_finds_each_value_after_nulls_and_strings() {
        let batch = sample();
        let codec = RowCodec::new(batch.schema()).unwrap();
        let rows = codec.encode(&batch).unwrap();
        for (r, row) in rows.iter().enumerate() {
            // `n` (Int32) sits after a string, a NULL or two and a decimal.
            let n = batch.num_columns() - 2;
            let (at, null) = codec.locate(row, n);
            let column = batch
                .column(n)
                .as_primitive::<arrow::datatypes::Int32Type>();
            assert_eq!(null, column.is_null(r), "row {r}");
            if !null {
                let bytes: [u8; 4] = row[at..at + 4].try_into().unwrap();
                assert_eq!(i32::from_le_bytes(bytes), column.value(r), "row {r}");
            }
            // A value changed in place decodes as the new value.
            let mut changed = row.clone();
            let (at, _) = codec.locate(&changed, 0);
            changed[at..at + 8].copy_from_slice(&77i64.to_le_bytes());
            let decoded = codec.decode(&[&changed], Some(&[0, n])).unwrap();
            let ids = decoded
                .column(0)
                .as_primitive::<arrow::datatypes::Int64Type>();
            assert_eq!(ids.value(0), 77);
            assert_eq!(
                decoded.column(1).as_ref(),
                batch.column(n).slice(r, 1).as_ref()
            );
        }
        assert_eq!(codec.fixed_width(0), Some(8));
        assert_eq!(codec.fixed_width(2), None);
    }

    #[test]
    fn a_null_value_given_bytes_decodes() {
        let batch = sample();
        let codec = RowCodec::new(batch.schema()).unwrap();
        let n = batch.num_columns() - 2;
        let rows = codec.encode(&batch).unwrap();
        let (r, row) = rows
            .iter()
            .enumerate()
            .find(|(r, _)| batch.column(n).is_null(*r))
            .expect("the sample has a NULL n");
        let mut row = row.clone();
        let (at, null) = codec.locate(&row, n);
        assert!(null, "row {r}");
        codec.set_null(&mut row, n, false);
        row.splice(at..at, 5i32.to_le_bytes());
        let decoded = codec.decode(&[&row], None).unwrap();
        let values = decoded
            .column(n)
            .as_primitive::<arrow::datatypes::Int32Type>();
        assert_eq!(values.iter().collect::<Vec<_>>(), vec![Some(5)]);
        // The columns after it still decode as before.
        let last = batch.num_columns() - 1;
        assert_eq!(
            decoded.column(last).as_ref(),
            batch.column(last).slice(r, 1).as_ref()
        );
    }

    fn sample() -> RecordBatch {
        let schema = Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int64, false),
            Field::new("flag", DataType::Boolean, true),
            Field::new("name", DataType::Utf8View, true),
            Field::new("price", DataType::Decimal128(12, 2), true),
            Field::new("score", DataType::Float64, true),
            Field::new("note", DataType::Utf8, true),
            Field::new("n", DataType::Int32, true),
            Field::new("bytes", DataType::Binary, true),
        ]));
        RecordBatch::try_new(
            schema,
            vec![
                Arc::new(Int64Array::from(vec![1, -2, 3])),
                Arc::new(BooleanArray::from(vec![Some(true), None, Some(false)])),
                Arc::new(StringViewArray::from(vec![
                    Some("a much longer string than twelve"),
                    Some(""),
                    None,
                ])),
                Arc::new(
                    Decimal128Array::from(vec![Some(12345), None, Some(-1)])
                        .with_precision_and_scale(12, 2)
                        .unwrap(),
                ),
                Arc::new(Float64Array::from(vec![None, Some(2.5), Some(-0.0)])),
                Arc::new(StringArray::from(vec![Some("x\0y"), None, Some("z")])),
                Arc::new(Int32Array::from(vec![Some(7), Some(8), None])),
                Arc::new(arrow::array::BinaryArray::from(vec![
                    Some(&[0u8, 1, 255][..]),
                    None,
                    Some(&[][..]),
                ])),
            ],
        )
        .unwrap()
    }

    #[test]
    fn rows_round_trip_with_and_without_projection() {
        let batch = sample();
        let codec = RowCodec::new(batch.schema()).unwrap();
        let rows = codec.encode(&batch).unwrap();
        let refs: Vec<&[u8]> = rows.iter().map(|r| r.as_slice()).collect();
        assert_eq!(codec.decode(&refs, None).unwrap(), batch);
        assert_eq!(
            codec.decode(&refs, Some(&[5, 2])).unwrap(),
            batch.project(&[5, 2]).unwrap()
        );
        assert_eq!(codec.decode(&refs, Some(&[])).unwrap().num_rows(), 3);
        // A slice of a batch (non-zero offset) encodes its own rows.
        let rows = codec.encode(&batch.slice(1, 2)).unwrap();
        let refs: Vec<&[u8]> = rows.iter().map(|r| r.as_slice()).collect();
        assert_eq!(codec.decode(&refs, None).unwrap(), batch.slice(1, 2));
    }

    #[test]
    fn not_null_columns_refuse_nulls() {
        let schema = Arc::new(Schema::new(vec![Field::new("id", DataType::Int64, false)]));
        let codec = RowCodec::new(schema).unwrap();
        let bad = RecordBatch::try_new(
            Arc::new(Schema::new(vec![Field::new("id", DataType::Int64, true)])),
            vec![Arc::new(Int64Array::from(vec![Some(1), None]))],
        )
        .unwrap();
        let err = codec.encode(&bad).unwrap_err();
        assert_eq!(err.sqlstate(), SqlState::NOT_NULL_VIOLATION);
        assert!(err.message().contains("\"id\""));
    }

    #[test]
    fn keys_sort_like_their_values() {
        let schema = Arc::new(Schema::new(vec![
            Field::new("a", DataType::Int64, false),
            Field::new("s", DataType::Utf8, false),
            Field::new("f", DataType::Float64, false),
        ]));
        let batch = RecordBatch::try_new(
            schema.clone(),
            vec![
                Arc::new(Int64Array::from(vec![-5, -5, 0, 3, 3, i64::MIN, i64::MAX])),
                Arc::new(StringArray::from(vec!["b", "a\0", "", "a", "ab", "z", ""])),
                Arc::new(Float64Array::from(vec![
                    1.0,
                    -1.0,
                    -0.5,
                    2.0,
                    f64::NEG_INFINITY,
                    0.0,
                    1e300,
                ])),
            ],
        )
        .unwrap();
        let codec = KeyCodec::new(&schema, &[0, 1, 2]).unwrap();
        let mut by_key: Vec<usize> = (0..batch.num_rows()).collect();
        by_key.sort_by_key(|&r| codec.key(&batch, r));
        let a = batch
            .column(0)
            .as_primitive::<arrow::datatypes::Int64Type>();
        let s = batch.column(1).as_string::<i32>();
        let mut by_value: Vec<usize> = (0..batch.num_rows()).collect();
        by_value.sort_by(|&x, &y| (a.value(x), s.value(x)).cmp(&(a.value(y), s.value(y))));
        assert_eq!(by_key, by_value);
        let floats = KeyCodec::new(&schema, &[2]).unwrap();
        let mut by_float: Vec<usize> = (0..batch.num_rows()).collect();
        by_float.sort_by_key(|&r| floats.key(&batch, r));
        let f = batch
            .column(2)
            .as_primitive::<arrow::datatypes::Float64Type>();
        assert!(by_float.windows(2).all(|w| f.value(w[0]) <= f.value(w[1])));
    }

    #[test]
    fn integer_keys_match_array_keys_and_sort_like_their_values() {
        use arrow::array::Int16Array;
        let schema = Arc::new(Schema::new(vec![
            Field::new("small", DataType::Int16, false),
            Field::new("int", DataType::Int32, false),
            Field::new("big", DataType::Int64, false),
        ]));
        let smalls = [i16::MIN, -1, 0, 1, 300, i16::MAX];
        let ints = [i32::MIN, -70_000, -1, 0, 5, i32::MAX];
        let bigs = [i64::MIN, -1, 0, 1, 1 << 40, i64::MAX];
        let batch = RecordBatch::try_new(
            schema.clone(),
            vec![
                Arc::new(Int16Array::from(smalls.to_vec())),
                Arc::new(Int32Array::from(ints.to_vec())),
                Arc::new(Int64Array::from(bigs.to_vec())),
            ],
        )
        .unwrap();
        let codec = KeyCodec::new(&schema, &[2, 0, 1]).unwrap();
        let mut keys = Vec::new();
        for r in 0..batch.num_rows() {
            let values = [bigs[r], smalls[r].into(), ints[r].into()];
            let key = codec.key_of_integers(&values).expect("every value fits");
            assert_eq!(key, codec.key(&batch, r), "row {r}");
            let one_row: Vec<ArrayRef> = [2, 0, 1]
                .iter()
                .map(|&c| batch.column(c).slice(r, 1))
                .collect();
            assert_eq!(key, codec.key_of(&one_row), "row {r} from sliced arrays");
            keys.push(key);
        }
        assert!(
            keys.windows(2).all(|w| w[0] < w[1]),
            "the rows are in key order"
        );
        let too_big_for_smallint = [0, i64::from(i16::MAX) + 1, 0];
        assert_eq!(codec.key_of_integers(&too_big_for_smallint), None);
        let too_small_for_int = [0, 0, i64::from(i32::MIN) - 1];
        assert_eq!(codec.key_of_integers(&too_small_for_int), None);
    }

    /// The key bytes of each fixed-width kind, read from a sliced array (so
    /// at an offset): a rewrite of the encoding cannot change them silently.
    #[test]
    fn fixed_width_key_bytes_are_pinned() {
        use arrow::array::{Date32Array, Float32Array, TimestampMicrosecondArray, UInt64Array};
        let decimal = Decimal128Array::from(vec![0, -1])
            .with_precision_and_scale(10, 2)
            .unwrap();
        let mut minus_one = vec![1u8, 0x7F];
        minus_one.extend([0xFF; 15]);
        let cases: Vec<(ArrayRef, Vec<u8>)> = vec![
            (
                Arc::new(Date32Array::from(vec![0, 1])),
                vec![1, 0x80, 0, 0, 1],
            ),
            (
                Arc::new(UInt64Array::from(vec![0, 258])),
                vec![1, 0, 0, 0, 0, 0, 0, 1, 2],
            ),
            (Arc::new(decimal), minus_one),
            (
                Arc::new(TimestampMicrosecondArray::from(vec![0, 5]).with_timezone("UTC")),
                vec![1, 0x80, 0, 0, 0, 0, 0, 0, 5],
            ),
            (
                Arc::new(Float32Array::from(vec![0.0, -1.0])),
                vec![1, 0x40, 0x7F, 0xFF, 0xFF],
            ),
        ];
        for (array, expected) in cases {
            let data_type = array.data_type().clone();
            let schema = Arc::new(Schema::new(vec![Field::new("k", data_type.clone(), false)]));
            let codec = KeyCodec::new(&schema, &[0]).unwrap();
            assert_eq!(codec.key_of(&[array.slice(1, 1)]), expected, "{data_type}");
            let batch = RecordBatch::try_new(schema, vec![array]).unwrap();
            assert_eq!(codec.key(&batch, 1), expected, "{data_type} in a batch");
        }
    }
}
