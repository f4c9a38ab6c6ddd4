//! Logical types: how an Arrow schema is stored in the footer (SPEC.md, "Schema"), and the
//! flattened tree of column nodes the writer and reader walk.

use std::sync::Arc;

use arrow::datatypes::{DataType, Field, FieldRef, Fields, Schema, TimeUnit};

use crate::error::{FormatError, Result, corrupt};
use crate::io::{ByteReader, ByteWriter};

/// Arrow extension name that marks a picosecond timestamp (SPEC.md, "TimestampPs").
pub const TIMESTAMP_PS_EXTENSION: &str = "zyron.timestamp_ps";
/// Field metadata key holding the picosecond timestamp's time zone, if any.
pub const TIMESTAMP_PS_TIMEZONE: &str = "zyron.timezone";
const EXTENSION_NAME_KEY: &str = "ARROW:extension:name";
/// Deepest nesting of lists and structs a reader accepts; bounds recursion on hostile input.
pub const MAX_NESTING_DEPTH: usize = 16;
/// Most column nodes a file may have; bounds the footer's allocations.
pub const MAX_COLUMNS: u64 = 1 << 20;

/// A picosecond timestamp field: Arrow has no such unit, so it travels as Decimal128(38, 0)
/// (picoseconds since 1970-01-01T00:00:00 UTC) carrying the extension name.
pub fn timestamp_ps_field(name: &str, nullable: bool, timezone: Option<&str>) -> Field {
    let mut metadata = std::collections::HashMap::from([(
        EXTENSION_NAME_KEY.to_string(),
        TIMESTAMP_PS_EXTENSION.to_string(),
    )]);
    if let Some(tz) = timezone {
        metadata.insert(TIMESTAMP_PS_TIMEZONE.to_string(), tz.to_string());
    }
    Field::new(name, DataType::Decimal128(38, 0), nullable).with_metadata(metadata)
}

fn is_timestamp_ps(field: &Field) -> bool {
    field.metadata().get(EXTENSION_NAME_KEY).map(String::as_str) == Some(TIMESTAMP_PS_EXTENSION)
}

/// How a column's values are laid out in blocks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Physical {
    /// Booleans, stored as an integer stream of 0 and 1.
    Bool,
    /// Integers up to 64 bits, dates, times and timestamps: one integer stream.
    Int,
    Float32,
    Float64,
    /// 128-bit integers (decimal128, picosecond timestamps): two integer streams, low and high halves.
    Wide,
    /// Strings and binary: one bytes stream.
    Bytes,
    /// A list: per-row end offsets into the child column as an integer stream.
    List,
    /// A struct: only validity; its children are their own column nodes.
    Struct,
}

/// One node of the flattened column tree (pre-order: a list or struct precedes its children).
#[derive(Clone, Debug)]
pub struct ColumnNode {
    pub field: FieldRef,
    pub physical: Physical,
    pub children: Vec<usize>,
    /// Nesting depth: 0 for a top-level column.
    pub depth: usize,
}

/// Flattens `schema` into column nodes in pre-order; fails on a type the format does not cover.
pub fn column_nodes(schema: &Schema) -> Result<Vec<ColumnNode>> {
    let mut nodes = Vec::new();
    for field in schema.fields() {
        push_node(field, 0, &mut nodes)?;
    }
    Ok(nodes)
}

fn push_node(field: &FieldRef, depth: usize, nodes: &mut Vec<ColumnNode>) -> Result<usize> {
    if depth > MAX_NESTING_DEPTH {
        return Err(FormatError::Unwritable(format!(
            "column {} nests deeper than {MAX_NESTING_DEPTH}",
            field.name()
        )));
    }
    let index = nodes.len();
    let physical = physical_of(field)?;
    nodes.push(ColumnNode {
        field: field.clone(),
        physical,
        children: vec![],
        depth,
    });
    let children: Vec<FieldRef> = match field.data_type() {
        DataType::List(child) => vec![child.clone()],
        DataType::Struct(fields) => fields.iter().cloned().collect(),
        _ => vec![],
    };
    for child in children {
        let child_index = push_node(&child, depth + 1, nodes)?;
        nodes[index].children.push(child_index);
    }
    Ok(index)
}

