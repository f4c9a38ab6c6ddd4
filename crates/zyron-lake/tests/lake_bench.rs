//! Suite `lake`: commit rate and latency of single-row INSERT commits and of
//! predicate DELETE commits (`DELETE WHERE id = k`), with 1 and with 8
//! concurrent writers, on the local disk and on S3 (a SeaweedFS server),
//! against delta-rs (Python `deltalake`) doing the same commits on the same
//! storage in the same run, interleaved. Every run checks the answer on both
//! sides (rows and the sum of ids) and counts lost commits: a commit that
//! reported success but whose row is missing (or, for a delete, present).
//!
//! Each Zyron writer keeps its table handle and snapshot between commits, as
//! a server session does; each delta-rs writer is its own Python process.
//! Zyron fsyncs every data file and log entry on local disk; delta-rs's local
//! store does not fsync (recorded in the metrics' params).
//!
//! `ZYRON_BENCH_SCALE=full cargo test --release --workspace --test lake_bench -- --nocapture`

mod common;

use common::Storage;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use arrow::array::{AsArray, Float64Array, Int64Array, RecordBatch, StringArray};
use arrow::compute::kernels::cmp::eq;
use arrow::datatypes::{DataType, Field, Int64Type, Schema, SchemaRef};
use object_store::path::Path;
use zyron_bench::deltalake::{DeltaCommits, DeltaWriter};
use zyron_bench::{Metric, Samples, SuiteRun};
use zyron_format::{CmpOp, PredicateOp, Scalar};
use zyron_lake::{FileFilter, LakeTable, Snapshot, TableMetadata};

const CONCURRENT_WRITERS: usize = 8;
/// Ids below this start the delete tables; appended ids start above.
const APPEND_ID_BASE: i64 = 1 << 40;

/// One workload's shape.
#[derive(Clone, Copy)]
struct Workload {
    kind: Kind,
    writers: usize,
    commits_per_writer: usize,
}

#[derive(Clone, Copy, PartialEq)]
enum Kind {
    Insert,
    Delete,
}

/// What one run of a workload on one system measured.
#[derive(Default)]
struct Outcome {
    latency: Samples,
    commits_per_s: f64,
    committed: u64,
    failed: u64,
    lost: u64,
}

#[test]
fn lake_suite() {
    let mut run = SuiteRun::new("lake");
    let scale = run.scale();
    let rounds = scale.pick(1, 3);
    let delete_files = scale.pick(4, 10);
    let delete_file_rows = scale.pick(2_000, 10_000);
    let workloads = [
        (Kind::Insert, 1, scale.pick(20, 300)),
        (Kind::Insert, CONCURRENT_WRITERS, scale.pick(4, 50)),
        (Kind::Delete, 1, scale.pick(10, 100)),
        (Kind::Delete, CONCURRENT_WRITERS, scale.pick(3, 20)),
    ]
    .map(|(kind, writers, commits_per_writer)| Workload {
        kind,
        writers,
        commits_per_writer,
    });
    let common::SuiteSetup {
        runtime,
        delta_version,
        storages,
        ..
    } = common::suite_setup(&mut run);

    for storage in &storages {
        for workload in workloads {
            let shape = DeleteTable {
                files: delete_files,
                rows_per_file: delete_file_rows,
            };
            let mut ours = Vec::new();
            let mut peer = Vec::new();
            for round in 0..rounds {
                let table = format!("{}_{}w_r{round}", workload.kind.name(), workload.writers);
                ours.push(runtime.block_on(zyron_run(storage, &table, workload, shape)));
                if delta_version.is_ok() {
                    match delta_run(storage, &table, workload, shape) {
                        Ok(outcome) => peer.push(outcome),
                        Err(reason) => {
                            run.skip(format!("delta-rs on {}: {reason}", storage.name));
                            break;
                        }
                    }
                }
            }
            let system = delta_version
                .as_ref()
                .map(|v| format!("delta-rs {v} (python deltalake)"))
                .unwrap_or_default();
            for metric in metrics(storage, workload, &ours, &peer, &system) {
                run.push(metric);
            }
        }
    }
    let path = run.finish().unwrap();
    println!("lake suite: {}", path.display());
}

