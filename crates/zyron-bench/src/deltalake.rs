//! delta-rs as a peer, through its Python package `deltalake`: one worker
//! process per writer, so concurrent writers are separate processes as they
//! would be in production. Timings are taken inside the worker around the
//! delta-rs calls only. Tables have the lake suites' row shape:
//! `id BIGINT, price DOUBLE, name TEXT` with price = id / 2 and name = "n<id>".

use std::collections::BTreeMap;

use serde_json::json;

use crate::python::{PythonWorker, package_version};

const WORKER: &str = r#"
import pyarrow as pa
from deltalake import DeltaTable, write_deltalake
def rows(ids):
    return pa.table({"id": pa.array(ids, pa.int64()),
                     "price": pa.array([i / 2 for i in ids], pa.float64()),
                     "name": pa.array(["n%d" % i for i in ids], pa.string())})
for line in sys.stdin:
    req = json.loads(line)
    try:
        op, uri, opts = req["op"], req["uri"], req.get("storage_options") or None
        out = {"ok": True}
        if op == "create":
            for lo, hi in req["files"]:
                write_deltalake(uri, rows(list(range(lo, hi))), mode="append", storage_options=opts)
        elif op in ("append", "delete"):
            times, errors, first_error = [], 0, None
            dt = DeltaTable(uri, storage_options=opts) if op == "delete" else None
            for i in req["ids"]:
                t0 = time.perf_counter()
                try:
                    if op == "append":
                        write_deltalake(uri, rows([i]), mode="append", storage_options=opts)
                    else:
                        dt.delete("id = %d" % i)
                    times.append((time.perf_counter() - t0) * 1000.0)
                except Exception as e:
                    errors += 1
                    first_error = first_error or repr(e)[:300]
                    if dt is not None:
                        dt = DeltaTable(uri, storage_options=opts)
            out.update(times_ms=times, errors=errors, first_error=first_error)
        elif op == "count":
            t = DeltaTable(uri, storage_options=opts)
            ids = t.to_pyarrow_table(columns=["id"]).column("id").to_pylist()
            out.update(rows=len(ids), id_sum=sum(ids), version=t.version())
        else:
            raise ValueError("unknown op " + op)
    except Exception as e:
        out = {"ok": False, "error": repr(e)[:1000]}
    reply.write(json.dumps(out) + "\n")
    reply.flush()
"#;

/// One delta-rs writer process.
pub struct DeltaWriter {
    worker: PythonWorker,
}

/// What a run of commits did.
#[derive(Debug, Clone, Default)]
pub struct DeltaCommits {
    /// Milliseconds per successful commit.
    pub times_ms: Vec<f64>,
    /// Commits that raised (a conflict delta-rs could not resolve, say).
    pub errors: u64,
    pub first_error: Option<String>,
}

/// The version of `deltalake`, or why it cannot run.
pub fn version() -> Result<String, String> {
    package_version("pyarrow", "pyarrow")?;
    package_version("deltalake", "deltalake")
}

impl DeltaWriter {
    pub fn start() -> Result<Self, String> {
        let worker = PythonWorker::start("deltalake", WORKER, &[])?;
        Ok(Self { worker })
    }

    /// Creates the table at `uri` with one file per id range.
    pub fn create(
        &mut self,
        uri: &str,
        options: &BTreeMap<String, String>,
        files: &[(i64, i64)],
    ) -> Result<(), String> {
        let request =
            json!({"op": "create", "uri": uri, "storage_options": options, "files": files});
        self.worker.request(&request).map(drop)
    }

    /// One single-row append commit per id.
    pub fn append(
        &mut self,
        uri: &str,
        options: &BTreeMap<String, String>,
        ids: &[i64],
    ) -> Result<DeltaCommits, String> {
        self.commits("append", uri, options, ids)
    }

    /// One `DELETE WHERE id = <id>` commit per id.
    pub fn delete(
        &mut self,
        uri: &str,
        options: &BTreeMap<String, String>,
        ids: &[i64],
    ) -> Result<DeltaCommits, String> {
        self.commits("delete", uri, options, ids)
    }

    /// Rows in the latest version and the sum of their ids.
    pub fn count(
        &mut self,
        uri: &str,
        options: &BTreeMap<String, String>,
    ) -> Result<(u64, i64), String> {
        let request = json!({"op": "count", "uri": uri, "storage_options": options});
        let reply = self.worker.request(&request)?;
        Ok((
            reply["rows"].as_u64().unwrap_or(0),
            reply["id_sum"].as_i64().unwrap_or(0),
        ))
    }

    fn commits(
        &mut self,
        op: &str,
        uri: &str,
        options: &BTreeMap<String, String>,
        ids: &[i64],
    ) -> Result<DeltaCommits, String> {
        let request = json!({"op": op, "uri": uri, "storage_options": options, "ids": ids});
        let reply = self.worker.request(&request)?;
        Ok(DeltaCommits {
            times_ms: crate::vortex::times_ms(&reply),
            errors: reply["errors"].as_u64().unwrap_or(0),
            first_error: reply["first_error"].as_str().map(str::to_owned),
        })
    }
}

/// The `storage_options` delta-rs needs for an S3-compatible server at
/// `endpoint` (plain HTTP), with conditional puts for its log instead of a
/// locking service.
pub fn s3_options(endpoint: &str, key: &str, secret: &str) -> BTreeMap<String, String> {
    [
        ("AWS_ENDPOINT_URL", endpoint),
        ("AWS_ALLOW_HTTP", "true"),
        ("AWS_REGION", "us-east-1"),
        ("AWS_ACCESS_KEY_ID", key),
        ("AWS_SECRET_ACCESS_KEY", secret),
        ("conditional_put", "etag"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .collect()
}
