//! The PostgreSQL v3 wire protocol for Zyron, over TCP.
//!
//! [`PgServer`] accepts connections and gives each one its own engine
//! [`Session`](zyron_engine::Session). Protocol framing, startup and the
//! extended-query state machine are `pgwire`'s; this crate maps SQL results to
//! wire messages (types through `arrow-pg`, in text and binary formats),
//! errors to ErrorResponse with their SQLSTATE, and implements the server's
//! connection limit, graceful shutdown, busy-polling (see `busy_poll`) and
//! the pinning of a lone client's threads to its CPU (see `colocate`).

mod activity;
mod busy_poll;
mod colocate;
mod deferred_flush;
mod encode;
mod float_text;
mod handler;
mod params;
mod server;
mod startup;

#[cfg(test)]
mod test_support {
    use std::net::{TcpListener, TcpStream};

    /// A connected pair of blocking sockets on loopback: (the client's end, the server's end).
    pub fn connected_pair() -> (TcpStream, TcpStream) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (server, _) = listener.accept().unwrap();
        (client, server)
    }
}

pub use colocate::Colocation;
pub use server::{GatewayOptions, PgServer, ServerStats};
