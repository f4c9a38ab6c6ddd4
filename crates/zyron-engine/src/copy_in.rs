//! `COPY table [(columns)] FROM STDIN`: rows arriving in CopyData messages,
//! in PostgreSQL's text or CSV format, written a batch at a time to a heap
//! table through the session's transaction, or to a lake table as data
//! files that one commit adds when the copy ends.
//!
//! Errors (a malformed row, a value of the wrong type, a constraint) are
//! kept and reported once the client ends the copy, as PostgreSQL does; the
//! statement then writes nothing.

use std::sync::Arc;

use datafusion::arrow::array::{
    ArrayRef, RecordBatch, RecordBatchOptions, StringArray, new_null_array,
};
use datafusion::arrow::compute::{CastOptions, cast_with_options};
use datafusion::arrow::datatypes::DataType;
use datafusion::arrow::datatypes::SchemaRef;
use zyron_common::{Result, SqlState, ZyronError};
use zyron_heap::Transaction;
use zyron_heap::table::HeapTable;
use zyron_lake::{Action, LakeTable, Snapshot};

/// Where a COPY's rows go.
pub enum CopyTarget {
    Heap(Arc<HeapTable>),
    /// A lake table from the version the copy started on; the files written
    /// so far wait for one commit at the end.
    Lake {
        table: LakeTable,
        schema: SchemaRef,
        base: Box<Snapshot>,
        added: Vec<Action>,
    },
}

impl CopyTarget {
    fn schema(&self) -> SchemaRef {
        match self {
            CopyTarget::Heap(table) => table.codec().schema().clone(),
            CopyTarget::Lake { schema, .. } => schema.clone(),
        }
    }
}

/// Rows gathered before they are written.
const BATCH_ROWS: usize = 8192;
/// A row longer than this is refused rather than buffered without end.
const MAX_ROW_BYTES: usize = 64 << 20;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CopyFormat {
    /// PostgreSQL's text format: delimiter (tab), `\N` for NULL, backslash escapes.
    Text { delimiter: u8, null: String },
    /// CSV: quoted fields, an unquoted empty field is NULL (or `null`).
    Csv {
        delimiter: u8,
        quote: u8,
        null: String,
        header: bool,
    },
}

impl Default for CopyFormat {
    fn default() -> Self {
        CopyFormat::Text {
            delimiter: b'\t',
            null: "\\N".into(),
        }
    }
}

/// A COPY FROM STDIN in progress.
pub struct CopyIn {
    target: CopyTarget,
    /// Table columns the input's fields fill, in input order.
    columns: Vec<usize>,
    format: CopyFormat,
    pending: Vec<u8>,
    rows: Vec<Vec<Option<String>>>,
    skip_header: bool,
    ended: bool,
    line: u64,
    written: u64,
    error: Option<ZyronError>,
}

impl CopyIn {
    pub fn new(target: CopyTarget, columns: Vec<usize>, format: CopyFormat) -> Self {
        let skip_header = matches!(format, CopyFormat::Csv { header: true, .. });
        Self {
            target,
            columns,
            format,
            pending: Vec::new(),
            rows: Vec::new(),
            skip_header,
            ended: false,
            line: 0,
            written: 0,
            error: None,
        }
    }

    pub fn column_count(&self) -> usize {
        self.columns.len()
    }

    /// Takes one CopyData payload; writes full batches through `txn`.
    pub async fn data(&mut self, txn: &mut Transaction, bytes: &[u8]) {
        if self.error.is_some() || self.ended {
            return;
        }
        self.pending.extend_from_slice(bytes);
        if let Err(error) = self.parse_complete_rows() {
            self.fail(error);
            return;
        }
        if self.rows.len() >= BATCH_ROWS
            && let Err(error) = self.write(txn).await
        {
            self.fail(error);
        }
    }

    /// The client ended the copy: writes what is left; returns the row count
    /// or the first error met.
    pub async fn finish(mut self, txn: &mut Transaction) -> Result<u64> {
        if self.error.is_none() && !self.pending.is_empty() && !self.ended {
            self.pending.push(b'\n');
            if let Err(error) = self.parse_complete_rows() {
                self.fail(error);
            }
        }
        if let Some(error) = self.error.take() {
            return Err(error);
        }
        self.write(txn).await?;
        if let CopyTarget::Lake {
            table, base, added, ..
        } = &mut self.target
            && !added.is_empty()
        {
            table.commit(base, "copy", std::mem::take(added)).await?;
        }
        Ok(self.written)
    }

    fn fail(&mut self, error: ZyronError) {
        self.error.get_or_insert(error);
        self.pending.clear();
        self.rows.clear();
    }

