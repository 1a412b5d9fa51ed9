//! Shared helpers: an in-process server on an ephemeral loopback port.
#![allow(dead_code)]

pub mod fault;

use std::path::Path;
use std::time::Duration;

use reqwest::{Client, Method, Response};
use turnstone_server::{Options, Server};

pub const OFFSET_ZERO: &str = "0000000000000000_0000000000000000";

pub fn options(dir: &Path) -> Options {
    let mut o = Options::new(dir);
    o.listen = "127.0.0.1:0".parse().unwrap();
    o.long_poll_timeout = Duration::from_millis(400);
    o.sse_max_duration = Duration::from_secs(10);
    o.store.segment_bytes = 4 << 20;
    o
}

pub async fn start(o: Options) -> Server {
    turnstone_server::start(o).await.expect("server starts")
}

#[derive(Clone)]
pub struct Http {
    pub base: String,
    pub client: Client,
    pub token: Option<String>,
}

impl Http {
    pub fn new(server: &Server) -> Http {
        Http {
            base: format!("http://{}", server.local_addr()),
            client: Client::builder().no_proxy().build().unwrap(),
            token: None,
        }
    }

    pub async fn req(
        &self,
        method: Method,
        path: &str,
        headers: &[(&str, &str)],
        body: impl Into<reqwest::Body>,
    ) -> Response {
        let mut rb = self
            .client
            .request(method, format!("{}{}", self.base, path));
        for (k, v) in headers {
            rb = rb.header(*k, *v);
        }
        if let Some(t) = &self.token {
            rb = rb.bearer_auth(t);
        }
        rb.body(body).send().await.expect("request sent")
    }

    pub async fn put(&self, path: &str, ct: &str, body: &str) -> Response {
        self.req(Method::PUT, path, &[("content-type", ct)], body.to_string())
            .await
    }

    pub async fn post(&self, path: &str, ct: &str, body: &str) -> Response {
        self.req(
            Method::POST,
            path,
            &[("content-type", ct)],
            body.to_string(),
        )
        .await
    }

    pub async fn get(&self, path_and_query: &str) -> Response {
        self.req(Method::GET, path_and_query, &[], "").await
    }

    /// GET and return (status, next offset, body text).
    pub async fn read(&self, path_and_query: &str) -> (u16, String, String) {
        let r = self.get(path_and_query).await;
        let status = r.status().as_u16();
        let next = header(&r, "stream-next-offset");
        (status, next, r.text().await.unwrap())
    }
}

pub fn header(r: &Response, name: &str) -> String {
    r.headers()
        .get(name)
        .map(|v| v.to_str().unwrap().to_string())
        .unwrap_or_default()
}

/// Send raw bytes as one HTTP/1.1 request and return the status code.
pub async fn raw_status(addr: std::net::SocketAddr, request: &str) -> u16 {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(request.as_bytes()).await.unwrap();
    let mut buf = vec![0u8; 1024];
    let n = s.read(&mut buf).await.unwrap();
    let text = String::from_utf8_lossy(&buf[..n]);
    text.split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0)
}
