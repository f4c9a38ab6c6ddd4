//! TPC-H generated in process with `tpchgen`, straight into Arrow batches.
//!
//! Each table is generated in as many parts as there are cores; each part
//! becomes one partition of the table, so scans are parallel from the start.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::record_batch::RecordBatchReader;
use datafusion::prelude::SessionContext;
use tpchgen::generators::{
    CustomerGenerator, LineItemGenerator, NationGenerator, OrderGenerator, PartGenerator,
    PartSuppGenerator, RegionGenerator, SupplierGenerator,
};
use tpchgen_arrow::{
    CustomerArrow, LineItemArrow, NationArrow, OrderArrow, PartArrow, PartSuppArrow, RegionArrow,
    SupplierArrow,
};

use zyron_common::{Result, SqlState, ZyronError};

use crate::errors::to_zyron_error;

/// The eight TPC-H tables, smallest first.
pub const TABLES: [&str; 8] = [
    "region", "nation", "supplier", "customer", "part", "partsupp", "orders", "lineitem",
];

/// Rows per generated batch.
const BATCH_ROWS: usize = 8192;
/// Scale factors above this would not fit in memory: demo tables are held as Arrow batches.
pub const MAX_SCALE_FACTOR: f64 = 30.0;

/// Progress of a load, reported after every batch.
#[derive(Debug, Clone, Copy)]
pub struct Progress {
    pub table: &'static str,
    pub rows_done: u64,
    pub rows_expected: u64,
}

/// What was loaded, per table.
#[derive(Debug, Clone, PartialEq)]
pub struct LoadedTable {
    pub table: &'static str,
    pub rows: u64,
}

/// Approximate row count of `table` at `scale_factor` (exact for all but lineitem).
pub fn expected_rows(table: &str, scale_factor: f64) -> u64 {
    let per_sf = match table {
        "region" => return 5,
        "nation" => return 25,
        "supplier" => 10_000.0,
        "customer" => 150_000.0,
        "part" => 200_000.0,
        "partsupp" => 800_000.0,
        "orders" => 1_500_000.0,
        "lineitem" => 6_001_215.0,
        _ => 0.0,
    };
    (per_sf * scale_factor).round() as u64
}

fn reader(
    table: &str,
    scale_factor: f64,
    part: i32,
    parts: i32,
) -> Box<dyn RecordBatchReader + Send> {
    let (sf, p, n) = (scale_factor, part, parts);
    match table {
        "region" => {
            Box::new(RegionArrow::new(RegionGenerator::new(sf, p, n)).with_batch_size(BATCH_ROWS))
        }
        "nation" => {
            Box::new(NationArrow::new(NationGenerator::new(sf, p, n)).with_batch_size(BATCH_ROWS))
        }
        "supplier" => Box::new(
            SupplierArrow::new(SupplierGenerator::new(sf, p, n)).with_batch_size(BATCH_ROWS),
        ),
        "customer" => Box::new(
            CustomerArrow::new(CustomerGenerator::new(sf, p, n)).with_batch_size(BATCH_ROWS),
        ),
        "part" => {
            Box::new(PartArrow::new(PartGenerator::new(sf, p, n)).with_batch_size(BATCH_ROWS))
        }
        "partsupp" => Box::new(
            PartSuppArrow::new(PartSuppGenerator::new(sf, p, n)).with_batch_size(BATCH_ROWS),
        ),
        "orders" => {
            Box::new(OrderArrow::new(OrderGenerator::new(sf, p, n)).with_batch_size(BATCH_ROWS))
        }
        "lineitem" => Box::new(
            LineItemArrow::new(LineItemGenerator::new(sf, p, n)).with_batch_size(BATCH_ROWS),
        ),
        other => unreachable!("not a TPC-H table: {other}"),
    }
}

/// Generates one table in `parts` parallel parts; each part is one partition.
/// Generates one table's rows, all parts in order (so `lineitem` comes out sorted by
/// `l_orderkey`).
pub fn generate(table: &'static str, scale_factor: f64) -> Result<(SchemaRef, Vec<RecordBatch>)> {
    let parts = std::thread::available_parallelism().map_or(1, |n| n.get());
    let (schema, partitions) = generate_table(table, scale_factor, parts, &|_| {})?;
    Ok((schema, partitions.into_iter().flatten().collect()))
}

