//! Opening a log: replay from the caller's redo position to the last valid
//! record, cut off a torn tail, and refuse to start over real damage.
//!
//! The end of the log is the first position that does not hold a valid record
//! (see [`crate::record`]), except that zero padding before a segment
//! boundary is skipped when the next segment starts with a record that would
//! not have fitted. What lies past the end is one of two things:
//!
//! - a **torn tail**: the part of the last write batch that a crash cut short.
//!   A batch is at most `max_buffer_bytes` plus one record, so such leftovers
//!   lie within that window of the end. They were never acknowledged; they are
//!   zeroed so that later appends cannot be confused with them.
//! - **damage**: a zeroed or overwritten block in the middle of the log, with
//!   valid records after it. Those records may have been acknowledged, so
//!   opening fails with SQLSTATE XX001 instead of silently dropping them.

use std::fs;
use std::path::Path;

use zyron_common::Result;

use crate::log::{Wal, WalOptions};
use crate::record::{self, Record};
use crate::segment::{self, SEGMENT_HEADER_BYTES, corrupt};

/// What opening the log found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Recovered {
    /// Where replay started.
    pub replay_from_lsn: u64,
    /// Records handed to the caller.
    pub replayed_records: u64,
    /// The end of the valid log; new records start here.
    pub end_lsn: u64,
    /// Non-zero bytes found past the end and zeroed (a torn tail).
    pub torn_bytes_cut: u64,
}

/// Opens (or creates) the log in `dir`, hands every record from `replay_from`
/// to `on_record` in LSN order, and returns the log ready for appending.
///
/// `replay_from` is the redo position of the caller's last checkpoint, or 0
/// for "from the oldest record".
pub fn open(
    dir: &Path,
    options: WalOptions,
    replay_from: u64,
    mut on_record: impl FnMut(Record) -> Result<()>,
) -> Result<(Wal, Recovered)> {
    options.validate()?;
    fs::create_dir_all(dir)
        .map_err(|e| zyron_common::ZyronError::io(&format!("creating {}", dir.display()), &e))?;
    remove_temporaries(dir)?;
    let starts = segment::list_segments(dir)?;
    if starts.is_empty() {
        return create_new(dir, options, replay_from);
    }
    let segment_bytes = check_headers(dir, &starts)?;
    let first_lsn = starts[0] + SEGMENT_HEADER_BYTES;
    let replay_from = if replay_from == 0 {
        first_lsn
    } else {
        replay_from
    };
    if replay_from < first_lsn {
        return Err(corrupt(
            dir,
            &format!(
                "the checkpoint's redo position {replay_from} is older than the oldest segment ({first_lsn}): a segment is missing"
            ),
        ));
    }
    let log = SegmentSet {
        dir,
        starts: &starts,
        segment_bytes,
    };
    let mut scan = Scan::new(&log, replay_from)?;
    let mut replayed = 0u64;
    while let Some(record) = scan.next_record()? {
        on_record(record)?;
        replayed += 1;
    }
    let end_lsn = scan.lsn;
    let scanned = (scan.segment_start, scan.bytes.as_slice());
    if let Some(lsn) = log.valid_record_beyond(end_lsn + options.torn_window_bytes(), scanned)? {
        return Err(corrupt(
            dir,
            &format!(
                "the log stops being readable at LSN {end_lsn} but holds valid records again at LSN {lsn}: \
             the WAL is damaged, not torn; refusing to start so that no acknowledged commit is silently dropped"
            ),
        ));
    }
    let torn_bytes_cut = scan.cut_tail()?;
    let current = scan.segment_start;
    for &start in starts.iter().filter(|&&s| s > current) {
        // Never reused as spares: they may hold records with LSNs that would be valid again.
        let path = segment::segment_path(dir, start);
        fs::remove_file(&path).map_err(|e| {
            zyron_common::ZyronError::io(&format!("removing {}", path.display()), &e)
        })?;
    }
    segment::sync_dir(dir)?;
    let recovered = Recovered {
        replay_from_lsn: replay_from,
        replayed_records: replayed,
        end_lsn,
        torn_bytes_cut,
    };
    let wal = Wal::start(
        dir,
        options,
        segment_bytes,
        end_lsn,
        current + segment_bytes,
    );
    Ok((wal, recovered))
}

