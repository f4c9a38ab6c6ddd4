//! Round trips, random access, statistics, filters and hostile input, through the public API.

mod common;

use std::sync::Arc;

use arrow::array::*;
use arrow::compute::kernels::cmp;
use arrow::datatypes::*;
use bytes::Bytes;
use common::*;
use zyron_format::Scalar;
use zyron_format::*;

#[test]
fn every_type_round_trips_with_nulls_across_blocks() {
    let batch = all_types_batch(5_000);
    let options = WriterOptions {
        block_rows: 2048,
        ..Default::default()
    };
    // Several input batches of odd sizes, so blocks straddle them.
    let parts: Vec<RecordBatch> = [0..1000, 1000..1001, 1001..4100, 4100..5000]
        .into_iter()
        .map(|r| batch.slice(r.start, r.len()))
        .collect();
    let bytes = write(batch.schema(), &parts, options);
    let file = open(&bytes);
    assert_eq!(file.schema(), batch.schema());
    assert_eq!(file.num_rows(), 5_000);
    let all: Vec<usize> = (0..batch.num_columns()).collect();
    let read = file.read_rows(&all, 0..5_000).unwrap();
    for (i, f) in batch.schema().fields().iter().enumerate() {
        assert_eq!(
            read.column(i).as_ref(),
            batch.column(i).as_ref(),
            "column {}",
            f.name()
        );
    }
    let scanned: Vec<RecordBatch> = file
        .scan(ScanOptions::default())
        .unwrap()
        .collect::<Result<_>>()
        .unwrap();
    assert_eq!(
        arrow::compute::concat_batches(&batch.schema(), &scanned).unwrap(),
        batch
    );
}

/// A scan asked for string views returns every `Utf8`, at the top and inside lists and
/// structs, as `Utf8View` holding the same values, whether its blocks are dictionaries (views
/// gathered into the dictionary), FSST or plain, and on the filtered path too.
#[test]
fn string_view_scans_hold_the_same_values_as_utf8_scans() {
    let base = all_types_batch(5_000);
    let rows = base.num_rows();
    // Many distinct long values (not a dictionary) beside the batch's few short ones.
    let distinct = StringArray::from_iter((0..rows).map(|i| {
        (i % 13 != 0).then(|| format!("{i:08} a longer sentence about row {}", i * 7919 % 10_007))
    }));
    let mut fields: Vec<Field> = base
        .schema()
        .fields()
        .iter()
        .map(|f| f.as_ref().clone())
        .collect();
    let mut words = ListBuilder::new(StringBuilder::new());
    for i in 0..rows {
        for w in 0..i % 4 {
            words.values().append_option(
                (w != 2).then(|| ["red", "green", "a colour with a long name"][(i + w) % 3]),
            );
        }
        words.append(i % 11 != 0);
    }
    let words = words.finish();
    fields.push(Field::new("distinct", DataType::Utf8, true));
    fields.push(Field::new("words", words.data_type().clone(), true));
    let mut columns = base.columns().to_vec();
    columns.push(Arc::new(distinct));
    columns.push(Arc::new(words));
    let batch = RecordBatch::try_new(Arc::new(Schema::new(fields)), columns).unwrap();
    let options = WriterOptions {
        block_rows: 2048,
        ..Default::default()
    };
    let file = open(&write(batch.schema(), &[batch.clone()], options));
    let utf8 = batch.schema().index_of("utf8").unwrap();
    let filters = [
        vec![],
        vec![pred(
            utf8,
            PredicateOp::Cmp(CmpOp::Eq, Scalar::Bytes(b"value-5".to_vec())),
        )],
    ];
    for predicates in filters {
        let scan = |string_views| -> RecordBatch {
            let options = ScanOptions {
                predicates: predicates.clone(),
                filter_mode: FilterMode::Pushdown,
                string_views,
                ..Default::default()
            };
            let scan = file.scan(options).unwrap();
            let batches: Vec<RecordBatch> = scan.collect::<Result<_>>().unwrap();
            arrow::compute::concat_batches(&batches[0].schema(), &batches).unwrap()
        };
        let (plain, views) = (scan(false), scan(true));
        assert!(plain.num_rows() > 0);
        assert_eq!(plain.num_rows(), views.num_rows());
        let mut viewed = 0;
        for (i, field) in plain.schema().fields().iter().enumerate() {
            let view_type = views.schema().field(i).data_type().clone();
            assert!(!holds_utf8(&view_type), "{}: {view_type:?}", field.name());
            if view_type != *field.data_type() {
                viewed += 1;
            }
            assert_eq!(views.column(i).data_type(), &view_type);
            let back = arrow::compute::cast(views.column(i), field.data_type()).unwrap();
            assert_eq!(
                back.as_ref(),
                plain.column(i).as_ref(),
                "column {}",
                field.name()
            );
        }
        // utf8, the struct's string field, distinct, the list of strings.
        assert_eq!(viewed, 4);
    }
}

fn holds_utf8(dt: &DataType) -> bool {
    match dt {
        DataType::Utf8 => true,
        DataType::List(f) => holds_utf8(f.data_type()),
        DataType::Struct(fields) => fields.iter().any(|f| holds_utf8(f.data_type())),
        _ => false,
    }
}