#[derive(Clone, Copy)]
struct DeleteTable {
    files: usize,
    rows_per_file: usize,
}

impl DeleteTable {
    fn rows(&self) -> i64 {
        (self.files * self.rows_per_file) as i64
    }

    fn file_ranges(&self) -> Vec<(i64, i64)> {
        let n = self.rows_per_file as i64;
        (0..self.files as i64)
            .map(|f| (f * n, (f + 1) * n))
            .collect()
    }
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Insert => "insert",
            Kind::Delete => "delete",
        }
    }
}

/// The ids writer `w` of `workload` commits, one per commit: appended ids
/// are fresh; deleted ids are spread over every file of the delete table.
fn ids_of(workload: Workload, shape: DeleteTable, writer: usize) -> Vec<i64> {
    let total = (workload.writers * workload.commits_per_writer) as i64;
    (0..workload.commits_per_writer)
        .map(|k| (k * workload.writers + writer) as i64)
        .map(|k| match workload.kind {
            Kind::Insert => APPEND_ID_BASE + k,
            Kind::Delete => k * (shape.rows() / total),
        })
        .collect()
}

/// What the table must hold afterwards if `committed` ids committed: (rows, id sum).
fn expected(workload: Workload, shape: DeleteTable, committed: &[i64]) -> (u64, i64) {
    let sum: i64 = committed.iter().sum();
    match workload.kind {
        // Insert tables start with the single row id -1.
        Kind::Insert => (committed.len() as u64 + 1, sum - 1),
        Kind::Delete => {
            let all = shape.rows();
            (
                (all as u64) - committed.len() as u64,
                all * (all - 1) / 2 - sum,
            )
        }
    }
}

fn schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("price", DataType::Float64, false),
        Field::new("name", DataType::Utf8, false),
    ]))
}

/// The rows delta-rs's worker writes too: price = id / 2, name = "n<id>".
fn rows(ids: impl Iterator<Item = i64> + Clone) -> RecordBatch {
    RecordBatch::try_new(
        schema(),
        vec![
            Arc::new(Int64Array::from_iter_values(ids.clone())),
            Arc::new(Float64Array::from_iter_values(
                ids.clone().map(|i| i as f64 / 2.0),
            )),
            Arc::new(StringArray::from_iter_values(ids.map(|i| format!("n{i}")))),
        ],
    )
    .unwrap()
}

async fn zyron_run(
    storage: &Storage,
    table: &str,
    workload: Workload,
    shape: DeleteTable,
) -> Outcome {
    let root = Path::from(format!("zyron/{table}"));
    let metadata = TableMetadata {
        schema: serde_json::json!({"columns": ["id", "price", "name"]}),
        checkpoint_interval: 100,
        properties: BTreeMap::new(),
    };
    let lake = LakeTable::create(storage.zyron.clone(), root.clone(), metadata)
        .await
        .unwrap();
    let initial: Vec<(i64, i64)> = match workload.kind {
        Kind::Insert => vec![(-1, 0)],
        Kind::Delete => shape.file_ranges(),
    };
    for (lo, hi) in initial {
        let mut write = lake.begin().await.unwrap();
        write.append(&[rows(lo..hi)]).await.unwrap();
        write.commit("append").await.unwrap();
    }
    let started = Instant::now();
    let mut tasks = Vec::new();
    for writer in 0..workload.writers {
        // Its own handle, as a separate session or process would have.
        let lake = LakeTable::new(storage.zyron.clone(), root.clone());
        let ids = ids_of(workload, shape, writer);
        tasks.push(tokio::spawn(async move {
            zyron_writer(lake, workload.kind, ids).await
        }));
    }
    let mut outcome = Outcome::default();
    let mut committed_ids = Vec::new();
    for task in tasks {
        let (latency, ids, failed) = task.await.unwrap();
        outcome.latency.merge(&latency);
        committed_ids.extend(ids);
        outcome.failed += failed;
    }
    let elapsed = started.elapsed().as_secs_f64();
    outcome.committed = committed_ids.len() as u64;
    outcome.commits_per_s = outcome.committed as f64 / elapsed;
    let lake = LakeTable::new(storage.zyron.clone(), root);
    let (rows, id_sum) = zyron_contents(&lake, &lake.latest().await.unwrap()).await;
    outcome.lost = lost(workload, shape, &committed_ids, rows, id_sum);
    outcome
}

