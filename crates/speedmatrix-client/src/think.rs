//! Reasoning left in the answer text as `<think>…</think>` (a server run without a
//! reasoning parser), split from the answer as it streams: the tags may arrive cut across
//! chunks, so a possible part of a tag is held back until the next chunk shows what it is.

use speedmatrix_units::ReasoningParser;

use crate::StreamEvent;

const OPEN: &str = "<think>";
const CLOSE: &str = "</think>";

/// Where a stream is in its answer text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Nothing but whitespace yet (only `think` waits here for the opening tag).
    Start,
    /// Inside the reasoning, until `</think>`; `fresh` while nothing of it has come, when an
    /// opening tag may still be sent (and is dropped).
    Thinking { fresh: bool },
    /// The answer: everything after is content.
    Answer,
}

/// Splits one stream's answer text into reasoning and content by its `<think>` tags.
///
/// ```
/// use speedmatrix_client::ThinkSplitter;
/// use speedmatrix_units::ReasoningParser;
///
/// let mut s = ThinkSplitter::new(ReasoningParser::Think);
/// assert_eq!(s.split("<thi"), (String::new(), String::new())); // held: maybe a tag
/// assert_eq!(s.split("nk>Hmm.</th"), ("Hmm.".to_owned(), String::new()));
/// assert_eq!(s.split("ink>\n\nYes."), (String::new(), "\n\nYes.".to_owned()));
/// ```
#[derive(Debug, Clone)]
pub struct ThinkSplitter {
    state: State,
    /// Text held back: a possible start of a tag at the end of what came so far.
    held: String,
}

impl ThinkSplitter {
    /// A splitter for one stream; `None` for [`ReasoningParser::None`] (nothing to split).
    pub fn for_parser(parser: ReasoningParser) -> Option<ThinkSplitter> {
        (parser != ReasoningParser::None).then(|| ThinkSplitter::new(parser))
    }

    /// A splitter for one stream with this parser's rule.
    pub fn new(parser: ReasoningParser) -> ThinkSplitter {
        let state = match parser {
            ReasoningParser::None => State::Answer,
            ReasoningParser::Think => State::Start,
            // The opening tag is optional: the template may have opened it.
            ReasoningParser::DeepseekR1 => State::Thinking { fresh: true },
        };
        ThinkSplitter {
            state,
            held: String::new(),
        }
    }

    /// The next piece of answer text → (reasoning, content) it settles; text that may be
    /// the start of a tag is held until a later piece (or [`finish`](Self::finish)).
    pub fn split(&mut self, text: &str) -> (String, String) {
        let mut text = std::mem::take(&mut self.held) + text;
        let (mut reasoning, mut content) = (String::new(), String::new());
        loop {
            match self.state {
                State::Answer => {
                    content.push_str(&text);
                    return (reasoning, content);
                }
                State::Start => {
                    let body = text.trim_start();
                    if body.len() < OPEN.len() && OPEN.starts_with(body) {
                        // Only whitespace, or maybe the tag: wait for more.
                        self.held = text;
                        return (reasoning, content);
                    }
                    if let Some(rest) = body.strip_prefix(OPEN) {
                        text = rest.to_owned();
                        self.state = State::Thinking { fresh: false };
                    } else {
                        self.state = State::Answer;
                    }
                }
                State::Thinking { fresh } => {
                    if fresh {
                        // A leading opening tag is dropped (DeepSeek-R1 may send it).
                        if OPEN.starts_with(text.as_str()) && text.len() < OPEN.len() {
                            self.held = text;
                            return (reasoning, content);
                        }
                        if let Some(rest) = text.strip_prefix(OPEN) {
                            text = rest.to_owned();
                        }
                        self.state = State::Thinking { fresh: false };
                    }
                    if let Some(at) = text.find(CLOSE) {
                        reasoning.push_str(&text[..at]);
                        text = text[at + CLOSE.len()..].to_owned();
                        self.state = State::Answer;
                        continue;
                    }
                    let keep = partial_suffix(&text, CLOSE);
                    reasoning.push_str(&text[..text.len() - keep]);
                    self.held = text[text.len() - keep..].to_owned();
                    return (reasoning, content);
                }
            }
        }
    }

