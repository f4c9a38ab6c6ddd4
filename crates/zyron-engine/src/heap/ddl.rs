//! DDL on heap tables: CREATE TABLE (with what DataFusion's planner does not
//! keep: CHECK constraints, DEFAULT text, `WITH (fillfactor = N)`), DROP
//! TABLE, TRUNCATE and ALTER TABLE ... ADD PRIMARY KEY. Every one runs in the
//! session's transaction, so it commits or rolls back with it.

use std::sync::Arc;

use datafusion::arrow::datatypes::{Field, Schema};
use datafusion::common::Constraint;
use datafusion::logical_expr::{CreateMemoryTable, TableType};
use datafusion::sql::sqlparser::ast::{
    self, ColumnOption, CreateTableOptions, ObjectName, SqlOption, TableConstraint,
};
use zyron_common::{Result, SqlState, ZyronError};
use zyron_heap::Transaction;
use zyron_heap::catalog::{CheckDef, DEFAULT_SCHEMA, TableDef};
use zyron_heap::row::RowCodec;
use zyron_heap::table::HeapTable;

use super::schema::{SharedTables, dependent_views};

/// What a CREATE TABLE says that DataFusion's plan does not carry.
#[derive(Debug, Clone, Default)]
pub struct CreateTableExtras {
    pub checks: Vec<CheckDef>,
    /// `(column, SQL text of its DEFAULT)`.
    pub defaults: Vec<(String, String)>,
    pub fillfactor: Option<u8>,
}

/// Takes the CHECK constraints and `WITH (...)` options out of a CREATE
/// TABLE statement (DataFusion would drop or refuse them) and returns them
/// with the DEFAULT texts; `None` for any other statement.
pub fn extract_create_extras(statement: &mut ast::Statement) -> Result<Option<CreateTableExtras>> {
    let ast::Statement::CreateTable(create) = statement else {
        return Ok(None);
    };
    let table = last_name(&create.name);
    let mut extras = CreateTableExtras::default();
    for column in &mut create.columns {
        let column_name = column.name.value.clone();
        column.options.retain(|option| match &option.option {
            ColumnOption::Check(check) => {
                let name = check
                    .name
                    .as_ref()
                    .or(option.name.as_ref())
                    .map(|n| n.value.clone());
                extras.checks.push(CheckDef {
                    name: name.unwrap_or_else(|| format!("{table}_{column_name}_check")),
                    sql: check.expr.to_string(),
                });
                false
            }
            ColumnOption::Default(expr) => {
                extras
                    .defaults
                    .push((column_name.clone(), expr.to_string()));
                true
            }
            _ => true,
        });
    }
    let mut unnamed = 0;
    create.constraints.retain(|constraint| match constraint {
        TableConstraint::Check(check) => {
            let name = check
                .name
                .as_ref()
                .map(|n| n.value.clone())
                .unwrap_or_else(|| {
                    unnamed += 1;
                    if unnamed == 1 {
                        format!("{table}_check")
                    } else {
                        format!("{table}_check{}", unnamed - 1)
                    }
                });
            extras.checks.push(CheckDef {
                name,
                sql: check.expr.to_string(),
            });
            false
        }
        _ => true,
    });
    if let CreateTableOptions::With(options) = &create.table_options {
        for option in options {
            match option {
                SqlOption::KeyValue { key, value }
                    if key.value.eq_ignore_ascii_case("fillfactor") =>
                {
                    extras.fillfactor = Some(fillfactor(&value.to_string())?);
                }
                other => {
                    return Err(ZyronError::new(
                        SqlState::INVALID_PARAMETER_VALUE,
                        format!("unrecognized parameter \"{other}\""),
                    ));
                }
            }
        }
        create.table_options = CreateTableOptions::None;
    }
    Ok(Some(extras))
}

fn fillfactor(text: &str) -> Result<u8> {
    match text.trim_matches('\'').parse::<u8>() {
        Ok(value) if (10..=100).contains(&value) => Ok(value),
        _ => Err(ZyronError::new(
            SqlState::INVALID_PARAMETER_VALUE,
            format!("value {text} out of bounds for option \"fillfactor\""),
        )
        .with_hint("Valid values are between \"10\" and \"100\".")),
    }
}

/// The last part of `name`, folded as the planner folds identifiers.
fn last_name(name: &ObjectName) -> String {
    name.0
        .last()
        .and_then(|p| p.as_ident())
        .map(|i| super::point::normalize(i).into_owned())
        .unwrap_or_default()
}

/// The schema a name lives in; only `public` exists for heap tables.
fn check_schema(schema: Option<&str>) -> Result<()> {
    match schema {
        None | Some(DEFAULT_SCHEMA) => Ok(()),
        Some(other) => Err(ZyronError::new(
            SqlState::UNDEFINED_SCHEMA,
            format!("schema \"{other}\" does not exist"),
        )),
    }
}

