//! Writers through several instances: creates race to one winner,
//! concurrent writers on one stream never interleave, appends retried
//! after a 503 land once.

use super::*;

pub(super) async fn create_race_has_one_winner(cx: Ctx) {
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
pub(super) struct WriterLog {
    /// Highest seq answered 2xx (`None`: none).
    pub(super) acked: Option<u64>,
    /// Answers 204 (a retry of an append that had landed).
    pub(super) duplicates: u64,
    /// Non-2xx answers (retried): status (0: no answer) and count.
    pub(super) retried: BTreeMap<u16, u64>,
    /// The first 4xx answer: seq, status, producer headers and body.
    pub(super) first_4xx: Option<String>,
}

impl WriterLog {
    /// Count a non-2xx answer to `seq`, describing the first 4xx.
    pub(super) async fn retried(&mut self, seq: u64, r: Result<Response, reqwest::Error>) {
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

pub(super) async fn concurrent_writers_on_one_stream_never_interleave(cx: Ctx) {
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
pub(super) async fn plain_appends_retried_after_503_land_once(cx: Ctx) {
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
