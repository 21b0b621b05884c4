//! Streams recorded from Hugging Face `transformers serve` 5.19 (the tiny model on CPU,
//! `tests/fixtures/transformers-serve-5.19/`): decoded as a stream whose usage comes once,
//! on the chunk that carries `finish_reason`, and that ends without `data: [DONE]`.

use std::time::Instant;

use speedmatrix_client::StreamDecoder;

fn events(name: &str) -> Vec<speedmatrix_client::StreamEvent> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures/transformers-serve-5.19")
        .join(name);
    let bytes = std::fs::read(path).unwrap();
    let mut decoder = StreamDecoder::new();
    decoder.feed(&bytes, Instant::now());
    let mut out = Vec::new();
    while let Some(e) = decoder.next_event() {
        out.push(e.unwrap());
    }
    while let Some(e) = decoder.finish() {
        out.push(e.unwrap());
    }
    out
}

#[test]
fn a_transformers_stream_carries_its_usage_once_at_the_end_and_no_done() {
    for (name, prompt) in [("chat-stream.sse", 15), ("completions-stream.sse", 7)] {
        let events = events(name);
        let texts = events.iter().filter(|e| !e.content.is_empty()).count();
        let with_usage: Vec<_> = events.iter().filter_map(|e| e.usage).collect();
        assert_eq!(with_usage.len(), 1, "{name}: usage once");
        let usage = with_usage[0];
        assert_eq!(usage.completion_tokens.get(), 5, "{name}");
        assert_eq!(usage.prompt_tokens.get(), prompt, "{name}");
        // One text chunk per generated token, and the last chunk says why it ended.
        assert_eq!(texts, 5, "{name}");
        let last = events.last().unwrap();
        assert_eq!(last.finish_reason.as_deref(), Some("length"), "{name}");
        assert!(
            last.usage.is_some(),
            "{name}: usage rides on the finish chunk"
        );
    }
}
