use std::time::Instant;

use proptest::prelude::*;
use proptest::strategy::ValueTree;

use super::super::{empty_event, parse_serde};

/// One decoder's reading of a chunk: whether it is an error, and the event.
type Decoded = Option<(bool, super::StreamEvent)>;

/// Both decoders on `text`: the fast path's answer (if any) and serde_json's.
fn both(text: &str) -> (Decoded, Decoded) {
    let now = Instant::now();
    let mut fast = empty_event(now);
    let fast = super::parse(text, &mut fast, &mut super::Opening::default()).map(|e| (e, fast));
    let mut slow = empty_event(now);
    let slow = parse_serde(text, &mut slow).ok().map(|e| (e, slow));
    (fast, slow)
}

#[test]
fn usual_chunks_take_the_fast_path_and_agree() {
    for text in [
        r#"{"id":"cmpl-1","object":"text_completion","created":1732000000,"model":"m","choices":[{"index":0,"text":" word","logprobs":null,"finish_reason":null,"stop_reason":null}],"usage":{"prompt_tokens":16384,"total_tokens":16391,"completion_tokens":7}}"#,
        r#"{"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"role":"assistant","content":"a\"b\n"},"logprobs":{"content":[{"token":"x","logprob":-0.25e-3,"top_logprobs":[]}]},"finish_reason":"stop"}]}"#,
        r#" { "choices" : [ { "delta" : { "reasoning" : "r1" , "reasoning_content" : "r2" } } , {"text":"second"} ] } "#,
        r#"{"choices":[],"usage":{"prompt_tokens":5,"completion_tokens":1,"prompt_tokens_details":{"cached_tokens":4}}}"#,
        r#"{"choices":[{"finish_reason":null,"index":0,"delta":{"content":" é"}}],"object":"chat.completion.chunk","timings":{"cache_n":0,"prompt_n":12,"prompt_ms":3.5,"predicted_n":7,"predicted_ms":70.25}}"#,
        r#"{"id":"","object":"text_completion","choices":[{"index":0,"text":" tok","logprobs":null,"finish_reason":""}],"model":"m","system_fingerprint":"3.3.6-native"}"#,
        r#"{"choices":null,"error":null,"usage":null}"#,
        r#"{"error":{"message":"boom","code":500}}"#,
        r#"{"object":"error","message":"boom"}"#,
        r#"{}"#,
    ] {
        let (fast, slow) = both(text);
        assert!(fast.is_some(), "fast path declined {text}");
        assert_eq!(fast, slow, "{text}");
    }
}

#[test]
fn what_serde_rejects_the_fast_path_declines() {
    for text in [
        r#"{"choices":[{"text":"a"}],}"#,
        r#"{"usage":{"prompt_tokens":1,"prompt_tokens":2}}"#,
        r#"{"usage":{"prompt_tokens":-1}}"#,
        r#"{"usage":{"prompt_tokens":1.5}}"#,
        r#"{"usage":{"prompt_tokens":01}}"#,
        r#"{"usage":{"prompt_tokens":18446744073709551616}}"#,
        r#"{"choices":[{"text":"a	b"}]}"#,
        r#"{"choices":[{"text":"a\qb"}]}"#,
        r#"{"choices":[null]}"#,
        r#"{"choices":{"text":"a"}}"#,
        r#"{"created":1.}"#,
        r#"{"created":-}"#,
        r#"{"x":nul}"#,
        r#"{"x":[1,]}"#,
        r#"{} {}"#,
        r#"[1,2]"#,
    ] {
        let (fast, slow) = both(text);
        assert!(slow.is_none(), "serde accepted {text}");
        assert!(fast.is_none(), "fast path accepted {text}");
    }
}

fn ws() -> impl Strategy<Value = String> {
    prop_oneof![4 => Just(String::new()), 1 => "[ \t\r\n]{1,2}"]
}

/// A JSON string, sometimes with escapes (`\u` ones included).
fn string() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-z ]{0,6}".prop_map(|s| format!("\"{s}\"")),
        "[a-z \"\\\\\n\t/\u{1}\u{e9}\u{1F600}]{0,6}"
            .prop_map(|s| serde_json::to_string(&s).unwrap()),
        Just(r#""\u00e9\/""#.to_owned()),
    ]
}

fn number() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<u64>().prop_map(|n| n.to_string()),
        (0u64..100).prop_map(|n| n.to_string()),
        any::<i64>().prop_map(|n| n.to_string()),
        any::<f64>().prop_map(|n| n.to_string()),
        Just("1e5".to_owned()),
        Just("-0.5E-2".to_owned()),
        Just("18446744073709551616".to_owned()),
    ]
}

fn scalar() -> impl Strategy<Value = String> {
    prop_oneof![
        string(),
        number(),
        Just("null".to_owned()),
        Just("true".to_owned()),
        Just("false".to_owned()),
    ]
}

/// Any value, nested a little.
fn junk() -> impl Strategy<Value = String> {
    scalar().prop_recursive(3, 12, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..3).prop_map(|v| format!("[{}]", v.join(","))),
            prop::collection::vec((string(), inner), 0..3).prop_map(|v| {
                let fields: Vec<String> = v.into_iter().map(|(k, x)| format!("{k}:{x}")).collect();
                format!("{{{}}}", fields.join(","))
            }),
        ]
    })
}

