//! The pgwire handlers of one connection, all backed by one engine session.

use std::fmt::Debug;
use std::net::TcpStream;
use std::sync::Arc;

use async_trait::async_trait;
use datafusion::arrow::datatypes::DataType;
use std::panic::AssertUnwindSafe;

use futures::{FutureExt, Sink, SinkExt};
use pgwire::api::auth::StartupHandler;
use pgwire::api::auth::noop::NoopStartupHandler;
use pgwire::api::cancel::{CancelHandler, DefaultCancelHandler};
use pgwire::api::copy::CopyHandler;
use pgwire::api::portal::{Format, Portal};
use pgwire::api::query::{ExtendedQueryHandler, SimpleQueryHandler};
use pgwire::api::results::{FieldInfo, Response};
use pgwire::api::stmt::QueryParser;
use pgwire::api::store::{Entry, PortalStore};
use pgwire::api::{
    ClientInfo, ClientPortalStore, ConnectionManager, DEFAULT_NAME, PgWireConnectionState,
    PgWireServerHandlers, Type,
};
use pgwire::error::ErrorInfo;
use pgwire::error::{PgWireError, PgWireResult};
use pgwire::messages::copy::{CopyData, CopyDone, CopyFail};
use pgwire::messages::extendedquery::{Bind, BindComplete, Describe, Execute, Sync as SyncMessage};
use pgwire::messages::response::ReadyForQuery;
use pgwire::messages::simplequery::Query;
use pgwire::messages::{PgWireBackendMessage, PgWireFrontendMessage};
use tokio::sync::Mutex;

use zyron_common::ZyronError;
use zyron_engine::{PreparedStatement, Session};

use crate::activity::Activity;
use crate::busy_poll::BusyPoll;
use crate::colocate::Colocation;
use crate::deferred_flush::DeferredFlush;
use crate::encode::{self, error_info, to_pgwire_error};

/// Everything one connection needs; handed to `pgwire::tokio::process_socket`.
pub struct ConnectionHandlers {
    backend: Arc<Backend>,
    cancel: Arc<DefaultCancelHandler>,
}

impl ConnectionHandlers {
    pub fn new(
        session: Session,
        manager: Arc<ConnectionManager>,
        cancel: Arc<DefaultCancelHandler>,
        activity: Arc<Activity>,
        between: Option<BetweenMessages>,
    ) -> Self {
        let session = Arc::new(Mutex::new(session));
        let backend = Arc::new(Backend {
            parser: Arc::new(Parser {
                session: Arc::clone(&session),
            }),
            session,
            manager,
            activity,
            between,
        });
        Self { backend, cancel }
    }
}

impl PgWireServerHandlers for ConnectionHandlers {
    fn simple_query_handler(&self) -> Arc<impl SimpleQueryHandler> {
        Arc::clone(&self.backend)
    }

    fn extended_query_handler(&self) -> Arc<impl ExtendedQueryHandler> {
        Arc::clone(&self.backend)
    }

    fn startup_handler(&self) -> Arc<impl StartupHandler> {
        Arc::clone(&self.backend)
    }

    fn cancel_handler(&self) -> Arc<impl CancelHandler> {
        Arc::clone(&self.cancel)
    }

    fn copy_handler(&self) -> Arc<impl CopyHandler> {
        Arc::clone(&self.backend)
    }
}

/// What a connection does between its reply and the client's next message.
pub struct BetweenMessages {
    /// Pins the serving threads to a lone client's CPU (see `colocate`).
    pub colocation: Arc<Colocation>,
    /// Otherwise, polls the socket for a moment before sleeping (see `busy_poll`).
    pub busy_poll: Arc<BusyPoll>,
    /// A duplicate of the connection's descriptor, non-blocking, to look at
    /// while `pgwire` owns the first.
    pub socket: TcpStream,
}

pub struct Backend {
    session: Arc<Mutex<Session>>,
    parser: Arc<Parser>,
    manager: Arc<ConnectionManager>,
    activity: Arc<Activity>,
    between: Option<BetweenMessages>,
}

impl Backend {
    /// Called once ReadyForQuery has left, to be ready for a client that sends
    /// its next statement at once. A thread on the client's own CPU just
    /// sleeps: waking it costs no idle vCPU's wake-up.
    fn wait_for_next_message(&self) {
        let Some(between) = &self.between else {
            return;
        };
        if !between.colocation.follow(&between.socket) {
            between.busy_poll.wait_readable(&between.socket);
        }
    }
}

#[async_trait]
impl NoopStartupHandler for Backend {
    /// Registering the connection lets a CancelRequest (psql's Ctrl-C) find it.
    fn connection_manager(&self) -> Option<Arc<ConnectionManager>> {
        Some(Arc::clone(&self.manager))
    }

