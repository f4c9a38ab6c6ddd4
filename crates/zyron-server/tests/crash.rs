//! Crash safety of the real server process: SIGKILL under concurrent durable
//! writes, a torn WAL tail, a zeroed WAL block, a damaged checkpoint image,
//! and a full disk.
//!
//! Every kill is followed by a restart on the same data directory and these
//! checks: each acknowledged COMMIT is present; no transaction is partly
//! visible (each writer's running total equals the sum of its ledger rows);
//! nothing is present that was not at least sent. Beside the writers, two
//! clients race DDL against writes on another table (`churn_until_killed`),
//! so kills also land there, and every restart must replay it.
//!
//! `ZYRON_CRASH_KILLS` sets the number of kills (CI: 4; the published run: 50+).

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use common::process::ZyronProcess;
use tokio_postgres::Client;

const WRITERS: i32 = 4;

/// Small WAL budget between checkpoints, so kills also land during and after checkpoints.
const CONFIG: &str = "checkpoint_wal_mib = 1\n";

fn kills() -> usize {
    std::env::var("ZYRON_CRASH_KILLS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(4)
}

/// What the writers sent and what the server acknowledged.
#[derive(Default)]
struct Ledger {
    acked: BTreeSet<(i32, i64)>,
    /// The last sequence number each writer sent a COMMIT for.
    sent: BTreeMap<i32, i64>,
}

fn amount(writer: i32, seq: i64) -> i64 {
    (seq * 7919 + i64::from(writer) * 104_729) % 1000 - 500
}

/// One writer: BEGIN; insert a ledger row; add it to the writer's total; COMMIT.
async fn write_until_killed(
    client: Client,
    writer: i32,
    mut seq: i64,
    ledger: Arc<std::sync::Mutex<Ledger>>,
    acked: Arc<AtomicU64>,
) {
    loop {
        seq += 1;
        let amount = amount(writer, seq);
        ledger.lock().unwrap().sent.insert(writer, seq);
        let sql = format!(
            "BEGIN; INSERT INTO ledger VALUES ({id}, {writer}, {seq}, {amount}); \
             UPDATE totals SET n = n + 1, total = total + {amount} WHERE writer = {writer}; COMMIT",
            id = i64::from(writer) * 1_000_000_000 + seq
        );
        if client.batch_execute(&sql).await.is_err() {
            return; // the server died; the outcome of this transaction is unknown
        }
        ledger.lock().unwrap().acked.insert((writer, seq));
        acked.fetch_add(1, Ordering::Relaxed);
    }
}

/// One side of a race on table `churn`: inserts into it, or truncates it, until
/// the server dies. A write that loses the race fails with 40001 (a write ordered
/// after a TRUNCATE in the log once made replay fail, and the server could not
/// start again); any other error from a live server fails the test. Returns how
/// many statements succeeded.
async fn churn_until_killed(client: Client, truncate: bool) -> u64 {
    let sql = match truncate {
        true => "TRUNCATE churn",
        false => "INSERT INTO churn SELECT CAST(value AS INT) FROM generate_series(1, 20)",
    };
    let mut done = 0;
    loop {
        match client.batch_execute(sql).await {
            Ok(()) => done += 1,
            Err(err) => match err.as_db_error() {
                Some(db)
                    if db.code() == &tokio_postgres::error::SqlState::T_R_SERIALIZATION_FAILURE => {
                }
                Some(db) => panic!("{sql}: {}: {}", db.code().code(), db.message()),
                None => return done, // the server died
            },
        }
    }
}

/// After a restart: everything acknowledged is there, nothing is half there.
async fn verify(client: &Client, ledger: &Ledger) -> BTreeMap<i32, i64> {
    let rows = client
        .query("SELECT writer, seq, amount FROM ledger", &[])
        .await
        .unwrap();
    let present: BTreeSet<(i32, i64)> = rows
        .iter()
        .map(|r| (r.get::<_, i32>(0), r.get::<_, i64>(1)))
        .collect();
    for row in &rows {
        let (writer, seq, stored): (i32, i64, i64) = (row.get(0), row.get(1), row.get(2));
        assert_eq!(
            stored,
            amount(writer, seq),
            "row ({writer}, {seq}) holds what was written"
        );
        assert!(
            ledger.acked.contains(&(writer, seq)) || ledger.sent.get(&writer) == Some(&seq),
            "row ({writer}, {seq}) was never sent"
        );
    }
    let missing: Vec<_> = ledger.acked.difference(&present).collect();
    assert!(missing.is_empty(), "acknowledged commits lost: {missing:?}");
    let totals = client
        .query("SELECT writer, n, total FROM totals", &[])
        .await
        .unwrap();
    let mut last = BTreeMap::new();
    for writer in 0..WRITERS {
        let mine: Vec<&(i32, i64)> = present.iter().filter(|(w, _)| *w == writer).collect();
        let row = totals
            .iter()
            .find(|r| r.get::<_, i32>(0) == writer)
            .expect("a total per writer");
        let sum: i64 = mine.iter().map(|(w, s)| amount(*w, *s)).sum();
        assert_eq!(
            row.get::<_, i64>(1),
            mine.len() as i64,
            "writer {writer}: count matches its rows"
        );
        assert_eq!(
            row.get::<_, i64>(2),
            sum,
            "writer {writer}: total matches its rows (no half transaction)"
        );
        last.insert(writer, mine.iter().map(|(_, s)| *s).max().unwrap_or(0));
    }
    last
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_under_concurrent_commits_loses_nothing_acknowledged() {
    let dir = tempfile::tempdir().unwrap();
    let server = ZyronProcess::start(dir.path(), CONFIG).unwrap();
    let client = server.connect().await;
    client
        .batch_execute(
            "CREATE TABLE ledger (id BIGINT PRIMARY KEY, writer INT NOT NULL, seq BIGINT NOT NULL, amount BIGINT NOT NULL);
             CREATE TABLE totals (writer INT PRIMARY KEY, n BIGINT NOT NULL, total BIGINT NOT NULL);
             INSERT INTO totals SELECT CAST(value AS INT), 0 AS n, 0 AS total FROM generate_series(0, 3);
             CREATE TABLE churn (x INT)",
        )
        .await
        .unwrap();
    drop(client);
    let ledger = Arc::new(std::sync::Mutex::new(Ledger::default()));
    let mut server = Some(server);
    let mut next_seq: BTreeMap<i32, i64> = (0..WRITERS).map(|w| (w, 0)).collect();
    let mut rng = 0x2545_F491_4F6C_DD1Du64;
    let rounds = kills();
    let mut total_acked = 0;
    let (mut truncates, mut churn_inserts) = (0, 0);
    for round in 0..rounds {
        let running = server.take().unwrap();
        let acked = Arc::new(AtomicU64::new(0));
        let mut writers = Vec::new();
        for writer in 0..WRITERS {
            let client = running.connect().await;
            writers.push(tokio::spawn(write_until_killed(
                client,
                writer,
                next_seq[&writer],
                ledger.clone(),
                acked.clone(),
            )));
        }
        let churners = [
            tokio::spawn(churn_until_killed(running.connect().await, true)),
            tokio::spawn(churn_until_killed(running.connect().await, false)),
        ];
        // Kill after a pseudo-random amount of acknowledged work, so kills land
        // mid-commit, mid-group-commit and around checkpoints.
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        let target = 20 + rng % 400;
        while acked.load(Ordering::Relaxed) < target {
            assert!(
                !writers.iter().all(|w| w.is_finished()),
                "every writer stopped before the kill"
            );
            tokio::task::yield_now().await;
        }
        running.kill9();
        for writer in writers {
            writer.await.unwrap();
        }
        let [truncater, inserter] = churners;
        truncates += truncater.await.unwrap();
        churn_inserts += inserter.await.unwrap();
        total_acked += acked.load(Ordering::Relaxed);
        let restarted = ZyronProcess::start(dir.path(), CONFIG)
            .unwrap_or_else(|e| panic!("restart {round}: {e}"));
        let client = restarted.connect().await;
        let snapshot = { std::mem::take(&mut *ledger.lock().unwrap()) };
        next_seq = verify(&client, &snapshot).await;
        let churned: i64 = client
            .query_one("SELECT count(*) FROM churn", &[])
            .await
            .unwrap()
            .get(0);
        assert_eq!(churned % 20, 0, "whole inserts into churn only");
        // Carry on: what is present counts as acknowledged from here.
        let mut carried = Ledger::default();
        for row in client
            .query("SELECT writer, seq FROM ledger", &[])
            .await
            .unwrap()
        {
            carried.acked.insert((row.get(0), row.get(1)));
        }
        *ledger.lock().unwrap() = carried;
        server = Some(restarted);
    }
    println!(
        "{rounds} SIGKILLs, {total_acked} acknowledged commits, none lost, none torn; \
         {truncates} TRUNCATEs raced {churn_inserts} inserts"
    );
    assert!(
        truncates > 0 && churn_inserts > 0,
        "both sides of the DDL race ran"
    );
}

/// The WAL segments of a data directory, in order.
fn segments(data: &Path) -> Vec<PathBuf> {
    let mut paths: Vec<PathBuf> = std::fs::read_dir(data.join("wal"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            p.extension().is_some_and(|e| e == "wal")
                && !p
                    .file_name()
                    .unwrap()
                    .to_string_lossy()
                    .starts_with("spare")
        })
        .collect();
    paths.sort();
    paths
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_torn_wal_tail_is_cut_and_a_zeroed_wal_block_refuses_to_start() {
    let dir = tempfile::tempdir().unwrap();
    let no_checkpoints = "checkpoint_wal_mib = 100000\n";
    let server = ZyronProcess::start(dir.path(), no_checkpoints).unwrap();
    let client = server.connect().await;
    client
        .batch_execute("CREATE TABLE t (id INT PRIMARY KEY, pad TEXT)")
        .await
        .unwrap();
    // About 12 MiB of WAL, in many commits, so damage near the start lies far from the end.
    for chunk in 0..60 {
        client
            .batch_execute(&format!(
                "INSERT INTO t SELECT CAST(value AS INT), repeat('x', 200) FROM generate_series({}, {})",
                chunk * 1000,
                chunk * 1000 + 999
            ))
            .await
            .unwrap();
    }
    drop(client);
    server.kill9();

    // A torn tail: garbage right after the last record, as a crash mid-write leaves it.
    let data = dir.path().join("data");
    let last = segments(&data).pop().unwrap();
    let mut bytes = std::fs::read(&last).unwrap();
    let end = bytes.iter().rposition(|&b| b != 0).unwrap() + 1;
    for (i, b) in bytes[end..end + 300].iter_mut().enumerate() {
        *b = (i * 31 + 7) as u8;
    }
    std::fs::write(&last, &bytes).unwrap();
    let server =
        ZyronProcess::start(dir.path(), no_checkpoints).expect("a torn tail is cut, not fatal");
    let client = server.connect().await;
    let count: i64 = client
        .query_one("SELECT count(*) FROM t", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(count, 60_000);
    drop(client);
    server.kill9();

    // A zeroed block early in the log, with acknowledged commits after it: refuse, do not drop them.
    let first = segments(&data).remove(0);
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(&first)
        .unwrap();
    std::os::unix::fs::FileExt::write_all_at(&file, &[0u8; 4096], 64 * 1024).unwrap();
    let err = ZyronProcess::start(dir.path(), no_checkpoints)
        .err()
        .expect("must refuse to start");
    assert!(err.contains("damaged, not torn"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_damaged_checkpoint_image_refuses_to_start() {
    let dir = tempfile::tempdir().unwrap();
    let server = ZyronProcess::start(dir.path(), CONFIG).unwrap();
    let client = server.connect().await;
    client
        .batch_execute("CREATE TABLE t (id INT PRIMARY KEY, pad TEXT); INSERT INTO t SELECT CAST(value AS INT), repeat('y', 100) FROM generate_series(1, 20000)")
        .await
        .unwrap();
    client.batch_execute("CHECKPOINT").await.unwrap();
    drop(client);
    server.kill9();
    let data = dir.path().join("data");
    let image = std::fs::read_dir(&data)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| {
            p.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with("checkpoint-")
        })
        .expect("CHECKPOINT wrote an image");
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(&image)
        .unwrap();
    std::os::unix::fs::FileExt::write_all_at(&file, &[0u8; 4096], 8192).unwrap();
    let err = ZyronProcess::start(dir.path(), CONFIG)
        .err()
        .expect("must refuse to start");
    assert!(
        err.contains("checkpoint image") && err.contains("damaged"),
        "{err}"
    );
}

/// A data directory on a small tmpfs: filling it must fail commits with
/// SQLSTATE 53100 while the server stays up and keeps every acknowledged row.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_fails_the_commit_and_keeps_the_server_up() {
    let dir = tempfile::tempdir().unwrap();
    let mount = dir.path().join("small");
    std::fs::create_dir_all(&mount).unwrap();
    let mounted = Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=40m", "tmpfs"])
        .arg(&mount)
        .status();
    if !mounted.is_ok_and(|s| s.success()) {
        println!("skipped: cannot mount a tmpfs here (needs root); the full-disk test did not run");
        return;
    }
    let _unmount = Unmount(mount.clone());
    let config = "checkpoint_wal_mib = 100000\n";
    let server = ZyronProcess::start(&mount, config).unwrap();
    let client = server.connect().await;
    client
        .batch_execute("CREATE TABLE t (id INT PRIMARY KEY, pad TEXT)")
        .await
        .unwrap();
    let mut acked = 0;
    let mut failure = None;
    for chunk in 0..200 {
        let sql = format!(
            "INSERT INTO t SELECT CAST(value AS INT), repeat('z', 1000) FROM generate_series({}, {})",
            chunk * 1000,
            chunk * 1000 + 999
        );
        match client.batch_execute(&sql).await {
            Ok(()) => acked += 1000,
            Err(e) => {
                failure = Some(e);
                break;
            }
        }
    }
    let failure = failure.expect("a 40 MiB disk fills up");
    let code = failure.as_db_error().map(|e| e.code().code().to_owned());
    assert_eq!(code.as_deref(), Some("53100"), "{failure:?}");
    // The server is up and answers; what was acknowledged is there.
    let count: i64 = client
        .query_one("SELECT count(*) FROM t", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(count, acked);
    drop(client);
    server.kill9();
    let server = ZyronProcess::start(&mount, config).expect("restarts on the full disk");
    let client = server.connect().await;
    let count: i64 = client
        .query_one("SELECT count(*) FROM t", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(count, acked, "nothing acknowledged was lost");
}

struct Unmount(PathBuf);

impl Drop for Unmount {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}
