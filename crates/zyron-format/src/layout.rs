//! The file layout of SPEC.md: header, trailer, footer and column records.

use std::collections::HashMap;
use std::sync::Arc;

use arrow::datatypes::{Schema, SchemaRef};

use crate::encodings::vector_count;
use crate::error::{FormatError, Result, corrupt};
use crate::io::{ByteReader, ByteWriter, checksum32};
use crate::stats::{Stat, ZoneMap};
use crate::types::{ColumnNode, MAX_COLUMNS, column_nodes, read_field, write_field};

/// First and last four bytes of every `.zyr` file.
pub const MAGIC: [u8; 4] = *b"ZYRF";
/// Readers refuse files of another major version.
pub const VERSION_MAJOR: u16 = 1;
/// Readers accept newer minor versions; these only add encodings, types and trailing fields.
pub const VERSION_MINOR: u16 = 1;
pub const HEADER_LEN: u64 = 16;
pub const TRAILER_LEN: u64 = 24;
/// Rows per block for top-level columns (64 vectors).
pub const DEFAULT_BLOCK_ROWS: usize = 64 * 1024;
/// Largest footer a reader accepts (bytes).
pub const MAX_FOOTER_BYTES: u64 = 256 << 20;
/// Largest column record a reader accepts (bytes).
pub const MAX_COLUMN_RECORD_BYTES: u64 = 256 << 20;
/// Largest block a reader accepts (bytes).
pub const MAX_BLOCK_BYTES: u64 = 1 << 31;

pub(crate) fn header() -> [u8; HEADER_LEN as usize] {
    let mut h = [0u8; HEADER_LEN as usize];
    h[..4].copy_from_slice(&MAGIC);
    h[4..6].copy_from_slice(&VERSION_MAJOR.to_le_bytes());
    h[6..8].copy_from_slice(&VERSION_MINOR.to_le_bytes());
    h
}

/// The last 24 bytes of a file.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Trailer {
    pub footer_offset: u64,
    pub footer_len: u32,
    pub footer_checksum: u32,
    pub major: u16,
    pub minor: u16,
}

impl Trailer {
    pub(crate) fn to_bytes(self) -> Vec<u8> {
        let mut w = ByteWriter::default();
        w.u64(self.footer_offset);
        w.u32(self.footer_len);
        w.u32(self.footer_checksum);
        w.u16(self.major);
        w.u16(self.minor);
        w.buf.extend_from_slice(&MAGIC);
        w.buf
    }

    pub(crate) fn parse(bytes: &[u8], file_len: u64) -> Result<Trailer> {
        let mut r = ByteReader::new(bytes, "trailer");
        let t = Trailer {
            footer_offset: r.u64()?,
            footer_len: r.u32()?,
            footer_checksum: r.u32()?,
            major: r.u16()?,
            minor: r.u16()?,
        };
        if r.take(4)? != MAGIC {
            return corrupt("not a .zyr file: the last 4 bytes are not \"ZYRF\"");
        }
        if t.major != VERSION_MAJOR {
            return Err(FormatError::Unsupported(format!(
                "file format version {}.{}; this reader reads major version {VERSION_MAJOR}",
                t.major, t.minor
            )));
        }
        let footer_end = t.footer_offset.checked_add(u64::from(t.footer_len));
        if t.footer_offset < HEADER_LEN
            || footer_end != Some(file_len - TRAILER_LEN)
            || u64::from(t.footer_len) > MAX_FOOTER_BYTES
        {
            return corrupt(format!(
                "footer at {} of {} bytes does not end where the trailer starts",
                t.footer_offset, t.footer_len
            ));
        }
        Ok(t)
    }
}

/// Where one column record lives (16 bytes per column in the footer, so opening a file with
/// many columns parses no per-column detail).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ColumnRecordRef {
    pub offset: u64,
    pub len: u32,
    pub checksum: u32,
}

/// Everything the footer holds.
#[derive(Debug)]
pub struct Footer {
    pub schema: SchemaRef,
    pub num_rows: u64,
    pub nodes: Vec<ColumnNode>,
    pub columns: Vec<ColumnRecordRef>,
    /// Node index of each top-level field.
    pub roots: Vec<usize>,
}