    /// Applies the client's startup parameters and `options` (see [`crate::startup`]); a bad
    /// one refuses the connection with a FATAL error, as PostgreSQL does.
    async fn post_startup<C>(
        &self,
        _client: &mut C,
        message: PgWireFrontendMessage,
    ) -> PgWireResult<()>
    where
        C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let PgWireFrontendMessage::Startup(startup) = message else {
            return Ok(());
        };
        let mut session = self.session.lock().await;
        let parameters = startup
            .parameters
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()));
        crate::startup::apply(&mut session, parameters).map_err(|err| {
            let mut info = error_info(&err);
            info.severity = "FATAL".to_owned();
            PgWireError::UserError(Box::new(info))
        })
    }
}

#[async_trait]
impl SimpleQueryHandler for Backend {
    async fn on_query<C>(&self, client: &mut C, query: Query) -> PgWireResult<()>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        // Busy from the query's arrival until ReadyForQuery is sent.
        let busy = self.activity.begin();
        let result = self._on_query(client, query).await;
        drop(busy);
        self.wait_for_next_message();
        result
    }

    async fn do_query<C>(&self, _client: &mut C, query: &str) -> PgWireResult<Vec<Response>>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        tracing::debug!(query, "simple query");
        let mut session = self.session.lock().await;
        let (results, error) = catch_panic(session.execute_script(query))
            .await
            .unwrap_or_else(|panic| (Vec::new(), Some(panic)));
        drop(session);
        let mut responses = results
            .into_iter()
            .map(|result| encode::response(result, &Format::UnifiedText))
            .collect::<PgWireResult<Vec<_>>>()?;
        if let Some(error) = error {
            responses.push(Response::Error(Box::new(error_info(&error))));
        }
        Ok(responses)
    }
}

#[async_trait]
impl ExtendedQueryHandler for Backend {
    type Statement = PreparedStatement;
    type QueryParser = Parser;

    fn query_parser(&self) -> Arc<Self::QueryParser> {
        Arc::clone(&self.parser)
    }

    /// pgwire's own Sync handling, then a busy-poll for the next message.
    async fn on_sync<C>(&self, client: &mut C, _message: SyncMessage) -> PgWireResult<()>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore<Statement = Self::Statement>,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        client.portal_store().rm_portal(DEFAULT_NAME);
        let ready = ReadyForQuery::new(client.transaction_status());
        client
            .send(PgWireBackendMessage::ReadyForQuery(ready))
            .await?;
        client.flush().await?;
        self.wait_for_next_message();
        Ok(())
    }

    async fn on_execute<C>(&self, client: &mut C, message: Execute) -> PgWireResult<()>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore<Statement = Self::Statement>,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let _busy = self.activity.begin();
        let result = self._on_execute(&mut DeferredFlush(client), message).await;
        if matches!(client.state(), PgWireConnectionState::CopyInProgress(_)) {
            // The client waits for CopyInResponse before it sends data, and
            // the Sync it pipelined is ignored during copy-in: flush now.
            client.flush().await?;
        }
        result
    }

    async fn on_describe<C>(&self, client: &mut C, message: Describe) -> PgWireResult<()>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore<Statement = Self::Statement>,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        self._on_describe(&mut DeferredFlush(client), message).await
    }

    /// pgwire's own `on_bind`, with BindComplete left for Sync to send
    /// (see `deferred_flush`).
    async fn on_bind<C>(&self, client: &mut C, message: Bind) -> PgWireResult<()>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore<Statement = Self::Statement>,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let statement_name = message.statement_name.as_deref().unwrap_or(DEFAULT_NAME);
        let portal_name = message.portal_name.as_deref().unwrap_or(DEFAULT_NAME);
        match client.portal_store().get_statement(statement_name) {
            Some(Entry::Value(statement)) => {
                let portal = Portal::try_new(&message, statement)?;
                client.portal_store().put_portal(Arc::new(portal));
            }
            Some(Entry::Empty) if message.parameters.is_empty() => {
                client.portal_store().put_empty_portal(portal_name);
            }
            Some(Entry::Empty) => {
                return Err(PgWireError::UserError(Box::new(ErrorInfo::new(
                    "ERROR".to_owned(),
                    "08P01".to_owned(),
                    format!(
                        "bind message supplies {} parameters, but prepared statement {statement_name:?} requires 0",
                        message.parameters.len(),
                    ),
                ))));
            }
            None => return Err(PgWireError::StatementNotFound(statement_name.to_owned())),
        }
        client
            .feed(PgWireBackendMessage::BindComplete(BindComplete::new()))
            .await?;
        Ok(())
    }

    async fn do_query<C>(
        &self,
        _client: &mut C,
        portal: &Portal<Self::Statement>,
        _max_rows: usize,
    ) -> PgWireResult<Response>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore<Statement = Self::Statement>,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let prepared = &portal.statement.statement;
        tracing::debug!(query = prepared.sql(), "extended query");
        let params = if portal.parameter_len() == 0 {
            None
        } else {
            let inferred = prepared.parameter_types();
            match crate::params::integers_as_text(portal, inferred) {
                Some(params) => Some(params),
                None => {
                    let inferred_refs: Vec<Option<&DataType>> =
                        inferred.iter().map(Option::as_ref).collect();
                    Some(arrow_pg::datatypes::df::deserialize_parameters(
                        portal,
                        &inferred_refs,
                    )?)
                }
            }
        };
        let mut session = self.session.lock().await;
        let result = catch_panic(session.execute_prepared(prepared, params))
            .await
            .and_then(|result| result)
            .map_err(to_pgwire_error)?;
        encode::response(result, &portal.result_column_format)
    }
}

