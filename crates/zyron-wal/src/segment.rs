//! Segment files: the log is cut into fixed-size files named after the LSN of
//! their first byte, each starting with a 32-byte header.
//!
//! ```text
//! offset size field
//!      0    4 magic          "ZWAL"
//!      4    2 version        1
//!      6    2 reserved       zero
//!      8    8 segment_bytes  size of every segment of this log
//!     16    8 start_lsn      LSN of this file's byte 0 (a multiple of segment_bytes)
//!     24    4 reserved       zero
//!     28    4 checksum       low 32 bits of XXH3-64 over bytes 0..28
//! ```
//!
//! A segment is created whole before any record goes into it: zero-filled (or
//! recycled from a segment a checkpoint released), fsynced, then renamed into
//! place and the directory fsynced. So a commit's fdatasync never has to grow
//! a file, and a full disk shows up when a segment is prepared, before any
//! record that would need it has been accepted.

use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use zyron_common::checksum::checksum32;
use zyron_common::{Result, SqlState, ZyronError};

pub const SEGMENT_HEADER_BYTES: u64 = 32;
const MAGIC: &[u8; 4] = b"ZWAL";
const VERSION: u16 = 1;
const SUFFIX: &str = ".wal";
const SPARE_PREFIX: &str = "spare-";
const ZERO_CHUNK_BYTES: usize = 1 << 20;

/// The header bytes of the segment starting at `start_lsn`.
pub fn header(segment_bytes: u64, start_lsn: u64) -> [u8; SEGMENT_HEADER_BYTES as usize] {
    let mut bytes = [0u8; SEGMENT_HEADER_BYTES as usize];
    bytes[0..4].copy_from_slice(MAGIC);
    bytes[4..6].copy_from_slice(&VERSION.to_le_bytes());
    bytes[8..16].copy_from_slice(&segment_bytes.to_le_bytes());
    bytes[16..24].copy_from_slice(&start_lsn.to_le_bytes());
    let checksum = checksum32(&bytes[..28]);
    bytes[28..32].copy_from_slice(&checksum.to_le_bytes());
    bytes
}

/// Reads and checks a segment header; returns `(segment_bytes, start_lsn)`.
pub fn read_header(path: &Path) -> Result<(u64, u64)> {
    let file =
        File::open(path).map_err(|e| ZyronError::io(&format!("opening {}", path.display()), &e))?;
    let mut bytes = [0u8; SEGMENT_HEADER_BYTES as usize];
    file.read_exact_at(&mut bytes, 0)
        .map_err(|e| corrupt(path, &format!("header unreadable: {e}")))?;
    if &bytes[0..4] != MAGIC {
        return Err(corrupt(path, "not a Zyron WAL segment (bad magic)"));
    }
    let version = u16::from_le_bytes([bytes[4], bytes[5]]);
    if version != VERSION {
        return Err(ZyronError::not_supported(format!(
            "{}: WAL segment version {version}, this build reads version {VERSION}",
            path.display()
        )));
    }
    if u32::from_le_bytes(bytes[28..32].try_into().unwrap()) != checksum32(&bytes[..28]) {
        return Err(corrupt(path, "segment header checksum mismatch"));
    }
    let segment_bytes = u64::from_le_bytes(bytes[8..16].try_into().unwrap());
    let start_lsn = u64::from_le_bytes(bytes[16..24].try_into().unwrap());
    Ok((segment_bytes, start_lsn))
}

pub fn corrupt(path: &Path, what: &str) -> ZyronError {
    ZyronError::new(
        SqlState::DATA_CORRUPTED,
        format!("WAL {}: {what}", path.display()),
    )
}

fn io(context: &str, path: &Path, err: &std::io::Error) -> ZyronError {
    ZyronError::io(&format!("{context} {}", path.display()), err)
}

pub fn segment_path(dir: &Path, start_lsn: u64) -> PathBuf {
    dir.join(format!("{start_lsn:016x}{SUFFIX}"))
}

