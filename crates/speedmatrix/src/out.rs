//! The one way this program writes text to a terminal: every line goes through
//! `speedmatrix_client::redact::clean` (secrets out, control characters out), whatever it
//! holds — a sentence of ours, a server's error body, its model id. The print lints are on
//! for the rest of the crate, so nothing else prints.
#![allow(clippy::print_stdout, clippy::print_stderr)]

use std::io::Write as _;

/// Writes `text` to standard output, cleaned.
pub(crate) fn stdout(text: &str) {
    let mut out = std::io::stdout().lock();
    // A closed pipe (`| head`) is not an error worth a panic.
    let _ = out.write_all(speedmatrix_client::redact::clean(text).as_bytes());
    let _ = out.flush();
}

/// Writes `text` to standard error, cleaned.
pub(crate) fn stderr(text: &str) {
    let mut err = std::io::stderr().lock();
    let _ = err.write_all(speedmatrix_client::redact::clean(text).as_bytes());
}

/// Standard error for the log (`-v`), each write cleaned like every other line.
pub(crate) struct LogWriter;

impl std::io::Write for LogWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let text = String::from_utf8_lossy(buf);
        std::io::stderr()
            .lock()
            .write_all(speedmatrix_client::redact::clean(&text).as_bytes())?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        std::io::stderr().flush()
    }
}

/// `println!` through the cleaning path.
macro_rules! say {
    () => { $crate::out::stdout("\n") };
    ($($arg:tt)*) => { $crate::out::stdout(&(format!($($arg)*) + "\n")) };
}

/// `print!` through the cleaning path.
macro_rules! say_raw {
    ($($arg:tt)*) => { $crate::out::stdout(&format!($($arg)*)) };
}

/// `eprintln!` through the cleaning path.
macro_rules! tell {
    ($($arg:tt)*) => { $crate::out::stderr(&(format!($($arg)*) + "\n")) };
}

pub(crate) use {say, say_raw, tell};
