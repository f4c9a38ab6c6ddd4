//! Point statements: the primary-key SELECT, the UPDATE, DELETE and
//! `INSERT ... VALUES` of OLTP work, run against the heap without
//! DataFusion's planner.
//!
//! DataFusion plans a statement in about 0.6 ms here (analysis, some thirty
//! logical optimizer rules, physical planning and its own optimizer rules),
//! against microseconds of heap work for a one-row statement: a pgbench
//! TPC-B transaction spent most of its CPU planning. A statement qualifies
//! when its shape is one of
//!
//! - `SELECT col [AS name], ... | * FROM t WHERE ...` whose filters pin the primary key,
//! - `UPDATE t SET col = expr, ... [WHERE ...]`,
//! - `DELETE FROM t [WHERE ...]`,
//! - `INSERT INTO t [(col, ...)] VALUES (expr, ...), ...`,
//!
//! where `t` is a heap table and every expression is built from `t`'s
//! columns, literals, parameters (`$n`), arithmetic, comparisons,
//! AND/OR/NOT, IS [NOT] NULL and `CURRENT_TIMESTAMP`/`now()`. For anything
//! else [`execute`] answers `None` and DataFusion runs the statement.
//!
//! The expressions get DataFusion's own type coercion and simplification,
//! and the writes go through the functions DataFusion's DML hooks call
//! (`write.rs`), so this path changes how fast an answer comes, never the
//! answer.
//!
//! ```text
//! UPDATE pgbench_accounts SET abalance = abalance + $1 WHERE aid = $2
//!   -> translate (AST -> Expr) -> coerce + simplify -> write::update
//! ```

use std::borrow::Cow;
use std::collections::HashSet;
use std::sync::{Arc, OnceLock};

use datafusion::arrow::array::{ArrayRef, RecordBatch};
use datafusion::arrow::compute::concat_batches;
use datafusion::arrow::datatypes::{DataType, Schema, SchemaRef};
use datafusion::catalog::TableProvider;
use datafusion::common::config::ConfigOptions;
use datafusion::common::{DFSchema, ParamValues, Result, ScalarValue};
use datafusion::execution::context::ExecutionProps;
use datafusion::logical_expr::expr::ScalarFunction;
use datafusion::logical_expr::physical_planning_context::PhysicalPlanningContext;
use datafusion::logical_expr::simplify::{ExprSimplifyResult, SimplifyContext};
use datafusion::logical_expr::{
    BinaryExpr, Expr, ExprSchemable, Operator, ScalarUDF, ScalarUDFImpl,
};
use datafusion::optimizer::simplify_expressions::ExprSimplifier;
use datafusion::physical_expr::{PhysicalExpr, create_physical_expr};
use datafusion::sql::parser::Statement as DfStatement;
use datafusion::sql::sqlparser::ast;
use zyron_heap::catalog::DEFAULT_SCHEMA;
use zyron_heap::table::HeapTable;
use zyron_txn::Snapshot;

mod key;
mod row_update;

use row_update::RowUpdate;

use super::scan::key_lookup;
use super::write::{self, Checks};
use super::{HeapTableProvider, SessionTxn, no_transaction, to_df};

/// What a point statement produced.
pub enum Outcome {
    /// A SELECT's rows, all of them (a key pins at most a few).
    Rows {
        schema: SchemaRef,
        batch: RecordBatch,
    },
    /// The rows an INSERT, UPDATE or DELETE wrote, and its command tag.
    Written { command: &'static str, rows: u64 },
}

/// Runs `statement` on the heap if it is a point statement; `None` if
/// DataFusion must run it. The session's statement must have begun.
/// `known_shape` is [`is_point_shape`] of the statement where the caller
/// worked it out once (a prepared statement), `None` to work it out now.
pub async fn execute(
    statement: &DfStatement,
    known_shape: Option<bool>,
    params: Option<&ParamValues>,
    config: Arc<ConfigOptions>,
    session: &Arc<SessionTxn>,
) -> Result<Option<Outcome>> {
    let DfStatement::Statement(statement) = statement else {
        return Ok(None);
    };
    let shape = match known_shape {
        Some(false) => return Ok(None),
        // Comparing with the templates clones the statement: a tenth of a
        // point statement's CPU, so a prepared statement does it once.
        Some(true) => Shape::of(statement, Check::Skip),
        None => Shape::of(statement, Check::Templates),
    };
    let Some(shape) = shape else {
        return Ok(None);
    };
    let (name, alias) = shape.table();
    let Some(table) = resolve(session, name).await? else {
        return Ok(None);
    };
    let point = Point {
        table: &table,
        alias,
        session,
        compiler: Compiler::new(config),
        params,
    };
    match shape {
        Shape::Select {
            projection,
            selection,
            ..
        } => point.select(projection, selection).await,
        Shape::Update {
            assignments,
            selection,
            ..
        } => point.update(assignments, selection).await,
        Shape::Delete { selection, .. } => point.delete(selection).await,
        Shape::Insert { columns, rows, .. } => point.insert(columns, rows).await,
    }
}

/// Whether `statement` has one of the shapes this module runs (it may
/// still go to DataFusion, for instance if its table is not a heap table).
pub fn is_point_shape(statement: &DfStatement) -> bool {
    match statement {
        DfStatement::Statement(statement) => Shape::of(statement, Check::Templates).is_some(),
        _ => false,
    }
}

/// Whether [`Shape::of`] compares a statement with the templates.
#[derive(Clone, Copy, PartialEq)]
enum Check {
    Templates,
    /// The statement passed that comparison before.
    Skip,
}

/// The syntactic shapes this module runs, borrowed from the statement.
enum Shape<'a> {
    Select {
        table: &'a ast::TableFactor,
        projection: &'a [ast::SelectItem],
        selection: &'a ast::Expr,
    },
    Update {
        table: &'a ast::TableFactor,
        assignments: &'a [ast::Assignment],
        selection: Option<&'a ast::Expr>,
    },
    Delete {
        table: &'a ast::TableFactor,
        selection: Option<&'a ast::Expr>,
    },
    Insert {
        table: &'a ast::ObjectName,
        columns: &'a [ast::ObjectName],
        rows: &'a [ast::Parens<Vec<ast::Expr>>],
    },
}

