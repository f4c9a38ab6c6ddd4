//! Prints, for each column of a `.zyr` file, its stored size, the encodings its blocks chose and
//! how fast it decodes to Arrow (single thread, from memory), then the whole-file scan speed.
//! A developer's tool for working on encodings:
//!
//! ```text
//! cargo run --release --example zyr_inspect -- lineitem.zyr [rounds] [batch_rows] [utf8|views]
//! ```

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use arrow::array::RecordBatch;
use bytes::Bytes;
use zyron_format::{ScanOptions, ZyrFile};

fn arrow_bytes(batch: &RecordBatch) -> usize {
    batch
        .columns()
        .iter()
        .map(|c| c.to_data().get_slice_memory_size().unwrap_or(0))
        .sum()
}

/// Best of `rounds` full scans of `projection`: (seconds, Arrow bytes produced). Each batch is
/// dropped before the next is decoded, as a query consumes a scan.
fn scan_seconds(
    file: &Arc<ZyrFile>,
    projection: Option<Vec<usize>>,
    rounds: usize,
    batch_rows: usize,
    string_views: bool,
) -> (f64, usize) {
    let mut best = f64::MAX;
    let mut bytes = 0;
    for _ in 0..rounds {
        let options = ScanOptions {
            projection: projection.clone(),
            batch_rows,
            string_views,
            ..ScanOptions::default()
        };
        let start = Instant::now();
        let scan = file
            .scan(options)
            .unwrap_or_else(|e| panic!("scan failed: {e}"));
        bytes = 0;
        for batch in scan {
            bytes += arrow_bytes(&batch.unwrap_or_else(|e| panic!("scan failed: {e}")));
        }
        best = best.min(start.elapsed().as_secs_f64());
    }
    (best, bytes)
}

fn main() {
    let mut args = std::env::args().skip(1);
    let usage = "usage: zyr_inspect FILE.zyr [rounds] [batch_rows] [utf8|views]\n\n\
        Prints each column's stored and Arrow size, the encodings its blocks chose and its\n\
        one-thread decode speed (best of `rounds` scans, default 3, in batches of\n\
        `batch_rows`, default 8192, strings as `utf8` (the default) or `views`), then the\n\
        same for the whole file. As views, a string column's Arrow size counts its 16-byte\n\
        views only, so compare its times, not its GB/s, with `utf8`.";
    let fail = |message: String| -> ! {
        eprintln!("zyr_inspect: {message}\n\n{usage}");
        std::process::exit(2)
    };
    let path = match args.next() {
        Some(flag) if flag == "-h" || flag == "--help" => {
            println!("{usage}");
            return;
        }
        Some(path) => path,
        None => fail("no file given".into()),
    };
    let mut number = |what: &str, default: usize| {
        args.next().map_or(default, |n| {
            n.parse()
                .unwrap_or_else(|_| fail(format!("{what} must be a number, not {n:?}")))
        })
    };
    let rounds = number("rounds", 3);
    let batch_rows = number("batch_rows", ScanOptions::default().batch_rows);
    let string_views = match args.next().as_deref() {
        None | Some("utf8") => false,
        Some("views") => true,
        Some(other) => fail(format!("strings must be `utf8` or `views`, not {other:?}")),
    };
    let bytes = Bytes::from(
        std::fs::read(&path).unwrap_or_else(|e| fail(format!("cannot read {path}: {e}"))),
    );
    let file =
        Arc::new(ZyrFile::open(bytes).unwrap_or_else(|e| fail(format!("cannot open {path}: {e}"))));
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
        let (seconds, arrow) = scan_seconds(&file, Some(vec![i]), rounds, batch_rows, string_views);
        println!(
            "{:<20} {:>9.2} {:>9.1} {:>8.2}  {:?}",
            field.name(),
            stored as f64 / 1e6,
            arrow as f64 / 1e6,
            arrow as f64 / seconds / 1e9,
            chosen
        );
    }
    let (seconds, arrow) = scan_seconds(&file, None, rounds, batch_rows, string_views);
    println!(
        "whole file: {:.1} MB stored, {:.1} MB Arrow, scan {:.1} ms = {:.2} GB/s",
        file.file_len() as f64 / 1e6,
        arrow as f64 / 1e6,
        seconds * 1e3,
        arrow as f64 / seconds / 1e9
    );
}