/// Columns are encoded side by side, but the bytes of a file (blocks in column order, bloom
/// filters before their block, a list's child before the list) must not depend on how many
/// threads did the work; a thread count outside the limits is refused.
#[test]
fn the_file_does_not_depend_on_the_writer_thread_count() {
    // Two full blocks encoded side by side, then a last one under PARALLEL_MIN_ROWS encoded
    // on the writer's thread.
    let rows = 2 * PARALLEL_MIN_ROWS + 1_000;
    let batch = all_types_batch(rows);
    let options = |threads: usize| WriterOptions {
        block_rows: PARALLEL_MIN_ROWS,
        bloom_filter_columns: vec!["i64".into(), "utf8".into(), "dec38".into()],
        threads,
    };
    let one = write(batch.schema(), &[batch.clone()], options(1));
    for threads in [2, 5, MAX_WRITER_THREADS] {
        let many = write(batch.schema(), &[batch.clone()], options(threads));
        assert!(one == many, "{threads} threads wrote different bytes");
    }
    let read = open(&one)
        .read_rows(
            &(0..batch.num_columns()).collect::<Vec<_>>(),
            0..rows as u64,
        )
        .unwrap();
    assert_eq!(read, batch);
    let default = WriterOptions::default().threads;
    assert!(
        (1..=MAX_WRITER_THREADS).contains(&default),
        "default {default}"
    );
    for threads in [0, MAX_WRITER_THREADS + 1] {
        let refused = ZyrWriter::new(Vec::new(), batch.schema(), options(threads));
        assert!(
            matches!(&refused, Err(FormatError::Unwritable(m)) if m.contains("threads")),
            "{threads} threads accepted"
        );
    }
}

#[test]
fn single_rows_and_ranges_match_the_source() {
    let batch = all_types_batch(10_000);
    let bytes = write(
        batch.schema(),
        &[batch.clone()],
        WriterOptions {
            block_rows: 4096,
            ..Default::default()
        },
    );
    let file = open(&bytes);
    let all: Vec<usize> = (0..batch.num_columns()).collect();
    for row in [0u64, 1, 1023, 1024, 4095, 4096, 9999, 5_432] {
        let got = file.read_rows(&all, row..row + 1).unwrap();
        assert_eq!(got, batch.slice(row as usize, 1), "row {row}");
    }
    let got = file.read_rows(&all, 3000..7000).unwrap();
    assert_eq!(got, batch.slice(3000, 4000));
    assert!(
        file.read_rows(&all, 9_999..10_001).is_err(),
        "rows past the end are an error"
    );
}

#[test]
fn projection_reads_only_projected_columns() {
    let batch = all_types_batch(3_000);
    let bytes = write(batch.schema(), &[batch.clone()], WriterOptions::default());
    let file = open(&bytes);
    let scan = file
        .scan(ScanOptions {
            projection: Some(vec![4, 13]),
            ..Default::default()
        })
        .unwrap();
    let out: Vec<RecordBatch> = scan.collect::<Result<_>>().unwrap();
    assert_eq!(out[0].num_columns(), 2);
    assert_eq!(out[0].column(1).as_ref(), batch.column(13).as_ref());
}

#[test]
fn opening_takes_one_read_and_a_large_footer_two() {
    let batch = all_types_batch(100);
    let file = open(&write(
        batch.schema(),
        &[batch.clone()],
        WriterOptions::default(),
    ));
    assert_eq!(file.reads(), 1);
    let fields: Vec<Field> = (0..3000)
        .map(|i| {
            Field::new(
                format!("column_with_a_long_name_{i:05}"),
                DataType::Int32,
                true,
            )
        })
        .collect();
    let schema = Arc::new(Schema::new(fields));
    let columns: Vec<ArrayRef> = (0..3000)
        .map(|_| Arc::new(Int32Array::from(vec![1, 2, 3])) as ArrayRef)
        .collect();
    let wide = RecordBatch::try_new(schema.clone(), columns).unwrap();
    let file = open(&write(schema, &[wide], WriterOptions::default()));
    assert_eq!(file.reads(), 2);
    assert_eq!(
        file.read_rows(&[2999], 0..3)
            .unwrap()
            .column(0)
            .as_primitive::<Int32Type>()
            .values(),
        &[1, 2, 3]
    );
}

/// A vector whose values have no representable bound (a long run of 0xff bytes) has no
/// statistic; merging it into its block's and the file's must make those unknown too, or a
/// filter would skip the value.
#[test]
fn a_vector_without_bounds_leaves_its_block_and_file_unbounded() {
    let schema = Arc::new(Schema::new(vec![Field::new("b", DataType::Binary, false)]));
    let unbounded = vec![0xffu8; 100];
    let values: Vec<Vec<u8>> = (0..4096)
        .map(|i| match i {
            3000 => unbounded.clone(),
            _ => format!("v{i:05}").into_bytes(),
        })
        .collect();
    let batch = RecordBatch::try_new(
        schema.clone(),
        vec![Arc::new(BinaryArray::from_iter_values(values.iter()))],
    )
    .unwrap();
    let file = open(&write(schema, &[batch], WriterOptions::default()));
    assert_eq!(file.column_statistics(0).unwrap().stat, Stat::None);
    for mode in [
        FilterMode::Pushdown,
        FilterMode::ZoneMapsOnly,
        FilterMode::Auto,
    ] {
        let rows: usize = file
            .scan(ScanOptions {
                predicates: vec![pred(
                    0,
                    PredicateOp::Cmp(CmpOp::Eq, Scalar::Bytes(unbounded.clone())),
                )],
                filter_mode: mode,
                ..Default::default()
            })
            .unwrap()
            .map(|b| b.unwrap().num_rows())
            .sum();
        assert!(rows >= 1, "{mode:?} skipped the unbounded value");
    }
}

