//! A loopback TCP proxy between the gateway and a broker, under the test's control: it can reset
//! every open connection (as a broken network or a load balancer does) and delay what it
//! forwards. Written here rather than run as toxiproxy: the tests need two faults, reset and
//! delay, at a moment they choose inside one process; this is ~100 lines over tokio, which the
//! tree has, where toxiproxy is a Go server to build, start and drive over HTTP.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinHandle;

pub struct FaultProxy {
    address: SocketAddr,
    resets: watch::Sender<u64>,
    delay: Arc<Mutex<Duration>>,
    connections: Arc<Mutex<Vec<JoinHandle<()>>>>,
    accepting: JoinHandle<()>,
}

impl FaultProxy {
    /// A proxy on a free loopback port forwarding each connection it accepts to `upstream`
    /// (`host:port`).
    pub async fn start(upstream: &str) -> FaultProxy {
        FaultProxy::start_on("127.0.0.1:0", upstream).await
    }

    /// A proxy listening on `listen` (`host:port`) forwarding to `upstream`: for a broker that
    /// tells clients an address of its own, the proxy takes that address.
    pub async fn start_on(listen: &str, upstream: &str) -> FaultProxy {
        let listener =
            TcpListener::bind(listen).await.unwrap_or_else(|e| panic!("the proxy cannot listen on {listen}: {e}"));
        let address = listener.local_addr().unwrap();
        let (resets, _) = watch::channel(0u64);
        let delay = Arc::new(Mutex::new(Duration::ZERO));
        let upstream = upstream.to_owned();
        let connections = Arc::new(Mutex::new(Vec::new()));
        let (watching, delaying, open) = (resets.clone(), delay.clone(), connections.clone());
        let accepting = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let Ok(broker) = TcpStream::connect(&upstream).await else { continue };
                let forwarding = tokio::spawn(forward(client, broker, watching.subscribe(), delaying.clone()));
                open.lock().unwrap().push(forwarding);
            }
        });
        FaultProxy { address, resets, delay, connections, accepting }
    }

    /// The port a client connects to instead of the broker's.
    pub fn port(&self) -> u16 {
        self.address.port()
    }

    /// Every connection open now ends with a TCP reset on both sides; returns once they have
    /// all ended, with how many there were. The proxy goes on accepting new ones.
    pub async fn reset_all(&self) -> usize {
        let open: Vec<_> = self.connections.lock().unwrap().drain(..).collect();
        self.resets.send_modify(|generation| *generation += 1);
        let count = open.len();
        for forwarding in open {
            let _ = forwarding.await;
        }
        count
    }

    /// Every chunk forwarded from now on, either way, waits `delay` first (zero: none).
    pub fn delay(&self, delay: Duration) {
        *self.delay.lock().unwrap() = delay;
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.accepting.abort();
        self.resets.send_modify(|generation| *generation += 1);
    }
}

/// Copies both ways until both sides have closed, or a reset is asked for: then a zero linger
/// on both sockets before they are dropped, so each peer gets an RST, not an orderly close.
async fn forward(
    mut client: TcpStream,
    mut broker: TcpStream,
    mut resets: watch::Receiver<u64>,
    delay: Arc<Mutex<Duration>>,
) {
    let reset = {
        let (mut from_client, mut to_client) = client.split();
        let (mut from_broker, mut to_broker) = broker.split();
        let both = async {
            tokio::join!(pipe(&mut from_client, &mut to_broker, &delay), pipe(&mut from_broker, &mut to_client, &delay))
        };
        tokio::select! {
            _ = resets.changed() => true,
            _ = both => false,
        }
    };
    if reset {
        let _ = client.set_zero_linger();
        let _ = broker.set_zero_linger();
    }
}

/// One direction: each chunk read from `from` is written to `to` once the delay set when it was
/// read has passed since it was read (latency, not a slower link: chunks read together arrive
/// together); the end of `from` is passed on as an orderly close of `to`.
async fn pipe(from: &mut (impl AsyncRead + Unpin), to: &mut (impl AsyncWrite + Unpin), delay: &Mutex<Duration>) {
    let (chunks, mut delayed) = tokio::sync::mpsc::unbounded_channel::<(tokio::time::Instant, Vec<u8>)>();
    let reading = async move {
        let mut chunk = vec![0u8; 64 * 1024];
        while let Ok(read @ 1..) = from.read(&mut chunk).await {
            let due = tokio::time::Instant::now() + *delay.lock().unwrap();
            if chunks.send((due, chunk[..read].to_vec())).is_err() {
                break;
            }
        }
    };
    let writing = async {
        while let Some((due, chunk)) = delayed.recv().await {
            tokio::time::sleep_until(due).await;
            if to.write_all(&chunk).await.is_err() {
                break;
            }
        }
        let _ = to.shutdown().await;
    };
    tokio::join!(reading, writing);
}

/// A proxy in front of the broker `url` names, and the same URL through it: the authority
/// (`host:port`, after any `user@`) replaced by the proxy's loopback address.
pub async fn proxied(url: &str) -> (FaultProxy, String) {
    let after_scheme = url.find("://").map_or(0, |at| at + 3);
    let end = url[after_scheme..].find('/').map_or(url.len(), |at| after_scheme + at);
    let start = url[after_scheme..end].rfind('@').map_or(after_scheme, |at| after_scheme + at + 1);
    let proxy = FaultProxy::start(&url[start..end]).await;
    let through = format!("{}127.0.0.1:{}{}", &url[..start], proxy.port(), &url[end..]);
    (proxy, through)
}
