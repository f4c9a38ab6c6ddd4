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
//! - [`data`]: data files written as `.zyr` with their zone maps in the
//!   log, read back with deletion vectors applied and files pruned;
//!   [`LakeWrite`] gathers a transaction's appends and deletes.
//! - [`rowset`]: deletion vectors (row positions as ranges).
//! - [`optimize`]: OPTIMIZE, small files and deleted rows rewritten away;
//!   [`cluster`]: rows ordered along a Z-order or Hilbert curve over
//!   columns or derived keys, at load time or by rewriting the table;
//!   [`vacuum`]: unreferenced files deleted, never one a writer may still
//!   commit (a lease in each data file's name);
//!   [`changes`]: the change feed, rows inserted and deleted per version;
//!   [`versioning`]: tags naming versions, branches that merge back.
//!
//! - [`location`]: `s3://bucket/prefix` or a local directory as a store;
//!   [`durable_local`]: the local filesystem with fsynced puts.
//!
//! No DataFusion here: the SQL layer builds on this crate.

pub mod changes;
pub mod cluster;
pub mod data;
pub mod durable_local;
pub mod location;
pub mod log;
pub mod optimize;
pub mod rowset;
pub mod snapshot;
pub mod table;
pub mod vacuum;
pub mod versioning;

pub use changes::{Change, ChangeKind};
pub use cluster::{ClusterKey, ClusterSpec, Curve};
pub use data::{FileFilter, LakeWrite, RowMask, ScanReport};
pub use location::Location;
pub use log::{
    Action, ColumnStats, Commit, DataFile, DeletedRows, RemovedFile, StatRange, TableMetadata,
};
pub use optimize::OptimizeReport;
pub use rowset::RowSet;
pub use snapshot::Snapshot;
pub use table::{Committed, LakeTable, MAX_COMMIT_ATTEMPTS};
pub use vacuum::VacuumReport;
