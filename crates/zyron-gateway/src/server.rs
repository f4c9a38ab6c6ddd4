//! The TCP listener: accepting, limiting and gracefully closing connections.

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use pgwire::api::ConnectionManager;
use pgwire::api::cancel::DefaultCancelHandler;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use zyron_common::{DEFAULT_BUSY_POLL_US, SqlState};
use zyron_engine::Engine;

use crate::activity::Activity;
use crate::busy_poll::{BusyPoll, peek_handle};
use crate::colocate::Colocation;
use crate::handler::{BetweenMessages, ConnectionHandlers};

/// Limits of the wire listener.
#[derive(Debug, Clone)]
pub struct GatewayOptions {
    /// Connections beyond this are refused with SQLSTATE 53300.
    pub max_connections: usize,
    /// On shutdown, how long an in-flight query may run before it is cancelled.
    pub shutdown_grace_ms: u64,
    /// After a reply, how long an otherwise idle server polls the client's
    /// socket before sleeping (see `busy_poll`); 0 turns polling off.
    pub busy_poll_us: u64,
    /// While one connection is open, run the threads serving it on the CPU
    /// its messages arrive on (see `colocate`).
    pub follow_client_cpu: bool,
}

impl Default for GatewayOptions {
    fn default() -> Self {
        Self {
            max_connections: 100,
            shutdown_grace_ms: 10_000,
            busy_poll_us: DEFAULT_BUSY_POLL_US,
            follow_client_cpu: true,
        }
    }
}

/// Counters reported when the server stops.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct ServerStats {
    pub connections_accepted: usize,
    pub connections_refused: usize,
    /// Connections still running a query when shutdown began that finished in the grace period.
    pub queries_drained: usize,
    /// Connections whose query was cancelled because the grace period ran out.
    pub queries_cancelled: usize,
}

/// A bound PostgreSQL-protocol listener.
pub struct PgServer {
    listener: TcpListener,
    engine: Arc<Engine>,
    options: GatewayOptions,
    manager: Arc<ConnectionManager>,
    cancel: Arc<DefaultCancelHandler>,
    in_flight: Arc<AtomicUsize>,
    /// Connections being served.
    open: Arc<AtomicUsize>,
    busy_poll: Arc<BusyPoll>,
    colocation: Arc<Colocation>,
}

/// How one connection ended.
enum Ending {
    ClientLeft,
    Drained,
    Cancelled,
}

impl PgServer {
    pub async fn bind(
        addr: SocketAddr,
        engine: Arc<Engine>,
        options: GatewayOptions,
    ) -> io::Result<Self> {
        assert!(
            options.max_connections > 0,
            "max_connections must be positive"
        );
        let listener = TcpListener::bind(addr).await?;
        let manager = Arc::new(ConnectionManager::new());
        let cancel = Arc::new(DefaultCancelHandler::new(Arc::clone(&manager)));
        let in_flight = Arc::new(AtomicUsize::new(0));
        let open = Arc::new(AtomicUsize::new(0));
        let busy_poll = Arc::new(BusyPoll::new(
            options.busy_poll_us,
            Arc::clone(&in_flight),
            Arc::clone(&open),
        ));
        let colocation = Arc::new(Colocation::new(
            options.follow_client_cpu,
            Arc::clone(&open),
        ));
        Ok(Self {
            listener,
            engine,
            options,
            manager,
            cancel,
            in_flight,
            open,
            busy_poll,
            colocation,
        })
    }

    /// A live count of connections with a query in flight (for monitoring and tests).
    pub fn queries_in_flight(&self) -> Arc<AtomicUsize> {
        Arc::clone(&self.in_flight)
    }

