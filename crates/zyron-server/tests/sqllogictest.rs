//! Runs every `tests/slt/*.slt` file against a fresh server over the wire.
//!
//! These files pin Zyron's SQL behaviour as a PostgreSQL client sees it; when
//! the storage underneath changes, the same files must still pass.

mod common;

use std::path::PathBuf;

use async_trait::async_trait;
use sqllogictest::{AsyncDB, DBOutput, DefaultColumnType, Runner};
use tokio_postgres::{Client, SimpleQueryMessage};

#[derive(Debug)]
struct WireError {
    message: String,
    sqlstate: Option<String>,
}

impl std::fmt::Display for WireError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.sqlstate {
            Some(code) => write!(f, "{code}: {}", self.message),
            None => f.write_str(&self.message),
        }
    }
}

impl std::error::Error for WireError {}

struct Wire {
    client: Client,
}

#[async_trait]
impl AsyncDB for Wire {
    type Error = WireError;
    type ColumnType = DefaultColumnType;

    async fn run(&mut self, sql: &str) -> Result<DBOutput<DefaultColumnType>, WireError> {
        let messages = self.client.simple_query(sql).await.map_err(|e| WireError {
            message: e
                .as_db_error()
                .map_or_else(|| e.to_string(), |db| db.message().to_owned()),
            sqlstate: e.code().map(|c| c.code().to_owned()),
        })?;
        let mut rows = Vec::new();
        let mut columns = None;
        let mut affected = 0;
        for message in messages {
            match message {
                SimpleQueryMessage::Row(row) => {
                    columns.get_or_insert(row.len());
                    rows.push(
                        (0..row.len())
                            .map(|i| row.get(i).map_or_else(|| "NULL".to_owned(), render))
                            .collect(),
                    );
                }
                SimpleQueryMessage::RowDescription(description) => {
                    columns.get_or_insert(description.len());
                }
                SimpleQueryMessage::CommandComplete(count) => affected = count,
                _ => {}
            }
        }
        Ok(match columns {
            Some(count) => DBOutput::Rows {
                types: vec![DefaultColumnType::Any; count],
                rows,
            },
            None => DBOutput::StatementComplete(affected),
        })
    }

    async fn shutdown(&mut self) {}

    fn engine_name(&self) -> &str {
        "zyron"
    }

    fn error_sql_state(err: &WireError) -> Option<String> {
        err.sqlstate.clone()
    }
}

/// Empty strings would vanish in the whitespace-separated format.
fn render(value: &str) -> String {
    if value.is_empty() {
        "(empty)".to_owned()
    } else {
        value.to_owned()
    }
}

fn slt_files() -> Vec<PathBuf> {
    let dir = zyron_bench::manifest_dir(env!("CARGO_MANIFEST_DIR")).join("tests/slt");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("tests/slt exists")
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "slt"))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no .slt files in {}", dir.display());
    files
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sql_behaviour_over_the_wire() {
    let mut failures = Vec::new();
    for file in slt_files() {
        let server = common::TestServer::start().await;
        let addr = server.addr();
        let mut runner = Runner::new(move || async move {
            Ok::<_, WireError>(Wire {
                client: common::connect(addr).await,
            })
        });
        runner.with_column_validator(|_, _| true);
        if let Err(e) = runner.run_file_async(&file).await {
            failures.push(format!("{}:\n{e}", file.display()));
        }
        server.server.shutdown().await.unwrap();
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}