/// COPY ... FROM STDIN: rows arrive in CopyData messages and are written by
/// the session; errors are kept until CopyDone, as PostgreSQL reports them.
#[async_trait]
impl CopyHandler for Backend {
    async fn on_copy_data<C>(&self, _client: &mut C, copy_data: CopyData) -> PgWireResult<()>
    where
        C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let mut session = self.session.lock().await;
        // A panic here is kept like any other COPY error: reported at CopyDone.
        let _ = catch_panic(session.copy_data(&copy_data.data)).await;
        Ok(())
    }

    async fn on_copy_done<C>(&self, client: &mut C, _done: CopyDone) -> PgWireResult<()>
    where
        C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let mut session = self.session.lock().await;
        let tag = catch_panic(session.copy_done())
            .await
            .and_then(|result| result)
            .map_err(to_pgwire_error)?;
        drop(session);
        pgwire::api::query::send_execution_response(client, encode::wire_tag(&tag)).await
    }

    async fn on_copy_fail<C>(&self, _client: &mut C, fail: CopyFail) -> PgWireError
    where
        C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let mut session = self.session.lock().await;
        to_pgwire_error(session.copy_fail(&fail.message).await)
    }
}

/// Runs `work`, turning a panic inside it into an XX000 error for this query:
/// a bug in one statement must not close the client's connection.
///
/// `work` is boxed at once: a statement's future is most of a kilobyte, and
/// the handler's futures above it (one of which pgwire boxes again) then
/// hold and move a pointer instead of copying it at every layer.
fn catch_panic<'a, T>(
    work: impl Future<Output = T> + Send + 'a,
) -> impl Future<Output = Result<T, ZyronError>> + Send + 'a {
    AssertUnwindSafe(Box::pin(work))
        .catch_unwind()
        .map(|caught| {
            caught.map_err(|panic| {
                let message = panic
                    .downcast_ref::<&str>()
                    .map(|s| s.to_string())
                    .or_else(|| panic.downcast_ref::<String>().cloned())
                    .unwrap_or_else(|| "unknown cause".to_owned());
                tracing::error!(%message, "statement panicked");
                ZyronError::internal(format!(
                    "internal error while executing the statement: {message}"
                ))
            })
        })
}

/// Parses (and plans) statements for the extended protocol in the session's context.
pub struct Parser {
    session: Arc<Mutex<Session>>,
}

#[async_trait]
impl QueryParser for Parser {
    type Statement = PreparedStatement;

    async fn parse_sql<C>(
        &self,
        _client: &C,
        sql: &str,
        _types: &[Option<Type>],
    ) -> PgWireResult<Option<Self::Statement>>
    where
        C: ClientInfo + Unpin + Send + Sync,
    {
        let session = self.session.lock().await;
        session
            .prepare(sql)
            .await
            .map(Some)
            .map_err(to_pgwire_error)
    }

    fn get_parameter_types(&self, statement: &Self::Statement) -> PgWireResult<Vec<Type>> {
        statement
            .parameter_types()
            .iter()
            .map(|inferred| match inferred {
                Some(data_type) => arrow_pg::datatypes::into_pg_type(data_type),
                None => Ok(Type::UNKNOWN),
            })
            .collect()
    }

    fn get_result_schema(
        &self,
        statement: &Self::Statement,
        column_format: Option<&Format>,
    ) -> PgWireResult<Vec<FieldInfo>> {
        let format = column_format.cloned().unwrap_or(Format::UnifiedText);
        encode::fields(&statement.result_schema(), &format)
    }
}
