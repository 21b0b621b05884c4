//! Stream chunks in each engine's format: what vLLM, SGLang, llama.cpp, TGI,
//! Ollama and a usage-dropping proxy put on the wire for the same tokens.
//!
//! The shapes follow each engine's source (field names, which chunks carry
//! `usage`, where `finish_reason` goes, what marks the end); see
//! [`Dialect`] for the differences that matter to a client's token count.

use bytes::Bytes;
use serde_json::{Value, json};

use crate::Dialect;
use crate::api::{Api, ResponseMeta, UsageJson};
use crate::engine::FinishReason;

/// How a stream reports usage and counts, as the request asked and the dialect allows.
#[derive(Debug, Clone, Copy)]
pub(crate) struct UsageMode {
    /// `stream_options.include_usage`: a final usage chunk.
    pub(crate) include: bool,
    /// `stream_options.continuous_usage_stats`: cumulative usage on every chunk.
    pub(crate) continuous: bool,
    /// llama.cpp's `timings_per_token`: `timings` on every chunk.
    pub(crate) timings: bool,
}

/// How the dialect groups tokens into events.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Grouping {
    /// One event per batch of tokens that arrived together; an event even
    /// when the batch's text is held back as incomplete UTF-8 (empty text).
    Batch,
    /// One event per batch, but none while all its text is held back.
    BatchHoldingBack,
    /// One event per token, with empty text while a character is incomplete (TGI).
    Token,
}

/// The chunk writer of one response.
#[derive(Debug)]
pub(crate) struct Wire {
    dialect: Dialect,
    meta: ResponseMeta,
    usage: UsageMode,
    prompt_tokens: u32,
    /// Output tokens of a chat answer streamed as reasoning before its content.
    reasoning_tokens: u32,
    /// Those tokens are answer text between `<think>` tags (no reasoning parser).
    reasoning_inline: bool,
}

impl Wire {
    pub(crate) fn new(
        dialect: Dialect,
        meta: ResponseMeta,
        requested: UsageMode,
        prompt_tokens: u32,
    ) -> Wire {
        let continuous = requested.continuous
            && match dialect {
                Dialect::Vllm => true,
                Dialect::Sglang => meta.api == Api::Chat,
                _ => false,
            };
        let usage = UsageMode {
            include: requested.include,
            continuous,
            timings: requested.timings && dialect == Dialect::Llamacpp,
        };
        Wire {
            dialect,
            meta,
            usage,
            prompt_tokens,
            reasoning_tokens: 0,
            reasoning_inline: false,
        }
    }

    /// The first `n` output tokens of a chat answer stream as reasoning.
    pub(crate) fn with_reasoning(mut self, n: u32, inline: bool) -> Wire {
        self.reasoning_tokens = n;
        self.reasoning_inline = inline;
        self
    }

    /// The response id, for injected faults.
    pub(crate) fn id(&self) -> &str {
        &self.meta.id
    }

    pub(crate) fn grouping(&self) -> Grouping {
        match self.dialect {
            Dialect::Tgi => Grouping::Token,
            Dialect::Llamacpp | Dialect::Ollama => Grouping::BatchHoldingBack,
            Dialect::Vllm | Dialect::Sglang | Dialect::OpenaiProxy => Grouping::Batch,
        }
    }