impl Footer {
    pub(crate) fn write(
        schema: &Schema,
        num_rows: u64,
        columns: &[ColumnRecordRef],
    ) -> Result<Vec<u8>> {
        let mut w = ByteWriter::default();
        w.uvarint(num_rows);
        w.uvarint(schema.fields().len() as u64);
        for f in schema.fields() {
            write_field(&mut w, f)?;
        }
        w.uvarint(schema.metadata().len() as u64);
        let mut metadata: Vec<_> = schema.metadata().iter().collect();
        metadata.sort();
        for (k, v) in metadata {
            w.bytes(k.as_bytes());
            w.bytes(v.as_bytes());
        }
        w.uvarint(columns.len() as u64);
        for c in columns {
            w.u64(c.offset);
            w.u32(c.len);
            w.u32(c.checksum);
        }
        Ok(w.buf)
    }

    pub(crate) fn parse(bytes: &[u8], data_end: u64) -> Result<Footer> {
        let mut r = ByteReader::new(bytes, "footer");
        let num_rows = r.uvarint()?;
        let field_count = r.uvarint_max(MAX_COLUMNS, "field count")?;
        let fields = (0..field_count)
            .map(|_| read_field(&mut r, 0))
            .collect::<Result<Vec<_>>>()?;
        let metadata_count = r.uvarint_max(r.remaining() as u64, "metadata count")?;
        let mut metadata = HashMap::new();
        for _ in 0..metadata_count {
            let k = r.string()?;
            metadata.insert(k, r.string()?);
        }
        let schema = Arc::new(Schema::new_with_metadata(fields, metadata));
        let nodes = column_nodes(&schema).map_err(|e| FormatError::Corrupt(e.to_string()))?;
        let column_count = r.uvarint_max(MAX_COLUMNS, "column count")?;
        if column_count != nodes.len() {
            return corrupt(format!(
                "footer lists {column_count} column records for {} column nodes",
                nodes.len()
            ));
        }
        let mut columns = Vec::with_capacity(column_count);
        for _ in 0..column_count {
            let c = ColumnRecordRef {
                offset: r.u64()?,
                len: r.u32()?,
                checksum: r.u32()?,
            };
            if c.offset < HEADER_LEN
                || c.offset
                    .checked_add(u64::from(c.len))
                    .is_none_or(|end| end > data_end)
            {
                return corrupt(format!(
                    "column record at {} of {} bytes lies outside the file",
                    c.offset, c.len
                ));
            }
            columns.push(c);
        }
        let mut roots = Vec::with_capacity(schema.fields().len());
        let mut next = 0;
        for _ in schema.fields() {
            roots.push(next);
            next = subtree_end(&nodes, next);
        }
        Ok(Footer {
            schema,
            num_rows,
            nodes,
            columns,
            roots,
        })
    }
}

fn subtree_end(nodes: &[ColumnNode], index: usize) -> usize {
    nodes[index]
        .children
        .last()
        .map_or(index + 1, |last| subtree_end(nodes, *last))
}

/// Where a block's bloom filter lives.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BloomRef {
    pub offset: u64,
    pub len: u32,
    pub checksum: u32,
}

/// One block of one column.
#[derive(Clone, Debug, PartialEq)]
pub struct BlockMeta {
    pub offset: u64,
    pub len: u32,
    pub checksum: u32,
    /// Values (rows, for a top-level column) in the block.
    pub values: u64,
    /// For a list column: index in the child column of this block's first element.
    pub first_child: u64,
    pub bloom: Option<BloomRef>,
    /// One zone map per 1024-value vector.
    pub zones: Vec<ZoneMap>,
}

/// A column record: the column's blocks, zone maps and file-level statistics.
#[derive(Clone, Debug, PartialEq)]
pub struct ColumnMeta {
    pub values: u64,
    pub nulls: u64,
    pub stat: Stat,
    pub blocks: Vec<BlockMeta>,
    /// Index of each block's first value (prefix sums of `blocks[i].values`), plus the total.
    pub block_starts: Vec<u64>,
    /// Each block's zone map, its vectors' merged: derived when the record is read, not
    /// stored, so a scan can rule a block out without touching its vectors' zone maps.
    pub block_zones: Vec<ZoneMap>,
}

/// The zone map of all of `zones`' values.
fn merge_all(zones: &[ZoneMap]) -> ZoneMap {
    zones.iter().fold(ZoneMap::EMPTY, |acc, z| acc.merge(z))
}

