//! One client's session: its settings, its transaction state, and the path
//! from SQL text to results.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use datafusion::arrow::array::{Array, RecordBatch, StringArray, UInt64Array};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::common::{ParamValues, TableReference};
use datafusion::execution::SendableRecordBatchStream;
use datafusion::execution::session_state::SessionState;
use datafusion::logical_expr::LogicalPlan;
use datafusion::physical_plan::memory::MemoryStream;
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::prelude::SessionContext;

use datafusion::logical_expr::DdlStatement;
use datafusion::sql::parser::Statement as DfStatement;
use datafusion::sql::sqlparser::ast;
use futures::StreamExt;
use futures::future::BoxFuture;
use zyron_common::{Result, SqlState, ZyronError};
use zyron_txn::Isolation;

use crate::errors::to_zyron_error;
use crate::heap::{self, SessionTxn};
use crate::lake;
use crate::parse_cache::{ParseCache, Template};
use crate::plan_cache::{self, PlanSlot};
use crate::settings::Settings;
use crate::statement::{self, CommandTag, Parsed, Utility};

/// What one statement produced.
pub enum StatementResult {
    /// Rows, streamed as Arrow batches in `schema`.
    Rows {
        schema: SchemaRef,
        stream: SendableRecordBatchStream,
    },
    /// A statement without a result set, reported by its command tag.
    Command(CommandTag),
    /// COPY ... FROM STDIN started: the client now sends `columns` columns
    /// of rows with [`Session::copy_data`] and ends with [`Session::copy_done`].
    CopyIn { columns: usize },
}

impl std::fmt::Debug for StatementResult {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StatementResult::Rows { schema, .. } => write!(f, "Rows({schema:?})"),
            StatementResult::Command(tag) => write!(f, "Command({tag})"),
            StatementResult::CopyIn { columns } => write!(f, "CopyIn({columns})"),
        }
    }
}

/// How a statement changed the session's transaction block, so the wire
/// layer can report the right status in ReadyForQuery.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TransactionEffect {
    None,
    Started,
    Ended,
}

/// The PostgreSQL transaction-block state of a session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Block {
    /// Autocommit: every statement stands alone.
    Idle,
    /// The statements of one multi-statement query, sharing one transaction as in
    /// PostgreSQL's implicit block: committed when the query ends, rolled back when a
    /// statement fails. BEGIN turns it into an explicit block; COMMIT or ROLLBACK ends it, and
    /// the statements after start another.
    Implicit,
    /// Inside BEGIN ... COMMIT.
    InBlock,
    /// A statement failed inside the block: everything but COMMIT/ROLLBACK is refused.
    Failed,
}

/// What a prepared statement worked out once for all its executions.
#[derive(Debug, Clone, Copy, Default)]
struct Known<'a> {
    /// Whether the statement has a point statement's shape (`None`: not worked out yet).
    point_shape: Option<bool>,
    /// Where its plan is kept between executions.
    plan_slot: Option<&'a PlanSlot>,
}

/// Whether a logical plan has been through the optimizer already.
enum Optimized {
    Yes,
    No,
}

/// Plans `plan`'s physical side and starts streaming its rows.
async fn query_rows(
    state: &SessionState,
    plan: &LogicalPlan,
    optimized: Optimized,
) -> Result<StatementResult> {
    let schema = Arc::new(plan.schema().as_arrow().clone());
    let physical = match optimized {
        Optimized::Yes => {
            state
                .query_planner()
                .create_physical_plan(plan, state)
                .await
        }
        Optimized::No => state.create_physical_plan(plan).await,
    }
    .map_err(to_zyron_error)?;
    let stream = datafusion::physical_plan::execute_stream(physical, state.task_ctx())
        .map_err(to_zyron_error)?;
    Ok(StatementResult::Rows { schema, stream })
}

/// A statement parsed (and, for DataFusion statements, planned) once and
/// executed many times through the extended protocol.
#[derive(Debug, Clone)]
pub struct PreparedStatement {
    sql: String,
    parsed: Option<Parsed>,
    /// Types of `$1..$n`, inferred once from the plan made at prepare time (every
    /// Bind needs them; walking the plan for them cost more than running a
    /// point statement).
    parameter_types: Vec<Option<DataType>>,
    /// Whether the statement has a point statement's shape (`heap::is_point_shape`),
    /// worked out once instead of at every execution.
    point_shape: bool,
    /// The columns the statement returns, worked out once from the plan made
    /// at prepare time: clients describe a prepared statement's portal at
    /// every execution. (An execution plans again when a table the statement
    /// reads was replaced, so it sees the table as it is: see `plan_cache`.)
    result_schema: SchemaRef,
    /// The optimized plan, kept between executions while it still describes the query.
    plan_slot: PlanSlot,
}

impl PreparedStatement {
    pub fn sql(&self) -> &str {
        &self.sql
    }

    /// Types of `$1..$n` as DataFusion inferred them (`None` where it could not).
    pub fn parameter_types(&self) -> &[Option<DataType>] {
        &self.parameter_types
    }

    fn infer_parameter_types(plan: Option<&LogicalPlan>) -> Vec<Option<DataType>> {
        let Some(plan) = plan else {
            return Vec::new();
        };
        let Ok(types) = plan.get_parameter_types() else {
            return Vec::new();
        };
        let count = types
            .keys()
            .filter_map(|id| id.trim_start_matches('$').parse::<usize>().ok())
            .max()
            .unwrap_or(0);
        (1..=count)
            .map(|i| types.get(&format!("${i}")).cloned().flatten())
            .collect()
    }

    /// The columns the statement returns; empty for statements without rows.
    pub fn result_schema(&self) -> &SchemaRef {
        &self.result_schema
    }

    fn work_out_result_schema(parsed: Option<&Parsed>, plan: Option<&LogicalPlan>) -> SchemaRef {
        match (parsed, plan) {
            (Some(Parsed::Utility(Utility::Show { name })), _) => show_schema(name),
            (Some(Parsed::Utility(Utility::ShowAll)), _) => show_all_schema(),
            (_, Some(plan)) if statement::command_for_plan(plan).is_none() => {
                let schema = plan.schema().as_arrow();
                crate::output_names::client_schema(schema)
                    .unwrap_or_else(|| Arc::new(schema.clone()))
            }
            _ => Arc::new(Schema::empty()),
        }
    }
}

