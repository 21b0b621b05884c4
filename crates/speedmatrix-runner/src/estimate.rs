//! Inputs of token estimates: the streamed text tokenized as a whole, the
//! bounded sample of finished requests whose text calibrates them, and
//! calibration requests for cells whose server sends no count on its chunks.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use speedmatrix_metrics::Outcome;
use speedmatrix_units::{Concurrency, Tokens};
use speedmatrix_workload::Tokenizer;
use tokio_util::sync::CancellationToken;

use crate::request::{OutputText, Recorded, RequestShape, record_one};
use crate::server::Server;

/// Most finished requests of a cell whose text is kept and tokenized to
/// calibrate its estimates. The interval's half-width is
/// `t(0.975, m−1)·s·√(1/m + 1/R)`: at 64, `t` is 1.998 (2 % over its limit),
/// and since a cell only has more finished requests than this when its
/// estimated share is small, the sample widens the cell's stated
/// uncertainty by at most 0.021·s at 128 streams (see `docs/metrics.md`).
pub(crate) const CALIBRATION_SAMPLE: usize = 64;

/// A request of a cell: its stream slot and its place among that slot's requests.
pub(crate) type RequestId = (usize, usize);

/// The texts of a seeded, uniform random sample (a reservoir, Vitter's
/// algorithm R) of at most `capacity` of a cell's finished requests with the
/// server's total: what calibrates the cell's estimates. Every other
/// finished request's text is dropped as soon as the request ends, so a cell
/// holds the texts of its streams in flight and of the sample, never of all
/// its requests. Each of `n` offered requests is in the sample with the same
/// chance `capacity / n`, whatever the order they finish in.
#[derive(Debug)]
pub(crate) struct CalibrationSample {
    capacity: usize,
    rng: u64,
    offered: u64,
    kept: Vec<(RequestId, OutputText)>,
}

impl CalibrationSample {
    pub(crate) fn new(capacity: usize, seed: u64) -> Self {
        CalibrationSample {
            capacity,
            rng: seed,
            offered: 0,
            kept: Vec::with_capacity(capacity),
        }
    }

    /// Whether `r` can calibrate: it finished, with the server's total, and
    /// its text was kept (the server counted no chunk).
    pub(crate) fn is_candidate(r: &Recorded) -> bool {
        r.error.is_none()
            && r.text.is_some()
            && r.timeline.final_usage.is_some()
            && matches!(r.timeline.outcome, Outcome::Finished { .. })
    }

    /// Takes the text of `r` (request `id`) when it can calibrate: into the
    /// sample, or dropped at once. Any other request keeps its text (an
    /// estimate counts it).
    pub(crate) fn offer(&mut self, id: RequestId, r: &mut Recorded) {
        if !Self::is_candidate(r) {
            return;
        }
        let Some(text) = r.text.take() else {
            return;
        };
        self.offered += 1;
        if self.kept.len() < self.capacity {
            self.kept.push((id, text));
            return;
        }
        // Replace a kept one with chance capacity / offered.
        let j = self.next_below(self.offered);
        if let Some(slot) = usize::try_from(j).ok().and_then(|j| self.kept.get_mut(j)) {
            *slot = (id, text);
        }
    }

    /// Requests offered so far: the finished ones with a total and text.
    pub(crate) fn offered(&self) -> u64 {
        self.offered
    }

    /// Bytes of text the sample holds (with the chunk offsets into it).
    pub(crate) fn kept_bytes(&self) -> usize {
        self.kept.iter().map(|(_, t)| t.heap_bytes()).sum()
    }

    /// Gives each sampled text back to its request, once every request of
    /// the cell has ended.
    pub(crate) fn restore<'r>(
        self,
        requests: impl IntoIterator<Item = (RequestId, &'r mut Recorded)>,
    ) {
        tracing::debug!(
            offered = self.offered(),
            sampled = self.kept.len(),
            bytes = self.kept_bytes(),
            "calibration sample"
        );
        let mut texts: HashMap<RequestId, OutputText> = self.kept.into_iter().collect();
        for (id, r) in requests {
            if texts.is_empty() {
                break;
            }
            if let Some(text) = texts.remove(&id) {
                r.text = Some(text);
            }
        }
    }