impl ColumnMeta {
    pub(crate) fn new(blocks: Vec<BlockMeta>) -> ColumnMeta {
        let block_zones: Vec<ZoneMap> = blocks.iter().map(|b| merge_all(&b.zones)).collect();
        let file = merge_all(&block_zones);
        let mut block_starts = Vec::with_capacity(blocks.len() + 1);
        let mut at = 0;
        for b in &blocks {
            block_starts.push(at);
            at += b.values;
        }
        block_starts.push(at);
        ColumnMeta {
            values: file.values,
            nulls: file.nulls,
            stat: file.stat,
            blocks,
            block_starts,
            block_zones,
        }
    }

    pub(crate) fn write(&self) -> Vec<u8> {
        let mut w = ByteWriter::default();
        w.uvarint(self.values);
        w.uvarint(self.nulls);
        self.stat.write(&mut w);
        w.uvarint(self.blocks.len() as u64);
        for b in &self.blocks {
            w.u64(b.offset);
            w.u32(b.len);
            w.u32(b.checksum);
            w.uvarint(b.values);
            w.uvarint(b.first_child);
            let bloom = b.bloom.unwrap_or(BloomRef {
                offset: 0,
                len: 0,
                checksum: 0,
            });
            w.u64(bloom.offset);
            w.u32(bloom.len);
            w.u32(bloom.checksum);
            for z in &b.zones {
                z.write(&mut w);
            }
        }
        w.buf
    }

    pub(crate) fn parse(bytes: &[u8], data_end: u64) -> Result<ColumnMeta> {
        let mut r = ByteReader::new(bytes, "column record");
        let values = r.uvarint()?;
        let nulls = r.uvarint()?;
        // The stored file statistic is parsed but not trusted: the zone maps determine it
        // (SPEC.md 2.9), and writers before that rule could store a bound that a zone
        // without one did not honour.
        let _stored_stat = Stat::read(&mut r)?;
        // Each block entry takes at least 31 bytes, which bounds the count by the record's size.
        let block_count = r.uvarint_max(r.remaining() as u64 / 31, "block count")?;
        let mut blocks = Vec::with_capacity(block_count);
        for _ in 0..block_count {
            let offset = r.u64()?;
            let len = r.u32()?;
            let checksum = r.u32()?;
            let block_values = r.uvarint_max(
                crate::encodings::MAX_STREAM_VALUES as u64,
                "block value count",
            )? as u64;
            let first_child = r.uvarint()?;
            let bloom = BloomRef {
                offset: r.u64()?,
                len: r.u32()?,
                checksum: r.u32()?,
            };
            if offset < HEADER_LEN
                || offset
                    .checked_add(u64::from(len))
                    .is_none_or(|end| end > data_end)
            {
                return corrupt(format!(
                    "block at {offset} of {len} bytes lies outside the file"
                ));
            }
            if bloom.len > 0
                && bloom
                    .offset
                    .checked_add(u64::from(bloom.len))
                    .is_none_or(|end| end > data_end)
            {
                return corrupt("bloom filter lies outside the file");
            }
            let zone_count = vector_count(block_values as usize);
            if zone_count > r.remaining() {
                return corrupt(format!(
                    "column record too short for {zone_count} zone maps"
                ));
            }
            let zones = (0..zone_count)
                .map(|_| ZoneMap::read(&mut r))
                .collect::<Result<Vec<_>>>()?;
            if zones.iter().map(|z| z.values).sum::<u64>() != block_values {
                return corrupt("zone maps do not add up to the block's values");
            }
            blocks.push(BlockMeta {
                offset,
                len,
                checksum,
                values: block_values,
                first_child,
                bloom: (bloom.len > 0).then_some(bloom),
                zones,
            });
        }
        let meta = ColumnMeta::new(blocks);
        if meta.values != values || meta.nulls != nulls {
            return corrupt(format!(
                "column record says {values} values and {nulls} nulls, its blocks {} and {}",
                meta.values, meta.nulls
            ));
        }
        Ok(meta)
    }
}

/// Checks `bytes` against a stored 32-bit checksum.
///
/// Fuzzing builds (`cfg(fuzzing)`, set by cargo-fuzz) skip the comparison: otherwise nearly every
/// mutated input would stop at a checksum and the decoders behind it would go unexplored.
pub(crate) fn verify(what: impl FnOnce() -> String, bytes: &[u8], stored: u32) -> Result<()> {
    if cfg!(fuzzing) {
        return Ok(());
    }
    let computed = checksum32(bytes);
    if computed != stored {
        return Err(FormatError::Checksum {
            what: what(),
            stored,
            computed,
        });
    }
    Ok(())
}
