//! A seeded generator of English-like text: the prompt source and the
//! training corpus of the bundled tokenizer.

use std::fmt::Write as _;

use crate::words::{
    ADJECTIVES, ADVERBS, CONJUNCTIONS, DETERMINERS, MONTHS, NOUNS, PLACE_SUFFIXES,
    PLURAL_DETERMINERS, PREPOSITIONS, PRONOUNS, SPEECH_VERBS, SYLLABLES, UNITS, VERBS,
};

/// SplitMix64: small, fast, and its output is fixed by this code alone.
///
/// The bundled tokenizer and every prompt must be reproducible from a seed
/// across dependency upgrades, so the generator's stream cannot depend on a
/// random-number crate's choice of algorithm.
#[derive(Debug, Clone)]
pub(crate) struct SplitMix64(u64);

impl SplitMix64 {
    pub(crate) fn new(seed: u64) -> Self {
        SplitMix64(seed)
    }

    pub(crate) fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        mix64(self.0)
    }

    /// A value in `0..n` (`n > 0`); the tiny modulo bias is irrelevant here.
    pub(crate) fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }

    /// True with probability `percent / 100`.
    pub(crate) fn chance(&mut self, percent: u64) -> bool {
        self.next_u64() % 100 < percent
    }

    pub(crate) fn pick<'a>(&mut self, list: &[&'a str]) -> &'a str {
        list[self.below(list.len())]
    }
}

/// The SplitMix64 finalizer: a bijection on `u64` that scatters its input.
pub(crate) fn mix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Deterministic, varied, English-like text from a seed.
///
/// Sentences mix common words, coined names, numbers, dates, prices and
/// punctuation, so a tokenizer sees text shaped like real prose rather than
/// one repeated word (repeated tokens distort prefix-cache and speculative
/// decoding paths in engines).
///
/// ```
/// use speedmatrix_workload::TextGenerator;
///
/// let mut a = TextGenerator::new(7);
/// let mut b = TextGenerator::new(7);
/// let (mut x, mut y) = (String::new(), String::new());
/// a.fill(&mut x, 500);
/// b.fill(&mut y, 500);
/// assert_eq!(x, y);
/// assert!(x.len() >= 500 && x.contains(' '));
/// ```
#[derive(Debug, Clone)]
pub struct TextGenerator {
    rng: SplitMix64,
    sentences_left_in_paragraph: usize,
}

impl TextGenerator {
    /// A generator whose output is fixed by `seed`.
    pub fn new(seed: u64) -> Self {
        TextGenerator {
            rng: SplitMix64::new(seed),
            sentences_left_in_paragraph: 0,
        }
    }

    /// Appends whole sentences to `out` until it holds at least `min_len` bytes.
    pub fn fill(&mut self, out: &mut String, min_len: usize) {
        while out.len() < min_len {
            self.push_sentence(out);
        }
    }

    /// Appends one sentence to `out`, preceded by a space or a paragraph break
    /// unless `out` is empty.
    pub fn push_sentence(&mut self, out: &mut String) {
        if !out.is_empty() {
            if self.sentences_left_in_paragraph == 0 {
                out.push_str("\n\n");
            } else {
                out.push(' ');
            }
        }
        if self.sentences_left_in_paragraph == 0 {
            self.sentences_left_in_paragraph = 3 + self.rng.below(6);
        }
        self.sentences_left_in_paragraph -= 1;
        let start = out.len();
        self.sentence_body(out);
        capitalize_at(out, start);
    }

    fn sentence_body(&mut self, out: &mut String) {
        match self.rng.below(12) {
            0 | 1 => {
                self.clause(out);
                out.push('.');
            }
            2 => {
                self.clause(out);
                out.push_str(", ");
                out.push_str(self.rng.pick(CONJUNCTIONS));
                out.push(' ');
                self.clause(out);
                out.push('.');
            }
            3 => self.dated_fact(out),
            4 => self.quotation(out),
            5 => self.question(out),
            6 => self.list_sentence(out),
            7 => self.measurement(out),
            8 => self.price(out),
            9 => self.timed(out),
            10 => {
                self.clause(out);
                out.push_str(" (");
                self.number_with_unit(out);
                out.push(')');
                out.push_str(if self.rng.chance(20) { "!" } else { "." });
            }
            _ => {
                self.clause(out);
                out.push_str("; ");
                self.clause(out);
                out.push('.');
            }
        }
    }

