//! The in-memory table storage that stands in until the durable heap lands.
//!
//! `CREATE TABLE` currently creates a DataFusion `MemTable` in the default
//! schema: rows live in memory only and are lost on restart, and a
//! transaction block cannot undo a write. Everything around it (planning,
//! execution, the wire protocol, errors) is the real thing, so when the heap
//! table provider replaces this module the SQL behaviour pinned by the
//! sqllogictest files stays the same.

use std::sync::Arc;

use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::catalog::MemTable;
use datafusion::prelude::SessionContext;

use zyron_common::{Result, ZyronError};

use crate::errors::to_zyron_error;

/// Registers `batches` as table `name` in the session's default schema,
/// replacing any table of that name.
pub fn register_table(
    ctx: &SessionContext,
    name: &str,
    schema: SchemaRef,
    partitions: Vec<Vec<RecordBatch>>,
) -> Result<()> {
    let table = MemTable::try_new(schema, partitions).map_err(to_zyron_error)?;
    ctx.deregister_table(name).map_err(to_zyron_error)?;
    ctx.register_table(name, Arc::new(table))
        .map_err(to_zyron_error)?;
    if !ctx.table_exist(name).map_err(to_zyron_error)? {
        return Err(ZyronError::internal(format!(
            "table {name} was not registered"
        )));
    }
    Ok(())
}
