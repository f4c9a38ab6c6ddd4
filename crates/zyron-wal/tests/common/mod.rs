//! Shared by the WAL suites: a log in a temporary directory on the same disk
//! as the data directory, and this disk's raw fdatasync latency.

#![allow(dead_code)]

use std::fs::File;
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::time::{Duration, Instant};

use zyron_wal::{Wal, WalOptions};

/// A fresh log with server defaults.
pub fn fresh_wal(dir: &Path) -> Wal {
    zyron_wal::open(dir, WalOptions::default(), 0, |_| Ok(()))
        .expect("opening a fresh WAL")
        .0
}

/// A preallocated file for timing one 8 kB write plus fdatasync, the
/// operation `pg_test_fsync` reports as "fdatasync, one 8kB write".
pub struct RawSync {
    file: File,
    offset: u64,
}

const RAW_FILE_BYTES: u64 = 16 << 20;
const BLOCK: [u8; 8192] = [0x5a; 8192];

impl RawSync {
    pub fn new(dir: &Path) -> RawSync {
        let mut file = File::create(dir.join("raw-fdatasync")).unwrap();
        for _ in 0..RAW_FILE_BYTES / BLOCK.len() as u64 {
            file.write_all(&BLOCK).unwrap();
        }
        file.sync_all().unwrap();
        RawSync { file, offset: 0 }
    }

    /// One 8 kB write and one fdatasync; returns how long they took.
    pub fn once(&mut self) -> Duration {
        let started = Instant::now();
        self.file.write_all_at(&BLOCK, self.offset).unwrap();
        self.file.sync_data().unwrap();
        self.offset = (self.offset + BLOCK.len() as u64) % RAW_FILE_BYTES;
        started.elapsed()
    }
}

/// `pg_test_fsync`'s figure for "fdatasync" with one 8 kB write, in
/// microseconds, if PostgreSQL's tools are installed.
pub fn pg_test_fsync_us(dir: &Path, seconds: u32) -> Result<f64, String> {
    let bin = zyron_bench::postgres::bin_dir()?.join("pg_test_fsync");
    let out = std::process::Command::new(&bin)
        .args(["-s", &seconds.to_string(), "-f"])
        .arg(dir.join("pg_test_fsync.out"))
        .output()
        .map_err(|e| format!("{}: {e}", bin.display()))?;
    let text = String::from_utf8_lossy(&out.stdout);
    let section = text
        .split("Compare file sync methods using one 8kB write")
        .nth(1)
        .ok_or("pg_test_fsync printed no one-write section")?;
    section
        .lines()
        .find(|line| line.trim_start().starts_with("fdatasync"))
        .and_then(|line| line.split_whitespace().rev().nth(1))
        .and_then(|us| us.parse().ok())
        .ok_or_else(|| "pg_test_fsync printed no fdatasync figure".to_string())
}