/// Statements holding every clause this module reads (table, projection,
/// WHERE, SET, VALUES) and no other: a candidate with those clauses erased
/// must equal its template with the same clauses erased, so a clause the
/// module does not know (ORDER BY, LIMIT, RETURNING, a join, a hint, or one
/// a later parser version adds) keeps the statement on DataFusion's path.
struct Templates {
    select: ast::Query,
    update: ast::Update,
    delete: ast::Delete,
    insert: ast::Insert,
}

fn templates() -> &'static Templates {
    static TEMPLATES: OnceLock<Templates> = OnceLock::new();
    TEMPLATES.get_or_init(|| {
        let parse = |sql: &str| match crate::statement::parse(sql) {
            Ok(mut parsed) => match parsed.pop() {
                Some(crate::statement::Parsed::DataFusion(DfStatement::Statement(s))) => *s,
                _ => unreachable!("template {sql} is one SQL statement"),
            },
            Err(error) => unreachable!("template {sql} parses: {error}"),
        };
        let ast::Statement::Query(select) = parse("SELECT a FROM t WHERE b") else {
            unreachable!("a SELECT template")
        };
        let ast::Statement::Update(update) = parse("UPDATE t SET a = 1 WHERE b") else {
            unreachable!("an UPDATE template")
        };
        let ast::Statement::Delete(delete) = parse("DELETE FROM t WHERE b") else {
            unreachable!("a DELETE template")
        };
        let ast::Statement::Insert(insert) = parse("INSERT INTO t (a) VALUES (1)") else {
            unreachable!("an INSERT template")
        };
        Templates {
            select: *select,
            update,
            delete,
            insert,
        }
    })
}

/// Whether `candidate` and `template` differ only in what `erase` clears.
fn same_shape<T: Clone + PartialEq>(candidate: &T, template: &T, erase: impl Fn(&mut T)) -> bool {
    let (mut candidate, mut template) = (candidate.clone(), template.clone());
    erase(&mut candidate);
    erase(&mut template);
    candidate == template
}

impl<'a> Shape<'a> {
    fn of(statement: &'a ast::Statement, check: Check) -> Option<Self> {
        let t = templates();
        let checked = check == Check::Templates;
        match statement {
            ast::Statement::Query(query) => {
                let erase = |q: &mut ast::Query| q.body = Box::new(ast::SetExpr::Values(empty()));
                if checked && !same_shape(query.as_ref(), &t.select, erase) {
                    return None;
                }
                let ast::SetExpr::Select(select) = query.body.as_ref() else {
                    return None;
                };
                let ast::SetExpr::Select(template) = t.select.body.as_ref() else {
                    unreachable!("the SELECT template has a SELECT body")
                };
                let erase = |s: &mut ast::Select| {
                    s.projection.clear();
                    s.from.clear();
                    s.selection = None;
                };
                if checked && !same_shape(select.as_ref(), template.as_ref(), erase) {
                    return None;
                }
                Some(Shape::Select {
                    table: only_table(&select.from, check)?,
                    projection: &select.projection,
                    selection: select.selection.as_ref()?,
                })
            }
            ast::Statement::Update(update) => {
                let erase = |u: &mut ast::Update| {
                    u.table = t.update.table.clone();
                    u.assignments.clear();
                    u.selection = None;
                };
                if checked && !same_shape(update, &t.update, erase) {
                    return None;
                }
                Some(Shape::Update {
                    table: only_table(std::slice::from_ref(&update.table), check)?,
                    assignments: &update.assignments,
                    selection: update.selection.as_ref(),
                })
            }
            ast::Statement::Delete(delete) => {
                let erase = |d: &mut ast::Delete| {
                    d.from = ast::FromTable::WithFromKeyword(Vec::new());
                    d.selection = None;
                };
                if checked && !same_shape(delete, &t.delete, erase) {
                    return None;
                }
                let (ast::FromTable::WithFromKeyword(from) | ast::FromTable::WithoutKeyword(from)) =
                    &delete.from;
                Some(Shape::Delete {
                    table: only_table(from, check)?,
                    selection: delete.selection.as_ref(),
                })
            }
            ast::Statement::Insert(insert) => {
                let erase = |i: &mut ast::Insert| {
                    i.table = ast::TableObject::TableName(ast::ObjectName(Vec::new()));
                    i.columns.clear();
                    if let Some(source) = i.source.as_mut() {
                        source.body = Box::new(ast::SetExpr::Values(empty()));
                    }
                };
                if checked && !same_shape(insert, &t.insert, erase) {
                    return None;
                }
                let ast::TableObject::TableName(table) = &insert.table else {
                    return None;
                };
                let ast::SetExpr::Values(values) = insert.source.as_ref()?.body.as_ref() else {
                    return None;
                };
                Some(Shape::Insert {
                    table,
                    columns: &insert.columns,
                    rows: &values.rows,
                })
            }
            _ => None,
        }
    }

