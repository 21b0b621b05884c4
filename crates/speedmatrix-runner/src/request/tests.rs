//! Tests of recording one request: retries, usage events, kept text, impossible counts, deadlines, redaction.

use super::*;
use speedmatrix_metrics::Chunk;
use speedmatrix_units::ReasoningParser;

fn status(status: u16, retry_after: Option<u64>) -> speedmatrix_client::ClientError {
    speedmatrix_client::ClientError::HttpStatus {
        url: "http://127.0.0.1/v1/completions".into(),
        status,
        message: "busy".into(),
        retry_after: retry_after.map(Duration::from_secs),
    }
}

#[test]
fn only_429_and_503_are_retried_a_bounded_number_of_times() {
    assert_eq!(
        retry_delay(&status(429, Some(5)), 0),
        Some(Duration::from_secs(5))
    );
    assert_eq!(
        retry_delay(&status(503, Some(3600)), 0),
        Some(MAX_RETRY_WAIT)
    );
    let backoff: Vec<_> = (0..3).map(|n| retry_delay(&status(503, None), n)).collect();
    assert_eq!(backoff, [1, 2, 4].map(|s| Some(Duration::from_secs(s))));
    assert_eq!(retry_delay(&status(429, Some(1)), MAX_RETRIES), None);
    for code in [400, 401, 404, 500, 502] {
        assert_eq!(retry_delay(&status(code, Some(1)), 0), None, "{code}");
    }
}

/// Records the events of an SSE body, one event per millisecond.
fn record(body: &str, one_event_per_token: bool) -> Recorder {
    let mut decoder = speedmatrix_client::StreamDecoder::new();
    decoder.feed(body.as_bytes(), Instant::now());
    let ms = Timestamp::from_millis;
    let mut r = Recorder::new(ms(0), ms(1), one_event_per_token);
    let mut t = 1;
    while let Some(ev) = decoder.next_event() {
        t += 1;
        r.event(&ev.unwrap(), ms(t));
    }
    r
}

fn finished() -> Outcome {
    Outcome::Finished {
        finish_reason: Some("length".into()),
    }
}

const CHUNK: &str = r#"data: {"choices":[{"index":0,"text":" a","finish_reason":null}]}"#;

#[test]
fn a_usage_only_event_mid_stream_is_not_the_total() {
    let body = format!(
        "{CHUNK}\n\ndata: {{\"choices\":[],\"usage\":{{\"prompt_tokens\":3,\"completion_tokens\":1}}}}\n\n{CHUNK}\n\n{CHUNK}\n\n"
    );
    let (t, prompt, text) =
        record(&body, false).finish(finished(), Timestamp::from_millis(99), None);
    assert_eq!(t.final_usage, None, "a mid-stream usage is not the total");
    assert_eq!(prompt, Some(Tokens::new(3)));
    assert_eq!(text.expect("kept for the estimate").text, " a a a");
    // The same usage after the last text is the total of a finished stream...
    let body = format!(
        "{CHUNK}\n\n{CHUNK}\n\ndata: {{\"choices\":[],\"usage\":{{\"prompt_tokens\":3,\"completion_tokens\":2}}}}\n\n"
    );
    let r = record(&body, false);
    let (t, _, _) = r.finish(finished(), Timestamp::from_millis(99), None);
    assert_eq!(
        t.final_usage.map(|u| u.completion_tokens),
        Some(Tokens::new(2))
    );
    // ...but not of a cancelled one.
    let r = record(&body, false);
    let (t, _, _) = r.finish(Outcome::Cancelled, Timestamp::from_millis(99), None);
    assert_eq!(t.final_usage, None);
}