/// A block whose vectors have an exact maximum ("zz") and a truncated one (a long string
/// below it): the block's merged zone must still let `= 'zz'` through.
#[test]
fn a_block_of_exact_and_truncated_string_bounds_keeps_its_maximum() {
    let schema = Arc::new(Schema::new(vec![Field::new("s", DataType::Utf8, false)]));
    let long = "m".repeat(100);
    let values: Vec<String> = (0..2048)
        .map(|i| match i {
            7 => "zz".to_owned(),
            i if i < 1024 => format!("a{i}"),
            _ => long.clone(),
        })
        .collect();
    let batch =
        RecordBatch::try_new(schema.clone(), vec![Arc::new(StringArray::from(values))]).unwrap();
    let file = open(&write(schema, &[batch], WriterOptions::default()));
    for op in [CmpOp::Eq, CmpOp::GtEq] {
        let rows: usize = file
            .scan(ScanOptions {
                predicates: vec![pred(0, PredicateOp::Cmp(op, Scalar::Bytes(b"zz".to_vec())))],
                ..Default::default()
            })
            .unwrap()
            .map(|b| b.unwrap().num_rows())
            .sum();
        assert_eq!(rows, 1, "{op:?} 'zz'");
    }
}

#[test]
fn statistics_answer_count_min_max_without_data() {
    let batch = all_types_batch(4_000);
    let file = open(&write(
        batch.schema(),
        &[batch.clone()],
        WriterOptions::default(),
    ));
    let stats = file.column_statistics(4).unwrap();
    let column = batch.column(4).as_primitive::<Int64Type>();
    assert_eq!(stats.values, 4_000);
    assert_eq!(stats.nulls, column.null_count() as u64);
    let min = arrow::compute::min(column).unwrap() as i128;
    let max = arrow::compute::max(column).unwrap() as i128;
    assert_eq!(stats.stat, Stat::Int { min, max });
    let u64_stats = file.column_statistics(8).unwrap();
    assert_eq!(
        u64_stats.stat,
        Stat::Int {
            min: (u64::MAX - 2) as i128,
            max: u64::MAX as i128
        }
    );
}

