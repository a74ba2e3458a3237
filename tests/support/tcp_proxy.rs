//! A TCP proxy between a host and its database (or its model), for faults a test injects
//! on command: cut every connection (both sides see it end), make every
//! connection go silent (nothing flows, nothing is closed: a silent
//! partition, a dropped NAT entry), or lose the answer to what a client
//! sent once some bytes went by (the server runs the statement, the client
//! never hears back: the answer to a COMMIT lost on the way back), or hold
//! back what reaches a connection that `LISTEN`s (notifications that come
//! late).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

pub struct TcpProxy {
    pub port: u16,
    state: Arc<State>,
}

struct State {
    target: SocketAddr,
    /// While set, nothing is forwarded either way and no connection closes.
    silent: AtomicBool,
    /// Bumped to end every open connection.
    cuts: watch::Sender<u64>,
    /// Once a client sends these bytes, they are forwarded (with the rest
    /// of their statement), no answer reaches the client, and the
    /// connection is cut once the server is done with the statement.
    cut_after: Mutex<Option<Vec<u8>>>,
    /// How long the bytes that trip `cut_after` wait before the server gets
    /// them (the client is cut at once).
    late: Mutex<Duration>,
    /// Instead of a cut, the connection that trips `cut_after` goes quiet
    /// towards the client: the server's answers are dropped and nothing
    /// closes until the client gives up (an answer that never comes).
    hush: AtomicBool,
    /// How many connections were cut by `cut_after`.
    cut_after_count: AtomicU64,
    /// Connections accepted so far (each one's number).
    accepted: AtomicU64,
    /// Connections numbered below this are silent (a NAT entry dropped:
    /// the peer never hears of it), whatever `silent` says, until the
    /// server's keepalive gives up on them, [`ABANDONED_FOR`] after
    /// `abandoned_at`: then they are closed.
    abandoned_below: AtomicU64,
    abandoned_at: Mutex<Option<std::time::Instant>>,
    /// How late what the server sends reaches a client that sent `LISTEN`
    /// (its notifications), each piece as late as the others.
    listen_delay: Mutex<Duration>,
}

/// How long an abandoned connection stays open (silent) before it closes,
/// as a server's TCP keepalive would close it.
const ABANDONED_FOR: Duration = Duration::from_secs(10);