    fn parse_complete_rows(&mut self) -> Result<()> {
        let mut consumed = 0;
        while !self.ended {
            let rest = &self.pending[consumed..];
            let parsed = match &self.format {
                CopyFormat::Text { delimiter, null } => text_row(rest, *delimiter, null),
                CopyFormat::Csv {
                    delimiter,
                    quote,
                    null,
                    ..
                } => csv_row(rest, *delimiter, *quote, null),
            };
            let Some((fields, used)) = parsed? else {
                if rest.len() > MAX_ROW_BYTES {
                    return Err(ZyronError::new(
                        SqlState::PROGRAM_LIMIT_EXCEEDED,
                        "COPY row exceeds 64 MiB",
                    ));
                }
                break;
            };
            consumed += used;
            self.line += 1;
            match fields {
                Row::End => self.ended = true,
                Row::Fields(_) if self.skip_header => self.skip_header = false,
                Row::Fields(fields) => {
                    if fields.len() != self.columns.len() {
                        return Err(ZyronError::new(
                            SqlState::BAD_COPY_FILE_FORMAT,
                            format!(
                                "{} data for column {} (line {}: {} fields, {} expected)",
                                if fields.len() < self.columns.len() {
                                    "missing"
                                } else {
                                    "extra"
                                },
                                fields.len().min(self.columns.len()) + 1,
                                self.line,
                                fields.len(),
                                self.columns.len()
                            ),
                        ));
                    }
                    self.rows.push(fields);
                }
            }
        }
        self.pending.drain(..consumed);
        Ok(())
    }

    /// Converts the gathered rows to the table's types and inserts them.
    async fn write(&mut self, txn: &mut Transaction) -> Result<()> {
        if self.rows.is_empty() {
            return Ok(());
        }
        let rows = std::mem::take(&mut self.rows);
        let schema = self.target.schema();
        let mut columns: Vec<ArrayRef> = schema
            .fields()
            .iter()
            .map(|f| new_null_array(f.data_type(), rows.len()))
            .collect();
        for (input, &column) in self.columns.iter().enumerate() {
            let text = StringArray::from_iter(rows.iter().map(|r| r[input].as_deref()));
            let field = schema.field(column);
            columns[column] = convert(&text, field.data_type(), field.name())?;
        }
        let options = RecordBatchOptions::new().with_row_count(Some(rows.len()));
        let lenient = crate::heap::lenient(&schema);
        let batch = RecordBatch::try_new_with_options(lenient, columns, &options)
            .map_err(|e| ZyronError::internal(e.to_string()))?;
        match &mut self.target {
            CopyTarget::Heap(table) => self.written += txn.insert(table, &batch).await?,
            CopyTarget::Lake {
                table,
                schema,
                base,
                added,
            } => {
                let batch = crate::lake::conform_checked(schema, &batch)?;
                let limit = base.metadata.inline_max_bytes();
                added.push(Action::Add(table.write_data_file(&[batch], limit).await?));
                self.written += rows.len() as u64;
            }
        }
        Ok(())
    }
}

/// Text to the column's type; a value that does not parse is 22P02.
fn convert(text: &StringArray, data_type: &DataType, column: &str) -> Result<ArrayRef> {
    let options = CastOptions {
        safe: false,
        ..Default::default()
    };
    cast_with_options(text, data_type, &options).map_err(|e| {
        ZyronError::new(
            SqlState::INVALID_TEXT_REPRESENTATION,
            format!("invalid input syntax for type {data_type} in column \"{column}\": {e}"),
        )
    })
}

enum Row {
    Fields(Vec<Option<String>>),
    /// `\.` on a line of its own: the end of the data.
    End,
}

