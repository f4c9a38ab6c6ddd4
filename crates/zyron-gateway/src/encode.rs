//! Engine results and errors as pgwire responses.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use datafusion::arrow::array::RecordBatch;

use arrow_pg::datatypes::{arrow_schema_to_pg_fields, encode_recordbatch};
use datafusion::arrow::datatypes::Schema;
use futures::{StreamExt, stream};
use pgwire::api::portal::Format;
use pgwire::api::results::{CopyResponse, FieldInfo, QueryResponse, Response, Tag};
use pgwire::error::{ErrorInfo, PgWireError, PgWireResult};
use pgwire::messages::data::DataRow;

use zyron_common::ZyronError;
use zyron_engine::{CommandTag, StatementResult, TransactionEffect, to_zyron_error};

/// The ErrorResponse fields for an engine error.
pub fn error_info(err: &ZyronError) -> ErrorInfo {
    let mut info = ErrorInfo::new(
        "ERROR".to_owned(),
        err.sqlstate().code().to_owned(),
        err.message().to_owned(),
    );
    info.hint = err.hint().map(str::to_owned);
    info
}

pub fn to_pgwire_error(err: ZyronError) -> PgWireError {
    PgWireError::UserError(Box::new(error_info(&err)))
}

/// The wire tag of a command (`COPY 5`, `INSERT 0 1`).
pub fn wire_tag(tag: &CommandTag) -> Tag {
    let mut wire_tag = Tag::new(&tag.command);
    if tag.command == "INSERT" {
        wire_tag = wire_tag.with_oid(0);
    }
    if let Some(rows) = tag.rows {
        wire_tag = wire_tag.with_rows(rows as usize);
    }
    wire_tag
}

/// Column descriptions for a result schema in the client's requested formats.
pub fn fields(schema: &Schema, format: &Format) -> PgWireResult<Vec<FieldInfo>> {
    arrow_schema_to_pg_fields(schema, format, None)
}

pub fn response(result: StatementResult, format: &Format) -> PgWireResult<Response> {
    match result {
        StatementResult::Command(tag) => Ok(command_response(tag)),
        // COPY FROM STDIN: the client now sends CopyData (text format, code 0).
        StatementResult::CopyIn { columns } => Ok(Response::CopyIn(CopyResponse::new(
            0,
            columns,
            stream::empty(),
        ))),
        StatementResult::Rows { schema, stream } => {
            let fields = Arc::new(fields(&schema, format)?);
            let row_fields = Arc::clone(&fields);
            let rows = stream
                .map(
                    move |batch| -> Box<dyn Iterator<Item = PgWireResult<DataRow>> + Send + Sync> {
                        match batch {
                            Ok(batch) => encode_batch(Arc::clone(&row_fields), batch),
                            // Errors found while producing rows (division by zero,
                            // bad casts) keep their SQLSTATE.
                            Err(e) => {
                                Box::new(std::iter::once(Err(to_pgwire_error(to_zyron_error(e)))))
                            }
                        }
                    },
                )
                .flat_map(stream::iter);
            Ok(Response::Query(QueryResponse::new(fields, rows)))
        }
    }
}

/// Encodes one batch into DataRows. A panic inside the encoder (a type it
/// does not expect) becomes an XX000 error for this query instead of taking
/// the connection down.
fn encode_batch(
    fields: Arc<Vec<FieldInfo>>,
    batch: RecordBatch,
) -> Box<dyn Iterator<Item = PgWireResult<DataRow>> + Send + Sync> {
    let batch = match crate::float_text::floats_as_text(batch, &fields) {
        Ok(batch) => batch,
        Err(e) => {
            return Box::new(std::iter::once(Err(to_pgwire_error(ZyronError::internal(
                format!("could not encode floats as text: {e}"),
            )))));
        }
    };
    let encoded = std::panic::catch_unwind(AssertUnwindSafe(|| {
        encode_recordbatch(fields, batch).collect::<Vec<_>>()
    }));
    match encoded {
        Ok(rows) => Box::new(rows.into_iter()),
        Err(_) => Box::new(std::iter::once(Err(to_pgwire_error(ZyronError::internal(
            "could not encode a result row for the client",
        ))))),
    }
}

pub fn command_response(tag: CommandTag) -> Response {
    if tag.command.is_empty() {
        return Response::EmptyQuery;
    }
    let wire_tag = wire_tag(&tag);
    match tag.transaction {
        TransactionEffect::None => Response::Execution(wire_tag),
        TransactionEffect::Started => Response::TransactionStart(wire_tag),
        TransactionEffect::Ended => Response::TransactionEnd(wire_tag),
    }
}