fn generate_table(
    table: &'static str,
    scale_factor: f64,
    parts: usize,
    progress: &(dyn Fn(Progress) + Sync),
) -> Result<(SchemaRef, Vec<Vec<RecordBatch>>)> {
    // The two smallest tables are generated whole; splitting them yields empty parts.
    let parts = if expected_rows(table, scale_factor) < 10_000 {
        1
    } else {
        parts
    };
    let rows_expected = expected_rows(table, scale_factor);
    let rows_done = AtomicU64::new(0);
    let schema = reader(table, scale_factor, 1, 1).schema();
    let partitions = std::thread::scope(|scope| {
        let handles: Vec<_> = (1..=parts as i32)
            .map(|part| {
                let rows_done = &rows_done;
                scope.spawn(move || -> Result<Vec<RecordBatch>> {
                    let mut batches = Vec::new();
                    for batch in reader(table, scale_factor, part, parts as i32) {
                        let batch = batch.map_err(|e| {
                            ZyronError::internal(format!("generating {table}: {e}"))
                        })?;
                        let done = rows_done.fetch_add(batch.num_rows() as u64, Ordering::Relaxed)
                            + batch.num_rows() as u64;
                        progress(Progress {
                            table,
                            rows_done: done,
                            rows_expected,
                        });
                        batches.push(batch);
                    }
                    Ok(batches)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|handle| {
                handle
                    .join()
                    .map_err(|_| ZyronError::internal("TPC-H generator thread panicked"))?
            })
            .collect::<Result<Vec<_>>>()
    })?;
    Ok((schema, partitions))
}

/// Generates all eight tables at `scale_factor` and registers them in `ctx`'s
/// default schema, replacing tables of the same names. Runs on the calling
/// thread plus one thread per core; call it from a blocking context.
pub fn load(
    ctx: &SessionContext,
    scale_factor: f64,
    progress: &(dyn Fn(Progress) + Sync),
) -> Result<Vec<LoadedTable>> {
    if !(scale_factor > 0.0 && scale_factor <= MAX_SCALE_FACTOR) {
        return Err(ZyronError::new(
            SqlState::INVALID_PARAMETER_VALUE,
            format!("TPC-H scale factor must be in (0, {MAX_SCALE_FACTOR}], got {scale_factor}"),
        ));
    }
    let parts = std::thread::available_parallelism().map_or(1, |n| n.get());
    TABLES
        .iter()
        .map(|&table| {
            let (schema, partitions) = generate_table(table, scale_factor, parts, progress)?;
            let rows = partitions
                .iter()
                .flatten()
                .map(|b| b.num_rows() as u64)
                .sum();
            register_in_memory(ctx, table, Arc::clone(&schema), partitions)?;
            Ok(LoadedTable { table, rows })
        })
        .collect()
}

/// Demo data is read-only and regenerated at every start, so it is held as
/// Arrow batches in memory (shared by every session) rather than written to
/// the durable heap.
fn register_in_memory(
    ctx: &SessionContext,
    name: &str,
    schema: SchemaRef,
    partitions: Vec<Vec<RecordBatch>>,
) -> Result<()> {
    let table =
        datafusion::catalog::MemTable::try_new(schema, partitions).map_err(to_zyron_error)?;
    ctx.deregister_table(name).map_err(to_zyron_error)?;
    ctx.register_table(name, Arc::new(table))
        .map_err(to_zyron_error)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn small_scale_loads_all_tables_with_expected_counts() {
        let ctx = SessionContext::new();
        let loaded = load(&ctx, 0.01, &|_| {}).unwrap();
        assert_eq!(loaded.len(), 8);
        for LoadedTable { table, rows } in &loaded {
            let expected = expected_rows(table, 0.01);
            if *table == "lineitem" {
                // lineitem's count varies with the random order sizes.
                assert!(
                    (*rows as f64 - expected as f64).abs() / (expected as f64) < 0.02,
                    "{table} {rows}"
                );
            } else {
                assert_eq!(*rows, expected, "{table}");
            }
            let df = ctx
                .sql(&format!("SELECT count(*) FROM {table}"))
                .await
                .unwrap();
            let batches = df.collect().await.unwrap();
            let count = batches[0]
                .column(0)
                .as_any()
                .downcast_ref::<datafusion::arrow::array::Int64Array>()
                .unwrap()
                .value(0);
            assert_eq!(count as u64, *rows, "{table}");
        }
    }

    #[test]
    fn scale_factor_out_of_range_is_refused() {
        let ctx = SessionContext::new();
        let err = load(&ctx, 0.0, &|_| {}).unwrap_err();
        assert_eq!(err.sqlstate(), SqlState::INVALID_PARAMETER_VALUE);
    }
}