    /// Subject, verb and object, with optional modifiers.
    fn clause(&mut self, out: &mut String) {
        if self.rng.chance(25) {
            out.push_str(self.rng.pick(PRONOUNS));
        } else if self.rng.chance(25) {
            self.person(out);
        } else {
            self.noun_phrase(out);
        }
        out.push(' ');
        if self.rng.chance(20) {
            out.push_str(self.rng.pick(ADVERBS));
            out.push(' ');
        }
        out.push_str(&past(self.rng.pick(VERBS)));
        out.push(' ');
        self.noun_phrase(out);
        if self.rng.chance(55) {
            out.push(' ');
            out.push_str(self.rng.pick(PREPOSITIONS));
            out.push(' ');
            if self.rng.chance(30) {
                self.place(out);
            } else {
                self.noun_phrase(out);
            }
        }
    }

    fn noun_phrase(&mut self, out: &mut String) {
        let plural = self.rng.chance(25);
        if !plural {
            out.push_str(self.rng.pick(DETERMINERS));
            out.push(' ');
        } else if self.rng.chance(50) {
            out.push_str(self.rng.pick(PLURAL_DETERMINERS));
            out.push(' ');
        }
        if self.rng.chance(45) {
            out.push_str(self.rng.pick(ADJECTIVES));
            out.push(' ');
        }
        let noun = self.rng.pick(NOUNS);
        if plural {
            out.push_str(&plural_of(noun));
        } else {
            out.push_str(noun);
        }
    }

    fn name(&mut self, out: &mut String) {
        let start = out.len();
        for _ in 0..2 + self.rng.below(2) {
            out.push_str(self.rng.pick(SYLLABLES));
        }
        capitalize_at(out, start);
    }

    fn person(&mut self, out: &mut String) {
        self.name(out);
        if self.rng.chance(40) {
            out.push(' ');
            self.name(out);
        }
    }

    fn place(&mut self, out: &mut String) {
        self.name(out);
        out.push_str(self.rng.pick(PLACE_SUFFIXES));
    }

    fn year(&mut self) -> usize {
        1700 + self.rng.below(330)
    }

    fn number_with_unit(&mut self, out: &mut String) {
        let whole = self.rng.below(10_000);
        if self.rng.chance(30) {
            let _ = write!(out, "{whole}.{}", self.rng.below(100));
        } else {
            out.push_str(&speedmatrix_units::group_thousands(whole as u64));
        }
        out.push(' ');
        out.push_str(self.rng.pick(UNITS));
    }

    fn dated_fact(&mut self, out: &mut String) {
        out.push_str("in ");
        if self.rng.chance(50) {
            out.push_str(self.rng.pick(MONTHS));
            out.push(' ');
        }
        let year = self.year();
        let _ = write!(out, "{year}, ");
        self.clause(out);
        out.push('.');
    }

    fn quotation(&mut self, out: &mut String) {
        out.push('"');
        let start = out.len();
        self.clause(out);
        capitalize_at(out, start);
        out.push_str(if self.rng.chance(30) { "?\" " } else { ",\" " });
        self.person(out);
        out.push(' ');
        out.push_str(self.rng.pick(SPEECH_VERBS));
        out.push('.');
    }

    fn question(&mut self, out: &mut String) {
        out.push_str(if self.rng.chance(50) {
            "why did "
        } else {
            "did "
        });
        self.noun_phrase(out);
        out.push(' ');
        out.push_str(self.rng.pick(VERBS));
        out.push(' ');
        self.noun_phrase(out);
        out.push('?');
    }

    fn list_sentence(&mut self, out: &mut String) {
        self.person(out);
        out.push(' ');
        out.push_str(&past(self.rng.pick(VERBS)));
        out.push(' ');
        let items = 3 + self.rng.below(3);
        for i in 0..items {
            if i + 1 == items {
                out.push_str(", and ");
            } else if i > 0 {
                out.push_str(", ");
            }
            self.noun_phrase(out);
        }
        out.push('.');
    }

