//! Answers every request with `hello`: the smallest wasi:http component,
//! for `wasmtime serve`'s cold start beside the host's (host/benches/cold_start.rs).

use wasip2::http::types::{
    Fields, IncomingRequest, OutgoingBody, OutgoingResponse, ResponseOutparam,
};

struct Hello;

impl wasip2::exports::http::incoming_handler::Guest for Hello {
    fn handle(_request: IncomingRequest, out: ResponseOutparam) {
        let response = OutgoingResponse::new(Fields::new());
        let Ok(body) = response.body() else { return };
        ResponseOutparam::set(out, Ok(response));
        if let Ok(stream) = body.write() {
            let _ = stream.blocking_write_and_flush(b"hello\n");
        }
        let _ = OutgoingBody::finish(body, None);
    }
}

wasip2::http::proxy::export!(Hello);
