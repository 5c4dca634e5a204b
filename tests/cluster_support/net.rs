//! Partitions between real raftlock processes without root: a TCP proxy in
//! front of each node's peer port.
//!
//! Every node listens on its own peer port, but the cluster is told (through
//! `--initial-cluster`) that each node's peer address is its proxy's. So every
//! byte one node sends another, Raft RPCs and forwarded client commands alike,
//! passes through the receiver's proxy. The proxy learns who is calling from
//! the first frame of the connection (the transport's `Hello`, which names the
//! caller's node id) and from then on carries each direction of the connection
//! only while that direction (caller → receiver, receiver → caller) is not cut.
//!
//! A cut direction holds its bytes, as a network that drops packets and a TCP
//! that retransmits them would: nothing is lost or reordered, it arrives when
//! the cut heals, unless the sender gave up on the connection first. This is
//! what a partition does to a live connection; new connections across a cut
//! get no answer to their `Hello` and time out.

use std::collections::HashSet;
use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread;
use std::time::Duration;

#[derive(Default)]
struct State {
    /// Directed links `(from, to)` whose bytes are held.
    cut: Mutex<HashSet<(u64, u64)>>,
    /// Directed links `(from, to)` whose calls are held: the bytes `from`
    /// sends on connections it opened to `to` (its requests), while answers
    /// to `to`'s own calls still flow.
    calls_cut: Mutex<HashSet<(u64, u64)>>,
    changed: Condvar,
    stop: AtomicBool,
    /// Every socket the proxies opened, so that stopping can unblock them.
    sockets: Mutex<Vec<TcpStream>>,
}

impl State {
    /// Blocks while `from → to` is cut; false once the network is stopped.
    fn wait_open(&self, from: u64, to: u64) -> bool {
        self.wait_open_for(from, to, false)
    }

    /// [`State::wait_open`], for bytes that are `from`'s calls to `to` when
    /// `call` (held by [`Net::hold_calls`] too).
    fn wait_open_for(&self, from: u64, to: u64, call: bool) -> bool {
        let held = |cut: &HashSet<(u64, u64)>| {
            cut.contains(&(from, to)) || (call && self.calls_cut.lock().unwrap().contains(&(from, to)))
        };
        let mut cut = self.cut.lock().unwrap();
        while held(&cut) && !self.stop.load(Ordering::SeqCst) {
            cut = self.changed.wait_timeout(cut, Duration::from_millis(50)).unwrap().0;
        }
        !self.stop.load(Ordering::SeqCst)
    }

    fn keep(&self, s: &TcpStream) {
        if let Ok(c) = s.try_clone() {
            self.sockets.lock().unwrap().push(c);
        }
    }
}

/// The proxies of one cluster and the switch for its links.
pub struct Net {
    state: Arc<State>,
    threads: Vec<thread::JoinHandle<()>>,
}

impl Net {
    pub fn new() -> Net {
        Net { state: Arc::new(State::default()), threads: Vec::new() }
    }

    /// Proxies connections made to `listener` to node `id`'s peer port
    /// `upstream`.
    pub fn add_proxy(&mut self, id: u64, listener: TcpListener, upstream: u16) {
        listener.set_nonblocking(true).expect("nonblocking listener");
        let state = self.state.clone();
        self.threads.push(thread::spawn(move || accept_loop(state, id, listener, upstream)));
    }

    /// Holds the bytes `from` sends `to` (one direction).
    pub fn cut_one_way(&self, from: u64, to: u64) {
        self.state.cut.lock().unwrap().insert((from, to));
        self.state.changed.notify_all();
    }

    /// Holds the calls `from` makes to `to` (Raft's appends and votes, or
    /// forwarded commands), but not `from`'s answers to the calls `to`
    /// makes: e.g. a leader's appends to a follower wait while the answers
    /// to the commands that follower forwards still arrive. Healed by
    /// [`Net::heal`].
    pub fn hold_calls(&self, from: u64, to: u64) {
        self.state.calls_cut.lock().unwrap().insert((from, to));
        let _cut = self.state.cut.lock().unwrap();
        self.state.changed.notify_all();
    }

    /// Cuts `a` off from each of `others`, both ways.
    pub fn isolate(&self, a: u64, others: &[u64]) {
        let mut cut = self.state.cut.lock().unwrap();
        for &b in others.iter().filter(|b| **b != a) {
            cut.insert((a, b));
            cut.insert((b, a));
        }
        self.state.changed.notify_all();
    }

