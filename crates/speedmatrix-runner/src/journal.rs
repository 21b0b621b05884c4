//! The append-only run journal: one JSON document per line, flushed and
//! fsynced as each record is written, so a crash, Ctrl-C or a dead server
//! loses at most the cell that was running.

use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::RunnerError;

/// Where a journal stops being readable: everything before it was kept.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CorruptTail {
    /// 1-based line number of the first unreadable line.
    pub line: usize,
    /// Byte offset where the unreadable part starts (the kept prefix's length).
    pub offset: u64,
    /// Bytes dropped from the end of the file.
    pub dropped_bytes: u64,
    /// Why the line could not be read.
    pub reason: String,
    /// Where [`Journal::resume`] saved the dropped bytes before cutting them
    /// off, so nothing is lost without a trace.
    pub saved_to: Option<PathBuf>,
}

/// The records of a journal and, if its end was damaged, where.
#[derive(Debug)]
pub struct JournalContents<T> {
    /// Records of the valid prefix, in order.
    pub records: Vec<T>,
    /// The damaged tail, if any.
    pub corrupt_tail: Option<CorruptTail>,
}

/// An open journal file that records are appended to.
#[derive(Debug)]
pub struct Journal {
    file: File,
    path: PathBuf,
}

impl Journal {
    /// Creates a new, empty journal; fails if the file already exists.
    pub fn create(path: &Path) -> Result<Journal, RunnerError> {
        let file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(path)
            .map_err(|source| RunnerError::Journal {
                path: path.to_owned(),
                action: "create",
                source,
            })?;
        Ok(Journal {
            file,
            path: path.to_owned(),
        })
    }

    /// Opens the journal at `path` to add records after whatever it holds, creating it when
    /// missing (a study's journal, whose reader keeps every readable line).
    pub fn open_append(path: &Path) -> Result<Journal, RunnerError> {
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .map_err(|source| RunnerError::Journal {
                path: path.to_owned(),
                action: "open",
                source,
            })?;
        Ok(Journal {
            file,
            path: path.to_owned(),
        })
    }

    /// Opens an existing journal to continue it: reads the valid prefix,
    /// cuts off a damaged tail (returned so the caller can report it) and
    /// positions new records after the last good one.
    pub fn resume<T: DeserializeOwned>(
        path: &Path,
    ) -> Result<(Journal, JournalContents<T>), RunnerError> {
        let io_err = |action: &'static str| {
            let path = path.to_owned();
            move |source| RunnerError::Journal {
                path,
                action,
                source,
            }
        };
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)
            .map_err(io_err("open"))?;
        let mut contents = read_records(&mut file).map_err(io_err("read"))?;
        if let Some(tail) = &mut contents.corrupt_tail {
            let saved = damaged_tail_path(path);
            file.seek(SeekFrom::Start(tail.offset))
                .map_err(io_err("read"))?;
            let mut bytes = Vec::new();
            file.read_to_end(&mut bytes).map_err(io_err("read"))?;
            std::fs::write(&saved, &bytes).map_err(io_err("save the damaged tail of"))?;
            tail.saved_to = Some(saved);
            file.set_len(tail.offset).map_err(io_err("truncate"))?;
            file.sync_data().map_err(io_err("sync"))?;
        }
        file.seek(SeekFrom::End(0)).map_err(io_err("seek"))?;
        Ok((
            Journal {
                file,
                path: path.to_owned(),
            },
            contents,
        ))
    }

    /// Appends one record as a line, cleaned of secrets and control characters
    /// (`speedmatrix_client::redact`), and makes it durable before returning.
    pub fn append<T: Serialize>(&mut self, record: &T) -> Result<(), RunnerError> {
        let text = serde_json::to_string(record).map_err(|e| RunnerError::Journal {
            path: self.path.clone(),
            action: "serialize a record for",
            source: std::io::Error::other(e),
        })?;
        let mut line = speedmatrix_client::redact::clean(&text)
            .into_owned()
            .into_bytes();
        line.push(b'\n');
        let io_err = |source| RunnerError::Journal {
            path: self.path.clone(),
            action: "write",
            source,
        };
        self.file.write_all(&line).map_err(io_err)?;
        self.file.flush().map_err(io_err)?;
        self.file.sync_data().map_err(io_err)
    }

    /// The journal's path.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// Where the damaged tail of the journal at `path` is kept: next to it, with
/// `.damaged-tail` appended to its name.
fn damaged_tail_path(path: &Path) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_owned();
    name.push(".damaged-tail");
    path.with_file_name(name)
}

/// Reads a journal file's records without changing it.
pub(crate) fn read_file<T: DeserializeOwned>(
    path: &Path,
) -> Result<JournalContents<T>, RunnerError> {
    let mut file = File::open(path).map_err(|source| RunnerError::Journal {
        path: path.to_owned(),
        action: "open",
        source,
    })?;
    read_records(&mut file).map_err(|source| RunnerError::Journal {
        path: path.to_owned(),
        action: "read",
        source,
    })
}

