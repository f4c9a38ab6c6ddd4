//! TPC-DS data, queries and DuckDB's answers, from DuckDB's `tpcds` extension (PyPI
//! `duckdb-extension-tpcds`, whose version must equal the `duckdb` package's; both are 1.5.5 in
//! `ZYRON_TPCDS_PYTHONPATH`, default `~/.cache/zyron-py/tpcds`, where `scripts/test.sh`
//! installs them).

use std::path::{Path, PathBuf};

use serde::Deserialize;

type Rows = Vec<Vec<Option<String>>>;

/// Generates the data as Parquet, the queries and DuckDB's answers.
const GENERATOR: &str = r#"
import sys, os, json, glob
import duckdb
scale, out, extension = float(sys.argv[1]), sys.argv[2], sys.argv[3]
con = duckdb.connect()
con.execute("SET enable_progress_bar = false")
con.execute("SET threads = 2")
con.execute(f"LOAD '{extension}'")
con.execute(f"CALL dsdgen(sf={scale})")
tables = {}
for (t,) in con.execute("SELECT table_name FROM duckdb_tables() ORDER BY 1").fetchall():
    con.execute(f"COPY {t} TO '{out}/{t}.parquet' (FORMAT parquet)")
    tables[t] = [[n, ty] for n, ty, *_ in con.execute(f"DESCRIBE {t}").fetchall()]
def text(v):
    if v is None: return None
    if isinstance(v, bool): return 't' if v else 'f'
    if isinstance(v, float): return repr(v)
    return str(v)
queries = []
for n, q in con.execute("SELECT query_nr, query FROM tpcds_queries() ORDER BY 1").fetchall():
    rows = con.execute(q).fetchall()
    queries.append({"name": f"q{n:02}", "sql": q, "rows": [[text(v) for v in r] for r in rows]})
json.dump({"version": duckdb.__version__, "tables": tables, "queries": queries}, open(f"{out}/tpcds.json", "w"))
"#;

#[derive(Deserialize)]
pub struct Generated {
    pub version: String,
    /// Table name to its columns, (name, DuckDB type).
    pub tables: std::collections::BTreeMap<String, Vec<(String, String)>>,
    pub queries: Vec<Query>,
}

#[derive(Deserialize)]
pub struct Query {
    pub name: String,
    pub sql: String,
    pub rows: Rows,
}

fn python_path() -> PathBuf {
    match std::env::var_os("ZYRON_TPCDS_PYTHONPATH") {
        Some(path) => PathBuf::from(path),
        None => PathBuf::from(std::env::var_os("HOME").unwrap_or_default())
            .join(".cache/zyron-py/tpcds"),
    }
}

/// The extension's file inside the pip package, or why there is none.
fn extension_file(python_path: &Path) -> Result<PathBuf, String> {
    let pattern = python_path.join("duckdb_extension_tpcds/extensions");
    let versions = std::fs::read_dir(&pattern).map_err(|e| {
        format!(
            "no duckdb-extension-tpcds in {}: {e}",
            python_path.display()
        )
    })?;
    versions
        .filter_map(|entry| entry.ok())
        .map(|entry| entry.path().join("tpcds.duckdb_extension"))
        .find(|file| file.is_file())
        .ok_or_else(|| format!("no tpcds.duckdb_extension under {}", pattern.display()))
}

/// Writes the tables as `<table>.parquet` into `out` and returns them with the queries and
/// DuckDB's answers; an error says why (for example, the extension is not installed).
pub fn generate(scale_factor: f64, out: &Path) -> Result<Generated, String> {
    let python_path = python_path();
    let extension = extension_file(&python_path)?;
    let output = std::process::Command::new("python3")
        .env("PYTHONPATH", &python_path)
        .arg("-c")
        .arg(GENERATOR)
        .arg(scale_factor.to_string())
        .arg(out)
        .arg(&extension)
        .output()
        .map_err(|e| format!("python3: {e}"))?;
    if !output.status.success() {
        return Err(format!(
            "generating TPC-DS with DuckDB failed: {}",
            String::from_utf8_lossy(&output.stderr)
        ));
    }
    let json = std::fs::read_to_string(out.join("tpcds.json")).map_err(|e| e.to_string())?;
    serde_json::from_str(&json).map_err(|e| format!("tpcds.json: {e}"))
}
