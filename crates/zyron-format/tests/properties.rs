//! Property tests: every encoding round-trips any values over any row range, filters on
//! encoded data agree with filters on decoded data, and files round-trip every type with random
//! null patterns.

mod common;

use std::ops::Range;
use std::sync::Arc;

use arrow::array::*;
use arrow::datatypes::*;
use proptest::prelude::*;
use zyron_format::encodings::*;
use zyron_format::predicate::{BytesMatcher, CmpOp, FloatMatcher, IntMatcher};
use zyron_format::{
    ColumnPredicate, FilterMode, PredicateOp, Scalar, ScanOptions, WriterOptions, ZyrFile,
};

/// Integers shaped like real columns: narrow ranges, runs, sorted sequences, few distinct values, or anything.
fn ints() -> impl Strategy<Value = Vec<i64>> {
    prop_oneof![
        prop::collection::vec(any::<i64>(), 0..3000),
        prop::collection::vec(-50i64..50, 1..3000),
        (any::<i64>(), prop::collection::vec(0i64..1000, 1..3000)).prop_map(|(start, steps)| steps
            .iter()
            .scan(start, |acc, s| {
                *acc = acc.wrapping_add(*s);
                Some(*acc)
            })
            .collect()),
        prop::collection::vec((0i64..4, 1usize..400), 1..20).prop_map(|runs| runs
            .into_iter()
            .flat_map(|(v, n)| std::iter::repeat_n(v * 1_000_000_007, n))
            .collect()),
        prop::collection::vec(
            prop::sample::select(vec![i64::MIN, -1, 0, 7, i64::MAX]),
            1..3000
        ),
    ]
}

fn floats() -> impl Strategy<Value = Vec<f64>> {
    prop_oneof![
        prop::collection::vec(any::<f64>(), 0..2500),
        prop::collection::vec((0i64..1_000_000).prop_map(|c| c as f64 / 100.0), 1..2500),
        prop::collection::vec(
            prop::sample::select(vec![0.0, -0.0, f64::NAN, f64::INFINITY, 1.5, 1e300]),
            1..2500
        ),
    ]
}

fn strings() -> impl Strategy<Value = Vec<Vec<u8>>> {
    prop_oneof![
        prop::collection::vec(prop::collection::vec(any::<u8>(), 0..40), 0..1500),
        prop::collection::vec(
            prop::sample::select(vec![
                b"AIR".to_vec(),
                b"MAIL".to_vec(),
                vec![],
                b"TRUCK".to_vec()
            ]),
            1..3000
        ),
        prop::collection::vec("[a-e ]{0,30}".prop_map(String::into_bytes), 1..2000),
    ]
}