/// Each predicate's scan result equals Arrow's filter kernel on the source, in every filter mode.
#[test]
fn filters_on_encoded_data_equal_arrow_kernels() {
    let rows = 70_000;
    let schema = Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("dict", DataType::Utf8, true),
        Field::new("runs", DataType::Int32, true),
        Field::new("price", DataType::Float64, true),
        Field::new("comment", DataType::Utf8, true),
        Field::new("u", DataType::UInt64, true),
    ]));
    let batch = RecordBatch::try_new(
        schema.clone(),
        vec![
            Arc::new(Int64Array::from_iter_values(0..rows)),
            Arc::new(StringArray::from_iter((0..rows).map(|i| {
                (i % 13 != 0).then(|| ["AIR", "MAIL", "SHIP", "TRUCK", "RAIL"][(i % 5) as usize])
            }))),
            Arc::new(Int32Array::from_iter(
                (0..rows).map(|i| (i % 1000 != 7).then_some((i / 3000) as i32)),
            )),
            Arc::new(Float64Array::from_iter(
                (0..rows).map(|i| (i % 17 != 0).then_some((i % 10_000) as f64 * 0.01)),
            )),
            Arc::new(StringArray::from_iter((0..rows).map(|i| {
                Some(format!(
                    "carefully final deposits {} haggle",
                    i * 7919 % 100_003
                ))
            }))),
            Arc::new(UInt64Array::from_iter(
                (0..rows).map(|i| Some(u64::MAX - i as u64 * 1000)),
            )),
        ],
    )
    .unwrap();
    let bytes = write(
        schema.clone(),
        &[batch.clone()],
        WriterOptions {
            bloom_filter_columns: vec!["comment".into()],
            ..Default::default()
        },
    );
    let file = open(&bytes);
    let cases: Vec<(ColumnPredicate, BooleanArray)> = vec![
        (
            pred(0, PredicateOp::Cmp(CmpOp::Lt, Scalar::Int(700))),
            cmp::lt(batch.column(0), &Int64Array::new_scalar(700)).unwrap(),
        ),
        (
            pred(0, PredicateOp::Cmp(CmpOp::GtEq, Scalar::Int(69_000))),
            cmp::gt_eq(batch.column(0), &Int64Array::new_scalar(69_000)).unwrap(),
        ),
        (
            pred(
                1,
                PredicateOp::Cmp(CmpOp::Eq, Scalar::Bytes(b"MAIL".to_vec())),
            ),
            cmp::eq(batch.column(1), &StringArray::new_scalar("MAIL")).unwrap(),
        ),
        (
            pred(
                1,
                PredicateOp::Cmp(CmpOp::NotEq, Scalar::Bytes(b"MAIL".to_vec())),
            ),
            cmp::neq(batch.column(1), &StringArray::new_scalar("MAIL")).unwrap(),
        ),
        (
            pred(
                1,
                PredicateOp::In(vec![
                    Scalar::Bytes(b"AIR".to_vec()),
                    Scalar::Bytes(b"RAIL".to_vec()),
                ]),
            ),
            arrow::compute::or(
                &cmp::eq(batch.column(1), &StringArray::new_scalar("AIR")).unwrap(),
                &cmp::eq(batch.column(1), &StringArray::new_scalar("RAIL")).unwrap(),
            )
            .unwrap(),
        ),
        (
            pred(2, PredicateOp::Cmp(CmpOp::Eq, Scalar::Int(5))),
            cmp::eq(batch.column(2), &Int32Array::new_scalar(5)).unwrap(),
        ),
        (
            pred(2, PredicateOp::IsNull),
            arrow::compute::is_null(batch.column(2)).unwrap(),
        ),
        (
            pred(3, PredicateOp::Cmp(CmpOp::Gt, Scalar::Float(99.5))),
            cmp::gt(batch.column(3), &Float64Array::new_scalar(99.5)).unwrap(),
        ),
        (
            pred(
                4,
                PredicateOp::Cmp(
                    CmpOp::Eq,
                    Scalar::Bytes(b"carefully final deposits 7919 haggle".to_vec()),
                ),
            ),
            cmp::eq(
                batch.column(4),
                &StringArray::new_scalar("carefully final deposits 7919 haggle"),
            )
            .unwrap(),
        ),
        (
            pred(
                5,
                PredicateOp::Cmp(CmpOp::Gt, Scalar::Int((u64::MAX - 5000) as i128)),
            ),
            cmp::gt(batch.column(5), &UInt64Array::new_scalar(u64::MAX - 5000)).unwrap(),
        ),
    ];
    for (p, expected_mask) in cases {
        let expected = arrow::compute::filter_record_batch(&batch, &expected_mask).unwrap();
        for mode in [FilterMode::Pushdown, FilterMode::Auto] {
            let mut scan = file
                .scan(ScanOptions {
                    predicates: vec![p.clone()],
                    filter_mode: mode,
                    ..Default::default()
                })
                .unwrap();
            let got: Vec<RecordBatch> = scan.by_ref().collect::<Result<_>>().unwrap();
            let got = arrow::compute::concat_batches(&schema, &got).unwrap();
            if mode == FilterMode::Pushdown {
                assert_eq!(got, expected, "{p:?}");
            } else {
                // Auto may stop filtering rows when most pass, but never loses a match.
                let refiltered =
                    arrow::compute::filter_record_batch(&got, &expected_mask_for(&got, &p))
                        .unwrap();
                assert_eq!(refiltered, expected, "{p:?} (auto)");
            }
        }
        // Zone maps alone must keep every matching row.
        let got: Vec<RecordBatch> = file
            .scan(ScanOptions {
                predicates: vec![p.clone()],
                filter_mode: FilterMode::ZoneMapsOnly,
                ..Default::default()
            })
            .unwrap()
            .collect::<Result<_>>()
            .unwrap();
        let got = arrow::compute::concat_batches(&schema, &got).unwrap();
        assert!(got.num_rows() >= expected.num_rows());
    }
}

