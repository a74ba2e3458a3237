//! Each store's schema migrations, embedded in the binary (build.rs lists
//! `migrations/` and `migrations-postgres/`) and read as sqlx reads a
//! migrations folder, so that a database migrated by an earlier build (by
//! `sqlx::migrate!`) finds the same versions and checksums.

use std::borrow::Cow;

use sqlx::error::BoxDynError;
use sqlx::migrate::{Migration, MigrationSource, MigrationType, Migrator};

mod listed {
    include!(concat!(env!("OUT_DIR"), "/migrations.rs"));
}

/// The migrations of one dialect: `(file name, SQL)`, in file-name order.
#[derive(Debug, Clone, Copy)]
pub(in crate::store) struct Embedded(&'static [(&'static str, &'static str)]);

/// The SQLite store's migrations (`host/migrations/`).
pub(in crate::store) const SQLITE: Embedded = Embedded(listed::SQLITE);
/// The PostgreSQL store's migrations (`host/migrations-postgres/`).
pub(in crate::store) const POSTGRES: Embedded = Embedded(listed::POSTGRES);

impl Embedded {
    /// The migrator sqlx runs against a pool.
    pub(in crate::store) async fn migrator(self) -> Result<Migrator, sqlx::migrate::MigrateError> {
        Migrator::new(self).await
    }

    /// Each file as a migration, named as sqlx names files of a folder:
    /// `<version>_<description>.sql`, underscores of the description read
    /// as spaces, `-- no-transaction` on the first line to run it alone.
    fn migrations(self) -> Result<Vec<Migration>, String> {
        self.0
            .iter()
            .map(|&(file, sql)| {
                let (version, rest) = file.split_once('_').ok_or_else(|| {
                    format!("migration {file:?} is not named <version>_<description>.sql")
                })?;
                let version = version.parse::<i64>().map_err(|_| {
                    format!("migration {file:?} does not start with a version number")
                })?;
                let kind = MigrationType::from_filename(rest);
                let description = rest.trim_end_matches(kind.suffix()).replace('_', " ");
                Ok(Migration::new(
                    version,
                    Cow::Owned(description),
                    kind,
                    Cow::Borrowed(sql),
                    sql.starts_with("-- no-transaction"),
                ))
            })
            .collect()
    }
}

impl<'s> MigrationSource<'s> for Embedded {
    fn resolve(self) -> futures::future::BoxFuture<'s, Result<Vec<Migration>, BoxDynError>> {
        Box::pin(async move { self.migrations().map_err(BoxDynError::from) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    /// What a database migrated by `sqlx::migrate!` (earlier builds) holds
    /// must match: the same versions, descriptions and checksums as sqlx
    /// reading the folder itself, and every file of the folder embedded.
    async fn same_as_the_folder(embedded: Embedded, folder: &str) {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join(folder);
        let from_folder = Migrator::new(dir.as_path()).await.unwrap();
        let ours = embedded.migrator().await.unwrap();
        let view = |m: &Migrator| {
            m.iter()
                .map(|m| {
                    (
                        m.version,
                        m.description.to_string(),
                        m.checksum.to_vec(),
                        m.no_tx,
                    )
                })
                .collect::<Vec<_>>()
        };
        assert!(!view(&ours).is_empty());
        assert_eq!(view(&ours), view(&from_folder), "{folder}");
    }

    #[tokio::test]
    async fn the_embedded_migrations_are_the_folders_as_sqlx_reads_them() {
        same_as_the_folder(SQLITE, "migrations").await;
        same_as_the_folder(POSTGRES, "migrations-postgres").await;
    }

    #[test]
    fn a_misnamed_migration_is_refused_with_its_name() {
        let bad = Embedded(&[("init.sql", "select 1")]);
        assert!(bad.migrations().unwrap_err().contains("init.sql"));
        let bad = Embedded(&[("v1_init.sql", "select 1")]);
        assert!(bad.migrations().unwrap_err().contains("version number"));
    }

    /// A store an earlier build wrote keeps every conversation when its
    /// sessions and messages move to tables stored in key order (0021),
    /// and the moved tables refuse a second row for one key as before.
    #[tokio::test]
    async fn conversations_stored_before_0021_move_whole_to_key_order() {
        use sqlx::Row;
        let moved = listed::SQLITE
            .iter()
            .position(|(file, _)| file.starts_with("0021_"))
            .expect("the migration that moves conversations to key order");
        let pool = sqlx::sqlite::SqlitePoolOptions::new()
            .max_connections(1)
            .connect("sqlite::memory:")
            .await
            .unwrap();
        let before = Embedded(&listed::SQLITE[..moved]);
        before.migrator().await.unwrap().run(&pool).await.unwrap();
        sqlx::query(
            "INSERT INTO sessions (agent, id, created_at, last_active_at, caller) VALUES \
             ('writer', 's1', 1, 2, 'key-a'), ('writer', 's2', 3, 4, NULL)",
        )
        .execute(&pool)
        .await
        .unwrap();
        sqlx::query(
            "INSERT INTO messages (agent, session_id, seq, correlation_id, body, created_at) VALUES \
             ('writer', 's1', 2, 'r1', '{\"role\":\"assistant\"}', 5), \
             ('writer', 's1', 1, 'r1', '{\"role\":\"user\"}', 5), \
             ('writer', 's2', 1, 'r2', '{\"role\":\"user\"}', 6)",
        )
        .execute(&pool)
        .await
        .unwrap();

        SQLITE.migrator().await.unwrap().run(&pool).await.unwrap();

        let sessions: Vec<(String, i64, i64, Option<String>)> =
            sqlx::query("SELECT id, created_at, last_active_at, caller FROM sessions ORDER BY id")
                .fetch_all(&pool)
                .await
                .unwrap()
                .iter()
                .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3)))
                .collect();
        assert_eq!(
            sessions,
            [
                ("s1".to_string(), 1, 2, Some("key-a".to_string())),
                ("s2".to_string(), 3, 4, None)
            ]
        );
        let messages: Vec<(String, i64, String)> = sqlx::query(
            "SELECT session_id, seq, body FROM messages WHERE agent = 'writer' ORDER BY session_id, seq",
        )
        .fetch_all(&pool)
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect();
        assert_eq!(
            messages,
            [
                ("s1".to_string(), 1, r#"{"role":"user"}"#.to_string()),
                ("s1".to_string(), 2, r#"{"role":"assistant"}"#.to_string()),
                ("s2".to_string(), 1, r#"{"role":"user"}"#.to_string()),
            ]
        );
        // Stored in key order: no rowid (a table with one has it).
        for table in ["sessions", "messages"] {
            let rowid = sqlx::query(&format!("SELECT rowid FROM {table}"))
                .fetch_all(&pool)
                .await;
            assert!(rowid.is_err(), "{table} still has a rowid");
        }
        let again = sqlx::query(
            "INSERT INTO messages (agent, session_id, seq, correlation_id, body, created_at) \
             VALUES ('writer', 's1', 2, 'r3', 'x', 7)",
        )
        .execute(&pool)
        .await;
        assert!(again.is_err(), "a second message at one seq was taken");
    }
}
