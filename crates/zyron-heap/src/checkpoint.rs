//! Checkpoint images and the control file.
//!
//! A checkpoint writes every row visible at one snapshot to an image file,
//! then points the control file at it together with the WAL position replay
//! must start from; after that the WAL before that position can go. Opening
//! the store loads the image and replays the WAL from there, so replay time
//! is bounded by the WAL written since the last checkpoint.
//!
//! Image layout (all integers little-endian; every section checksummed, so a
//! zeroed or damaged block is reported, never loaded):
//!
//! ```text
//! header   "ZCKP" | version u32 = 1 | snapshot_ts u64 | redo_lsn u64 | tables u32 | checksum u32
//! section  kind u8 | length u32 | body | checksum u32 (over kind, length and body)
//!   kind 1: a table definition (JSON); the rows that follow belong to it
//!   kind 2: rows: repeated (slot u64 | length u32 | row bytes)
//!   kind 3: end: total rows u64
//! ```
//!
//! Control file (`control`): checksum u32 | JSON of [`Control`]. It is
//! replaced atomically (write to a temporary file, fsync, rename, fsync the
//! directory), so it always names a complete image.

use std::fs::{self, File};
use std::io::{BufReader, BufWriter, Read, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use zyron_common::checksum::{checksum32, checksum32_of_parts};
use zyron_common::{Result, SqlState, ZyronError};

const MAGIC: &[u8; 4] = b"ZCKP";
const VERSION: u32 = 1;
const HEADER_BYTES: usize = 32;
const SECTION_TABLE: u8 = 1;
const SECTION_ROWS: u8 = 2;
const SECTION_END: u8 = 3;
/// Rows are grouped into sections of about this many bytes.
const ROWS_SECTION_BYTES: usize = 256 << 10;
/// A section longer than this is damage, not data (explicit limit on reads).
const MAX_SECTION_BYTES: usize = 64 << 20;
const CONTROL: &str = "control";

/// Where recovery starts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Control {
    /// The image file, relative to the data directory.
    pub image: String,
    pub snapshot_ts: u64,
    pub redo_lsn: u64,
    pub next_txn: u64,
    pub next_table_id: u64,
}

fn io(context: &str, path: &Path, e: &std::io::Error) -> ZyronError {
    ZyronError::io(&format!("{context} {}", path.display()), e)
}

fn damaged(path: &Path, what: String) -> ZyronError {
    ZyronError::new(
        SqlState::DATA_CORRUPTED,
        format!("checkpoint image {}: {what}", path.display()),
    )
    .with_hint("The image is damaged; restore the data directory from a backup.")
}

pub fn sync_dir(dir: &Path) -> Result<()> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| io("fsyncing directory", dir, &e))
}

/// Writes `bytes` to `path` durably and atomically.
pub fn replace_file(dir: &Path, name: &str, bytes: &[u8]) -> Result<()> {
    let path = dir.join(name);
    let temp = dir.join(format!("{name}.tmp"));
    let write = || -> std::io::Result<()> {
        let mut file = File::create(&temp)?;
        file.write_all(bytes)?;
        file.sync_all()
    };
    write().map_err(|e| io("writing", &temp, &e))?;
    fs::rename(&temp, &path).map_err(|e| io("renaming", &temp, &e))?;
    sync_dir(dir)
}

pub fn write_control(dir: &Path, control: &Control) -> Result<()> {
    let json = serde_json::to_vec(control).expect("control serialises");
    let mut bytes = checksum32(&json).to_le_bytes().to_vec();
    bytes.extend_from_slice(&json);
    replace_file(dir, CONTROL, &bytes)
}

pub fn read_control(dir: &Path) -> Result<Option<Control>> {
    let path = dir.join(CONTROL);
    let bytes = match fs::read(&path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io("reading", &path, &e)),
    };
    let corrupt = || {
        ZyronError::new(
            SqlState::DATA_CORRUPTED,
            format!("{} is damaged", path.display()),
        )
    };
    if bytes.len() < 4
        || u32::from_le_bytes(bytes[..4].try_into().unwrap()) != checksum32(&bytes[4..])
    {
        return Err(corrupt());
    }
    serde_json::from_slice(&bytes[4..])
        .map(Some)
        .map_err(|_| corrupt())
}

/// Streams an image to disk.
pub struct ImageWriter {
    path: PathBuf,
    file: BufWriter<File>,
    rows: Vec<u8>,
    total_rows: u64,
}