/// Start LSNs of the segments in `dir`, ascending.
pub fn list_segments(dir: &Path) -> Result<Vec<u64>> {
    let mut starts = Vec::new();
    for name in file_names(dir)? {
        if let Some(hex) = name
            .strip_suffix(SUFFIX)
            .filter(|h| !h.starts_with(SPARE_PREFIX))
        {
            match u64::from_str_radix(hex, 16) {
                Ok(start) if hex.len() == 16 => starts.push(start),
                _ => {
                    return Err(corrupt(
                        &dir.join(&name),
                        "unexpected file in the WAL directory",
                    ));
                }
            }
        }
    }
    starts.sort_unstable();
    Ok(starts)
}

fn spare_segments(dir: &Path) -> Result<Vec<PathBuf>> {
    Ok(file_names(dir)?
        .into_iter()
        .filter(|name| name.starts_with(SPARE_PREFIX) && name.ends_with(SUFFIX))
        .map(|name| dir.join(name))
        .collect())
}

fn file_names(dir: &Path) -> Result<Vec<String>> {
    let entries = fs::read_dir(dir).map_err(|e| io("listing", dir, &e))?;
    let mut names = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| io("listing", dir, &e))?;
        names.push(entry.file_name().to_string_lossy().into_owned());
    }
    Ok(names)
}

pub fn sync_dir(dir: &Path) -> Result<()> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| io("fsyncing directory", dir, &e))
}

/// Makes the segment starting at `start_lsn` exist, whole and durable, and
/// returns it open for writing. Reuses a spare segment if a checkpoint left one.
pub fn create(dir: &Path, segment_bytes: u64, start_lsn: u64) -> Result<File> {
    let path = segment_path(dir, start_lsn);
    if path.exists() {
        return open_for_write(&path);
    }
    let temp = dir.join(
        format!("{start_lsn:016x}.{:?}.tmp", std::thread::current().id()).replace(['(', ')'], ""),
    );
    match spare_segments(dir)?.first() {
        Some(spare) => fs::rename(spare, &temp).map_err(|e| io("reusing", spare, &e))?,
        None => zero_fill(&temp, segment_bytes)?,
    }
    let file = open_for_write(&temp)?;
    file.write_all_at(&header(segment_bytes, start_lsn), 0)
        .and_then(|_| file.sync_data())
        .map_err(|e| io("writing the header of", &temp, &e))?;
    if path.exists() {
        // Another thread prepared the same segment meanwhile; keep theirs.
        let _ = fs::remove_file(&temp);
        return open_for_write(&path);
    }
    fs::rename(&temp, &path).map_err(|e| io("renaming", &temp, &e))?;
    sync_dir(dir)?;
    Ok(file)
}

fn zero_fill(path: &Path, segment_bytes: u64) -> Result<()> {
    let result = (|| {
        let mut file = File::create(path)?;
        let zeros = vec![0u8; ZERO_CHUNK_BYTES];
        let mut left = segment_bytes;
        while left > 0 {
            let n = left.min(ZERO_CHUNK_BYTES as u64) as usize;
            file.write_all(&zeros[..n])?;
            left -= n as u64;
        }
        file.sync_all()
    })();
    result.map_err(|e| {
        let _ = fs::remove_file(path);
        io("preparing WAL segment", path, &e)
    })
}

pub fn open_for_write(path: &Path) -> Result<File> {
    OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .map_err(|e| io("opening", path, &e))
}

/// Turns a segment no longer needed into a spare, so the next segment costs a
/// rename instead of writing `segment_bytes` of zeroes. Beyond `max_spares` it
/// is deleted.
pub fn release(dir: &Path, start_lsn: u64, max_spares: usize) -> Result<()> {
    let path = segment_path(dir, start_lsn);
    if spare_segments(dir)?.len() < max_spares {
        let spare = dir.join(format!("{SPARE_PREFIX}{start_lsn:016x}{SUFFIX}"));
        fs::rename(&path, &spare).map_err(|e| io("recycling", &path, &e))
    } else {
        fs::remove_file(&path).map_err(|e| io("removing", &path, &e))
    }
}