    /// Every link carries again; held bytes are delivered.
    pub fn heal(&self) {
        self.state.calls_cut.lock().unwrap().clear();
        self.state.cut.lock().unwrap().clear();
        self.state.changed.notify_all();
    }
}

impl Drop for Net {
    fn drop(&mut self) {
        self.state.stop.store(true, Ordering::SeqCst);
        self.state.changed.notify_all();
        for s in self.state.sockets.lock().unwrap().drain(..) {
            let _ = s.shutdown(Shutdown::Both);
        }
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

fn accept_loop(state: Arc<State>, to: u64, listener: TcpListener, upstream: u16) {
    while !state.stop.load(Ordering::SeqCst) {
        match listener.accept() {
            Ok((socket, _)) => {
                let state = state.clone();
                // Connection threads are not joined: stopping shuts their sockets.
                thread::spawn(move || proxy_conn(state, to, socket, upstream));
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => thread::sleep(Duration::from_millis(5)),
            Err(_) => thread::sleep(Duration::from_millis(20)),
        }
    }
}

/// The caller's node id from the transport's first frame: a 4-byte big-endian
/// length, then bincode of `(request id: u64, PeerRequest::Hello { nonce:
/// [u8; 32], node_id: u64 })` (variant 0 as a u32, the nonce's 32 bytes, the
/// id; little-endian).
fn hello_node_id(frame: &[u8]) -> Option<u64> {
    let body = frame.get(4..)?;
    let variant = u32::from_le_bytes(body.get(8..12)?.try_into().ok()?);
    if variant != 0 || body.len() != 52 {
        return None;
    }
    Some(u64::from_le_bytes(body.get(44..52)?.try_into().ok()?))
}

fn read_first_frame(socket: &mut TcpStream) -> Option<Vec<u8>> {
    let mut head = [0u8; 4];
    socket.read_exact(&mut head).ok()?;
    let len = u32::from_be_bytes(head) as usize;
    if len > 1 << 20 {
        return None;
    }
    let mut frame = head.to_vec();
    frame.resize(4 + len, 0);
    socket.read_exact(&mut frame[4..]).ok()?;
    Some(frame)
}

fn proxy_conn(state: Arc<State>, to: u64, mut caller: TcpStream, upstream: u16) {
    state.keep(&caller);
    let _ = caller.set_nodelay(true);
    let Some(hello) = read_first_frame(&mut caller) else { return };
    let Some(from) = hello_node_id(&hello) else { return };
    if !state.wait_open_for(from, to, true) {
        return;
    }
    let Ok(mut server) = TcpStream::connect(("127.0.0.1", upstream)) else { return };
    state.keep(&server);
    let _ = server.set_nodelay(true);
    if server.write_all(&hello).is_err() {
        return;
    }
    let (Ok(caller2), Ok(server2)) = (caller.try_clone(), server.try_clone()) else { return };
    let back = {
        let state = state.clone();
        thread::spawn(move || pump(&state, (to, from), false, server2, caller2))
    };
    pump(&state, (from, to), true, caller, server);
    let _ = back.join();
}

/// Copies `src` to `dst`, holding each chunk while `link` is cut (or its
/// calls held, if these are the caller's bytes: `calls`).
fn pump(state: &State, link: (u64, u64), calls: bool, mut src: TcpStream, mut dst: TcpStream) {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = match src.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        if !state.wait_open_for(link.0, link.1, calls) || dst.write_all(&buf[..n]).is_err() {
            break;
        }
    }
    let _ = src.shutdown(Shutdown::Both);
    let _ = dst.shutdown(Shutdown::Both);
}

#[cfg(test)]
mod tests {
    #[test]
    fn hello_frame_names_the_caller() {
        // (0u64, Hello { nonce: [9; 32], node_id: 7 }) as the transport frames it.
        let mut body = Vec::new();
        body.extend_from_slice(&0u64.to_le_bytes());
        body.extend_from_slice(&0u32.to_le_bytes());
        body.extend_from_slice(&[9u8; 32]);
        body.extend_from_slice(&7u64.to_le_bytes());
        let mut frame = (body.len() as u32).to_be_bytes().to_vec();
        frame.extend_from_slice(&body);
        assert_eq!(super::hello_node_id(&frame), Some(7));
    }
}
