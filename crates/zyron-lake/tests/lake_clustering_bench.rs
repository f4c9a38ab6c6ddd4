//! Suite `lake_clustering`: loading rows with clustering (Z-order and
//! Hilbert on two columns, and a derived key) against a plain load, and the
//! fraction of files a selective query skips by the zone maps in the log:
//! a 1% range of `x` (a slab) and a 1% x 1% box of `x` and `y`. delta-rs
//! (Python `deltalake`) loads the same rows into files of the same row
//! count, then runs its `OPTIMIZE ZORDER BY (x, y)` into as many files; its
//! pruning is counted from the min/max statistics in its log. Every query's
//! row count is checked against the generator on both sides.
//!
//! `ZYRON_BENCH_SCALE=full cargo test --release --workspace --test lake_clustering_bench -- --nocapture`

mod common;

use std::sync::Arc;
use std::time::Instant;

use arrow::array::{ArrayRef, AsArray, Int64Array, RecordBatch};
use arrow::compute::kernels::numeric::div;
use arrow::datatypes::Int64Type;
use object_store::path::Path;
use serde_json::json;
use zyron_bench::deltalake::DeltaWriter;
use zyron_bench::{Metric, Samples, SuiteRun};
use zyron_lake::{ClusterKey, ClusterSpec, Curve, LakeTable, TableMetadata};

use common::{MAX_XY, Storage, points, range_filters};

/// A range query: `lo <= column < hi` for each entry.
type Query = &'static [(&'static str, i64, i64)];

const QUERIES: [(&str, Query); 2] = [
    ("slab", &[("x", 500_000, 510_000)]),
    ("box", &[("x", 500_000, 510_000), ("y", 300_000, 310_000)]),
];

#[derive(Debug, Clone, Copy, PartialEq)]
enum Layout {
    Plain,
    ZOrder,
    Hilbert,
    /// Hilbert on one derived key, `x / 1000`.
    DerivedX,
}

impl Layout {
    fn name(self) -> &'static str {
        match self {
            Layout::Plain => "plain",
            Layout::ZOrder => "zorder",
            Layout::Hilbert => "hilbert",
            Layout::DerivedX => "derived_x_div_1000",
        }
    }

    fn spec(self, target_file_rows: usize) -> Option<ClusterSpec> {
        let both = || {
            vec![
                ClusterKey::Column("x".into()),
                ClusterKey::Column("y".into()),
            ]
        };
        let (curve, keys) = match self {
            Layout::Plain => return None,
            Layout::ZOrder => (Curve::ZOrder, both()),
            Layout::Hilbert => (Curve::Hilbert, both()),
            Layout::DerivedX => (
                Curve::Hilbert,
                vec![ClusterKey::Derived {
                    name: "x / 1000".into(),
                    eval: Arc::new(|b: &RecordBatch| -> zyron_common::Result<ArrayRef> {
                        div(b.column(0), &Int64Array::new_scalar(1_000))
                            .map_err(|e| zyron_common::ZyronError::internal(e.to_string()))
                    }),
                }],
            ),
        };
        Some(ClusterSpec {
            curve,
            keys,
            target_file_rows,
        })
    }
}

/// Rows of the generated table that `query` selects.
fn expected_rows(data: &RecordBatch, query: Query) -> u64 {
    let column = |name: &str| {
        let i = data.schema().index_of(name).unwrap();
        data.column(i).as_primitive::<Int64Type>().values().to_vec()
    };
    let columns: Vec<(Vec<i64>, i64, i64)> = query
        .iter()
        .map(|(c, lo, hi)| (column(c), *lo, *hi))
        .collect();
    (0..data.num_rows())
        .filter(|&r| columns.iter().all(|(v, lo, hi)| (*lo..*hi).contains(&v[r])))
        .count() as u64
}