    /// The table's name, and the alias its columns may be qualified with.
    fn table(&self) -> (&'a ast::ObjectName, Option<&'a ast::Ident>) {
        let factor = match self {
            Shape::Select { table, .. }
            | Shape::Update { table, .. }
            | Shape::Delete { table, .. } => table,
            Shape::Insert { table, .. } => return (table, None),
        };
        match factor {
            ast::TableFactor::Table { name, alias, .. } => (name, alias.as_ref().map(|a| &a.name)),
            _ => unreachable!("only_table admits named tables only"),
        }
    }
}

fn empty() -> ast::Values {
    ast::Values {
        explicit_row: false,
        value_keyword: false,
        rows: Vec::new(),
    }
}

/// The one plain table of a FROM list: no join, no table function, no
/// column aliases, nothing but a name and an optional alias.
fn only_table(from: &[ast::TableWithJoins], check: Check) -> Option<&ast::TableFactor> {
    let [ast::TableWithJoins { relation, joins }] = from else {
        return None;
    };
    if !joins.is_empty() {
        return None;
    }
    if check == Check::Skip {
        // The template check passed before; only what `Shape::table` relies on is re-checked.
        return matches!(relation, ast::TableFactor::Table { .. }).then_some(relation);
    }
    let template = templates().select.body.as_ref();
    let ast::SetExpr::Select(template) = template else {
        unreachable!("the SELECT template has a SELECT body")
    };
    let erase = |f: &mut ast::TableFactor| {
        if let ast::TableFactor::Table { name, alias, .. } = f {
            *name = ast::ObjectName(Vec::new());
            if alias.as_ref().is_some_and(|a| a.columns.is_empty()) {
                *alias = None;
            }
        }
    };
    let plain = same_shape(relation, &template.from[0].relation, erase);
    plain.then_some(relation)
}

/// A name as PostgreSQL (and DataFusion's planner) folds it: unquoted
/// identifiers have their ASCII letters lower-cased, other letters kept.
/// Borrowed when folding changes nothing, as for most names in OLTP SQL:
/// every point statement folds several.
pub(super) fn normalize(ident: &ast::Ident) -> Cow<'_, str> {
    let value = ident.value.as_str();
    match ident.quote_style {
        None if value.bytes().any(|b| b.is_ascii_uppercase()) => {
            Cow::Owned(value.to_ascii_lowercase())
        }
        _ => Cow::Borrowed(value),
    }
}

/// The heap table a statement names, as the session's transaction sees it.
async fn resolve(session: &SessionTxn, name: &ast::ObjectName) -> Result<Option<Arc<HeapTable>>> {
    let parts: Vec<&ast::Ident> = name.0.iter().filter_map(|p| p.as_ident()).collect();
    if parts.len() != name.0.len() {
        return Ok(None);
    }
    let table = match parts.as_slice() {
        [table] => normalize(table),
        [schema, table] if normalize(schema) == DEFAULT_SCHEMA => normalize(table),
        _ => return Ok(None),
    };
    let guard = session.lock().await;
    let txn = guard.as_ref().ok_or_else(no_transaction)?;
    Ok(txn.table(DEFAULT_SCHEMA, &table))
}

/// Coerces, simplifies and compiles expressions as DataFusion's planner
/// does, without copying the session state.
struct Compiler {
    config: Arc<ConfigOptions>,
    /// Built on first use: most point statements (a key lookup, an UPDATE
    /// that adds to an integer) compile nothing.
    props: OnceLock<ExecutionProps>,
}

impl Compiler {
    fn new(config: Arc<ConfigOptions>) -> Self {
        Self {
            config,
            props: OnceLock::new(),
        }
    }

    /// The statement's execution properties; its start time (what `now()`
    /// returns) is fixed by the first call, when the statement first needs
    /// an expression prepared: microseconds after it began, and the same
    /// for every expression in it.
    fn props(&self) -> &ExecutionProps {
        self.props.get_or_init(|| {
            let mut props = ExecutionProps::new();
            props.mark_start_execution(self.config.clone());
            props
        })
    }

    /// Type coercion, then constant folding (`now()` becomes the statement's start time),
    /// with arithmetic checked as in planned statements (overflow is 22003).
    fn prepare(&self, expr: Expr, schema: &DFSchema) -> Result<Expr> {
        if needs_no_preparation(&expr, schema) {
            return crate::integer_arithmetic::check_arithmetic(expr, schema);
        }
        self.coerce_and_simplify(expr, schema)
    }

    fn coerce_and_simplify(&self, expr: Expr, schema: &DFSchema) -> Result<Expr> {
        let context = SimplifyContext::builder()
            .with_schema(Arc::new(schema.clone()))
            .with_config_options(self.config.clone())
            .with_query_execution_start_time(self.props().query_execution_start_time)
            .build();
        let simplifier = ExprSimplifier::new(context);
        let coerced = simplifier.coerce(expr, schema)?;
        let checked = crate::integer_arithmetic::check_arithmetic(coerced, schema)?;
        simplifier.simplify(checked)
    }

    /// Prepares and compiles an expression as written (a CHECK constraint).
    fn compile(&self, expr: Expr, schema: &DFSchema) -> Result<Arc<dyn PhysicalExpr>> {
        self.compile_prepared(self.prepare(expr, schema)?, schema)
    }

    /// Compiles an expression [`Compiler::prepare`] already returned: preparing costs more
    /// than compiling (a quarter of point statements' CPU under pgbench), and twice changes
    /// nothing.
    fn compile_prepared(&self, expr: Expr, schema: &DFSchema) -> Result<Arc<dyn PhysicalExpr>> {
        create_physical_expr(
            &expr,
            schema,
            self.props(),
            &PhysicalPlanningContext::default(),
        )
    }

