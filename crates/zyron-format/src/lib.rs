//! The `.zyr` columnar file format: the byte layout of `formats/zyr/SPEC.md`, its encodings,
//! a writer, a reader with zone-map pruning and filters on encoded data, and an async reader
//! over `object_store`.
//!
//! This crate depends on arrow, zstd and object_store, not on DataFusion: the SQL engine's
//! table provider lives in `zyron-engine`.

pub mod bloom;
pub mod encodings;
pub mod error;
pub mod io;
pub mod lanes;
pub mod layout;
pub mod object_reader;
pub mod predicate;
pub mod reader;
mod simd;
pub mod stats;
pub mod testing;
pub mod types;
pub mod writer;

pub use error::{FormatError, Result};
pub use predicate::{CmpOp, ColumnPredicate, PredicateOp, Scalar};
pub use reader::{FilterMode, Scan, ScanMetrics, ScanOptions, Source, VectorPos, ZyrFile};
pub use stats::{Stat, ZoneMap};
pub use types::{TIMESTAMP_PS_EXTENSION, timestamp_ps_field};
pub use writer::{
    MAX_WRITER_THREADS, PARALLEL_MIN_ROWS, WriteSummary, WriterOptions, ZyrWriter, write_file,
};
