//! kill -9 of an instance: nothing acknowledged is lost, the other instance
//! takes the streams over, and readers never see a takeover before it
//! commits.

use super::writers::WriterLog;
use super::*;

/// The child process of `kill_9_of_an_instance_loses_nothing_acknowledged`:
/// an instance on the database, its address written to `dir/addr`, until
/// it is killed.
pub(super) fn kill9_child(dir: &str) {
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
pub(super) async fn append_k(h: &Http, w: u64, seq: u64) -> Result<Response, reqwest::Error> {
    let (path, id) = (format!("/k{w}"), format!("p{w}"));
    let body = format!(r#"{{"w":{w},"s":{seq}}}"#);
    produce(h, &path, (&id, 0, seq), "application/json", body).await
}

/// The child instance, SIGKILLed if the test fails before it does.
pub(super) struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Start an instance on the test's database in a child process (this
/// binary, `kill9_child`); its address once it listens.
pub(super) async fn spawn_child(cx: &Ctx) -> (KillOnDrop, std::net::SocketAddr) {
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
pub(super) async fn readers_never_see_a_takeover_before_it_commits(cx: Ctx) {
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

pub(super) async fn kill_9_of_an_instance_loses_nothing_acknowledged(cx: Ctx) {
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
pub(super) async fn kill_9_while_both_instances_write_one_stream(cx: Ctx) {
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
