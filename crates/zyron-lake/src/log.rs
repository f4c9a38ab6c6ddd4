//! The log's records as they are stored: one JSON object per commit, named
//! by its version, and checkpoints of the whole table state. The byte-level
//! contract is `formats/lake/SPEC.md`; this module is its only reader and
//! writer.

use std::collections::BTreeMap;

use object_store::path::Path;
use serde::{Deserialize, Serialize};

use crate::rowset::RowSet;

/// Log format version written into every entry and checkpoint. A reader
/// refuses a newer major; a newer minor only adds fields, which it ignores.
pub const FORMAT_MAJOR: u32 = 1;
pub const FORMAT_MINOR: u32 = 0;

/// Digits in a version's file name: sorting names sorts versions.
const VERSION_DIGITS: usize = 20;

pub const LOG_DIR: &str = "_zyron_log";
pub const CHECKPOINT_DIR: &str = "_zyron_checkpoints";
pub const LAST_CHECKPOINT: &str = "_last.json";

/// One commit: everything a transaction changed, applied atomically.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Commit {
    pub format: (u32, u32),
    pub version: u64,
    /// Milliseconds since the Unix epoch; strictly increasing with version
    /// (a committer writes at least its predecessor's time plus one), so
    /// time travel can binary-search versions by time.
    pub timestamp_ms: i64,
    /// What made the commit (`create`, `append`, `delete`, `optimize`, ...).
    pub operation: String,
    /// The snapshot the writer started from.
    pub read_version: u64,
    /// Random per commit attempt series: a writer whose put failed
    /// ambiguously (a timeout after the store wrote it) recognises its own
    /// commit by this id instead of committing twice.
    pub commit_id: String,
    /// False when the commit only rearranges rows (OPTIMIZE, clustering):
    /// the change feed skips it.
    #[serde(default = "yes", skip_serializing_if = "is_true")]
    pub data_change: bool,
    pub actions: Vec<Action>,
}

fn yes() -> bool {
    true
}

fn is_true(value: &bool) -> bool {
    *value
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Action {
    /// The table's schema and properties (version 0 holds the first).
    Metadata(TableMetadata),
    /// A data file joins the table.
    Add(DataFile),
    /// A data file leaves the table (it stays on storage until VACUUM).
    Remove(RemovedFile),
    /// Rows of a live data file are deleted (merge-on-read: the file is not
    /// rewritten; readers skip these positions).
    DeleteRows(DeletedRows),
}

/// Data files up to this size are kept in the log unless the table's
/// `inline_max_bytes` property says otherwise (0 turns inlining off).
pub const DEFAULT_INLINE_MAX_BYTES: u64 = 8 * 1024;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TableMetadata {
    /// The schema as the SQL layer describes it; the log does not interpret it.
    pub schema: serde_json::Value,
    /// Write a checkpoint every this many versions.
    pub checkpoint_interval: u64,
    #[serde(default)]
    pub properties: BTreeMap<String, String>,
}

/// How long a writer may hold a data file before committing it, unless the
/// table's `write_lease_ms` property says otherwise.
pub const DEFAULT_WRITE_LEASE_MS: i64 = 60 * 60 * 1000;

impl TableMetadata {
    fn number<T: std::str::FromStr>(&self, property: &str) -> Option<T> {
        self.properties.get(property).and_then(|v| v.parse().ok())
    }

    /// The largest data file kept inline in the log (property
    /// `inline_max_bytes`, else [`DEFAULT_INLINE_MAX_BYTES`]).
    pub fn inline_max_bytes(&self) -> u64 {
        self.number("inline_max_bytes")
            .unwrap_or(DEFAULT_INLINE_MAX_BYTES)
    }

    /// The longest a data file may wait between being written and being
    /// committed (property `write_lease_ms`, else [`DEFAULT_WRITE_LEASE_MS`]).
    pub fn write_lease_ms(&self) -> i64 {
        self.number("write_lease_ms")
            .unwrap_or(DEFAULT_WRITE_LEASE_MS)
    }

    /// How far back the change feed must be able to read (property
    /// `change_feed_retention_ms`, else 0: only what time travel keeps).
    pub fn change_feed_retention_ms(&self) -> i64 {
        self.number("change_feed_retention_ms").unwrap_or(0)
    }
}

/// A data file and what pruning needs to know about it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DataFile {
    /// Relative to the table's root.
    pub path: String,
    pub rows: u64,
    pub bytes: u64,
    /// Per column (by name): zone map of the whole file.
    #[serde(default)]
    pub stats: BTreeMap<String, ColumnStats>,
    /// The file's deletion vector: positions (0-based, in file order) of
    /// rows deleted so far. Absent in an `add`; a checkpoint carries it.
    #[serde(default, skip_serializing_if = "RowSet::is_empty")]
    pub deleted: RowSet,
    /// A small file's bytes, kept in the log instead of on storage (its
    /// path is then under `inline/` and names no object): a single-row
    /// INSERT commits with one durable write instead of two.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inline: Option<InlineBytes>,
}

