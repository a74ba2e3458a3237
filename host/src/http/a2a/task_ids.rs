//! The ids of the tasks messages start: derived from what a message is,
//! so that the same message sent again finds its task (a client's retry is
//! not run twice), and nothing else does.

/// The task (run correlation id) a message with a `messageId` starts:
/// derived from that id, its text and who sends it (an invoke key's id), so
/// that sending the same message again finds that task (a client's retry is
/// not run again), named context or not: a client that sent it without one
/// and learned the context from the answer may name it in its retry, or the
/// other way round. The same `messageId` on another text starts a task of
/// its own, as the A2A SDKs take it, and so does the same message on
/// another context than its task's ([`task_id_elsewhere`]).
pub(super) fn task_id_of(
    agent: &str,
    message_id: &str,
    text: &str,
    caller: Option<&str>,
) -> String {
    derived_id(&[agent, message_id, text, caller.unwrap_or_default()])
}

/// The task of a message sent again on another context than the task its
/// id and text first started.
pub(super) fn task_id_elsewhere(
    agent: &str,
    message_id: &str,
    text: &str,
    caller: Option<&str>,
    context: &str,
) -> String {
    derived_id(&[agent, message_id, text, caller.unwrap_or_default(), context])
}

/// The id an earlier build derived from the `messageId` alone (its parts
/// joined by a zero byte): a message sent before an upgrade and again
/// after it still finds its task.
pub(super) fn task_id_before(agent: &str, message_id: &str) -> String {
    use sha2::{Digest, Sha256};
    let digest = Sha256::new()
        .chain_update(agent.as_bytes())
        .chain_update([0])
        .chain_update(message_id.as_bytes())
        .finalize();
    uuid_of(&digest)
}

/// An id from `parts`, each length-prefixed (no two lists of parts hash
/// alike, whatever bytes they hold).
fn derived_id(parts: &[&str]) -> String {
    use sha2::{Digest, Sha256};
    let mut hash = Sha256::new().chain_update(b"agenthost a2a task\0");
    for part in parts {
        hash.update((part.len() as u64).to_be_bytes());
        hash.update(part.as_bytes());
    }
    uuid_of(&hash.finalize())
}

fn uuid_of(digest: &[u8]) -> String {
    let mut bytes = [0u8; 16];
    bytes.copy_from_slice(&digest[..16]);
    uuid::Builder::from_custom_bytes(bytes)
        .into_uuid()
        .to_string()
}