/// One client's view of the engine.
pub struct Session {
    id: u32,
    ctx: SessionContext,
    settings: Settings,
    block: Block,
    /// The transaction statements run in: one per statement in autocommit,
    /// one per BEGIN ... COMMIT block.
    txn: Arc<SessionTxn>,
    /// Views and external tables shared by all sessions.
    shared: heap::SharedTables,
    /// The isolation level of the current block (BEGIN ISOLATION LEVEL ...,
    /// SET TRANSACTION ...); `None`: the session default.
    block_isolation: Option<Isolation>,
    /// A COPY FROM STDIN in progress.
    copy_in: Option<crate::copy_in::CopyIn>,
    /// External tables, remembered across restarts.
    external: Arc<crate::external::ExternalCatalog>,
    /// Point statements sent as text, parsed once per shape.
    parse_cache: ParseCache,
    /// Counts the SETs this session ran: a plan kept from before one is made again.
    settings_generation: u64,
    /// Executions of prepared queries that used a kept plan.
    kept_plan_executions: u64,
    /// Of those, the ones that ran a kept physical plan (see `plan_cache`).
    kept_physical_executions: u64,
    /// Called before a statement goes to DataFusion (see [`Session::before_planning`]).
    before_planning: Option<Arc<dyn Fn() + Send + Sync>>,
    /// Set when a result stream this session returned failed after the statement
    /// itself returned (`SELECT 1/0` fails while its rows stream to the client).
    stream_failed: Arc<AtomicBool>,
}

impl Session {
    pub(crate) fn new(
        id: u32,
        ctx: SessionContext,
        txn: Arc<SessionTxn>,
        shared: heap::SharedTables,
        external: Arc<crate::external::ExternalCatalog>,
    ) -> Self {
        Self {
            id,
            ctx,
            settings: Settings::default(),
            block: Block::Idle,
            txn,
            shared,
            block_isolation: None,
            copy_in: None,
            external,
            parse_cache: ParseCache::default(),
            settings_generation: 0,
            kept_plan_executions: 0,
            kept_physical_executions: 0,
            before_planning: None,
            stream_failed: Arc::new(AtomicBool::new(false)),
        }
    }

    fn isolation(&self) -> Isolation {
        self.block_isolation
            .unwrap_or_else(|| self.settings.default_isolation())
    }

    /// Sets `hook` to run before each statement that DataFusion plans and runs
    /// (not point statements, not utility statements). Its plans may run on
    /// every worker thread; the wire server uses this to undo pinning a lone
    /// connection's threads to one CPU.
    pub fn before_planning(&mut self, hook: Arc<dyn Fn() + Send + Sync>) {
        self.before_planning = Some(hook);
    }

    /// A number unique among this engine's sessions (the backend pid clients see).
    pub fn id(&self) -> u32 {
        self.id
    }

    /// The DataFusion context, for embedding and tests.
    pub fn context(&self) -> &SessionContext {
        &self.ctx
    }

    /// True inside BEGIN ... COMMIT (including a failed block), and while the statements of
    /// a multi-statement query run.
    pub fn in_transaction_block(&self) -> bool {
        self.block != Block::Idle
    }

    /// Runs every statement in `sql`; stops at the first error.
    pub async fn execute_sql(&mut self, sql: &str) -> Result<Vec<StatementResult>> {
        let (results, error) = self.execute_script(sql).await;
        match error {
            Some(error) => Err(error),
            None => Ok(results),
        }
    }

    /// Runs every statement in `sql` in order, as PostgreSQL's simple query
    /// protocol does: the results of the statements before a failing one are
    /// returned together with the error, and the rest are not run.
    ///
    /// Outside a transaction block, several statements run as one transaction
    /// (see [`Block::Implicit`]): a failing statement takes back the ones
    /// before it.
    ///
    /// Every result but the last is fully computed before the next statement
    /// starts, so a later statement sees the effects of an earlier one; the
    /// last result streams, unless an implicit block with writes commits
    /// after it (its rows must be read as the transaction sees them).
    pub async fn execute_script(
        &mut self,
        sql: &str,
    ) -> (Vec<StatementResult>, Option<ZyronError>) {
        self.discard_interrupted_query().await;
        let (statements, point_shape) = match self.parse_script(sql) {
            Ok(parsed) => parsed,
            Err(error) => return (Vec::new(), Some(self.fail(error))),
        };
        let count = statements.len();
        let mut results = Vec::with_capacity(count);
        for (index, parsed) in statements.into_iter().enumerate() {
            if count > 1 && self.block == Block::Idle {
                self.block = Block::Implicit;
            }
            let known = Known {
                point_shape,
                plan_slot: None,
            };
            let outcome = self.execute_parsed(&parsed, known, None).await;
            let computed_now = index + 1 < count || self.implicit_block_with_writes().await;
            let outcome = match outcome {
                Ok(result) if computed_now => {
                    materialize(result).await.map_err(|error| self.fail(error))
                }
                outcome => outcome,
            };
            match outcome {
                Ok(result) => results.push(result),
                Err(error) => {
                    self.end_implicit_block(false).await.ok();
                    return (results, Some(error));
                }
            }
        }
        match self.end_implicit_block(true).await {
            Ok(()) => (results, None),
            Err(error) => (results, Some(error)),
        }
    }

    /// A query cut off midway (a panic the gateway caught, or a cancel that dropped its
    /// future) can leave its autocommit or implicit transaction open. Outside an explicit
    /// block and a COPY nothing is open when a query starts, so whatever is open is rolled
    /// back: nothing the interrupted query wrote may commit with the next one.
    async fn discard_interrupted_query(&mut self) {
        if !matches!(self.block, Block::Idle | Block::Implicit) || self.copy_in.is_some() {
            return;
        }
        self.block = Block::Idle;
        self.block_isolation = None;
        if let Some(txn) = self.txn.take().await {
            tracing::warn!(
                session = self.id,
                "rolled back the transaction of an interrupted query"
            );
            txn.rollback();
        }
    }