impl TcpProxy {
    /// A proxy on a free loopback port to `target`.
    pub async fn start(target: SocketAddr) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let (cuts, _) = watch::channel(0);
        let state = Arc::new(State {
            target,
            silent: AtomicBool::new(false),
            cuts,
            cut_after: Mutex::new(None),
            late: Mutex::new(Duration::ZERO),
            hush: AtomicBool::new(false),
            cut_after_count: AtomicU64::new(0),
            accepted: AtomicU64::new(0),
            abandoned_below: AtomicU64::new(0),
            abandoned_at: Mutex::new(None),
            listen_delay: Mutex::new(Duration::ZERO),
        });
        let accepting = state.clone();
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let state = accepting.clone();
                let number = state.accepted.fetch_add(1, Ordering::SeqCst);
                tokio::spawn(async move {
                    if let Ok(server) = TcpStream::connect(state.target).await {
                        relay(state, number, client, server).await;
                    }
                });
            }
        });
        Self { port, state }
    }

    /// The same PostgreSQL URL with this proxy's address in place of the
    /// database's (`postgres://USER@HOST:PORT/DB` → `…@127.0.0.1:PROXY/DB`).
    pub fn postgres_url(&self, url: &str) -> String {
        let (scheme, rest) = url.split_once("://").unwrap();
        let (user, rest) = rest.split_once('@').unwrap();
        let (_, path) = rest.split_once('/').unwrap();
        format!("{scheme}://{user}@127.0.0.1:{}/{path}", self.port)
    }

    pub fn cut_all(&self) {
        self.state.cuts.send_modify(|n| *n += 1);
    }

    pub fn set_silent(&self, silent: bool) {
        self.state.silent.store(silent, Ordering::SeqCst);
    }

    /// Every connection open now goes silent, and closes only after
    /// [`ABANDONED_FOR`]; later ones work (as `silent` says).
    pub fn abandon_open_connections(&self) {
        let open = self.state.accepted.load(Ordering::SeqCst);
        *self.state.abandoned_at.lock().unwrap() = Some(std::time::Instant::now());
        self.state.abandoned_below.store(open, Ordering::SeqCst);
    }

    /// Arms a cut after the next client packet that contains `bytes`.
    pub fn cut_after(&self, bytes: &[u8]) {
        self.cut_after_late(bytes, Duration::ZERO);
    }

    /// As [`Self::cut_after`], but the server gets those bytes only `late`
    /// after the client was cut: an answer lost before the server has even
    /// begun the COMMIT.
    pub fn cut_after_late(&self, bytes: &[u8], late: Duration) {
        self.state.hush.store(false, Ordering::SeqCst);
        *self.state.late.lock().unwrap() = late;
        *self.state.cut_after.lock().unwrap() = Some(bytes.to_vec());
    }

    /// After the next client packet that contains `bytes`, the server gets
    /// it and answers, but the client hears nothing more on that connection
    /// and it stays open until the client closes it: the client's own
    /// deadline is what gives up. Counted as a cut.
    pub fn hush_after(&self, bytes: &[u8]) {
        *self.state.late.lock().unwrap() = Duration::ZERO;
        self.state.hush.store(true, Ordering::SeqCst);
        *self.state.cut_after.lock().unwrap() = Some(bytes.to_vec());
    }

    /// What the server sends a connection that sent `LISTEN` reaches it
    /// `delay` late: another host's notifications are slow to come.
    pub fn delay_notifications(&self, delay: Duration) {
        *self.state.listen_delay.lock().unwrap() = delay;
    }

    /// Connections accepted so far.
    pub fn accepted(&self) -> u64 {
        self.state.accepted.load(Ordering::SeqCst)
    }

    pub fn cuts_after_done(&self) -> u64 {
        self.state.cut_after_count.load(Ordering::SeqCst)
    }
}

async fn relay(state: Arc<State>, number: u64, client: TcpStream, server: TcpStream) {
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let (mut client_read, mut client_write) = client.into_split();
    let (mut server_read, mut server_write) = server.into_split();
    let mut cuts = state.cuts.subscribe();
    // What a listening connection gets waits here until it is due, so that
    // a delay holds nothing else up and adds nothing up.
    let mut late_to_client: std::collections::VecDeque<(tokio::time::Instant, Vec<u8>)> =
        std::collections::VecDeque::new();
    let mut listening = false;
    let mut up = [0u8; 64 << 10];
    let mut down = [0u8; 64 << 10];
    loop {
        if !hold(&state, number, &mut cuts).await {
            return;
        }
        let due = late_to_client.front().map(|(due, _)| *due);
        tokio::select! {
            _ = cuts.changed() => return,
            () = tokio::time::sleep_until(due.unwrap_or_else(tokio::time::Instant::now)), if due.is_some() => {
                if let Some((_, bytes)) = late_to_client.pop_front() {
                    if client_write.write_all(&bytes).await.is_err() {
                        return;
                    }
                }
            }
            read = client_read.read(&mut up) => {
                let n = match read { Ok(0) | Err(_) => return, Ok(n) => n };
                if !hold(&state, number, &mut cuts).await {
                    return;
                }
                listening |= up[..n].windows(7).any(|w| w.eq_ignore_ascii_case(b"LISTEN "));
                let cut = {
                    let mut armed = state.cut_after.lock().unwrap();
                    let hit = armed
                        .as_ref()
                        .is_some_and(|pattern| up[..n].windows(pattern.len()).any(|w| w == pattern.as_slice()));
                    if hit {
                        *armed = None;
                    }
                    hit
                };
                let late = *state.late.lock().unwrap();
                if cut && !late.is_zero() {
                    state.cut_after_count.fetch_add(1, Ordering::SeqCst);
                    let bytes = up[..n].to_vec();
                    tokio::spawn(async move {
                        tokio::time::sleep(late).await;
                        let _ = server_write.write_all(&bytes).await;
                        let _ = server_write.flush().await;
                        tokio::time::sleep(Duration::from_secs(1)).await;
                    });
                    return;
                }
                if server_write.write_all(&up[..n]).await.is_err() {
                    return;
                }
                if cut {
                    state.cut_after_count.fetch_add(1, Ordering::SeqCst);
                    // The server has the bytes; the client never hears back.
                    let _ = server_write.flush().await;
                    let hush = state.hush.load(Ordering::SeqCst);
                    lose_the_answer(&mut client_read, &mut server_write, &mut server_read, hush).await;
                    return;
                }
            }
            read = server_read.read(&mut down) => {
                let n = match read { Ok(0) | Err(_) => return, Ok(n) => n };
                if !hold(&state, number, &mut cuts).await {
                    return;
                }
                let late = *state.listen_delay.lock().unwrap();
                // Behind what waits already: nothing overtakes.
                if (listening && !late.is_zero()) || !late_to_client.is_empty() {
                    late_to_client.push_back((tokio::time::Instant::now() + late, down[..n].to_vec()));
                } else if client_write.write_all(&down[..n]).await.is_err() {
                    return;
                }
            }
        }
    }
}