/// A scan cuts each block into batches of at most `batch_rows` rows (rounded up to whole
/// 1024-row vectors), plain or filtered, and still reads each column block once.
#[test]
fn scans_return_batch_sized_pieces_and_read_each_block_once() {
    let rows = 150_000;
    let schema = Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("price", DataType::Decimal128(15, 2), true),
        Field::new("mode", DataType::Utf8, true),
    ]));
    let batch = RecordBatch::try_new(
        schema.clone(),
        vec![
            Arc::new(Int64Array::from_iter_values(0..rows)),
            Arc::new(
                Decimal128Array::from_iter(
                    (0..rows).map(|i| (i % 11 != 0).then_some((i * 7919 % 1_000_003) as i128)),
                )
                .with_precision_and_scale(15, 2)
                .unwrap(),
            ),
            Arc::new(StringArray::from_iter((0..rows).map(|i| {
                (i % 7 != 0).then(|| ["AIR", "MAIL", "SHIP"][(i % 3) as usize])
            }))),
        ],
    )
    .unwrap();
    let bytes = write(schema.clone(), &[batch.clone()], WriterOptions::default());
    let ids = batch.column(0);
    // (predicate, expected rows, whether full-size batches come back)
    let cases = [
        (None, batch.clone(), true),
        (
            // One contiguous run of rows, starting inside a vector.
            Some(pred(0, PredicateOp::Cmp(CmpOp::Gt, Scalar::Int(70_000)))),
            arrow::compute::filter_record_batch(
                &batch,
                &cmp::gt(ids, &Int64Array::new_scalar(70_000)).unwrap(),
            )
            .unwrap(),
            true,
        ),
        (
            Some(pred(
                2,
                PredicateOp::Cmp(CmpOp::Eq, Scalar::Bytes(b"MAIL".to_vec())),
            )),
            arrow::compute::filter_record_batch(
                &batch,
                &cmp::eq(batch.column(2), &StringArray::new_scalar("MAIL")).unwrap(),
            )
            .unwrap(),
            false,
        ),
    ];
    for (predicate, expected, full_batches) in cases {
        let mut reads_per_batch_rows = vec![];
        for (batch_rows, most_rows) in [(8192, 8192), (3000, 3072), (1, 1024), (1 << 20, 65_536)] {
            let file = open(&bytes);
            let scan = file
                .scan(ScanOptions {
                    predicates: predicate.clone().into_iter().collect(),
                    filter_mode: FilterMode::Pushdown,
                    batch_rows,
                    ..Default::default()
                })
                .unwrap();
            let blocks = scan.block_count() as u64;
            let reads_before = file.reads();
            let got: Vec<RecordBatch> = scan.collect::<Result<_>>().unwrap();
            let what = format!("{predicate:?}, batch_rows {batch_rows}");
            assert!(got.iter().all(|b| b.num_rows() <= most_rows), "{what}");
            // (A filter starting inside the only full block leaves no full block-sized batch.)
            if full_batches && (predicate.is_none() || most_rows < 65_536) {
                assert_eq!(
                    got.iter().map(|b| b.num_rows()).max(),
                    Some(most_rows),
                    "{what}"
                );
            }
            assert_eq!(
                arrow::compute::concat_batches(&schema, &got).unwrap(),
                expected,
                "{what}"
            );
            assert!(blocks > 1, "{what}");
            reads_per_batch_rows.push(file.reads() - reads_before);
        }
        // The last setting returns one batch per block, so it reads each block once; the
        // others must not read more. (Blocks in the bytes read at open take no read.)
        let once = *reads_per_batch_rows.last().unwrap();
        assert!(
            once > 0,
            "{predicate:?}: no block read; the test data is too small"
        );
        assert!(
            reads_per_batch_rows.iter().all(|r| *r == once),
            "{predicate:?}: {reads_per_batch_rows:?}"
        );
    }
}

/// Vectors whose zone maps prove every row matches are selected without decoding the
/// predicate column; vectors holding a null, or straddling the bound, are still decoded.
#[test]
fn zone_maps_that_prove_a_match_skip_evaluation_and_keep_nulls_out() {
    let rows = 10 * 1024;
    // Sorted ids with a null in vector 3 only.
    let schema = Arc::new(Schema::new(vec![Field::new("id", DataType::Int64, true)]));
    let ids = Int64Array::from_iter((0..rows as i64).map(|i| (i != 3 * 1024 + 5).then_some(i)));
    let batch = RecordBatch::try_new(schema.clone(), vec![Arc::new(ids)]).unwrap();
    let file = open(&write(schema, &[batch.clone()], WriterOptions::default()));
    let int = |op, v: i64| pred(0, PredicateOp::Cmp(op, Scalar::Int(v as i128)));
    // (predicate, vectors proven by zone maps)
    let cases = [
        (int(CmpOp::Lt, 5 * 1024 + 10), 4), // vectors 0-2 and 4; 3 has a null, 5 straddles
        (int(CmpOp::LtEq, 2 * 1024 - 1), 2), // ends exactly on a vector boundary
        (int(CmpOp::Gt, 1023), 8),          // vectors 1-9 but 3; zone maps prune vector 0
        (int(CmpOp::GtEq, 9 * 1024), 1),
        (int(CmpOp::NotEq, 7), 8), // all but vector 0 (holds 7) and 3 (null)
        (pred(0, PredicateOp::IsNotNull), 9),
        (
            pred(0, PredicateOp::In(vec![Scalar::Int(5), Scalar::Int(4000)])),
            0,
        ),
    ];
    for (p, proven) in cases {
        let expected = match &p.op {
            PredicateOp::IsNotNull => arrow::compute::is_not_null(batch.column(0)).unwrap(),
            _ => expected_mask_for(&batch, &p),
        };
        let expected = arrow::compute::filter_record_batch(&batch, &expected).unwrap();
        let mut scan = file
            .scan(ScanOptions {
                predicates: vec![p.clone()],
                filter_mode: FilterMode::Pushdown,
                ..Default::default()
            })
            .unwrap();
        let got: Vec<RecordBatch> = scan.by_ref().collect::<Result<_>>().unwrap();
        let got = arrow::compute::concat_batches(&batch.schema(), &got).unwrap();
        assert_eq!(got, expected, "{p:?}");
        assert_eq!(
            scan.metrics().vectors_matched_by_zone_maps,
            proven,
            "{p:?}: {:?}",
            scan.metrics()
        );
    }
}