impl ImageWriter {
    pub fn create(path: &Path, snapshot_ts: u64, redo_lsn: u64, tables: u32) -> Result<Self> {
        let file = File::create(path).map_err(|e| io("creating", path, &e))?;
        let mut writer = ImageWriter {
            path: path.to_path_buf(),
            file: BufWriter::with_capacity(1 << 20, file),
            rows: Vec::new(),
            total_rows: 0,
        };
        let mut header = Vec::with_capacity(HEADER_BYTES);
        header.extend_from_slice(MAGIC);
        header.extend_from_slice(&VERSION.to_le_bytes());
        header.extend_from_slice(&snapshot_ts.to_le_bytes());
        header.extend_from_slice(&redo_lsn.to_le_bytes());
        header.extend_from_slice(&tables.to_le_bytes());
        let checksum = checksum32(&header);
        header.extend_from_slice(&checksum.to_le_bytes());
        writer.write(&header)?;
        Ok(writer)
    }

    fn write(&mut self, bytes: &[u8]) -> Result<()> {
        self.file
            .write_all(bytes)
            .map_err(|e| io("writing", &self.path, &e))
    }

    fn section(&mut self, kind: u8, body: &[u8]) -> Result<()> {
        let mut head = vec![kind];
        head.extend_from_slice(&(body.len() as u32).to_le_bytes());
        let checksum = checksum32_of_parts(&[&head, body]);
        self.write(&head)?;
        self.write(body)?;
        self.write(&checksum.to_le_bytes())
    }

    pub fn table(&mut self, def_json: &[u8]) -> Result<()> {
        self.flush_rows()?;
        self.section(SECTION_TABLE, def_json)
    }

    pub fn row(&mut self, slot: u64, row: &[u8]) -> Result<()> {
        self.rows.extend_from_slice(&slot.to_le_bytes());
        self.rows
            .extend_from_slice(&(row.len() as u32).to_le_bytes());
        self.rows.extend_from_slice(row);
        self.total_rows += 1;
        if self.rows.len() >= ROWS_SECTION_BYTES {
            self.flush_rows()?;
        }
        Ok(())
    }

    fn flush_rows(&mut self) -> Result<()> {
        if !self.rows.is_empty() {
            let rows = std::mem::take(&mut self.rows);
            self.section(SECTION_ROWS, &rows)?;
        }
        Ok(())
    }

    /// Ends the image and makes it durable; returns the rows written.
    pub fn finish(mut self) -> Result<u64> {
        self.flush_rows()?;
        let total = self.total_rows;
        self.section(SECTION_END, &total.to_le_bytes())?;
        let file = self
            .file
            .into_inner()
            .map_err(|e| io("writing", &self.path, e.error()))?;
        file.sync_all()
            .map_err(|e| io("fsyncing", &self.path, &e))?;
        Ok(total)
    }
}