    async fn implicit_block_with_writes(&self) -> bool {
        self.block == Block::Implicit
            && (self.txn.lock().await.as_ref()).is_some_and(|txn| txn.has_writes())
    }

    /// Ends an implicit block at the end of its query: commits it, or rolls it back when
    /// `succeeded` is false. A COPY FROM STDIN still in progress ends it instead, when its
    /// data is in (see [`Session::end_copy`]).
    async fn end_implicit_block(&mut self, succeeded: bool) -> Result<()> {
        if self.block != Block::Implicit || self.copy_in.is_some() {
            return Ok(());
        }
        self.block = Block::Idle;
        self.block_isolation = None;
        match (succeeded, self.txn.take().await) {
            (true, Some(txn)) => self.commit(txn).await,
            (false, Some(txn)) => {
                txn.rollback();
                Ok(())
            }
            (_, None) => Ok(()),
        }
    }

    /// Splits `sql` into statements; for a lone point statement also says so (`Some(true)`),
    /// taking its parse from the [`ParseCache`] where a statement of its shape was parsed.
    fn parse_script(&mut self, sql: &str) -> Result<(Vec<Parsed>, Option<bool>)> {
        let template = Template::of(sql);
        if let Some(statement) = template.as_ref().and_then(|t| self.parse_cache.get(t)) {
            return Ok((vec![Parsed::DataFusion(statement)], Some(true)));
        }
        let statements = statement::parse(sql)?;
        if let (Some(template), [Parsed::DataFusion(statement)]) = (template, &statements[..]) {
            if heap::is_point_shape(statement) {
                self.parse_cache.remember(template, statement);
                return Ok((statements, Some(true)));
            }
        }
        Ok((statements, None))
    }

    /// Parses and describes one statement for the extended protocol.
    pub async fn prepare(&self, sql: &str) -> Result<PreparedStatement> {
        let parsed = statement::single(statement::parse(sql)?)?;
        let described_plan = match &parsed {
            // COPY to a .zyr file is ours, not DataFusion's: it has no plan to describe, and
            // returns no rows, like a utility statement.
            Some(Parsed::DataFusion(datafusion::sql::parser::Statement::CopyTo(copy)))
                if crate::zyr::is_zyr_target(copy) =>
            {
                None
            }
            Some(Parsed::DataFusion(statement)) if intercepted(statement) => None,
            Some(Parsed::DataFusion(statement)) => Some(self.plan(statement.clone()).await?),
            _ => None,
        };
        let point_shape = match &parsed {
            Some(Parsed::DataFusion(statement)) => heap::is_point_shape(statement),
            _ => false,
        };
        Ok(PreparedStatement {
            sql: sql.to_owned(),
            point_shape,
            result_schema: PreparedStatement::work_out_result_schema(
                parsed.as_ref(),
                described_plan.as_ref(),
            ),
            parsed,
            parameter_types: PreparedStatement::infer_parameter_types(described_plan.as_ref()),
            plan_slot: PlanSlot::default(),
        })
    }

    /// Executes a prepared statement with the given parameter values.
    pub async fn execute_prepared(
        &mut self,
        prepared: &PreparedStatement,
        params: Option<ParamValues>,
    ) -> Result<StatementResult> {
        self.discard_interrupted_query().await;
        let params = params
            .map(|p| coerce_params(p, prepared.parameter_types()))
            .transpose()?;
        match &prepared.parsed {
            Some(parsed) => {
                let known = Known {
                    point_shape: Some(prepared.point_shape),
                    plan_slot: Some(&prepared.plan_slot),
                };
                self.execute_parsed(parsed, known, params).await
            }
            None => Ok(StatementResult::Command(CommandTag::new(""))),
        }
    }

    async fn execute_parsed(
        &mut self,
        parsed: &Parsed,
        known: Known<'_>,
        params: Option<ParamValues>,
    ) -> Result<StatementResult> {
        self.take_stream_failure();
        if self.block == Block::Failed && !ends_block(parsed) {
            return Err(ZyronError::new(
                SqlState::IN_FAILED_SQL_TRANSACTION,
                "current transaction is aborted, commands ignored until end of transaction block",
            ));
        }
        let deadline = self
            .settings
            .statement_timeout()
            .map(|timeout| tokio::time::Instant::now() + timeout);
        let outcome = match parsed {
            Parsed::Utility(utility) => self.execute_utility(utility).await,
            Parsed::DataFusion(statement) => {
                self.run_in_transaction(statement, known, params).await
            }
        };
        match outcome {
            Ok(result) => Ok(self.watch_stream(bounded(client_named(result), deadline))),
            Err(error) => Err(self.fail(error)),
        }
    }

    /// Inside a transaction block, a result's rows may fail after the statement returned
    /// (an error DataFusion raises while executing): the stream then records the failure,
    /// and the session's next statement finds the block failed, as PostgreSQL's would be.
    fn watch_stream(&self, result: StatementResult) -> StatementResult {
        match result {
            StatementResult::Rows { schema, stream } if self.block == Block::InBlock => {
                let failed = self.stream_failed.clone();
                let stream = stream.inspect(move |batch| {
                    if batch.is_err() {
                        failed.store(true, Ordering::Release);
                    }
                });
                StatementResult::Rows {
                    schema: schema.clone(),
                    stream: Box::pin(RecordBatchStreamAdapter::new(schema, stream)),
                }
            }
            result => result,
        }
    }

    /// Moves the block to the failed state if the last result's stream failed.
    fn take_stream_failure(&mut self) {
        if self.stream_failed.swap(false, Ordering::AcqRel) && self.block == Block::InBlock {
            self.block = Block::Failed;
        }
    }

    /// Runs one statement in the session's transaction: outside a block it
    /// is its own transaction, committed (or rolled back) at once.
    async fn run_in_transaction(
        &mut self,
        statement: &DfStatement,
        known: Known<'_>,
        params: Option<ParamValues>,
    ) -> Result<StatementResult> {
        self.txn.begin_statement(self.isolation()).await;
        let result = self.execute_statement(statement, known, params).await;
        if self.block != Block::Idle {
            return result;
        }
        let txn = self.txn.take().await;
        match (result, txn) {
            (Ok(result), Some(txn)) => {
                self.commit(txn).await?;
                Ok(result)
            }
            (Err(error), Some(txn)) => {
                txn.rollback();
                Err(error)
            }
            (result, None) => result,
        }
    }