fn create_new(dir: &Path, options: WalOptions, replay_from: u64) -> Result<(Wal, Recovered)> {
    if replay_from > SEGMENT_HEADER_BYTES {
        return Err(corrupt(
            dir,
            &format!(
                "the checkpoint expects WAL from LSN {replay_from}, but the WAL directory is empty"
            ),
        ));
    }
    let segment_bytes = options.segment_bytes;
    segment::create(dir, segment_bytes, 0)?;
    let end_lsn = SEGMENT_HEADER_BYTES;
    let recovered = Recovered {
        replay_from_lsn: end_lsn,
        replayed_records: 0,
        end_lsn,
        torn_bytes_cut: 0,
    };
    Ok((
        Wal::start(dir, options, segment_bytes, end_lsn, segment_bytes),
        recovered,
    ))
}

fn remove_temporaries(dir: &Path) -> Result<()> {
    for entry in
        fs::read_dir(dir).map_err(|e| zyron_common::ZyronError::io("listing the WAL", &e))?
    {
        let path = entry
            .map_err(|e| zyron_common::ZyronError::io("listing the WAL", &e))?
            .path();
        if path.extension().is_some_and(|ext| ext == "tmp") {
            let _ = fs::remove_file(path);
        }
    }
    Ok(())
}

/// Every segment must agree on the segment size and be named after its start.
fn check_headers(dir: &Path, starts: &[u64]) -> Result<u64> {
    let mut size = None;
    for &start in starts {
        let path = segment::segment_path(dir, start);
        let (segment_bytes, header_start) = segment::read_header(&path)?;
        if header_start != start
            || *size.get_or_insert(segment_bytes) != segment_bytes
            || start % segment_bytes != 0
        {
            return Err(corrupt(
                &path,
                "segment header does not match its name or its neighbours",
            ));
        }
    }
    Ok(size.expect("at least one segment"))
}

struct SegmentSet<'a> {
    dir: &'a Path,
    starts: &'a [u64],
    segment_bytes: u64,
}

impl SegmentSet<'_> {
    fn read(&self, start: u64) -> Result<Option<Vec<u8>>> {
        if self.starts.binary_search(&start).is_err() {
            return Ok(None);
        }
        let path = segment::segment_path(self.dir, start);
        let bytes = fs::read(&path).map_err(|e| {
            zyron_common::ZyronError::io(&format!("reading {}", path.display()), &e)
        })?;
        if bytes.len() as u64 != self.segment_bytes {
            return Err(corrupt(
                &path,
                &format!(
                    "segment is {} bytes, expected {}",
                    bytes.len(),
                    self.segment_bytes
                ),
            ));
        }
        Ok(Some(bytes))
    }

    /// The first position at or after `from` (searched within its segment and
    /// the next, and at the start of every later one) holding a valid record.
    /// `loaded` is a segment already in memory (the one the replay ended in),
    /// used instead of reading it again: a segment is 16 MiB by default.
    fn valid_record_beyond(&self, from: u64, loaded: (u64, &[u8])) -> Result<Option<u64>> {
        let from_segment = from - from % self.segment_bytes;
        for &start in self
            .starts
            .iter()
            .filter(|&&s| s + self.segment_bytes > from)
        {
            let read;
            let bytes = if start == loaded.0 {
                loaded.1
            } else {
                match self.read(start)? {
                    Some(segment) => {
                        read = segment;
                        read.as_slice()
                    }
                    None => continue,
                }
            };
            let first = from.max(start + SEGMENT_HEADER_BYTES);
            let last = if start <= from_segment + self.segment_bytes {
                start + self.segment_bytes
            } else {
                first + 1
            };
            for lsn in first..last {
                let offset = (lsn - start) as usize;
                if offset + record::RECORD_HEADER_BYTES > bytes.len() {
                    break;
                }
                let stored = u64::from_le_bytes(bytes[offset + 8..offset + 16].try_into().unwrap());
                if stored == lsn && record::decode(&bytes[offset..], lsn).is_ok() {
                    return Ok(Some(lsn));
                }
            }
        }
        Ok(None)
    }
}