/// What an image holds, section by section.
pub enum Entry<'a> {
    Table(&'a [u8]),
    Row { slot: u64, row: &'a [u8] },
}

/// Reads an image, checking every checksum; returns `(snapshot_ts, redo_lsn, rows)`.
pub fn read_image(
    path: &Path,
    mut visit: impl FnMut(Entry<'_>) -> Result<()>,
) -> Result<(u64, u64, u64)> {
    let file = File::open(path).map_err(|e| io("opening", path, &e))?;
    let mut reader = BufReader::with_capacity(1 << 20, file);
    let mut header = [0u8; HEADER_BYTES];
    reader
        .read_exact(&mut header)
        .map_err(|_| damaged(path, "the header is cut short".into()))?;
    if &header[..4] != MAGIC
        || u32::from_le_bytes(header[28..32].try_into().unwrap()) != checksum32(&header[..28])
    {
        return Err(damaged(path, "the header is damaged".into()));
    }
    let version = u32::from_le_bytes(header[4..8].try_into().unwrap());
    if version != VERSION {
        return Err(ZyronError::not_supported(format!(
            "{}: checkpoint image version {version} is not readable by this build",
            path.display()
        )));
    }
    let snapshot_ts = u64::from_le_bytes(header[8..16].try_into().unwrap());
    let redo_lsn = u64::from_le_bytes(header[16..24].try_into().unwrap());
    let mut offset = HEADER_BYTES as u64;
    let mut rows = 0u64;
    let mut body = Vec::new();
    loop {
        let mut head = [0u8; 5];
        reader
            .read_exact(&mut head)
            .map_err(|_| damaged(path, format!("the image ends early at byte {offset}")))?;
        let len = u32::from_le_bytes(head[1..5].try_into().unwrap()) as usize;
        if len > MAX_SECTION_BYTES {
            return Err(damaged(
                path,
                format!("the section at byte {offset} is damaged (length {len})"),
            ));
        }
        body.resize(len + 4, 0);
        reader
            .read_exact(&mut body)
            .map_err(|_| damaged(path, format!("the section at byte {offset} is cut short")))?;
        let stored = u32::from_le_bytes(body[len..].try_into().unwrap());
        if stored != checksum32_of_parts(&[&head, &body[..len]]) {
            return Err(damaged(
                path,
                format!("the section at byte {offset} is damaged (checksum mismatch)"),
            ));
        }
        let content = &body[..len];
        match head[0] {
            SECTION_TABLE => visit(Entry::Table(content))?,
            SECTION_ROWS => rows += visit_rows(path, offset, content, &mut visit)?,
            SECTION_END if len == 8 => {
                let total = u64::from_le_bytes(content.try_into().unwrap());
                if total != rows {
                    return Err(damaged(
                        path,
                        format!("it promises {total} rows but holds {rows}"),
                    ));
                }
                return Ok((snapshot_ts, redo_lsn, rows));
            }
            kind => {
                return Err(damaged(
                    path,
                    format!("unknown section kind {kind} at byte {offset}"),
                ));
            }
        }
        offset += 5 + len as u64 + 4;
    }
}

fn visit_rows(
    path: &Path,
    offset: u64,
    content: &[u8],
    visit: &mut impl FnMut(Entry<'_>) -> Result<()>,
) -> Result<u64> {
    let mut reader = crate::redo::Reader::new(content);
    let mut count = 0;
    while !reader.is_empty() {
        let slot = reader
            .u64()
            .map_err(|_| damaged(path, format!("rows at byte {offset} are malformed")))?;
        let row = reader
            .bytes()
            .map_err(|_| damaged(path, format!("rows at byte {offset} are malformed")))?;
        visit(Entry::Row { slot, row })?;
        count += 1;
    }
    Ok(count)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn images_round_trip_and_a_zeroed_block_is_reported() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("image");
        let mut writer = ImageWriter::create(&path, 77, 4096, 1).unwrap();
        writer.table(b"{\"t\":1}").unwrap();
        for slot in 0..20_000u64 {
            writer.row(slot, &slot.to_le_bytes().repeat(3)).unwrap();
        }
        assert_eq!(writer.finish().unwrap(), 20_000);
        let mut seen = 0u64;
        let (ts, redo, rows) = read_image(&path, |entry| {
            if let Entry::Row { slot, row } = entry {
                assert_eq!(row, slot.to_le_bytes().repeat(3));
                seen += 1;
            }
            Ok(())
        })
        .unwrap();
        assert_eq!((ts, redo, rows, seen), (77, 4096, 20_000, 20_000));

        let mut bytes = fs::read(&path).unwrap();
        bytes[200_000..204_096].fill(0);
        fs::write(&path, &bytes).unwrap();
        let err = read_image(&path, |_| Ok(())).unwrap_err();
        assert_eq!(err.sqlstate(), SqlState::DATA_CORRUPTED);
        assert!(err.message().contains("damaged"), "{err}");
        fs::write(&path, &bytes[..1000]).unwrap();
        assert_eq!(
            read_image(&path, |_| Ok(())).unwrap_err().sqlstate(),
            SqlState::DATA_CORRUPTED
        );
    }

    #[test]
    fn control_is_replaced_atomically_and_checked() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(read_control(dir.path()).unwrap(), None);
        let control = Control {
            image: "checkpoint-1.zck".into(),
            snapshot_ts: 5,
            redo_lsn: 32,
            next_txn: 9,
            next_table_id: 3,
        };
        write_control(dir.path(), &control).unwrap();
        assert_eq!(read_control(dir.path()).unwrap(), Some(control));
        let path = dir.path().join(CONTROL);
        let mut bytes = fs::read(&path).unwrap();
        let last = bytes.len() - 2;
        bytes[last] ^= 1;
        fs::write(&path, bytes).unwrap();
        assert_eq!(
            read_control(dir.path()).unwrap_err().sqlstate(),
            SqlState::DATA_CORRUPTED
        );
    }
}