/// One writer's commits: (latency per commit, ids committed, failures).
async fn zyron_writer(lake: LakeTable, kind: Kind, ids: Vec<i64>) -> (Samples, Vec<i64>, u64) {
    let mut latency = Samples::new();
    let mut committed = Vec::new();
    let mut failed = 0;
    let mut snapshot = lake.latest().await.unwrap();
    for id in ids {
        let started = Instant::now();
        let mut write = lake.begin_at(snapshot.clone());
        let prepared = match kind {
            Kind::Insert => write.append(&[rows(id..id + 1)]).await.map(drop),
            Kind::Delete => {
                let filter =
                    FileFilter::new("id", PredicateOp::Cmp(CmpOp::Eq, Scalar::Int(id.into())));
                let mask = move |b: &RecordBatch| {
                    Ok(eq(b.column(0), &Int64Array::new_scalar(id)).unwrap())
                };
                write.delete_where(&[filter], &mask).await.map(|gone| {
                    assert_eq!(
                        gone.iter().map(|b| b.num_rows()).sum::<usize>(),
                        1,
                        "id {id}"
                    );
                })
            }
        };
        match prepared {
            Ok(()) => match write.commit(kind.name()).await {
                Ok(done) => {
                    latency.record_duration(started.elapsed());
                    committed.push(id);
                    snapshot = done.snapshot;
                }
                Err(e) => {
                    eprintln!("zyron {} commit failed: {}", kind.name(), e.message());
                    failed += 1;
                    snapshot = lake.latest().await.unwrap();
                }
            },
            Err(e) => panic!("zyron {}: {}", kind.name(), e.message()),
        }
    }
    (latency, committed, failed)
}

/// Rows and the sum of ids of a snapshot.
async fn zyron_contents(lake: &LakeTable, snapshot: &Snapshot) -> (u64, i64) {
    let (batches, _) = lake.scan(snapshot, Some(&[0]), &[]).await.unwrap();
    let rows = batches.iter().map(|b| b.num_rows() as u64).sum();
    let sum = batches
        .iter()
        .flat_map(|b| b.column(0).as_primitive::<Int64Type>().values().to_vec())
        .sum();
    (rows, sum)
}

/// Commits that reported success but are not in the table, checked by rows
/// and by the sum of ids.
fn lost(workload: Workload, shape: DeleteTable, committed: &[i64], rows: u64, id_sum: i64) -> u64 {
    let (want_rows, want_sum) = expected(workload, shape, committed);
    let by_rows = match workload.kind {
        Kind::Insert => want_rows.saturating_sub(rows),
        Kind::Delete => rows.saturating_sub(want_rows),
    };
    if by_rows == 0 {
        assert_eq!(
            id_sum,
            want_sum,
            "{} rows right but ids wrong",
            workload.kind.name()
        );
    }
    by_rows
}

