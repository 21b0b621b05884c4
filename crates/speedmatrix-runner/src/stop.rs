//! How a cell tells its streams to stop, for an atomic load per read.
//!
//! A stream waits on its next body frame and on the stop together, once per
//! read: hundreds of thousands of times a second against a fast server.
//! `CancellationToken`'s future takes two mutexes per poll; here a poll is a
//! flag load and a waker registration, and stopping wakes every stream.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use atomic_waker::AtomicWaker;
use tokio_util::sync::CancellationToken;

/// The cell's side: [`Self::stop`] once, and every listener wakes.
#[derive(Debug, Clone, Default)]
pub(crate) struct StopSignal {
    inner: Arc<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    stopped: AtomicBool,
    listeners: Mutex<Vec<Arc<AtomicWaker>>>,
}

impl StopSignal {
    /// Stops every listener, now and from now on.
    pub(crate) fn stop(&self) {
        self.inner.stopped.store(true, Ordering::SeqCst);
        let listeners = match self.inner.listeners.lock() {
            Ok(l) => l,
            Err(poisoned) => poisoned.into_inner(),
        };
        for waker in listeners.iter() {
            waker.wake();
        }
    }

    /// Whether [`Self::stop`] was called.
    pub(crate) fn is_stopped(&self) -> bool {
        self.inner.stopped.load(Ordering::SeqCst)
    }

    /// A listener for one stream slot.
    pub(crate) fn listener(&self) -> StopListener {
        let waker = Arc::new(AtomicWaker::new());
        match self.inner.listeners.lock() {
            Ok(mut l) => l.push(Arc::clone(&waker)),
            Err(poisoned) => poisoned.into_inner().push(Arc::clone(&waker)),
        }
        StopListener {
            signal: self.clone(),
            waker,
        }
    }
}

/// One stream slot's side of a [`StopSignal`].
#[derive(Debug)]
pub(crate) struct StopListener {
    signal: StopSignal,
    waker: Arc<AtomicWaker>,
}

impl StopListener {
    fn poll_stopped(&self, cx: &mut Context<'_>) -> Poll<()> {
        if self.signal.is_stopped() {
            return Poll::Ready(());
        }
        self.waker.register(cx.waker());
        // A stop between the load and the registration woke the old waker.
        if self.signal.is_stopped() {
            return Poll::Ready(());
        }
        Poll::Pending
    }
}

/// What a request stops on: the run's cancellation, or a cell's stop signal.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Stop<'a> {
    Token(&'a CancellationToken),
    Listener(&'a StopListener),
}

impl<'a> Stop<'a> {
    /// Whether it has stopped already.
    pub(crate) fn is_stopped(self) -> bool {
        match self {
            Stop::Token(t) => t.is_cancelled(),
            Stop::Listener(l) => l.signal.is_stopped(),
        }
    }

    /// Resolves once stopped.
    pub(crate) fn stopped(self) -> Stopped<'a> {
        match self {
            Stop::Token(t) => Stopped::Token(Box::pin(t.cancelled())),
            Stop::Listener(l) => Stopped::Listener(l),
        }
    }
}

impl<'a> From<&'a CancellationToken> for Stop<'a> {
    fn from(t: &'a CancellationToken) -> Self {
        Stop::Token(t)
    }
}

/// The future of [`Stop::stopped`].
pub(crate) enum Stopped<'a> {
    Token(Pin<Box<tokio_util::sync::WaitForCancellationFuture<'a>>>),
    Listener(&'a StopListener),
}

impl Future for Stopped<'_> {
    type Output = ();
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        match self.get_mut() {
            Stopped::Token(f) => f.as_mut().poll(cx),
            Stopped::Listener(l) => l.poll_stopped(cx),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[tokio::test]
    async fn stopping_wakes_a_waiting_listener_and_later_ones_see_it() {
        let signal = StopSignal::default();
        let listener = signal.listener();
        let waiting = tokio::spawn(async move {
            Stop::Listener(&listener).stopped().await;
        });
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(!waiting.is_finished());
        signal.stop();
        tokio::time::timeout(Duration::from_secs(5), waiting)
            .await
            .expect("the listener woke")
            .expect("no panic");
        let late = signal.listener();
        assert!(Stop::Listener(&late).is_stopped());
        Stop::Listener(&late).stopped().await;
    }

    #[tokio::test]
    async fn a_token_stop_follows_the_token() {
        let token = CancellationToken::new();
        let stop = Stop::from(&token);
        assert!(!stop.is_stopped());
        token.cancel();
        assert!(stop.is_stopped());
        stop.stopped().await;
    }
}