    /// `now()` as the session's configuration (its time zone) defines it,
    /// folded to the statement's start time by the function itself, as the
    /// simplifier would fold it: a literal, so the expressions around it may
    /// skip [`Compiler::prepare`].
    fn now(&self) -> Result<Expr> {
        let now = datafusion::functions::datetime::now::NowFunc::new_with_config(&self.config);
        let context = SimplifyContext::builder()
            .with_config_options(self.config.clone())
            .with_query_execution_start_time(self.props().query_execution_start_time)
            .build();
        Ok(match now.simplify(Vec::new(), &context)? {
            ExprSimplifyResult::Simplified(folded) => folded,
            ExprSimplifyResult::Original(args) => Expr::ScalarFunction(ScalarFunction::new_udf(
                Arc::new(ScalarUDF::new_from_impl(now)),
                args,
            )),
        })
    }
}

/// One point statement's context.
struct Point<'a> {
    table: &'a Arc<HeapTable>,
    /// The alias the statement gives its table, if any.
    alias: Option<&'a ast::Ident>,
    session: &'a Arc<SessionTxn>,
    compiler: Compiler,
    params: Option<&'a ParamValues>,
}

impl Point<'_> {
    /// The table's parsed DEFAULTs and CHECKs: only writes need them, so
    /// a point SELECT never parses them.
    fn provider(&self) -> Result<HeapTableProvider> {
        HeapTableProvider::new(self.table.clone(), self.session.store().clone(), None)
    }

    fn schema(&self) -> Result<DFSchema> {
        DFSchema::try_from(self.table.codec().schema().as_ref().clone())
    }

    fn translator<'s>(&'s self, columns: Option<&'s Schema>) -> Translator<'s> {
        Translator {
            table: &self.table.def().name,
            alias: self.alias,
            columns,
            params: self.params,
            compiler: &self.compiler,
        }
    }

    /// The WHERE clause as prepared filters; `None` if it does not translate.
    fn filters(&self, selection: Option<&ast::Expr>) -> Result<Option<Vec<Expr>>> {
        let Some(selection) = selection else {
            return Ok(Some(Vec::new()));
        };
        let schema = self.schema()?;
        let translator = self.translator(Some(self.table.codec().schema()));
        let Some(filter) = translator.expr(selection) else {
            return Ok(None);
        };
        let filter = self.compiler.prepare(filter, &schema)?;
        // Anything but a boolean (`WHERE v` on an integer) goes to the
        // planner, which rejects it with a clear error.
        match filter.get_type(&schema)? {
            DataType::Boolean => Ok(Some(vec![filter])),
            _ => Ok(None),
        }
    }

    async fn select(
        &self,
        projection: &[ast::SelectItem],
        selection: &ast::Expr,
    ) -> Result<Option<Outcome>> {
        let Some(columns) = self.projection(projection) else {
            return Ok(None);
        };
        let snapshot = self.session.snapshot();
        if !self.table.key_index_serves(&snapshot) {
            return Ok(None);
        }
        let indices: Vec<usize> = columns.iter().map(|(index, _)| *index).collect();
        let translator = self.translator(Some(self.table.codec().schema()));
        let projected = match key::exact_key(self.table, &translator, selection) {
            Some(key) => self.select_by_key(&key, &indices).await?,
            None => match self
                .select_by_filters(&snapshot, selection, &indices)
                .await?
            {
                Some(projected) => projected,
                None => return Ok(None),
            },
        };
        let full = self.table.codec().nullable_schema();
        let schema = Arc::new(Schema::new(
            columns
                .iter()
                .map(|(index, name)| full.field(*index).as_ref().clone().with_name(name))
                .collect::<Vec<_>>(),
        ));
        let batch = RecordBatch::try_new(schema.clone(), projected.columns().to_vec())?;
        Ok(Some(Outcome::Rows { schema, batch }))
    }

    /// The `indices` columns of the row with this primary key, if the
    /// session's snapshot sees one: decoded from the row's bytes, the index
    /// having answered the WHERE clause exactly (see `key.rs`).
    async fn select_by_key(&self, key: &key::ExactKey, indices: &[usize]) -> Result<RecordBatch> {
        let row = {
            let guard = self.session.lock().await;
            let txn = guard.as_ref().ok_or_else(no_transaction)?;
            key::visible_row(self.table, txn, key)
        };
        let rows: Vec<&[u8]> = row.iter().map(|(_, bytes)| bytes.as_slice()).collect();
        Ok(self
            .table
            .codec()
            .decode(&rows, Some(indices))
            .map_err(to_df)?)
    }

    /// The `indices` columns of the rows the WHERE clause selects through a
    /// key lookup; `None` if it does not pin the key (scans are DataFusion's,
    /// in parallel).
    async fn select_by_filters(
        &self,
        snapshot: &Snapshot,
        selection: &ast::Expr,
        indices: &[usize],
    ) -> Result<Option<RecordBatch>> {
        let Some(filters) = self.filters(Some(selection))? else {
            return Ok(None);
        };
        let Some(slots) = key_lookup(self.table, snapshot, &filters)? else {
            return Ok(None);
        };
        let compile = |expr, schema: &DFSchema| self.compiler.compile_prepared(expr, schema);
        let predicate = write::compile_filters(&compile, self.table, &filters)?;
        let found = {
            let guard = self.session.lock().await;
            let txn = guard.as_ref().ok_or_else(no_transaction)?;
            write::candidates_in(self.table, txn, Some(slots), &predicate)?
        };
        let full = self.table.codec().nullable_schema();
        let batches: Vec<RecordBatch> = found.into_iter().map(|(_, batch)| batch).collect();
        Ok(Some(concat_batches(full, &batches)?.project(indices)?))
    }

    /// Output columns `(table column index, output name)`: `*`, or plain
    /// column references with optional aliases.
    fn projection(&self, items: &[ast::SelectItem]) -> Option<Vec<(usize, String)>> {
        let schema = self.table.codec().schema();
        let translator = self.translator(Some(schema));
        let mut columns = Vec::new();
        for item in items {
            match item {
                ast::SelectItem::Wildcard(options)
                    if *options == ast::WildcardAdditionalOptions::default() =>
                {
                    columns.extend(
                        schema
                            .fields()
                            .iter()
                            .enumerate()
                            .map(|(i, f)| (i, f.name().clone())),
                    );
                }
                ast::SelectItem::UnnamedExpr(expr) => {
                    let index = translator.column_index(expr)?;
                    columns.push((index, schema.field(index).name().clone()));
                }
                ast::SelectItem::ExprWithAlias { expr, alias } => {
                    columns.push((
                        translator.column_index(expr)?,
                        normalize(alias).into_owned(),
                    ));
                }
                _ => return None,
            }
        }
        Some(columns)
    }

    async fn update(
        &self,
        assignments: &[ast::Assignment],
        selection: Option<&ast::Expr>,
    ) -> Result<Option<Outcome>> {
        let translator = self.translator(Some(self.table.codec().schema()));
        // The byte path finds its row through the index; a snapshot it does not serve takes
        // the general path, which scans.
        let serves = self.table.key_index_serves(&self.session.snapshot());
        if let Some(plan) = serves
            .then(|| RowUpdate::plan(self.table, &translator, assignments, selection))
            .flatten()
        {
            return Ok(Some(Outcome::Written {
                command: "UPDATE",
                rows: plan.run(self.table, self.session).await?,
            }));
        }
        let schema = self.schema()?;
        let mut translated = Vec::with_capacity(assignments.len());
        for assignment in assignments {
            let ast::AssignmentTarget::ColumnName(target) = &assignment.target else {
                return Ok(None);
            };
            let Some(name) = translator.target(target) else {
                return Ok(None);
            };
            let Some(value) = translator.expr(&assignment.value) else {
                return Ok(None);
            };
            translated.push((name.into_owned(), self.compiler.prepare(value, &schema)?));
        }
        let Some(filters) = self.filters(selection)? else {
            return Ok(None);
        };
        let compile = |expr, schema: &DFSchema| self.compiler.compile(expr, schema);
        let checks = Checks::compile(&compile, self.table, self.provider()?.checks())?;
        let compile = |expr, schema: &DFSchema| self.compiler.compile_prepared(expr, schema);
        let count = write::update(
            &compile,
            self.table,
            self.session,
            &checks,
            translated,
            filters,
        )
        .await?;
        Ok(Some(Outcome::Written {
            command: "UPDATE",
            rows: count,
        }))
    }

    async fn delete(&self, selection: Option<&ast::Expr>) -> Result<Option<Outcome>> {
        let Some(filters) = self.filters(selection)? else {
            return Ok(None);
        };
        let compile = |expr, schema: &DFSchema| self.compiler.compile_prepared(expr, schema);
        let count = write::delete(&compile, self.table, self.session, filters).await?;
        Ok(Some(Outcome::Written {
            command: "DELETE",
            rows: count,
        }))
    }

    async fn insert(
        &self,
        columns: &[ast::ObjectName],
        rows: &[ast::Parens<Vec<ast::Expr>>],
    ) -> Result<Option<Outcome>> {
        let provider = self.provider()?;
        let Some(values) = self.insert_values(&provider, columns, rows)? else {
            return Ok(None);
        };
        let schema = self.table.codec().nullable_schema().clone();
        let batch = RecordBatch::try_new(schema, values)?;
        let compile = |expr, schema: &DFSchema| self.compiler.compile(expr, schema);
        let checks = Checks::compile(&compile, self.table, provider.checks())?;
        let mut guard = self.session.lock().await;
        let txn = guard.as_mut().ok_or_else(no_transaction)?;
        let count = write::insert_rows(txn, self.table, &checks, &batch).await?;
        Ok(Some(Outcome::Written {
            command: "INSERT",
            rows: count,
        }))
    }

    /// The VALUES rows as one array per table column (named columns from
    /// the rows, the others from their DEFAULT or NULL); `None` unless every
    /// value folds to a constant.
    fn insert_values(
        &self,
        provider: &HeapTableProvider,
        columns: &[ast::ObjectName],
        rows: &[ast::Parens<Vec<ast::Expr>>],
    ) -> Result<Option<Vec<ArrayRef>>> {
        let schema = self.table.codec().schema();
        let translator = self.translator(None);
        let targets: Vec<usize> = if columns.is_empty() {
            (0..schema.fields().len()).collect()
        } else {
            let indices: Option<Vec<usize>> = columns
                .iter()
                .map(|c| translator.target(c).and_then(|n| schema.index_of(&n).ok()))
                .collect();
            match indices {
                Some(indices) if indices.iter().collect::<HashSet<_>>().len() == indices.len() => {
                    indices
                }
                _ => return Ok(None),
            }
        };
        if rows.iter().any(|row| row.content.len() != targets.len()) {
            return Ok(None);
        }
        let no_columns = DFSchema::empty();
        let constant = |expr: Option<Expr>| -> Result<Option<ScalarValue>> {
            let expr = match expr {
                None => return Ok(None),
                // A literal or a parameter's value: nothing to coerce or fold.
                Some(Expr::Literal(value, _)) => return Ok(Some(value)),
                Some(expr) => expr,
            };
            match self.compiler.prepare(expr, &no_columns)? {
                Expr::Literal(value, _) => Ok(Some(value)),
                _ => Ok(None),
            }
        };
        let mut arrays = Vec::with_capacity(schema.fields().len());
        for (index, field) in schema.fields().iter().enumerate() {
            let position = targets.iter().position(|&t| t == index);
            let mut column = Vec::with_capacity(rows.len());
            for row in rows {
                let value = match position {
                    Some(p) => constant(translator.expr(&row.content[p]))?,
                    None => match provider.get_column_default(field.name()) {
                        Some(default) => constant(Some(default.clone()))?,
                        None => Some(ScalarValue::Null),
                    },
                };
                let Some(value) = value else { return Ok(None) };
                column.push(value);
            }
            arrays.push(column_array(column, field.data_type())?);
        }
        Ok(Some(arrays))
    }
}