    /// Runs `f` on the open transaction (a statement has begun, so there is one).
    async fn with_txn<T>(
        &self,
        f: impl FnOnce(&mut zyron_heap::Transaction) -> Result<T>,
    ) -> Result<T> {
        let mut guard = self.txn.lock().await;
        let txn = guard
            .as_mut()
            .ok_or_else(|| ZyronError::internal("no transaction is open"))?;
        f(txn)
    }

    /// Whether `name` is a lake table.
    async fn is_lake_table(&self, name: &str) -> bool {
        match self.ctx.table_provider(TableReference::bare(name)).await {
            Ok(provider) => lake::lake_table_of(&provider).is_some(),
            Err(_) => false,
        }
    }

    /// Runs `query` (one statement) in the session's transaction and
    /// drains its rows: how a lake statement runs the table function that
    /// carries it out.
    async fn run_for_effect(&mut self, query: &str) -> Result<()> {
        let Some(Parsed::DataFusion(statement)) = statement::single(statement::parse(query)?)?
        else {
            return Err(ZyronError::internal(format!("not a query: {query}")));
        };
        let result = Box::pin(self.run_in_transaction(&statement, Known::default(), None)).await?;
        if let StatementResult::Rows { mut stream, .. } = result {
            while let Some(batch) = stream.next().await {
                batch.map_err(to_zyron_error)?;
            }
        }
        Ok(())
    }

    /// Records a failure: inside a transaction block it poisons the block.
    fn fail(&mut self, error: ZyronError) -> ZyronError {
        if self.block == Block::InBlock {
            self.block = Block::Failed;
        }
        error
    }

    async fn plan(&self, statement: datafusion::sql::parser::Statement) -> Result<LogicalPlan> {
        statement::plan_statement(&self.ctx.state(), statement).await
    }

    async fn execute_statement(
        &mut self,
        statement: &DfStatement,
        known: Known<'_>,
        params: Option<ParamValues>,
    ) -> Result<StatementResult> {
        if let Some(result) = self
            .execute_point(statement, known.point_shape, params.as_ref())
            .await?
        {
            return Ok(result);
        }
        if let Some(hook) = &self.before_planning {
            hook();
        }
        // Boxed: DataFusion's planning futures are several kB, and every layer
        // above moves this future by value (see `execute_planned`).
        Box::pin(self.execute_planned(statement, known, params)).await
    }

    /// Plans `statement` with DataFusion (or takes its kept plan) and runs it.
    /// Kept apart from the point path so that the futures of statements that
    /// never plan (point statements, BEGIN, COMMIT) stay small: 7.7 kB with
    /// this one inline, 2.2 kB without; memmove was 8% of the server's CPU on
    /// 16 clients running empty transactions when they held it.
    async fn execute_planned(
        &mut self,
        statement: &DfStatement,
        known: Known<'_>,
        params: Option<ParamValues>,
    ) -> Result<StatementResult> {
        if let (Some(slot), Some(params)) = (known.plan_slot, &params)
            && !slot.gave_up()
        {
            let template = slot
                .run_template(&self.ctx, self.settings_generation, params)
                .await?;
            if let Some((schema, stream)) = template {
                self.kept_plan_executions += 1;
                self.kept_physical_executions += 1;
                return Ok(StatementResult::Rows { schema, stream });
            }
            let state = self.ctx.state();
            let kept = slot
                .plan(&self.ctx, &state, statement, self.settings_generation)
                .await?;
            if let Some(kept) = kept {
                self.kept_plan_executions += u64::from(kept.reused);
                if let Some((schema, stream)) =
                    slot.make_template(&kept.plan, &state, params).await?
                {
                    return Ok(StatementResult::Rows { schema, stream });
                }
                let plan = plan_cache::bind(kept.plan, params.clone(), &state)?;
                return query_rows(&state, &plan, Optimized::Yes).await;
            }
        }
        let mut statement = statement.clone();
        if let datafusion::sql::parser::Statement::CopyTo(copy) = &statement
            && crate::zyr::is_zyr_target(copy)
        {
            let rows = crate::zyr::copy_to_zyr(&self.ctx, copy).await?;
            return Ok(StatementResult::Command(
                CommandTag::new("COPY").with_rows(rows),
            ));
        }
        if let Some(result) = self.execute_heap_ddl(&statement).await? {
            return Ok(result);
        }
        let extras = match &mut statement {
            DfStatement::Statement(inner) => heap::extract_create_extras(inner)?,
            _ => None,
        };
        // One copy of the session state serves planning, optimizing and
        // executing this statement (each copy clones every function registry).
        let state = self.ctx.state();
        let mut plan = statement::plan_statement(&state, statement).await?;
        if let Some(params) = params {
            plan = plan.with_param_values(params).map_err(to_zyron_error)?;
        }
        if let LogicalPlan::Ddl(DdlStatement::CreateMemoryTable(create)) = &plan {
            return self
                .create_heap_table(create, extras.unwrap_or_default())
                .await;
        }
        crate::lake::check_lake_writes(&plan, self.in_transaction_block())?;
        let command = statement::command_for_plan(&plan);
        match (command, &plan) {
            (None, _) => query_rows(&state, &plan, Optimized::No).await,
            (Some(command), LogicalPlan::Dml(_)) => {
                // Optimized once: the guard must see the plan DataFusion will run.
                let optimized = state.optimize(&plan).map_err(to_zyron_error)?;
                if !heap::guard_dml_input(&optimized)? {
                    return Ok(StatementResult::Command(
                        CommandTag::new(command).with_rows(0),
                    ));
                }
                let physical = state
                    .query_planner()
                    .create_physical_plan(&optimized, &state)
                    .await
                    .map_err(to_zyron_error)?;
                let batches = datafusion::physical_plan::collect(physical, state.task_ctx())
                    .await
                    .map_err(to_zyron_error)?;
                Ok(StatementResult::Command(
                    CommandTag::new(command).with_rows(affected_rows(&batches)),
                ))
            }
            (Some(command), _) => {
                // (DROP TABLE and DROP VIEW are ours: `heap::drop_relations`.)
                let created = match &plan {
                    LogicalPlan::Ddl(DdlStatement::CreateExternalTable(create))
                        if !self.ctx.table_exist(create.name.clone()).unwrap_or(true) =>
                    {
                        crate::external::reopening_statement(create)
                            .map(|text| (create.name.table().to_owned(), text))
                    }
                    LogicalPlan::Ddl(DdlStatement::CreateView(create)) => {
                        self.check_view_replaceable(create)?;
                        crate::external::view_statement(create)
                            .map(|text| (create.name.table().to_owned(), text))
                    }
                    _ => None,
                };
                let frame = self
                    .ctx
                    .execute_logical_plan(plan)
                    .await
                    .map_err(to_zyron_error)?;
                let batches = frame.collect().await.map_err(to_zyron_error)?;
                if let Some((name, text)) = created {
                    self.external.created(&name, &text)?;
                }
                let tag = CommandTag::new(command);
                Ok(StatementResult::Command(if command == "COPY" {
                    tag.with_rows(affected_rows(&batches))
                } else {
                    tag
                }))
            }
        }
    }

