//! Helpers the engine's SQL tests share: a runtime, and statements run
//! for their rows or their command tag.

#![allow(dead_code)]

use datafusion::arrow::array::RecordBatch;
use futures::TryStreamExt;
use zyron_engine::{Session, StatementResult};

pub fn block_on<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(f)
}

/// The rows `sql` (its last statement) returns; panics on an error.
pub async fn rows(session: &mut Session, sql: &str) -> Vec<RecordBatch> {
    let mut results = session
        .execute_sql(sql)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"));
    match results.pop() {
        Some(StatementResult::Rows { stream, .. }) => stream
            .try_collect()
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}")),
        other => panic!("{sql} returned {other:?}"),
    }
}

/// The command tag of `sql` (its last statement); panics on an error.
pub async fn command(session: &mut Session, sql: &str) -> String {
    match session
        .execute_sql(sql)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
        .pop()
    {
        Some(StatementResult::Command(tag)) => tag.to_string(),
        other => panic!("{sql} returned {other:?}"),
    }
}

/// The error `sql` fails with, whether planning or streaming its rows.
pub async fn error(session: &mut Session, sql: &str) -> zyron_common::ZyronError {
    match session.execute_sql(sql).await {
        Err(e) => e,
        Ok(mut results) => match results.pop() {
            Some(StatementResult::Rows { stream, .. }) => stream
                .try_collect::<Vec<_>>()
                .await
                .map(|_| ())
                .map_err(zyron_engine::to_zyron_error)
                .expect_err(sql),
            other => panic!("{sql} succeeded: {other:?}"),
        },
    }
}

/// Rows as the PostgreSQL text format would show them (NULL as `None`), in the order returned.
pub fn text_rows(batches: &[RecordBatch]) -> Vec<Vec<Option<String>>> {
    use datafusion::arrow::util::display::array_value_to_string;
    batches
        .iter()
        .flat_map(|batch| {
            (0..batch.num_rows()).map(move |row| {
                (0..batch.num_columns())
                    .map(|column| {
                        let array = batch.column(column);
                        (!array.is_null(row)).then(|| array_value_to_string(array, row).unwrap())
                    })
                    .collect()
            })
        })
        .collect()
}