/// One column's values as an array of `data_type`, each value cast
/// strictly. Values of one type (the usual case: the same parameter or
/// literal kind in every row) become one array, cast once: casting a scalar
/// builds an array and takes it apart again.
fn column_array(values: Vec<ScalarValue>, data_type: &DataType) -> Result<ArrayRef> {
    let first_type = values.first().map(ScalarValue::data_type);
    if let Some(first_type) = first_type.filter(|t| values.iter().all(|v| v.data_type() == *t)) {
        let array = ScalarValue::iter_to_array(values)?;
        return if first_type == *data_type {
            Ok(array)
        } else {
            write::strict_cast(&array, data_type)
        };
    }
    let strict = write::strict_cast_options();
    let cast = values
        .into_iter()
        .map(|value| value.cast_to_with_options(data_type, &strict))
        .collect::<Result<Vec<_>>>()?;
    ScalarValue::iter_to_array(cast)
}

/// SQL expressions to DataFusion expressions, for the subset point
/// statements use; `None` for anything else.
struct Translator<'a> {
    table: &'a str,
    alias: Option<&'a ast::Ident>,
    /// The table's columns; `None` where no column may appear (VALUES).
    columns: Option<&'a Schema>,
    params: Option<&'a ParamValues>,
    compiler: &'a Compiler,
}

