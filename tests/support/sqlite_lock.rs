//! Another process holding a SQLite store's write lock: a fault tests and
//! the fault suite inject.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use super::host::hub_for;

/// The SQLite file of a test host's hub.
pub fn sqlite_file(dir: &Path) -> PathBuf {
    dir.join(format!("agenthost.{}.db", hub_for(dir)))
}

/// Holds SQLite's write lock on `db` from another process for `seconds`.
pub fn lock_sqlite(db: &Path, seconds: f64) -> Child {
    let script = "import sqlite3, sys, time\n\
        c = sqlite3.connect(sys.argv[1], isolation_level=None, timeout=30)\n\
        c.execute('BEGIN EXCLUSIVE')\n\
        print('locked', flush=True)\n\
        time.sleep(float(sys.argv[2]))\n\
        c.execute('COMMIT')\n";
    let mut child = Command::new("python3")
        .args(["-c", script])
        .arg(db)
        .arg(seconds.to_string())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(child.stdout.take().unwrap()),
        &mut line,
    )
    .unwrap();
    assert_eq!(line.trim(), "locked");
    child
}