#[test]
fn tgi_events_count_one_token_each_even_without_text() {
    let body = "data: {\"choices\":[{\"index\":0,\"text\":\"\",\"finish_reason\":\"\"}]}\n\n\
                data: {\"choices\":[{\"index\":0,\"text\":\"é\",\"finish_reason\":\"\"}]}\n\n\
                data: {\"choices\":[{\"index\":0,\"text\":\" b\",\"finish_reason\":\"\"}]}\n\n";
    let (t, _, text) =
        record(body, true).finish(Outcome::Cancelled, Timestamp::from_millis(99), None);
    let counts: Vec<Option<u64>> = t
        .chunks
        .iter()
        .map(|c| c.engine_count.map(Tokens::get))
        .collect();
    assert_eq!(counts, vec![Some(1), Some(2), Some(3)]);
    assert!(text.is_none(), "an exact count needs no text");
}

#[test]
fn text_is_dropped_once_the_server_counts_every_chunk() {
    let counted = |n: u64| {
        format!(
            "data: {{\"choices\":[{{\"index\":0,\"text\":\" a\"}}],\"usage\":{{\"prompt_tokens\":3,\"completion_tokens\":{n}}}}}\n\n"
        )
    };
    let body = format!("{}{}", counted(1), counted(3));
    let (_, _, text) =
        record(&body, false).finish(Outcome::Cancelled, Timestamp::from_millis(99), None);
    assert!(text.is_none());
    // Ollama's all-zero usage is no count: the text is kept.
    let body = format!("{}{}", counted(0), counted(0));
    let (_, _, text) =
        record(&body, false).finish(Outcome::Cancelled, Timestamp::from_millis(99), None);
    assert_eq!(text.map(|t| t.ends.len()), Some(2));
}

#[test]
fn tokens_belong_to_the_chunk_their_last_byte_arrived_in() {
    let text = OutputText {
        text: " the café".into(),
        // Chunks 0 (" the"), 2 (" caf"), 3 ("é"); chunk 1 had no text.
        ends: vec![(0, 4), (2, 8), (3, 10)],
    };
    let mut chunks: Chunks = vec![Chunk::empty(Timestamp::EPOCH); 4].into();
    // Tokens " the", " ca", "f", "Ã", "©": the last two end with the character.
    text.assign(&[4, 7, 8, 10, 10], &mut chunks);
    let got: Vec<Option<u32>> = chunks.iter().map(|c| c.text_tokens).collect();
    assert_eq!(got, vec![Some(1), None, Some(2), Some(2)]);
}

fn shape(max_tokens: u64) -> RequestShape {
    RequestShape {
        model: "m".into(),
        api: Api::Completions,
        max_tokens: Tokens::new(max_tokens),
        ignore_eos: true,
        min_tokens: false,
        stream_options: true,
        secret: None,
        extra: Arc::default(),
        one_event_per_token: false,
        reasoning_parser: Default::default(),
        keep_text: false,
        first_token_allowance: Duration::from_secs(2),
        sent_together: 1,
    }
}

fn usage_chunk(prompt: u64, completion: u64) -> String {
    format!(
        "{CHUNK}\n\ndata: {{\"choices\":[],\"usage\":{{\"prompt_tokens\":{prompt},\"completion_tokens\":{completion}}}}}\n\n"
    )
}

#[test]
fn impossible_counts_are_caught_with_the_value_and_the_bound() {
    let ended = Timestamp::from_millis(99);
    let bounds = shape(16).count_bounds("a prompt of a few words".len());
    let honest = record(&usage_chunk(5, 16), false);
    assert_eq!(honest.check_counts(&bounds, ended), Ok(()));
    let huge = record(&usage_chunk(5, u64::MAX), false);
    let e = huge.check_counts(&bounds, ended).unwrap_err();
    assert_eq!((e.value, e.bound), (u64::MAX, 16 + 256));
    let failure = impossible_failure(&e);
    assert_eq!(failure.kind, FailureKind::ImpossibleCount);
    assert!(
        failure.message.contains("18,446,744,073,709,551,615"),
        "{}",
        failure.message
    );
    // The failed request keeps its times but none of the server's counts.
    let r = huge.into_failed(ended, Some(failure), None);
    assert!(r.timeline.chunks.is_empty() && r.timeline.final_usage.is_none());
    assert_eq!(r.prompt_tokens_reported, None);
    assert!(matches!(&r.timeline.outcome, Outcome::Failed { kind } if kind == "impossible_count"));
    // A prompt count no prompt of 23 bytes can have.
    let prompt = record(&usage_chunk(u64::MAX, 1), false);
    let e = prompt.check_counts(&bounds, ended).unwrap_err();
    assert_eq!(e.field, speedmatrix_metrics::CountField::Prompt);
}

