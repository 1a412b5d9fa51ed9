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

/// The `main` of a `harness = false` test binary: runs each test whose
/// name holds the first non-flag argument (libtest's filter; `--list`
/// lists them) in its own database on one server, dropped afterwards, and
/// exits 1 if any failed. A test that crashes the server (`needs_private`)
/// is skipped on an outside one. `run` calls a test with its database's
/// URL and the server.
pub fn run_tests<F>(
    prefix: &str,
    tests: &[(&str, F, bool)],
    run: impl Fn(&F, String, &std::sync::Arc<Server>),
) {
    let filter = std::env::args()
        .skip(1)
        .find(|a| !a.starts_with('-'))
        .unwrap_or_default();
    if std::env::args().any(|a| a == "--list") {
        for (name, ..) in tests {
            println!("{name}: test");
        }
        return;
    }
    let server = std::sync::Arc::new(Server::start());
    let mut admin = postgres::Client::connect(&server.url, postgres::NoTls)
        .expect("connect to the test server");
    let (mut passed, mut failed, mut skipped) = (0, Vec::new(), 0);
    for (i, (name, f, needs_private)) in tests.iter().enumerate() {
        if !name.contains(&filter) {
            continue;
        }
        if *needs_private && server.dir.is_none() {
            println!("test {name} ... skipped (crashes the server: needs the private one)");
            skipped += 1;
            continue;
        }
        let db = format!("{prefix}_{}_{i}", std::process::id());
        admin
            .batch_execute(&format!("CREATE DATABASE {db}"))
            .expect("create a test database");
        let url = format!("{}/{db}", server.url.rsplit_once('/').unwrap().0);
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run(f, url, &server)));
        // A test that crashed the server leaves this connection broken
        // (and `is_closed` may not know it yet): connect again.
        if admin.is_closed() || *needs_private {
            admin = postgres::Client::connect(&server.url, postgres::NoTls).unwrap();
        }
        let _ = admin.batch_execute(&format!("DROP DATABASE IF EXISTS {db} WITH (FORCE)"));
        match r {
            Ok(()) => {
                println!("test {name} ... ok");
                passed += 1;
            }
            Err(_) => {
                println!("test {name} ... FAILED");
                failed.push(*name);
            }
        }
    }
    drop(admin);
    println!(
        "\ntest result: {}. {passed} passed; {} failed; {skipped} skipped",
        if failed.is_empty() { "ok" } else { "FAILED" },
        failed.len()
    );
    drop(server);
    if !failed.is_empty() {
        std::process::exit(1);
    }
}