    fn measurement(&mut self, out: &mut String) {
        self.noun_phrase(out);
        out.push_str(" measured ");
        self.number_with_unit(out);
        out.push(' ');
        out.push_str(self.rng.pick(PREPOSITIONS));
        out.push(' ');
        self.place(out);
        out.push('.');
    }

    fn price(&mut self, out: &mut String) {
        self.person(out);
        let dollars = speedmatrix_units::group_thousands(self.rng.below(100_000) as u64);
        let cents = self.rng.below(100);
        let _ = write!(out, " paid ${dollars}.{cents:02} for ");
        self.noun_phrase(out);
        out.push('.');
    }

    fn timed(&mut self, out: &mut String) {
        let (hour, minute) = (1 + self.rng.below(12), self.rng.below(60));
        let half = if self.rng.chance(50) { "a.m." } else { "p.m." };
        let _ = write!(out, "at {hour}:{minute:02} {half} ");
        self.clause(out);
        out.push('.');
    }
}

/// Upper-cases the ASCII letter at byte `at`, if there is one.
fn capitalize_at(out: &mut String, at: usize) {
    if let Some(c) = out[at..].chars().next()
        && c.is_ascii_lowercase()
    {
        out.replace_range(at..at + 1, &c.to_ascii_uppercase().to_string());
    }
}

fn past(verb: &str) -> String {
    const IRREGULAR: &[(&str, &str)] = &[
        ("build", "built"),
        ("choose", "chose"),
        ("draw", "drew"),
        ("drive", "drove"),
        ("find", "found"),
        ("hold", "held"),
        ("keep", "kept"),
        ("leave", "left"),
        ("read", "read"),
        ("send", "sent"),
        ("teach", "taught"),
        ("write", "wrote"),
    ];
    if let Some((_, p)) = IRREGULAR.iter().find(|(v, _)| *v == verb) {
        return (*p).to_owned();
    }
    if verb.ends_with('e') {
        format!("{verb}d")
    } else if let Some(stem) = verb.strip_suffix('y')
        && !stem.ends_with(['a', 'e', 'o', 'u'])
    {
        format!("{stem}ied")
    } else {
        format!("{verb}ed")
    }
}

fn plural_of(noun: &str) -> String {
    match noun {
        "child" => "children".to_owned(),
        "people" => "people".to_owned(),
        _ if noun.ends_with(['s', 'x']) || noun.ends_with("ch") || noun.ends_with("sh") => {
            format!("{noun}es")
        }
        _ => match noun.strip_suffix('y') {
            Some(stem) if !stem.ends_with(['a', 'e', 'o', 'u']) => format!("{stem}ies"),
            _ => format!("{noun}s"),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inflections_follow_english_rules() {
        assert_eq!(past("carry"), "carried");
        assert_eq!(past("create"), "created");
        assert_eq!(past("play"), "played");
        assert_eq!(past("write"), "wrote");
        assert_eq!(plural_of("city"), "cities");
        assert_eq!(plural_of("day"), "days");
        assert_eq!(plural_of("church"), "churches");
        assert_eq!(plural_of("child"), "children");
    }

    #[test]
    fn different_seeds_give_different_text() {
        let (mut a, mut b) = (String::new(), String::new());
        TextGenerator::new(1).fill(&mut a, 2_000);
        TextGenerator::new(2).fill(&mut b, 2_000);
        assert_ne!(a, b);
    }

    #[test]
    fn text_is_varied_not_repetitive() {
        let mut text = String::new();
        TextGenerator::new(3).fill(&mut text, 50_000);
        let words: Vec<&str> = text.split_whitespace().collect();
        let distinct: std::collections::HashSet<&str> = words.iter().copied().collect();
        // Real prose of this length has well over a thousand distinct words.
        assert!(
            distinct.len() > 1_500,
            "only {} distinct words",
            distinct.len()
        );
        let most_common = words.iter().filter(|w| **w == "the").count();
        assert!(
            most_common * 10 < words.len(),
            "`the` is {most_common} of {}",
            words.len()
        );
        assert!(text.chars().any(|c| c.is_ascii_digit()));
        assert!(text.contains("\n\n") && text.contains('"') && text.contains('?'));
    }
}