#[test]
fn spans_cut_at_any_vector_add_up_to_the_whole_scan() {
    // 10,000 rows in blocks of 4 vectors: 3 blocks of 4,096 rows, the last one short.
    let rows = 10_000i64;
    let schema = Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("tag", DataType::Utf8, true),
    ]));
    let batch = RecordBatch::try_new(
        schema.clone(),
        vec![
            Arc::new(Int64Array::from_iter_values(0..rows)),
            Arc::new(StringArray::from_iter(
                (0..rows).map(|i| (i % 5 != 0).then(|| format!("t{}", i % 13))),
            )),
        ],
    )
    .unwrap();
    let file = open(&write(
        schema.clone(),
        &[batch.clone()],
        WriterOptions {
            block_rows: 4096,
            bloom_filter_columns: vec!["tag".into()],
            ..Default::default()
        },
    ));
    assert_eq!(file.block_count().unwrap(), 3);
    assert!(file.zone_candidates(&[], 3).is_err());
    let in_range = pred(0, PredicateOp::Cmp(CmpOp::GtEq, Scalar::Int(3_000)));
    let below = pred(0, PredicateOp::Cmp(CmpOp::Lt, Scalar::Int(9_000)));
    // Inside the zone maps' bounds, but in no bloom filter: every block is skipped by bloom.
    let absent = pred(
        1,
        PredicateOp::Cmp(CmpOp::Eq, Scalar::Bytes(b"t12x".to_vec())),
    );
    // Zone maps: block 0 keeps vectors 2 and 3, block 1 all four, block 2 its two.
    assert_eq!(
        file.zone_candidates(std::slice::from_ref(&in_range), 0)
            .unwrap(),
        [false, false, true, true]
    );
    assert_eq!(file.zone_candidates(&[], 2).unwrap(), [true, true]);
    let pos = |block, vector| VectorPos { block, vector };
    // Cuts before and between candidates, at a block's end and past the file.
    let cuts = [
        pos(0, 0),
        pos(0, 2),
        pos(0, 3),
        pos(1, 1),
        pos(1, 4),
        pos(2, 1),
        pos(3, 0),
    ];
    let counts = |m: &ScanMetrics| {
        [
            m.blocks,
            m.blocks_skipped,
            m.vectors,
            m.vectors_skipped,
            m.bloom_skips,
            m.rows_returned,
        ]
    };
    for predicates in [
        vec![],
        vec![in_range.clone()],
        vec![in_range.clone(), below],
        vec![in_range, absent],
    ] {
        let scan = |span: Option<std::ops::Range<VectorPos>>| {
            let scan = file
                .scan(ScanOptions {
                    predicates: predicates.clone(),
                    filter_mode: FilterMode::Pushdown,
                    ..Default::default()
                })
                .unwrap();
            let mut scan = match span {
                Some(span) => scan.with_span(span),
                None => scan,
            };
            let batches = scan.by_ref().map(|b| b.unwrap()).collect::<Vec<_>>();
            (batches, counts(scan.metrics()))
        };
        let (whole, whole_counts) = scan(None);
        let whole = arrow::compute::concat_batches(&schema, &whole).unwrap();
        let mut pieces = vec![];
        let mut piece_counts = [0u64; 6];
        for w in cuts.windows(2) {
            let (batches, c) = scan(Some(w[0]..w[1]));
            pieces.extend(batches);
            piece_counts
                .iter_mut()
                .zip(c)
                .for_each(|(sum, n)| *sum += n);
        }
        let pieces = arrow::compute::concat_batches(&schema, &pieces).unwrap();
        assert_eq!(pieces, whole, "{predicates:?}");
        assert_eq!(piece_counts, whole_counts, "{predicates:?}");
        assert_eq!(whole_counts[0], 3);
        // An empty span, and one that starts inside its only block, read what they should.
        assert!(scan(Some(pos(1, 2)..pos(1, 2))).0.is_empty());
        let tail: usize = scan(Some(pos(2, 1)..pos(9, 0)))
            .0
            .iter()
            .map(|b| b.num_rows())
            .sum();
        let expected = match predicates.len() {
            2 => 0,
            _ => 10_000 - 9_216,
        };
        match predicates.get(1) {
            Some(p) if p.column == 1 => {
                assert_eq!(whole.num_rows(), 0);
                assert_eq!(whole_counts[4], 3, "one bloom skip a block");
            }
            _ => {
                assert!(whole.num_rows() > 0);
                assert_eq!(tail, expected, "{predicates:?}");
            }
        }
    }
}

fn pred(column: usize, op: PredicateOp) -> ColumnPredicate {
    ColumnPredicate { column, op }
}

/// Re-evaluates a predicate with Arrow on a scan's output (for modes that return extra rows).
fn expected_mask_for(batch: &RecordBatch, p: &ColumnPredicate) -> BooleanArray {
    let c = batch.column(p.column);
    match (&p.op, c.data_type()) {
        (PredicateOp::IsNull, _) => arrow::compute::is_null(c).unwrap(),
        (PredicateOp::Cmp(op, Scalar::Int(v)), DataType::Int64) => {
            apply(*op, c, &Int64Array::new_scalar(*v as i64))
        }
        (PredicateOp::Cmp(op, Scalar::Int(v)), DataType::Int32) => {
            apply(*op, c, &Int32Array::new_scalar(*v as i32))
        }
        (PredicateOp::Cmp(op, Scalar::Int(v)), DataType::UInt64) => {
            apply(*op, c, &UInt64Array::new_scalar(*v as u64))
        }
        (PredicateOp::Cmp(op, Scalar::Float(v)), _) => apply(*op, c, &Float64Array::new_scalar(*v)),
        (PredicateOp::Cmp(op, Scalar::Bytes(v)), _) => apply(
            *op,
            c,
            &StringArray::new_scalar(String::from_utf8(v.clone()).unwrap()),
        ),
        (PredicateOp::In(list), _) => list
            .iter()
            .map(|v| {
                expected_mask_for(
                    batch,
                    &pred(p.column, PredicateOp::Cmp(CmpOp::Eq, v.clone())),
                )
            })
            .reduce(|a, b| arrow::compute::or(&a, &b).unwrap())
            .unwrap(),
        other => panic!("unhandled {other:?}"),
    }
}

