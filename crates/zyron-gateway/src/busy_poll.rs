//! Polling a client's socket for a moment after each reply, before sleeping.
//!
//! A client that runs statements one after another (pgbench, an application
//! with one connection) answers a reply within tens of microseconds. If the
//! server's thread has gone to sleep in `epoll_wait` by then, its CPU may have
//! halted, and on a virtual machine without guest halt-polling
//! (`haltpoll.guest_halt_poll_ns=0`, as on the machines the benchmarks run on)
//! waking a halted vCPU goes through the hypervisor: about 50 µs a message,
//! measured as a 25 µs round trip with both ends on one vCPU against 80 µs
//! across two. Polling for up to [`BusyPoll::budget`] keeps the thread awake
//! for the next message. With one client, prepared pgbench ran 1,102 to 1,194
//! tps without it and 1,603 to 1,755 with a 50 µs budget.
//!
//! Polling costs CPU that other work could use, so it is done only when the
//! server is otherwise idle: by one connection at a time, only while the
//! server has no more connections than runtime worker threads (so every other
//! connection has a thread to wake), and never while any connection has a
//! query in flight. The poll yields to the runtime between looks at the
//! socket, so other connections' tasks still run on its thread. Polling with
//! four pgbench clients on two workers cost 3% of their throughput; hence the
//! connection limit.
//! Linux's `net.core.busy_read` makes the same trade for network devices; it
//! does not apply to loopback or to sockets without a NAPI device.

use std::io;
use std::net::TcpStream;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use zyron_common::MAX_BUSY_POLL_US;

/// The server-wide busy-poll policy and the one connection allowed to poll.
#[derive(Debug)]
pub struct BusyPoll {
    budget: Duration,
    /// Whether some connection is polling now.
    polling: AtomicBool,
    /// The server's count of connections with a query in flight.
    queries_in_flight: Arc<AtomicUsize>,
    /// The server's count of open connections.
    open_connections: Arc<AtomicUsize>,
}

/// What one call to [`BusyPoll::wait_readable`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PollOutcome {
    /// The socket had data (or was closed) before the budget ran out.
    Readable,
    /// The budget ran out first.
    TimedOut,
    /// Another query started, so polling stopped early.
    Interrupted,
    /// Not polled: the budget is zero, another connection is polling, a query
    /// is in flight, there are more connections than worker threads, or the
    /// socket cannot be peeked at.
    Skipped,
}

impl BusyPoll {
    pub fn new(
        budget_us: u64,
        queries_in_flight: Arc<AtomicUsize>,
        open_connections: Arc<AtomicUsize>,
    ) -> Self {
        assert!(
            budget_us <= MAX_BUSY_POLL_US,
            "busy-poll budget {budget_us} µs is over {MAX_BUSY_POLL_US}"
        );
        Self {
            budget: Duration::from_micros(budget_us),
            polling: AtomicBool::new(false),
            queries_in_flight,
            open_connections,
        }
    }

    /// Polls `socket` (a duplicate of the connection's descriptor, in
    /// non-blocking mode) until it has data to read, the budget runs out or
    /// another connection's query starts. Reads nothing: the data stays for the
    /// connection's own reader.
    pub async fn wait_readable(&self, socket: &TcpStream) -> PollOutcome {
        if self.budget.is_zero() || !self.server_idle() || !self.has_a_spare_worker() {
            return PollOutcome::Skipped;
        }
        if self.polling.swap(true, Ordering::Acquire) {
            return PollOutcome::Skipped;
        }
        let outcome = self.poll(socket).await;
        self.polling.store(false, Ordering::Release);
        outcome
    }

    async fn poll(&self, socket: &TcpStream) -> PollOutcome {
        let deadline = Instant::now() + self.budget;
        let mut byte = [0u8; 1];
        loop {
            match socket.peek(&mut byte) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Ok(_) => return PollOutcome::Readable,
                // An error is the reader's to report; stop polling.
                Err(_) => return PollOutcome::Skipped,
            }
            if Instant::now() >= deadline {
                return PollOutcome::TimedOut;
            }
            if !self.server_idle() {
                return PollOutcome::Interrupted;
            }
            tokio::task::yield_now().await;
        }
    }

    fn server_idle(&self) -> bool {
        self.queries_in_flight.load(Ordering::Relaxed) == 0
    }

    fn has_a_spare_worker(&self) -> bool {
        let workers = tokio::runtime::Handle::current().metrics().num_workers();
        self.open_connections.load(Ordering::Relaxed) <= workers
    }
}

