//! `cargo xtask gen-tokenizer`: trains the bundled tokenizer from its recipe.

use std::time::Instant;

use anyhow::{Context, bail};
use speedmatrix_workload::{BpeRecipe, Tokenizer};

use crate::util;

/// Flags of `cargo xtask gen-tokenizer`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// Only check that retraining reproduces the committed asset; write nothing.
    #[arg(long)]
    check: bool,
}

/// The asset, relative to the workspace root.
const ASSET: &str = "crates/speedmatrix-workload/assets/bundled-tokenizer.json";

pub(crate) fn run(args: &Args) -> anyhow::Result<()> {
    let recipe = BpeRecipe::BUNDLED;
    eprintln!(
        "training a byte-level BPE: vocab {}, {} MiB of generated text, seed {:#x}",
        recipe.vocab_size,
        recipe.corpus_bytes >> 20,
        recipe.seed
    );
    let started = Instant::now();
    let json = recipe.train_json()?;
    let elapsed = started.elapsed();
    let parsed = tokenizers::Tokenizer::from_bytes(json.as_bytes())
        .map_err(|e| anyhow::anyhow!("the trained tokenizer does not load: {e}"))?;
    let tok = Tokenizer::from_tokenizers(parsed, "trained");
    let path = util::project_root().join(ASSET);
    if args.check {
        let committed = std::fs::read_to_string(&path)
            .with_context(|| format!("reading {}", path.display()))?;
        if committed != json {
            bail!("{ASSET} differs from what its recipe trains; run `cargo xtask gen-tokenizer`");
        }
        println!("{ASSET} matches its recipe ({} bytes)", json.len());
        return Ok(());
    }
    std::fs::write(&path, &json).with_context(|| format!("writing {}", path.display()))?;
    println!(
        "wrote {ASSET}: {} tokens, {} bytes, trained in {:.1} s",
        tok.vocab_size(),
        json.len(),
        elapsed.as_secs_f64()
    );
    Ok(())
}
