//! Outbound HTTP (`wasi:http/outgoing-handler`) as grants allow it: a request
//! to a host the component was not granted fails in the guest with
//! `HTTP-request-denied` and never leaves the machine; one to a granted name
//! that resolves inside the host's network fails with
//! `destination-IP-prohibited` ([`crate::wasm::destinations`]).
//!
//! A call made for work a shared hub hands out (a durable activity, an agent
//! run's tool) carries a [`SendGate`]: on a host paused past its lease, the
//! work may have been taken over and done, the steps after it too, by
//! another host; a request sent on waking would repeat an effect no refused
//! write can take back. So each request leaves only while the gate says the
//! work is still this host's, and no later than the moment it names.

use std::future::Future;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;

use wasmtime::component::Linker;
use wasmtime_wasi_http::{
    Error as HttpError, RequestOptions, WasiBody, WasiHttpCtx, WasiHttpCtxView, WasiHttpHooks,
    WasiHttpView,
};

use super::GuestState;
use crate::wasm::connect::{self, SendBy, Timeouts};
use crate::wasm::destinations::Refusal;
use crate::wasm::grants::Grants;

/// The guest's `wasi:http` context and the hooks that decide, per request,
/// whether it may leave the machine.
pub(crate) struct Http {
    pub ctx: WasiHttpCtx,
    pub hooks: OutboundHttp,
}

impl WasiHttpView for GuestState {
    fn http(&mut self) -> WasiHttpCtxView<'_> {
        WasiHttpCtxView {
            ctx: &mut self.http.ctx,
            table: &mut self.table,
            hooks: &mut self.http.hooks,
        }
    }
}

pub(super) fn link(linker: &mut Linker<GuestState>) -> wasmtime::Result<()> {
    wasmtime_wasi_http::p2::add_only_http_to_linker_async(linker)
}

/// Asked before each outbound request of a call: until when (ms since the
/// Unix epoch) the request may leave, or `None` when the work the call does
/// is no longer this host's.
pub type SendGate = Arc<dyn Fn() -> BoxFuture<'static, Option<i64>> + Send + Sync>;

/// The `wasi:http` hooks of one guest instance.
pub struct OutboundHttp {
    component: Arc<str>,
    /// `None`: every request is refused (orchestrations, which must replay).
    grants: Option<Arc<Grants>>,
    gate: Option<SendGate>,
    /// Set when the gate held a request back: the call's result is then
    /// not the host's to keep.
    held_back: Arc<AtomicBool>,
}

/// Longest a guest may wait to connect, or for a response byte. Waiting costs
/// no CPU, so the CPU limit does not bound it; these do (together with the
/// wall-clock limit of the whole call).
const MAX_CONNECT: Duration = Duration::from_secs(10);
const MAX_WAIT: Duration = Duration::from_secs(30);

/// The guest's timeouts, never longer than the host's.
fn capped(options: Option<RequestOptions>) -> RequestOptions {
    let options = options.unwrap_or_default();
    let cap = |asked: Option<Duration>, max: Duration| Some(asked.map_or(max, |a| a.min(max)));
    RequestOptions {
        connect_timeout: cap(options.connect_timeout, MAX_CONNECT),
        first_byte_timeout: cap(options.first_byte_timeout, MAX_WAIT),
        between_bytes_timeout: cap(options.between_bytes_timeout, MAX_WAIT),
    }
}

type SendResult = Result<
    (
        http::Response<WasiBody>,
        Box<dyn Future<Output = Result<(), HttpError>> + Send>,
    ),
    HttpError,
>;

impl OutboundHttp {
    pub fn granted(component: &str, grants: Arc<Grants>) -> Self {
        Self {
            component: component.into(),
            grants: Some(grants),
            gate: None,
            held_back: Arc::default(),
        }
    }

    pub fn refused(component: &str) -> Self {
        Self {
            component: component.into(),
            grants: None,
            gate: None,
            held_back: Arc::default(),
        }
    }

    /// Makes every later request ask `gate` first; the flag returned says
    /// whether one was held back.
    pub(super) fn gate(&mut self, gate: SendGate) -> Arc<AtomicBool> {
        self.gate = Some(gate);
        self.held_back.clone()
    }
}

/// Whether a request may leave now: `Ok(None)` without a gate, the moment
/// it must have left by with one; `Err` (and `held_back` set) when the
/// work is no longer this host's or the moment has passed.
async fn ask(
    gate: Option<SendGate>,
    held_back: &Arc<AtomicBool>,
    component: &str,
    uri: &http::Uri,
) -> Result<Option<SendBy>, HttpError> {
    let Some(gate) = gate else {
        return Ok(None);
    };
    let send_by = SendBy {
        moment: gate().await.unwrap_or(i64::MIN),
        held_back: held_back.clone(),
    };
    if let Err(e) = send_by.check() {
        tracing::warn!(%component, %uri, "outbound HTTP held back: the work this call does is no longer this host's (its lease ran out), or it cannot leave before another host may take the work over");
        return Err(e);
    }
    Ok(Some(send_by))
}

/// The request's host and port (the scheme's when it names none).
fn destination(request: &http::Request<WasiBody>) -> Option<(String, u16)> {
    let uri = request.uri();
    let port = uri.port_u16().or(match uri.scheme_str() {
        Some("http") => Some(80),
        Some("https") => Some(443),
        _ => None,
    })?;
    Some((uri.host()?.to_string(), port))
}

impl WasiHttpHooks for OutboundHttp {
    fn send_request(
        &mut self,
        request: http::Request<WasiBody>,
        options: Option<RequestOptions>,
        _fut: Box<dyn Future<Output = Result<(), HttpError>> + Send>,
    ) -> Box<dyn Future<Output = SendResult> + Send> {
        let component = self.component.clone();
        let (gate, held_back) = (self.gate.clone(), self.held_back.clone());
        let granted = self.grants.as_ref().and_then(|grants| {
            let (host, port) = destination(&request)?;
            let allowed = grants.allows(&host, port)?;
            Some((grants.network.clone(), host, port, allowed))
        });
        let Some((network, host, port, allowed)) = granted else {
            tracing::warn!(%component, uri = %request.uri(), "outbound HTTP refused: host not granted");
            return Box::new(async { Err(HttpError::HttpRequestDenied) });
        };
        let options = capped(options);
        let timeouts = Timeouts {
            connect: options.connect_timeout.unwrap_or(MAX_CONNECT),
            first_byte: options.first_byte_timeout.unwrap_or(MAX_WAIT),
            between_bytes: options.between_bytes_timeout.unwrap_or(MAX_WAIT),
        };
        Box::new(async move {
            let send_by = ask(gate, &held_back, &component, request.uri()).await?;
            let addresses = network
                .addresses(&host, port, allowed.names_inside, timeouts.connect)
                .await
                .map_err(|refusal| {
                    tracing::warn!(%component, uri = %request.uri(), %refusal, "outbound HTTP refused");
                    match refusal {
                        Refusal::Dns { reason, .. } => HttpError::DnsError {
                            rcode: Some(reason),
                            info_code: None,
                        },
                        Refusal::Internal { .. } => HttpError::DestinationIpProhibited,
                    }
                })?;
            tracing::debug!(%component, uri = %request.uri(), ?addresses, "outbound HTTP");
            connect::send(request, &addresses, &host, timeouts, send_by).await
        })
    }
}