fn apply(op: CmpOp, c: &dyn Array, s: &dyn Datum) -> BooleanArray {
    match op {
        CmpOp::Eq => cmp::eq(&c, s),
        CmpOp::NotEq => cmp::neq(&c, s),
        CmpOp::Lt => cmp::lt(&c, s),
        CmpOp::LtEq => cmp::lt_eq(&c, s),
        CmpOp::Gt => cmp::gt(&c, s),
        CmpOp::GtEq => cmp::gt_eq(&c, s),
    }
    .unwrap()
}

#[test]
fn zone_maps_and_bloom_filters_skip_blocks() {
    let rows = 300_000i64;
    let schema = Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("key", DataType::Utf8, false),
    ]));
    let batch = RecordBatch::try_new(
        schema.clone(),
        vec![
            Arc::new(Int64Array::from_iter_values(0..rows)),
            Arc::new(StringArray::from_iter_values(
                (0..rows).map(|i| format!("k{:08}", i * 7 % rows)),
            )),
        ],
    )
    .unwrap();
    let file = open(&write(
        schema,
        &[batch],
        WriterOptions {
            bloom_filter_columns: vec!["key".into()],
            ..Default::default()
        },
    ));
    let mut scan = file
        .scan(ScanOptions {
            predicates: vec![pred(0, PredicateOp::Cmp(CmpOp::Eq, Scalar::Int(123_456)))],
            ..Default::default()
        })
        .unwrap();
    let rows_out: usize = scan.by_ref().map(|b| b.unwrap().num_rows()).sum();
    assert_eq!(rows_out, 1);
    let m = scan.metrics();
    assert_eq!(m.blocks, 5);
    assert_eq!(m.blocks_skipped, 4);
    assert_eq!(m.vectors - m.vectors_skipped, 1, "{m:?}");
    // The key column's zone maps span everything; only bloom filters can skip its blocks.
    let mut scan = file
        .scan(ScanOptions {
            predicates: vec![pred(
                1,
                PredicateOp::Cmp(CmpOp::Eq, Scalar::Bytes(b"k00000007".to_vec())),
            )],
            ..Default::default()
        })
        .unwrap();
    let rows_out: usize = scan.by_ref().map(|b| b.unwrap().num_rows()).sum();
    assert_eq!(rows_out, 1);
    assert!(scan.metrics().bloom_skips >= 3, "{:?}", scan.metrics());
}

#[test]
fn hostile_bytes_give_errors_not_panics() {
    let batch = all_types_batch(3_000);
    let bytes = write(
        batch.schema(),
        &[batch.clone()],
        WriterOptions {
            block_rows: 1024,
            ..Default::default()
        },
    );
    let all: Vec<usize> = (0..batch.num_columns()).collect();
    let mut errors = 0;
    // Flip bytes all over the file; every outcome must be Ok (unaffected bytes) or Err.
    for i in (0..bytes.len()).step_by(bytes.len() / 700 + 1) {
        let mut corrupted = bytes.to_vec();
        corrupted[i] ^= 0x5a;
        let result = std::panic::catch_unwind(|| -> Result<()> {
            let file = Arc::new(ZyrFile::open(Bytes::from(corrupted))?);
            file.read_rows(&all, 0..3_000)?;
            Ok(())
        });
        match result {
            Ok(Ok(())) => {}
            Ok(Err(_)) => errors += 1,
            Err(_) => panic!("a flipped byte at {i} made the reader panic"),
        }
    }
    assert!(
        errors > 600,
        "checksums should catch nearly every flipped byte, caught {errors}"
    );
    for len in [0, 10, 39, bytes.len() / 2, bytes.len() - 1] {
        assert!(
            ZyrFile::open(bytes.slice(0..len))
                .and_then(|f| Arc::new(f).read_rows(&all, 0..3_000))
                .is_err(),
            "truncated to {len}"
        );
    }
}

#[test]
fn a_newer_major_version_is_refused_and_a_newer_minor_read() {
    let batch = all_types_batch(10);
    let bytes = write(batch.schema(), &[batch.clone()], WriterOptions::default());
    let mut newer_minor = bytes.to_vec();
    let at = newer_minor.len() - 6;
    newer_minor[at] = 9;
    let file = Arc::new(ZyrFile::open(Bytes::from(newer_minor)).unwrap());
    assert_eq!(
        file.read_rows(&[4], 0..10).unwrap().column(0).as_ref(),
        batch.column(4).as_ref()
    );
    let mut newer_major = bytes.to_vec();
    newer_major[at - 2] = 2;
    let err = ZyrFile::open(Bytes::from(newer_major)).unwrap_err();
    assert!(matches!(err, FormatError::Unsupported(_)), "{err}");
}