fn delta_run(
    storage: &Storage,
    table: &str,
    workload: Workload,
    shape: DeleteTable,
) -> Result<Outcome, String> {
    let uri = format!("{}/{table}", storage.delta_base);
    let options = &storage.delta_options;
    let mut writers = (0..workload.writers)
        .map(|_| DeltaWriter::start())
        .collect::<Result<Vec<_>, _>>()?;
    let initial = match workload.kind {
        Kind::Insert => vec![(-1, 0)],
        Kind::Delete => shape.file_ranges(),
    };
    writers[0].create(&uri, options, &initial)?;
    let started = Instant::now();
    let results: Vec<Result<(DeltaCommits, Vec<i64>), String>> = std::thread::scope(|scope| {
        let handles: Vec<_> = writers
            .iter_mut()
            .enumerate()
            .map(|(w, writer)| {
                let ids = ids_of(workload, shape, w);
                let uri = &uri;
                scope.spawn(move || {
                    let done = match workload.kind {
                        Kind::Insert => writer.append(uri, options, &ids),
                        Kind::Delete => writer.delete(uri, options, &ids),
                    }?;
                    Ok((done, ids))
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let elapsed = started.elapsed().as_secs_f64();
    let mut outcome = Outcome::default();
    let mut committed_ids = Vec::new();
    for result in results {
        let (done, ids) = result?;
        if let Some(error) = &done.first_error {
            eprintln!(
                "delta-rs {} failed {} commits, first: {error}",
                workload.kind.name(),
                done.errors
            );
        }
        for ms in &done.times_ms {
            outcome
                .latency
                .record_duration(std::time::Duration::from_secs_f64(ms / 1000.0));
        }
        outcome.failed += done.errors;
        // The worker reports which commits raised only by count; with no
        // failures every id committed.
        if done.errors == 0 {
            committed_ids.extend(ids);
        }
    }
    outcome.committed = outcome.latency.len();
    outcome.commits_per_s = outcome.committed as f64 / elapsed;
    let (rows, id_sum) = writers[0].count(&uri, options)?;
    if outcome.failed == 0 {
        outcome.lost = lost(workload, shape, &committed_ids, rows, id_sum);
    } else {
        // Which ids failed is unknown: count lost by rows alone.
        let (want_rows, _) = expected(workload, shape, &vec![0; outcome.committed as usize]);
        outcome.lost = match workload.kind {
            Kind::Insert => want_rows.saturating_sub(rows),
            Kind::Delete => rows.saturating_sub(want_rows),
        };
    }
    Ok(outcome)
}

fn metrics(
    storage: &Storage,
    workload: Workload,
    ours: &[Outcome],
    peer: &[Outcome],
    system: &str,
) -> Vec<Metric> {
    let name = format!(
        "{}_{}w_{}",
        workload.kind.name(),
        workload.writers,
        storage.name
    );
    let params = |m: Metric, ours: &[Outcome]| {
        m.param("writers", workload.writers as u64)
            .param("commits_per_writer", workload.commits_per_writer as u64)
            .param("storage", storage.name)
            .param("peer_durable_commits", storage.peer_durable)
            .param("rounds", ours.len() as u64)
            .param(
                "zyron_lost_commits",
                ours.iter().map(|o| o.lost).sum::<u64>(),
            )
            .param(
                "zyron_failed_commits",
                ours.iter().map(|o| o.failed).sum::<u64>(),
            )
            .param(
                "peer_lost_commits",
                peer.iter().map(|o| o.lost).sum::<u64>(),
            )
            .param(
                "peer_failed_commits",
                peer.iter().map(|o| o.failed).sum::<u64>(),
            )
    };
    let rate = |outcomes: &[Outcome]| {
        let mut samples = Samples::for_values();
        for o in outcomes {
            samples.record_value(o.commits_per_s);
        }
        samples
    };
    let mut rate_metric = params(
        Metric::throughput(&format!("{name}_commits_per_s"), "commits/s", &rate(ours)),
        ours,
    );
    let mut latency = Samples::new();
    for o in ours {
        latency.merge(&o.latency);
    }
    let mut latency_metric = params(
        Metric::latency_ms(&format!("{name}_commit_ms"), &latency),
        ours,
    );
    if !peer.is_empty() {
        let peer_rate = Metric::throughput("peer", "commits/s", &rate(peer)).value;
        rate_metric = rate_metric.with_peer(system, peer_rate);
        let mut peer_latency = Samples::new();
        for o in peer {
            peer_latency.merge(&o.latency);
        }
        latency_metric = latency_metric.with_peer(system, peer_latency.spread_ms().p50);
    }
    for outcome in ours {
        assert_eq!(outcome.lost, 0, "{name}: Zyron lost a commit");
        assert_eq!(outcome.failed, 0, "{name}: no Zyron commit may fail here");
    }
    vec![rate_metric, latency_metric]
}
