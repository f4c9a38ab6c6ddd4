//! DuckDB as a peer, through its Python package, in one long-lived worker
//! process so that Python start-up is not part of any measurement.
//!
//! Protocol: one JSON request per line on the worker's stdin, one JSON reply
//! per line on its stdout. A request runs SQL `repeat` times and returns the
//! rows of the last run (as text, like the PostgreSQL text format) and the
//! wall time of every run, measured inside the worker.

use serde::Deserialize;
use serde_json::json;

use crate::python::{PythonWorker, package_version};

const WORKER: &str = r#"
import duckdb
con = duckdb.connect()
con.execute("SET enable_progress_bar = false")
threads = sys.argv[1] if len(sys.argv) > 1 else None
if threads:
    con.execute(f"SET threads = {int(threads)}")
def text(v):
    if v is None: return None
    if isinstance(v, bool): return 't' if v else 'f'
    if isinstance(v, float): return repr(v)
    return str(v)
for line in sys.stdin:
    req = json.loads(line)
    head = req.get("head")
    try:
        times = []
        rows = []
        for _ in range(req.get("repeat", 1)):
            t0 = time.perf_counter()
            if head is None:
                cur = con.execute(req["sql"])
                rows = cur.fetchall() if cur.description else []
            else:
                rel = con.sql(req["sql"])
                table = rel.to_arrow_table() if hasattr(rel, "to_arrow_table") else rel.arrow()
            times.append((time.perf_counter() - t0) * 1000.0)
        if head is None:
            out = {"ok": True, "times_ms": times, "rows": [[text(v) for v in r] for r in rows]}
        else:
            first = [[text(v) for v in r.values()] for r in table.slice(0, head).to_pylist()]
            out = {"ok": True, "times_ms": times, "rows": first, "row_count": table.num_rows}
    except Exception as e:
        out = {"ok": False, "error": str(e)}
    reply.write(json.dumps(out) + "\n")
    reply.flush()
"#;

/// The DuckDB version the worker runs, or why DuckDB is unavailable.
pub fn version() -> Result<String, String> {
    package_version("duckdb", "duckdb")
}

/// A running DuckDB worker with one in-memory database.
pub struct DuckDb {
    worker: PythonWorker,
    pub version: String,
}

/// The answer to one request.
#[derive(Debug, Clone, Deserialize)]
pub struct Reply {
    pub times_ms: Vec<f64>,
    pub rows: Vec<Vec<Option<String>>>,
    /// How many rows the result had, when only its head was returned.
    #[serde(default)]
    pub row_count: Option<u64>,
}

impl DuckDb {
    /// Starts the worker; `threads` limits DuckDB's parallelism (None: its default).
    pub fn start(threads: Option<usize>) -> Result<Self, String> {
        let version = version()?;
        let worker = PythonWorker::start(
            "duckdb",
            WORKER,
            &[threads.map(|t| t.to_string()).unwrap_or_default()],
        )?;
        Ok(Self { worker, version })
    }

    /// Runs `sql` `repeat` times; rows of the last run.
    pub fn run(&mut self, sql: &str, repeat: usize) -> Result<Reply, String> {
        let reply = self
            .worker
            .request(&json!({"sql": sql, "repeat": repeat.max(1)}))?;
        serde_json::from_value(reply).map_err(|e| format!("duckdb reply: {e}"))
    }

    /// Runs `sql` `repeat` times, each time fetching the whole result as an Arrow table (no
    /// Python object per value, so a large result costs what materialising it costs); returns
    /// the first `head` rows of the last run and, in `row_count`, how many rows it had.
    pub fn run_columnar(&mut self, sql: &str, repeat: usize, head: usize) -> Result<Reply, String> {
        let reply = self
            .worker
            .request(&json!({"sql": sql, "repeat": repeat.max(1), "head": head}))?;
        serde_json::from_value(reply).map_err(|e| format!("duckdb reply: {e}"))
    }
}

/// Compares two result sets cell by cell: numbers within a relative tolerance,
/// everything else exactly. Rows are compared in order first and, if that
/// fails, sorted (ties in ORDER BY may come out in either order).
pub fn same_rows(
    ours: &[Vec<Option<String>>],
    theirs: &[Vec<Option<String>>],
    relative_tolerance: f64,
) -> Result<(), String> {
    if ours.len() != theirs.len() {
        return Err(format!(
            "row counts differ: {} vs {}",
            ours.len(),
            theirs.len()
        ));
    }
    let in_order = first_difference(ours, theirs, relative_tolerance);
    let Some(difference) = in_order else {
        return Ok(());
    };
    let mut a = ours.to_vec();
    let mut b = theirs.to_vec();
    a.sort();
    b.sort();
    match first_difference(&a, &b, relative_tolerance) {
        None => Ok(()),
        Some(_) => Err(difference),
    }
}

fn first_difference(
    ours: &[Vec<Option<String>>],
    theirs: &[Vec<Option<String>>],
    tolerance: f64,
) -> Option<String> {
    for (index, (a, b)) in ours.iter().zip(theirs).enumerate() {
        if a.len() != b.len() {
            return Some(format!("row {index}: {} vs {} columns", a.len(), b.len()));
        }
        for (column, (x, y)) in a.iter().zip(b).enumerate() {
            if !same_cell(x.as_deref(), y.as_deref(), tolerance) {
                return Some(format!("row {index} column {column}: {x:?} vs {y:?}"));
            }
        }
    }
    None
}

fn same_cell(a: Option<&str>, b: Option<&str>, tolerance: f64) -> bool {
    match (a, b) {
        (None, None) => true,
        (Some(a), Some(b)) if a == b => true,
        (Some(a), Some(b)) => match (a.parse::<f64>(), b.parse::<f64>()) {
            (Ok(x), Ok(y)) => {
                let scale = x.abs().max(y.abs()).max(1.0);
                (x - y).abs() <= tolerance * scale
            }
            _ => a.trim_end() == b.trim_end(),
        },
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rows(values: &[&[&str]]) -> Vec<Vec<Option<String>>> {
        values
            .iter()
            .map(|r| r.iter().map(|v| Some(v.to_string())).collect())
            .collect()
    }

    #[test]
    fn numbers_compare_with_tolerance_and_ties_may_reorder() {
        let a = rows(&[&["x", "1.0000001"], &["y", "2"]]);
        let b = rows(&[&["y", "2.0"], &["x", "1"]]);
        assert!(same_rows(&a, &b, 1e-6).is_ok());
        let c = rows(&[&["x", "1.1"], &["y", "2"]]);
        assert!(same_rows(&a, &c, 1e-6).is_err());
        assert!(same_rows(&a, &rows(&[&["x", "1"]]), 1e-6).is_err());
    }
}
