//! `COPY (query) TO 'file.zyr'` and `COPY table TO '...' STORED AS ZYR`.
//!
//! DataFusion's COPY writes the formats it knows; a `.zyr` target is intercepted before
//! planning, the source query runs as usual, and its batches stream into a [`ZyrWriter`]. The
//! file is written under a temporary name, fsynced, then renamed, so a reader never sees half a
//! file. Options: `bloom_filter_columns 'a,b'` and `block_rows N`.

use std::io::BufWriter;

use datafusion::prelude::SessionContext;
use datafusion::sql::parser::{CopyToSource, CopyToStatement, Statement as DfStatement};
use datafusion::sql::sqlparser::ast;
use futures::StreamExt;
use zyron_common::{Result, SqlState, ZyronError};
use zyron_format::{WriterOptions, ZyrWriter};

use crate::errors::to_zyron_error;

/// Whether `copy` writes a `.zyr` file.
pub fn is_zyr_target(copy: &CopyToStatement) -> bool {
    match &copy.stored_as {
        Some(format) => format.eq_ignore_ascii_case("zyr"),
        None => copy.target.to_ascii_lowercase().ends_with(".zyr"),
    }
}

/// Runs the COPY; returns the number of rows written.
pub async fn copy_to_zyr(ctx: &SessionContext, copy: &CopyToStatement) -> Result<u64> {
    if !copy.partitioned_by.is_empty() {
        return Err(ZyronError::not_supported(
            "PARTITIONED BY is not supported for .zyr targets yet",
        ));
    }
    let options = writer_options(copy)?;
    let query = match &copy.source {
        CopyToSource::Query(q) => ast::Statement::Query(q.clone()),
        CopyToSource::Relation(name) => {
            let sql = format!("SELECT * FROM {name}");
            return Box::pin(copy_query(ctx, &sql, copy, options)).await;
        }
    };
    let plan =
        crate::statement::plan_statement(&ctx.state(), DfStatement::Statement(Box::new(query)))
            .await?;
    let frame = ctx
        .execute_logical_plan(plan)
        .await
        .map_err(to_zyron_error)?;
    write_frame(frame, &copy.target, options).await
}

async fn copy_query(
    ctx: &SessionContext,
    sql: &str,
    copy: &CopyToStatement,
    options: WriterOptions,
) -> Result<u64> {
    let frame = ctx.sql(sql).await.map_err(to_zyron_error)?;
    write_frame(frame, &copy.target, options).await
}

fn writer_options(copy: &CopyToStatement) -> Result<WriterOptions> {
    let mut options = WriterOptions::default();
    for (key, value) in &copy.options {
        let value = match value {
            ast::Value::SingleQuotedString(s) | ast::Value::DoubleQuotedString(s) => s.clone(),
            ast::Value::Number(n, _) => n.clone(),
            other => other.to_string(),
        };
        match key.to_ascii_lowercase().as_str() {
            "bloom_filter_columns" => {
                options.bloom_filter_columns = value
                    .split(',')
                    .map(|s| s.trim().to_string())
                    .filter(|s| !s.is_empty())
                    .collect()
            }
            "block_rows" => {
                options.block_rows = value.parse().map_err(|_| {
                    ZyronError::new(
                        SqlState::INVALID_PARAMETER_VALUE,
                        format!("block_rows must be a number, got {value}"),
                    )
                })?
            }
            other => {
                return Err(ZyronError::new(
                    SqlState::INVALID_PARAMETER_VALUE,
                    format!(
                        "unknown option \"{other}\" for .zyr files (known: bloom_filter_columns, block_rows)"
                    ),
                ));
            }
        }
    }
    Ok(options)
}

async fn write_frame(
    frame: datafusion::dataframe::DataFrame,
    target: &str,
    options: WriterOptions,
) -> Result<u64> {
    let schema = std::sync::Arc::new(frame.schema().as_arrow().clone());
    let mut stream = frame.execute_stream().await.map_err(to_zyron_error)?;
    let path = std::path::PathBuf::from(target.strip_prefix("file://").unwrap_or(target));
    let temporary = path.with_extension("zyr.partial");
    let io_error = |e: std::io::Error| {
        ZyronError::new(
            SqlState::IO_ERROR,
            format!("could not write \"{}\": {e}", path.display()),
        )
    };
    let file = std::fs::File::create(&temporary).map_err(io_error)?;
    let mut writer = ZyrWriter::new(BufWriter::with_capacity(1 << 20, file), schema, options)
        .map_err(format_error)?;
    let mut rows = 0u64;
    while let Some(batch) = stream.next().await {
        let batch = batch.map_err(to_zyron_error)?;
        rows += batch.num_rows() as u64;
        writer.write(&batch).map_err(format_error)?;
    }
    let (out, _) = writer.finish().map_err(format_error)?;
    let file = out.into_inner().map_err(|e| io_error(e.into_error()))?;
    file.sync_all().map_err(io_error)?;
    std::fs::rename(&temporary, &path).map_err(io_error)?;
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(io_error)?;
    }
    Ok(rows)
}

fn format_error(e: zyron_format::FormatError) -> ZyronError {
    e.to_zyron()
}
