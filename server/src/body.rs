//! The response body: a whole buffer, or a stream of chunks (SSE) whose
//! bytes are counted in a gauge from when they are produced until the
//! connection takes them (or the body is dropped).

use std::convert::Infallible;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use hyper::body::{Frame, SizeHint};
use tokio::sync::mpsc;

/// A response body.
pub enum Body {
    Full(Option<Bytes>),
    /// Chunks, and the gauge of bytes produced but not yet taken.
    Stream(mpsc::Receiver<Bytes>, Arc<AtomicU64>),
}

impl Drop for Body {
    fn drop(&mut self) {
        if let Body::Stream(rx, gauge) = self {
            rx.close();
            while let Ok(b) = rx.try_recv() {
                gauge.fetch_sub(b.len() as u64, Ordering::Relaxed);
            }
        }
    }
}

impl Body {
    pub fn empty() -> Body {
        Body::Full(None)
    }
    pub fn full(b: impl Into<Bytes>) -> Body {
        let b = b.into();
        if b.is_empty() {
            Body::Full(None)
        } else {
            Body::Full(Some(b))
        }
    }
}

impl hyper::body::Body for Body {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        match self.get_mut() {
            Body::Full(b) => Poll::Ready(b.take().map(|b| Ok(Frame::data(b)))),
            Body::Stream(rx, gauge) => rx.poll_recv(cx).map(|o| {
                o.map(|b| {
                    gauge.fetch_sub(b.len() as u64, Ordering::Relaxed);
                    Ok(Frame::data(b))
                })
            }),
        }
    }

    fn is_end_stream(&self) -> bool {
        matches!(self, Body::Full(None))
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            Body::Full(None) => SizeHint::with_exact(0),
            Body::Full(Some(b)) => SizeHint::with_exact(b.len() as u64),
            Body::Stream(..) => SizeHint::default(),
        }
    }
}
