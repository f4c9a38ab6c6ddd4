//! Test data shared by this crate's tests and by the crates above it: a batch with every type
//! the format stores, nulls in every nullable column, and a list and a struct.

use std::sync::Arc;

use crate::{WriterOptions, ZyrFile, ZyrWriter, timestamp_ps_field};
use arrow::array::*;
use arrow::buffer::NullBuffer;
use arrow::datatypes::*;
use bytes::Bytes;

/// Writes `batches` into an in-memory `.zyr` file.
pub fn write(schema: SchemaRef, batches: &[RecordBatch], options: WriterOptions) -> Bytes {
    let mut w = ZyrWriter::new(Vec::new(), schema, options).unwrap();
    for b in batches {
        w.write(b).unwrap();
    }
    Bytes::from(w.finish().unwrap().0)
}

pub fn open(bytes: &Bytes) -> Arc<ZyrFile> {
    Arc::new(ZyrFile::open(bytes.clone()).unwrap())
}

/// A batch with every supported type, `rows` rows, nulls in every nullable column.
pub fn all_types_batch(rows: usize) -> RecordBatch {
    let n = rows as i64;
    let null_every = |k: usize| move |i: usize| i % k == 3;
    let opt = |i: usize, k: usize| !null_every(k)(i);
    let ints: Vec<Option<i64>> = (0..rows)
        .map(|i| opt(i, 7).then_some(i as i64 * 3 - n))
        .collect();
    let tz: Arc<str> = Arc::from("+02:00");
    let strings: Vec<Option<String>> = (0..rows)
        .map(|i| opt(i, 5).then(|| format!("value-{}", i % 37)))
        .collect();
    let list = ListArray::from_iter_primitive::<Int32Type, _, _>((0..rows).map(|i| {
        opt(i, 9).then(|| {
            (0..(i % 4) as i32)
                .map(|x| (x % 3 != 1).then_some(x))
                .collect::<Vec<_>>()
        })
    }));
    let struct_fields = Fields::from(vec![
        Field::new("a", DataType::Int32, true),
        Field::new("b", DataType::Utf8, true),
    ]);
    let structs = StructArray::new(
        struct_fields.clone(),
        vec![
            Arc::new(Int32Array::from_iter(
                (0..rows).map(|i| opt(i, 4).then_some(i as i32)),
            )),
            Arc::new(StringArray::from_iter(
                (0..rows).map(|i| opt(i, 6).then(|| format!("s{i}"))),
            )),
        ],
        Some(NullBuffer::from(
            (0..rows).map(|i| i % 11 != 0).collect::<Vec<_>>(),
        )),
    );
    let columns: Vec<(Field, ArrayRef)> = vec![
        (
            Field::new("bool", DataType::Boolean, true),
            Arc::new(BooleanArray::from_iter(
                (0..rows).map(|i| opt(i, 3).then_some(i % 5 == 0)),
            )),
        ),
        (
            Field::new("i8", DataType::Int8, true),
            Arc::new(Int8Array::from_iter(
                (0..rows).map(|i| opt(i, 7).then_some((i % 200) as i8)),
            )),
        ),
        (
            Field::new("i16", DataType::Int16, false),
            Arc::new(Int16Array::from_iter_values(
                (0..rows).map(|i| (i as i16).wrapping_mul(31)),
            )),
        ),
        (
            Field::new("i32", DataType::Int32, true),
            Arc::new(Int32Array::from_iter(
                (0..rows).map(|i| opt(i, 8).then_some(i as i32 / 100)),
            )),
        ),
        (
            Field::new("i64", DataType::Int64, true),
            Arc::new(Int64Array::from(ints)),
        ),
        (
            Field::new("u8", DataType::UInt8, true),
            Arc::new(UInt8Array::from_iter(
                (0..rows).map(|i| opt(i, 7).then_some((i % 256) as u8)),
            )),
        ),
        (
            Field::new("u16", DataType::UInt16, true),
            Arc::new(UInt16Array::from_iter(
                (0..rows).map(|i| opt(i, 7).then_some(i as u16)),
            )),
        ),
        (
            Field::new("u32", DataType::UInt32, true),
            Arc::new(UInt32Array::from_iter(
                (0..rows).map(|i| opt(i, 7).then_some(u32::MAX - i as u32)),
            )),
        ),
        (
            Field::new("u64", DataType::UInt64, true),
            Arc::new(UInt64Array::from_iter(
                (0..rows).map(|i| opt(i, 7).then_some(u64::MAX - (i as u64 % 3))),
            )),
        ),
        (
            Field::new("f32", DataType::Float32, true),
            Arc::new(Float32Array::from_iter(
                (0..rows).map(|i| opt(i, 7).then_some(i as f32 * 0.25)),
            )),
        ),
        (
            Field::new("f64", DataType::Float64, true),
            Arc::new(Float64Array::from_iter((0..rows).map(|i| {
                opt(i, 7).then_some(if i == 10 {
                    f64::NAN
                } else {
                    i as f64 * 0.01 + 3.0
                })
            }))),
        ),
        (
            Field::new("dec", DataType::Decimal128(15, 2), true),
            Arc::new(
                Decimal128Array::from_iter(
                    (0..rows).map(|i| opt(i, 7).then_some(i as i128 * 101 - 5000)),
                )
                .with_precision_and_scale(15, 2)
                .unwrap(),
            ),
        ),
        (
            Field::new("dec38", DataType::Decimal128(38, 4), true),
            Arc::new(
                Decimal128Array::from_iter(
                    (0..rows).map(|i| opt(i, 7).then_some(i128::MAX / (i as i128 + 1))),
                )
                .with_precision_and_scale(38, 4)
                .unwrap(),
            ),
        ),
        (
            Field::new("utf8", DataType::Utf8, true),
            Arc::new(StringArray::from(strings.clone())),
        ),
        (
            Field::new("view", DataType::Utf8View, true),
            Arc::new(StringViewArray::from_iter(strings.iter().map(|s| {
                s.as_ref()
                    .map(|s| format!("{s} and a longer tail {}", s.len()))
            }))),
        ),
        (
            Field::new("bin", DataType::Binary, true),
            Arc::new(BinaryArray::from_iter(
                (0..rows).map(|i| opt(i, 7).then(|| vec![i as u8; i % 5])),
            )),
        ),
        (
            Field::new("date", DataType::Date32, true),
            Arc::new(Date32Array::from_iter(
                (0..rows).map(|i| opt(i, 7).then_some(19000 + i as i32 / 10)),
            )),
        ),
        (
            Field::new("t_us", DataType::Time64(TimeUnit::Microsecond), true),
            Arc::new(Time64MicrosecondArray::from_iter(
                (0..rows).map(|i| opt(i, 7).then_some(i as i64 * 1_000_000)),
            )),
        ),
        (
            Field::new("t_ns", DataType::Time64(TimeUnit::Nanosecond), true),
            Arc::new(Time64NanosecondArray::from_iter(
                (0..rows).map(|i| opt(i, 7).then_some(i as i64 * 17)),
            )),
        ),
        (
            Field::new("ts_s", DataType::Timestamp(TimeUnit::Second, None), true),
            Arc::new(TimestampSecondArray::from_iter(
                (0..rows).map(|i| opt(i, 7).then_some(1_700_000_000 + i as i64)),
            )),
        ),
        (
            Field::new(
                "ts_ms",
                DataType::Timestamp(TimeUnit::Millisecond, Some(tz.clone())),
                true,
            ),
            Arc::new(
                TimestampMillisecondArray::from_iter(
                    (0..rows).map(|i| opt(i, 7).then_some(1_700_000_000_000 + i as i64 * 1000)),
                )
                .with_timezone(tz.clone()),
            ),
        ),
        (
            Field::new(
                "ts_us",
                DataType::Timestamp(TimeUnit::Microsecond, None),
                true,
            ),
            Arc::new(TimestampMicrosecondArray::from_iter(
                (0..rows).map(|i| opt(i, 7).then_some(i as i64 * 999_983)),
            )),
        ),
        (
            Field::new(
                "ts_ns",
                DataType::Timestamp(TimeUnit::Nanosecond, Some(tz.clone())),
                true,
            ),
            Arc::new(
                TimestampNanosecondArray::from_iter(
                    (0..rows).map(|i| opt(i, 7).then_some(-(i as i64) * 7)),
                )
                .with_timezone(tz),
            ),
        ),
        (
            timestamp_ps_field("ts_ps", true, Some("UTC")),
            Arc::new(
                Decimal128Array::from_iter((0..rows).map(|i| {
                    opt(i, 7)
                        .then_some(1_700_000_000_000_000_000_000_000 + i as i128 * 1_000_000_007)
                }))
                .with_precision_and_scale(38, 0)
                .unwrap(),
            ),
        ),
        (
            Field::new("list", list.data_type().clone(), true),
            Arc::new(list),
        ),
        (
            Field::new("struct", DataType::Struct(struct_fields), true),
            Arc::new(structs),
        ),
    ];
    let (fields, arrays): (Vec<Field>, Vec<ArrayRef>) = columns.into_iter().unzip();
    RecordBatch::try_new(Arc::new(Schema::new(fields)), arrays).unwrap()
}