#[test]
fn lake_clustering_suite() {
    let mut run = SuiteRun::new("lake_clustering");
    let scale = run.scale();
    let rows = scale.pick(100_000i64, 2_000_000);
    let file_rows = scale.pick(5_000usize, 20_000);
    let rounds = scale.pick(1, 3);
    let data = points(0..rows);
    let expected: Vec<u64> = QUERIES
        .iter()
        .map(|(_, q)| expected_rows(&data, q))
        .collect();
    let common::SuiteSetup {
        runtime,
        delta_version,
        storages,
        ..
    } = common::suite_setup(&mut run);
    let system = delta_version
        .as_ref()
        .map(|v| format!("delta-rs {v} (python deltalake), OPTIMIZE ZORDER BY (x, y)"))
        .unwrap_or_default();
    let files = rows as usize / file_rows;
    for storage in &storages {
        let peer = match &delta_version {
            Ok(_) => match delta_side(storage, rows, file_rows, files, rounds, &expected) {
                Ok(peer) => Some(peer),
                Err(reason) => {
                    run.skip(format!("delta-rs on {}: {reason}", storage.name));
                    None
                }
            },
            Err(_) => None,
        };
        for layout in [
            Layout::Plain,
            Layout::ZOrder,
            Layout::Hilbert,
            Layout::DerivedX,
        ] {
            let mut load = Samples::for_values();
            let mut pruned = vec![0.0; QUERIES.len()];
            for round in 0..rounds {
                let table = format!("zyron/clustering/{}_r{round}", layout.name());
                let (rate, fractions) = runtime.block_on(zyron_side(
                    storage, &table, &data, layout, file_rows, &expected,
                ));
                load.record_value(rate);
                pruned = fractions;
            }
            let params = |m: Metric| {
                m.param("rows", rows as u64)
                    .param("file_rows", file_rows as u64)
                    .param("layout", layout.name())
                    .param("storage", storage.name)
            };
            let mut metric = params(Metric::throughput(
                &format!("load_rows_per_s_{}_{}", layout.name(), storage.name),
                "rows/s",
                &load,
            ));
            if let Some(peer) = &peer {
                let (what, value) = match layout {
                    Layout::Plain => ("delta-rs plain load", peer.plain_rows_per_s),
                    _ => (
                        "delta-rs load, then OPTIMIZE ZORDER",
                        peer.zorder_rows_per_s,
                    ),
                };
                let system = format!("{system}: {what}");
                metric = metric.with_peer(&system, value);
            }
            run.push(metric);
            for (q, (query, _)) in QUERIES.iter().enumerate() {
                let mut metric = params(Metric::single(
                    &format!(
                        "files_pruned_pct_{query}_{}_{}",
                        layout.name(),
                        storage.name
                    ),
                    "%",
                    true,
                    pruned[q] * 100.0,
                ))
                .param("query", *query);
                let peer_value = peer.as_ref().map(|peer| match layout {
                    Layout::Plain => peer.plain_pruned[q],
                    _ => peer.zorder_pruned[q],
                });
                match peer_value {
                    // Neither skips a file: a ratio would mean nothing.
                    Some(value) if value > 0.0 => {
                        metric = metric.with_peer(&system, value * 100.0);
                    }
                    Some(_) => metric = metric.param("peer_files_pruned_pct", 0.0),
                    None => {}
                }
                run.push(metric);
            }
        }
    }
    let path = run.finish().unwrap();
    println!("lake_clustering suite: {}", path.display());
}

