//! Any bytes handed to the reader give a result or an error: never a panic, a hang or an
//! unbounded allocation. Exercises open, column records, every column's decode, single rows,
//! statistics, scans returning string views, and filtered scans. Every batch the reader
//! returns must also pass Arrow's full validation: the reader builds string arrays without
//! Arrow's checks (after its own), so an array that passed ours but not Arrow's would be
//! undefined behaviour waiting downstream.
#![no_main]

use std::sync::Arc;

use libfuzzer_sys::fuzz_target;
use zyron_format::{CmpOp, ColumnPredicate, FilterMode, PredicateOp, Scalar, ScanOptions, ZyrFile};

fuzz_target!(|data: &[u8]| {
    let Ok(file) = ZyrFile::open(bytes::Bytes::copy_from_slice(data)) else { return };
    let file = Arc::new(file);
    let columns = file.schema().fields().len();
    let rows = file.num_rows().min(1 << 20);
    let all: Vec<usize> = (0..columns).collect();
    if let Ok(batch) = file.read_rows(&all, 0..rows) {
        check(&batch);
    }
    if rows > 0
        && let Ok(batch) = file.read_rows(&all, rows / 2..rows / 2 + 1)
    {
        check(&batch);
    }
    // Every string column as views: dictionary blocks gather views into their values.
    let views = ScanOptions { string_views: true, batch_rows: 1024, ..Default::default() };
    if let Ok(scan) = file.scan(views) {
        for batch in scan {
            match batch {
                Ok(batch) => check(&batch),
                Err(_) => break,
            }
        }
    }
    for c in 0..columns {
        let _ = file.column_statistics(c);
        let _ = file.column_encodings(c);
        for op in [
            PredicateOp::Cmp(CmpOp::Eq, Scalar::Int(3)),
            PredicateOp::Cmp(CmpOp::Lt, Scalar::Float(0.5)),
            PredicateOp::In(vec![Scalar::Bytes(b"AIR".to_vec())]),
            PredicateOp::IsNull,
        ] {
            // One vector per batch, so every block of more than 1024 rows is cut into batches.
            let options = ScanOptions { predicates: vec![ColumnPredicate { column: c, op }], filter_mode: FilterMode::Pushdown, batch_rows: 1024, ..Default::default() };
            if let Ok(scan) = file.scan(options) {
                for batch in scan {
                    match batch {
                        Ok(batch) => check(&batch),
                        Err(_) => break,
                    }
                }
            }
        }
    }
});

fn check(batch: &arrow::array::RecordBatch) {
    for column in batch.columns() {
        if let Err(e) = column.to_data().validate_full() {
            panic!("the reader returned an invalid {} array: {e}", column.data_type());
        }
    }
}