    /// The pinning of a lone connection's threads to its client's CPU (for
    /// monitoring and tests).
    pub fn colocation(&self) -> Arc<Colocation> {
        Arc::clone(&self.colocation)
    }

    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// Serves until `shutdown` is cancelled, then stops accepting, lets
    /// in-flight queries finish within the grace period (cancelling the rest),
    /// tells every client `57P01` and closes its connection.
    pub async fn run(self, shutdown: CancellationToken) -> io::Result<ServerStats> {
        let mut stats = ServerStats::default();
        let open = Arc::clone(&self.open);
        let mut connections = JoinSet::new();
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => break,
                Some(finished) = connections.join_next(), if !connections.is_empty() => {
                    record(&mut stats, finished);
                }
                accepted = self.listener.accept() => {
                    let (stream, peer) = match accepted {
                        Ok(accepted) => accepted,
                        // Running out of descriptors must not stop the server.
                        Err(e) => {
                            tracing::warn!(error = %e, "accept failed");
                            continue;
                        }
                    };
                    if open.load(Ordering::SeqCst) >= self.options.max_connections {
                        stats.connections_refused += 1;
                        tracing::warn!(%peer, "refusing connection: max_connections reached");
                        tokio::spawn(refuse(stream));
                        continue;
                    }
                    stats.connections_accepted += 1;
                    open.fetch_add(1, Ordering::SeqCst);
                    self.colocation.release();
                    let task = self.connection_task(stream, peer, Arc::clone(&open), shutdown.clone());
                    connections.spawn(task);
                }
            }
        }
        drop(self.listener);
        tracing::info!(
            open = open.load(Ordering::SeqCst),
            "shutting down: no new connections"
        );
        while let Some(finished) = connections.join_next().await {
            record(&mut stats, finished);
        }
        Ok(stats)
    }

    fn connection_task(
        &self,
        stream: TcpStream,
        peer: SocketAddr,
        open: Arc<AtomicUsize>,
        shutdown: CancellationToken,
    ) -> impl Future<Output = Ending> + Send + 'static {
        let activity = Arc::new(Activity::counted_in(Arc::clone(&self.in_flight)));
        let mut session = self.engine.new_session();
        let session_id = session.id();
        // DataFusion's plans run on every worker: no pinning to one CPU then.
        let before_plans = Arc::clone(&self.colocation);
        session.before_planning(Arc::new(move || before_plans.release()));
        let between = peek_handle(&stream).map(|socket| BetweenMessages {
            colocation: Arc::clone(&self.colocation),
            busy_poll: Arc::clone(&self.busy_poll),
            socket,
        });
        let handlers = ConnectionHandlers::new(
            session,
            Arc::clone(&self.manager),
            Arc::clone(&self.cancel),
            Arc::clone(&activity),
            between,
        );
        let after_close = Arc::clone(&self.colocation);
        let grace = Duration::from_millis(self.options.shutdown_grace_ms);
        async move {
            tracing::debug!(%peer, session_id, "connection opened");
            let ending = serve_until_shutdown(stream, handlers, &activity, shutdown, grace).await;
            open.fetch_sub(1, Ordering::SeqCst);
            after_close.release();
            tracing::debug!(%peer, session_id, "connection closed");
            ending
        }
    }
}

fn record(stats: &mut ServerStats, finished: Result<Ending, tokio::task::JoinError>) {
    match finished {
        Ok(Ending::ClientLeft) => {}
        Ok(Ending::Drained) => stats.queries_drained += 1,
        Ok(Ending::Cancelled) => stats.queries_cancelled += 1,
        Err(e) => tracing::error!(error = %e, "connection task failed"),
    }
}

async fn serve_until_shutdown(
    stream: TcpStream,
    handlers: ConnectionHandlers,
    activity: &Activity,
    shutdown: CancellationToken,
    grace: Duration,
) -> Ending {
    // pgwire owns the socket while serving; a duplicate of the descriptor lets
    // the server still say goodbye (57P01) after pgwire has been stopped.
    let (stream, goodbye) = match duplicate(stream) {
        Ok(pair) => pair,
        Err(e) => {
            tracing::warn!(error = %e, "could not set up connection");
            return Ending::ClientLeft;
        }
    };
    let serve = pgwire::tokio::process_socket(stream, None, handlers);
    tokio::pin!(serve);
    // Whether a query was in flight when shutdown began; decided once, so the
    // outcome does not depend on which branch below wins a race.
    let mut busy_at_shutdown = None;
    let drained = tokio::select! {
        result = &mut serve => {
            if let Err(e) = result {
                tracing::debug!(error = %e, "connection ended with an I/O error");
            }
            None
        }
        drained = async {
            shutdown.cancelled().await;
            busy_at_shutdown = Some(!activity.is_idle());
            activity.wait_idle(grace).await
        } => Some(drained),
    };
    let Some(drained) = drained else {
        // The client left on its own (possibly right after its last query finished).
        return match busy_at_shutdown {
            Some(true) => Ending::Drained,
            _ => Ending::ClientLeft,
        };
    };
    // Stop serving (cancelling a query that overran the grace period), then say why.
    drop(serve);
    send_fatal(
        goodbye,
        SqlState::ADMIN_SHUTDOWN,
        "terminating connection due to administrator command",
    )
    .await;
    match (busy_at_shutdown, drained) {
        (Some(true), true) => Ending::Drained,
        (Some(true), false) => Ending::Cancelled,
        _ => Ending::ClientLeft,
    }
}