fn physical_of(field: &Field) -> Result<Physical> {
    use DataType::*;
    Ok(match field.data_type() {
        Boolean => Physical::Bool,
        Int8
        | Int16
        | Int32
        | Int64
        | UInt8
        | UInt16
        | UInt32
        | UInt64
        | Date32
        | Time64(_)
        | Timestamp(_, _) => Physical::Int,
        Float32 => Physical::Float32,
        Float64 => Physical::Float64,
        Decimal128(_, _) => Physical::Wide,
        Utf8 | Utf8View | Binary => Physical::Bytes,
        List(_) => Physical::List,
        Struct(_) => Physical::Struct,
        other => {
            return Err(FormatError::Unwritable(format!(
                "column {}: type {other} is not supported by .zyr",
                field.name()
            )));
        }
    })
}

fn unit_tag(unit: &TimeUnit) -> u8 {
    match unit {
        TimeUnit::Second => 0,
        TimeUnit::Millisecond => 1,
        TimeUnit::Microsecond => 2,
        TimeUnit::Nanosecond => 3,
    }
}

fn unit_of(tag: u8) -> Result<TimeUnit> {
    Ok(match tag {
        0 => TimeUnit::Second,
        1 => TimeUnit::Millisecond,
        2 => TimeUnit::Microsecond,
        3 => TimeUnit::Nanosecond,
        _ => return corrupt(format!("time unit tag {tag}")),
    })
}

/// Writes one field (name, nullability, type descriptor) as SPEC.md "Schema" lays it out.
pub(crate) fn write_field(w: &mut ByteWriter, field: &Field) -> Result<()> {
    w.bytes(field.name().as_bytes());
    w.u8(field.is_nullable() as u8);
    write_type(w, field)
}

fn write_type(w: &mut ByteWriter, field: &Field) -> Result<()> {
    use DataType::*;
    match field.data_type() {
        Boolean => w.u8(1),
        Int8 => w.u8(2),
        Int16 => w.u8(3),
        Int32 => w.u8(4),
        Int64 => w.u8(5),
        UInt8 => w.u8(6),
        UInt16 => w.u8(7),
        UInt32 => w.u8(8),
        UInt64 => w.u8(9),
        Float32 => w.u8(10),
        Float64 => w.u8(11),
        Decimal128(38, 0) if is_timestamp_ps(field) => {
            w.u8(19);
            w.bytes(
                field
                    .metadata()
                    .get(TIMESTAMP_PS_TIMEZONE)
                    .map(String::as_bytes)
                    .unwrap_or_default(),
            );
        }
        Decimal128(precision, scale) => {
            w.u8(12);
            w.u8(*precision);
            w.u8(*scale as u8);
        }
        Utf8 => w.u8(13),
        Utf8View => w.u8(14),
        Binary => w.u8(15),
        Date32 => w.u8(16),
        Time64(unit) => {
            w.u8(17);
            w.u8(unit_tag(unit));
        }
        Timestamp(unit, tz) => {
            w.u8(18);
            w.u8(unit_tag(unit));
            w.bytes(tz.as_deref().unwrap_or("").as_bytes());
        }
        List(child) => {
            w.u8(20);
            write_field(w, child)?;
        }
        Struct(fields) => {
            w.u8(21);
            w.uvarint(fields.len() as u64);
            for child in fields {
                write_field(w, child)?;
            }
        }
        other => {
            return Err(FormatError::Unwritable(format!(
                "type {other} is not supported by .zyr"
            )));
        }
    }
    Ok(())
}

