//! The other hosts of a shared hub as the store's callers meet them: their
//! wake-ups, what this host tells them, and this host's lease and owner id
//! among them. Nothing on a store that no other host shares (SQLite); the
//! hub itself is PostgreSQL's ([`super::postgres`]).

use tokio::sync::broadcast;

use super::clock::now_ms;
use super::error::StoreError;
use super::open::Store;
use super::postgres::{notify, SharedHub, Wake, PAYLOAD_MAX};
use super::records::SessionKey;

impl Store {
    /// Wake-ups from the other hosts of a shared hub; `None` on a store
    /// that no other host shares (SQLite).
    pub fn wakes(&self) -> Option<broadcast::Receiver<Wake>> {
        self.shared().map(SharedHub::subscribe)
    }

    /// Tells the other hosts of a shared hub to look at their sessions (a
    /// run can go on); nothing on a store no other host shares.
    /// Tells the other hosts that a caller asked a run to stop. One whose
    /// ids do not fit a notification wakes every host's pass instead (the
    /// run then stops when its worker next looks, not mid-run).
    pub async fn announce_cancel(
        &self,
        correlation_id: &str,
        session: &SessionKey,
    ) -> Result<(), StoreError> {
        let Some(hub) = self.shared() else {
            return Ok(());
        };
        let sent = hub.cancel_payload(correlation_id, session);
        match sent.len() <= PAYLOAD_MAX {
            true => notify(self.pool(), &hub.channel, &sent).await,
            false => notify(self.pool(), &hub.channel, &hub.sessions_payload()).await,
        }
    }

    pub async fn announce_sessions(&self) -> Result<(), StoreError> {
        match self.shared() {
            Some(hub) => notify(self.pool(), &hub.channel, &hub.sessions_payload()).await,
            None => Ok(()),
        }
    }

    /// Why this host may no longer hold its lease on a shared hub (its last
    /// renewal is older than the lease), if so.
    pub fn lease_problem(&self) -> Option<String> {
        let hub = self.shared()?;
        let (renewed_at, lease_ms) = hub.lease();
        let age = now_ms() - renewed_at;
        (age > lease_ms).then(|| {
            format!(
                "this host has not renewed its lease on the task hub for {:.1} s (lease {} ms): other hosts may take its work over",
                age as f64 / 1000.0,
                lease_ms
            )
        })
    }

    /// This host's owner id on a shared hub, when it runs work.
    pub fn owner_id(&self) -> Option<&str> {
        self.shared().and_then(SharedHub::owner)
    }
}
