//! Several `turnstone serve` instances over one PostgreSQL database (issue
//! 18 §3): a client writes through one and reads or follows through
//! another; creates race to one winner; concurrent writers through both
//! never interleave; a SIGKILLed instance loses nothing it acknowledged and
//! the other takes its streams over.
//!
//! Against a real server (no mocks), started the way turnstone-pg's tests
//! start it: `TURNSTONE_PG_URL`, or a private server from `.ci/postgres.sh`
//! (initdb into a temp dir, a loopback port), stopped at the end. Each test
//! gets its own database. A server that cannot start fails the run (never a
//! skip).
//!
//! `harness = false`: this main runs the tests (a name filter as the first
//! argument is honoured, as with libtest). Run with the same binary and
//! `TURNSTONE_PG_INSTANCES_CHILD` set, it is instead the instance that the
//! kill -9 test starts in a child process and SIGKILLs.

mod common;
#[path = "../../pg/tests/support/server.rs"]
mod pgserver;

use std::collections::BTreeMap;
use std::future::Future;
use std::path::Path;
use std::pin::Pin;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use futures_util::StreamExt;
use reqwest::{Client, Method, Response};
use serde_json::{json, Value};
use turnstone_server::{Options, Server};

/// One test's database and scratch directory.
struct Ctx {
    url: String,
    tmp: tempfile::TempDir,
    /// The PostgreSQL server (crashed and restarted by one test).
    pg: Arc<pgserver::Server>,
}

type TestFuture = Pin<Box<dyn Future<Output = ()>>>;

/// A whole test, servers and all, must end within this.
const TEST_LIMIT: Duration = Duration::from_secs(90);

/// The kill -9 child: a directory to report its address in, and the URL.
const CHILD_DIR_ENV: &str = "TURNSTONE_PG_INSTANCES_CHILD";
const CHILD_URL_ENV: &str = "TURNSTONE_PG_INSTANCES_CHILD_URL";

/// Server options on the database `url`. `dir` is given a path that does
/// not exist: with `store_url` set the server must not use it (checked by
/// `no_directory_was_made`).
fn pg_options(url: &str, dir: &Path) -> Options {
    let mut o = options(dir);
    o.store_url = Some(url.to_string());
    o.long_poll_timeout = Duration::from_secs(10);
    o
}

async fn instance(cx: &Ctx, name: &str) -> Server {
    let o = pg_options(&cx.url, &cx.tmp.path().join(name));
    let s = turnstone_server::start(o)
        .await
        .unwrap_or_else(|e| panic!("instance {name} on {}: {e}", cx.url));
    let r = s.rebuild_report();
    assert_eq!(
        (r.streams, r.deleted, r.incomplete, r.released),
        (0, 0, 0, 0),
        "instance {name}: no rebuild at start on PostgreSQL"
    );
    s
}

fn no_directory_was_made(cx: &Ctx, names: &[&str]) {
    for n in names {
        let p = cx.tmp.path().join(n);
        assert!(
            !p.exists(),
            "{}: the server made its `dir` although it runs on PostgreSQL",
            p.display()
        );
    }
}

/// A server dropped with its runtime, without `shutdown()` (what a panic
/// in an embedding application does): its PostgreSQL clients are dropped
/// on threads of that runtime, which must not abort the process, and what
/// it acknowledged is there for the next instance.
async fn a_server_dropped_with_its_runtime_does_not_abort(cx: Ctx) {
    let o = pg_options(&cx.url, &cx.tmp.path().join("dropped"));
    // A panic on a runtime thread (in a destructor) is caught there and
    // would pass unnoticed: count them.
    let panics = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = panics.clone();
    let previous = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        eprintln!("panic while dropping: {info}");
    }));
    let t = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let s = turnstone_server::start(o).await.unwrap();
            let h = http(s.local_addr());
            assert_eq!(h.put("/d", "text/plain", "kept").await.status(), 201);
            // A live follower too, so that the watcher hub is running.
            let _ = h.get("/d?offset=-1").await;
            std::mem::forget(h);
            drop(s);
        });
        drop(rt);
    });
    let joined = t.join();
    let _ = std::panic::take_hook();
    std::panic::set_hook(previous);
    assert!(joined.is_ok(), "dropping the runtime panicked");
    assert_eq!(
        panics.load(std::sync::atomic::Ordering::SeqCst),
        0,
        "a thread panicked while the server was dropped"
    );
    let b = instance(&cx, "b").await;
    let hb = http(b.local_addr());
    assert_eq!(hb.read("/d").await.2, "kept");
    b.shutdown().await.unwrap();
}