    /// The chat role chunk some engines send before the first token.
    pub(crate) fn role_chunk(&self) -> Option<Bytes> {
        if self.meta.api != Api::Chat {
            return None;
        }
        match self.dialect {
            Dialect::Vllm | Dialect::OpenaiProxy => {
                let usage = self.usage.continuous.then(|| self.usage_json(0));
                Some(self.meta.chunk("", true, None, usage))
            }
            Dialect::Sglang => Some(self.event(json!({
                "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""},
                             "logprobs": null, "finish_reason": null, "matched_stop": null}],
            }))),
            Dialect::Llamacpp => Some(self.event(json!({
                "choices": [{"finish_reason": null, "index": 0,
                             "delta": {"role": "assistant", "content": null}}],
            }))),
            // TGI names the role on every chunk, Ollama on its first one.
            Dialect::Tgi | Dialect::Ollama => None,
        }
    }

    /// One chunk of `text` after `tokens` output tokens in all.
    pub(crate) fn text_chunk(&self, text: &str, tokens: u32, first: bool) -> Bytes {
        let chat = self.meta.api == Api::Chat;
        match self.dialect {
            Dialect::Vllm | Dialect::OpenaiProxy => {
                let usage = self.usage.continuous.then(|| self.usage_json(tokens));
                if chat && self.reasoning_tokens > 0 && tokens <= self.reasoning_tokens {
                    if !self.reasoning_inline {
                        return self.meta.reasoning_chunk(text, usage);
                    }
                    // The tags are tokens of their own, the first and the last.
                    let text = match tokens {
                        1 => "<think>",
                        t if t == self.reasoning_tokens => "</think>",
                        _ => text,
                    };
                    return self.meta.chunk(text, false, None, usage);
                }
                self.meta.chunk(text, false, None, usage)
            }
            Dialect::Sglang => {
                let mut v = if chat {
                    json!({"choices": [{"index": 0, "delta": {"content": text}, "logprobs": null,
                                        "finish_reason": null, "matched_stop": null}]})
                } else {
                    json!({"choices": [{"index": 0, "text": text, "logprobs": null,
                                        "finish_reason": null, "matched_stop": null}]})
                };
                if self.usage.continuous {
                    v["usage"] = json!(self.usage_json(tokens));
                }
                self.event(v)
            }
            Dialect::Llamacpp => {
                let mut v = if chat {
                    json!({"choices": [{"finish_reason": null, "index": 0,
                                        "delta": {"content": text}}]})
                } else {
                    json!({"choices": [{"text": text, "index": 0, "logprobs": null,
                                        "finish_reason": null}]})
                };
                if self.usage.timings {
                    v["timings"] = self.timings(tokens);
                }
                self.event(v)
            }
            Dialect::Tgi => {
                let v = if chat {
                    json!({"choices": [{"index": 0, "delta": {"role": "assistant", "content": text},
                                        "logprobs": null, "finish_reason": null}], "usage": null})
                } else {
                    json!({"choices": [{"index": 0, "text": text, "logprobs": null,
                                        "finish_reason": ""}]})
                };
                self.event(v)
            }
            Dialect::Ollama => {
                if chat {
                    let delta = if first {
                        json!({"role": "assistant", "content": text})
                    } else {
                        json!({"content": text})
                    };
                    self.event(json!({"choices": [{"index": 0, "delta": delta,
                                                   "finish_reason": null}]}))
                } else {
                    let mut v = json!({"choices": [{"text": text, "index": 0,
                                                    "finish_reason": null}]});
                    // Ollama's completions put an all-zero usage on every chunk.
                    if self.usage.include {
                        v["usage"] = json!(UsageJson::new(0, 0));
                    }
                    self.event(v)
                }
            }
        }
    }

    /// The end of the stream: the last text (empty when none is left), the
    /// finish reason, the usage chunk where the dialect sends one, `[DONE]`.
    pub(crate) fn finish(&self, text: &str, reason: FinishReason, tokens: u32) -> Vec<Bytes> {
        let chat = self.meta.api == Api::Chat;
        let total = self.usage_json(tokens);
        let mut out = Vec::new();
        let usage_chunk = |out: &mut Vec<Bytes>, extra: Option<(&str, Value)>| {
            if self.usage.include {
                let mut v = json!({"choices": [], "usage": total});
                if let Some((key, value)) = extra {
                    v[key] = value;
                }
                out.push(self.event(v));
            }
        };
        match self.dialect {
            Dialect::Vllm | Dialect::OpenaiProxy => {
                let usage = self.usage.continuous.then_some(total);
                out.push(self.meta.chunk(text, false, Some(reason), usage));
                if self.usage.include {
                    out.push(self.meta.usage_chunk(total));
                }
            }
            Dialect::Sglang => {
                if !text.is_empty() {
                    out.push(self.text_chunk(text, tokens, false));
                }
                let body = if chat {
                    json!({"index": 0, "delta": {}, "logprobs": null,
                           "finish_reason": reason.as_str(), "matched_stop": null})
                } else {
                    json!({"index": 0, "text": "", "logprobs": null,
                           "finish_reason": reason.as_str(), "matched_stop": null})
                };
                out.push(self.event(json!({"choices": [body]})));
                usage_chunk(&mut out, None);
            }
            Dialect::Llamacpp => {
                if !text.is_empty() {
                    out.push(self.text_chunk(text, tokens, false));
                }
                if chat {
                    out.push(
                        self.event(json!({"choices": [{"finish_reason": reason.as_str(),
                                                           "index": 0, "delta": {}}]})),
                    );
                    usage_chunk(&mut out, Some(("timings", self.timings(tokens))));
                } else {
                    // llama.cpp's completions always end with usage and timings.
                    out.push(self.event(json!({
                        "choices": [{"text": "", "index": 0, "logprobs": null,
                                     "finish_reason": reason.as_str()}],
                        "usage": total, "timings": self.timings(tokens),
                    })));
                }
            }
            Dialect::Tgi => {
                // The last token's own event carries the finish reason (and, in
                // completions, the usage); it was held back for this.
                let reason = match reason {
                    FinishReason::Length => "length",
                    FinishReason::Stop if chat => "stop",
                    FinishReason::Stop => "eos_token",
                };
                if chat {
                    out.push(self.event(json!({
                        "choices": [{"index": 0, "delta": {"role": "assistant", "content": text},
                                     "logprobs": null, "finish_reason": reason}],
                        "usage": null,
                    })));
                    usage_chunk(&mut out, None);
                } else {
                    out.push(self.event(json!({
                        "choices": [{"index": 0, "text": text, "logprobs": null,
                                     "finish_reason": reason}],
                        "usage": total,
                    })));
                }
            }
            Dialect::Ollama => {
                if !text.is_empty() {
                    out.push(self.text_chunk(text, tokens, false));
                }
                let body = if chat {
                    json!({"index": 0, "delta": {}, "finish_reason": reason.as_str()})
                } else {
                    json!({"text": "", "index": 0, "finish_reason": reason.as_str()})
                };
                out.push(self.event(json!({"choices": [body]})));
                usage_chunk(&mut out, None);
            }
        }
        out.push(Bytes::from_static(b"data: [DONE]\n\n"));
        out
    }

    fn usage_json(&self, tokens: u32) -> UsageJson {
        UsageJson::new(self.prompt_tokens, tokens)
    }

    /// llama.cpp's `timings`: `predicted_n` is the running output count.
    fn timings(&self, tokens: u32) -> Value {
        json!({"cache_n": 0, "prompt_n": self.prompt_tokens, "prompt_ms": 1.0,
               "predicted_n": tokens, "predicted_ms": f64::from(tokens) * 10.0})
    }

    /// `data: {...}` with the dialect's identity fields added to `fields`.
    fn event(&self, mut fields: Value) -> Bytes {
        let chat = self.meta.api == Api::Chat;
        let object = if chat {
            "chat.completion.chunk"
        } else {
            "text_completion"
        };
        let (id, fingerprint) = match self.dialect {
            Dialect::Tgi => (String::new(), Some("3.3.6-native")),
            Dialect::Ollama => (self.meta.id.clone(), Some("fp_ollama")),
            Dialect::Llamacpp => (self.meta.id.clone(), Some("b6500-speedmatrix-sim")),
            _ => (self.meta.id.clone(), None),
        };
        fields["id"] = json!(id);
        fields["object"] = json!(object);
        fields["created"] = json!(self.meta.created);
        fields["model"] = json!(self.meta.model);
        if let Some(f) = fingerprint {
            fields["system_fingerprint"] = json!(f);
        }
        let mut out = b"data: ".to_vec();
        let _ = serde_json::to_writer(&mut out, &fields);
        out.extend_from_slice(b"\n\n");
        Bytes::from(out)
    }
}

