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

#[path = "../common/mod.rs"]
mod common;
mod expiry;
mod follow;
mod kill9;
mod lifecycle;
#[path = "../../../pg/tests/support/server.rs"]
mod pgserver;
mod writers;

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

fn main() {
    if let Ok(dir) = std::env::var(CHILD_DIR_ENV) {
        kill9::kill9_child(&dir);
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
            |cx| Box::pin(lifecycle::forks_across_instances(cx)),
            false,
        ),
        (
            "fork_racing_the_deletion_of_its_source",
            |cx| Box::pin(lifecycle::fork_racing_the_deletion_of_its_source(cx)),
            false,
        ),
        (
            "background_collection_removes_deleted_streams_events",
            |cx| Box::pin(lifecycle::background_collection_removes_deleted_streams_events(cx)),
            false,
        ),
        (
            "a_session_layer_delete_is_served_as_a_delete",
            |cx| Box::pin(lifecycle::a_session_layer_delete_is_served_as_a_delete(cx)),
            false,
        ),
        (
            "streams_no_instance_loaded_expire",
            |cx| Box::pin(expiry::streams_no_instance_loaded_expire(cx)),
            false,
        ),
        (
            "expiry_seen_by_both_instances",
            |cx| Box::pin(expiry::expiry_seen_by_both_instances(cx)),
            false,
        ),
        (
            "expiry_racing_requests_answers_only_200_or_404",
            |cx| Box::pin(expiry::expiry_racing_requests_answers_only_200_or_404(cx)),
            false,
        ),
        (
            "metrics_count_the_commits_on_postgresql",
            |cx| Box::pin(metrics_count_the_commits_on_postgresql(cx)),
            false,
        ),
        (
            "follow_through_another_instance",
            |cx| Box::pin(follow::follow_through_another_instance(cx)),
            false,
        ),
        (
            "readers_never_see_a_takeover_before_it_commits",
            |cx| Box::pin(kill9::readers_never_see_a_takeover_before_it_commits(cx)),
            false,
        ),
        (
            "create_race_has_one_winner",
            |cx| Box::pin(writers::create_race_has_one_winner(cx)),
            false,
        ),
        (
            "concurrent_writers_on_one_stream_never_interleave",
            |cx| {
                Box::pin(writers::concurrent_writers_on_one_stream_never_interleave(
                    cx,
                ))
            },
            false,
        ),
        (
            "plain_appends_retried_after_503_land_once",
            |cx| Box::pin(writers::plain_appends_retried_after_503_land_once(cx)),
            false,
        ),
        (
            "kill_9_while_both_instances_write_one_stream",
            |cx| Box::pin(kill9::kill_9_while_both_instances_write_one_stream(cx)),
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
            |cx| Box::pin(kill9::kill_9_of_an_instance_loses_nothing_acknowledged(cx)),
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
