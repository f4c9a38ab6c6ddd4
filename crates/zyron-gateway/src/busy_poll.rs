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
//! query in flight. Polling with four pgbench clients on two workers cost 3%
//! of their throughput; hence the connection limit.
//!
//! The poll keeps its runtime thread and gives the CPU to the kernel between
//! looks (`sched_yield`), so a client that shares the vCPU runs at once. It
//! used to yield to the runtime instead, and each yield had tokio wake the
//! other worker to steal the yielded task: with one pgbench client both
//! workers switched 28 to 62 times a transaction (one worker, 9 times, with
//! no polling) and each used most of a core. Now one worker does the work,
//! with 2.2 to 2.5 switches a transaction. Other tasks on the polling thread
//! wait at most the budget, and only while no query runs.
//! Linux's `net.core.busy_read` makes the same trade for network devices; it
//! does not apply to loopback or to sockets without a NAPI device.
//!
//! A thread pinned to its lone client's CPU (see `colocate`) does not poll:
//! the client's next message wakes it on a CPU that is already awake.

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
    pub fn wait_readable(&self, socket: &TcpStream) -> PollOutcome {
        if self.budget.is_zero() || !self.server_idle() || !self.has_a_spare_worker() {
            return PollOutcome::Skipped;
        }
        if self.polling.swap(true, Ordering::Acquire) {
            return PollOutcome::Skipped;
        }
        let outcome = self.poll(socket);
        self.polling.store(false, Ordering::Release);
        outcome
    }

    fn poll(&self, socket: &TcpStream) -> PollOutcome {
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
            // To the kernel, not the runtime: see the module's documentation.
            std::thread::yield_now();
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

    /// A connected pair: (the client's end, the server's end as peeked at).
    fn pair() -> (TcpStream, TcpStream) {
        let (client, server) = crate::test_support::connected_pair();
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

    /// A policy whose poll lasts a minute unless something ends it, so tests
    /// that end it from another thread never depend on that thread's timing.
    fn patient_policy() -> (Arc<BusyPoll>, Arc<AtomicUsize>) {
        let in_flight = Arc::new(AtomicUsize::new(0));
        let busy_poll = BusyPoll {
            budget: Duration::from_secs(60),
            polling: AtomicBool::new(false),
            queries_in_flight: Arc::clone(&in_flight),
            open_connections: Arc::new(AtomicUsize::new(1)),
        };
        (Arc::new(busy_poll), in_flight)
    }

    /// Runs `action` on another thread once some connection is polling.
    fn once_polling(
        busy_poll: &Arc<BusyPoll>,
        action: impl FnOnce() + Send + 'static,
    ) -> std::thread::JoinHandle<()> {
        let busy_poll = Arc::clone(busy_poll);
        std::thread::spawn(move || {
            while !busy_poll.polling.load(Ordering::Acquire) {
                std::thread::yield_now();
            }
            action();
        })
    }

    /// Tests run on a one-thread runtime: one worker.
    #[tokio::test(flavor = "current_thread")]
    async fn nothing_polls_when_connections_outnumber_workers() {
        let (mut client, server) = pair();
        client.write_all(b"Q").unwrap();
        let open = Arc::new(AtomicUsize::new(2));
        let in_flight = Arc::new(AtomicUsize::new(0));
        let busy_poll = BusyPoll::new(MAX_BUSY_POLL_US, in_flight, Arc::clone(&open));
        assert_eq!(busy_poll.wait_readable(&server), PollOutcome::Skipped);
        open.store(1, Ordering::Relaxed);
        assert_eq!(busy_poll.wait_readable(&server), PollOutcome::Readable);
    }

    #[tokio::test(flavor = "current_thread")]
    async fn data_already_sent_is_seen_and_left_for_the_reader() {
        let (mut client, server) = pair();
        let (busy_poll, _) = policy(MAX_BUSY_POLL_US);
        client.write_all(b"Q").unwrap();
        assert_eq!(busy_poll.wait_readable(&server), PollOutcome::Readable);
        let mut byte = [0u8; 1];
        assert_eq!(server.peek(&mut byte).unwrap(), 1, "polling consumed data");
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_silent_client_is_polled_for_the_whole_budget() {
        let (_client, server) = pair();
        let (busy_poll, _) = policy(2_000);
        let started = Instant::now();
        assert_eq!(busy_poll.wait_readable(&server), PollOutcome::TimedOut);
        assert!(started.elapsed() >= Duration::from_micros(2_000));
    }

    /// The poll does not yield to the runtime (each yield had tokio wake the
    /// other worker), so a task on its thread waits for it, for at most the budget.
    #[tokio::test(flavor = "current_thread")]
    async fn polling_holds_its_thread_for_at_most_the_budget() {
        let (_client, server) = pair();
        let (busy_poll, _) = policy(2_000);
        let ran = Arc::new(AtomicBool::new(false));
        let task = {
            let ran = Arc::clone(&ran);
            tokio::spawn(async move { ran.store(true, Ordering::Relaxed) })
        };
        let started = Instant::now();
        assert_eq!(busy_poll.wait_readable(&server), PollOutcome::TimedOut);
        assert!(started.elapsed() >= Duration::from_micros(2_000));
        assert!(
            !ran.load(Ordering::Relaxed),
            "the poll yielded to the runtime"
        );
        task.await.unwrap();
        assert!(ran.load(Ordering::Relaxed));
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_message_sent_during_the_poll_ends_it() {
        let (mut client, server) = pair();
        let (busy_poll, _) = patient_policy();
        let sender = once_polling(&busy_poll, move || client.write_all(b"Q").unwrap());
        assert_eq!(busy_poll.wait_readable(&server), PollOutcome::Readable);
        sender.join().unwrap();
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_closed_connection_stops_polling() {
        let (client, server) = pair();
        let (busy_poll, _) = policy(MAX_BUSY_POLL_US);
        drop(client);
        assert_eq!(busy_poll.wait_readable(&server), PollOutcome::Readable);
    }

    #[tokio::test(flavor = "current_thread")]
    async fn nothing_polls_with_a_zero_budget_or_a_query_in_flight() {
        let (_client, server) = pair();
        let (off, _) = policy(0);
        assert_eq!(off.wait_readable(&server), PollOutcome::Skipped);
        let (busy_poll, in_flight) = policy(MAX_BUSY_POLL_US);
        in_flight.store(1, Ordering::Relaxed);
        assert_eq!(busy_poll.wait_readable(&server), PollOutcome::Skipped);
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_query_starting_elsewhere_ends_the_poll() {
        let (_client, server) = pair();
        let (busy_poll, in_flight) = patient_policy();
        let other_query = once_polling(&busy_poll, move || in_flight.store(1, Ordering::Relaxed));
        assert_eq!(busy_poll.wait_readable(&server), PollOutcome::Interrupted);
        other_query.join().unwrap();
    }

    #[tokio::test(flavor = "current_thread")]
    async fn only_one_connection_polls_at_a_time() {
        let (mut a, server_a) = pair();
        let (mut b, server_b) = pair();
        let (busy_poll, _) = patient_policy();
        let first = {
            let busy_poll = Arc::clone(&busy_poll);
            let runtime = tokio::runtime::Handle::current();
            std::thread::spawn(move || {
                let _runtime = runtime.enter();
                busy_poll.wait_readable(&server_a)
            })
        };
        while !busy_poll.polling.load(Ordering::Acquire) {
            std::thread::yield_now();
        }
        assert_eq!(busy_poll.wait_readable(&server_b), PollOutcome::Skipped);
        a.write_all(b"Q").unwrap();
        assert_eq!(first.join().unwrap(), PollOutcome::Readable);
        b.write_all(b"Q").unwrap();
        assert_eq!(busy_poll.wait_readable(&server_b), PollOutcome::Readable);
    }
}