/// Splits `pending` bytes into the text of its complete characters and
/// the incomplete rest, which stays in `pending`.
pub(crate) fn complete_text(pending: &mut Vec<u8>) -> String {
    let valid = match std::str::from_utf8(pending) {
        Ok(_) => pending.len(),
        Err(e) => e.valid_up_to(),
    };
    let rest = pending.split_off(valid);
    String::from_utf8(std::mem::replace(pending, rest)).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(chunk: &Bytes) -> Value {
        let text = std::str::from_utf8(chunk).unwrap();
        serde_json::from_str(text.strip_prefix("data: ").unwrap().trim_end()).unwrap()
    }

    fn wire(dialect: Dialect, api: Api) -> Wire {
        let requested = UsageMode {
            include: true,
            continuous: true,
            timings: true,
        };
        Wire::new(dialect, ResponseMeta::new(api, 1, "m"), requested, 5)
    }

    #[test]
    fn each_dialect_counts_as_its_engine_does() {
        let tgi = parse(&wire(Dialect::Tgi, Api::Completions).text_chunk(" a", 1, true));
        assert_eq!(tgi["choices"][0]["finish_reason"], "");
        assert_eq!(tgi["id"], "");
        let llama = parse(&wire(Dialect::Llamacpp, Api::Chat).text_chunk(" a", 7, true));
        assert_eq!(llama["timings"]["predicted_n"], 7);
        assert!(llama.get("usage").is_none());
        let ollama = parse(&wire(Dialect::Ollama, Api::Completions).text_chunk(" a", 7, true));
        assert_eq!(ollama["usage"]["completion_tokens"], 0);
        let proxy = parse(&wire(Dialect::OpenaiProxy, Api::Chat).text_chunk(" a", 7, true));
        assert!(proxy.get("usage").is_none());
        let sglang_chat = parse(&wire(Dialect::Sglang, Api::Chat).text_chunk(" a", 7, true));
        assert_eq!(sglang_chat["usage"]["completion_tokens"], 7);
        let sglang_cmpl = parse(&wire(Dialect::Sglang, Api::Completions).text_chunk(" a", 7, true));
        assert!(sglang_cmpl.get("usage").is_none());
        let vllm = parse(&wire(Dialect::Vllm, Api::Completions).text_chunk(" a", 7, true));
        assert_eq!(vllm["usage"]["completion_tokens"], 7);
    }

    #[test]
    fn every_dialect_ends_with_its_usage_and_done() {
        for dialect in [
            Dialect::Vllm,
            Dialect::Sglang,
            Dialect::Llamacpp,
            Dialect::Tgi,
            Dialect::Ollama,
            Dialect::OpenaiProxy,
        ] {
            for api in [Api::Completions, Api::Chat] {
                let end = wire(dialect, api).finish("", FinishReason::Length, 9);
                assert_eq!(end.last().unwrap().as_ref(), b"data: [DONE]\n\n");
                let usage: Vec<Value> = end[..end.len() - 1]
                    .iter()
                    .map(parse)
                    .filter_map(|v| v.get("usage").filter(|u| !u.is_null()).cloned())
                    .collect();
                let last = usage
                    .last()
                    .unwrap_or_else(|| panic!("{dialect:?} {api:?}"));
                assert_eq!(last["completion_tokens"], 9, "{dialect:?} {api:?}");
            }
        }
    }

    #[test]
    fn incomplete_characters_stay_pending() {
        let mut pending = " caf\u{e9}".as_bytes().to_vec();
        let tail = pending.pop().unwrap();
        assert_eq!(complete_text(&mut pending), " caf");
        assert_eq!(pending.len(), 1);
        pending.push(tail);
        assert_eq!(complete_text(&mut pending), "\u{e9}");
        assert!(pending.is_empty());
    }
}
