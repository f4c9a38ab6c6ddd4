//! Suite `lake_maintenance`: OPTIMIZE of many small files into few, then
//! VACUUM of the files it replaced, on the local disk and on S3, against
//! delta-rs (Python `deltalake`: `optimize.compact`, `vacuum`) on the same
//! rows and file count in the same run. Both sides' tables are read back
//! afterwards and must hold every row.
//!
//! Zyron's tables here keep every file as an object (`inline_max_bytes` 0)
//! so both sides rewrite objects.
//!
//! `ZYRON_BENCH_SCALE=full cargo test --release --workspace --test lake_maintenance_bench -- --nocapture`

mod common;

use std::time::Instant;

use object_store::path::Path;
use serde_json::json;
use zyron_bench::deltalake::DeltaWriter;
use zyron_bench::{Metric, Samples, SuiteRun};
use zyron_lake::{LakeTable, TableMetadata};

use common::{MAX_XY, Storage, points};

/// One round's figures for one system.
struct Round {
    optimize_rows_per_s: f64,
    vacuum_files_per_s: f64,
}

#[test]
fn lake_maintenance_suite() {
    let mut run = SuiteRun::new("lake_maintenance");
    let scale = run.scale();
    let small_files = scale.pick(40usize, 400);
    let file_rows = scale.pick(500usize, 2_000);
    let rounds = scale.pick(1, 3);
    let target_rows = (small_files * file_rows / 4) as u64;
    let common::SuiteSetup {
        runtime,
        delta_version,
        storages,
        ..
    } = common::suite_setup(&mut run);
    for storage in &storages {
        let (mut ours, mut peer) = (Vec::new(), Vec::new());
        for round in 0..rounds {
            let table = format!("zyron/maintenance_r{round}");
            ours.push(runtime.block_on(zyron_round(
                storage,
                &table,
                small_files,
                file_rows,
                target_rows,
            )));
            if delta_version.is_ok() {
                match delta_round(storage, round, small_files, file_rows) {
                    Ok(r) => peer.push(r),
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
        let figures: [(&str, &str, fn(&Round) -> f64); 2] = [
            ("optimize_rows_per_s", "rows/s", |r| r.optimize_rows_per_s),
            ("vacuum_files_per_s", "files/s", |r| r.vacuum_files_per_s),
        ];
        for (name, unit, figure) in figures {
            let samples = |rounds: &[Round]| {
                let mut s = Samples::for_values();
                rounds.iter().for_each(|r| s.record_value(figure(r)));
                s
            };
            let mut metric =
                Metric::throughput(&format!("{name}_{}", storage.name), unit, &samples(&ours))
                    .param("small_files", small_files as u64)
                    .param("rows_per_small_file", file_rows as u64)
                    .param("storage", storage.name);
            if !peer.is_empty() {
                let value = Metric::throughput("peer", unit, &samples(&peer)).value;
                metric = metric.with_peer(&system, value);
            }
            run.push(metric);
        }
    }
    let path = run.finish().unwrap();
    println!("lake_maintenance suite: {}", path.display());
}

async fn zyron_round(
    storage: &Storage,
    table: &str,
    small_files: usize,
    file_rows: usize,
    target_rows: u64,
) -> Round {
    let metadata = TableMetadata {
        schema: json!({"columns": ["x", "y", "id"]}),
        checkpoint_interval: 100,
        properties: [("inline_max_bytes".to_owned(), "0".to_owned())].into(),
    };
    let lake = LakeTable::create(storage.zyron.clone(), Path::from(table), metadata)
        .await
        .unwrap();
    let rows = (small_files * file_rows) as i64;
    let mut write = lake.begin().await.unwrap();
    for k in 0..small_files as i64 {
        let start = k * file_rows as i64;
        write
            .append(&[points(start..start + file_rows as i64)])
            .await
            .unwrap();
    }
    write.commit("load").await.unwrap();

    let started = Instant::now();
    let report = lake.optimize(target_rows).await.unwrap();
    let optimize_s = started.elapsed().as_secs_f64();
    assert_eq!(report.files_removed, small_files);
    assert_eq!(report.rows_written, rows as u64);
    let started = Instant::now();
    let vacuumed = lake.vacuum(0, false).await.unwrap();
    let vacuum_s = started.elapsed().as_secs_f64();
    assert_eq!(vacuumed.files_deleted, small_files as u64);
    let latest = lake.latest().await.unwrap();
    let (_, scanned) = lake.scan(&latest, Some(&[2]), &[]).await.unwrap();
    assert_eq!(
        scanned.rows, rows as u64,
        "every row survives OPTIMIZE and VACUUM"
    );
    Round {
        optimize_rows_per_s: rows as f64 / optimize_s,
        vacuum_files_per_s: vacuumed.files_deleted as f64 / vacuum_s,
    }
}

fn delta_round(
    storage: &Storage,
    round: usize,
    small_files: usize,
    file_rows: usize,
) -> Result<Round, String> {
    let mut delta = DeltaWriter::start()?;
    let uri = format!("{}/maintenance_r{round}", storage.delta_base);
    let options = &storage.delta_options;
    let rows = small_files * file_rows;
    delta.request(
        json!({"op": "load_points", "uri": uri, "storage_options": options,
        "lo": 0, "hi": rows, "file_rows": file_rows, "max_x": MAX_XY}),
    )?;
    // Four output files, as Zyron's target makes: a quarter of the bytes each.
    let sizes =
        delta.request(json!({"op": "prune", "uri": uri, "storage_options": options, "box": []}))?;
    assert_eq!(sizes["files"].as_u64(), Some(small_files as u64));
    let target_size = sizes["bytes"].as_u64().unwrap_or(1) / 4;
    let compact = delta.request(
        json!({"op": "compact", "uri": uri, "storage_options": options,
        "target_size": target_size}),
    )?;
    let optimize_ms = compact["ms"].as_f64().unwrap_or(f64::NAN);
    assert_eq!(
        compact["files_removed"].as_u64(),
        Some(small_files as u64),
        "{compact}"
    );
    let vacuum = delta.request(json!({"op": "vacuum", "uri": uri, "storage_options": options}))?;
    let vacuum_ms = vacuum["ms"].as_f64().unwrap_or(f64::NAN);
    let deleted = vacuum["files_deleted"].as_f64().unwrap_or(0.0);
    let (count, _) = delta.count(&uri, options)?;
    assert_eq!(count, rows as u64, "delta-rs keeps every row");
    Ok(Round {
        optimize_rows_per_s: rows as f64 / (optimize_ms / 1000.0),
        vacuum_files_per_s: deleted / (vacuum_ms / 1000.0),
    })
}