#[test]
fn the_deadline_grows_with_the_prompt_the_company_and_max_tokens() {
    let d = shape(1).deadline(16).unwrap();
    assert_eq!(d.limit, Duration::from_secs(2 + 1));
    // 64 prompts of 100 KB sent together: 6,400 s of prefill at the floor.
    let d = shape(512).together(64).deadline(100_000).unwrap();
    assert_eq!(d.limit, Duration::from_secs(2 + 6_400 + 512));
    let message = d.failure(Duration::from_secs(7_000)).message;
    assert!(message.contains("deadline of 6914.0 s"), "{message}");
    // --extra-body's own max_tokens is the one the server gets.
    let mut extra = serde_json::Map::new();
    extra.insert("max_tokens".into(), 4_096.into());
    let wider = RequestShape {
        extra: Arc::new(extra),
        ..shape(16)
    };
    assert_eq!(wider.max_tokens_sent(), Some(Tokens::new(4_096)));
    let mut extra = serde_json::Map::new();
    extra.insert("max_tokens".into(), serde_json::Value::Null);
    let unknown = RequestShape {
        extra: Arc::new(extra),
        ..shape(16)
    };
    assert_eq!(
        unknown.deadline(16),
        None,
        "no max_tokens the client can read"
    );
}

#[test]
fn the_key_is_redacted_from_messages() {
    assert_eq!(
        redact("bad key sk-1 (sk-1)", Some("sk-1")),
        "bad key [redacted] ([redacted])"
    );
    assert_eq!(redact("no key here", None), "no key here");
    assert_eq!(redact("empty", Some("")), "empty");
}

#[test]
fn think_tags_in_the_answer_text_are_reasoning_when_asked() {
    let pieces = ["<think>", "hm", "m</th", "ink>", "\n\nYes", "."];
    let body: String = pieces
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let text = serde_json::to_string(p).unwrap();
            format!(
                "data: {{\"choices\":[{{\"index\":0,\"delta\":{{\"content\":{text}}}}}],\"usage\":{{\"prompt_tokens\":3,\"completion_tokens\":{}}}}}\n\n",
                i + 1
            )
        })
        .collect();
    let flags = |r: &Recorder| -> Vec<(bool, bool)> {
        r.timeline
            .chunks
            .iter()
            .map(|c| (c.reasoning, c.content))
            .collect()
    };
    // Without a parser every chunk is answer text.
    let plain = record(&body, false);
    assert!(flags(&plain).iter().all(|&(r, c)| !r && c));
    for parser in [ReasoningParser::Think, ReasoningParser::DeepseekR1] {
        let mut decoder = speedmatrix_client::StreamDecoder::new();
        decoder.feed(body.as_bytes(), Instant::now());
        let mut r = Recorder::new(Timestamp::from_millis(0), Timestamp::from_millis(1), false);
        r.think = speedmatrix_client::ThinkSplitter::for_parser(parser);
        r.always_keep_text = true;
        let mut t = 1;
        while let Some(ev) = decoder.next_event() {
            t += 1;
            r.event(&ev.unwrap(), Timestamp::from_millis(t));
        }
        // The tag's own chunks are reasoning tokens; "</th" waits for "ink>".
        assert_eq!(
            flags(&r),
            [
                (true, false),
                (true, false),
                (true, false),
                (true, false),
                (false, true),
                (false, true)
            ],
            "{parser}"
        );
        let (_, _, text) = r.finish(finished(), Timestamp::from_millis(99), None);
        assert_eq!(text.unwrap().text, "hmm\n\nYes.", "{parser}");
    }
}