/// The database crashes (`pg_ctl stop -m immediate`) under a serving
/// instance: requests are answered with a 5xx while it is down (none
/// hangs, none is a 2xx), the instance serves again once it is back, and
/// every acknowledged append is there once.
async fn the_database_crashing_under_a_server_loses_nothing_acknowledged(cx: Ctx) {
    let a = instance(&cx, "a").await;
    let ha = http(a.local_addr());
    assert_eq!(ha.put("/c", "application/json", "").await.status(), 201);
    let mut acked = Vec::new();
    for seq in 0..3u64 {
        let r = produce(
            &ha,
            "/c",
            ("p", 0, seq),
            "application/json",
            format!("{seq}"),
        )
        .await;
        assert_eq!(r.unwrap().status(), 200);
        acked.push(seq);
    }
    let pg = cx.pg.clone();
    tokio::task::spawn_blocking(move || pg.control("crash"))
        .await
        .unwrap();
    // Down: a write is refused or its outcome unknown, a read refused.
    let r = produce(&ha, "/c", ("p", 0, 3), "application/json", "3".into())
        .await
        .unwrap();
    assert!(
        r.status().is_server_error(),
        "a write while the database is down: {}",
        r.status()
    );
    let r = ha.get("/c").await;
    assert!(
        r.status().is_server_error(),
        "a read while the database is down: {}",
        r.status()
    );
    let pg = cx.pg.clone();
    tokio::task::spawn_blocking(move || pg.control("restart"))
        .await
        .unwrap();
    // Back: the same producer seq is retried until it is acknowledged (it
    // may have been applied before the crash: then it is a duplicate).
    let started = Instant::now();
    for seq in 3..6u64 {
        loop {
            let r = produce(
                &ha,
                "/c",
                ("p", 0, seq),
                "application/json",
                format!("{seq}"),
            )
            .await;
            match r.map(|r| r.status().as_u16()) {
                Ok(200 | 204) => break,
                Ok(s) if (500..600).contains(&s) => {}
                other => panic!("seq {seq} after the restart: {other:?}"),
            }
            assert!(
                started.elapsed() < Duration::from_secs(60),
                "the instance did not serve again after the database came back"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        acked.push(seq);
    }
    let (msgs, _) = read_json(&ha, "/c").await;
    let got: Vec<u64> = msgs.iter().map(|m| m.as_u64().unwrap()).collect();
    assert_eq!(got, acked, "every acknowledged append once, in order");
    a.shutdown().await.unwrap();
}

/// A client on `addr` with a request timeout (a hang fails, not blocks).
fn http(addr: std::net::SocketAddr) -> Http {
    Http {
        base: format!("http://{addr}"),
        client: Client::builder()
            .no_proxy()
            .timeout(Duration::from_secs(30))
            .build()
            .unwrap(),
        token: None,
    }
}

async fn head(h: &Http, path: &str) -> Response {
    h.req(Method::HEAD, path, &[], "").await
}

async fn close(h: &Http, path: &str) -> Response {
    h.req(Method::POST, path, &[("stream-closed", "true")], "")
        .await
}

async fn delete(h: &Http, path: &str) -> Response {
    h.req(Method::DELETE, path, &[], "").await
}

/// A POST with producer headers.
async fn produce(
    h: &Http,
    path: &str,
    (id, epoch, seq): (&str, u64, u64),
    ct: &str,
    body: String,
) -> Result<Response, reqwest::Error> {
    h.client
        .post(format!("{}{path}", h.base))
        .header("content-type", ct)
        .header("producer-id", id)
        .header("producer-epoch", epoch.to_string())
        .header("producer-seq", seq.to_string())
        .body(body)
        .send()
        .await
}

/// Every message of a JSON stream, read in chunks from the start until up
/// to date, and the final next offset.
async fn read_json(h: &Http, path: &str) -> (Vec<Value>, String) {
    let mut out = Vec::new();
    let mut offset = "-1".to_string();
    loop {
        let r = h.get(&format!("{path}?offset={offset}")).await;
        assert_eq!(r.status(), 200, "GET {path}?offset={offset} on {}", h.base);
        let next = header(&r, "stream-next-offset");
        let done = header(&r, "stream-up-to-date") == "true";
        let text = r.text().await.unwrap();
        let v: Vec<Value> = serde_json::from_str(&text)
            .unwrap_or_else(|e| panic!("GET {path} on {}: not a JSON array ({e}): {text}", h.base));
        out.extend(v);
        if done {
            return (out, next);
        }
        assert_ne!(next, offset, "GET {path} on {}: no progress", h.base);
        offset = next;
    }
}

/// A text stream's whole content and next offset, read as `read_json`.
async fn read_text(h: &Http, path: &str) -> (String, String) {
    let mut out = String::new();
    let mut offset = "-1".to_string();
    loop {
        let r = h.get(&format!("{path}?offset={offset}")).await;
        assert_eq!(r.status(), 200, "GET {path}?offset={offset} on {}", h.base);
        let next = header(&r, "stream-next-offset");
        let done = header(&r, "stream-up-to-date") == "true";
        out.push_str(&r.text().await.unwrap());
        if done {
            return (out, next);
        }
        assert_ne!(next, offset, "GET {path} on {}: no progress", h.base);
        offset = next;
    }
}

// ---- the tests

/// Instances started at the same moment on an empty database all come up
/// (the schema is created once, whoever gets there first) and share it.
async fn instances_start_at_once_on_a_fresh_database(cx: Ctx) {
    let (a, b, c) = tokio::join!(instance(&cx, "a"), instance(&cx, "b"), instance(&cx, "c"));
    let (ha, hb, hc) = (
        http(a.local_addr()),
        http(b.local_addr()),
        http(c.local_addr()),
    );
    assert_eq!(hb.put("/x", "text/plain", "from b").await.status(), 201);
    for h in [&ha, &hb, &hc] {
        assert_eq!(read_text(h, "/x").await.0, "from b", "{}", h.base);
    }
    for s in [a, b, c] {
        s.shutdown().await.unwrap();
    }
    no_directory_was_made(&cx, &["a", "b", "c"]);
}

async fn write_through_one_read_through_another(cx: Ctx) {
    let a = instance(&cx, "a").await;
    let b = instance(&cx, "b").await;
    let (ha, hb) = (http(a.local_addr()), http(b.local_addr()));

    // Created and appended to through A.
    assert_eq!(
        ha.put("/j", "application/json", r#"[{"n":0}]"#)
            .await
            .status(),
        201
    );
    assert_eq!(ha.put("/t", "text/plain", "hello").await.status(), 201);
    let r = ha.post("/j", "application/json", r#"{"n":1}"#).await;
    assert_eq!(r.status(), 204);
    let j1 = header(&r, "stream-next-offset");
    let r = ha.post("/t", "text/plain", " world").await;
    assert_eq!(r.status(), 204);
    let t1 = header(&r, "stream-next-offset");

    // B catches up on everything, at the same offsets.
    let (st, next, body) = hb.read("/t").await;
    assert_eq!(
        (st, next.as_str(), body.as_str()),
        (200, t1.as_str(), "hello world")
    );
    let (msgs, next) = read_json(&hb, "/j").await;
    assert_eq!(msgs, vec![json!({"n":0}), json!({"n":1})]);
    assert_eq!(next, j1);
    // A create through B of what A created: exists, same or other config.
    assert_eq!(hb.put("/t", "text/plain", "ignored").await.status(), 200);
    assert_eq!(hb.put("/t", "application/json", "").await.status(), 409);
    assert_eq!(hb.read("/t").await.2, "hello world");

    // Appended through B, read through A (whole and from A's last offset).
    let r = hb.post("/t", "text/plain", "!").await;
    assert_eq!(r.status(), 204);
    let t2 = header(&r, "stream-next-offset");
    assert!(t2 > t1, "{t2} > {t1}");
    let (st, next, body) = ha.read("/t").await;
    assert_eq!(
        (st, next.as_str(), body.as_str()),
        (200, t2.as_str(), "hello world!")
    );
    assert_eq!(ha.read(&format!("/t?offset={t1}")).await.2, "!");
    let r = hb
        .post("/j", "application/json", r#"[{"n":2},{"n":3}]"#)
        .await;
    assert_eq!(r.status(), 204);
    let (msgs, _) = read_json(&ha, "/j").await;
    assert_eq!(msgs.len(), 4, "{msgs:?}");
    assert_eq!(msgs[3], json!({"n":3}));

    // HEAD agrees on both.
    for path in ["/t", "/j"] {
        let (ra, rb) = (head(&ha, path).await, head(&hb, path).await);
        assert_eq!(
            (ra.status().as_u16(), rb.status().as_u16()),
            (200, 200),
            "{path}"
        );
        for hd in ["content-type", "stream-next-offset"] {
            assert_eq!(header(&ra, hd), header(&rb, hd), "HEAD {path}: {hd}");
        }
    }
    assert_eq!(header(&head(&hb, "/t").await, "stream-next-offset"), t2);

    // Stream-Seq (the writer's own sequence) is checked against what the
    // other instance accepted.
    assert_eq!(ha.put("/sq", "text/plain", "").await.status(), 201);
    let seq_post = |h: &Http, sseq: &'static str| {
        let hd = [("content-type", "text/plain"), ("stream-seq", sseq)];
        let (c, url) = (h.client.clone(), format!("{}/sq", h.base));
        async move {
            let mut rb = c.post(url).body(sseq);
            for (k, v) in hd {
                rb = rb.header(k, v);
            }
            rb.send().await.unwrap().status().as_u16()
        }
    };
    assert_eq!(seq_post(&ha, "5").await, 204);
    assert_eq!(seq_post(&hb, "3").await, 409, "a regression through B");
    assert_eq!(seq_post(&hb, "5").await, 409, "a repeat through B");
    assert_eq!(seq_post(&hb, "6").await, 204);
    assert_eq!(seq_post(&ha, "6").await, 409, "a repeat through A");
    assert_eq!(read_text(&ha, "/sq").await.0, "56");

    // Producer state is the database's, not an instance's.
    async fn p(h: &Http, epoch: u64, seq: u64, n: u64) -> Response {
        let body = format!(r#"{{"p":{n}}}"#);
        produce(h, "/j", ("w", epoch, seq), "application/json", body)
            .await
            .unwrap()
    }
    assert_eq!(p(&ha, 0, 0, 0).await.status(), 200);
    assert_eq!(p(&ha, 0, 1, 1).await.status(), 200);
    let dup = p(&hb, 0, 1, 1).await;
    assert_eq!(
        dup.status(),
        204,
        "a retry through B of seq 1 is a duplicate"
    );
    assert_eq!(header(&dup, "producer-seq"), "1");
    assert_eq!(
        read_json(&hb, "/j").await.0.len(),
        6,
        "the duplicate appended nothing"
    );
    assert_eq!(p(&hb, 0, 2, 2).await.status(), 200);
    let gap = p(&ha, 0, 5, 9).await;
    assert_eq!(gap.status(), 409, "A knows B accepted seq 2");
    assert_eq!(header(&gap, "producer-expected-seq"), "3");
    // A new epoch through B fences the old one through A.
    assert_eq!(p(&hb, 1, 0, 10).await.status(), 200);
    let stale = p(&ha, 0, 3, 9).await;
    assert_eq!(
        stale.status(),
        403,
        "epoch 0 is stale after epoch 1 through B"
    );
    assert_eq!(header(&stale, "producer-epoch"), "1");
    let (msgs, _) = read_json(&ha, "/j").await;
    let ps: Vec<&Value> = msgs.iter().filter_map(|m| m.get("p")).collect();
    assert_eq!(
        ps,
        vec![&json!(0), &json!(1), &json!(2), &json!(10)],
        "{msgs:?}"
    );
    assert_eq!(read_json(&hb, "/j").await.0, msgs);

    // Closed through B: A refuses an append and reports the closure.
    let r = close(&hb, "/t").await;
    assert_eq!(r.status(), 204);
    let t3 = header(&r, "stream-next-offset");
    let r = ha.post("/t", "text/plain", "late").await;
    assert_eq!(
        r.status(),
        409,
        "append through A to a stream closed through B"
    );
    assert_eq!(header(&r, "stream-closed"), "true");
    assert_eq!(header(&r, "stream-next-offset"), t3);
    assert_eq!(header(&head(&ha, "/t").await, "stream-closed"), "true");
    let r = ha.get("/t").await;
    assert_eq!(header(&r, "stream-closed"), "true");
    assert_eq!(r.text().await.unwrap(), "hello world!");

    // Deleted through A: gone on B; re-created through B as a new stream.
    assert_eq!(delete(&ha, "/t").await.status(), 204);
    assert_eq!(hb.get("/t").await.status(), 404);
    assert_eq!(head(&hb, "/t").await.status(), 404);
    assert_eq!(hb.post("/t", "text/plain", "x").await.status(), 404);
    assert_eq!(delete(&hb, "/t").await.status(), 404, "deleted once only");
    assert_eq!(hb.put("/t", "text/plain", "new").await.status(), 201);
    assert_eq!(read_text(&ha, "/t").await.0, "new");
    assert_eq!(read_text(&hb, "/t").await.0, "new");
    // Not closed: the closure belonged to the deleted stream.
    assert_eq!(ha.post("/t", "text/plain", "+a").await.status(), 204);
    assert_eq!(read_text(&hb, "/t").await.0, "new+a");
    // The JSON stream was untouched by all that.
    assert_eq!(read_json(&hb, "/j").await.0, msgs);

    a.shutdown().await.unwrap();
    b.shutdown().await.unwrap();
    no_directory_was_made(&cx, &["a", "b"]);
}

/// PUT /fork, a fork of /src.
async fn fork_src(h: &Http) -> Response {
    let hd = [
        ("stream-forked-from", "/src"),
        ("content-type", "text/plain"),
    ];
    h.req(Method::PUT, "/fork", &hd, "").await
}

/// A fork made through one instance of a stream made through the other;
/// the source's soft deletion and release seen across them.
async fn forks_across_instances(cx: Ctx) {
    let a = instance(&cx, "a").await;
    let b = instance(&cx, "b").await;
    let (ha, hb) = (http(a.local_addr()), http(b.local_addr()));
    assert_eq!(ha.put("/src", "text/plain", "shared").await.status(), 201);
    assert_eq!(fork_src(&hb).await.status(), 201);
    assert_eq!(
        fork_src(&ha).await.status(),
        200,
        "the fork exists for A too"
    );
    assert_eq!(read_text(&ha, "/fork").await.0, "shared");
    assert_eq!(ha.post("/fork", "text/plain", "+mine").await.status(), 204);
    assert_eq!(hb.post("/src", "text/plain", "+theirs").await.status(), 204);
    assert_eq!(read_text(&hb, "/fork").await.0, "shared+mine");
    assert_eq!(read_text(&ha, "/src").await.0, "shared+theirs");
    // The source deleted through B: gone (410) for A while the fork reads
    // through it; released when the fork is deleted through A.
    assert_eq!(delete(&hb, "/src").await.status(), 204);
    assert_eq!(ha.get("/src").await.status(), 410);
    assert_eq!(ha.put("/src", "text/plain", "").await.status(), 409);
    assert_eq!(read_text(&ha, "/fork").await.0, "shared+mine");
    assert_eq!(delete(&ha, "/fork").await.status(), 204);
    assert_eq!(hb.get("/fork").await.status(), 404);
    assert_eq!(hb.get("/src").await.status(), 404);
    assert_eq!(hb.put("/src", "text/plain", "again").await.status(), 201);
    assert_eq!(read_text(&ha, "/src").await.0, "again");
    a.shutdown().await.unwrap();
    b.shutdown().await.unwrap();
}

/// A fork made through one instance while its source is deleted through
/// the other, many times over: whichever goes first, the outcome is one
/// of the two orders. A fork that was made (201) keeps its source
/// soft-deleted (410, re-create refused with 409) until the fork is
/// deleted; a fork refused (404 or 409) left the source hard-deleted (its
/// path free again). Never a fork made with its source hard-deleted.
async fn fork_racing_the_deletion_of_its_source(cx: Ctx) {
    let a = instance(&cx, "a").await;
    let b = instance(&cx, "b").await;
    let (ha, hb) = (http(a.local_addr()), http(b.local_addr()));
    const ROUNDS: usize = 24;
    let mut made = 0;
    for i in 0..ROUNDS {
        let (src, fork) = (format!("/race/{i}/src"), format!("/race/{i}/fork"));
        assert_eq!(hb.put(&src, "text/plain", "data").await.status(), 201);
        // Both instances have the source loaded.
        assert_eq!(ha.get(&src).await.status(), 200);
        let hd = [
            ("stream-forked-from", src.as_str()),
            ("content-type", "text/plain"),
        ];
        // One side or the other starts a little later each round, so that
        // each lands across the other's steps.
        let lag = Duration::from_micros(400 * (i as u64 / 2 % 12));
        let (fork_lag, delete_lag) = if i % 2 == 0 {
            (Duration::ZERO, lag)
        } else {
            (lag, Duration::ZERO)
        };
        let (f, d) = tokio::join!(
            async {
                tokio::time::sleep(fork_lag).await;
                ha.req(Method::PUT, &fork, &hd, "").await
            },
            async {
                tokio::time::sleep(delete_lag).await;
                delete(&hb, &src).await
            }
        );
        let (f, d) = (f.status().as_u16(), d.status().as_u16());
        assert_eq!(d, 204, "round {i}: the delete");
        match f {
            201 => {
                made += 1;
                assert_eq!(read_text(&hb, &fork).await.0, "data", "round {i}");
                for h in [&ha, &hb] {
                    let g = h.get(&src).await.status().as_u16();
                    assert_eq!(
                        g, 410,
                        "round {i}: a source read through by a fork is soft-deleted"
                    );
                }
                let p = ha.put(&src, "text/plain", "").await.status().as_u16();
                assert_eq!(
                    p, 409,
                    "round {i}: re-creating a source a fork reads through"
                );
                assert_eq!(delete(&hb, &fork).await.status(), 204, "round {i}");
                let g = ha.get(&src).await.status().as_u16();
                assert_eq!(g, 404, "round {i}: released with its last fork");
            }
            404 | 409 => {
                assert_eq!(hb.get(&fork).await.status(), 404, "round {i}: no fork");
                let g = ha.get(&src).await.status().as_u16();
                assert_eq!(
                    g, 404,
                    "round {i}: the source without forks is hard-deleted"
                );
            }
            other => panic!("round {i}: the fork answered {other}"),
        }
        let p = hb.put(&src, "text/plain", "again").await.status().as_u16();
        assert_eq!(
            p, 201,
            "round {i}: the path is free once nothing reads through it"
        );
    }
    eprintln!("fork_racing_the_deletion_of_its_source: {made} of {ROUNDS} forks made");
    a.shutdown().await.unwrap();
    b.shutdown().await.unwrap();
}

/// Events of deleted sessions in the database (what collection removes,
/// less what forks read).
async fn deleted_events(url: &str) -> i64 {
    let url = url.to_string();
    tokio::task::spawn_blocking(move || {
        let mut c = postgres::Client::connect(&url, postgres::NoTls).unwrap();
        c.query_one(
            "SELECT count(*) FROM turnstone_events e
               JOIN turnstone_sessions s ON s.id = e.session WHERE s.deleted",
            &[],
        )
        .unwrap()
        .get(0)
    })
    .await
    .unwrap()
}

/// Background collection on PostgreSQL: a deleted stream's events go from
/// the database; a soft-deleted source keeps what its fork reads until the
/// fork goes too; readers never miss anything.
async fn background_collection_removes_deleted_streams_events(cx: Ctx) {
    let mut o = pg_options(&cx.url, &cx.tmp.path().join("a"));
    o.gc = Some(turnstone::session::gc::BackgroundOptions {
        interval: Duration::from_millis(100),
        ..Default::default()
    });
    let a = turnstone_server::start(o).await.unwrap();
    let h = http(a.local_addr());
    let gone_within = |what: &'static str| {
        let url = cx.url.clone();
        async move {
            let t = Instant::now();
            while deleted_events(&url).await > 0 {
                assert!(
                    t.elapsed() < Duration::from_secs(10),
                    "{what}: not collected"
                );
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    };
    assert_eq!(h.put("/plain", "text/plain", "a").await.status(), 201);
    for i in 0..5 {
        assert_eq!(
            h.post("/plain", "text/plain", &format!("{i}"))
                .await
                .status(),
            204
        );
    }
    assert_eq!(h.put("/src", "text/plain", "shared").await.status(), 201);
    assert_eq!(h.post("/src", "text/plain", "+more").await.status(), 204);
    assert_eq!(fork_src(&h).await.status(), 201);
    assert_eq!(delete(&h, "/plain").await.status(), 204);
    assert_eq!(delete(&h, "/src").await.status(), 204);
    gone_within("the deleted stream").await;
    assert_eq!(
        h.get("/src").await.status(),
        410,
        "soft-deleted: a fork reads through it"
    );
    assert_eq!(read_text(&h, "/fork").await.0, "shared+more");
    assert_eq!(delete(&h, "/fork").await.status(), 204);
    gone_within("the released source and its fork").await;
    assert_eq!(h.get("/src").await.status(), 404);
    a.shutdown().await.unwrap();
}

/// The engine session a stream path maps to.
async fn session_of_path(url: &str, path: &str) -> String {
    let (url, path) = (url.to_string(), path.to_string());
    tokio::task::spawn_blocking(move || {
        let mut c = postgres::Client::connect(&url, postgres::NoTls).unwrap();
        c.query_one(
            "SELECT session FROM turnstone_streams WHERE path = $1",
            &[&path],
        )
        .unwrap()
        .get(0)
    })
    .await
    .unwrap()
}

/// A stream deleted through the session layer by another process
/// (`turnstone delete postgres://… --session ds/…`, issue 44 §5): refused,
/// naming the lease, while an instance holds the stream; once the
/// instances stopped, the delete goes through and new instances answer 404
/// for the stream, refuse appends to it, and serve the other streams.
async fn a_session_layer_delete_is_served_as_a_delete(cx: Ctx) {
    let a = instance(&cx, "a").await;
    let ha = http(a.local_addr());
    assert_eq!(ha.put("/gone", "text/plain", "x;").await.status(), 201);
    assert_eq!(ha.post("/gone", "text/plain", "y;").await.status(), 204);
    assert_eq!(ha.put("/kept", "text/plain", "k;").await.status(), 201);
    assert_eq!(read_text(&ha, "/gone").await.0, "x;y;");
    let session = session_of_path(&cx.url, "/gone").await;
    let delete_now = || {
        let (url, session) = (cx.url.clone(), session.clone());
        tokio::task::spawn_blocking(move || {
            let log = turnstone_pg::PgEventLog::connect(&url, "cli", None).unwrap();
            let log: &dyn turnstone::backend::EventLog = &log;
            turnstone::session::delete(log, &session)
        })
    };
    let refused = delete_now().await.unwrap();
    assert!(
        matches!(&refused, Err(turnstone::Error::Fenced { detail, .. }) if detail.contains("turnstone-serve")),
        "refused while an instance holds it: {refused:?}"
    );
    assert_eq!(read_text(&ha, "/gone").await.0, "x;y;", "nothing changed");
    a.shutdown().await.unwrap();
    // The stopped instance's lease runs out (30 s, brought forward here).
    let (url, sess) = (cx.url.clone(), session.clone());
    tokio::task::spawn_blocking(move || {
        let mut c = postgres::Client::connect(&url, postgres::NoTls).unwrap();
        c.execute(
            "UPDATE turnstone_sessions SET lease_expires = now() - interval '1 second' WHERE id = $1",
            &[&sess],
        )
        .unwrap();
    })
    .await
    .unwrap();

    let deleted = delete_now().await.unwrap();
    assert!(deleted.is_ok(), "the session layer deletes it: {deleted:?}");
    let a = instance(&cx, "a2").await;
    let b = instance(&cx, "b").await;
    let (ha, hb) = (http(a.local_addr()), http(b.local_addr()));
    for (h, who) in [(&ha, "one instance"), (&hb, "another")] {
        assert_eq!(h.get("/gone").await.status(), 404, "{who}: GET");
        assert_eq!(
            h.post("/gone", "text/plain", "z;").await.status(),
            404,
            "{who}: append"
        );
        assert_eq!(
            read_text(h, "/kept").await.0,
            "k;",
            "{who}: the other stream"
        );
    }
    a.shutdown().await.unwrap();
    b.shutdown().await.unwrap();
}

/// The mapped stream paths in the database.
async fn mapped_paths(url: &str) -> Vec<String> {
    let url = url.to_string();
    tokio::task::spawn_blocking(move || {
        let mut c = postgres::Client::connect(&url, postgres::NoTls).unwrap();
        c.query("SELECT path FROM turnstone_streams ORDER BY path", &[])
            .unwrap()
            .iter()
            .map(|r| r.get(0))
            .collect()
    })
    .await
    .unwrap()
}

/// Streams whose instance stopped expire anyway: another instance that
/// never loaded them finds them by the expiry their mappings record
/// (before, they waited for their next use), and a stream without expiry
/// stays.
async fn streams_no_instance_loaded_expire(cx: Ctx) {
    let a = instance(&cx, "a").await;
    let ha = http(a.local_addr());
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    let at = turnstone_server::headers::format_rfc3339_ms(now + 1000);
    let ttl = [("content-type", "text/plain"), ("stream-ttl", "1")];
    let exp = [
        ("content-type", "text/plain"),
        ("stream-expires-at", at.as_str()),
    ];
    assert_eq!(
        ha.req(Method::PUT, "/sliding", &ttl, "x").await.status(),
        201
    );
    assert_eq!(ha.req(Method::PUT, "/fixed", &exp, "x").await.status(), 201);
    assert_eq!(ha.put("/keep", "text/plain", "x").await.status(), 201);
    // A source that expires while a fork (with a long TTL of its own)
    // reads through it: soft-deleted, still mapped, no longer due.
    assert_eq!(ha.req(Method::PUT, "/src", &exp, "s").await.status(), 201);
    let fork = [
        ("content-type", "text/plain"),
        ("stream-forked-from", "/src"),
        ("stream-ttl", "3600"),
    ];
    assert_eq!(
        ha.req(Method::PUT, "/src-fork", &fork, "").await.status(),
        201
    );
    a.shutdown().await.unwrap();
    let b = instance(&cx, "b").await;
    let t = Instant::now();
    loop {
        let paths = mapped_paths(&cx.url).await;
        let src_due = {
            let url = cx.url.clone();
            tokio::task::spawn_blocking(move || {
                let mut c = postgres::Client::connect(&url, postgres::NoTls).unwrap();
                c.query_one(
                    "SELECT expires_ms IS NOT NULL FROM turnstone_streams WHERE path = '/src'",
                    &[],
                )
                .unwrap()
                .get::<_, bool>(0)
            })
            .await
            .unwrap()
        };
        if paths == ["/keep", "/src", "/src-fork"] && !src_due {
            break;
        }
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "still mapped after 10 s: {paths:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let hb = http(b.local_addr());
    assert_eq!(hb.get("/sliding").await.status(), 404);
    assert_eq!(hb.get("/fixed").await.status(), 404);
    assert_eq!(read_text(&hb, "/keep").await.0, "x");
    assert_eq!(hb.get("/src").await.status(), 410);
    assert_eq!(read_text(&hb, "/src-fork").await.0, "s");
    b.shutdown().await.unwrap();
}

/// A stream's TTL runs out for both instances at once: both expire it
/// (concurrently), one new stream is made in its place.
async fn expiry_seen_by_both_instances(cx: Ctx) {
    let a = instance(&cx, "a").await;
    let b = instance(&cx, "b").await;
    let (ha, hb) = (http(a.local_addr()), http(b.local_addr()));
    let hd = [("content-type", "text/plain"), ("stream-ttl", "1")];
    let r = ha.req(Method::PUT, "/t", &hd, "gone soon").await;
    assert_eq!(r.status(), 201);
    assert_eq!(header(&head(&hb, "/t").await, "stream-ttl"), "1");
    assert_eq!(read_text(&hb, "/t").await.0, "gone soon");
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let (ra, rb) = tokio::join!(ha.get("/t"), hb.get("/t"));
    assert_eq!((ra.status().as_u16(), rb.status().as_u16()), (404, 404));
    let (ra, rb) = tokio::join!(
        ha.put("/t", "text/plain", "from a"),
        hb.put("/t", "text/plain", "from b")
    );
    let st = (ra.status().as_u16(), rb.status().as_u16());
    let winner = match st {
        (201, 200) => "from a",
        (200, 201) => "from b",
        _ => panic!("one re-create wins: {st:?}"),
    };
    assert_eq!(read_text(&ha, "/t").await.0, winner);
    assert_eq!(read_text(&hb, "/t").await.0, winner);
    a.shutdown().await.unwrap();
    b.shutdown().await.unwrap();
}

/// Streams expiring while requests on them and the background sweep race
/// to expire them, in one instance and across two (CI met a 500 on a GET
/// right after a HEAD had answered 404, and a 503 "written through another
/// instance" with only one instance running): every answer is 200 until
/// the stream is gone and 404 after; never a 5xx, never 200 after a 404.
async fn expiry_racing_requests_answers_only_200_or_404(cx: Ctx) {
    let a = instance(&cx, "a").await;
    let b = instance(&cx, "b").await;
    let (ha, hb) = (http(a.local_addr()), http(b.local_addr()));
    const STREAMS: usize = 24;
    // An absolute expiry (a Stream-TTL is renewed by every read).
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    let at = turnstone_server::headers::format_rfc3339_ms(now + 1500);
    for i in 0..STREAMS {
        let exp = [("content-type", "text/plain"), ("stream-expires-at", &at)];
        let r = ha.req(Method::PUT, &format!("/ttl/{i}"), &exp, "x").await;
        assert_eq!(r.status(), 201, "create /ttl/{i}");
    }
    let mut tasks = Vec::new();
    for i in 0..STREAMS {
        // Three pollers per stream: two on the instance that made it (one
        // HEAD, one GET), one GET on the other.
        for (k, h) in [&ha, &ha, &hb].into_iter().enumerate() {
            let (h, path) = (h.clone(), format!("/ttl/{i}"));
            tasks.push(tokio::spawn(async move {
                let method = if k == 0 { Method::HEAD } else { Method::GET };
                let mut gone = false;
                let started = Instant::now();
                while started.elapsed() < Duration::from_secs(4) {
                    let r = h.req(method.clone(), &path, &[], "").await;
                    let st = r.status().as_u16();
                    let body = r.text().await.unwrap_or_default();
                    match (st, gone) {
                        (200, false) => {}
                        (404, _) => gone = true,
                        _ => panic!("{method} {path}: {st} (gone before: {gone}): {body}"),
                    }
                    tokio::time::sleep(Duration::from_millis(if gone { 40 } else { 7 })).await;
                }
                assert!(gone, "{method} {path}: never expired");
            }));
        }
    }
    for t in tasks {
        t.await.unwrap();
    }
    a.shutdown().await.unwrap();
    b.shutdown().await.unwrap();
}

/// The value of the metric line `name` (no labels) in `text`.
fn metric(text: &str, name: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
}

/// On PostgreSQL the metrics count the database commits of this instance
/// and time its writes' commit waits (they used to show the embedded
/// store's counters as zeros and a histogram of instant waits).
async fn metrics_count_the_commits_on_postgresql(cx: Ctx) {
    let a = instance(&cx, "a").await;
    let b = instance(&cx, "b").await;
    let (ha, hb) = (http(a.local_addr()), http(b.local_addr()));
    assert_eq!(ha.put("/m", "text/plain", "").await.status(), 201);
    for i in 0..5 {
        let r = ha.post("/m", "text/plain", &format!("{i}")).await;
        assert_eq!(r.status(), 204);
    }
    let m = ha
        .get("/.well-known/turnstone/metrics")
        .await
        .text()
        .await
        .unwrap();
    assert!(
        !m.contains("turnstone_store_"),
        "no store-directory counters on PostgreSQL:\n{m}"
    );
    let events = metric(&m, "turnstone_pg_events_total").expect("turnstone_pg_events_total");
    let commits = metric(&m, "turnstone_pg_commits_total").expect("turnstone_pg_commits_total");
    // A create and five appends, each at least one event and one commit.
    assert!(events >= 6.0 && commits >= 1.0 && commits <= events, "{m}");
    let waits = metric(&m, "turnstone_serve_durable_wait_seconds_count").unwrap();
    assert!(waits >= 6.0, "a timed commit wait per write:\n{m}");
    // (Their sum may be 0: a commit can be done before its wait starts.)
    assert!(metric(&m, "turnstone_serve_durable_wait_seconds_sum").is_some());
    // The other instance committed nothing.
    let mb = hb
        .get("/.well-known/turnstone/metrics")
        .await
        .text()
        .await
        .unwrap();
    assert_eq!(metric(&mb, "turnstone_pg_events_total"), Some(0.0), "{mb}");
    assert_eq!(
        metric(&mb, "turnstone_serve_durable_wait_seconds_count"),
        Some(0.0)
    );
    a.shutdown().await.unwrap();
    b.shutdown().await.unwrap();
}

async fn follow_through_another_instance(cx: Ctx) {
    let a = instance(&cx, "a").await;
    let b = instance(&cx, "b").await;
    let (ha, hb) = (http(a.local_addr()), http(b.local_addr()));

    // A long poll on one instance is answered by a write through the other
    // with the data, long before its 10 s timeout.
    for (name, writer, reader) in [("B", &ha, &hb), ("A", &hb, &ha)] {
        let path = format!("/lp{name}");
        let r = writer.put(&path, "text/plain", "before").await;
        assert_eq!(r.status(), 201);
        let tail = header(&r, "stream-next-offset");
        let url = format!("{}{path}?offset={tail}&live=long-poll", reader.base);
        let c = reader.client.clone();
        let waiter = tokio::spawn(async move {
            let r = c.get(url).send().await.unwrap();
            let at = Instant::now();
            let next = header(&r, "stream-next-offset");
            (r.status().as_u16(), next, r.text().await.unwrap(), at)
        });
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert!(
            !waiter.is_finished(),
            "the long poll on {name} answered before any data"
        );
        let r = writer.post(&path, "text/plain", "wake").await;
        assert_eq!(r.status(), 204);
        let written = Instant::now();
        let tail2 = header(&r, "stream-next-offset");
        let (status, next, body, at) = tokio::time::timeout(Duration::from_secs(9), waiter)
            .await
            .unwrap_or_else(|_| panic!("the long poll on {name} never saw the append"))
            .unwrap();
        assert_eq!(
            (status, body.as_str()),
            (200, "wake"),
            "long poll on {name}"
        );
        assert_eq!(next, tail2);
        let lag = at.saturating_duration_since(written);
        assert!(
            lag < Duration::from_secs(5),
            "the long poll on {name} answered {lag:?} after the append"
        );
    }

    // An SSE reader on B sees two appends made through A, in order.
    assert_eq!(ha.put("/sse", "text/plain", "").await.status(), 201);
    let r = hb.get("/sse?offset=-1&live=sse").await;
    assert_eq!(r.status(), 200);
    assert_eq!(header(&r, "content-type"), "text/event-stream");
    let mut events = r.bytes_stream();
    let mut seen = String::new();
    sse_until(&mut events, &mut seen, "upToDate", |s| {
        s.contains("upToDate")
    })
    .await;
    assert_eq!(ha.post("/sse", "text/plain", "one").await.status(), 204);
    assert_eq!(ha.post("/sse", "text/plain", "two").await.status(), 204);
    // A text stream has no message boundaries: the appends may come in
    // one data event or two, but once each and in order.
    sse_until(&mut events, &mut seen, "both appends", |s| {
        sse_data(s).len() >= "onetwo".len()
    })
    .await;
    assert_eq!(sse_data(&seen), "onetwo", "SSE on B: {seen:?}");
    // Closed through A: the SSE response on B says so and ends.
    assert_eq!(close(&ha, "/sse").await.status(), 204);
    let ended = tokio::time::timeout(Duration::from_secs(5), async {
        while let Some(chunk) = events.next().await {
            seen.push_str(&String::from_utf8_lossy(&chunk.unwrap()));
        }
    })
    .await;
    assert!(
        ended.is_ok(),
        "SSE on B still open after the close: {seen:?}"
    );
    assert!(seen.contains("\"streamClosed\":true"), "{seen:?}");
    assert_eq!(sse_data(&seen), "onetwo", "SSE on B: {seen:?}");

    // A long poll on B is ended by a close or a deletion through A, well
    // before its timeout.
    for (what, path) in [("close", "/lc"), ("delete", "/ld")] {
        let r = ha.put(path, "text/plain", "x").await;
        assert_eq!(r.status(), 201);
        let tail = header(&r, "stream-next-offset");
        let url = format!("{}{path}?offset={tail}&live=long-poll", hb.base);
        let c = hb.client.clone();
        let waiter = tokio::spawn(async move {
            let r = c.get(url).send().await.unwrap();
            (
                r.status().as_u16(),
                header(&r, "stream-closed"),
                Instant::now(),
            )
        });
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert!(!waiter.is_finished(), "{what}: answered before");
        let st = if what == "close" {
            close(&ha, path).await.status()
        } else {
            delete(&ha, path).await.status()
        };
        assert_eq!(st, 204, "{what} through A");
        let done = Instant::now();
        let (status, closed, at) = tokio::time::timeout(Duration::from_secs(9), waiter)
            .await
            .unwrap_or_else(|_| panic!("{what} through A: the long poll on B waits on"))
            .unwrap();
        let lag = at.saturating_duration_since(done);
        assert!(
            lag < Duration::from_secs(5),
            "{what}: answered {lag:?} after"
        );
        if what == "close" {
            assert_eq!((status, closed.as_str()), (204, "true"), "{what}");
        } else {
            assert_eq!(status, 404, "{what}");
        }
    }

    a.shutdown().await.unwrap();
    b.shutdown().await.unwrap();
}

/// The data of the complete `event: data` events in `seen`, concatenated
/// (an event's `data:` lines joined by newlines, as the SSE spec says).
fn sse_data(seen: &str) -> String {
    let mut out = String::new();
    let complete = seen.rsplit_once("\n\n").map_or("", |(c, _)| c);
    for event in complete.split("\n\n") {
        let lines: Vec<&str> = event.lines().collect();
        if !lines.iter().any(|l| l.trim_end() == "event: data") {
            continue;
        }
        let data: Vec<&str> = lines
            .iter()
            .filter_map(|l| l.strip_prefix("data:"))
            .map(|d| d.strip_prefix(' ').unwrap_or(d))
            .collect();
        out.push_str(&data.join("\n"));
    }
    out
}

/// Read an SSE response into `seen` until `done(seen)` (8 s at most).
async fn sse_until<S, B>(events: &mut S, seen: &mut String, want: &str, done: impl Fn(&str) -> bool)
where
    S: futures_util::Stream<Item = Result<B, reqwest::Error>> + Unpin,
    B: AsRef<[u8]>,
{
    let found = tokio::time::timeout(Duration::from_secs(8), async {
        while !done(seen) {
            let chunk = events.next().await.expect("SSE ended").unwrap();
            seen.push_str(&String::from_utf8_lossy(chunk.as_ref()));
        }
    })
    .await;
    assert!(found.is_ok(), "SSE: no {want:?} within 8 s; saw {seen:?}");
}

async fn create_race_has_one_winner(cx: Ctx) {
    let a = instance(&cx, "a").await;
    let b = instance(&cx, "b").await;
    let hs = Arc::new([http(a.local_addr()), http(b.local_addr())]);
    const N: usize = 16;

    // Concurrent PUTs, half through each instance, all alike but their
    // initial bodies; `configs`: how many content types take part.
    async fn race(hs: &Arc<[Http; 2]>, path: &str, configs: usize) -> Vec<(u16, &'static str)> {
        let go = Arc::new(tokio::sync::Barrier::new(N));
        let mut tasks = Vec::new();
        for i in 0..N {
            let (hs, go, path) = (hs.clone(), go.clone(), path.to_string());
            tasks.push(tokio::spawn(async move {
                let ct: &'static str = if i / 2 % configs == 0 {
                    "text/plain"
                } else {
                    "application/json"
                };
                let body = if ct == "text/plain" {
                    format!("from {i}")
                } else {
                    format!(r#"[{{"from":{i}}}]"#)
                };
                go.wait().await;
                let r = hs[i % 2].put(&path, ct, &body).await;
                (r.status().as_u16(), ct)
            }));
        }
        let mut out = Vec::new();
        for t in tasks {
            out.push(t.await.unwrap());
        }
        out
    }

    for round in 0..4 {
        // One configuration: one 201, the rest 200.
        let path = format!("/race{round}");
        let got = race(&hs, &path, 1).await;
        let statuses: Vec<u16> = got.iter().map(|g| g.0).collect();
        let winners: Vec<usize> = (0..N).filter(|&i| statuses[i] == 201).collect();
        assert_eq!(winners.len(), 1, "{path}: one 201: {statuses:?}");
        assert!(
            statuses.iter().all(|&s| s == 200 || s == 201),
            "{path}: the rest 200: {statuses:?}"
        );
        // Only the winner's initial body was written; both read it alike.
        let (ta, oa) = read_text(&hs[0], &path).await;
        let (tb, ob) = read_text(&hs[1], &path).await;
        assert_eq!(ta, format!("from {}", winners[0]), "{path}");
        assert_eq!((tb, ob), (ta, oa), "{path}: A and B agree");

        // Two configurations: the losers of the other one get 409.
        let path = format!("/mixed{round}");
        let got = race(&hs, &path, 2).await;
        let winners: Vec<usize> = (0..N).filter(|&i| got[i].0 == 201).collect();
        assert_eq!(winners.len(), 1, "{path}: one 201: {got:?}");
        let w = winners[0];
        let ct = got[w].1;
        for (i, (st, c)) in got.iter().enumerate() {
            if i == w {
                continue;
            }
            let want = if *c == ct { 200 } else { 409 };
            assert_eq!(
                *st, want,
                "{path}: PUT {i} ({c}; winner {w}, {ct}): {got:?}"
            );
        }
        let (ra, rb) = (head(&hs[0], &path).await, head(&hs[1], &path).await);
        assert_eq!(header(&ra, "content-type"), ct, "{path}");
        assert_eq!(header(&rb, "content-type"), ct, "{path}");
        assert_eq!(
            header(&ra, "stream-next-offset"),
            header(&rb, "stream-next-offset")
        );
        if ct == "text/plain" {
            let (ta, _) = read_text(&hs[0], &path).await;
            assert_eq!(ta, format!("from {w}"), "{path}");
            assert_eq!(read_text(&hs[1], &path).await.0, ta);
        } else {
            let (ja, _) = read_json(&hs[0], &path).await;
            assert_eq!(ja, vec![json!({ "from": w })], "{path}");
            assert_eq!(read_json(&hs[1], &path).await.0, ja);
        }
    }
    drop(hs);
    a.shutdown().await.unwrap();
    b.shutdown().await.unwrap();
}

/// What one writer of `concurrent_writers_on_one_stream_never_interleave`
/// saw.
#[derive(Debug, Default)]
struct WriterLog {
    /// Highest seq answered 2xx (`None`: none).
    acked: Option<u64>,
    /// Answers 204 (a retry of an append that had landed).
    duplicates: u64,
    /// Non-2xx answers (retried): status (0: no answer) and count.
    retried: BTreeMap<u16, u64>,
    /// The first 4xx answer: seq, status, producer headers and body.
    first_4xx: Option<String>,
}

impl WriterLog {
    /// Count a non-2xx answer to `seq`, describing the first 4xx.
    async fn retried(&mut self, seq: u64, r: Result<Response, reqwest::Error>) {
        let r = match r {
            Ok(r) => r,
            Err(_) => {
                *self.retried.entry(0).or_default() += 1;
                return;
            }
        };
        let st = r.status().as_u16();
        *self.retried.entry(st).or_default() += 1;
        if (400..500).contains(&st) && self.first_4xx.is_none() {
            let hd: Vec<String> = [
                "producer-epoch",
                "producer-seq",
                "producer-expected-seq",
                "producer-received-seq",
                "stream-closed",
            ]
            .iter()
            .filter(|h| r.headers().contains_key(**h))
            .map(|h| format!("{h}: {}", header(&r, h)))
            .collect();
            let body = r.text().await.unwrap_or_default();
            self.first_4xx = Some(format!("seq {seq}: {st} {hd:?} {body:?}"));
        }
    }
}

async fn concurrent_writers_on_one_stream_never_interleave(cx: Ctx) {
    let a = instance(&cx, "a").await;
    let b = instance(&cx, "b").await;
    let hs = Arc::new([http(a.local_addr()), http(b.local_addr())]);
    assert_eq!(hs[0].put("/w", "application/json", "").await.status(), 201);

    const WRITERS: u64 = 8;
    let deadline = Instant::now() + Duration::from_secs(2);
    let mut tasks = Vec::new();
    for p in 0..WRITERS {
        let hs = hs.clone();
        tasks.push(tokio::spawn(async move {
            let h = &hs[(p % 2) as usize];
            let id = format!("p{p}");
            let mut log = WriterLog::default();
            let mut seq = 0u64;
            while Instant::now() < deadline {
                // Two messages per append: they must stay adjacent.
                let body = format!(r#"[{{"p":{p},"s":{seq},"k":0}},{{"p":{p},"s":{seq},"k":1}}]"#);
                let mut attempts = 0;
                loop {
                    attempts += 1;
                    let r = produce(h, "/w", (&id, 0, seq), "application/json", body.clone()).await;
                    match r.as_ref().map(|r| r.status().as_u16()) {
                        Ok(200) => break,
                        Ok(204) => {
                            log.duplicates += 1;
                            break;
                        }
                        _ => log.retried(seq, r).await,
                    }
                    assert!(
                        attempts < 200,
                        "writer {p} through {}: seq {seq} never acknowledged: {log:?}",
                        h.base
                    );
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
                log.acked = Some(seq);
                seq += 1;
            }
            log
        }));
    }
    let mut logs = Vec::new();
    for t in tasks {
        logs.push(t.await.unwrap());
    }
    println!("    writers: {logs:?}");
    for (p, log) in logs.iter().enumerate() {
        assert!(
            log.acked.is_some(),
            "writer {p} got no append through: {log:?}"
        );
    }

    let (msgs, next_a) = read_json(&hs[0], "/w").await;
    let (msgs_b, next_b) = read_json(&hs[1], "/w").await;
    assert_eq!(next_a, next_b, "A and B agree on the tail");
    assert!(msgs == msgs_b, "A and B read the same messages");
    let total: u64 = logs.iter().map(|l| l.acked.unwrap() + 1).sum();
    assert_eq!(
        msgs.len() as u64,
        2 * total,
        "every acknowledged append once, nothing else"
    );
    let mut per: BTreeMap<u64, Vec<u64>> = BTreeMap::new();
    for (i, m) in msgs.iter().enumerate() {
        let (p, s, k) = (
            m["p"].as_u64().unwrap(),
            m["s"].as_u64().unwrap(),
            m["k"].as_u64().unwrap(),
        );
        if k == 0 {
            assert_eq!(
                msgs.get(i + 1),
                Some(&json!({"p":p,"s":s,"k":1})),
                "message {i}: an append's two messages are adjacent"
            );
            per.entry(p).or_default().push(s);
        } else {
            assert!(
                i > 0 && msgs[i - 1] == json!({"p":p,"s":s,"k":0}),
                "message {i}"
            );
        }
    }
    for (p, log) in logs.iter().enumerate() {
        let want: Vec<u64> = (0..=log.acked.unwrap()).collect();
        assert_eq!(
            per.get(&(p as u64)),
            Some(&want),
            "writer {p}: every seq once, in order"
        );
    }
    // A correct producer request is answered 200 or 204, or fails for
    // want of the server (5xx, no answer); a 4xx means producer state was
    // lost or misread (checked after the stream's contents, so that a
    // failure here says they were right).
    for (p, log) in logs.iter().enumerate() {
        assert!(
            log.retried.keys().all(|&s| s == 0 || s >= 500),
            "writer {p}: a 4xx to a correct producer request (the stream's contents \
             were right): {log:?}"
        );
    }
    drop(hs);
    a.shutdown().await.unwrap();
    b.shutdown().await.unwrap();
}

/// Appends without producer headers through both instances. A 503 answer
/// says "nothing of this request was applied" (and BACKENDS.md: a request
/// that lost a race wrote nothing), so a client may send the same body
/// again: every acknowledged body must then be in the stream exactly once.
async fn plain_appends_retried_after_503_land_once(cx: Ctx) {
    let a = instance(&cx, "a").await;
    let b = instance(&cx, "b").await;
    let hs = Arc::new([http(a.local_addr()), http(b.local_addr())]);
    assert_eq!(
        hs[0].put("/plain", "application/json", "").await.status(),
        201
    );

    const WRITERS: u64 = 8;
    let deadline = Instant::now() + Duration::from_secs(2);
    let mut tasks = Vec::new();
    for t in 0..WRITERS {
        let hs = hs.clone();
        tasks.push(tokio::spawn(async move {
            let h = &hs[(t % 2) as usize];
            let (mut sent, mut unavailable) = (0u64, 0u64);
            while Instant::now() < deadline {
                let body = format!(r#"{{"t":{t},"i":{sent}}}"#);
                loop {
                    let r = h.post("/plain", "application/json", &body).await;
                    match r.status().as_u16() {
                        204 => break,
                        503 => unavailable += 1,
                        st => panic!("writer {t}: {st} to an append: {:?}", r.text().await),
                    }
                    assert!(unavailable < 500, "writer {t}: 503s without end");
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
                sent += 1;
            }
            (sent, unavailable)
        }));
    }
    let mut done = Vec::new();
    for t in tasks {
        done.push(t.await.unwrap());
    }
    println!("    writers (appended, 503s retried): {done:?}");
    let (msgs, _) = read_json(&hs[1], "/plain").await;
    let mut per: BTreeMap<u64, Vec<u64>> = BTreeMap::new();
    for m in &msgs {
        per.entry(m["t"].as_u64().unwrap())
            .or_default()
            .push(m["i"].as_u64().unwrap());
    }
    for (t, (sent, unavailable)) in done.iter().enumerate() {
        assert_eq!(
            per.get(&(t as u64)).cloned().unwrap_or_default(),
            (0..*sent).collect::<Vec<_>>(),
            "writer {t}: each body once, in order ({unavailable} answers 503 \
             \"nothing of this request was applied\" were retried)"
        );
    }
    drop(hs);
    a.shutdown().await.unwrap();
    b.shutdown().await.unwrap();
}

/// The child process of `kill_9_of_an_instance_loses_nothing_acknowledged`:
/// an instance on the database, its address written to `dir/addr`, until
/// it is killed.
fn kill9_child(dir: &str) {
    let url = std::env::var(CHILD_URL_ENV).expect("the database URL");
    let dir = Path::new(dir);
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let o = pg_options(&url, &dir.join("unused"));
        let server = turnstone_server::start(o)
            .await
            .expect("child instance starts");
        let tmp = dir.join("addr.tmp");
        std::fs::write(&tmp, server.local_addr().to_string()).unwrap();
        std::fs::rename(&tmp, dir.join("addr")).unwrap();
        tokio::time::sleep(Duration::from_secs(120)).await;
    });
}

/// Writer `w`'s append `seq` to `/k<w>` as producer `p<w>`, epoch 0.
async fn append_k(h: &Http, w: u64, seq: u64) -> Result<Response, reqwest::Error> {
    let (path, id) = (format!("/k{w}"), format!("p{w}"));
    let body = format!(r#"{{"w":{w},"s":{seq}}}"#);
    produce(h, &path, (&id, 0, seq), "application/json", body).await
}

/// The child instance, SIGKILLed if the test fails before it does.
struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Start an instance on the test's database in a child process (this
/// binary, `kill9_child`); its address once it listens.
async fn spawn_child(cx: &Ctx) -> (KillOnDrop, std::net::SocketAddr) {
    let dir = cx.tmp.path();
    let log = std::fs::File::create(dir.join("child.log")).unwrap();
    let mut child = KillOnDrop(
        Command::new(std::env::current_exe().unwrap())
            .env(CHILD_DIR_ENV, dir)
            .env(CHILD_URL_ENV, &cx.url)
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap(),
    );
    let started = Instant::now();
    loop {
        if let Ok(a) = std::fs::read_to_string(dir.join("addr")) {
            return (child, a.trim().parse().unwrap());
        }
        if started.elapsed() > Duration::from_secs(20) || child.0.try_wait().unwrap().is_some() {
            drop(child);
            panic!(
                "the child instance did not start: {}",
                std::fs::read_to_string(dir.join("child.log")).unwrap_or_default()
            );
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Readers on both instances while appends alternate between them (each
/// one a takeover: the instance acquires the session's lease again): no
/// read may show a group before it commits. A reader once asked for the
/// stream's durable length before locking its state, found no writer (so
/// "nothing queued here", everything durable), and by the time it locked,
/// an append had acquired one and queued a group: the reader showed it and
/// asked the database for events it did not yet hold (a 500, seen in CI by
/// the kill -9 test's follower). Catch-up reads in tight loops make the
/// window as wide as a test can.
async fn readers_never_see_a_takeover_before_it_commits(cx: Ctx) {
    let a = instance(&cx, "a").await;
    let b = instance(&cx, "b").await;
    let (ha, hb) = (
        Arc::new(http(a.local_addr())),
        Arc::new(http(b.local_addr())),
    );
    assert_eq!(ha.put("/t", "application/json", "").await.status(), 201);
    const APPENDS: u64 = 300;
    let done = Arc::new(AtomicBool::new(false));
    let mut readers = Vec::new();
    for (i, h) in [&ha, &hb, &ha, &hb].into_iter().enumerate() {
        let (h, done) = (h.clone(), done.clone());
        readers.push(tokio::spawn(async move {
            let mut got: Vec<Value> = Vec::new();
            let mut offset = "-1".to_string();
            let mut reads = 0u64;
            loop {
                let finished = done.load(Ordering::SeqCst);
                let r = h.get(&format!("/t?offset={offset}")).await;
                let st = r.status().as_u16();
                if st != 200 {
                    let body = r.text().await.unwrap_or_default();
                    panic!(
                        "reader {i} on {}: {st} at offset {offset}: {body:?}",
                        h.base
                    );
                }
                offset = header(&r, "stream-next-offset");
                got.extend(serde_json::from_str::<Vec<Value>>(&r.text().await.unwrap()).unwrap());
                reads += 1;
                if finished && got.len() as u64 == APPENDS {
                    return (got, reads);
                }
                assert!(
                    got.len() as u64 <= APPENDS,
                    "reader {i}: {} messages",
                    got.len()
                );
            }
        }));
    }
    for n in 0..APPENDS {
        let h = if n % 2 == 0 { &ha } else { &hb };
        let r = h
            .post("/t", "application/json", &format!(r#"{{"n":{n}}}"#))
            .await;
        assert_eq!(r.status().as_u16(), 204, "append {n} through {}", h.base);
    }
    done.store(true, Ordering::SeqCst);
    let want: Vec<Value> = (0..APPENDS).map(|n| json!({ "n": n })).collect();
    let mut reads = Vec::new();
    for r in readers {
        let (got, n) = tokio::time::timeout(Duration::from_secs(30), r)
            .await
            .expect("a reader did not reach the end")
            .unwrap();
        assert!(got == want, "a reader saw every append once, in order");
        reads.push(n);
    }
    println!("    {APPENDS} appends alternating between two instances; catch-up reads per reader: {reads:?}");
    a.shutdown().await.unwrap();
    b.shutdown().await.unwrap();
}

async fn kill_9_of_an_instance_loses_nothing_acknowledged(cx: Ctx) {
    let (mut child, addr) = spawn_child(&cx).await;
    let child = &mut child.0;
    let ha = Arc::new(http(addr));
    let b = instance(&cx, "b").await;
    let hb = http(b.local_addr());

    const WRITERS: u64 = 6;
    for w in 0..WRITERS {
        let r = ha.put(&format!("/k{w}"), "application/json", "").await;
        assert_eq!(r.status(), 201);
    }
    // A follower of /k0 on B throughout, by long polls: told how many
    // messages the stream ends with, it stops once it has them.
    let (target_tx, mut target) = tokio::sync::watch::channel(u64::MAX);
    let follower = {
        let (c, base) = (hb.client.clone(), hb.base.clone());
        tokio::spawn(async move {
            let mut got: Vec<Value> = Vec::new();
            let mut offset = "-1".to_string();
            while (got.len() as u64) < *target.borrow_and_update() {
                let poll = c
                    .get(format!("{base}/k0?offset={offset}&live=long-poll"))
                    .send();
                let r = tokio::select! {
                    r = poll => r.expect("follower on B: no answer"),
                    _ = target.changed() => continue,
                };
                let st = r.status().as_u16();
                if st != 200 && st != 204 {
                    let body = r.text().await.unwrap_or_default();
                    panic!("follower on B: {st} at offset {offset}: {body:?}");
                }
                offset = header(&r, "stream-next-offset");
                if st == 200 {
                    let text = r.text().await.unwrap();
                    got.extend(serde_json::from_str::<Vec<Value>>(&text).unwrap());
                }
            }
            got
        })
    };
    // Writers append through A with producer headers until A dies; each
    // returns the highest seq answered 200, the seq then in flight, and
    // any other answer A gave.
    let killed = Arc::new(AtomicBool::new(false));
    let mut tasks = Vec::new();
    for w in 0..WRITERS {
        let (ha, killed) = (ha.clone(), killed.clone());
        tasks.push(tokio::spawn(async move {
            let mut acked: Option<u64> = None;
            let mut odd = Vec::new();
            let mut seq = 0u64;
            loop {
                match append_k(&ha, w, seq).await {
                    Ok(r) if r.status() == 200 => {
                        acked = Some(seq);
                        seq += 1;
                    }
                    Ok(r) => {
                        // Retried with the same seq while A lives.
                        odd.push(r.status().as_u16());
                        tokio::time::sleep(Duration::from_millis(10)).await;
                    }
                    Err(_) if killed.load(Ordering::SeqCst) => break,
                    Err(e) => {
                        odd.push(0);
                        assert!(odd.len() < 100, "writer {w}: A unreachable: {e}");
                        tokio::time::sleep(Duration::from_millis(10)).await;
                    }
                }
            }
            (acked, seq, odd)
        }));
    }
    tokio::time::sleep(Duration::from_millis(1000)).await;
    killed.store(true, Ordering::SeqCst);
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    let mut writers = Vec::new();
    for t in tasks {
        writers.push(t.await.unwrap());
    }
    println!("    through A before the kill (acked, in flight, other answers): {writers:?}");
    for (w, (acked, _, odd)) in writers.iter().enumerate() {
        assert!(acked.is_some(), "writer {w} got no ack from A");
        assert!(odd.is_empty(), "writer {w}: A's only writer got {odd:?}");
    }

    let seqs_of = |msgs: &[Value], w: u64| -> Vec<u64> {
        msgs.iter()
            .map(|m| {
                assert_eq!(m["w"], json!(w), "{m}");
                m["s"].as_u64().unwrap()
            })
            .collect()
    };
    let takeover = Instant::now();
    for (w, (acked, in_flight, _)) in writers.iter().enumerate() {
        let w = w as u64;
        let acked = acked.unwrap();
        // Through B: a prefix holding every acknowledged append, at most
        // the one in flight past it.
        let (msgs, _) = read_json(&hb, &format!("/k{w}")).await;
        let seqs = seqs_of(&msgs, w);
        let n = seqs.len() as u64;
        assert_eq!(
            seqs,
            (0..n).collect::<Vec<_>>(),
            "writer {w}: no holes or repeats"
        );
        assert!(
            n > acked,
            "writer {w}: acked {acked} but B reads {n} appends"
        );
        assert!(
            n <= in_flight + 1,
            "writer {w}: {n} appends, only {in_flight} sent"
        );
        // The append in flight at the kill, retried through B: a duplicate
        // if it had landed, else accepted; never lost, never twice.
        let r = append_k(&hb, w, *in_flight).await.unwrap();
        let st = r.status().as_u16();
        if n == in_flight + 1 {
            assert_eq!(st, 204, "writer {w}: seq {in_flight} had landed");
        } else {
            assert!(
                st == 200 || st == 204,
                "writer {w}: retry of seq {in_flight}: {st}"
            );
        }
        // And the writer carries on through B.
        for seq in in_flight + 1..in_flight + 11 {
            let st = append_k(&hb, w, seq).await.unwrap().status().as_u16();
            assert_eq!(st, 200, "writer {w}: seq {seq} through B");
        }
        let (msgs, _) = read_json(&hb, &format!("/k{w}")).await;
        assert_eq!(
            seqs_of(&msgs, w),
            (0..in_flight + 11).collect::<Vec<_>>(),
            "writer {w}: every seq exactly once after the takeover"
        );
    }
    // The follower saw A's appends, then B's, each once, in order.
    let (k0, _) = read_json(&hb, "/k0").await;
    target_tx.send(k0.len() as u64).unwrap();
    let followed = tokio::time::timeout(Duration::from_secs(10), follower)
        .await
        .expect("the follower on B did not reach the end")
        .unwrap();
    assert!(followed == k0, "the follower on B saw what B reads");
    println!(
        "    through B after the kill ({WRITERS} streams: reads, retries, 10 appends each): {:?}",
        takeover.elapsed()
    );
    drop(ha);
    b.shutdown().await.unwrap();
}

/// Producers append to one stream through both instances; the child one
/// is SIGKILLed mid-write and its producers go on through the other,
/// retrying the append they had in flight. Every producer's appends end
/// in the stream exactly once, in order: the dead instance's last commit
/// and the survivor's fenced takeover never both land, nor neither.
async fn kill_9_while_both_instances_write_one_stream(cx: Ctx) {
    let (mut child, addr) = spawn_child(&cx).await;
    let b = instance(&cx, "b").await;
    let hs = Arc::new([http(addr), http(b.local_addr())]);
    assert_eq!(
        hs[1].put("/one", "application/json", "").await.status(),
        201
    );

    const WRITERS: u64 = 6;
    // After the kill, each producer makes this many more appends.
    const AFTER: u64 = 5;
    let killed = Arc::new(AtomicBool::new(false));
    let mut tasks = Vec::new();
    for p in 0..WRITERS {
        let (hs, killed) = (hs.clone(), killed.clone());
        tasks.push(tokio::spawn(async move {
            // Even producers start on the child instance (0), odd on B.
            let mut via = (p % 2) as usize;
            let id = format!("p{p}");
            let mut seq = 0u64;
            let mut log = WriterLog::default();
            let mut stop_at: Option<u64> = None;
            let mut attempts = 0;
            while stop_at.is_none_or(|s| seq < s) {
                if stop_at.is_none() && killed.load(Ordering::SeqCst) {
                    stop_at = Some(seq + AFTER);
                }
                let body = format!(r#"{{"p":{p},"s":{seq}}}"#);
                let r = produce(&hs[via], "/one", (&id, 0, seq), "application/json", body).await;
                match r.as_ref().map(|r| r.status().as_u16()) {
                    Ok(st @ (200 | 204)) => {
                        log.duplicates += u64::from(st == 204);
                        log.acked = Some(seq);
                        seq += 1;
                        attempts = 0;
                        continue;
                    }
                    Err(_) if via == 0 && killed.load(Ordering::SeqCst) => {
                        // The child is gone: on through B, same seq.
                        via = 1;
                        continue;
                    }
                    _ => log.retried(seq, r).await,
                }
                attempts += 1;
                assert!(
                    attempts < 200,
                    "producer {p}: seq {seq} never acknowledged: {log:?}"
                );
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            (via, log)
        }));
    }
    tokio::time::sleep(Duration::from_millis(1000)).await;
    killed.store(true, Ordering::SeqCst);
    let _ = child.0.kill(); // SIGKILL
    let _ = child.0.wait();
    let mut logs = Vec::new();
    for t in tasks {
        logs.push(t.await.unwrap());
    }
    println!("    producers (ending through, log): {logs:?}");
    for (p, (via, _)) in logs.iter().enumerate() {
        assert_eq!(*via, 1, "producer {p} ends on B");
    }
    let (msgs, _) = read_json(&hs[1], "/one").await;
    let mut per: BTreeMap<u64, Vec<u64>> = BTreeMap::new();
    for m in &msgs {
        per.entry(m["p"].as_u64().unwrap())
            .or_default()
            .push(m["s"].as_u64().unwrap());
    }
    for (p, (_, log)) in logs.iter().enumerate() {
        let last = log.acked.expect("acknowledged appends");
        assert!(last >= AFTER, "producer {p}: {log:?}");
        assert_eq!(
            per.get(&(p as u64)),
            Some(&(0..=last).collect::<Vec<_>>()),
            "producer {p}: every seq exactly once, in order"
        );
    }
    assert_eq!(per.len() as u64, WRITERS, "nobody else wrote");
    // As in concurrent_writers_on_one_stream_never_interleave: a 4xx to a
    // correct producer request is a bug, checked after the contents.
    for (p, (_, log)) in logs.iter().enumerate() {
        assert!(
            log.retried.keys().all(|&s| s == 0 || s >= 500),
            "producer {p}: a 4xx to a correct producer request (the stream's contents \
             were right): {log:?}"
        );
    }
    drop(hs);
    b.shutdown().await.unwrap();
}

fn main() {
    if let Ok(dir) = std::env::var(CHILD_DIR_ENV) {
        kill9_child(&dir);
        return;
    }
    type Test = fn(Ctx) -> TestFuture;
    let tests: Vec<(&str, Test, bool)> = vec![
        (
            "instances_start_at_once_on_a_fresh_database",
            |cx| Box::pin(instances_start_at_once_on_a_fresh_database(cx)),
            false,
        ),
        (
            "write_through_one_read_through_another",
            |cx| Box::pin(write_through_one_read_through_another(cx)),
            false,
        ),
        (
            "forks_across_instances",
            |cx| Box::pin(forks_across_instances(cx)),
            false,
        ),
        (
            "fork_racing_the_deletion_of_its_source",
            |cx| Box::pin(fork_racing_the_deletion_of_its_source(cx)),
            false,
        ),
        (
            "background_collection_removes_deleted_streams_events",
            |cx| Box::pin(background_collection_removes_deleted_streams_events(cx)),
            false,
        ),
        (
            "a_session_layer_delete_is_served_as_a_delete",
            |cx| Box::pin(a_session_layer_delete_is_served_as_a_delete(cx)),
            false,
        ),
        (
            "streams_no_instance_loaded_expire",
            |cx| Box::pin(streams_no_instance_loaded_expire(cx)),
            false,
        ),
        (
            "expiry_seen_by_both_instances",
            |cx| Box::pin(expiry_seen_by_both_instances(cx)),
            false,
        ),
        (
            "expiry_racing_requests_answers_only_200_or_404",
            |cx| Box::pin(expiry_racing_requests_answers_only_200_or_404(cx)),
            false,
        ),
        (
            "metrics_count_the_commits_on_postgresql",
            |cx| Box::pin(metrics_count_the_commits_on_postgresql(cx)),
            false,
        ),
        (
            "follow_through_another_instance",
            |cx| Box::pin(follow_through_another_instance(cx)),
            false,
        ),
        (
            "readers_never_see_a_takeover_before_it_commits",
            |cx| Box::pin(readers_never_see_a_takeover_before_it_commits(cx)),
            false,
        ),
        (
            "create_race_has_one_winner",
            |cx| Box::pin(create_race_has_one_winner(cx)),
            false,
        ),
        (
            "concurrent_writers_on_one_stream_never_interleave",
            |cx| Box::pin(concurrent_writers_on_one_stream_never_interleave(cx)),
            false,
        ),
        (
            "plain_appends_retried_after_503_land_once",
            |cx| Box::pin(plain_appends_retried_after_503_land_once(cx)),
            false,
        ),
        (
            "kill_9_while_both_instances_write_one_stream",
            |cx| Box::pin(kill_9_while_both_instances_write_one_stream(cx)),
            false,
        ),
        (
            "a_server_dropped_with_its_runtime_does_not_abort",
            |cx| Box::pin(a_server_dropped_with_its_runtime_does_not_abort(cx)),
            false,
        ),
        (
            "the_database_crashing_under_a_server_loses_nothing_acknowledged",
            |cx| Box::pin(the_database_crashing_under_a_server_loses_nothing_acknowledged(cx)),
            true,
        ),
        (
            "kill_9_of_an_instance_loses_nothing_acknowledged",
            |cx| Box::pin(kill_9_of_an_instance_loses_nothing_acknowledged(cx)),
            false,
        ),
    ];
    pgserver::run_tests("turnstone_serve_test", &tests, |f, url, pg| {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(4)
            .enable_all()
            .build()
            .unwrap();
        let cx = Ctx {
            url,
            tmp: tempfile::tempdir().unwrap(),
            pg: pg.clone(),
        };
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            rt.block_on(async {
                tokio::time::timeout(TEST_LIMIT, f(cx))
                    .await
                    .unwrap_or_else(|_| panic!("the test took over {TEST_LIMIT:?}"))
            })
        }));
        match r {
            Ok(()) => rt.shutdown_timeout(Duration::from_secs(5)),
            Err(panic) => {
                // A failed test's servers were not shut down; dropping
                // them with the runtime drops their synchronous PostgreSQL
                // clients on its threads, which panics there and aborts
                // the run (leaving the private server running). Leaked
                // instead: their database is dropped WITH (FORCE) next.
                std::mem::forget(rt);
                std::panic::resume_unwind(panic);
            }
        }
    });
}
