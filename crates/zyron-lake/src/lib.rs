//! ZyronLake: tables of immutable `.zyr` files under an append-only
//! transaction log on an object store (the local filesystem, or S3).
//!
//! - [`log`]: the records as stored (one JSON entry per commit, named by its
//!   version and written put-if-absent; checkpoints of the whole state);
//!   the contract is `formats/lake/SPEC.md`.
//! - [`snapshot`]: a table's state at one version.
//! - [`table`]: opening snapshots (latest, by version, by time) and
//!   committing with optimistic concurrency: a writer that loses the race
//!   reads the winners, checks for a real conflict, and retries.
//!
//! - [`location`]: `s3://bucket/prefix` or a local directory as a store;
//!   [`durable_local`]: the local filesystem with fsynced puts.
//!
//! No DataFusion here: the SQL layer builds on this crate.

pub mod durable_local;
pub mod location;
pub mod log;
pub mod snapshot;
pub mod table;

pub use location::Location;
pub use log::{Action, ColumnStats, Commit, DataFile, RemovedFile, TableMetadata};
pub use snapshot::Snapshot;
pub use table::{Committed, LakeTable, MAX_COMMIT_ATTEMPTS};