    /// A point statement (primary-key SELECT, UPDATE, DELETE, INSERT ...
    /// VALUES) straight on the heap; `None` if DataFusion must plan it.
    async fn execute_point(
        &self,
        statement: &DfStatement,
        point_shape: Option<bool>,
        params: Option<&ParamValues>,
    ) -> Result<Option<StatementResult>> {
        let config = self.ctx.state_ref().read().config_options().clone();
        // Boxed, like `execute_planned`: the point path's future is 1.6 kB, and
        // each async layer above would otherwise hold it inline and move it.
        let outcome = Box::pin(heap::execute_point(
            statement,
            point_shape,
            params,
            config,
            &self.txn,
        ))
        .await
        .map_err(to_zyron_error)?;
        Ok(match outcome {
            None => None,
            Some(heap::PointOutcome::Rows { schema, batch }) => {
                let stream = MemoryStream::try_new(vec![batch], schema.clone(), None)
                    .map_err(to_zyron_error)?;
                Some(StatementResult::Rows {
                    schema,
                    stream: Box::pin(stream),
                })
            }
            Some(heap::PointOutcome::Written { command, rows }) => Some(StatementResult::Command(
                CommandTag::new(command).with_rows(rows),
            )),
        })
    }

    /// Commits `txn` as the session's settings say. Boxed: a commit's future
    /// is most of a kilobyte, and inline it would be part of every statement's
    /// future, which each async layer above moves by value.
    fn commit(&self, txn: zyron_heap::Transaction) -> BoxFuture<'static, Result<()>> {
        Box::pin(txn.commit(self.settings.durability()))
    }

    async fn execute_utility(&mut self, utility: &Utility) -> Result<StatementResult> {
        let tag = match utility {
            Utility::Begin { isolation } => {
                // PostgreSQL warns and carries on when already in a block, and makes an
                // implicit block explicit (its statements so far stay in the transaction).
                if self.block == Block::Implicit && isolation.is_some() && self.txn.is_open().await
                {
                    return Err(ZyronError::new(
                        SqlState::ACTIVE_SQL_TRANSACTION,
                        "SET TRANSACTION ISOLATION LEVEL must be called before any query",
                    ));
                }
                if matches!(self.block, Block::Idle | Block::Implicit) {
                    self.block = Block::InBlock;
                    self.block_isolation = isolation.or(self.block_isolation);
                }
                CommandTag::new("BEGIN").with_transaction(TransactionEffect::Started)
            }
            Utility::Commit => {
                let failed = self.block == Block::Failed;
                self.block = Block::Idle;
                self.block_isolation = None;
                let txn = self.txn.take().await;
                match txn {
                    Some(txn) if !failed => self.commit(txn).await?,
                    Some(txn) => txn.rollback(),
                    None => {}
                }
                let tag = if failed { "ROLLBACK" } else { "COMMIT" };
                CommandTag::new(tag).with_transaction(TransactionEffect::Ended)
            }
            Utility::Rollback => {
                self.block = Block::Idle;
                self.block_isolation = None;
                if let Some(txn) = self.txn.take().await {
                    txn.rollback();
                }
                CommandTag::new("ROLLBACK").with_transaction(TransactionEffect::Ended)
            }
            Utility::Savepoint { name } => {
                self.require_block("SAVEPOINT")?;
                self.txn.begin_statement(self.isolation()).await;
                self.with_txn(|txn| {
                    txn.savepoint(name);
                    Ok(())
                })
                .await?;
                CommandTag::new("SAVEPOINT")
            }
            Utility::ReleaseSavepoint { name } => {
                self.require_block("RELEASE SAVEPOINT")?;
                self.txn.begin_statement(self.isolation()).await;
                self.with_txn(|txn| txn.release_savepoint(name)).await?;
                CommandTag::new("RELEASE")
            }
            Utility::RollbackToSavepoint { name } => {
                self.require_block("ROLLBACK TO SAVEPOINT")?;
                self.txn.begin_statement(self.isolation()).await;
                self.with_txn(|txn| txn.rollback_to_savepoint(name)).await?;
                self.block = Block::InBlock;
                CommandTag::new("ROLLBACK")
            }
            Utility::SetTransaction { isolation } => {
                if self.block != Block::Idle && !self.txn.is_open().await {
                    self.block_isolation = isolation.or(self.block_isolation);
                }
                CommandTag::new("SET")
            }
            Utility::Vacuum { tables } => {
                if self.block != Block::Idle {
                    return Err(ZyronError::new(
                        SqlState::ACTIVE_SQL_TRANSACTION,
                        "VACUUM cannot run inside a transaction block",
                    ));
                }
                let mut heap = tables.is_empty();
                for table in tables {
                    match self.is_lake_table(table).await {
                        true => {
                            self.run_for_effect(&lake::syntax::default_vacuum(table))
                                .await?
                        }
                        false => heap = true,
                    }
                }
                if heap {
                    self.txn.store().vacuum();
                }
                CommandTag::new("VACUUM")
            }
            Utility::Lake { query, tag } => {
                self.run_for_effect(query).await?;
                CommandTag::new(*tag)
            }
            Utility::Checkpoint => {
                let store = self.txn.store().clone();
                tokio::task::spawn_blocking(move || store.checkpoint())
                    .await
                    .map_err(|e| ZyronError::internal(format!("checkpoint task failed: {e}")))??;
                CommandTag::new("CHECKPOINT")
            }
            Utility::Set { name, value } => {
                self.set_parameter(name, value)?;
                CommandTag::new("SET")
            }
            Utility::Show { name } => {
                let (display, value) = self.settings.get(name)?;
                return one_column_rows(show_schema(display), vec![value.to_owned()], None);
            }
            Utility::ShowAll => {
                let (names, values): (Vec<String>, Vec<String>) = self
                    .settings
                    .all()
                    .map(|(name, value)| (name.to_owned(), value.to_owned()))
                    .unzip();
                return one_column_rows(show_all_schema(), names, Some(values));
            }
            Utility::NoOp { tag } => CommandTag::new(*tag),
            Utility::CopyFromStdin {
                table,
                columns,
                format,
            } => return Box::pin(self.start_copy_in(table, columns, format)).await,
        };
        Ok(StatementResult::Command(tag))
    }

    /// Starts COPY ... FROM STDIN into a heap table.
    async fn start_copy_in(
        &mut self,
        table: &str,
        columns: &[String],
        format: &crate::copy_in::CopyFormat,
    ) -> Result<StatementResult> {
        let (target, schema) = self.copy_target(table).await?;
        let targets = if columns.is_empty() {
            (0..schema.fields().len()).collect()
        } else {
            columns
                .iter()
                .map(|c| {
                    schema.index_of(c).map_err(|_| {
                        ZyronError::new(
                            SqlState::UNDEFINED_COLUMN,
                            format!("column \"{c}\" of relation \"{table}\" does not exist"),
                        )
                    })
                })
                .collect::<Result<Vec<_>>>()?
        };
        let copy = crate::copy_in::CopyIn::new(target, targets, format.clone());
        let columns = copy.column_count();
        self.copy_in = Some(copy);
        Ok(StatementResult::CopyIn { columns })
    }

    /// The table a COPY writes: a heap table in the session's transaction,
    /// or a lake table (outside transaction blocks: its commit is its own).
    async fn copy_target(
        &mut self,
        table: &str,
    ) -> Result<(
        crate::copy_in::CopyTarget,
        datafusion::arrow::datatypes::SchemaRef,
    )> {
        self.txn.begin_statement(self.isolation()).await;
        let heap = self
            .with_txn(|txn| Ok(txn.table(zyron_heap::catalog::DEFAULT_SCHEMA, table)))
            .await?;
        if let Some(heap) = heap {
            let schema = heap.codec().schema().clone();
            return Ok((crate::copy_in::CopyTarget::Heap(heap), schema));
        }
        let provider = self.ctx.table_provider(table).await.ok();
        let Some((lake, schema)) = provider.as_ref().and_then(crate::lake::lake_table_of) else {
            return Err(ZyronError::new(
                SqlState::UNDEFINED_TABLE,
                format!("relation \"{table}\" does not exist"),
            ));
        };
        if self.in_transaction_block() {
            return Err(crate::lake::in_block_error());
        }
        let base = Box::new(lake.latest().await?);
        let target = crate::copy_in::CopyTarget::Lake {
            table: lake,
            schema: schema.clone(),
            base,
            added: Vec::new(),
        };
        Ok((target, schema))
    }

    /// One CopyData message of a COPY FROM STDIN. Errors are kept and
    /// reported by [`Session::copy_done`].
    pub async fn copy_data(&mut self, data: &[u8]) {
        let Some(copy) = self.copy_in.as_mut() else {
            return;
        };
        let mut guard = self.txn.lock().await;
        if let Some(txn) = guard.as_mut() {
            copy.data(txn, data).await;
        }
    }

    /// The client ended a COPY FROM STDIN: the rows are written (and
    /// committed, outside a transaction block). Returns the `COPY n` tag.
    pub async fn copy_done(&mut self) -> Result<CommandTag> {
        let copy = self.copy_in.take().ok_or_else(|| {
            ZyronError::new(SqlState::PROTOCOL_VIOLATION, "no COPY is in progress")
        })?;
        let written = {
            let mut guard = self.txn.lock().await;
            match guard.as_mut() {
                Some(txn) => copy.finish(txn).await,
                None => Err(ZyronError::internal("no transaction is open")),
            }
        };
        let outcome = self.end_copy(written).await;
        outcome
            .map(|rows| CommandTag::new("COPY").with_rows(rows))
            .map_err(|e| self.fail(e))
    }

    /// The client aborted a COPY FROM STDIN (CopyFail).
    pub async fn copy_fail(&mut self, message: &str) -> ZyronError {
        self.copy_in = None;
        let error = ZyronError::new(
            SqlState::QUERY_CANCELED,
            format!("COPY from stdin failed: {message}"),
        );
        let error = self.end_copy(Err(error)).await.unwrap_err();
        self.fail(error)
    }

    /// Commits or rolls back an autocommit COPY, or the implicit block it ends.
    async fn end_copy(&mut self, written: Result<u64>) -> Result<u64> {
        if self.block == Block::Implicit {
            let succeeded = written.is_ok();
            self.end_implicit_block(succeeded).await?;
            return written;
        }
        if self.block != Block::Idle {
            return written;
        }
        match (written, self.txn.take().await) {
            (Ok(rows), Some(txn)) => {
                self.commit(txn).await?;
                Ok(rows)
            }
            (Err(error), Some(txn)) => {
                txn.rollback();
                Err(error)
            }
            (written, None) => written,
        }
    }

    /// SAVEPOINT and friends exist only inside BEGIN ... COMMIT (25P01).
    fn require_block(&self, what: &str) -> Result<()> {
        if matches!(self.block, Block::Idle | Block::Implicit) {
            return Err(ZyronError::new(
                SqlState::NO_ACTIVE_SQL_TRANSACTION,
                format!("{what} can only be used in transaction blocks"),
            ));
        }
        Ok(())
    }

    /// `CREATE OR REPLACE VIEW` replaces a view only: an external table of
    /// that name is 42809, as in PostgreSQL. Replacing a view that other
    /// views read is 2BP01 (where PostgreSQL allows it if the columns stay):
    /// their plans hold a copy of its old plan, and would go on reading it.
    fn check_view_replaceable(&self, create: &datafusion::logical_expr::CreateView) -> Result<()> {
        let name = create.name.table();
        if !create.or_replace {
            return Ok(());
        }
        let existing = self
            .shared
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(name)
            .map(|provider| provider.table_type() == datafusion::logical_expr::TableType::View);
        if existing == Some(false) {
            return Err(ZyronError::new(
                SqlState::WRONG_OBJECT_TYPE,
                format!("\"{name}\" is not a view"),
            ));
        }
        let dependents = heap::dependent_views(&self.shared, name);
        if !dependents.is_empty() {
            return Err(heap::dependents_error("replace", "view", name, &dependents));
        }
        Ok(())
    }

    /// DROP TABLE, DROP VIEW, TRUNCATE and ALTER TABLE ... ADD PRIMARY KEY,
    /// run in the session's transaction; `None` for other statements.
    async fn execute_heap_ddl(&self, statement: &DfStatement) -> Result<Option<StatementResult>> {
        let DfStatement::Statement(inner) = statement else {
            return Ok(None);
        };
        let tag = match inner.as_ref() {
            ast::Statement::Drop {
                object_type: object_type @ (ast::ObjectType::Table | ast::ObjectType::View),
                ..
            } => {
                let (shared, external) = (self.shared.clone(), self.external.clone());
                self.with_txn(|txn| heap::drop_relations(txn, &shared, &external, inner))
                    .await?;
                CommandTag::new(if *object_type == ast::ObjectType::View {
                    "DROP VIEW"
                } else {
                    "DROP TABLE"
                })
            }
            ast::Statement::Truncate(truncate) => {
                let names: Vec<ast::ObjectName> = truncate
                    .table_names
                    .iter()
                    .map(|t| t.name.clone())
                    .collect();
                self.with_txn(|txn| heap::truncate_tables(txn, &names))
                    .await?;
                CommandTag::new("TRUNCATE TABLE")
            }
            ast::Statement::AlterTable(alter) => match primary_key_added(alter) {
                Some(columns) => {
                    self.with_txn(|txn| heap::alter_add_primary_key(txn, &alter.name, &columns))
                        .await?;
                    CommandTag::new("ALTER TABLE")
                }
                None => {
                    return Err(ZyronError::not_supported(
                        "this form of ALTER TABLE is not supported yet (ADD PRIMARY KEY is)",
                    ));
                }
            },
            _ => return Ok(None),
        };
        Ok(Some(StatementResult::Command(tag)))
    }

    /// CREATE TABLE [AS]: a heap table in the session's transaction, filled
    /// with the query's rows for CREATE TABLE AS.
    async fn create_heap_table(
        &self,
        create: &datafusion::logical_expr::CreateMemoryTable,
        extras: heap::CreateTableExtras,
    ) -> Result<StatementResult> {
        let shared = self.shared.clone();
        let table = self
            .with_txn(|txn| heap::create_table(txn, &shared, create, extras))
            .await?;
        let tag = CommandTag::new("CREATE TABLE");
        let Some(table) = table else {
            return Ok(StatementResult::Command(tag));
        };
        if matches!(create.input.as_ref(), LogicalPlan::EmptyRelation(_)) {
            return Ok(StatementResult::Command(tag));
        }
        let batches = self
            .ctx
            .execute_logical_plan(create.input.as_ref().clone())
            .await
            .map_err(to_zyron_error)?
            .collect()
            .await
            .map_err(to_zyron_error)?;
        let mut guard = self.txn.lock().await;
        let txn = guard
            .as_mut()
            .ok_or_else(|| ZyronError::internal("no transaction is open"))?;
        let mut rows = 0;
        for batch in batches {
            let batch = batch
                .with_schema(table.codec().schema().clone())
                .map_err(|e| to_zyron_error(e.into()))?;
            rows += txn.insert(&table, &batch).await?;
        }
        Ok(StatementResult::Command(
            CommandTag::new("SELECT").with_rows(rows),
        ))
    }

    /// `SET name = value` for this session (also what a client's startup parameters and
    /// `options=-c name=value` do). Unknown names get 42704, read-only ones 55P02.
    pub fn set_parameter(&mut self, name: &str, value: &str) -> Result<()> {
        // Checked before it is stored, so a zone DataFusion cannot use fails here (22023)
        // rather than in every later query that touches a timestamptz.
        let zone = name
            .eq_ignore_ascii_case("timezone")
            .then(|| time_zone_offset(value))
            .transpose()?;
        self.settings.set(name, value)?;
        self.settings_generation += 1;
        if let Some(zone) = zone {
            let state = self.ctx.state_ref();
            let mut state = state.write();
            state.config_mut().options_mut().execution.time_zone = Some(zone);
        }
        Ok(())
    }

    /// How many executions of prepared queries used a kept plan instead of planning again.
    pub fn kept_plan_executions(&self) -> u64 {
        self.kept_plan_executions
    }

    /// How many of those ran a kept physical plan, skipping physical planning too.
    pub fn kept_physical_executions(&self) -> u64 {
        self.kept_physical_executions
    }

    /// Whether `name` is a run-time parameter this session knows.
    pub fn knows_parameter(&self, name: &str) -> bool {
        self.settings.get(name).is_ok()
    }
}

