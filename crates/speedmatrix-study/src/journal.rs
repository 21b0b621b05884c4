//! The study's journal: one JSON line per point that ended, so a resumed
//! study skips what is done.

use serde::{Deserialize, Serialize};

use crate::StudyError;

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
    },
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
}

impl PointRecord {
    /// The record as one JSON line (no newline).
    pub fn to_line(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }

    /// Every record of a journal's text; a torn last line (a study killed
    /// while writing) is dropped, any other bad line is an error.
    pub fn parse_all(text: &str) -> Result<Vec<PointRecord>, StudyError> {
        let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
        let mut out = Vec::with_capacity(lines.len());
        for (i, line) in lines.iter().enumerate() {
            match serde_json::from_str(line) {
                Ok(r) => out.push(r),
                Err(_) if i + 1 == lines.len() && !text.ends_with('\n') => {}
                Err(e) => {
                    return Err(StudyError::Journal {
                        line: i + 1,
                        reason: e.to_string(),
                    });
                }
            }
        }
        Ok(out)
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
        };
        let b = PointRecord {
            point: "kv=auto".into(),
            outcome: PointOutcome::Failed {
                reason: "exited with status 1 before it was ready".into(),
                log_tail: vec!["error: no such profile".into()],
            },
            seconds: 0.3,
        };
        let text = format!("{}\n{}\n{{\"point\": \"to", a.to_line(), b.to_line());
        assert_eq!(PointRecord::parse_all(&text).unwrap(), [a.clone(), b]);
        let bad = format!("not json\n{}\n", a.to_line());
        assert!(PointRecord::parse_all(&bad).is_err());
    }
}
