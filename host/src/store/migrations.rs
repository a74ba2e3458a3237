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
}
