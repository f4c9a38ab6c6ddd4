//! Prints, for each column of a `.zyr` file, its stored size, the encodings its blocks chose and
//! how fast it decodes to Arrow (single thread, from memory), then the whole-file scan speed.
//! A developer's tool for working on encodings:
//!
//! ```text
//! cargo run --release --example zyr_inspect -- lineitem.zyr [rounds] [batch_rows]
//! ```

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use arrow::array::{Array, RecordBatch};
use bytes::Bytes;
use zyron_format::{ScanOptions, ZyrFile};

fn arrow_bytes(batches: &[RecordBatch]) -> usize {
    batches
        .iter()
        .flat_map(|b| b.columns())
        .map(|c| c.to_data().get_slice_memory_size().unwrap_or(0))
        .sum()
}

/// Best of `rounds` full scans of `projection`: (seconds, Arrow bytes produced).
fn scan_seconds(
    file: &Arc<ZyrFile>,
    projection: Option<Vec<usize>>,
    rounds: usize,
    batch_rows: usize,
) -> (f64, usize) {
    let mut best = f64::MAX;
    let mut bytes = 0;
    for _ in 0..rounds {
        let options = ScanOptions {
            projection: projection.clone(),
            batch_rows,
            ..ScanOptions::default()
        };
        let start = Instant::now();
        let batches: Vec<RecordBatch> = file
            .scan(options)
            .and_then(|scan| scan.collect())
            .unwrap_or_else(|e| panic!("scan failed: {e}"));
        best = best.min(start.elapsed().as_secs_f64());
        bytes = arrow_bytes(&batches);
    }
    (best, bytes)
}

fn main() {
    let mut args = std::env::args().skip(1);
    let usage = "usage: zyr_inspect FILE.zyr [rounds] [batch_rows]";
    let path = args.next().expect(usage);
    let rounds: usize = args.next().map_or(3, |r| r.parse().expect(usage));
    let batch_rows: usize = args.next().map_or(ScanOptions::default().batch_rows, |r| {
        r.parse().expect(usage)
    });
    let bytes = Bytes::from(std::fs::read(&path).expect("read file"));
    let file = Arc::new(ZyrFile::open(bytes).expect("open"));
    let schema = file.schema();
    println!(
        "{:<20} {:>9} {:>9} {:>8}  encodings (blocks)",
        "column", "stored MB", "arrow MB", "GB/s"
    );
    for (i, field) in schema.fields().iter().enumerate() {
        let node = file.subtree_nodes(&[i]);
        let stored: u64 = node
            .iter()
            .flat_map(|n| file.data_ranges(*n).expect("column record"))
            .map(|r| r.end - r.start)
            .sum();
        let mut chosen: BTreeMap<&str, usize> = BTreeMap::new();
        for name in file.column_encodings(i).expect("encodings") {
            *chosen.entry(name).or_default() += 1;
        }
        let (seconds, arrow) = scan_seconds(&file, Some(vec![i]), rounds, batch_rows);
        println!(
            "{:<20} {:>9.2} {:>9.1} {:>8.2}  {:?}",
            field.name(),
            stored as f64 / 1e6,
            arrow as f64 / 1e6,
            arrow as f64 / seconds / 1e9,
            chosen
        );
    }
    let (seconds, arrow) = scan_seconds(&file, None, rounds, batch_rows);
    println!(
        "whole file: {:.1} MB stored, {:.1} MB Arrow, scan {:.1} ms = {:.2} GB/s",
        file.file_len() as f64 / 1e6,
        arrow as f64 / 1e6,
        seconds * 1e3,
        arrow as f64 / seconds / 1e9
    );
}