impl Translator<'_> {
    fn expr(&self, expr: &ast::Expr) -> Option<Expr> {
        use ast::Expr as A;
        Some(match expr {
            A::Identifier(_) | A::CompoundIdentifier(_) => {
                let index = self.column_index(expr)?;
                let name = self.columns?.field(index).name();
                Expr::Column(datafusion::common::Column::from_name(name))
            }
            A::Value(value) => Expr::Literal(self.value(&value.value)?, None),
            A::BinaryOp { left, op, right } => Expr::BinaryExpr(BinaryExpr::new(
                Box::new(self.expr(left)?),
                operator(op)?,
                Box::new(self.expr(right)?),
            )),
            A::UnaryOp { op, expr } => match op {
                ast::UnaryOperator::Minus => Expr::Negative(Box::new(self.expr(expr)?)),
                ast::UnaryOperator::Plus => self.expr(expr)?,
                ast::UnaryOperator::Not => Expr::Not(Box::new(self.expr(expr)?)),
                _ => return None,
            },
            A::Nested(inner) => self.expr(inner)?,
            A::IsNull(inner) => Expr::IsNull(Box::new(self.expr(inner)?)),
            A::IsNotNull(inner) => Expr::IsNotNull(Box::new(self.expr(inner)?)),
            A::Function(function) if is_now(function) => self.compiler.now().ok()?,
            _ => return None,
        })
    }

    /// The table column an identifier names (optionally qualified by the
    /// table's name or alias).
    fn column_index(&self, expr: &ast::Expr) -> Option<usize> {
        let ident = match expr {
            ast::Expr::Identifier(ident) => ident,
            ast::Expr::CompoundIdentifier(parts) => match parts.as_slice() {
                [qualifier, column] if self.qualifies(qualifier) => column,
                _ => return None,
            },
            _ => return None,
        };
        self.columns?.index_of(&normalize(ident)).ok()
    }

    fn qualifies(&self, qualifier: &ast::Ident) -> bool {
        let name = normalize(qualifier);
        match self.alias {
            Some(alias) => name == normalize(alias),
            None => name == self.table,
        }
    }

    /// An assignment or INSERT target: a column name, possibly qualified.
    fn target<'n>(&self, name: &'n ast::ObjectName) -> Option<Cow<'n, str>> {
        match name.0.as_slice() {
            [column] => Some(normalize(column.as_ident()?)),
            [qualifier, column] if self.qualifies(qualifier.as_ident()?) => {
                Some(normalize(column.as_ident()?))
            }
            _ => None,
        }
    }

    /// A literal as DataFusion's SQL planner types it.
    fn value(&self, value: &ast::Value) -> Option<ScalarValue> {
        Some(match value {
            ast::Value::Number(number, false) => {
                let text = number.to_string();
                if let Ok(n) = text.parse::<i64>() {
                    ScalarValue::Int64(Some(n))
                } else if text.parse::<u64>().is_err()
                    && !self.compiler.config.sql_parser.parse_float_as_decimal
                {
                    ScalarValue::Float64(Some(text.parse::<f64>().ok()?))
                } else {
                    return None;
                }
            }
            ast::Value::SingleQuotedString(text) => ScalarValue::Utf8(Some(text.clone())),
            ast::Value::Boolean(b) => ScalarValue::Boolean(Some(*b)),
            ast::Value::Null => ScalarValue::Null,
            ast::Value::Placeholder(id) => {
                self.params?.get_placeholders_with_values(id).ok()?.value
            }
            _ => return None,
        })
    }
}