/// Reads one field written by [`write_field`]; `depth` bounds recursion.
pub(crate) fn read_field(r: &mut ByteReader<'_>, depth: usize) -> Result<Field> {
    if depth > MAX_NESTING_DEPTH {
        return corrupt(format!("schema nests deeper than {MAX_NESTING_DEPTH}"));
    }
    let name = r.string()?;
    let nullable = match r.u8()? {
        0 => false,
        1 => true,
        other => return corrupt(format!("field {name}: nullable flag {other}")),
    };
    let tag = r.u8()?;
    let data_type = match tag {
        1 => DataType::Boolean,
        2 => DataType::Int8,
        3 => DataType::Int16,
        4 => DataType::Int32,
        5 => DataType::Int64,
        6 => DataType::UInt8,
        7 => DataType::UInt16,
        8 => DataType::UInt32,
        9 => DataType::UInt64,
        10 => DataType::Float32,
        11 => DataType::Float64,
        12 => {
            let precision = r.u8()?;
            let scale = r.u8()? as i8;
            if precision == 0 || precision > 38 || scale > precision as i8 {
                return corrupt(format!("field {name}: decimal({precision}, {scale})"));
            }
            DataType::Decimal128(precision, scale)
        }
        13 => DataType::Utf8,
        14 => DataType::Utf8View,
        15 => DataType::Binary,
        16 => DataType::Date32,
        17 => match unit_of(r.u8()?)? {
            unit @ (TimeUnit::Microsecond | TimeUnit::Nanosecond) => DataType::Time64(unit),
            _ => return corrupt(format!("field {name}: time64 needs µs or ns")),
        },
        18 => {
            let unit = unit_of(r.u8()?)?;
            let tz = r.string()?;
            DataType::Timestamp(unit, (!tz.is_empty()).then(|| Arc::from(tz.as_str())))
        }
        19 => {
            let tz = r.string()?;
            return Ok(timestamp_ps_field(
                &name,
                nullable,
                (!tz.is_empty()).then_some(tz.as_str()),
            ));
        }
        20 => DataType::List(Arc::new(read_field(r, depth + 1)?)),
        21 => {
            let count = r.uvarint_max(r.remaining() as u64, "struct field count")?;
            let fields: Result<Vec<Field>> = (0..count).map(|_| read_field(r, depth + 1)).collect();
            DataType::Struct(Fields::from(fields?))
        }
        other => {
            return Err(FormatError::Unsupported(format!(
                "field {name}: type tag {other} is newer than this reader"
            )));
        }
    };
    Ok(Field::new(name, data_type, nullable))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_supported_type_survives_the_footer() {
        let fields = vec![
            Field::new("b", DataType::Boolean, true),
            Field::new("u64", DataType::UInt64, false),
            Field::new("d", DataType::Decimal128(15, 2), true),
            Field::new(
                "ts",
                DataType::Timestamp(TimeUnit::Nanosecond, Some("+01:00".into())),
                true,
            ),
            Field::new("t", DataType::Time64(TimeUnit::Microsecond), true),
            timestamp_ps_field("ps", true, Some("UTC")),
            Field::new(
                "l",
                DataType::List(Arc::new(Field::new("item", DataType::Utf8View, true))),
                true,
            ),
            Field::new(
                "s",
                DataType::Struct(Fields::from(vec![Field::new("x", DataType::Float32, true)])),
                true,
            ),
        ];
        let mut w = ByteWriter::default();
        for f in &fields {
            write_field(&mut w, f).unwrap();
        }
        let mut r = ByteReader::new(&w.buf, "schema");
        for f in &fields {
            assert_eq!(&read_field(&mut r, 0).unwrap(), f);
        }
        assert_eq!(r.remaining(), 0);
    }

    #[test]
    fn unknown_type_tag_is_unsupported_not_a_panic() {
        let mut w = ByteWriter::default();
        w.bytes(b"x");
        w.u8(1);
        w.u8(200);
        let err = read_field(&mut ByteReader::new(&w.buf, "schema"), 0).unwrap_err();
        assert!(matches!(err, FormatError::Unsupported(_)), "{err}");
    }
}
