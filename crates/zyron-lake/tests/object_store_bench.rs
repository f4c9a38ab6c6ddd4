//! Suite `object_store`: reading a lake table through `object_store`, on the
//! local disk and on S3 (SeaweedFS), against delta-rs (Python `deltalake`)
//! reading the same rows from the same storage in the same run: opening the
//! latest version (a history of about 100 commits), a full scan of one
//! column, and a selective box query (1% of x by 1% of y) after both tables
//! were clustered (Zyron: Z-order on x, y; delta-rs: OPTIMIZE ZORDER BY).
//! Every read's row count and sum of ids are checked against the generator
//! on both sides; each side's timing includes opening the table, as a new
//! query's would. Per storage, Zyron's reads run, then delta-rs's (each
//! side's table must be built and clustered first, which takes longer than
//! the reads; the reads themselves are repeated and their spread reported).
//!
//! `ZYRON_BENCH_SCALE=full cargo test --release --workspace --test object_store_bench -- --nocapture`

mod common;

use std::time::Instant;

use arrow::array::{AsArray, RecordBatch};
use arrow::datatypes::Int64Type;
use object_store::path::Path;
use serde_json::json;
use zyron_bench::deltalake::DeltaWriter;
use zyron_bench::{Metric, Samples, SuiteRun};
use zyron_lake::{ClusterKey, ClusterSpec, Curve, LakeTable, TableMetadata};

use common::{MAX_XY, Storage, points, range_filters};

/// `lo <= x < hi` and `lo <= y < hi`: 1% of each.
const BOX: [(&str, i64, i64); 2] = [("x", 500_000, 510_000), ("y", 300_000, 310_000)];

/// (rows, sum of ids) of the generated rows a query selects.
fn expected(data: &RecordBatch, filter: &[(&str, i64, i64)]) -> (u64, i64) {
    let column = |i: usize| data.column(i).as_primitive::<Int64Type>().values().to_vec();
    let (x, y, id) = (column(0), column(1), column(2));
    let inside = |r: usize| {
        filter.iter().all(|(c, lo, hi)| {
            let v = if *c == "x" { x[r] } else { y[r] };
            (*lo..*hi).contains(&v)
        })
    };
    (0..data.num_rows())
        .filter(|&r| inside(r))
        .fold((0, 0), |(n, s), r| (n + 1, s + id[r]))
}

/// (rows, sum of ids) of scanned batches, exact filter applied.
fn answer(batches: &[RecordBatch], filter: &[(&str, i64, i64)]) -> (u64, i64) {
    if batches.is_empty() {
        return (0, 0);
    }
    let all = arrow::compute::concat_batches(&batches[0].schema(), batches).unwrap();
    expected(&all, filter)
}

/// One system's samples on one storage.
#[derive(Default)]
struct Reads {
    open: Samples,
    full_scan_rows_per_s: Samples,
    box_query: Samples,
}

#[test]
fn object_store_suite() {
    let mut run = SuiteRun::new("object_store");
    let scale = run.scale();
    let rows = scale.pick(100_000i64, 2_000_000);
    let files = scale.pick(10usize, 100);
    let repeat = scale.pick(2usize, 5);
    let data = points(0..rows);
    let want_full = expected(&data, &[]);
    let want_box = expected(&data, &BOX);
    let common::SuiteSetup {
        runtime,
        delta_version,
        storages,
        ..
    } = common::suite_setup(&mut run);
    let system = delta_version
        .as_ref()
        .map(|v| format!("delta-rs {v} (python deltalake)"))
        .unwrap_or_default();
    for storage in &storages {
        let ours = runtime.block_on(zyron_reads(
            storage, &data, files, repeat, want_full, want_box,
        ));
        let peer = match &delta_version {
            Ok(_) => match delta_reads(storage, rows, files, repeat, want_full, want_box) {
                Ok(peer) => Some(peer),
                Err(reason) => {
                    run.skip(format!("delta-rs on {}: {reason}", storage.name));
                    None
                }
            },
            Err(_) => None,
        };
        let params = |m: Metric| {
            m.param("rows", rows as u64)
                .param("files", files as u64)
                .param("storage", storage.name)
        };
        type Pick = fn(&Reads) -> &Samples;
        let figures: [(&str, bool, Pick); 3] = [
            ("open_latest_ms", false, |r| &r.open),
            ("full_scan_rows_per_s", true, |r| &r.full_scan_rows_per_s),
            ("box_query_ms", false, |r| &r.box_query),
        ];
        for (name, is_rate, pick) in figures {
            let name = format!("{name}_{}", storage.name);
            let measure = |reads: &Reads| match is_rate {
                true => Metric::throughput(&name, "rows/s", pick(reads)),
                false => Metric::latency_ms(&name, pick(reads)),
            };
            let mut metric = params(measure(&ours));
            if let Some(peer) = &peer {
                metric = metric.with_peer(&system, measure(peer).value);
            }
            run.push(metric);
        }
    }
    let path = run.finish().unwrap();
    println!("object_store suite: {}", path.display());
}