/// CREATE TABLE as DataFusion planned it, plus its extras. Returns the new
/// table, or `None` under IF NOT EXISTS when the name is taken.
pub fn create_table(
    txn: &mut Transaction,
    shared: &SharedTables,
    create: &CreateMemoryTable,
    extras: CreateTableExtras,
) -> Result<Option<Arc<HeapTable>>> {
    check_schema(create.name.schema())?;
    let name = create.name.table().to_owned();
    let taken = txn.table(DEFAULT_SCHEMA, &name).is_some()
        || shared
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .contains_key(&name);
    if taken {
        return if create.if_not_exists {
            Ok(None)
        } else {
            Err(ZyronError::new(
                SqlState::DUPLICATE_TABLE,
                format!("relation \"{name}\" already exists"),
            ))
        };
    }
    let mut primary_key = Vec::new();
    for constraint in create.constraints.iter() {
        match constraint {
            Constraint::PrimaryKey(columns) if primary_key.is_empty() => {
                primary_key = columns.clone()
            }
            Constraint::PrimaryKey(_) => {
                return Err(ZyronError::new(
                    SqlState::INVALID_TABLE_DEFINITION,
                    format!("multiple primary keys for table \"{name}\" are not allowed"),
                ));
            }
            Constraint::Unique(_) => {
                return Err(ZyronError::not_supported(
                    "UNIQUE constraints other than the primary key are not supported yet",
                ));
            }
        }
    }
    let planned = create.input.schema().as_arrow().clone();
    let fields: Vec<Field> = planned
        .fields()
        .iter()
        .enumerate()
        .map(|(i, f)| {
            f.as_ref()
                .clone()
                .with_nullable(f.is_nullable() && !primary_key.contains(&i))
        })
        .collect();
    let schema = Schema::new(fields);
    RowCodec::new(Arc::new(schema.clone()))?;
    let mut columns = TableDef::columns_from(&schema);
    for (column, sql) in extras.defaults {
        if let Some(def) = columns.iter_mut().find(|c| c.name == column) {
            def.default = Some(sql);
        }
    }
    let def = TableDef {
        id: 0,
        schema: DEFAULT_SCHEMA.into(),
        name,
        columns,
        primary_key,
        checks: extras.checks,
        fillfactor: extras.fillfactor,
    };
    txn.create_table(def).map(Some)
}

/// What a DROP statement names: `DROP TABLE` or `DROP VIEW`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DropKind {
    Table,
    View,
}

impl DropKind {
    fn noun(self) -> &'static str {
        match self {
            DropKind::Table => "table",
            DropKind::View => "view",
        }
    }
}

/// `DROP TABLE` or `DROP VIEW` of `names`, with PostgreSQL's checks, all
/// made before anything is dropped: each name must exist (42P01, unless `IF
/// EXISTS`) and be of the statement's kind (42809), and a view that reads one
/// of them (directly or through another view) makes the drop fail with
/// 2BP01, unless `CASCADE` drops those views too. A heap table is dropped in
/// the transaction; views and external tables are not transactional, and go
/// at once (a ROLLBACK does not bring them back).
pub fn drop_relations(
    txn: &mut Transaction,
    shared: &SharedTables,
    external: &crate::external::ExternalCatalog,
    drop: &ast::Statement,
) -> Result<()> {
    let ast::Statement::Drop {
        object_type,
        if_exists,
        names,
        cascade,
        ..
    } = drop
    else {
        return Err(ZyronError::internal(
            "drop_relations takes a DROP statement",
        ));
    };
    let kind = match object_type {
        ast::ObjectType::Table => DropKind::Table,
        ast::ObjectType::View => DropKind::View,
        other => return Err(ZyronError::not_supported(format!("DROP {other}"))),
    };
    let mut dropped: Vec<String> = Vec::new();
    for name in names.iter().map(last_name) {
        match kind_of(txn, shared, external, &name) {
            Some(found) if found != kind => return Err(wrong_kind(&name, kind)),
            Some(_) => dropped.push(name),
            None if *if_exists => {}
            None => {
                return Err(ZyronError::new(
                    SqlState::UNDEFINED_TABLE,
                    format!("{} \"{name}\" does not exist", kind.noun()),
                ));
            }
        }
    }
    let mut dependents: Vec<String> = Vec::new();
    for name in &dropped {
        let readers: Vec<String> = dependent_views(shared, name)
            .into_iter()
            .filter(|view| !dropped.contains(view))
            .collect();
        if !readers.is_empty() && !cascade {
            return Err(dependents_error("drop", kind.noun(), name, &readers));
        }
        dependents.extend(readers);
    }
    dependents.sort();
    dependents.dedup();
    for name in &dropped {
        drop_one(txn, shared, external, name)?;
    }
    for view in &dependents {
        drop_one(txn, shared, external, view)?;
    }
    Ok(())
}

/// 2BP01: `name` cannot be dropped or replaced while `dependents` read it.
pub fn dependents_error(verb: &str, noun: &str, name: &str, dependents: &[String]) -> ZyronError {
    ZyronError::new(
        SqlState::DEPENDENT_OBJECTS_STILL_EXIST,
        format!("cannot {verb} {noun} \"{name}\" because other objects depend on it"),
    )
    .with_hint(format!(
        "{} on it. Use DROP ... CASCADE to drop the dependent objects too.",
        match dependents {
            [one] => format!("View {one} depends"),
            many => format!("Views {} depend", many.join(", ")),
        }
    ))
}