/// A second descriptor for a connection's socket, for [`BusyPoll`] to peek at
/// while `pgwire` owns the first. `None` if the descriptor cannot be
/// duplicated (out of descriptors): the connection then just never polls.
pub fn peek_handle(stream: &tokio::net::TcpStream) -> Option<TcpStream> {
    use std::os::fd::AsFd;
    let socket = TcpStream::from(stream.as_fd().try_clone_to_owned().ok()?);
    // The duplicate shares the open file, which tokio already made non-blocking.
    socket.set_nonblocking(true).ok()?;
    Some(socket)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::net::TcpListener;

    /// A connected pair: (the client's end, the server's end as peeked at).
    fn pair() -> (TcpStream, TcpStream) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (server, _) = listener.accept().unwrap();
        server.set_nonblocking(true).unwrap();
        (client, server)
    }

    /// A policy for a server with one open connection, and its count of
    /// queries in flight.
    fn policy(budget_us: u64) -> (BusyPoll, Arc<AtomicUsize>) {
        let in_flight = Arc::new(AtomicUsize::new(0));
        let open = Arc::new(AtomicUsize::new(1));
        let busy_poll = BusyPoll::new(budget_us, Arc::clone(&in_flight), open);
        (busy_poll, in_flight)
    }

    /// Tests run on a one-thread runtime: one worker.
    #[tokio::test(flavor = "current_thread")]
    async fn nothing_polls_when_connections_outnumber_workers() {
        let (mut client, server) = pair();
        client.write_all(b"Q").unwrap();
        let open = Arc::new(AtomicUsize::new(2));
        let in_flight = Arc::new(AtomicUsize::new(0));
        let busy_poll = BusyPoll::new(MAX_BUSY_POLL_US, in_flight, Arc::clone(&open));
        assert_eq!(busy_poll.wait_readable(&server).await, PollOutcome::Skipped);
        open.store(1, Ordering::Relaxed);
        assert_eq!(
            busy_poll.wait_readable(&server).await,
            PollOutcome::Readable
        );
    }

    #[tokio::test(flavor = "current_thread")]
    async fn data_already_sent_is_seen_and_left_for_the_reader() {
        let (mut client, server) = pair();
        let (busy_poll, _) = policy(MAX_BUSY_POLL_US);
        client.write_all(b"Q").unwrap();
        assert_eq!(
            busy_poll.wait_readable(&server).await,
            PollOutcome::Readable
        );
        let mut byte = [0u8; 1];
        assert_eq!(server.peek(&mut byte).unwrap(), 1, "polling consumed data");
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_silent_client_is_polled_for_the_whole_budget() {
        let (_client, server) = pair();
        let (busy_poll, _) = policy(2_000);
        let started = Instant::now();
        assert_eq!(
            busy_poll.wait_readable(&server).await,
            PollOutcome::TimedOut
        );
        assert!(started.elapsed() >= Duration::from_micros(2_000));
    }

    /// On a one-thread runtime the writer below can only run if polling yields.
    #[tokio::test(flavor = "current_thread")]
    async fn polling_lets_other_tasks_run_on_its_thread() {
        let (mut client, server) = pair();
        let (busy_poll, _) = policy(MAX_BUSY_POLL_US);
        let writer = tokio::spawn(async move {
            client.write_all(b"Q").unwrap();
            client
        });
        assert_eq!(
            busy_poll.wait_readable(&server).await,
            PollOutcome::Readable
        );
        writer.await.unwrap();
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_closed_connection_stops_polling() {
        let (client, server) = pair();
        let (busy_poll, _) = policy(MAX_BUSY_POLL_US);
        drop(client);
        assert_eq!(
            busy_poll.wait_readable(&server).await,
            PollOutcome::Readable
        );
    }

    #[tokio::test(flavor = "current_thread")]
    async fn nothing_polls_with_a_zero_budget_or_a_query_in_flight() {
        let (_client, server) = pair();
        let (off, _) = policy(0);
        assert_eq!(off.wait_readable(&server).await, PollOutcome::Skipped);
        let (busy_poll, in_flight) = policy(MAX_BUSY_POLL_US);
        in_flight.store(1, Ordering::Relaxed);
        assert_eq!(busy_poll.wait_readable(&server).await, PollOutcome::Skipped);
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_query_starting_elsewhere_ends_the_poll() {
        let (_client, server) = pair();
        let (busy_poll, in_flight) = policy(MAX_BUSY_POLL_US);
        let other_query = tokio::spawn(async move { in_flight.store(1, Ordering::Relaxed) });
        let started = Instant::now();
        assert_eq!(
            busy_poll.wait_readable(&server).await,
            PollOutcome::Interrupted
        );
        assert!(started.elapsed() < Duration::from_micros(MAX_BUSY_POLL_US));
        other_query.await.unwrap();
    }

    #[tokio::test(flavor = "current_thread")]
    async fn only_one_connection_polls_at_a_time() {
        let (_a, server_a) = pair();
        let (mut b, server_b) = pair();
        let (busy_poll, _) = policy(5_000);
        let busy_poll = Arc::new(busy_poll);
        let first = {
            let busy_poll = Arc::clone(&busy_poll);
            tokio::spawn(async move { busy_poll.wait_readable(&server_a).await })
        };
        // Let the first poll begin, then try a second one while it runs.
        tokio::task::yield_now().await;
        assert_eq!(
            busy_poll.wait_readable(&server_b).await,
            PollOutcome::Skipped
        );
        assert_eq!(first.await.unwrap(), PollOutcome::TimedOut);
        b.write_all(b"Q").unwrap();
        assert_eq!(
            busy_poll.wait_readable(&server_b).await,
            PollOutcome::Readable
        );
    }
}
