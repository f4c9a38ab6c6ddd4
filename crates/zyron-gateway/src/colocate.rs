//! Serving a lone client from the CPU its messages arrive on.
//!
//! A client that runs statements one after another (pgbench with one
//! connection, an application with one session) and the thread serving it take
//! turns: neither runs while the other works. On one CPU each hand-over is a
//! wake-up on a busy CPU; across two, every hand-over wakes the other CPU, and
//! on a virtual machine an idle vCPU's wake-up goes through the hypervisor
//! (about 50 µs a message on the 2-vCPU machines the benchmarks run on).
//! PostgreSQL's backend process often lands on its client's CPU, because the
//! kernel moves a woken task next to the task that woke it; a runtime worker
//! thread much less often (in `perf sched`, 0.3% of its time slices against
//! PostgreSQL's 12%).
//!
//! So while the server has exactly one connection, the threads that serve it
//! are pinned to the CPU the client's last message arrived on
//! (`SO_INCOMING_CPU`: for a client on the same machine, the CPU it sent
//! from), and follow it if it moves. With pgbench's one client (prepared,
//! 8 s rounds alternated) that ran 2,138 to 2,355 tps, against 1,527 to 1,730
//! without it and PostgreSQL's 1,553 to 1,844. The kernel keeps waking the
//! client on the idle CPU while the server's thread is busy, so the threads
//! move up to about once a transaction; with simple statements, where moves
//! come twice as often, following cost about a tenth (1,080 to 1,287 tps
//! against 1,222 to 1,319, PostgreSQL 958 to 998).
//!
//! The pinning ends as soon as it could cost anything: when a second
//! connection opens, when the last one closes, and before a statement goes
//! to DataFusion, whose plans run on every worker (see [`Colocation::release`]).

use std::io;
use std::net::TcpStream;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

/// At most this many threads are pinned at once: the runtime's threads that
/// have served the lone connection, far fewer in practice.
const MAX_PINNED_THREADS: usize = 1024;

/// The server-wide pinning of the threads that serve a lone connection.
#[derive(Debug)]
pub struct Colocation {
    enabled: bool,
    /// The server's count of open connections.
    open_connections: Arc<AtomicUsize>,
    /// The CPUs the main thread may run on: what a released thread gets back.
    allowed: Option<CpuSet>,
    pinned: Mutex<Pinned>,
}

#[derive(Debug, Default)]
struct Pinned {
    cpu: Option<usize>,
    /// Kernel thread ids of the threads pinned to `cpu`.
    threads: Vec<libc::pid_t>,
}

impl Colocation {
    /// `enabled` false makes every call a no-op.
    pub fn new(enabled: bool, open_connections: Arc<AtomicUsize>) -> Self {
        let allowed = CpuSet::of_main_thread();
        if enabled && allowed.is_none() {
            tracing::debug!("cannot read the process's CPU mask: not following clients' CPUs");
        }
        Self {
            enabled: enabled && allowed.is_some(),
            open_connections,
            allowed,
            pinned: Mutex::new(Pinned::default()),
        }
    }

    /// Called by a connection after its reply has left: if it is the server's
    /// only connection, pins the calling thread (and every thread pinned
    /// before) to the CPU the client's last message arrived on. Returns
    /// whether the calling thread is now pinned to the client's CPU.
    pub fn follow(&self, socket: &TcpStream) -> bool {
        if !self.enabled || self.open_connections.load(Ordering::SeqCst) != 1 {
            return false;
        }
        let Some(cpu) = incoming_cpu(socket) else {
            return false;
        };
        let allowed = self.allowed.as_ref().expect("enabled only with a mask");
        if !allowed.contains(cpu) {
            return false;
        }
        let mut pinned = self.pinned.lock().unwrap_or_else(|e| e.into_inner());
        // Checked again under the lock: `release` runs after the count changes.
        if self.open_connections.load(Ordering::SeqCst) != 1 {
            return false;
        }
        let target = CpuSet::only(cpu);
        if pinned.cpu != Some(cpu) {
            pinned
                .threads
                .retain(|&thread| set_affinity(thread, &target).is_ok());
            pinned.cpu = Some(cpu);
        }
        let me = current_thread();
        if !pinned.threads.contains(&me) {
            assert!(
                pinned.threads.len() < MAX_PINNED_THREADS,
                "more than {MAX_PINNED_THREADS} threads pinned"
            );
            if set_affinity(me, &target).is_err() {
                return false;
            }
            pinned.threads.push(me);
        }
        true
    }

    /// Lets every pinned thread run on any CPU again. Called when the count of
    /// open connections changes and before a statement that DataFusion plans.
    pub fn release(&self) {
        if !self.enabled {
            return;
        }
        let mut pinned = self.pinned.lock().unwrap_or_else(|e| e.into_inner());
        if pinned.cpu.take().is_none() {
            return;
        }
        let allowed = self.allowed.as_ref().expect("enabled only with a mask");
        for thread in pinned.threads.drain(..) {
            // A thread that has exited cannot be released, and needs not be.
            let _ = set_affinity(thread, allowed);
        }
    }