async fn zyron_reads(
    storage: &Storage,
    data: &RecordBatch,
    files: usize,
    repeat: usize,
    want_full: (u64, i64),
    want_box: (u64, i64),
) -> Reads {
    let metadata = TableMetadata {
        schema: json!({"columns": ["x", "y", "id"]}),
        checkpoint_interval: 100,
        properties: Default::default(),
    };
    let root = Path::from("zyron/object_store");
    let lake = LakeTable::create(storage.zyron.clone(), root.clone(), metadata)
        .await
        .unwrap();
    let file_rows = data.num_rows() / files;
    for offset in (0..data.num_rows()).step_by(file_rows) {
        let mut write = lake.begin().await.unwrap();
        let len = file_rows.min(data.num_rows() - offset);
        write.append(&[data.slice(offset, len)]).await.unwrap();
        write.commit("load").await.unwrap();
    }
    let spec = ClusterSpec {
        curve: Curve::ZOrder,
        keys: vec![
            ClusterKey::Column("x".into()),
            ClusterKey::Column("y".into()),
        ],
        target_file_rows: file_rows,
    };
    lake.cluster(&spec).await.unwrap();
    let filters = range_filters(&BOX);
    let mut reads = Reads::default();
    for _ in 0..repeat {
        // Each read opens the table afresh, from its own handle.
        let started = Instant::now();
        let handle = LakeTable::new(storage.zyron.clone(), root.clone());
        handle.latest().await.unwrap();
        reads.open.record_duration(started.elapsed());

        let started = Instant::now();
        let snapshot = handle.latest().await.unwrap();
        let (batches, _) = handle.scan(&snapshot, None, &[]).await.unwrap();
        let elapsed = started.elapsed().as_secs_f64();
        assert_eq!(answer(&batches, &[]), want_full);
        reads
            .full_scan_rows_per_s
            .record_value(want_full.0 as f64 / elapsed);

        let started = Instant::now();
        let snapshot = handle.latest().await.unwrap();
        let (batches, _) = handle.scan(&snapshot, None, &filters).await.unwrap();
        let got = answer(&batches, &BOX);
        reads.box_query.record_duration(started.elapsed());
        assert_eq!(got, want_box);
    }
    reads
}

fn delta_reads(
    storage: &Storage,
    rows: i64,
    files: usize,
    repeat: usize,
    want_full: (u64, i64),
    want_box: (u64, i64),
) -> Result<Reads, String> {
    let mut delta = DeltaWriter::start()?;
    let uri = format!("{}/object_store", storage.delta_base);
    let options = &storage.delta_options;
    delta.request(
        json!({"op": "load_points", "uri": uri, "storage_options": options,
        "lo": 0, "hi": rows, "file_rows": rows as usize / files, "max_x": MAX_XY}),
    )?;
    delta.request(
        json!({"op": "z_order", "uri": uri, "storage_options": options,
        "columns": ["x", "y"], "files": files}),
    )?;
    let times = |reply: &serde_json::Value| zyron_bench::vortex::times_ms(reply);
    let mut reads = Reads::default();
    let open = delta
        .request(json!({"op": "open", "uri": uri, "storage_options": options, "repeat": repeat}))?;
    for ms in times(&open) {
        reads
            .open
            .record_duration(std::time::Duration::from_secs_f64(ms / 1000.0));
    }
    let full = delta.request(json!({"op": "scan", "uri": uri, "storage_options": options,
        "repeat": repeat, "columns": ["x", "y", "id"], "box": []}))?;
    assert_eq!(
        (full["rows"].as_u64(), full["id_sum"].as_i64()),
        (Some(want_full.0), Some(want_full.1))
    );
    for ms in times(&full) {
        reads
            .full_scan_rows_per_s
            .record_value(want_full.0 as f64 / (ms / 1000.0));
    }
    let boxed = delta.request(json!({"op": "scan", "uri": uri, "storage_options": options,
        "repeat": repeat, "columns": ["x", "y", "id"], "box": BOX}))?;
    assert_eq!(
        (boxed["rows"].as_u64(), boxed["id_sum"].as_i64()),
        (Some(want_box.0), Some(want_box.1))
    );
    for ms in times(&boxed) {
        reads
            .box_query
            .record_duration(std::time::Duration::from_secs_f64(ms / 1000.0));
    }
    Ok(reads)
}
