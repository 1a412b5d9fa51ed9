//! The PostgreSQL server of a test run, shared by turnstone-pg's tests and
//! the CLI's (`tools/tests/pg_cli.rs` includes this file by path):
//! `TURNSTONE_PG_URL`, or a private server from `.ci/postgres.sh` (initdb
//! into a temp dir, a loopback port), stopped when the value drops. A
//! server that cannot start fails the run (never a skip).

use std::process::Command;

/// A PostgreSQL server for one test run.
pub struct Server {
    pub url: String,
    /// The private server's directory (None: an outside server).
    pub dir: Option<String>,
}

fn script() -> String {
    format!("{}/../.ci/postgres.sh", env!("CARGO_MANIFEST_DIR"))
}

impl Server {
    /// `TURNSTONE_PG_URL`, or a private server started now.
    pub fn start() -> Server {
        if let Ok(url) = std::env::var("TURNSTONE_PG_URL") {
            return Server { url, dir: None };
        }
        let out = Command::new("bash")
            .arg(script())
            .arg("start")
            .output()
            .expect("run .ci/postgres.sh");
        assert!(
            out.status.success(),
            "could not start a private PostgreSQL (install Debian's postgresql, or set \
             TURNSTONE_PG_URL): {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let line = String::from_utf8(out.stdout).unwrap();
        let mut url = None;
        let mut dir = None;
        for word in line.split_whitespace() {
            if let Some(v) = word.strip_prefix("PGURL=") {
                url = Some(v.to_string());
            }
            if let Some(v) = word.strip_prefix("PGDIR_TURNSTONE=") {
                dir = Some(v.to_string());
            }
        }
        Server {
            url: url.expect("PGURL"),
            dir,
        }
    }

    /// `postgres.sh crash` or `restart` of the private server.
    #[allow(dead_code)] // not every test crate crashes its server
    pub fn control(&self, what: &str) {
        let dir = self.dir.as_ref().expect("a private server");
        let st = Command::new("bash")
            .arg(script())
            .arg(what)
            .arg(dir)
            .status()
            .unwrap();
        assert!(st.success(), "postgres.sh {what}");
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(dir) = &self.dir {
            let _ = Command::new("bash")
                .arg(script())
                .arg("stop")
                .arg(dir)
                .status();
        }
    }
}