/// The session time zone DataFusion gets for `SET TimeZone = value`: `UTC` and `DEFAULT` as
/// `+00:00`, else an IANA name or an offset Arrow parses; anything else is 22023.
fn time_zone_offset(value: &str) -> Result<String> {
    if value.eq_ignore_ascii_case("utc") || value.eq_ignore_ascii_case("default") {
        return Ok("+00:00".to_owned());
    }
    value
        .parse::<datafusion::arrow::array::timezone::Tz>()
        .map(|_| value.to_owned())
        .map_err(|_| {
            ZyronError::new(
                SqlState::INVALID_PARAMETER_VALUE,
                format!("invalid value for parameter \"TimeZone\": \"{value}\""),
            )
        })
}

/// Casts each parameter to the type the plan expects. Drivers encode values
/// by the PostgreSQL type (text arrives as Utf8), while a column may be
/// stored as another Arrow type of the same SQL type (Utf8View); without the
/// cast the value would be written with the wrong physical type.
fn coerce_params(params: ParamValues, expected: &[Option<DataType>]) -> Result<ParamValues> {
    let ParamValues::List(values) = params else {
        return Ok(params);
    };
    values
        .into_iter()
        .enumerate()
        .map(|(index, mut param)| {
            if let Some(Some(target)) = expected.get(index)
                && param.value.data_type() != *target
                && !param.value.is_null()
            {
                param.value = param.value.cast_to(target).map_err(|e| {
                    ZyronError::new(
                        SqlState::DATATYPE_MISMATCH,
                        format!("parameter ${} cannot be used as {target}: {e}", index + 1),
                    )
                })?;
            }
            Ok(param)
        })
        .collect::<Result<Vec<_>>>()
        .map(ParamValues::List)
}