/// A forward reader over the segments.
struct Scan<'a> {
    log: &'a SegmentSet<'a>,
    segment_start: u64,
    bytes: Vec<u8>,
    lsn: u64,
}

impl<'a> Scan<'a> {
    fn new(log: &'a SegmentSet<'a>, lsn: u64) -> Result<Self> {
        // No record starts at a segment's byte 0 (the header is there), so a
        // position on a boundary is the end of the earlier segment: start
        // there, and the scan crosses into the next one if it exists.
        let (segment_start, lsn) = match lsn % log.segment_bytes {
            0 if log.starts.contains(&(lsn - log.segment_bytes)) => (lsn - log.segment_bytes, lsn),
            // Released by a checkpoint: the first record is after the next header.
            0 => (lsn, lsn + SEGMENT_HEADER_BYTES),
            offset => (lsn - offset, lsn),
        };
        let bytes = log.read(segment_start)?.ok_or_else(|| {
            corrupt(
                log.dir,
                &format!("the segment holding the redo position {lsn} is missing"),
            )
        })?;
        Ok(Scan {
            log,
            segment_start,
            bytes,
            lsn,
        })
    }

    fn offset(&self) -> usize {
        (self.lsn - self.segment_start) as usize
    }

    fn next_record(&mut self) -> Result<Option<Record>> {
        let offset = self.offset();
        if let Ok((kind, payload)) = record::decode(&self.bytes[offset..], self.lsn) {
            let record = Record {
                lsn: self.lsn,
                kind,
                payload: payload.to_vec(),
            };
            self.lsn = record.end_lsn();
            return Ok(Some(record));
        }
        if self.continues_in_next_segment()? {
            return self.next_record();
        }
        Ok(None)
    }

    /// True (and moved there) if the rest of this segment is padding before a
    /// record in the next segment that would not have fitted here.
    fn continues_in_next_segment(&mut self) -> Result<bool> {
        let next_start = self.segment_start + self.log.segment_bytes;
        let Some(next) = self.log.read(next_start)? else {
            return Ok(false);
        };
        let first = next_start + SEGMENT_HEADER_BYTES;
        let Ok((_, payload)) = record::decode(&next[SEGMENT_HEADER_BYTES as usize..], first) else {
            return Ok(false);
        };
        let would_not_fit = self.lsn + record::framed_len(payload.len()) as u64 > next_start;
        let padding_is_zero = self.bytes[self.offset()..].iter().all(|&b| b == 0);
        if !(would_not_fit && padding_is_zero) {
            return Ok(false);
        }
        self.segment_start = next_start;
        self.bytes = next;
        self.lsn = first;
        Ok(true)
    }

    /// Zeroes whatever non-zero bytes follow the end in its segment, and makes
    /// the segment durable as replayed. Returns how many bytes were cut.
    fn cut_tail(&self) -> Result<u64> {
        let offset = self.offset();
        let path = segment::segment_path(self.log.dir, self.segment_start);
        let file = segment::open_for_write(&path)?;
        let cut = match self.bytes[offset..].iter().rposition(|&b| b != 0) {
            Some(last) => {
                let zeros = vec![0u8; last + 1];
                std::os::unix::fs::FileExt::write_all_at(&file, &zeros, offset as u64)
                    .map_err(|e| zyron_common::ZyronError::io("cutting the WAL tail", &e))?;
                last as u64 + 1
            }
            None => 0,
        };
        file.sync_data()
            .map_err(|e| zyron_common::ZyronError::io("fdatasync of the WAL", &e))?;
        Ok(cut)
    }
}
