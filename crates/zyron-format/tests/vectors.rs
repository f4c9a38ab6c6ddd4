//! The committed test vectors under `formats/zyr/vectors/` decode to the values that made them.
//!
//! Each vector exercises one encoding on purpose; the test checks that the file still chooses it
//! (so a vector keeps covering what its name says) and that decoding gives the generator's rows.
//! `ZYRON_REGENERATE_VECTORS=new cargo test -p zyron-format --test vectors` writes the vectors
//! that do not exist yet (a new encoding); committed ones stay as they are, since they also
//! prove that files written by earlier writers still read. `ZYRON_REGENERATE_VECTORS=all`
//! rewrites every one: only for a deliberate format change, with a version bump in SPEC.md.

mod common;

use std::path::PathBuf;
use std::sync::Arc;

use arrow::array::*;
use arrow::datatypes::*;
use bytes::Bytes;
use zyron_format::{WriterOptions, ZyrFile, ZyrWriter};

fn vectors_dir() -> PathBuf {
    // The folder cargo runs the test from, not the one it was built in: a shared target
    // directory may hold a build made in another checkout (see zyron_bench::manifest_dir).
    let manifest = std::env::var_os("CARGO_MANIFEST_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")));
    manifest.join("../../formats/zyr/vectors")
}

fn one_column(name: &str, array: ArrayRef) -> RecordBatch {
    let schema = Arc::new(Schema::new(vec![Field::new(
        name,
        array.data_type().clone(),
        true,
    )]));
    RecordBatch::try_new(schema, vec![array]).unwrap()
}

/// (file name, expected top-level encoding of column 0, rows)
fn vectors() -> Vec<(&'static str, Option<&'static str>, RecordBatch)> {
    let n = 3000;
    let tiny_schema = Arc::new(Schema::new(vec![Field::new("id", DataType::Int64, false)]));
    let tiny = RecordBatch::try_new(tiny_schema, vec![Arc::new(Int64Array::from(vec![1, 2, 3]))]);
    vec![
        ("tiny.zyr", Some("plain"), tiny.unwrap()),
        (
            "plain.zyr",
            Some("plain"),
            one_column(
                "random",
                Arc::new(Int64Array::from_iter_values(
                    (0..n).map(|i: i64| i.wrapping_mul(0x9E37_79B9_7F4A_7C15_u64 as i64)),
                )),
            ),
        ),
        (
            "constant.zyr",
            Some("constant"),
            one_column(
                "flag",
                Arc::new(StringArray::from_iter_values((0..n).map(|_| "N"))),
            ),
        ),
        (
            "bitpacked.zyr",
            Some("bitpacked"),
            one_column(
                "quantity",
                Arc::new(Int32Array::from_iter(
                    (0..n).map(|i| (i % 97 != 5).then_some((i * 7919 % 50) as i32 + 1)),
                )),
            ),
        ),
        (
            "delta.zyr",
            Some("delta"),
            one_column(
                "ts",
                Arc::new(TimestampMicrosecondArray::from_iter_values(
                    (0..n).map(|i| 1_700_000_000_000_000 + i * 1_000_003 + (i * 7 % 5)),
                )),
            ),
        ),
        (
            "run_length.zyr",
            Some("run_length"),
            one_column(
                "day",
                Arc::new(Date32Array::from_iter_values(
                    (0..n).map(|i| 19_000 + (i / 500) as i32),
                )),
            ),
        ),
        (
            "dictionary.zyr",
            Some("dictionary"),
            one_column(
                "mode",
                Arc::new(StringArray::from_iter((0..n).map(|i| {
                    (i % 11 != 0).then_some(["AIR", "MAIL", "SHIP", "TRUCK"][(i * 7 % 4) as usize])
                }))),
            ),
        ),
        (
            "alp.zyr",
            Some("alp"),
            one_column(
                "price",
                Arc::new(Float64Array::from_iter_values(
                    (0..n).map(|i| ((i * 7919) % 100_000 + 90_000) as f64 / 100.0),
                )),
            ),
        ),
        (
            "fsst.zyr",
            Some("fsst"),
            one_column(
                "comment",
                Arc::new(StringArray::from_iter_values((0..n).map(sentence))),
            ),
        ),
        (
            "fsst_lz4.zyr",
            Some("fsst_lz4"),
            one_column(
                "comment",
                // Text like fsst.zyr's: today's writer finds LZ4 pays on its codes (that
                // vector was written before fsst_lz4 existed).
                Arc::new(StringArray::from_iter_values(
                    (0..n).map(|i| sentence(i + n)),
                )),
            ),
        ),
        (
            "zstd.zyr",
            Some("zstd"),
            one_column(
                "blob",
                Arc::new(BinaryArray::from_iter_values((0..n).map(|i| {
                    let block = (i / 8) as u8;
                    (0..200u32)
                        .map(|k| block.wrapping_mul(31).wrapping_add((k % 50) as u8))
                        .collect::<Vec<u8>>()
                }))),
            ),
        ),
        ("all_types.zyr", None, common::all_types_batch(2500)),
    ]
}

/// Pseudo-random text from a 64-word vocabulary, like TPC-H's comments.
fn sentence(i: i64) -> String {
    const WORDS: [&str; 16] = [
        "furiously",
        "regular",
        "packages",
        "sleep",
        "quickly",
        "among",
        "the",
        "final",
        "ironic",
        "bold",
        "accounts",
        "deposits",
        "haggle",
        "carefully",
        "express",
        "requests",
    ];
    let mut state = (i as u64)
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    let words = 4 + (state >> 60) as usize;
    (0..words)
        .map(|_| {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let w = WORDS[(state >> 33) as usize % WORDS.len()];
            let suffix = ["", "ly", "s", "ed"][(state >> 40) as usize % 4];
            format!("{w}{suffix}")
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// Vectors carry a bloom filter on their first column, except the tiny one SPEC.md walks through.
fn encode(name: &str, batch: &RecordBatch) -> Vec<u8> {
    let bloom = match name {
        "tiny.zyr" => vec![],
        _ => vec![batch.schema().field(0).name().clone()],
    };
    let mut w = ZyrWriter::new(
        Vec::new(),
        batch.schema(),
        WriterOptions {
            block_rows: 2048,
            bloom_filter_columns: bloom,
            ..Default::default()
        },
    )
    .unwrap();
    w.write(batch).unwrap();
    w.finish().unwrap().0
}

#[test]
fn committed_vectors_decode_to_their_rows() {
    let regenerate = std::env::var("ZYRON_REGENERATE_VECTORS").ok();
    for (name, encoding, batch) in vectors() {
        let path = vectors_dir().join(name);
        let write = match regenerate.as_deref() {
            Some("all") => true,
            Some("new") => !path.exists(),
            _ => false,
        };
        if write {
            std::fs::write(&path, encode(name, &batch)).unwrap();
        }
        let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let file = Arc::new(ZyrFile::open(Bytes::from(bytes)).unwrap());
        let all: Vec<usize> = (0..batch.num_columns()).collect();
        assert_eq!(
            file.read_rows(&all, 0..batch.num_rows() as u64).unwrap(),
            batch,
            "{name}"
        );
        if let Some(encoding) = encoding {
            let used = file.column_encodings(0).unwrap();
            assert!(
                used.contains(&encoding),
                "{name} was meant to use {encoding}, uses {used:?}"
            );
        }
    }
}