/// Statements a failed block still accepts: COMMIT, ROLLBACK, ROLLBACK TO SAVEPOINT.
fn ends_block(parsed: &Parsed) -> bool {
    matches!(
        parsed,
        Parsed::Utility(Utility::Commit | Utility::Rollback | Utility::RollbackToSavepoint { .. })
    )
}

/// Statements Zyron runs itself rather than through a DataFusion plan.
fn intercepted(statement: &DfStatement) -> bool {
    let DfStatement::Statement(inner) = statement else {
        return false;
    };
    matches!(
        inner.as_ref(),
        ast::Statement::Drop {
            object_type: ast::ObjectType::Table | ast::ObjectType::View,
            ..
        } | ast::Statement::Truncate(_)
            | ast::Statement::AlterTable(_)
            | ast::Statement::CreateTable(_)
    )
}

/// The columns of `ALTER TABLE t ADD PRIMARY KEY (columns)`, if that is what it says.
fn primary_key_added(alter: &ast::AlterTable) -> Option<Vec<String>> {
    let [
        ast::AlterTableOperation::AddConstraint {
            constraint: ast::TableConstraint::PrimaryKey(key),
            ..
        },
    ] = alter.operations.as_slice()
    else {
        return None;
    };
    key.columns
        .iter()
        .map(|c| match &c.column.expr {
            ast::Expr::Identifier(ident) => Some(ident.value.clone()),
            _ => None,
        })
        .collect()
}