/// An object with some of `keys` (each value from its strategy, or junk), in any order.
fn object(fields: Vec<(&'static str, BoxedStrategy<String>)>) -> BoxedStrategy<String> {
    let per_field: Vec<_> = fields
        .into_iter()
        .map(|(key, value)| {
            (0u8..4, prop_oneof![6 => value, 1 => junk()], ws())
                .prop_map(move |(times, v, w)| {
                    // Usually once; sometimes absent or repeated.
                    let n = [1, 1, 0, 2][times as usize];
                    vec![format!("{w}\"{key}\"{w}:{w}{v}{w}"); n]
                })
                .boxed()
        })
        .collect();
    (per_field, any::<prop::sample::Index>())
        .prop_map(|(parts, rot)| {
            let mut all: Vec<String> = parts.into_iter().flatten().collect();
            if !all.is_empty() {
                let k = rot.index(all.len());
                all.rotate_left(k);
            }
            format!("{{{}}}", all.join(","))
        })
        .boxed()
}

fn opt_text() -> BoxedStrategy<String> {
    prop_oneof![string(), Just("null".to_owned())].boxed()
}

fn chunk() -> impl Strategy<Value = String> {
    let delta = object(vec![
        ("content", opt_text()),
        ("reasoning_content", opt_text()),
        ("reasoning", opt_text()),
        ("role", opt_text()),
    ]);
    let choice = object(vec![
        ("index", number().boxed()),
        ("text", opt_text()),
        ("delta", prop_oneof![delta, Just("null".to_owned())].boxed()),
        ("logprobs", junk().boxed()),
        ("finish_reason", opt_text()),
    ]);
    let choices = prop_oneof![
        prop::collection::vec(choice, 0..3).prop_map(|v| format!("[{}]", v.join(","))),
        Just("null".to_owned()),
    ];
    let count = || prop_oneof![number(), Just("null".to_owned())].boxed();
    let details = prop_oneof![
        object(vec![("cached_tokens", count())]),
        Just("null".to_owned()),
    ];
    let usage = prop_oneof![
        object(vec![
            ("prompt_tokens", count()),
            ("completion_tokens", count()),
            ("total_tokens", count()),
            ("prompt_tokens_details", details.boxed()),
        ]),
        Just("null".to_owned()),
    ];
    let timings = prop_oneof![
        object(vec![
            ("prompt_n", count()),
            ("predicted_n", count()),
            ("predicted_ms", number().boxed()),
        ]),
        Just("null".to_owned()),
    ];
    let top = object(vec![
        ("id", string().boxed()),
        ("timings", timings.boxed()),
        (
            "object",
            prop_oneof![string(), Just("\"error\"".to_owned())].boxed(),
        ),
        ("choices", choices.boxed()),
        ("usage", usage.boxed()),
        (
            "error",
            prop_oneof![3 => Just("null".to_owned()), 1 => junk()].boxed(),
        ),
    ]);
    (top, ws(), ws()).prop_map(|(t, a, b)| format!("{a}{t}{b}"))
}

/// The generated chunks must mostly reach the fast path, or the
/// agreement properties below would prove little.
#[test]
fn generated_chunks_mostly_take_the_fast_path() {
    let mut runner = proptest::test_runner::TestRunner::deterministic();
    let strategy = chunk();
    let (mut fast_hits, mut serde_ok) = (0, 0);
    for _ in 0..500 {
        let text = strategy.new_tree(&mut runner).unwrap().current();
        let (fast, slow) = both(&text);
        fast_hits += usize::from(fast.is_some());
        serde_ok += usize::from(slow.is_some());
    }
    assert!(
        fast_hits * 4 >= serde_ok,
        "fast {fast_hits} of {serde_ok} valid"
    );
    assert!(serde_ok >= 100, "only {serde_ok} of 500 valid");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2_000))]

    #[test]
    fn lowest_special_flag_is_the_first_special_byte(bytes in any::<[u8; 8]>()) {
        let first = bytes.iter().position(|&c| c == b'"' || c == b'\\' || c < 0x20);
        let special = super::special_bytes(u64::from_le_bytes(bytes));
        prop_assert_eq!(first.unwrap_or(8), (special.trailing_zeros() / 8) as usize);
    }

    #[test]
    fn fast_path_agrees_with_serde(text in chunk()) {
        let (fast, slow) = both(&text);
        if fast.is_some() {
            prop_assert_eq!(fast, slow, "{}", text);
        }
    }

    // A chunk read after another (its opening remembered) reads as it
    // does alone: equal openings, different ones, and damaged ones.
    #[test]
    fn a_remembered_opening_changes_nothing(first in chunk(), second in chunk(), cut in any::<prop::sample::Index>(), byte in any::<u8>()) {
        let now = Instant::now();
        let mut opening = super::Opening::default();
        let mut scratch = empty_event(now);
        let _ = super::parse(&first, &mut scratch, &mut opening);
        // The second chunk as is, and with the first's opening and its own rest.
        let spliced = format!("{}{}", String::from_utf8_lossy(&opening.bytes), second.trim_start().trim_start_matches('{'));
        let mut damaged = spliced.clone().into_bytes();
        let at = cut.index(damaged.len());
        damaged[at] = byte;
        let damaged = String::from_utf8(damaged).unwrap_or_default();
        for text in [&second, &spliced, &damaged, &first] {
            let mut remembered = opening.clone();
            let mut with = empty_event(now);
            let with = super::parse(text, &mut with, &mut remembered).map(|e| (e, with));
            let mut alone = empty_event(now);
            let alone = super::parse(text, &mut alone, &mut super::Opening::default()).map(|e| (e, alone));
            prop_assert_eq!(with, alone, "{}", text);
        }
    }

    #[test]
    fn damaged_chunks_are_never_misread(text in chunk(), cut in any::<prop::sample::Index>(), byte in any::<u8>()) {
        let mut bytes = text.into_bytes();
        let at = cut.index(bytes.len());
        bytes[at] = byte;
        if let Ok(text) = String::from_utf8(bytes) {
            let (fast, slow) = both(&text);
            if fast.is_some() {
                prop_assert_eq!(fast, slow, "{}", text);
            }
        }
    }
}
