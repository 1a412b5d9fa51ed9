//! At the file-descriptor limit the accept loop backs off instead of
//! spinning, keeps serving the connections it has, says so in its log, and
//! accepts again once descriptors free up (issue 19, item 3). The server runs
//! in a child process (this test binary re-run) under `ulimit -n`, so the
//! limit binds only it.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::*;

const CHILD_ENV: &str = "TURNSTONE_SERVE_FD_CHILD_DIR";
const FD_LIMIT: u32 = 64;

/// CPU time (user + system) of a process, in clock ticks.
fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    // Fields after the command name (which may hold spaces) start at ')'.
    let rest = &stat[stat.rfind(')').unwrap() + 2..];
    let f: Vec<&str> = rest.split(' ').collect();
    // utime and stime are fields 14 and 15 of the line, 12 and 13 here.
    f[11].parse::<u64>().unwrap() + f[12].parse::<u64>().unwrap()
}

fn served(stream: &mut TcpStream) -> bool {
    stream
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    if stream
        .write_all(b"GET /nothing HTTP/1.1\r\nhost: a\r\n\r\n")
        .is_err()
    {
        return false;
    }
    // The whole answer (its body ends the 404), so that the connection can
    // be used again.
    let mut got = Vec::new();
    let mut buf = [0u8; 1024];
    while !got.ends_with(b"stream not found\n") {
        match stream.read(&mut buf) {
            Ok(0) | Err(_) => return false,
            Ok(n) => got.extend_from_slice(&buf[..n]),
        }
    }
    got.starts_with(b"HTTP/1.1 404")
}

#[test]
fn accept_backs_off_at_the_fd_limit() {
    if let Ok(dir) = std::env::var(CHILD_ENV) {
        return child(&dir);
    }
    let dir = tempfile::tempdir().unwrap();
    let exe = std::env::current_exe().unwrap();
    let mut child = Command::new("bash")
        .arg("-c")
        .arg(format!(
            "ulimit -n {FD_LIMIT} && exec \"$0\" --exact accept_backs_off_at_the_fd_limit --test-threads=1 --nocapture"
        ))
        .arg(&exe)
        .env(CHILD_ENV, dir.path())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let started = Instant::now();
    let addr = loop {
        if let Ok(a) = std::fs::read_to_string(dir.path().join("addr")) {
            break a;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "child server did not start"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut first = TcpStream::connect(&addr).unwrap();
    assert!(served(&mut first), "served before the limit");
    // Flood: more connections than the child has descriptors.
    let flood: Vec<TcpStream> = (0..2 * FD_LIMIT)
        .filter_map(|_| TcpStream::connect(&addr).ok())
        .collect();
    assert!(flood.len() as u32 > FD_LIMIT, "{}", flood.len());
    // While the backlog holds connections it cannot accept, the server must
    // not spin: a spinning accept loop burns a whole core (about 100 ticks a
    // second); backing off costs next to nothing.
    std::thread::sleep(Duration::from_millis(500));
    let t0 = cpu_ticks(pid);
    std::thread::sleep(Duration::from_secs(2));
    let used = cpu_ticks(pid) - t0;
    assert!(
        used < 60,
        "the server used {used} ticks of CPU in 2 s at the fd limit"
    );
    // A connection accepted before the limit is still served.
    assert!(served(&mut first), "served at the limit");
    drop(flood);
    // Once descriptors free up, new connections are served again.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Ok(mut s) = TcpStream::connect(&addr) {
            if served(&mut s) {
                break;
            }
        }
        assert!(Instant::now() < deadline, "not serving after the flood");
        std::thread::sleep(Duration::from_millis(100));
    }
    child.kill().unwrap();
    let out = child.wait_with_output().unwrap();
    let log = String::from_utf8_lossy(&out.stderr);
    assert!(
        log.contains("accept") && log.to_lowercase().contains("too many open files"),
        "the limit is logged: {log}"
    );
}

/// The child: a server under the lowered limit, with long header timeouts
/// so that the flood's idle connections are not dropped during the test.
fn child(dir: &str) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let dir = std::path::Path::new(dir);
        let mut o = options(&dir.join("store"));
        o.header_timeout = Duration::from_secs(120);
        let server = start(o).await;
        let tmp = dir.join("addr.tmp");
        std::fs::write(&tmp, server.local_addr().to_string()).unwrap();
        std::fs::rename(&tmp, dir.join("addr")).unwrap();
        tokio::time::sleep(Duration::from_secs(120)).await;
    });
}
