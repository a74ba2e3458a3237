//! The gate a guest's outbound request passes on a shared hub: whether the
//! work the call does (a durable activity's task, an agent run's tool) is
//! still this host's, and until when its lease lets a request leave.
//!
//! A host paused past its lease (SIGSTOP, a stall) may have lost the work to
//! another host, which did it and the steps after it; a request sent on
//! waking would repeat an effect no refused write can take back. So a gated
//! request asks before it begins, again once connected if the moment it was
//! given has passed (a renewed lease lets it go on), and each piece of its
//! body, its end included, leaves only before a moment the gate gave. What
//! remains is the moment between the last check and the write, inside one
//! poll of the connection.

use std::pin::Pin;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;
use std::task::{ready, Context, Poll};

use bytes::Bytes;
use futures::future::BoxFuture;
use wasmtime_wasi_http::{Error as HttpError, WasiBody};

/// Asked before a call's outbound request leaves: until when (ms since the
/// Unix epoch) it may leave, or `None` when the work the call does is no
/// longer this host's.
pub type SendGate = Arc<dyn Fn() -> BoxFuture<'static, Option<i64>> + Send + Sync>;

/// Why a gated request was held back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HeldBack {
    /// The work is another host's now (or the store could not say).
    Lost,
    /// The work is still this host's, but its lease had run out: another
    /// host could take it over before the request arrived.
    Late,
}

/// What a call's requests record when one was held back (the first reason
/// stands).
#[derive(Clone, Default)]
pub(crate) struct HeldFlag(Arc<AtomicU8>);

impl HeldFlag {
    /// Records `why` and gives the error the guest sees.
    fn hold(&self, why: HeldBack) -> HttpError {
        let code = match why {
            HeldBack::Lost => 1,
            HeldBack::Late => 2,
        };
        let _ = self
            .0
            .compare_exchange(0, code, Ordering::Relaxed, Ordering::Relaxed);
        HttpError::HttpRequestDenied
    }

    pub(crate) fn get(&self) -> Option<HeldBack> {
        match self.0.load(Ordering::Relaxed) {
            1 => Some(HeldBack::Lost),
            2 => Some(HeldBack::Late),
            _ => None,
        }
    }
}

fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

/// One request's gate: the last moment it was given, asked again once past.
pub(crate) struct Gate {
    ask: SendGate,
    moment: i64,
    held: HeldFlag,
}

impl Gate {
    /// Asks before anything of the request leaves.
    pub(crate) async fn open(ask: SendGate, held: HeldFlag) -> Result<Self, HttpError> {
        let mut gate = Self {
            ask,
            moment: i64::MIN,
            held,
        };
        gate.pass().await?;
        Ok(gate)
    }

    fn in_time(&self) -> bool {
        now_ms() <= self.moment
    }

    /// Lets the request go on while its moment holds; once past, asks again.
    pub(crate) async fn pass(&mut self) -> Result<(), HttpError> {
        if self.in_time() {
            return Ok(());
        }
        let answer = (self.ask)().await;
        self.settle(answer)
    }

    fn settle(&mut self, answer: Option<i64>) -> Result<(), HttpError> {
        match answer {
            None => Err(self.held.hold(HeldBack::Lost)),
            Some(moment) if now_ms() > moment => Err(self.held.hold(HeldBack::Late)),
            Some(moment) => {
                self.moment = moment;
                Ok(())
            }
        }
    }

    /// `body`, each of whose pieces (and its end) leaves only while the
    /// gate lets it.
    pub(crate) fn body(self, body: WasiBody) -> GatedBody {
        GatedBody {
            body,
            gate: self,
            asking: None,
            held: None,
        }
    }
}

/// A request body behind its gate. A piece produced after the moment waits
/// while the gate is asked again; a refusal fails the body, so the
/// connection closes with the request incomplete.
pub(crate) struct GatedBody {
    body: WasiBody,
    gate: Gate,
    asking: Option<BoxFuture<'static, Option<i64>>>,
    /// The piece (`None`: the end) waiting for the gate's answer.
    held: Option<Option<http_body::Frame<Bytes>>>,
}

