//! `speedmatrix prompt`: prompts of an exact token count, for this or any other tool.

use std::io::{self, Write};
use std::process::ExitCode;

use anyhow::Context;
use speedmatrix_units::Tokens;
use speedmatrix_workload::{
    Api, CacheKey, ChatOverhead, Prompt, PromptBuilder, Tokenizer, WorkloadError,
};

use crate::cmd::UsageError;

/// Flags of `speedmatrix prompt`.
#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:\n  \
    speedmatrix prompt --tokens 16k > prompt.txt\n  \
    speedmatrix prompt --tokenizer Qwen/Qwen3-8B --tokens 8192 --count 4 --json\n  \
    speedmatrix prompt --tokenizer ./model --tokens 4k --api chat --chat-overhead 9")]
pub(crate) struct Args {
    /// Tokenizer: `bundled`, a tokenizer.json, a model folder, or a Hugging Face
    /// id (`org/name[@revision]`) already in the local cache (HF_HUB_CACHE or
    /// HF_HOME/hub); nothing is downloaded.
    #[arg(long, default_value = "bundled")]
    tokenizer: String,

    /// Prompt tokens as the server counts them (`16k` = 16,384), BOS and, for
    /// chat, template tokens included.
    #[arg(long)]
    tokens: Tokens,

    /// Seed of the text: the same seed gives the same prompts.
    #[arg(long, default_value_t = 0)]
    seed: u64,

    /// The API the prompt is for: `completions` (a text prompt) or `chat` (one
    /// user message; needs --chat-overhead).
    #[arg(long, value_enum, default_value_t = Api::Completions)]
    api: Api,

    /// Tokens the server's chat template adds around one user message
    /// (measure: prompt_tokens reported for a one-message chat minus the
    /// message's own tokens).
    #[arg(long)]
    chat_overhead: Option<Tokens>,

    /// How many prompts, each unique from its first tokens.
    #[arg(long, default_value_t = 1)]
    count: u64,

    /// One JSON object per line: {"tokens", "api", "seed", "index", "tokenizer", "text"}.
    /// Without it the texts are printed one after another, each followed by a
    /// newline.
    #[arg(long)]
    json: bool,
}

/// One line of `--json` output.
#[derive(serde::Serialize)]
struct JsonLine<'a> {
    tokens: Tokens,
    api: Api,
    seed: u64,
    index: u64,
    tokenizer: &'a str,
    text: &'a str,
}

/// Runs `speedmatrix prompt`.
pub(crate) async fn run(args: Args) -> anyhow::Result<ExitCode> {
    let overhead = match (args.api, args.chat_overhead) {
        (Api::Chat, None) => {
            return Err(UsageError(
                "--api chat needs --chat-overhead: the tokens the server's chat template adds \
                 (its reported prompt_tokens for a one-message chat minus the message's tokens)"
                    .to_owned(),
            )
            .into());
        }
        (Api::Chat, Some(k)) => Some(ChatOverhead(k)),
        (Api::Completions, _) => None,
    };
    let tokenizer = Tokenizer::load(&args.tokenizer).map_err(usage_or_failure)?;
    let name = tokenizer.name().to_owned();
    let builder = PromptBuilder::new(tokenizer);
    let mut out = io::BufWriter::new(io::stdout().lock());
    for index in 0..args.count {
        let key = CacheKey::unique(0, index, 0);
        let prompt = match overhead {
            Some(o) => builder.chat_prompt(args.tokens, args.seed, &key, o),
            None => builder.prompt(args.tokens, args.seed, &key),
        }
        .map_err(usage_or_failure)?;
        let written = write_prompt(&mut out, &prompt, &args, index, &name);
        if is_broken_pipe(&written) {
            return Ok(ExitCode::SUCCESS);
        }
        written.context("writing to stdout")?;
    }
    let flushed = out.flush();
    if !is_broken_pipe(&flushed) {
        flushed.context("writing to stdout")?;
    }
    Ok(ExitCode::SUCCESS)
}

fn write_prompt(
    out: &mut impl Write,
    prompt: &Prompt,
    args: &Args,
    index: u64,
    tokenizer: &str,
) -> io::Result<()> {
    if args.json {
        let line = JsonLine {
            tokens: prompt.expected_tokens,
            api: prompt.api,
            seed: args.seed,
            index,
            tokenizer,
            text: &prompt.text,
        };
        serde_json::to_writer(&mut *out, &line)?;
    } else {
        out.write_all(prompt.text.as_bytes())?;
    }
    out.write_all(b"\n")
}

/// Reading `| head` closes the pipe early; that is not a failure.
fn is_broken_pipe(result: &io::Result<()>) -> bool {
    matches!(result, Err(e) if e.kind() == io::ErrorKind::BrokenPipe)
}

/// Input the user can fix (a tokenizer that is not there, too few tokens)
/// exits 2; anything else exits 1.
fn usage_or_failure(err: WorkloadError) -> anyhow::Error {
    match err {
        WorkloadError::UnknownSource { .. }
        | WorkloadError::NotCached { .. }
        | WorkloadError::Read { .. }
        | WorkloadError::Parse { .. }
        | WorkloadError::TooShort { .. }
        | WorkloadError::TooLong { .. } => UsageError(err.to_string()).into(),
        other => other.into(),
    }
}
