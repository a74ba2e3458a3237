//! Outbound HTTP (`wasi:http/outgoing-handler`) as grants allow it: a request
//! to a host the component was not granted fails in the guest with
//! `HTTP-request-denied` and never leaves the machine; one to a granted name
//! that resolves inside the host's network fails with
//! `destination-IP-prohibited` ([`crate::wasm::destinations`]).
//!
//! A call made for work a shared hub hands out (a durable activity, an agent
//! run's tool) carries a [`SendGate`] ([`crate::wasm::send_gate`]).

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use wasmtime::component::Linker;
use wasmtime_wasi_http::{
    Error as HttpError, RequestOptions, WasiBody, WasiHttpCtx, WasiHttpCtxView, WasiHttpHooks,
    WasiHttpView,
};

use super::GuestState;
use crate::wasm::connect::{self, Timeouts};
use crate::wasm::destinations::Refusal;
use crate::wasm::grants::Grants;
use crate::wasm::send_gate::{Gate, HeldFlag, SendGate};

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

/// The `wasi:http` hooks of one guest instance.
pub struct OutboundHttp {
    component: Arc<str>,
    /// `None`: every request is refused (orchestrations, which must replay).
    grants: Option<Arc<Grants>>,
    gate: Option<SendGate>,
    /// Why the gate held a request back, if it did: the call's result is
    /// then not the host's to keep.
    held_back: HeldFlag,
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
            held_back: HeldFlag::default(),
        }
    }

    pub fn refused(component: &str) -> Self {
        Self {
            component: component.into(),
            grants: None,
            gate: None,
            held_back: HeldFlag::default(),
        }
    }

    /// Makes every later request ask `gate` first; the flag returned says
    /// whether one was held back, and why.
    pub(super) fn gate(&mut self, gate: SendGate) -> HeldFlag {
        self.gate = Some(gate);
        self.held_back.clone()
    }
}

/// The request's gate, once it let the request begin; `Ok(None)` without
/// one.
async fn open(
    gate: Option<SendGate>,
    held_back: &HeldFlag,
    component: &str,
    uri: &http::Uri,
) -> Result<Option<Gate>, HttpError> {
    let Some(gate) = gate else {
        return Ok(None);
    };
    match Gate::open(gate, held_back.clone()).await {
        Ok(gate) => Ok(Some(gate)),
        Err(e) => {
            tracing::warn!(%component, %uri, why = ?held_back.get(), "outbound HTTP held back: the work this call does is no longer this host's, or its lease ran out before the request could leave");
            Err(e)
        }
    }
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
            let gate = open(gate, &held_back, &component, request.uri()).await?;
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
            connect::send(request, &addresses, &host, timeouts, gate).await
        })
    }
}
