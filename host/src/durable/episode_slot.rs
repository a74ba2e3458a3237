//! An episode's hold on one of the engine's episode slots: the bound on
//! episodes at once (the wasm code they run, the images they load). An
//! episode that waits for an answer from outside, an SDK worker's or an
//! agent's run, gives its slot up for the wait, so that slow answers (a
//! model asked inside an entity's operation) never hold every slot while
//! other instances' episodes queue behind them. It gives it up too while
//! it waits for a guest slot of its component (its share may be held by
//! that component's sleeping activities): an episode queued there would
//! otherwise hold an engine slot every other component's episodes need.

use std::future::Future;
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

    /// Runs `wait` without the slot, then takes a slot again (if it held
    /// one) before the episode goes on.
    pub(super) async fn given_up_while<T>(&self, wait: impl Future<Output = T>) -> T {
        let semaphore = {
            let mut held = self.0.lock().unwrap_or_else(|p| p.into_inner());
            held.take().map(|permit| permit.semaphore().clone())
        };
        let waited = wait.await;
        if let Some(semaphore) = semaphore {
            // Closed only as the process ends: the episode then goes on
            // without a slot, as one that gave it up does.
            if let Ok(permit) = semaphore.acquire_owned().await {
                *self.0.lock().unwrap_or_else(|p| p.into_inner()) = Some(permit);
            }
        }
        waited
    }
}
