//! An MCP session belongs to the caller that opened it. `rmcp` keeps a
//! session under the id it hands out in `mcp-session-id` and serves whoever
//! presents that id: with endpoint keys, another invoke key holding it could
//! call on the session, follow its stream or end it. So the id handed out is
//! `rmcp`'s id signed for the caller (`{id}.{mac}`); a request's id must
//! carry its own caller's signature, and is passed on bare; one that does
//! not is answered as an unknown session (404), as `rmcp` answers an id it
//! never gave. Nothing is stored: the signing secret is the process's own,
//! as `rmcp`'s sessions are.

use std::sync::OnceLock;

use axum::extract::Request;
use axum::http::HeaderValue;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use hmac::{Hmac, Mac};
use sha2::Sha256;

use super::caller::Caller;
use super::error::ApiError;

const HEADER: &str = "mcp-session-id";

/// The middleware around the MCP service.
pub async fn bound_to_caller(mut request: Request, next: Next) -> Response {
    let caller = who(request.extensions().get::<Caller>());
    if let Some(presented) = request.headers().get(HEADER) {
        let bare = presented
            .to_str()
            .ok()
            .and_then(|signed| opened(secret(), &caller, signed))
            .and_then(|id| HeaderValue::from_str(id).ok());
        match bare {
            Some(id) => {
                request.headers_mut().insert(HEADER, id);
            }
            None => {
                return ApiError::not_found("not_found", "Not Found: Session not found")
                    .into_response()
            }
        }
    }
    let mut response = next.run(request).await;
    let signed = response
        .headers()
        .get(HEADER)
        .and_then(|id| id.to_str().ok())
        .and_then(|id| HeaderValue::from_str(&signed(secret(), &caller, id)).ok());
    if let Some(signed) = signed {
        response.headers_mut().insert(HEADER, signed);
    }
    response
}

/// Who a session is bound to: an invoke key by its id; the admin keys, and
/// the one caller of a host without keys, as one each.
fn who(caller: Option<&Caller>) -> String {
    match caller {
        Some(Caller::Invoke(id)) => format!("invoke:{id}"),
        Some(Caller::Admin) => "admin".into(),
        Some(Caller::Token) => "token".into(),
        Some(Caller::Unknown) => "unknown".into(),
        Some(Caller::Anyone) | None => "anyone".into(),
    }
}

/// This process's signing secret, drawn once.
fn secret() -> &'static [u8; 32] {
    static SECRET: OnceLock<[u8; 32]> = OnceLock::new();
    SECRET.get_or_init(|| {
        let mut secret = [0u8; 32];
        secret[..16].copy_from_slice(uuid::Uuid::new_v4().as_bytes());
        secret[16..].copy_from_slice(uuid::Uuid::new_v4().as_bytes());
        secret
    })
}

fn mac(secret: &[u8; 32], caller: &str, id: &str) -> Option<Hmac<Sha256>> {
    let mut mac = Hmac::<Sha256>::new_from_slice(secret).ok()?;
    mac.update(caller.as_bytes());
    mac.update(&[0]);
    mac.update(id.as_bytes());
    Some(mac)
}

/// `id` signed for `caller`, as handed out.
fn signed(secret: &[u8; 32], caller: &str, id: &str) -> String {
    let tag = mac(secret, caller, id)
        .map(|mac| hex::encode(mac.finalize().into_bytes()))
        .unwrap_or_default();
    format!("{id}.{tag}")
}

/// The bare id of `signed`, if it was signed for `caller`.
fn opened<'a>(secret: &[u8; 32], caller: &str, signed: &'a str) -> Option<&'a str> {
    let (id, tag) = signed.rsplit_once('.')?;
    let tag = hex::decode(tag).ok()?;
    mac(secret, caller, id)?.verify_slice(&tag).ok()?;
    Some(id)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_session_id_opens_for_the_caller_it_was_signed_for_and_no_other() {
        let secret = [7u8; 32];
        let handed = signed(&secret, "invoke:key:a", "6034fe16");
        assert_eq!(opened(&secret, "invoke:key:a", &handed), Some("6034fe16"));
        assert_eq!(opened(&secret, "invoke:key:b", &handed), None);
        assert_eq!(opened(&[8u8; 32], "invoke:key:a", &handed), None);
        assert_eq!(opened(&secret, "invoke:key:a", "6034fe16"), None, "bare");
        assert_eq!(opened(&secret, "invoke:key:a", "6034fe16.00"), None);
        assert_eq!(who(Some(&Caller::Invoke("key:a".into()))), "invoke:key:a");
        assert_eq!(who(None), who(Some(&Caller::Anyone)));
    }
}
