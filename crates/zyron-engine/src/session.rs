//! One client's session: its settings, its transaction state, and the path
//! from SQL text to results.

use std::sync::Arc;

use datafusion::arrow::array::{Array, RecordBatch, StringArray, UInt64Array};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::common::ParamValues;
use datafusion::execution::SendableRecordBatchStream;
use datafusion::logical_expr::LogicalPlan;
use datafusion::physical_plan::memory::MemoryStream;
use datafusion::prelude::SessionContext;

use zyron_common::{Result, SqlState, ZyronError};

use crate::errors::to_zyron_error;
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
}

impl std::fmt::Debug for StatementResult {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StatementResult::Rows { schema, .. } => write!(f, "Rows({schema:?})"),
            StatementResult::Command(tag) => write!(f, "Command({tag})"),
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
    /// Inside BEGIN ... COMMIT.
    InBlock,
    /// A statement failed inside the block: everything but COMMIT/ROLLBACK is refused.
    Failed,
}

/// A statement parsed (and, for DataFusion statements, planned) once and
/// executed many times through the extended protocol.
#[derive(Debug, Clone)]
pub struct PreparedStatement {
    sql: String,
    parsed: Option<Parsed>,
    /// The plan made at prepare time, for describing parameters and result
    /// columns. Execution plans again, so a statement prepared before a table
    /// changed still sees the table as it is.
    described_plan: Option<LogicalPlan>,
}

impl PreparedStatement {
    pub fn sql(&self) -> &str {
        &self.sql
    }

