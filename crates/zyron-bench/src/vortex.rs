//! Vortex as a peer, through its Python package `vortex-data`, in one long-lived worker.
//! Timings are taken inside the worker around the Vortex calls only.

use serde_json::{Value, json};

use crate::python::{PythonWorker, package_version};

const WORKER: &str = r#"
import pyarrow.parquet as pq
import vortex as vx, vortex.expr as ve
# One worker thread, as every other reader in these suites (Vortex still uses more: see scan).
vx.set_worker_threads(1)
def timed(fn, repeat, cpu=None):
    times, out = [], None
    for _ in range(repeat):
        t0, c0 = time.perf_counter(), time.process_time()
        out = fn()
        times.append((time.perf_counter() - t0) * 1000.0)
        if cpu is not None:
            cpu.append((time.process_time() - c0) * 1000.0)
    return times, out
for line in sys.stdin:
    req = json.loads(line)
    try:
        op, path, repeat = req["op"], req["vortex"], req.get("repeat", 1)
        out = {"ok": True}
        if op == "write":
            table = pq.read_table(req["parquet"])
            out["times_ms"], _ = timed(lambda: vx.io.write(table, path), 1)
            out["bytes"] = os.path.getsize(path)
        elif op == "open":
            out["times_ms"], _ = timed(lambda: vx.open(path, without_segment_cache=True), repeat)
        elif op == "scan":
            f = vx.open(path, without_segment_cache=True)
            # Batch by batch, each dropped before the next, as the Rust readers are consumed.
            # `set_worker_threads(1)` still leaves Vortex decoding on two threads (the caller's
            # and its runtime's) plus I/O threads, so the process's CPU time is reported too.
            out["cpu_ms"] = []
            out["times_ms"], out["rows"] = timed(lambda: sum(b.num_rows for b in f.to_arrow()), repeat, out["cpu_ms"])
        elif op == "filter":
            f = vx.open(path, without_segment_cache=True)
            c = ve.column(req["column"])
            expr = (c >= req["lo"]) & (c < req["hi"])
            out["times_ms"], t = timed(lambda: f.scan(projection=req["columns"], expr=expr).read_all().to_arrow_table(), repeat)
            out["rows"] = t.num_rows
        elif op == "take":
            f = vx.open(path, without_segment_cache=True)
            times = []
            for i in req["indices"]:
                idx = vx.array(pa.array([i], pa.uint64()))
                t0 = time.perf_counter()
                t = f.scan(indices=idx).read_all().to_arrow_table()
                times.append((time.perf_counter() - t0) * 1000.0)
                assert t.num_rows == 1
            out["times_ms"] = times
        else:
            raise ValueError("unknown op " + op)
    except Exception as e:
        out = {"ok": False, "error": repr(e)}
    reply.write(json.dumps(out) + "\n")
    reply.flush()
"#;

/// A running Vortex worker.
pub struct Vortex {
    worker: PythonWorker,
    pub version: String,
}

impl Vortex {
    pub fn start() -> Result<Self, String> {
        let version = package_version("vortex", "vortex-data")?;
        package_version("pyarrow", "pyarrow")?;
        let worker =
            PythonWorker::start("vortex", &format!("import pyarrow as pa\n{WORKER}"), &[])?;
        Ok(Self { worker, version })
    }

    /// Sends a request (see the worker script for the operations); the reply as JSON.
    pub fn request(&mut self, request: Value) -> Result<Value, String> {
        self.worker.request(&request)
    }

    /// Writes the Parquet file at `parquet` as Vortex at `vortex`; (milliseconds, bytes).
    pub fn write(&mut self, parquet: &str, vortex: &str) -> Result<(f64, u64), String> {
        let r = self.request(json!({"op": "write", "parquet": parquet, "vortex": vortex}))?;
        Ok((
            r["times_ms"][0].as_f64().unwrap_or(f64::NAN),
            r["bytes"].as_u64().unwrap_or(0),
        ))
    }
}

/// The `times_ms` array of a reply.
pub fn times_ms(reply: &Value) -> Vec<f64> {
    milliseconds(reply, "times_ms")
}

/// The process CPU time of each repetition of a `scan` reply, in milliseconds: all of
/// Vortex's threads together, where [`times_ms`] is the caller's wait.
pub fn cpu_ms(reply: &Value) -> Vec<f64> {
    milliseconds(reply, "cpu_ms")
}

fn milliseconds(reply: &Value, key: &str) -> Vec<f64> {
    reply[key]
        .as_array()
        .map(|a| a.iter().filter_map(Value::as_f64).collect())
        .unwrap_or_default()
}