    /// The CPU the pinned threads run on, if any.
    pub fn pinned_cpu(&self) -> Option<usize> {
        self.pinned.lock().unwrap_or_else(|e| e.into_inner()).cpu
    }
}

/// The CPU that processed the last packet received on `socket`.
fn incoming_cpu(socket: &TcpStream) -> Option<usize> {
    let mut cpu: libc::c_int = -1;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: the option value is a c_int, and `len` says so.
    let rc = unsafe {
        libc::getsockopt(
            socket.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_INCOMING_CPU,
            (&raw mut cpu).cast(),
            &mut len,
        )
    };
    if rc != 0 || cpu < 0 {
        return None;
    }
    usize::try_from(cpu).ok()
}

/// The calling thread's kernel id, asked of the kernel once per thread:
/// `follow` runs after every reply, and `gettid` is a system call.
fn current_thread() -> libc::pid_t {
    thread_local! {
        // SAFETY: gettid has no arguments and cannot fail.
        static ID: libc::pid_t = unsafe { libc::gettid() };
    }
    ID.with(|id| *id)
}

fn set_affinity(thread: libc::pid_t, cpus: &CpuSet) -> io::Result<()> {
    // SAFETY: `cpus.0` is a valid cpu_set_t of the size passed.
    let rc =
        unsafe { libc::sched_setaffinity(thread, std::mem::size_of::<libc::cpu_set_t>(), &cpus.0) };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// CPUs a [`CpuSet`] can hold.
const CPU_SET_SIZE: usize = libc::CPU_SETSIZE as usize;

/// A set of CPUs, as the kernel's affinity calls take it.
#[derive(Clone, Copy)]
struct CpuSet(libc::cpu_set_t);

impl CpuSet {
    /// The main thread's CPUs: the process's, as the operator started it
    /// (`taskset`, a cgroup's cpuset), whatever this module did to other threads.
    fn of_main_thread() -> Option<Self> {
        // SAFETY: getpid cannot fail; an all-zero cpu_set_t is the empty set.
        let (main, mut set): (_, libc::cpu_set_t) = unsafe { (libc::getpid(), std::mem::zeroed()) };
        // SAFETY: `set` is a valid cpu_set_t of the size passed.
        let rc = unsafe {
            libc::sched_getaffinity(main, std::mem::size_of::<libc::cpu_set_t>(), &mut set)
        };
        (rc == 0).then_some(Self(set))
    }

    fn only(cpu: usize) -> Self {
        // SAFETY: an all-zero cpu_set_t is the empty set.
        let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
        assert!(
            cpu < CPU_SET_SIZE,
            "CPU {cpu} is past the set's {CPU_SET_SIZE}"
        );
        // SAFETY: `cpu` is within the set, as just checked.
        unsafe { libc::CPU_SET(cpu, &mut set) };
        Self(set)
    }

    fn contains(&self, cpu: usize) -> bool {
        // SAFETY: `cpu` is within the set, as checked first.
        cpu < CPU_SET_SIZE && unsafe { libc::CPU_ISSET(cpu, &self.0) }
    }
}

impl std::fmt::Debug for CpuSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let cpus = (0..CPU_SET_SIZE).filter(|&cpu| self.contains(cpu));
        f.debug_set().entries(cpus).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};

    /// A server with `open_connections` open, and the server's end of one of
    /// them, whose client has just sent a message from `cpu`. Keep `client`
    /// open: closing it sends a FIN, and the CPU that sends it becomes the
    /// socket's incoming CPU.
    struct Setup {
        colocation: Colocation,
        open: Arc<AtomicUsize>,
        client: TcpStream,
        server: TcpStream,
    }

    fn message_from(cpu: usize, open_connections: usize) -> Setup {
        let (mut client, mut server) = crate::test_support::connected_pair();
        let open = Arc::new(AtomicUsize::new(open_connections));
        let colocation = Colocation::new(true, Arc::clone(&open));
        send_from(cpu, &mut client, &mut server);
        Setup {
            colocation,
            open,
            client,
            server,
        }
    }

    /// The CPUs this process may use, lowest first.
    fn allowed_cpus() -> Vec<usize> {
        let set = CpuSet::of_main_thread().unwrap();
        (0..CPU_SET_SIZE).filter(|&cpu| set.contains(cpu)).collect()
    }

    fn affinity(thread: libc::pid_t) -> Vec<usize> {
        let mut set = CpuSet::only(0);
        // SAFETY: `set.0` is a valid cpu_set_t of the size passed.
        let rc = unsafe {
            libc::sched_getaffinity(thread, std::mem::size_of::<libc::cpu_set_t>(), &mut set.0)
        };
        assert_eq!(rc, 0, "{}", io::Error::last_os_error());
        (0..CPU_SET_SIZE).filter(|&cpu| set.contains(cpu)).collect()
    }

    /// Sends one byte from a thread pinned to `cpu`, and reads it on `server`.
    fn send_from(cpu: usize, client: &mut TcpStream, server: &mut TcpStream) {
        std::thread::scope(|scope| {
            scope.spawn(|| {
                set_affinity(current_thread(), &CpuSet::only(cpu)).unwrap();
                client.write_all(b"Q").unwrap();
            });
        });
        let mut byte = [0u8; 1];
        server.read_exact(&mut byte).unwrap();
    }

    /// Runs `f` on a fresh thread, so that pinning it leaves the test's thread alone.
    fn on_a_thread<T: Send>(f: impl FnOnce() -> T + Send) -> T {
        std::thread::scope(|scope| scope.spawn(f).join().unwrap())
    }

    #[test]
    fn a_lone_connection_pins_its_thread_to_the_cpu_its_client_sent_from() {
        let cpu = *allowed_cpus().last().unwrap();
        let Setup {
            colocation,
            server,
            client: _client,
            ..
        } = message_from(cpu, 1);
        let (followed, pinned_to) = on_a_thread(|| {
            let followed = colocation.follow(&server);
            (followed, affinity(0))
        });
        assert!(followed);
        assert_eq!(pinned_to, vec![cpu]);
        assert_eq!(colocation.pinned_cpu(), Some(cpu));
    }

    #[test]
    fn release_gives_pinned_threads_every_cpu_back() {
        let cpus = allowed_cpus();
        let Setup {
            colocation,
            server,
            client: _client,
            ..
        } = message_from(cpus[0], 1);
        on_a_thread(|| {
            assert!(colocation.follow(&server));
            assert_eq!(affinity(0), vec![cpus[0]]);
            colocation.release();
            assert_eq!(affinity(0), cpus, "released");
        });
        assert_eq!(colocation.pinned_cpu(), None);
    }

    #[test]
    fn threads_pinned_before_follow_the_client_to_its_new_cpu() {
        let cpus = allowed_cpus();
        let (&first, &second) = (cpus.first().unwrap(), cpus.last().unwrap());
        let Setup {
            colocation,
            mut client,
            mut server,
            ..
        } = message_from(first, 1);
        let earlier = on_a_thread(|| {
            assert!(colocation.follow(&server));
            current_thread()
        });
        send_from(second, &mut client, &mut server);
        // The earlier thread has exited: following must not fail on it.
        let (now, pinned_to) = on_a_thread(|| {
            assert!(colocation.follow(&server));
            (current_thread(), affinity(0))
        });
        assert_ne!(now, earlier);
        assert_eq!(pinned_to, vec![second]);
        assert_eq!(colocation.pinned_cpu(), Some(second));
    }

    #[test]
    fn a_live_thread_pinned_earlier_moves_with_the_client() {
        let cpus = allowed_cpus();
        let (&first, &second) = (cpus.first().unwrap(), cpus.last().unwrap());
        let Setup {
            colocation,
            mut client,
            server,
            ..
        } = message_from(first, 1);
        let (pinned_tx, pinned_rx) = std::sync::mpsc::channel();
        let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
        std::thread::scope(|scope| {
            let (colocation, server) = (&colocation, &server);
            scope.spawn(move || {
                assert!(colocation.follow(server));
                pinned_tx.send(current_thread()).unwrap();
                done_rx.recv().unwrap();
            });
            let earlier = pinned_rx.recv().unwrap();
            assert_eq!(affinity(earlier), vec![first]);
            send_from(second, &mut client, &mut server.try_clone().unwrap());
            on_a_thread(|| assert!(colocation.follow(server)));
            assert_eq!(affinity(earlier), vec![second], "left behind");
            colocation.release();
            assert_eq!(affinity(earlier), cpus, "not released");
            done_tx.send(()).unwrap();
        });
    }

    #[test]
    fn nothing_is_pinned_while_two_connections_are_open() {
        let cpus = allowed_cpus();
        let Setup {
            colocation,
            open,
            server,
            client: _client,
        } = message_from(cpus[0], 2);
        on_a_thread(|| {
            assert!(!colocation.follow(&server));
            assert_eq!(affinity(0), cpus);
        });
        open.store(1, Ordering::SeqCst);
        on_a_thread(|| assert!(colocation.follow(&server)));
    }

    #[test]
    fn a_disabled_colocation_pins_nothing() {
        let cpus = allowed_cpus();
        let Setup {
            open,
            server,
            client: _client,
            ..
        } = message_from(cpus[0], 1);
        let colocation = Colocation::new(false, open);
        on_a_thread(|| {
            assert!(!colocation.follow(&server));
            assert_eq!(affinity(0), cpus);
        });
        assert_eq!(colocation.pinned_cpu(), None);
    }
}
