//! The study's journal: one JSON line per point that ended, so a resumed
//! study skips what is done.

use serde::{Deserialize, Serialize};

/// How a point ended.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "status")]
pub enum PointOutcome {
    /// Its matrix ran; the run's exit code (0: every cell measured).
    Measured {
        /// `speedmatrix run`'s exit code.
        exit_code: i32,
    },
    /// Its server did not come up, died, or the run could not start.
    Failed {
        /// What happened.
        reason: String,
        /// The last lines of the server's log.
        log_tail: Vec<String>,
        /// The lines of the server's log that say why (the last few with an error's words,
        /// else its last lines). Absent in journals written before it was kept.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        error_lines: Vec<String>,
    },
    /// The study was stopped (a signal) while the point ran. Never journaled: a resumed
    /// study runs the point again, and its run continues from its own journal.
    Interrupted,
}

/// One journal line.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PointRecord {
    /// The point's name (its folder).
    pub point: String,
    /// How it ended.
    #[serde(flatten)]
    pub outcome: PointOutcome,
    /// Seconds from its server's start to its stop.
    pub seconds: f64,
    /// The GPUs its server was given (`--gpus`); empty when the study gave none, and in
    /// journals written before it was kept.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gpus: Vec<String>,
}

impl PointRecord {
    /// The record as one JSON line (no newline).
    pub fn to_line(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }

    /// Every record of a journal's text that reads, and where the others are: a torn last line
    /// (a study killed while writing) is dropped quietly, any other bad line is named and
    /// skipped, never taken for the end of the journal.
    pub fn parse_all(text: &str) -> JournalRead {
        let lines: Vec<(usize, &str)> = text
            .lines()
            .enumerate()
            .filter(|(_, l)| !l.trim().is_empty())
            .collect();
        let mut read = JournalRead::default();
        for (i, (number, line)) in lines.iter().enumerate() {
            match serde_json::from_str::<PointRecord>(line) {
                Ok(r) if r.outcome != PointOutcome::Interrupted => read.records.push(r),
                Ok(_) => read
                    .bad_lines
                    .push((number + 1, "an interrupted point is never journaled".into())),
                Err(_) if i + 1 == lines.len() && !text.ends_with('\n') => {}
                Err(e) => read.bad_lines.push((number + 1, e.to_string())),
            }
        }
        read
    }
}

/// A study journal as read: its good records, and each line that did not read.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct JournalRead {
    /// The records, in order.
    pub records: Vec<PointRecord>,
    /// Each unreadable line (1-based) and why, besides a torn last line.
    pub bad_lines: Vec<(usize, String)>,
}

impl JournalRead {
    /// The bad lines in a sentence, `None` when there are none.
    pub fn warning(&self, journal: &str) -> Option<String> {
        let (first, why) = self.bad_lines.first()?;
        Some(format!(
            "{journal}: {} line(s) could not be read and were skipped (first: line {first}: {why}); the {} good records were kept",
            self.bad_lines.len(),
            self.records.len()
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip_and_a_torn_tail_is_dropped() {
        let a = PointRecord {
            point: "kv=fp8".into(),
            outcome: PointOutcome::Measured { exit_code: 0 },
            seconds: 12.5,
            gpus: vec!["0".into(), "1".into()],
        };
        let b = PointRecord {
            point: "kv=auto".into(),
            outcome: PointOutcome::Failed {
                reason: "exited with status 1 before it was ready".into(),
                log_tail: vec!["error: no such profile".into()],
                error_lines: vec!["error: no such profile".into()],
            },
            seconds: 0.3,
            gpus: Vec::new(),
        };
        let text = format!("{}\n{}\n{{\"point\": \"to", a.to_line(), b.to_line());
        let read = PointRecord::parse_all(&text);
        assert_eq!(read.records, [a.clone(), b]);
        assert!(read.bad_lines.is_empty(), "a torn tail is no bad line");
        // A garbage line is named and skipped; the records after it are kept.
        let bad = format!("not json\n{}\n", a.to_line());
        let read = PointRecord::parse_all(&bad);
        assert_eq!(read.records, [a]);
        assert_eq!(read.bad_lines.len(), 1);
        assert_eq!(read.bad_lines[0].0, 1);
        assert!(read.warning("study.jsonl").unwrap().contains("line 1"));
    }

    #[test]
    fn journals_written_before_gpus_and_error_lines_still_read() {
        let old = r#"{"point":"kv=auto","status":"failed","reason":"exited","log_tail":["boom"],"seconds":1.0}"#;
        let read = PointRecord::parse_all(&format!("{old}\n"));
        assert!(read.bad_lines.is_empty(), "{:?}", read.bad_lines);
        let r = &read.records[0];
        assert!(r.gpus.is_empty());
        assert!(
            matches!(&r.outcome, PointOutcome::Failed { error_lines, .. } if error_lines.is_empty())
        );
        // And a record without them is written as before.
        assert_eq!(r.to_line(), old);
    }
}