pub(crate) fn read_records<T: DeserializeOwned, R: Read>(
    reader: R,
) -> std::io::Result<JournalContents<T>> {
    let mut reader = BufReader::new(reader);
    let mut records = Vec::new();
    let mut offset: u64 = 0;
    let mut line = Vec::new();
    let mut line_no = 0;
    loop {
        line.clear();
        let n = reader.read_until(b'\n', &mut line)?;
        if n == 0 {
            return Ok(JournalContents {
                records,
                corrupt_tail: None,
            });
        }
        line_no += 1;
        let parsed = if line.last() != Some(&b'\n') {
            Err("the line is incomplete (no newline): the writer stopped mid-record".to_owned())
        } else {
            serde_json::from_slice::<T>(&line).map_err(|e| e.to_string())
        };
        match parsed {
            Ok(record) => {
                records.push(record);
                offset += n as u64;
            }
            Err(reason) => {
                let mut rest = Vec::new();
                reader.read_to_end(&mut rest)?;
                return Ok(JournalContents {
                    records,
                    corrupt_tail: Some(CorruptTail {
                        line: line_no,
                        offset,
                        dropped_bytes: (n + rest.len()) as u64,
                        reason,
                        saved_to: None,
                    }),
                });
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde::Deserialize;

    #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
    struct Rec {
        n: u32,
        s: String,
    }

    fn tmp(name: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("speedmatrix-journal-{}-{name}", std::process::id()));
        let _ = std::fs::remove_file(&dir);
        dir
    }

    #[test]
    fn append_then_read_back() {
        let path = tmp("roundtrip");
        let mut j = Journal::create(&path).unwrap();
        for n in 0..3 {
            j.append(&Rec {
                n,
                s: format!("r{n}"),
            })
            .unwrap();
        }
        let c: JournalContents<Rec> = read_file(&path).unwrap();
        assert_eq!(c.records.len(), 3);
        assert_eq!(
            c.records[2],
            Rec {
                n: 2,
                s: "r2".into()
            }
        );
        assert!(c.corrupt_tail.is_none());
        assert!(Journal::create(&path).is_err(), "create must not clobber");
        std::fs::remove_file(&path).unwrap();
    }

    #[test]
    fn resume_cuts_a_torn_tail_and_appends_after_it() {
        let path = tmp("torn");
        let mut j = Journal::create(&path).unwrap();
        j.append(&Rec {
            n: 1,
            s: "a".into(),
        })
        .unwrap();
        drop(j);
        let mut f = OpenOptions::new().append(true).open(&path).unwrap();
        f.write_all(b"{\"n\":2,\"s\":\"b").unwrap();
        drop(f);
        let (mut j, c) = Journal::resume::<Rec>(&path).unwrap();
        assert_eq!(c.records.len(), 1);
        let tail = c.corrupt_tail.unwrap();
        assert_eq!(tail.line, 2);
        assert_eq!(tail.dropped_bytes, 13);
        let saved = tail.saved_to.unwrap();
        assert_eq!(std::fs::read(&saved).unwrap(), b"{\"n\":2,\"s\":\"b");
        std::fs::remove_file(saved).unwrap();
        j.append(&Rec {
            n: 3,
            s: "c".into(),
        })
        .unwrap();
        let c: JournalContents<Rec> = read_file(&path).unwrap();
        assert_eq!(c.records.iter().map(|r| r.n).collect::<Vec<_>>(), [1, 3]);
        assert!(c.corrupt_tail.is_none());
        std::fs::remove_file(&path).unwrap();
    }

    proptest! {
        #[test]
        fn any_damage_keeps_a_valid_prefix(count in 1usize..8, cut in 0usize..400, junk in proptest::collection::vec(any::<u8>(), 0..40)) {
            let recs: Vec<Rec> = (0..count as u32).map(|n| Rec { n, s: "x".repeat(n as usize) }).collect();
            let mut bytes = Vec::new();
            for r in &recs {
                bytes.extend(serde_json::to_vec(r).unwrap());
                bytes.push(b'\n');
            }
            let cut = cut.min(bytes.len());
            bytes.truncate(cut);
            bytes.extend(&junk);
            let c: JournalContents<Rec> = read_records(&bytes[..]).unwrap();
            prop_assert!(c.records.len() <= recs.len() + junk.len());
            for (got, want) in c.records.iter().zip(&recs) {
                prop_assert_eq!(got, want);
            }
            if let Some(t) = c.corrupt_tail {
                prop_assert_eq!(t.offset + t.dropped_bytes, bytes.len() as u64);
            }
        }
    }
}
