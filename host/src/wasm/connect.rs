//! Sends one granted outbound request over a connection to an address that
//! passed [`destinations`](super::destinations)' check.
//!
//! The stock `wasi:http` sender connects by name, resolving it again: a
//! rebinding DNS server could answer the check with a public address and
//! the connect with 127.0.0.1. This one connects to the checked address and
//! gives TLS the granted name (certificates are still verified for it).
//! Redirects are not followed here: the guest receives the 3xx, and its
//! next request is checked against its grants like the first.

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::BodyExt;
use tokio::net::TcpStream;
use wasmtime_wasi_http::io::TokioIo;
use wasmtime_wasi_http::{Error as HttpError, WasiBody};

use super::send_gate::Gate;

/// How long each phase may take, after the guest's options were capped.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Timeouts {
    pub connect: Duration,
    pub first_byte: Duration,
    pub between_bytes: Duration,
}

/// What the `wasi:http` hook hands back: the response, and the connection's
/// own future (its I/O errors reach the guest through it).
pub(crate) type Sent = (
    http::Response<WasiBody>,
    Box<dyn Future<Output = Result<(), HttpError>> + Send>,
);

/// Connects to the first of `addresses` that answers, speaks TLS for
/// `https` with `server_name`, and sends `request`; behind `gate`, only if
/// the gate still lets it once connected, its body piece by piece (see
/// [`super::send_gate`]).
pub(crate) async fn send(
    mut request: http::Request<WasiBody>,
    addresses: &[SocketAddr],
    server_name: &str,
    timeouts: Timeouts,
    gate: Option<Gate>,
) -> Result<Sent, HttpError> {
    let tls = request.uri().scheme() == Some(&http::uri::Scheme::HTTPS);
    let stream = connect_any(addresses, timeouts.connect).await?;
    let io: Box<dyn Io> = if tls {
        let name = rustls::pki_types::ServerName::try_from(
            server_name
                .trim_start_matches('[')
                .trim_end_matches(']')
                .to_string(),
        )
        .map_err(|_| HttpError::HttpRequestUriInvalid)?;
        let connector = tokio_rustls::TlsConnector::from(tls_config()?);
        let stream = tokio::time::timeout(timeouts.connect, connector.connect(name, stream))
            .await
            .map_err(|_| HttpError::ConnectionTimeout)?
            .map_err(HttpError::Tls)?;
        Box::new(stream)
    } else {
        Box::new(stream)
    };
    let (mut sender, connection) = tokio::time::timeout(
        timeouts.connect,
        hyper::client::conn::http1::handshake::<_, WasiBody>(TokioIo::new(io)),
    )
    .await
    .map_err(|_| HttpError::ConnectionTimeout)??;
    // The connection is driven on its own task; its result reaches the guest.
    let connection = tokio::spawn(connection);
    // On the wire the request line holds the path alone (the Host header,
    // set from the authority by wasi:http, names the host).
    let path = request
        .uri()
        .path_and_query()
        .map_or("/", |p| p.as_str())
        .to_string();
    *request.uri_mut() = path.parse().map_err(|_| HttpError::HttpRequestUriInvalid)?;
    if let Some(mut gate) = gate {
        gate.pass().await?;
        request = request.map(|body| gate.body(body).boxed_unsync());
    }
    let response = tokio::time::timeout(timeouts.first_byte, sender.send_request(request))
        .await
        .map_err(|_| HttpError::ConnectionReadTimeout)??;
    let response = response.map(|incoming| {
        Watched {
            incoming,
            between_bytes: timeouts.between_bytes,
            deadline: Box::pin(tokio::time::sleep(timeouts.between_bytes)),
        }
        .boxed_unsync()
    });
    let io = async move {
        match connection.await {
            Ok(result) => result.map_err(HttpError::from),
            // The task was cancelled with the runtime: nothing to report.
            Err(_) => Ok(()),
        }
    };
    Ok((response, Box::new(io)))
}

trait Io: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + Unpin {}
impl<T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + Unpin> Io for T {}

async fn connect_any(addresses: &[SocketAddr], timeout: Duration) -> Result<TcpStream, HttpError> {
    let mut last = HttpError::DestinationUnavailable;
    for address in addresses {
        match tokio::time::timeout(timeout, TcpStream::connect(address)).await {
            Ok(Ok(stream)) => return Ok(stream),
            Ok(Err(e)) => last = HttpError::Connect(e),
            Err(_) => last = HttpError::ConnectionTimeout,
        }
    }
    Err(last)
}

/// One TLS configuration for every outbound connection: the web's roots,
/// the ring provider (the one the rest of the host's TLS uses).
fn tls_config() -> Result<Arc<rustls::ClientConfig>, HttpError> {
    static CONFIG: OnceLock<Result<Arc<rustls::ClientConfig>, String>> = OnceLock::new();
    CONFIG
        .get_or_init(|| {
            let roots = rustls::RootCertStore {
                roots: webpki_roots::TLS_SERVER_ROOTS.into(),
            };
            rustls::ClientConfig::builder_with_provider(Arc::new(
                rustls::crypto::ring::default_provider(),
            ))
            .with_safe_default_protocol_versions()
            .map(|builder| Arc::new(builder.with_root_certificates(roots).with_no_client_auth()))
            .map_err(|e| e.to_string())
        })
        .clone()
        .map_err(|e| HttpError::InternalError(Some(format!("TLS configuration: {e}"))))
}

/// A response body that fails when no byte comes for `between_bytes`.
struct Watched {
    incoming: hyper::body::Incoming,
    between_bytes: Duration,
    deadline: Pin<Box<tokio::time::Sleep>>,
}

impl http_body::Body for Watched {
    type Data = Bytes;
    type Error = HttpError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, HttpError>>> {
        match Pin::new(&mut self.incoming).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => {
                let next = tokio::time::Instant::now() + self.between_bytes;
                self.deadline.as_mut().reset(next);
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Ready(Some(Err(e))) => Poll::Ready(Some(Err(HttpError::from(e)))),
            Poll::Ready(None) => Poll::Ready(None),
            Poll::Pending => match self.deadline.as_mut().poll(cx) {
                Poll::Ready(()) => Poll::Ready(Some(Err(HttpError::ConnectionReadTimeout))),
                Poll::Pending => Poll::Pending,
            },
        }
    }

    fn is_end_stream(&self) -> bool {
        self.incoming.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.incoming.size_hint()
    }
}