impl http_body::Body for GatedBody {
    type Data = Bytes;
    type Error = HttpError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, HttpError>>> {
        let this = &mut *self;
        loop {
            if let Some(asking) = this.asking.as_mut() {
                let answer = ready!(asking.as_mut().poll(cx));
                this.asking = None;
                if let Err(e) = this.gate.settle(answer) {
                    return Poll::Ready(Some(Err(e)));
                }
                if let Some(piece) = this.held.take() {
                    return Poll::Ready(piece.map(Ok));
                }
            }
            match ready!(Pin::new(&mut this.body).poll_frame(cx)) {
                Some(Err(e)) => return Poll::Ready(Some(Err(e))),
                Some(Ok(frame)) if this.gate.in_time() => return Poll::Ready(Some(Ok(frame))),
                None if this.gate.in_time() => return Poll::Ready(None),
                piece => this.held = Some(piece.and_then(Result::ok)),
            }
            this.asking = Some((this.gate.ask)());
        }
    }

    fn is_end_stream(&self) -> bool {
        // The end too passes the gate: it is never taken as given.
        false
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::{BodyExt, Full};
    use std::sync::atomic::AtomicUsize;

    /// A gate that answers each ask with the next of `answers` (the last
    /// one again when they run out), counting the asks.
    fn answering(answers: Vec<Option<i64>>) -> (SendGate, Arc<AtomicUsize>) {
        let asked = Arc::new(AtomicUsize::new(0));
        let count = asked.clone();
        let gate: SendGate = Arc::new(move || {
            let n = count.fetch_add(1, Ordering::Relaxed);
            let answer = answers.get(n).or(answers.last()).copied().flatten();
            Box::pin(async move { answer })
        });
        (gate, asked)
    }

    fn body(bytes: &'static [u8]) -> WasiBody {
        Full::new(Bytes::from_static(bytes))
            .map_err(|never| match never {})
            .boxed_unsync()
    }

    #[tokio::test]
    async fn work_no_longer_this_hosts_or_a_lapsed_lease_holds_the_request_back() {
        let (lost, _) = answering(vec![None]);
        let held = HeldFlag::default();
        assert!(Gate::open(lost, held.clone()).await.is_err());
        assert_eq!(held.get(), Some(HeldBack::Lost));
        let (late, _) = answering(vec![Some(now_ms() - 1)]);
        let held = HeldFlag::default();
        assert!(Gate::open(late, held.clone()).await.is_err());
        assert_eq!(held.get(), Some(HeldBack::Late));
    }

    #[tokio::test]
    async fn a_body_past_its_moment_asks_again_and_goes_on_under_a_renewed_lease() {
        let now = now_ms();
        // Open in time, then the moment passes; the second answer renews.
        let (gate, asked) = answering(vec![Some(now + 60_000), Some(now + 120_000)]);
        let held = HeldFlag::default();
        let mut gate = Gate::open(gate, held.clone()).await.expect("open");
        gate.moment = now - 1;
        let collected = gate.body(body(b"whole")).collect().await;
        assert_eq!(
            collected.ok().map(|c| c.to_bytes()).as_deref(),
            Some(&b"whole"[..])
        );
        assert_eq!(asked.load(Ordering::Relaxed), 2, "asked again once");
        assert_eq!(held.get(), None);
    }

    #[tokio::test]
    async fn a_body_whose_work_was_lost_meanwhile_fails_before_its_end() {
        let now = now_ms();
        let (gate, _) = answering(vec![Some(now + 60_000), None]);
        let held = HeldFlag::default();
        let mut gate = Gate::open(gate, held.clone()).await.expect("open");
        gate.moment = now - 1;
        assert!(gate.body(body(b"late")).collect().await.is_err());
        assert_eq!(held.get(), Some(HeldBack::Lost));
    }
}
