//! An episode's hold on one of the engine's episode slots: the bound on
//! episodes at once (the wasm code they run, the images they load). An
//! episode that waits for an answer from outside, an SDK worker's or an
//! agent's run, gives its slot up for the wait, so that slow answers (a
//! model asked inside an entity's operation) never hold every slot while
//! other instances' episodes queue behind them.

use std::sync::Mutex;

use tokio::sync::OwnedSemaphorePermit;

pub(crate) struct Slot(Mutex<Option<OwnedSemaphorePermit>>);

impl Slot {
    pub(super) fn held(permit: OwnedSemaphorePermit) -> Self {
        Self(Mutex::new(Some(permit)))
    }

    /// Gives the slot up for the rest of the episode: what remains is a
    /// wait for an answer and a commit, neither of which the bound is for.
    pub(super) fn give_up(&self) {
        let permit = self.0.lock().unwrap_or_else(|p| p.into_inner()).take();
        drop(permit);
    }
}
