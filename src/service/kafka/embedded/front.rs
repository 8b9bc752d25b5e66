//! The embedded broker's front door: a listener at a fixed address (`kafka.embedded_listen`)
//! relaying every connection to the mock broker, request for request, rewriting the
//! responses that name brokers (`rewrite`), so a client sees one address and a controller
//! that exists, and cutting each fetch's wait (`fetch_wait`), since the mock does not
//! long-poll. Tokio tasks on the caller's runtime; never in front of a real broker.

use super::fetch_wait;
use super::rewrite::{self, Advertised};
use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

/// Largest request or response relayed (the mock's own limit is lower).
const MAX_FRAME: usize = 256 << 20;

/// The running front; stops accepting when dropped.
pub struct Front {
    addr: SocketAddr,
    accept: JoinHandle<()>,
}

impl Front {
    /// Binds `listen` (port 0: any free one) and relays to the broker at `upstream`, which
    /// the front advertises as itself. Must be called inside a Tokio runtime.
    pub fn start(listen: SocketAddr, upstream: SocketAddr, node_id: i32) -> std::io::Result<Front> {
        let std_listener = std::net::TcpListener::bind(listen)?;
        std_listener.set_nonblocking(true)?;
        let listener = TcpListener::from_std(std_listener)?;
        let addr = listener.local_addr()?;
        let adv = Arc::new(Advertised {
            node_id,
            host: addr.ip().to_string(),
            port: i32::from(addr.port()),
        });
        let accept = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let adv = adv.clone();
                tokio::spawn(async move {
                    if let Err(e) = relay(client, upstream, &adv).await {
                        tracing::debug!(error = %e, "embedded broker connection closed");
                    }
                });
            }
        });
        Ok(Front { addr, accept })
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Drop for Front {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

/// One client connection: requests go up as they are (a fetch with its wait cut), noting
/// each one's API and version by correlation id; responses come back, rewritten where
/// `rewrite` says so.
async fn relay(client: TcpStream, upstream: SocketAddr, adv: &Advertised) -> std::io::Result<()> {
    client.set_nodelay(true)?;
    let broker = TcpStream::connect(upstream).await?;
    broker.set_nodelay(true)?;
    let (mut client_rx, mut client_tx) = client.into_split();
    let (mut broker_rx, mut broker_tx) = broker.into_split();
    let asked: Arc<Mutex<VecDeque<(i32, i16, i16)>>> = Arc::default();
    let up = {
        let asked = asked.clone();
        async move {
            while let Some(mut frame) = read_frame(&mut client_rx).await? {
                fetch_wait::shorten(&mut frame);
                if frame.len() >= 8 {
                    let key = i16::from_be_bytes([frame[0], frame[1]]);
                    let version = i16::from_be_bytes([frame[2], frame[3]]);
                    let corr = i32::from_be_bytes([frame[4], frame[5], frame[6], frame[7]]);
                    asked
                        .lock()
                        .expect("not poisoned")
                        .push_back((corr, key, version));
                }
                write_frame(&mut broker_tx, &frame).await?;
            }
            broker_tx.shutdown().await
        }
    };
    let down = async move {
        while let Some(frame) = read_frame(&mut broker_rx).await? {
            let corr = frame
                .get(..4)
                .map(|b| i32::from_be_bytes([b[0], b[1], b[2], b[3]]));
            // Responses come in request order; a request without one (a produce with
            // acks=0) is passed over.
            let api = {
                let mut asked = asked.lock().expect("not poisoned");
                let at = asked.iter().position(|&(c, _, _)| Some(c) == corr);
                at.and_then(|at| asked.drain(..=at).next_back())
                    .map(|(_, key, version)| (key, version))
            };
            let out = api.and_then(|(key, version)| rewrite::rewrite(key, version, &frame, adv));
            write_frame(&mut client_tx, out.as_deref().unwrap_or(&frame)).await?;
        }
        client_tx.shutdown().await
    };
    tokio::try_join!(up, down).map(|_| ())
}

async fn read_frame(r: &mut (impl AsyncRead + Unpin)) -> std::io::Result<Option<Vec<u8>>> {
    let mut size = [0u8; 4];
    match r.read_exact(&mut size).await {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e),
    }
    let size = usize::try_from(i32::from_be_bytes(size))
        .ok()
        .filter(|&n| n <= MAX_FRAME)
        .ok_or_else(|| std::io::Error::new(std::io::ErrorKind::InvalidData, "bad frame size"))?;
    let mut frame = vec![0u8; size];
    r.read_exact(&mut frame).await?;
    Ok(Some(frame))
}

async fn write_frame(w: &mut (impl AsyncWrite + Unpin), frame: &[u8]) -> std::io::Result<()> {
    let size = i32::try_from(frame.len())
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::InvalidData, "frame too large"))?;
    let mut out = Vec::with_capacity(4 + frame.len());
    out.extend_from_slice(&size.to_be_bytes());
    out.extend_from_slice(frame);
    w.write_all(&out).await
}
