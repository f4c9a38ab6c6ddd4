//! TPC-H tables from Zyron's generator (tpchgen), written as Parquet so that every system in a
//! comparison reads identical data.

use std::path::Path;

use zyron_engine::datafusion::dataframe::DataFrameWriteOptions;
use zyron_engine::datafusion::prelude::SessionContext;
use zyron_engine::demo::tpch;

/// Writes every TPC-H table at `scale_factor` as `<table>.parquet` into `dir`; returns the
/// table names.
pub async fn write_parquet(scale_factor: f64, dir: &Path) -> Result<Vec<&'static str>, String> {
    let ctx = SessionContext::new();
    tokio::task::block_in_place(|| tpch::load(&ctx, scale_factor, &|_| {}))
        .map_err(|e| e.to_string())?;
    for table in tpch::TABLES {
        let path = dir.join(format!("{table}.parquet"));
        let frame = ctx.table(table).await.map_err(|e| e.to_string())?;
        frame
            .write_parquet(
                path.to_str().expect("temporary paths are UTF-8"),
                DataFrameWriteOptions::new().with_single_file_output(true),
                None,
            )
            .await
            .map_err(|e| e.to_string())?;
    }
    Ok(tpch::TABLES.to_vec())
}

/// The 22 queries, from `benchmarks/queries/tpch`, named `q01` to `q22`.
pub fn queries() -> Vec<(String, String)> {
    let dir = zyron_bench::workspace_root().join("benchmarks/queries/tpch");
    (1..=22)
        .map(|q| {
            let sql = std::fs::read_to_string(dir.join(format!("q{q}.sql"))).expect("query file");
            (format!("q{q:02}"), sql)
        })
        .collect()
}