/// Encodes with `encode`; when it applies, checks decode of the whole stream and of `rows`.
fn check<D: Domain>(
    encode: fn(D::Input<'_>, Cascade) -> Option<Vec<u8>>,
    id: EncodingId,
    values: D::Input<'_>,
    rows: Range<usize>,
    expect: impl Fn(&D::Owned, Range<usize>) -> D::Owned,
) -> Result<(), TestCaseError>
where
    D::Owned: PartialEq + std::fmt::Debug,
{
    let len = D::len(values);
    let Some(body) = encode(values, Cascade::TOP) else {
        return Ok(());
    };
    let mut node = vec![id.0];
    node.extend_from_slice(&body);
    let all = decode_all::<D>(&node, len).map_err(|e| TestCaseError::fail(e.to_string()))?;
    let mut part = D::Owned::default();
    decode_stream::<D>(&node, len, rows.clone(), &mut part)
        .map_err(|e| TestCaseError::fail(e.to_string()))?;
    prop_assert_eq!(&part, &expect(&all, rows));
    Ok(())
}

fn int_encodings() -> Vec<Candidate<Ints>> {
    Ints::candidates(Cascade::TOP)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    #[test]
    fn integer_encodings_round_trip(values in ints(), seed in any::<u64>()) {
        let rows = (seed as usize % (values.len() + 1))..values.len();
        for c in int_encodings() {
            check::<Ints>(c.encode, c.id, &values, rows.clone(), |all, r| all[r].to_vec())?;
            if let Some(body) = (c.encode)(&values, Cascade::TOP) {
                let mut node = vec![c.id.0];
                node.extend_from_slice(&body);
                prop_assert_eq!(decode_all::<Ints>(&node, values.len()).unwrap(), values.clone(), "{}", c.id.name());
            }
        }
        let node = encode_stream::<Ints>(&values, Cascade::TOP);
        prop_assert_eq!(decode_all::<Ints>(&node, values.len()).unwrap(), values);
    }

    #[test]
    fn integer_filters_on_encoded_data_match_decoded(values in ints(), pivot in any::<i64>(), pick in any::<prop::sample::Index>()) {
        prop_assume!(!values.is_empty());
        let existing = values[pick.index(values.len())];
        let matchers = [
            IntMatcher::for_cmp(CmpOp::Lt, existing as i128, i64::MIN as i128, i64::MAX as i128, |v| v as i64),
            IntMatcher::for_cmp(CmpOp::Eq, existing as i128, i64::MIN as i128, i64::MAX as i128, |v| v as i64),
            IntMatcher::for_cmp(CmpOp::GtEq, pivot as i128, i64::MIN as i128, i64::MAX as i128, |v| v as i64),
            IntMatcher::NotEq(existing),
            IntMatcher::In(vec![existing.min(pivot), existing.max(pivot)]),
        ];
        for c in int_encodings() {
            let Some(body) = (c.encode)(&values, Cascade::TOP) else { continue };
            let mut node = vec![c.id.0];
            node.extend_from_slice(&body);
            for m in &matchers {
                let mut got = vec![];
                filter_stream::<Ints>(&node, values.len(), 0..values.len(), m, &mut got).unwrap();
                let expected: Vec<bool> = values.iter().map(|v| m.matches(*v)).collect();
                prop_assert_eq!(got, expected, "{} {:?}", c.id.name(), m);
            }
        }
    }

    #[test]
    fn float_encodings_round_trip_bit_for_bit(values in floats(), seed in any::<u64>()) {
        let bits = |v: &Vec<f64>| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        let rows = (seed as usize % (values.len() + 1))..values.len();
        for c in Floats::<f64>::candidates(Cascade::TOP) {
            let Some(body) = (c.encode)(&values, Cascade::TOP) else { continue };
            let mut node = vec![c.id.0];
            node.extend_from_slice(&body);
            prop_assert_eq!(bits(&decode_all::<Floats<f64>>(&node, values.len()).unwrap()), bits(&values), "{}", c.id.name());
            let mut part = vec![];
            decode_stream::<Floats<f64>>(&node, values.len(), rows.clone(), &mut part).unwrap();
            prop_assert_eq!(bits(&part), bits(&values[rows.clone()].to_vec()));
            let m = FloatMatcher::for_cmp(CmpOp::GtEq, 1.5);
            let mut got = vec![];
            filter_stream::<Floats<f64>>(&node, values.len(), 0..values.len(), &m, &mut got).unwrap();
            prop_assert_eq!(got, values.iter().map(|v| m.matches(*v)).collect::<Vec<_>>());
        }
        let as_f32: Vec<f32> = values.iter().map(|v| *v as f32).collect();
        let node = encode_stream::<Floats<f32>>(&as_f32, Cascade::TOP);
        let back = decode_all::<Floats<f32>>(&node, as_f32.len()).unwrap();
        prop_assert_eq!(back.iter().map(|x| x.to_bits()).collect::<Vec<_>>(), as_f32.iter().map(|x| x.to_bits()).collect::<Vec<_>>());
    }

    #[test]
    fn string_encodings_round_trip_and_filter(values in strings(), rows_seed in any::<u64>(), pick in any::<prop::sample::Index>()) {
        let owned = BytesVec::from_iter(values.iter().map(Vec::as_slice)).unwrap();
        let input = owned.as_ref();
        let rows = (rows_seed as usize % (values.len() + 1))..values.len();
        let needle = values.get(pick.index(values.len().max(1))).cloned().unwrap_or_default();
        let matchers = [
            BytesMatcher::for_cmp(CmpOp::Eq, needle.clone()),
            BytesMatcher::for_cmp(CmpOp::Lt, needle.clone()),
            BytesMatcher::In(vec![vec![], needle.clone()]),
        ];
        for c in Bytes::candidates(Cascade::TOP) {
            let expected = BytesVec::from_iter(values[rows.clone()].iter().map(Vec::as_slice)).unwrap();
            check::<Bytes>(c.encode, c.id, input, rows.clone(), |_, _| expected.clone())?;
            let Some(body) = (c.encode)(input, Cascade::TOP) else { continue };
            let mut node = vec![c.id.0];
            node.extend_from_slice(&body);
            for m in &matchers {
                let mut got = vec![];
                filter_stream::<Bytes>(&node, values.len(), 0..values.len(), m, &mut got).unwrap();
                prop_assert_eq!(got, values.iter().map(|v| m.matches(v)).collect::<Vec<_>>(), "{} {:?}", c.id.name(), m);
            }
        }
    }

    /// Strings as Utf8 and Utf8View columns: short (inline views) and long, ASCII and not, few
    /// distinct values (dictionary, gathered as views) and many; whole file and a row range.
    #[test]
    fn string_columns_round_trip_as_utf8_and_views(
        pool in prop::collection::vec(prop::option::weighted(0.9, "[a-z\u{e9}\u{6f22} ]{0,20}"), 1..40),
        picks in prop::collection::vec(any::<prop::sample::Index>(), 1..3000),
        range_seed in any::<u64>(),
    ) {
        let values: Vec<Option<&str>> = picks.iter().map(|i| pool[i.index(pool.len())].as_deref()).collect();
        let rows = values.len();
        let schema = Arc::new(Schema::new(vec![
            Field::new("s", DataType::Utf8, true),
            Field::new("v", DataType::Utf8View, true),
        ]));
        let batch = RecordBatch::try_new(schema.clone(), vec![
            Arc::new(StringArray::from(values.clone())),
            Arc::new(StringViewArray::from(values)),
        ]).unwrap();
        let bytes = common::write(schema, &[batch.clone()], WriterOptions { block_rows: 1024, ..Default::default() });
        let file = Arc::new(ZyrFile::open(bytes).unwrap());
        prop_assert_eq!(file.read_rows(&[0, 1], 0..rows as u64).unwrap(), batch.clone());
        let start = (range_seed % rows as u64) as usize;
        let end = start + ((range_seed >> 32) as usize % (rows - start)) + 1;
        prop_assert_eq!(file.read_rows(&[0, 1], start as u64..end as u64).unwrap(), batch.slice(start, end - start));
    }

    #[test]
    fn files_round_trip_every_type_with_random_nulls(rows in 1usize..2500, null_seed in any::<u64>(), block_vectors in 1usize..4) {
        let batch = common::all_types_batch(rows);
        // Replace each column's validity with a random pattern (keeping non-nullable columns whole).
        let mut state = null_seed | 1;
        let columns: Vec<ArrayRef> = batch.columns().iter().zip(batch.schema().fields()).map(|(c, f)| {
            if !f.is_nullable() || matches!(f.data_type(), DataType::Struct(_)) {
                return c.clone();
            }
            let keep: Vec<bool> = (0..rows).map(|_| {
                state ^= state << 13; state ^= state >> 7; state ^= state << 17;
                state % 4 != 0
            }).collect();
            arrow::compute::nullif(c, &BooleanArray::from(keep.iter().map(|k| !k).collect::<Vec<_>>())).unwrap()
        }).collect();
        let batch = RecordBatch::try_new(batch.schema(), columns).unwrap();
        let bytes = common::write(batch.schema(), &[batch.clone()], WriterOptions { block_rows: 1024 * block_vectors, ..Default::default() });
        let file = Arc::new(ZyrFile::open(bytes).unwrap());
        let all: Vec<usize> = (0..batch.num_columns()).collect();
        prop_assert_eq!(file.read_rows(&all, 0..rows as u64).unwrap(), batch.clone());
        let row = (null_seed % rows as u64) as usize;
        prop_assert_eq!(file.read_rows(&all, row as u64..row as u64 + 1).unwrap(), batch.slice(row, 1));
        // A filter matching scattered rows: every type is picked out of its decoded vectors.
        let utf8 = batch.schema().index_of("utf8").unwrap();
        let scan = file.scan(ScanOptions {
            predicates: vec![ColumnPredicate {
                column: utf8,
                op: PredicateOp::Cmp(CmpOp::Eq, Scalar::Bytes(b"value-5".to_vec())),
            }],
            filter_mode: FilterMode::Pushdown,
            ..Default::default()
        }).unwrap();
        let got: Vec<RecordBatch> = scan.collect::<Result<_, _>>().unwrap();
        let mask = arrow::compute::kernels::cmp::eq(batch.column(utf8), &StringArray::new_scalar("value-5")).unwrap();
        prop_assert_eq!(
            arrow::compute::concat_batches(&batch.schema(), &got).unwrap(),
            arrow::compute::filter_record_batch(&batch, &mask).unwrap()
        );
    }
}