/// DataFusion's DML plans return one row with the affected-row count.
fn affected_rows(batches: &[RecordBatch]) -> u64 {
    batches
        .iter()
        .filter(|batch| batch.num_columns() > 0)
        .filter_map(|batch| {
            batch
                .column(0)
                .as_any()
                .downcast_ref::<UInt64Array>()
                .cloned()
        })
        .map(|counts| counts.iter().flatten().sum::<u64>())
        .sum()
}

/// A result whose rows stop with 57014 at `deadline` (`statement_timeout`).
fn bounded(result: StatementResult, deadline: Option<tokio::time::Instant>) -> StatementResult {
    match (result, deadline) {
        (StatementResult::Rows { schema, stream }, Some(deadline)) => StatementResult::Rows {
            schema,
            stream: crate::deadline::bounded(stream, deadline),
        },
        (result, _) => result,
    }
}

/// `result` with PostgreSQL's column names where DataFusion's had to differ
/// (repeated names: see `output_names`).
fn client_named(result: StatementResult) -> StatementResult {
    let StatementResult::Rows { schema, stream } = result else {
        return result;
    };
    let Some(renamed) = crate::output_names::client_schema(&schema) else {
        return StatementResult::Rows { schema, stream };
    };
    let batch_schema = renamed.clone();
    let stream = stream.map(move |batch| {
        let batch = batch?;
        Ok(RecordBatch::try_new(
            batch_schema.clone(),
            batch.columns().to_vec(),
        )?)
    });
    StatementResult::Rows {
        schema: renamed.clone(),
        stream: Box::pin(RecordBatchStreamAdapter::new(renamed, stream)),
    }
}

/// Collects a streamed result so the next statement of a script sees its effects.
async fn materialize(result: StatementResult) -> Result<StatementResult> {
    match result {
        StatementResult::Rows { schema, stream } => {
            let batches = datafusion::physical_plan::common::collect(stream)
                .await
                .map_err(to_zyron_error)?;
            let stream =
                MemoryStream::try_new(batches, schema.clone(), None).map_err(to_zyron_error)?;
            Ok(StatementResult::Rows {
                schema,
                stream: Box::pin(stream),
            })
        }
        command => Ok(command),
    }
}

fn show_schema(name: &str) -> SchemaRef {
    Arc::new(Schema::new(vec![Field::new(name, DataType::Utf8, false)]))
}

fn show_all_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("name", DataType::Utf8, false),
        Field::new("setting", DataType::Utf8, false),
    ]))
}

fn one_column_rows(
    schema: SchemaRef,
    first: Vec<String>,
    second: Option<Vec<String>>,
) -> Result<StatementResult> {
    let mut columns: Vec<Arc<dyn Array>> = vec![Arc::new(StringArray::from(first))];
    if let Some(second) = second {
        columns.push(Arc::new(StringArray::from(second)));
    }
    let batch =
        RecordBatch::try_new(schema.clone(), columns).map_err(|e| to_zyron_error(e.into()))?;
    let stream =
        MemoryStream::try_new(vec![batch], schema.clone(), None).map_err(to_zyron_error)?;
    Ok(StatementResult::Rows {
        schema,
        stream: Box::pin(stream),
    })
}