    /// The stream ended: what was held, as what it turned out to be (reasoning while the
    /// tag was open, content otherwise).
    pub fn finish(&mut self) -> (String, String) {
        let held = std::mem::take(&mut self.held);
        match self.state {
            State::Thinking { .. } => (held, String::new()),
            State::Start | State::Answer => (String::new(), held),
        }
    }

    /// Moves the reasoning in `event`'s answer text to its reasoning text.
    pub fn apply(&mut self, event: &mut StreamEvent) {
        if event.content.is_empty() {
            return;
        }
        let (reasoning, content) = self.split(&event.content);
        event.reasoning_content.push_str(&reasoning);
        event.content = content;
    }
}

/// The length of the longest end of `text` that is a proper start of `tag`.
fn partial_suffix(text: &str, tag: &str) -> usize {
    (1..tag.len().min(text.len() + 1))
        .rev()
        .find(|&n| {
            text.is_char_boundary(text.len() - n) && tag.starts_with(&text[text.len() - n..])
        })
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Every piece through the splitter, then the end: the (reasoning, content) of the whole.
    fn whole(parser: ReasoningParser, pieces: &[&str]) -> (String, String) {
        let mut s = ThinkSplitter::new(parser);
        let (mut r, mut c) = (String::new(), String::new());
        let mut parts: Vec<(String, String)> = pieces.iter().map(|p| s.split(p)).collect();
        parts.push(s.finish());
        for p in parts {
            r.push_str(&p.0);
            c.push_str(&p.1);
        }
        (r, c)
    }

    #[test]
    fn think_needs_the_opening_tag_and_deepseek_r1_does_not() {
        let t = ReasoningParser::Think;
        let r1 = ReasoningParser::DeepseekR1;
        let both = |r: &str, c: &str| (r.to_owned(), c.to_owned());
        assert_eq!(whole(t, &["\n<think>", "a", "</think>b"]), both("a", "b"));
        assert_eq!(
            whole(t, &["Hello <think>x</think>"]),
            both("", "Hello <think>x</think>")
        );
        assert_eq!(whole(t, &["<", "t"]), both("", "<t"));
        assert_eq!(whole(t, &["<think>never closed"]), both("never closed", ""));
        assert_eq!(whole(r1, &["a", "b</thi", "nk>", "c"]), both("ab", "c"));
        assert_eq!(whole(r1, &["<think>a</think>"]), both("a", ""));
        assert_eq!(whole(r1, &["no tag at all"]), both("no tag at all", ""));
        assert_eq!(whole(r1, &["a</"]), both("a</", ""));
    }

    #[test]
    fn a_tag_is_held_only_while_it_may_be_one() {
        let mut s = ThinkSplitter::new(ReasoningParser::DeepseekR1);
        assert_eq!(s.split("abc</"), ("abc".to_owned(), String::new()));
        assert_eq!(s.split("b>"), ("</b>".to_owned(), String::new()));
        assert_eq!(s.split("é</think>é"), ("é".to_owned(), "é".to_owned()));
    }

    proptest! {
        /// However the text is cut into chunks, the split is the one of the whole text,
        /// and no text is lost or made up.
        #[test]
        fn chunking_never_changes_the_split(
            reasoning in "[a-z<>/ é]{0,20}",
            answer in "[a-z<>/ é]{0,20}",
            cuts in proptest::collection::vec(0usize..60, 0..8),
            parser in prop_oneof![Just(ReasoningParser::Think), Just(ReasoningParser::DeepseekR1)],
        ) {
            prop_assume!(!reasoning.contains(CLOSE));
            let text = format!("<think>{reasoning}</think>{answer}");
            let mut at: Vec<usize> = cuts
                .into_iter()
                .map(|c| c.min(text.len()))
                .filter(|&c| text.is_char_boundary(c))
                .collect();
            at.sort_unstable();
            let mut pieces = Vec::new();
            let mut from = 0;
            for c in at.into_iter().chain([text.len()]) {
                pieces.push(&text[from..c]);
                from = c;
            }
            let (r, c) = whole(parser, &pieces);
            prop_assert_eq!(&r, &reasoning);
            prop_assert_eq!(&c, &answer);
            prop_assert_eq!(whole(parser, &[text.as_str()]), (reasoning, answer));
        }
    }
}