/// Bytes written in the log as base64.
#[derive(Clone, PartialEq, Eq)]
pub struct InlineBytes(pub bytes::Bytes);

impl std::fmt::Debug for InlineBytes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "InlineBytes({} bytes)", self.0.len())
    }
}

impl Serialize for InlineBytes {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use base64::Engine;
        serializer.serialize_str(&base64::engine::general_purpose::STANDARD.encode(&self.0))
    }
}

impl<'de> Deserialize<'de> for InlineBytes {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        use base64::Engine;
        let text = String::deserialize(deserializer)?;
        base64::engine::general_purpose::STANDARD
            .decode(text)
            .map(|b| InlineBytes(b.into()))
            .map_err(serde::de::Error::custom)
    }
}

impl DataFile {
    /// Rows a reader sees: the file's rows minus its deleted ones.
    pub fn live_rows(&self) -> u64 {
        self.rows.saturating_sub(self.deleted.len())
    }
}

/// A column's zone map over a whole file: what pruning needs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ColumnStats {
    /// Values including nulls.
    pub values: u64,
    pub nulls: u64,
    pub range: StatRange,
}

/// Minimum and maximum of a column's non-null values, in the column's
/// logical domain (as `zyron_format::Stat`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StatRange {
    /// Unknown (no non-null value, an unordered type, or a float bound that
    /// JSON cannot spell): never prunes by value.
    Unknown,
    Int {
        min: i128,
        max: i128,
    },
    Float {
        min: f64,
        max: f64,
        has_nan: bool,
    },
    /// Hex bytes; when `exact` is false, `min <= every value < max`.
    Bytes {
        min: String,
        max: String,
        exact: bool,
    },
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DeletedRows {
    pub path: String,
    /// Positions newly deleted; none of them may already be deleted.
    pub rows: RowSet,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RemovedFile {
    pub path: String,
}

/// The whole table state at one version, so opening reads one checkpoint
/// plus the entries after it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Checkpoint {
    pub format: (u32, u32),
    pub version: u64,
    pub timestamp_ms: i64,
    pub metadata: TableMetadata,
    pub files: Vec<DataFile>,
}

/// The hint naming the newest checkpoint; it may lag, never lead.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct LastCheckpoint {
    pub version: u64,
}

pub fn entry_path(root: &Path, version: u64) -> Path {
    root.clone()
        .join(LOG_DIR)
        .join(format!("{version:0VERSION_DIGITS$}.json"))
}

pub fn checkpoint_path(root: &Path, version: u64) -> Path {
    root.clone()
        .join(CHECKPOINT_DIR)
        .join(format!("{version:0VERSION_DIGITS$}.json"))
}

pub fn last_checkpoint_path(root: &Path) -> Path {
    root.clone().join(CHECKPOINT_DIR).join(LAST_CHECKPOINT)
}

/// The version a log or checkpoint file name stands for, if it is one.
pub fn version_of(file_name: &str) -> Option<u64> {
    let digits = file_name.strip_suffix(".json")?;
    if digits.len() != VERSION_DIGITS || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// Refuses a record written by a newer major version of the format.
pub fn check_format(format: (u32, u32), what: &str) -> zyron_common::Result<()> {
    if format.0 > FORMAT_MAJOR {
        return Err(zyron_common::ZyronError::not_supported(format!(
            "{what} is lake log format {}.{}; this Zyron reads up to {FORMAT_MAJOR}.x",
            format.0, format.1
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_names_sort_as_versions_and_parse_back() {
        let root = Path::from("t");
        let names: Vec<String> = [0u64, 9, 10, 123_456_789]
            .iter()
            .map(|v| entry_path(&root, *v).filename().unwrap().to_owned())
            .collect();
        let mut sorted = names.clone();
        sorted.sort();
        assert_eq!(names, sorted);
        assert_eq!(version_of(&names[3]), Some(123_456_789));
        assert_eq!(version_of("_last.json"), None);
        assert_eq!(version_of("0000000000000000001.json"), None, "19 digits");
        assert_eq!(version_of("0000000000000000000a.json"), None);
    }

    #[test]
    fn a_newer_major_is_refused_and_a_newer_minor_read() {
        assert!(check_format((FORMAT_MAJOR, FORMAT_MINOR + 1), "entry").is_ok());
        let err = check_format((FORMAT_MAJOR + 1, 0), "entry 7").unwrap_err();
        assert_eq!(err.sqlstate().code(), "0A000");
        assert!(err.message().contains("entry 7"), "{}", err.message());
    }

    #[test]
    fn unknown_fields_of_a_newer_minor_are_ignored() {
        let json = r#"{"format":[1,3],"version":4,"timestamp_ms":10,"operation":"append",
            "read_version":3,"commit_id":"x","actions":[{"add":{"path":"data/a.zyr",
            "rows":1,"bytes":2,"future_field":true}}],"also_new":1}"#;
        let commit: Commit = serde_json::from_str(json).unwrap();
        assert_eq!(commit.version, 4);
        assert!(matches!(&commit.actions[0], Action::Add(f) if f.path == "data/a.zyr"));
    }
}