    /// A uniform draw from `0..n` (SplitMix64, then a multiply-shift).
    fn next_below(&mut self, n: u64) -> u64 {
        self.rng = self.rng.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.rng;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        ((u128::from(z) * u128::from(n)) >> 64) as u64
    }
}

/// Requests run to their end to calibrate a cell's estimates when none of
/// its own finished inside the cell: enough for a spread (Student's t with
/// two degrees of freedom), few enough to keep the cell short.
pub(crate) const CALIBRATION_REQUESTS: usize = 3;

/// Output tokens of each calibration request: long enough that one token
/// more or less moves its ratio by under 0.4 %.
pub(crate) const CALIBRATION_TOKENS: u64 = 256;

/// Tokenizes the kept text of every request (each as a whole, never chunk by
/// chunk), records on each chunk how many of its tokens ended there, and
/// drops the text. Runs on the blocking pool: a cell's text can be hundreds
/// of thousands of tokens (its streams in flight and its calibration sample).
pub(crate) async fn tokenize_texts(
    tokenizer: &Tokenizer,
    recorded: Vec<Recorded>,
) -> Vec<Recorded> {
    if recorded.iter().all(|r| r.text.is_none()) {
        return recorded;
    }
    let tokenizer = tokenizer.clone();
    let work = tokio::task::spawn_blocking(move || {
        let mut recorded = recorded;
        for r in &mut recorded {
            tokenize_one(&tokenizer, r);
        }
        recorded
    });
    // A panic inside the tokenizer is the only way to get here; the cell
    // then has no estimate rather than no result.
    work.await.unwrap_or_default()
}

fn tokenize_one(tokenizer: &Tokenizer, r: &mut Recorded) {
    // Once its tokens are on the chunks, nothing reads the text again.
    let Some(text) = r.text.take() else {
        return;
    };
    match tokenizer.token_ends(&text.text) {
        Ok(ends) => text.assign(&ends, &mut r.timeline.chunks),
        Err(e) => tracing::debug!(error = %e, "could not tokenize a response's text"),
    }
}