#[tokio::test]
async fn object_store_reads_fetch_ranges_asynchronously() {
    use object_store::{ObjectStore, ObjectStoreExt, memory::InMemory, path::Path};
    let batch = all_types_batch(5_000);
    let bytes = write(
        batch.schema(),
        &[batch.clone()],
        WriterOptions {
            block_rows: 2048,
            ..Default::default()
        },
    );
    let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let path = Path::from("t/part-0.zyr");
    store.put(&path, bytes.into()).await.unwrap();
    let object = zyron_format::object_reader::open(store, &path)
        .await
        .unwrap();
    object.prefetch(&[4, 13, 24]).await.unwrap();
    let got = object.file.read_rows(&[4, 13, 24], 0..5_000).unwrap();
    assert_eq!(got.column(0).as_ref(), batch.column(4).as_ref());
    assert_eq!(got.column(2).as_ref(), batch.column(24).as_ref());
    assert!(
        object.file.read_rows(&[5], 0..5_000).is_err(),
        "columns not fetched are not silently read"
    );
}

#[test]
fn a_damaged_bloom_filter_is_reported() {
    let schema = Arc::new(Schema::new(vec![Field::new("k", DataType::Utf8, false)]));
    let batch = RecordBatch::try_new(
        schema.clone(),
        vec![Arc::new(StringArray::from_iter_values(
            (0..5000).map(|i| format!("key{i}")),
        ))],
    )
    .unwrap();
    let bytes = write(
        schema,
        &[batch],
        WriterOptions {
            bloom_filter_columns: vec!["k".into()],
            ..Default::default()
        },
    );
    let bloom = open(&bytes).column_meta(0).unwrap().blocks[0]
        .bloom
        .unwrap();
    let mut damaged = bytes.to_vec();
    damaged[bloom.offset as usize + 3] ^= 0x40;
    let file = open(&Bytes::from(damaged));
    let p = pred(
        0,
        PredicateOp::Cmp(CmpOp::Eq, Scalar::Bytes(b"key77".to_vec())),
    );
    let err = file
        .scan(ScanOptions {
            predicates: vec![p],
            ..Default::default()
        })
        .unwrap()
        .find_map(|b| b.err())
        .expect("an error");
    assert!(matches!(err, FormatError::Checksum { .. }), "{err}");
}

/// Decimal filters: vectors whose values fit 64 bits are filtered on the encoded low half,
/// the others on the joined 128-bit values; both must match Arrow's comparison kernels.
#[test]
fn decimal_filters_match_arrow_with_small_and_huge_values() {
    let rows = 6_000;
    let values = Decimal128Array::from_iter((0..rows).map(|i| {
        (i % 11 != 4).then(|| match i {
            // One stretch of values beyond 64 bits, the rest small and of both signs.
            3_000..4_000 => i128::MAX / 3 - i as i128,
            _ => (i as i128 % 50) * 100 - 2_000,
        })
    }))
    .with_precision_and_scale(38, 2)
    .unwrap();
    let schema = Arc::new(Schema::new(vec![Field::new(
        "d",
        DataType::Decimal128(38, 2),
        true,
    )]));
    let batch = RecordBatch::try_new(schema.clone(), vec![Arc::new(values)]).unwrap();
    let file = Arc::new(
        ZyrFile::open(common::write(
            schema.clone(),
            &[batch.clone()],
            WriterOptions {
                block_rows: 2048,
                ..Default::default()
            },
        ))
        .unwrap(),
    );
    let scalar = |v: i128| {
        arrow::array::Scalar::new(
            Decimal128Array::from(vec![v])
                .with_precision_and_scale(38, 2)
                .unwrap(),
        )
    };
    let column = batch.column(0);
    let big = i128::MAX / 3 - 3_500;
    let cases: Vec<(PredicateOp, BooleanArray)> = vec![
        (
            PredicateOp::Cmp(CmpOp::Lt, Scalar::Int(-500)),
            cmp::lt(column, &(scalar(-500))).unwrap(),
        ),
        (
            PredicateOp::Cmp(CmpOp::GtEq, Scalar::Int(big)),
            cmp::gt_eq(column, &(scalar(big))).unwrap(),
        ),
        (
            PredicateOp::Cmp(CmpOp::NotEq, Scalar::Int(300)),
            cmp::neq(column, &(scalar(300))).unwrap(),
        ),
        (
            PredicateOp::In(vec![
                Scalar::Int(100),
                Scalar::Int(big),
                Scalar::Int(1 << 70),
            ]),
            arrow::compute::or(
                &cmp::eq(column, &(scalar(100))).unwrap(),
                &cmp::eq(column, &(scalar(big))).unwrap(),
            )
            .unwrap(),
        ),
    ];
    for (op, mask) in cases {
        let expected = arrow::compute::filter_record_batch(&batch, &mask).unwrap();
        assert!(
            expected.num_rows() > 0,
            "{op:?} selects nothing: a weak case"
        );
        let got: Vec<RecordBatch> = file
            .scan(ScanOptions {
                predicates: vec![pred(0, op.clone())],
                filter_mode: FilterMode::Pushdown,
                ..Default::default()
            })
            .unwrap()
            .collect::<Result<_>>()
            .unwrap();
        let got = arrow::compute::concat_batches(&schema, &got).unwrap();
        assert_eq!(got, expected, "{op:?}");
    }
}