fn duplicate(stream: TcpStream) -> io::Result<(TcpStream, std::net::TcpStream)> {
    let std_stream = stream.into_std()?;
    let goodbye = std_stream.try_clone()?;
    Ok((TcpStream::from_std(std_stream)?, goodbye))
}

async fn refuse(stream: TcpStream) {
    match stream.into_std() {
        Ok(std_stream) => {
            send_fatal(
                std_stream,
                SqlState::TOO_MANY_CONNECTIONS,
                "sorry, too many clients already",
            )
            .await
        }
        Err(e) => tracing::debug!(error = %e, "could not refuse connection cleanly"),
    }
}

/// How long a closing connection waits for the client to hang up after the FATAL message.
const LINGER: Duration = Duration::from_secs(2);
/// Unread client bytes discarded while lingering, at most.
const LINGER_MAX_BYTES: usize = 1 << 20;

/// Writes a FATAL ErrorResponse and closes the socket.
///
/// The close lingers: the server half-closes, then reads (and discards) what
/// the client still sends until it hangs up. Closing a socket with unread
/// input makes the kernel send a reset, and a reset can destroy the FATAL
/// message before the client reads it.
async fn send_fatal(stream: std::net::TcpStream, code: SqlState, message: &str) {
    let Ok(mut stream) = TcpStream::from_std(stream) else {
        return;
    };
    let frame = fatal_error_frame(code, message);
    // The client may be gone already; nothing more to do then.
    if stream.write_all(&frame).await.is_err() || stream.shutdown().await.is_err() {
        return;
    }
    let drain = async {
        let mut buffer = [0u8; 8192];
        let mut discarded = 0;
        while discarded < LINGER_MAX_BYTES {
            match stream.read(&mut buffer).await {
                Ok(0) | Err(_) => break,
                Ok(n) => discarded += n,
            }
        }
    };
    let _ = tokio::time::timeout(LINGER, drain).await;
}

/// An ErrorResponse ('E') message with severity FATAL, built by hand because
/// it is sent outside pgwire's codec.
fn fatal_error_frame(code: SqlState, message: &str) -> Vec<u8> {
    let mut body = Vec::with_capacity(64 + message.len());
    for (field, value) in [
        (b'S', "FATAL"),
        (b'V', "FATAL"),
        (b'C', code.code()),
        (b'M', message),
    ] {
        body.push(field);
        body.extend_from_slice(value.as_bytes());
        body.push(0);
    }
    body.push(0);
    let mut frame = Vec::with_capacity(body.len() + 5);
    frame.push(b'E');
    frame.extend_from_slice(&((body.len() + 4) as i32).to_be_bytes());
    frame.extend_from_slice(&body);
    frame
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fatal_frame_has_postgres_layout() {
        let frame = fatal_error_frame(SqlState::ADMIN_SHUTDOWN, "bye");
        assert_eq!(frame[0], b'E');
        let len = i32::from_be_bytes(frame[1..5].try_into().unwrap()) as usize;
        assert_eq!(len, frame.len() - 1);
        let body = &frame[5..];
        assert!(body.windows(6).any(|w| w == b"C57P01"));
        assert_eq!(*body.last().unwrap(), 0);
    }
}
