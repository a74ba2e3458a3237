//! Ids minted for rows the store indexes by them: sessions and runs.
//!
//! A random id (UUID version 4) lands anywhere in the index that holds it,
//! so each new session and run dirtied a different leaf page of each such
//! index: every commit wrote those pages to the WAL, the checkpoint copied
//! each one again into the database file, and once the store outgrew the
//! page cache each insert read its leaf back from the file first. An id
//! that begins with its creation time (UUID version 7) lands at the end of
//! the index, where the pages are already in memory and one page takes the
//! ids of many runs. docs/performance.md, "Agent runs", has the figures.

use uuid::Uuid;

/// A new id that sorts after the ids minted before it (to the millisecond),
/// with 74 random bits after the time, as unguessable as a session id needs
/// (version 7's layout; not `Uuid::now_v7`, which spends most of those bits
/// on a counter that the next id in the same millisecond continues).
pub fn sorted_id() -> Uuid {
    // A version 4 id's bytes are random except the version (byte 6) and
    // variant (byte 8) bits: the ten others are 80 random bits.
    let random = *Uuid::new_v4().as_bytes();
    let bytes = [
        random[0], random[1], random[2], random[3], random[4], random[5], random[7], random[9],
        random[10], random[11],
    ];
    let millis = u64::try_from(super::clock::now_ms()).unwrap_or_default();
    uuid::Builder::from_unix_timestamp_millis(millis, &bytes).into_uuid()
}

#[cfg(test)]
mod tests {
    use super::sorted_id;

    /// Ids minted one after another sort in that order once the clock has
    /// moved on, are version 7, and do not repeat.
    #[test]
    fn ids_sort_by_when_they_were_minted_and_do_not_repeat() {
        let first = sorted_id();
        std::thread::sleep(std::time::Duration::from_millis(2));
        let ids: Vec<_> = (0..10_000).map(|_| sorted_id()).collect();
        assert_eq!(first.get_version(), Some(uuid::Version::SortRand));
        assert!(ids.iter().all(|id| id.to_string() > first.to_string()));
        let distinct: std::collections::HashSet<_> = ids.iter().collect();
        assert_eq!(distinct.len(), ids.len());
    }
}