/// Whether `name` is a table (heap or external) or a view; `None` if there
/// is no such relation. One that failed to open at this start (an external
/// table whose storage is down, a view whose table is gone) is only listed,
/// and its statement tells which kind it is.
fn kind_of(
    txn: &Transaction,
    shared: &SharedTables,
    external: &crate::external::ExternalCatalog,
    name: &str,
) -> Option<DropKind> {
    if txn.table(DEFAULT_SCHEMA, name).is_some() {
        return Some(DropKind::Table);
    }
    let shared = shared.read().unwrap_or_else(|p| p.into_inner());
    match shared.get(name) {
        Some(provider) if provider.table_type() == TableType::View => Some(DropKind::View),
        Some(_) => Some(DropKind::Table),
        None => external.listed_as_view(name).map(|view| {
            if view {
                DropKind::View
            } else {
                DropKind::Table
            }
        }),
    }
}

/// Drops heap table, view or external table `name`, checked by `kind_of`.
fn drop_one(
    txn: &mut Transaction,
    shared: &SharedTables,
    external: &crate::external::ExternalCatalog,
    name: &str,
) -> Result<()> {
    if let Some(heap) = txn.table(DEFAULT_SCHEMA, name) {
        return txn.drop_table(&heap);
    }
    // Out of the map first, and the file written after: every session's
    // planning reads the map, and should not wait on an fsync.
    shared
        .write()
        .unwrap_or_else(|p| p.into_inner())
        .remove(name);
    external.dropped(name)?;
    Ok(())
}

/// 42809: `name` is not of the kind the statement drops.
fn wrong_kind(name: &str, wanted: DropKind) -> ZyronError {
    let other = match wanted {
        DropKind::Table => DropKind::View,
        DropKind::View => DropKind::Table,
    };
    ZyronError::new(
        SqlState::WRONG_OBJECT_TYPE,
        format!("\"{name}\" is not a {}", wanted.noun()),
    )
    .with_hint(format!(
        "Use DROP {} to remove a {}.",
        other.noun().to_uppercase(),
        other.noun()
    ))
}

/// The heap tables `names` refer to, or 42P01 for the first that is not one.
pub fn resolve(txn: &Transaction, names: &[ObjectName]) -> Result<Vec<Arc<HeapTable>>> {
    names
        .iter()
        .map(|name| {
            let table = last_name(name);
            txn.table(DEFAULT_SCHEMA, &table).ok_or_else(|| {
                ZyronError::new(
                    SqlState::UNDEFINED_TABLE,
                    format!("relation \"{table}\" does not exist"),
                )
            })
        })
        .collect()
}

/// `TRUNCATE a, b, ...`: each table is replaced by an empty one
/// (`Transaction::truncate_table`); a table named twice is truncated once.
pub fn truncate_tables(txn: &mut Transaction, names: &[ObjectName]) -> Result<()> {
    let mut truncated = Vec::new();
    for table in resolve(txn, names)? {
        if !truncated.contains(&table.id()) {
            truncated.push(table.id());
            txn.truncate_table(&table)?;
        }
    }
    Ok(())
}

/// `ALTER TABLE t ADD PRIMARY KEY (columns)`: the key columns become NOT
/// NULL; existing rows must have no NULL there (23502) and no duplicate key (23505).
pub fn alter_add_primary_key(
    txn: &mut Transaction,
    table_name: &ObjectName,
    columns: &[String],
) -> Result<()> {
    let table = resolve(txn, std::slice::from_ref(table_name))?.remove(0);
    let def = table.def();
    if !def.primary_key.is_empty() {
        return Err(ZyronError::new(
            SqlState::INVALID_TABLE_DEFINITION,
            format!(
                "multiple primary keys for table \"{}\" are not allowed",
                def.name
            ),
        ));
    }
    let mut key = Vec::new();
    for column in columns {
        let index = def
            .columns
            .iter()
            .position(|c| &c.name == column)
            .ok_or_else(|| {
                ZyronError::new(
                    SqlState::UNDEFINED_COLUMN,
                    format!("column \"{column}\" named in key does not exist"),
                )
            })?;
        key.push(index);
    }
    let snapshot = txn.snapshot();
    for page in (0..table.page_count()).step_by(8) {
        let (_, batch) = table.scan_pages(
            &snapshot,
            page..(page + 8).min(table.page_count()),
            Some(&key),
        )?;
        if let Some(i) = (0..key.len()).find(|&i| batch.column(i).null_count() > 0) {
            return Err(ZyronError::new(
                SqlState::NOT_NULL_VIOLATION,
                format!(
                    "column \"{}\" of relation \"{}\" contains null values",
                    columns[i], def.name
                ),
            ));
        }
    }
    let mut new_def = def.clone();
    for &index in &key {
        new_def.columns[index].nullable = false;
    }
    new_def.primary_key = key;
    txn.redefine_table(&table, new_def)?;
    Ok(())
}