/// Runs [`CALIBRATION_REQUESTS`] requests of the cell's prompts to their end
/// (at most `concurrency` at once, so they fit where the cell fit), to learn
/// how the server's own count relates to the estimates. Timed from the
/// cell's `epoch`, so they fall after its window.
pub(crate) async fn calibration_requests(
    server: &Server,
    shape: &RequestShape,
    prompts: &[Arc<str>],
    concurrency: Concurrency,
    epoch: Instant,
    cancel: &CancellationToken,
) -> Vec<Recorded> {
    let at_once = (concurrency.get() as usize).clamp(1, CALIBRATION_REQUESTS);
    let shape = RequestShape {
        max_tokens: Tokens::new(CALIBRATION_TOKENS.min(shape.max_tokens.get())),
        ..shape.together(at_once)
    };
    let mut out = Vec::with_capacity(CALIBRATION_REQUESTS);
    let mut next = 0;
    while next < CALIBRATION_REQUESTS && !cancel.is_cancelled() {
        let mut set = tokio::task::JoinSet::new();
        for i in next..(next + at_once).min(CALIBRATION_REQUESTS) {
            let client = server.client.clone();
            let shape = shape.clone();
            let prompt = Arc::clone(&prompts[i % prompts.len()]);
            let cancel = cancel.clone();
            set.spawn(
                async move { record_one(&client, &shape, &prompt, epoch, &cancel, None).await },
            );
        }
        next += at_once;
        while let Some(r) = set.join_next().await {
            out.extend(r.ok().filter(|r| r.error.is_none()));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use speedmatrix_metrics::{Chunk, RequestTimeline, Timestamp, Usage, Window, window_metrics};

    use super::*;

    /// A request of `words` one-word chunks, one a millisecond from `sent`
    /// ms, that finished with the server's total of `words` tokens and kept
    /// its text (the server counted no chunk).
    fn finished(sent: u64, words: usize) -> Recorded {
        let at = Timestamp::from_millis;
        let mut timeline = RequestTimeline::new(
            at(sent),
            at(sent + words as u64 + 1),
            Outcome::Finished {
                finish_reason: Some("length".into()),
            },
        );
        let mut text = OutputText::default();
        for i in 0..words {
            timeline
                .chunks
                .push(Chunk::content(at(sent + i as u64 + 1)));
            text.text.push_str(" tok");
            text.ends.push((i, text.text.len()));
        }
        timeline.final_usage = Some(Usage::new(Tokens::new(8), Tokens::new(words as u64)));
        Recorded {
            timeline,
            prompt_tokens_reported: None,
            error: None,
            retries: 0,
            text: Some(text),
            unexpected_content_type: None,
        }
    }

    /// The same, cancelled at the window's end: no total, so its text stays.
    fn cancelled(sent: u64, words: usize) -> Recorded {
        let mut r = finished(sent, words);
        r.timeline.outcome = Outcome::Cancelled;
        r.timeline.final_usage = None;
        r
    }

    #[tokio::test]
    async fn a_cell_with_thousands_of_finished_requests_tokenizes_only_its_sample() {
        let mut sample = CalibrationSample::new(CALIBRATION_SAMPLE, 7);
        let mut records = Vec::new();
        let one_text = finished(0, 40).text.map_or(0, |t| t.heap_bytes());
        for i in 0..3_000 {
            let mut r = finished(i as u64 * 50, 40);
            sample.offer((0, i), &mut r);
            // Dropped or taken into the sample as soon as the request ends.
            assert!(r.text.is_none());
            records.push(r);
            assert!(sample.kept_bytes() <= CALIBRATION_SAMPLE * one_text);
        }
        // The streams in flight when the window closed keep their text.
        for slot in 1..=8 {
            let mut r = cancelled(150_000, 40);
            sample.offer((slot, 0), &mut r);
            assert!(r.text.is_some());
            records.push(r);
        }
        assert_eq!(sample.offered(), 3_000);
        let ids = (0..3_000).map(|i| (0, i)).chain((1..=8).map(|s| (s, 0)));
        sample.restore(ids.zip(records.iter_mut()));
        let with_text = records.iter().filter(|r| r.text.is_some()).count();
        assert_eq!(with_text, CALIBRATION_SAMPLE + 8);

        let tokenizer = Tokenizer::bundled().unwrap();
        let records = tokenize_texts(&tokenizer, records).await;
        let tokenized = records
            .iter()
            .filter(|r| r.timeline.chunks.iter().any(|c| c.text_tokens.is_some()))
            .count();
        assert_eq!(tokenized, CALIBRATION_SAMPLE + 8);
        assert!(
            records.iter().all(|r| r.text.is_none()),
            "text outlived its tokens"
        );

        // The window over the cancelled streams is calibrated on the sample.
        let window =
            Window::new(Timestamp::from_millis(150_005), Duration::from_millis(30)).unwrap();
        let m = window_metrics(&records, window).unwrap();
        let c = m.token_count.calibration.unwrap();
        assert_eq!(c.requests, CALIBRATION_SAMPLE as u64);
        assert_eq!(c.finished, 3_000);
        assert!(c.is_sampled() && c.sample_widening.is_some());
    }

    #[test]
    fn every_finished_request_is_as_likely_to_be_sampled_whatever_its_turn() {
        // 400 cells of 1,000 finished requests: each tenth of the finishing
        // order should hold a tenth of the sampled requests.
        let mut by_tenth = [0u32; 10];
        for seed in 0..400 {
            let mut sample = CalibrationSample::new(CALIBRATION_SAMPLE, seed);
            for i in 0..1_000 {
                sample.offer((0, i), &mut finished(0, 1));
            }
            for ((_, i), _) in sample.kept {
                by_tenth[i / 100] += 1;
            }
        }
        // 400 · 64 / 10 = 2,560 expected, a standard deviation under 50.
        for n in by_tenth {
            assert!((2_360..=2_760).contains(&n), "{by_tenth:?}");
        }
    }

    #[test]
    fn the_sample_is_the_same_for_the_same_seed_and_order() {
        let draw = |seed| {
            let mut sample = CalibrationSample::new(4, seed);
            for i in 0..100 {
                sample.offer((0, i), &mut finished(0, 1));
            }
            sample
                .kept
                .into_iter()
                .map(|(id, _)| id)
                .collect::<Vec<_>>()
        };
        assert_eq!(draw(1), draw(1));
        assert_ne!(draw(1), draw(2));
    }
}
