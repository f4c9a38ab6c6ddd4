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
M64 = (1 << 64) - 1
def points(lo, hi, max_x):
    # The lake suites' points: x and y scattered by multiplicative hashes.
    ids = range(lo, hi)
    return pa.table({"x": pa.array([(((i * 0x9E3779B97F4A7C15) & M64) >> 20) % max_x for i in ids], pa.int64()),
                     "y": pa.array([(((i * 0xC2B2AE3D27D4EB4F) & M64) >> 20) % max_x for i in ids], pa.int64()),
                     "id": pa.array(ids, pa.int64())})
def files_overlapping(t, box, out):
    adds = pa.table(t.get_add_actions(flatten=True)).to_pydict()
    n, hit = len(adds["path"]), 0
    out["bytes"] = sum(adds["size_bytes"])
    for k in range(n):
        if all(adds["min." + c][k] < hi and adds["max." + c][k] >= lo for c, lo, hi in box):
            hit += 1
    return n, hit
def timed(fn):
    t0 = time.perf_counter()
    r = fn()
    return (time.perf_counter() - t0) * 1000.0, r
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
        elif op == "load_points":
            # Generated before the clock starts; one commit per file of
            # file_rows rows (delta-rs sizes files in bytes, not rows).
            chunks = [points(lo, min(lo + req["file_rows"], req["hi"]), req["max_x"])
                      for lo in range(req["lo"], req["hi"], req["file_rows"])]
            def load():
                for chunk in chunks:
                    write_deltalake(uri, chunk, mode="append", storage_options=opts)
            out["ms"], _ = timed(load)
        elif op == "z_order":
            t = DeltaTable(uri, storage_options=opts)
            size = sum(pa.table(t.get_add_actions(flatten=True)).column("size_bytes").to_pylist())
            out["ms"], m = timed(lambda: t.optimize.z_order(req["columns"], target_size=max(1, size // req["files"])))
            out["files_added"] = m.get("numFilesAdded")
        elif op == "compact":
            t = DeltaTable(uri, storage_options=opts)
            out["ms"], m = timed(lambda: t.optimize.compact(target_size=req["target_size"]))
            out["files_removed"], out["files_added"] = m.get("numFilesRemoved"), m.get("numFilesAdded")
        elif op == "vacuum":
            t = DeltaTable(uri, storage_options=opts)
            out["ms"], gone = timed(lambda: t.vacuum(retention_hours=0, dry_run=False, enforce_retention_duration=False))
            out["files_deleted"] = len(gone)
        elif op == "prune":
            t = DeltaTable(uri, storage_options=opts)
            box = req["box"]
            out["files"], out["files_hit"] = files_overlapping(t, box, out)
            filters = [f for c, lo, hi in box for f in ((c, ">=", lo), (c, "<", hi))]
            out["rows"] = t.to_pyarrow_table(filters=filters or None).num_rows
        elif op == "open":
            times = []
            for _ in range(req["repeat"]):
                t0 = time.perf_counter()
                DeltaTable(uri, storage_options=opts).version()
                times.append((time.perf_counter() - t0) * 1000.0)
            out["times_ms"] = times
        elif op == "scan":
            # A fresh open each time, as a new query would; columns and an
            # optional box of [column, lo, hi) ranges as filters.
            filters = [f for c, lo, hi in req["box"] for f in ((c, ">=", lo), (c, "<", hi))]
            times = []
            for _ in range(req["repeat"]):
                t0 = time.perf_counter()
                t = DeltaTable(uri, storage_options=opts).to_pyarrow_table(columns=req["columns"], filters=filters or None)
                times.append((time.perf_counter() - t0) * 1000.0)
            ids = t.column("id").to_pylist()
            out.update(times_ms=times, rows=len(ids), id_sum=sum(ids))
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

    /// Any request of the worker script (see its operations); the reply.
    pub fn request(&mut self, request: serde_json::Value) -> Result<serde_json::Value, String> {
        self.worker.request(&request)
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