/// One line of the text format, if a whole line is there: `(row, bytes used)`.
fn text_row(bytes: &[u8], delimiter: u8, null: &str) -> Result<Option<(Row, usize)>> {
    let Some(end) = bytes.iter().position(|&b| b == b'\n') else {
        return Ok(None);
    };
    let mut line = &bytes[..end];
    if line.last() == Some(&b'\r') {
        line = &line[..line.len() - 1];
    }
    if line == b"\\." {
        return Ok(Some((Row::End, end + 1)));
    }
    let fields = line
        .split(|&b| b == delimiter)
        .map(|raw| {
            if raw == null.as_bytes() {
                Ok(None)
            } else {
                unescape(raw).map(Some)
            }
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(Some((Row::Fields(fields), end + 1)))
}

/// Backslash escapes of the text format.
fn unescape(raw: &[u8]) -> Result<String> {
    if !raw.contains(&b'\\') {
        return utf8(raw.to_vec());
    }
    let mut out = Vec::with_capacity(raw.len());
    let mut i = 0;
    while i < raw.len() {
        if raw[i] != b'\\' || i + 1 == raw.len() {
            out.push(raw[i]);
            i += 1;
            continue;
        }
        let c = raw[i + 1];
        i += 2;
        match c {
            b'b' => out.push(8),
            b'f' => out.push(12),
            b'n' => out.push(b'\n'),
            b'r' => out.push(b'\r'),
            b't' => out.push(b'\t'),
            b'v' => out.push(11),
            b'0'..=b'7' => {
                let mut value = u32::from(c - b'0');
                for _ in 0..2 {
                    match raw.get(i) {
                        Some(&d @ b'0'..=b'7') => {
                            value = value * 8 + u32::from(d - b'0');
                            i += 1;
                        }
                        _ => break,
                    }
                }
                out.push(value as u8);
            }
            b'x' => {
                let digits: Vec<u8> = raw[i..]
                    .iter()
                    .take(2)
                    .take_while(|d| d.is_ascii_hexdigit())
                    .copied()
                    .collect();
                i += digits.len();
                let text = std::str::from_utf8(&digits).unwrap_or("0");
                out.push(
                    u8::from_str_radix(if text.is_empty() { "0" } else { text }, 16).unwrap_or(0),
                );
            }
            other => out.push(other),
        }
    }
    utf8(out)
}

fn utf8(bytes: Vec<u8>) -> Result<String> {
    String::from_utf8(bytes).map_err(|_| {
        ZyronError::new(
            SqlState::CHARACTER_NOT_IN_REPERTOIRE,
            "invalid byte sequence for encoding \"UTF8\"",
        )
    })
}

/// One CSV record, if a whole one is there (quoted fields may span lines).
fn csv_row(bytes: &[u8], delimiter: u8, quote: u8, null: &str) -> Result<Option<(Row, usize)>> {
    let mut fields = Vec::new();
    let mut field = Vec::new();
    let mut quoted = false;
    let mut was_quoted = false;
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        if quoted {
            if b == quote {
                if bytes.get(i + 1) == Some(&quote) {
                    field.push(quote);
                    i += 2;
                    continue;
                }
                if i + 1 == bytes.len() {
                    return Ok(None);
                }
                quoted = false;
            } else {
                field.push(b);
            }
            i += 1;
            continue;
        }
        match b {
            _ if b == quote => {
                quoted = true;
                was_quoted = true;
            }
            _ if b == delimiter => {
                fields.push(csv_field(std::mem::take(&mut field), was_quoted, null)?);
                was_quoted = false;
            }
            b'\n' => {
                if field.last() == Some(&b'\r') {
                    field.pop();
                }
                if fields.is_empty() && !was_quoted && field == b"\\." {
                    return Ok(Some((Row::End, i + 1)));
                }
                fields.push(csv_field(field, was_quoted, null)?);
                return Ok(Some((Row::Fields(fields), i + 1)));
            }
            _ => field.push(b),
        }
        i += 1;
    }
    Ok(None)
}

fn csv_field(bytes: Vec<u8>, quoted: bool, null: &str) -> Result<Option<String>> {
    if !quoted && bytes == null.as_bytes() {
        return Ok(None);
    }
    utf8(bytes).map(Some)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fields(row: Row) -> Vec<Option<String>> {
        match row {
            Row::Fields(f) => f,
            Row::End => panic!("not a row"),
        }
    }

    #[test]
    fn text_format_splits_unescapes_and_knows_null() {
        let (row, used) = text_row(b"1\tab\\tc\t\\N\t\\101\\x41\nnext", b'\t', "\\N")
            .unwrap()
            .unwrap();
        assert_eq!(used, 20);
        assert_eq!(
            fields(row),
            vec![
                Some("1".into()),
                Some("ab\tc".into()),
                None,
                Some("AA".into())
            ]
        );
        assert!(text_row(b"no newline yet", b'\t', "\\N").unwrap().is_none());
        assert!(matches!(
            text_row(b"\\.\r\n", b'\t', "\\N").unwrap().unwrap().0,
            Row::End
        ));
        assert_eq!(
            fields(text_row(b"\t\n", b'\t', "\\N").unwrap().unwrap().0),
            vec![Some(String::new()), Some(String::new())]
        );
    }

    #[test]
    fn csv_quotes_span_lines_and_empty_unquoted_is_null() {
        let input = b"1,\"a \"\"quoted\"\"\nline\",,\"\"\n";
        let (row, used) = csv_row(input, b',', b'"', "").unwrap().unwrap();
        assert_eq!(used, input.len());
        assert_eq!(
            fields(row),
            vec![
                Some("1".into()),
                Some("a \"quoted\"\nline".into()),
                None,
                Some(String::new())
            ]
        );
        assert!(csv_row(b"1,\"open", b',', b'"', "").unwrap().is_none());
    }

    #[test]
    fn bad_values_are_22p02() {
        let text = StringArray::from(vec![Some("12"), Some("x")]);
        let err = convert(&text, &DataType::Int32, "n").unwrap_err();
        assert_eq!(err.sqlstate(), SqlState::INVALID_TEXT_REPRESENTATION);
        assert!(err.message().contains("\"n\""), "{err}");
    }
}
