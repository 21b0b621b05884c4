//! When a request actually left: each connection notes the instant its
//! request's first bytes were handed to the kernel.
//!
//! A stream's TTFT runs from when its request was sent. Stamping the clock
//! before handing the request to the connection pool counts the client's
//! own queueing too: when thousands of streams start at once, a request
//! waits for the connection task behind every other stream's first poll,
//! tens of milliseconds that are the client's, not the server's. So the
//! transport wraps each connection, and the first write after a read (an
//! HTTP/1.1 client writes a request, then reads its response) stamps the
//! connection's [`WireClock`], which reaches every response as an extension.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use hyper::Uri;
use hyper::rt::{Read, ReadBufCursor, Write};
use hyper_util::client::legacy::connect::{Connected, Connection};

/// A connection's record of when its current request began to be written.
#[derive(Debug, Clone)]
pub(crate) struct WireClock(Arc<Inner>);

#[derive(Debug)]
struct Inner {
    origin: Instant,
    /// Nanoseconds after `origin` plus one; 0 while nothing was written.
    request_written: AtomicU64,
    /// A read came after the last write: the next write starts a request.
    read_since_write: AtomicBool,
}

impl WireClock {
    fn new() -> Self {
        WireClock(Arc::new(Inner {
            origin: Instant::now(),
            request_written: AtomicU64::new(0),
            read_since_write: AtomicBool::new(true),
        }))
    }

    /// When the connection began writing its latest request.
    pub(crate) fn request_written(&self) -> Option<Instant> {
        let n = self.0.request_written.load(Ordering::Acquire);
        let since = n.checked_sub(1)?;
        Some(self.0.origin + Duration::from_nanos(since))
    }

    fn wrote(&self) {
        if self.0.read_since_write.swap(false, Ordering::AcqRel) {
            let ns = u64::try_from(self.0.origin.elapsed().as_nanos()).unwrap_or(u64::MAX - 1);
            self.0.request_written.store(ns + 1, Ordering::Release);
        }
    }

    fn read(&self) {
        // Most reads follow a read: skip the store when nothing changes.
        if !self.0.read_since_write.load(Ordering::Relaxed) {
            self.0.read_since_write.store(true, Ordering::Release);
        }
    }
}

/// A connection whose writes stamp a [`WireClock`].
#[derive(Debug)]
pub(crate) struct Stamped<T> {
    inner: T,
    clock: WireClock,
}

impl<T: Read + Unpin> Read for Stamped<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: ReadBufCursor<'_>,
    ) -> Poll<io::Result<()>> {
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        if let Poll::Ready(Ok(())) = polled {
            self.clock.read();
        }
        polled
    }
}

impl<T: Write + Unpin> Write for Stamped<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write(cx, buf);
        if let Poll::Ready(Ok(n)) = polled
            && n > 0
        {
            self.clock.wrote();
        }
        polled
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        if let Poll::Ready(Ok(n)) = polled
            && n > 0
        {
            self.clock.wrote();
        }
        polled
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

impl<T: Connection> Connection for Stamped<T> {
    fn connected(&self) -> Connected {
        self.inner.connected().extra(self.clock.clone())
    }
}

/// A connector whose connections are [`Stamped`].
#[derive(Debug, Clone)]
pub(crate) struct StampingConnector<C>(pub(crate) C);

impl<C> tower_service::Service<Uri> for StampingConnector<C>
where
    C: tower_service::Service<Uri>,
    C::Future: Send + 'static,
{
    type Response = Stamped<C::Response>;
    type Error = C::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, C::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), C::Error>> {
        self.0.poll_ready(cx)
    }

    fn call(&mut self, uri: Uri) -> Self::Future {
        let connecting = self.0.call(uri);
        Box::pin(async move {
            let inner = connecting.await?;
            Ok(Stamped {
                inner,
                clock: WireClock::new(),
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_write_after_a_read_starts_a_request() {
        let clock = WireClock::new();
        assert_eq!(clock.request_written(), None);
        clock.wrote();
        let first = clock.request_written().unwrap();
        std::thread::sleep(Duration::from_millis(2));
        // More writes of the same request move nothing.
        clock.wrote();
        assert_eq!(clock.request_written(), Some(first));
        // The response is read; the next request's first write restamps.
        clock.read();
        clock.read();
        clock.wrote();
        let second = clock.request_written().unwrap();
        assert!(
            second >= first + Duration::from_millis(2),
            "{first:?} {second:?}"
        );
    }
}