/// Whether coercion and simplification would leave `expr` as it is, so that
/// [`Compiler::prepare`] may skip them; they were a tenth of the server's CPU
/// under pgbench, whose point statements are all of this kind.
///
/// True for columns and non-NULL literals, compared with an operand of the
/// same type (integers, floats, text, dates; not booleans, as the simplifier
/// rewrites `b = true` to `b`) or combined with one by `+ - *` (integers and
/// floats), and AND/OR of those, where no operator has two literals.
/// Skipping is exact: same-typed operands get no cast, and with no NULL and
/// no operator on literals alone there is nothing to fold (`x = 5` stays the
/// form [`key_lookup`] reads).
fn needs_no_preparation(expr: &Expr, schema: &DFSchema) -> bool {
    match expr {
        Expr::Column(_) => true,
        Expr::Literal(value, _) => !value.is_null(),
        Expr::BinaryExpr(BinaryExpr { left, op, right }) => {
            let both_literals = matches!(
                (left.as_ref(), right.as_ref()),
                (Expr::Literal(..), Expr::Literal(..))
            );
            if both_literals
                || !needs_no_preparation(left, schema)
                || !needs_no_preparation(right, schema)
            {
                return false;
            }
            let (Ok(left), Ok(right)) = (left.get_type(schema), right.get_type(schema)) else {
                return false;
            };
            left == right
                && match op {
                    Operator::And | Operator::Or => left == DataType::Boolean,
                    Operator::Plus | Operator::Minus | Operator::Multiply => {
                        left.is_integer() || left.is_floating()
                    }
                    Operator::Eq
                    | Operator::NotEq
                    | Operator::Lt
                    | Operator::LtEq
                    | Operator::Gt
                    | Operator::GtEq => {
                        left.is_integer()
                            || left.is_floating()
                            || matches!(left, DataType::Utf8 | DataType::Date32)
                    }
                    _ => false,
                }
        }
        _ => false,
    }
}

fn operator(op: &ast::BinaryOperator) -> Option<Operator> {
    use ast::BinaryOperator as B;
    Some(match op {
        B::Plus => Operator::Plus,
        B::Minus => Operator::Minus,
        B::Multiply => Operator::Multiply,
        B::Divide => Operator::Divide,
        B::Modulo => Operator::Modulo,
        B::Eq => Operator::Eq,
        B::NotEq => Operator::NotEq,
        B::Lt => Operator::Lt,
        B::LtEq => Operator::LtEq,
        B::Gt => Operator::Gt,
        B::GtEq => Operator::GtEq,
        B::And => Operator::And,
        B::Or => Operator::Or,
        _ => return None,
    })
}

