//! Zyron's write-ahead log.
//!
//! Records are appended to a buffer and made durable by group commit: one
//! fdatasync covers every commit that arrived while the previous one ran.
//! A commit is acknowledged only after [`Wal::flush`] has returned for its
//! `end_lsn` (or [`Wal::on_durable`] has called back); [`Wal::append_unwaited`]
//! is the explicit `synchronous_commit = off` trade.
//!
//! On disk the log is a directory of fixed-size segment files ([`segment`]);
//! records are framed with length, LSN, kind and checksum ([`record`]).
//! [`open`] replays from a checkpoint's redo position, cuts a torn tail and
//! refuses to start over mid-log damage. [`Wal::truncate_before`] releases
//! segments a checkpoint no longer needs.
//!
//! ```
//! let dir = tempfile::tempdir().unwrap();
//! let options = zyron_wal::WalOptions::default();
//! let (wal, _) = zyron_wal::open(dir.path(), options.clone(), 0, |_| Ok(())).unwrap();
//! let first = wal.commit(1, b"insert into t values (1)").unwrap();
//! drop(wal);
//!
//! let mut replayed = Vec::new();
//! let (_wal, recovered) = zyron_wal::open(dir.path(), options, 0, |r| Ok(replayed.push(r))).unwrap();
//! assert_eq!(replayed[0].payload, b"insert into t values (1)");
//! assert_eq!(recovered.end_lsn, first.end_lsn);
//! ```

mod log;
mod open;
pub mod record;
pub mod segment;

pub use log::{Appended, DurableCallback, Wal, WalOptions, WalStats};
pub use open::{Recovered, open};
pub use record::Record;
