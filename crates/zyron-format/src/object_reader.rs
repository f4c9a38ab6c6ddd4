//! Opening and reading `.zyr` files through `object_store` (local disk, S3, memory), with
//! asynchronous ranged reads.
//!
//! [`open`] issues one suffix request (the footer, and usually the column records), plus one
//! more only when the footer is larger than [`TAIL_READ_BYTES`]. [`prefetch`] then fetches the
//! column records and blocks a scan needs with `get_ranges`, which coalesces nearby ranges. The
//! decoding itself is the synchronous [`ZyrFile`] code, reading from the fetched bytes.

use std::ops::Range;
use std::sync::{Arc, RwLock};

use bytes::Bytes;
use object_store::path::Path;
use object_store::{GetOptions, GetRange, ObjectStore, ObjectStoreExt};

use crate::error::{FormatError, Result, corrupt};
use crate::layout::{TRAILER_LEN, Trailer};
use crate::reader::{Source, TAIL_READ_BYTES, ZyrFile};

/// Byte ranges fetched from an object store, served to the decoder.
#[derive(Debug)]
pub struct FetchedRanges {
    len: u64,
    ranges: RwLock<Vec<(u64, Bytes)>>,
}

impl FetchedRanges {
    fn insert(&self, start: u64, bytes: Bytes) {
        let mut ranges = self.ranges.write().expect("ranges lock");
        let at = ranges.partition_point(|(s, _)| *s < start);
        ranges.insert(at, (start, bytes));
    }

    fn contains(&self, range: &Range<u64>) -> bool {
        self.find(range).is_some()
    }

    fn find(&self, range: &Range<u64>) -> Option<Bytes> {
        let ranges = self.ranges.read().expect("ranges lock");
        ranges
            .iter()
            .find(|(s, b)| *s <= range.start && range.end <= s + b.len() as u64)
            .map(|(s, b)| b.slice((range.start - s) as usize..(range.end - s) as usize))
    }
}

impl Source for FetchedRanges {
    fn len(&self) -> u64 {
        self.len
    }
    fn read(&self, range: Range<u64>) -> Result<Bytes> {
        self.find(&range).ok_or_else(|| {
            FormatError::Io(std::io::Error::other(format!(
                "bytes {range:?} were not fetched before decoding"
            )))
        })
    }
}

/// An open file on an object store.
pub struct ObjectFile {
    pub file: Arc<ZyrFile>,
    fetched: Arc<FetchedRanges>,
    store: Arc<dyn ObjectStore>,
    path: Path,
}

/// Opens `path` on `store` with one request (two if the footer exceeds [`TAIL_READ_BYTES`]).
pub async fn open(store: Arc<dyn ObjectStore>, path: &Path) -> Result<ObjectFile> {
    let options = GetOptions {
        range: Some(GetRange::Suffix(TAIL_READ_BYTES)),
        ..Default::default()
    };
    let result = store.get_opts(path, options).await?;
    let len = result.meta.size;
    let tail_start = result.range.start;
    let tail = result.bytes().await?;
    if tail.len() < TRAILER_LEN as usize {
        return corrupt(format!("{path}: {len} bytes is too short for a .zyr file"));
    }
    let fetched = Arc::new(FetchedRanges {
        len,
        ranges: RwLock::new(vec![]),
    });
    fetched.insert(tail_start, tail.clone());
    let trailer = Trailer::parse(&tail[tail.len() - TRAILER_LEN as usize..], len)?;
    if trailer.footer_offset < tail_start {
        let footer = store
            .get_range(path, trailer.footer_offset..tail_start)
            .await?;
        fetched.insert(trailer.footer_offset, footer);
    }
    let file = Arc::new(ZyrFile::from_tail(fetched.clone(), len, tail, tail_start)?);
    Ok(ObjectFile {
        file,
        fetched,
        store,
        path: path.clone(),
    })
}

impl ObjectFile {
    /// Fetches what reading top-level columns `columns` needs: their column records, then their
    /// blocks and bloom filters (of nested children too).
    pub async fn prefetch(&self, columns: &[usize]) -> Result<()> {
        let nodes = self.file.subtree_nodes(columns);
        let records: Vec<Range<u64>> = nodes
            .iter()
            .map(|n| self.file.column_record_range(*n))
            .collect();
        self.fetch(records).await?;
        let mut ranges = vec![];
        for n in &nodes {
            ranges.extend(self.file.data_ranges(*n)?);
        }
        self.fetch(ranges).await
    }

    async fn fetch(&self, ranges: Vec<Range<u64>>) -> Result<()> {
        let missing: Vec<Range<u64>> = ranges
            .into_iter()
            .filter(|r| !r.is_empty() && !self.fetched.contains(r))
            .collect();
        if missing.is_empty() {
            return Ok(());
        }
        let fetched = self.store.get_ranges(&self.path, &missing).await?;
        for (r, bytes) in missing.iter().zip(fetched) {
            self.fetched.insert(r.start, bytes);
        }
        Ok(())
    }
}