/// After the armed bytes: the server still gets whatever the client sends
/// (the rest of their statement may come in a later read; dropping it left
/// the statement unrun, where the fault is its answer lost), and the client
/// hears nothing more. Hushed, the connection stays open until one side
/// closes it; otherwise it is cut once the server said it is ready for the
/// next query (the statement, and its commit, are done), or after a while.
async fn lose_the_answer(
    client: &mut tokio::net::tcp::OwnedReadHalf,
    server_write: &mut tokio::net::tcp::OwnedWriteHalf,
    server: &mut tokio::net::tcp::OwnedReadHalf,
    hush: bool,
) {
    // PostgreSQL's ReadyForQuery: 'Z', length 5, then the status byte.
    const READY: &[u8] = b"Z\0\0\0\x05";
    let (mut up, mut down) = ([0u8; 4096], [0u8; 4096]);
    let bound = tokio::time::sleep(Duration::from_secs(if hush { 3600 } else { 5 }));
    tokio::pin!(bound);
    loop {
        tokio::select! {
            read = client.read(&mut up) => match read {
                Ok(0) | Err(_) => return,
                Ok(n) => if server_write.write_all(&up[..n]).await.is_err() { return },
            },
            read = server.read(&mut down) => match read {
                Ok(0) | Err(_) => return,
                Ok(n) => if !hush && down[..n].windows(READY.len()).any(|w| w == READY) { return },
            },
            () = &mut bound => return,
        }
    }
}

/// Holds the connection while the proxy is silent (bytes already read wait,
/// as a partition delays them); false when it is cut meanwhile.
async fn hold(state: &State, number: u64, cuts: &mut watch::Receiver<u64>) -> bool {
    while state.silent.load(Ordering::SeqCst)
        || number < state.abandoned_below.load(Ordering::SeqCst)
    {
        let given_up = number < state.abandoned_below.load(Ordering::SeqCst)
            && state
                .abandoned_at
                .lock()
                .unwrap()
                .is_some_and(|at| at.elapsed() >= ABANDONED_FOR);
        if given_up {
            return false;
        }
        tokio::select! {
            _ = cuts.changed() => return false,
            () = tokio::time::sleep(Duration::from_millis(20)) => {}
        }
    }
    true
}