    /// Types of `$1..$n` as DataFusion inferred them (`None` where it could not).
    pub fn parameter_types(&self) -> Vec<Option<DataType>> {
        let Some(plan) = &self.described_plan else {
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
    pub fn result_schema(&self) -> SchemaRef {
        match (&self.parsed, &self.described_plan) {
            (Some(Parsed::Utility(Utility::Show { name })), _) => show_schema(name),
            (Some(Parsed::Utility(Utility::ShowAll)), _) => show_all_schema(),
            (_, Some(plan)) if statement::command_for_plan(plan).is_none() => {
                Arc::new(plan.schema().as_arrow().clone())
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
}

impl Session {
    pub(crate) fn new(id: u32, ctx: SessionContext) -> Self {
        Self {
            id,
            ctx,
            settings: Settings::default(),
            block: Block::Idle,
        }
    }

    /// A number unique among this engine's sessions (the backend pid clients see).
    pub fn id(&self) -> u32 {
        self.id
    }

    /// The DataFusion context, for embedding and tests.
    pub fn context(&self) -> &SessionContext {
        &self.ctx
    }

    /// True inside BEGIN ... COMMIT (including a failed block).
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
    /// Every result but the last is fully computed before the next statement
    /// starts, so a later statement sees the effects of an earlier one; the
    /// last result streams.
    pub async fn execute_script(
        &mut self,
        sql: &str,
    ) -> (Vec<StatementResult>, Option<ZyronError>) {
        let statements = match statement::parse(sql) {
            Ok(statements) => statements,
            Err(error) => return (Vec::new(), Some(self.fail(error))),
        };
        let count = statements.len();
        let mut results = Vec::with_capacity(count);
        for (index, parsed) in statements.into_iter().enumerate() {
            match self.execute_parsed(&parsed, None).await {
                Ok(result) if index + 1 < count => match materialize(result).await {
                    Ok(result) => results.push(result),
                    Err(error) => return (results, Some(self.fail(error))),
                },
                Ok(result) => results.push(result),
                Err(error) => return (results, Some(error)),
            }
        }
        (results, None)
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
            Some(Parsed::DataFusion(statement)) => Some(self.plan(statement.clone()).await?),
            _ => None,
        };
        Ok(PreparedStatement {
            sql: sql.to_owned(),
            parsed,
            described_plan,
        })
    }

    /// Executes a prepared statement with the given parameter values.
    pub async fn execute_prepared(
        &mut self,
        prepared: &PreparedStatement,
        params: Option<ParamValues>,
    ) -> Result<StatementResult> {
        let params = params
            .map(|p| coerce_params(p, &prepared.parameter_types()))
            .transpose()?;
        match &prepared.parsed {
            Some(parsed) => self.execute_parsed(parsed, params).await,
            None => Ok(StatementResult::Command(CommandTag::new(""))),
        }
    }

    async fn execute_parsed(
        &mut self,
        parsed: &Parsed,
        params: Option<ParamValues>,
    ) -> Result<StatementResult> {
        if self.block == Block::Failed && !ends_block(parsed) {
            return Err(ZyronError::new(
                SqlState::IN_FAILED_SQL_TRANSACTION,
                "current transaction is aborted, commands ignored until end of transaction block",
            ));
        }
        let outcome = match parsed {
            Parsed::Utility(utility) => self.execute_utility(utility),
            Parsed::DataFusion(statement) => {
                self.execute_statement(statement.clone(), params).await
            }
        };
        outcome.map_err(|error| self.fail(error))
    }

    /// Records a failure: inside a transaction block it poisons the block.
    fn fail(&mut self, error: ZyronError) -> ZyronError {
        if self.block == Block::InBlock {
            self.block = Block::Failed;
        }
        error
    }

    async fn plan(&self, statement: datafusion::sql::parser::Statement) -> Result<LogicalPlan> {
        self.ctx
            .state()
            .statement_to_plan(statement)
            .await
            .map_err(to_zyron_error)
    }

    async fn execute_statement(
        &mut self,
        statement: datafusion::sql::parser::Statement,
        params: Option<ParamValues>,
    ) -> Result<StatementResult> {
        if let datafusion::sql::parser::Statement::CopyTo(copy) = &statement
            && crate::zyr::is_zyr_target(copy)
        {
            let rows = crate::zyr::copy_to_zyr(&self.ctx, copy).await?;
            return Ok(StatementResult::Command(
                CommandTag::new("COPY").with_rows(rows),
            ));
        }
        let mut plan = self.plan(statement).await?;
        if let Some(params) = params {
            plan = plan.with_param_values(params).map_err(to_zyron_error)?;
        }
        let command = statement::command_for_plan(&plan);
        let frame = self
            .ctx
            .execute_logical_plan(plan)
            .await
            .map_err(to_zyron_error)?;
        match command {
            None => {
                let schema = Arc::new(frame.schema().as_arrow().clone());
                let stream = frame.execute_stream().await.map_err(to_zyron_error)?;
                Ok(StatementResult::Rows { schema, stream })
            }
            Some(command @ ("INSERT" | "UPDATE" | "DELETE" | "COPY")) => {
                let batches = frame.collect().await.map_err(to_zyron_error)?;
                Ok(StatementResult::Command(
                    CommandTag::new(command).with_rows(affected_rows(&batches)),
                ))
            }
            Some(command) => {
                frame.collect().await.map_err(to_zyron_error)?;
                Ok(StatementResult::Command(CommandTag::new(command)))
            }
        }
    }

    fn execute_utility(&mut self, utility: &Utility) -> Result<StatementResult> {
        let tag = match utility {
            Utility::Begin => {
                // PostgreSQL warns and carries on when already in a block.
                if self.block == Block::Idle {
                    self.block = Block::InBlock;
                }
                CommandTag::new("BEGIN").with_transaction(TransactionEffect::Started)
            }
            Utility::Commit => {
                let tag = if self.block == Block::Failed {
                    "ROLLBACK"
                } else {
                    "COMMIT"
                };
                self.block = Block::Idle;
                CommandTag::new(tag).with_transaction(TransactionEffect::Ended)
            }
            Utility::Rollback => {
                self.block = Block::Idle;
                CommandTag::new("ROLLBACK").with_transaction(TransactionEffect::Ended)
            }
            Utility::Set { name, value } => {
                self.settings.set(name, value)?;
                if name.eq_ignore_ascii_case("timezone") {
                    self.apply_time_zone(value);
                }
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
        };
        Ok(StatementResult::Command(tag))
    }

    fn apply_time_zone(&self, value: &str) {
        let zone = if value.eq_ignore_ascii_case("utc") || value.eq_ignore_ascii_case("default") {
            "+00:00".to_owned()
        } else {
            value.to_owned()
        };
        let state = self.ctx.state_ref();
        let mut state = state.write();
        state.config_mut().options_mut().execution.time_zone = Some(zone);
    }
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

fn ends_block(parsed: &Parsed) -> bool {
    matches!(parsed, Parsed::Utility(Utility::Commit | Utility::Rollback))
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