/// Loads `data` with `layout` into a new table; (rows/s, fraction of files
/// each query skips), every query's answer checked.
async fn zyron_side(
    storage: &Storage,
    table: &str,
    data: &RecordBatch,
    layout: Layout,
    file_rows: usize,
    expected: &[u64],
) -> (f64, Vec<f64>) {
    let metadata = TableMetadata {
        schema: json!({"columns": ["x", "y", "id"]}),
        checkpoint_interval: 100,
        properties: Default::default(),
    };
    let lake = LakeTable::create(storage.zyron.clone(), Path::from(table), metadata)
        .await
        .unwrap();
    let started = Instant::now();
    let mut write = lake.begin().await.unwrap();
    match layout.spec(file_rows) {
        Some(spec) => write
            .append_clustered(&[data.clone()], &spec)
            .await
            .unwrap(),
        None => {
            for offset in (0..data.num_rows()).step_by(file_rows) {
                let len = file_rows.min(data.num_rows() - offset);
                write.append(&[data.slice(offset, len)]).await.unwrap();
            }
        }
    }
    let snapshot = write.commit("load").await.unwrap().snapshot;
    let rate = data.num_rows() as f64 / started.elapsed().as_secs_f64();
    let mut fractions = Vec::new();
    for ((name, query), want) in QUERIES.iter().zip(expected) {
        let (batches, report) = lake
            .scan(&snapshot, None, &range_filters(query))
            .await
            .unwrap();
        let scanned = arrow::compute::concat_batches(&data.schema(), &batches).unwrap();
        assert_eq!(expected_rows(&scanned, query), *want, "{layout:?} {name}");
        fractions.push(report.files_pruned as f64 / report.files as f64);
    }
    (rate, fractions)
}

/// delta-rs's figures on one storage.
struct DeltaSide {
    plain_rows_per_s: f64,
    zorder_rows_per_s: f64,
    plain_pruned: Vec<f64>,
    zorder_pruned: Vec<f64>,
}

fn delta_side(
    storage: &Storage,
    rows: i64,
    file_rows: usize,
    files: usize,
    rounds: usize,
    expected: &[u64],
) -> Result<DeltaSide, String> {
    let mut delta = DeltaWriter::start()?;
    let options = &storage.delta_options;
    let (mut plain, mut zorder) = (Samples::for_values(), Samples::for_values());
    let (mut plain_pruned, mut zorder_pruned) = (vec![], vec![]);
    for round in 0..rounds {
        let uri = format!("{}/clustering_r{round}", storage.delta_base);
        let load = delta.request(
            json!({"op": "load_points", "uri": uri, "storage_options": options,
            "lo": 0, "hi": rows, "file_rows": file_rows, "max_x": MAX_XY}),
        )?;
        let load_ms = load["ms"].as_f64().unwrap_or(f64::NAN);
        plain_pruned = delta_pruning(&mut delta, &uri, options, expected)?;
        let z = delta.request(
            json!({"op": "z_order", "uri": uri, "storage_options": options,
            "columns": ["x", "y"], "files": files}),
        )?;
        let z_ms = z["ms"].as_f64().unwrap_or(f64::NAN);
        zorder_pruned = delta_pruning(&mut delta, &uri, options, expected)?;
        plain.record_value(rows as f64 / (load_ms / 1000.0));
        zorder.record_value(rows as f64 / ((load_ms + z_ms) / 1000.0));
    }
    Ok(DeltaSide {
        plain_rows_per_s: Metric::throughput("p", "rows/s", &plain).value,
        zorder_rows_per_s: Metric::throughput("z", "rows/s", &zorder).value,
        plain_pruned,
        zorder_pruned,
    })
}

/// The fraction of delta-rs's files each query skips, answers checked.
fn delta_pruning(
    delta: &mut DeltaWriter,
    uri: &str,
    options: &std::collections::BTreeMap<String, String>,
    expected: &[u64],
) -> Result<Vec<f64>, String> {
    let mut fractions = Vec::new();
    for ((name, query), want) in QUERIES.iter().zip(expected) {
        let reply = delta.request(
            json!({"op": "prune", "uri": uri, "storage_options": options,
            "box": query}),
        )?;
        let (files, hit) = (
            reply["files"].as_f64().unwrap_or(0.0),
            reply["files_hit"].as_f64().unwrap_or(0.0),
        );
        assert_eq!(reply["rows"].as_u64(), Some(*want), "delta-rs {name}");
        fractions.push((files - hit) / files);
    }
    Ok(fractions)
}