/// `CURRENT_TIMESTAMP` or `now()`, with no arguments or clauses.
fn is_now(function: &ast::Function) -> bool {
    let [ast::ObjectNamePart::Identifier(name)] = function.name.0.as_slice() else {
        return false;
    };
    let no_args = match &function.args {
        ast::FunctionArguments::None => true,
        ast::FunctionArguments::List(list) => {
            list.args.is_empty() && list.clauses.is_empty() && list.duplicate_treatment.is_none()
        }
        ast::FunctionArguments::Subquery(_) => false,
    };
    let name = normalize(name);
    (name == "current_timestamp" || name == "now")
        && no_args
        && function.parameters == ast::FunctionArguments::None
        && function.filter.is_none()
        && function.over.is_none()
        && function.within_group.is_empty()
        && function.null_treatment.is_none()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Unquoted names fold as the planner folds them (ASCII letters only),
    /// so both paths find the same column or table; quoted names are kept.
    #[test]
    fn names_fold_as_the_planner_folds_them() {
        let cases = [
            (ast::Ident::new("abalance"), "abalance", true),
            (ast::Ident::new("ABalance"), "abalance", false),
            (ast::Ident::new("Éa"), "Éa", true),
            (ast::Ident::new("ÉA"), "Éa", false),
            (ast::Ident::with_quote('"', "ABalance"), "ABalance", true),
        ];
        for (ident, folded, borrowed) in cases {
            let normalized = normalize(&ident);
            assert_eq!(normalized, folded, "{ident}");
            assert_eq!(matches!(normalized, Cow::Borrowed(_)), borrowed, "{ident}");
        }
    }

    fn shape_of(sql: &str) -> Option<&'static str> {
        let parsed = crate::statement::parse(sql).unwrap().pop().unwrap();
        let crate::statement::Parsed::DataFusion(DfStatement::Statement(statement)) = parsed else {
            return None;
        };
        let statement: &'static ast::Statement = Box::leak(statement);
        let name = |shape: Shape<'_>| match shape {
            Shape::Select { .. } => "select",
            Shape::Update { .. } => "update",
            Shape::Delete { .. } => "delete",
            Shape::Insert { .. } => "insert",
        };
        let shape = Shape::of(statement, Check::Templates).map(name);
        // What a prepared statement remembers, and the shape it then takes unchecked.
        let remembered = is_point_shape(&DfStatement::Statement(Box::new(statement.clone())));
        assert_eq!(remembered, shape.is_some(), "{sql}");
        if remembered {
            assert_eq!(Shape::of(statement, Check::Skip).map(name), shape, "{sql}");
        }
        shape
    }

    /// Where `prepare` skips coercion and simplification, running them
    /// gives the same expression; the cases it must not skip are not skipped.
    #[test]
    fn skipped_preparation_is_a_no_op() {
        use datafusion::arrow::datatypes::Field;
        use datafusion::logical_expr::{col, lit};
        let schema = DFSchema::try_from(Schema::new(vec![
            Field::new("aid", DataType::Int32, false),
            Field::new("abalance", DataType::Int32, true),
            Field::new("filler", DataType::Utf8, true),
            Field::new("price", DataType::Float64, true),
            Field::new("day", DataType::Date32, true),
            Field::new("flag", DataType::Boolean, true),
            Field::new("amount", DataType::Decimal128(12, 2), true),
        ]))
        .unwrap();
        let compiler = Compiler::new(Arc::new(ConfigOptions::default()));
        let skipped = [
            col("aid").eq(lit(5i32)),
            col("abalance") + lit(-42i32),
            col("aid").gt_eq(lit(1i32)).and(col("aid").lt(lit(9i32))),
            col("filler").eq(lit("x")).or(col("aid").not_eq(lit(3i32))),
            col("price") * lit(1.5f64),
            col("day").lt(lit(ScalarValue::Date32(Some(19_000)))),
            col("abalance") - col("aid"),
            col("aid").eq(lit(5i32)).and(col("flag")),
        ];
        for expr in skipped {
            assert!(needs_no_preparation(&expr, &schema), "{expr}");
            let in_full = compiler.coerce_and_simplify(expr.clone(), &schema).unwrap();
            let skipping = compiler.prepare(expr.clone(), &schema).unwrap();
            assert_eq!(
                skipping, in_full,
                "skipping preparation of {expr} changed it"
            );
        }
        let prepared_in_full = [
            col("aid").eq(lit(5i64)),
            col("aid").eq(lit(ScalarValue::Int32(None))),
            lit(1i32) + lit(2i32),
            col("aid") / lit(2i32),
            col("amount").eq(lit(ScalarValue::Decimal128(Some(100), 12, 2))),
            col("flag").eq(lit(true)),
            Expr::Negative(Box::new(col("aid"))),
        ];
        for expr in prepared_in_full {
            assert!(!needs_no_preparation(&expr, &schema), "{expr}");
        }
    }

    /// `now()` is the statement's start time, folded as the simplifier folds it.
    #[test]
    fn now_folds_to_the_statement_start() {
        let compiler = Compiler::new(Arc::new(ConfigOptions::default()));
        let start = compiler.props().query_execution_start_time;
        let Expr::Literal(ScalarValue::TimestampNanosecond(Some(nanos), zone), None) =
            compiler.now().unwrap()
        else {
            panic!("now() did not fold to a timestamp literal");
        };
        assert_eq!(Some(nanos), start.and_then(|t| t.timestamp_nanos_opt()));
        let unfolded = Expr::ScalarFunction(ScalarFunction::new_udf(
            Arc::new(ScalarUDF::new_from_impl(
                datafusion::functions::datetime::now::NowFunc::new_with_config(&compiler.config),
            )),
            Vec::new(),
        ));
        let simplified = compiler
            .coerce_and_simplify(unfolded, &DFSchema::empty())
            .unwrap();
        assert_eq!(
            simplified,
            Expr::Literal(ScalarValue::TimestampNanosecond(Some(nanos), zone), None)
        );
    }

    #[test]
    fn pgbench_statements_are_point_statements() {
        for (sql, shape) in [
            (
                "UPDATE pgbench_accounts SET abalance = abalance + $1 WHERE aid = $2",
                "update",
            ),
            (
                "SELECT abalance FROM pgbench_accounts WHERE aid = 17",
                "select",
            ),
            (
                "UPDATE pgbench_tellers SET tbalance = tbalance + -12 WHERE tid = 3",
                "update",
            ),
            (
                "INSERT INTO pgbench_history (tid, bid, aid, delta, mtime) \
                 VALUES (1, 2, 3, 4, CURRENT_TIMESTAMP)",
                "insert",
            ),
            (
                "SELECT t.v AS x, * FROM public.t AS t WHERE t.k = 1",
                "select",
            ),
            ("DELETE FROM t WHERE k = 1", "delete"),
            ("INSERT INTO t VALUES (1, 2), (3, 4)", "insert"),
        ] {
            assert_eq!(shape_of(sql), Some(shape), "{sql}");
        }
    }

    #[test]
    fn other_clauses_keep_a_statement_on_the_planner() {
        for sql in [
            "SELECT v FROM t WHERE k = 1 ORDER BY v",
            "SELECT v FROM t WHERE k = 1 LIMIT 1",
            "SELECT DISTINCT v FROM t WHERE k = 1",
            "SELECT v FROM t WHERE k = 1 GROUP BY v",
            "SELECT v FROM t WHERE k = 1 FOR UPDATE",
            "SELECT v FROM t",
            "SELECT v FROM t, u WHERE k = 1",
            "SELECT v FROM t JOIN u ON t.k = u.k WHERE t.k = 1",
            "WITH c AS (SELECT 1) SELECT v FROM t WHERE k = 1",
            "SELECT v FROM t WHERE k = 1 UNION SELECT v FROM t WHERE k = 2",
            "SELECT v FROM t AS x (a, b) WHERE k = 1",
            "UPDATE t SET v = 1 WHERE k = 1 RETURNING v",
            "UPDATE t SET v = u.v FROM u WHERE t.k = u.k",
            "DELETE FROM t WHERE k = 1 RETURNING k",
            "INSERT INTO t SELECT * FROM u",
            "INSERT INTO t VALUES (1) ON CONFLICT DO NOTHING",
            "INSERT INTO t VALUES (1) RETURNING k",
        ] {
            assert_eq!(shape_of(sql), None, "{sql}");
        }
    }
}
