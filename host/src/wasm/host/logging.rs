//! The `logging` import: a guest's log lines become the host's `tracing`
//! events, tagged with the component's name.

use std::sync::Arc;

use wasmtime::component::{HasSelf, Linker};

use super::GuestState;
use crate::wasm::bindings::agenthost::host::logging;

/// What the import needs: whose lines these are.
pub(crate) struct Logging {
    pub component: Arc<str>,
}

pub(super) fn link(linker: &mut Linker<GuestState>) -> wasmtime::Result<()> {
    logging::add_to_linker::<_, HasSelf<Logging>>(linker, |s| &mut s.logging)
}

impl logging::Host for Logging {
    fn log(&mut self, level: logging::Level, message: String) -> wasmtime::Result<()> {
        let component = &*self.component;
        match level {
            logging::Level::Trace => tracing::trace!(component, "{message}"),
            logging::Level::Debug => tracing::debug!(component, "{message}"),
            logging::Level::Info => tracing::info!(component, "{message}"),
            logging::Level::Warn => tracing::warn!(component, "{message}"),
            logging::Level::Error => tracing::error!(component, "{message}"),
        }
        Ok(())
    }
}
