//! Property tests: decoders and the Prometheus parser under arbitrary input.

use std::time::Instant;

use bytes::Bytes;
use proptest::prelude::*;
use speedmatrix_client::{OwnedSseEvent, SseDecoder, StreamDecoder};

/// Feeds `bytes` cut at `cuts` and returns every event, plus whether it failed.
/// Pieces alternate between the copying and the zero-copy entry points as
/// `shared` says (bit `i` for piece `i`).
fn decode_in_pieces(bytes: &[u8], cuts: &[usize], shared: u64) -> (Vec<OwnedSseEvent>, bool) {
    let mut decoder = SseDecoder::new();
    let mut events = Vec::new();
    let mut failed = false;
    let mut start = 0;
    let mut points: Vec<usize> = cuts.iter().map(|c| c % (bytes.len() + 1)).collect();
    points.sort_unstable();
    points.push(bytes.len());
    for (i, end) in points.into_iter().enumerate() {
        let piece = &bytes[start..end];
        if shared >> (i % 64) & 1 == 1 {
            decoder.feed_bytes(Bytes::copy_from_slice(piece));
        } else {
            decoder.feed(piece);
        }
        start = end;
        while let Some(event) = decoder.next_event() {
            match event {
                Ok(event) => events.push(event.to_owned_event()),
                Err(_) => failed = true,
            }
        }
    }
    if let Some(Ok(event)) = decoder.finish() {
        events.push(event.to_owned_event());
    }
    (events, failed)
}

/// SSE-ish text: fields, comments, mixed line ends, blank lines.
fn sse_stream() -> impl Strategy<Value = Vec<u8>> {
    let line = prop_oneof![
        "[a-z {}\":,\\[\\]]{0,40}".prop_map(|v| format!("data: {v}")),
        "[a-z]{0,8}".prop_map(|v| format!("data:{v}")),
        Just("data".to_owned()),
        "[a-z]{1,8}".prop_map(|v| format!("event: {v}")),
        "[ -~]{0,20}".prop_map(|v| format!(":{v}")),
        Just("id: 7".to_owned()),
        Just("retry: 100".to_owned()),
        Just(String::new()),
    ];
    let end = prop_oneof![Just("\n"), Just("\r\n"), Just("\r")];
    prop::collection::vec((line, end), 0..40).prop_map(|lines| {
        lines
            .into_iter()
            .flat_map(|(l, e)| format!("{l}{e}").into_bytes())
            .collect()
    })
}

proptest! {
    #[test]
    fn chunk_boundaries_do_not_change_events(
        bytes in sse_stream(),
        cuts in prop::collection::vec(any::<usize>(), 0..12),
        shared in any::<u64>(),
    ) {
        let whole = decode_in_pieces(&bytes, &[], 0);
        prop_assert_eq!(&whole, &decode_in_pieces(&bytes, &[], 1));
        prop_assert_eq!(&whole, &decode_in_pieces(&bytes, &cuts, shared));
        let one_byte: Vec<usize> = (0..bytes.len()).collect();
        prop_assert_eq!(&whole, &decode_in_pieces(&bytes, &one_byte, shared));
    }

    #[test]
    fn line_aligned_zero_copy_reads_match(bytes in sse_stream(), every in 1usize..4) {
        let ends: Vec<usize> = bytes
            .iter()
            .enumerate()
            .filter(|(_, b)| **b == b'\n')
            .map(|(i, _)| i + 1)
            .step_by(every)
            .collect();
        let whole = decode_in_pieces(&bytes, &[], 0);
        prop_assert_eq!(&whole, &decode_in_pieces(&bytes, &ends, u64::MAX));
    }

    #[test]
    fn arbitrary_bytes_never_panic(
        bytes in prop::collection::vec(any::<u8>(), 0..512),
        cuts in prop::collection::vec(any::<usize>(), 0..8),
        cap in 1usize..64,
    ) {
        let mut sse = SseDecoder::with_max_event_bytes(cap);
        let mut stream = StreamDecoder::with_max_event_bytes(cap * 8);
        let mut start = 0;
        let mut points: Vec<usize> = cuts.iter().map(|c| c % (bytes.len() + 1)).collect();
        points.sort_unstable();
        points.push(bytes.len());
        for end in points {
            sse.feed_bytes(Bytes::copy_from_slice(&bytes[start..end]));
            stream.feed(&bytes[start..end], Instant::now());
            start = end;
            while let Some(event) = sse.next_event() {
                if let Ok(event) = event {
                    prop_assert!(event.data.len() <= cap);
                }
            }
            while stream.next_event().is_some() {}
        }
        let _ = sse.finish();
        let _ = stream.finish();
        prop_assert!(sse.pending_bytes() <= bytes.len());
    }
}
