//! `speedmatrix sim`: run the simulated inference server until Ctrl-C.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::process::ExitCode;

use anyhow::Context;
use speedmatrix_sim::{Profile, RTX3090_QWEN35_4B_FP8, SimError, SimServer};
use speedmatrix_units::group_thousands;

use crate::cmd::UsageError;
use crate::out::say;

/// Flags of `speedmatrix sim`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// Built-in profile (rtx3090-qwen3.5-4b-fp8, tiny, free-running) or a JSON profile file.
    #[arg(long, value_name = "NAME|FILE", default_value = RTX3090_QWEN35_4B_FP8)]
    profile: String,

    /// TCP port to listen on; 0 picks a free one.
    #[arg(long, default_value_t = 0)]
    port: u16,

    /// Address to listen on.
    #[arg(long, default_value_t = IpAddr::V4(Ipv4Addr::LOCALHOST))]
    host: IpAddr,

    /// Run the clock this many times faster than real time (overrides the profile's time_scale).
    #[arg(long, value_name = "FACTOR")]
    time_scale: Option<f64>,

    /// Count prompt tokens with this tokenizer (`bundled`, a tokenizer.json, a model folder or a
    /// cached Hugging Face id) instead of the profile's.
    #[arg(long, value_name = "SOURCE")]
    tokenizer: Option<String>,

    /// Print the profile as JSON and exit: a starting point for your own profile file.
    #[arg(long)]
    print_profile: bool,
}

/// Runs `speedmatrix sim`.
pub(crate) async fn run(args: Args) -> anyhow::Result<ExitCode> {
    let mut profile = Profile::load(&args.profile).map_err(usage)?;
    if let Some(scale) = args.time_scale {
        profile.time_scale = scale;
        profile.validate().map_err(usage)?;
    }
    if let Some(tokenizer) = args.tokenizer {
        profile.tokenizer = Some(tokenizer);
    }
    if args.print_profile {
        say!("{}", serde_json::to_string_pretty(&profile)?);
        return Ok(ExitCode::SUCCESS);
    }
    let addr = SocketAddr::new(args.host, args.port);
    let custom_tokenizer = profile.tokenizer.is_some();
    let sim = SimServer::start(profile, addr).await.map_err(|e| match e {
        SimError::InvalidProfile { .. } | SimError::BadFault { .. } => usage(e),
        SimError::Tokenizer(_) if custom_tokenizer => usage(e),
        other => anyhow::Error::new(other),
    })?;
    let p = sim.profile();
    say!(
        "speedmatrix sim: profile `{}`, model `{}`, max_model_len {}",
        p.name,
        p.served_model_name,
        p.max_model_len
    );
    say!(
        "KV cache: {} blocks × {} tokens = {} tokens; max_num_seqs {}; prefix caching {}",
        group_thousands(p.num_gpu_blocks.into()),
        p.block_size,
        group_thousands(u64::from(p.num_gpu_blocks) * u64::from(p.block_size)),
        p.max_num_seqs,
        if p.enable_prefix_caching { "on" } else { "off" }
    );
    say!(
        "listening on {}  (OpenAI API under {}/v1; Ctrl-C stops)",
        sim.url(),
        sim.url()
    );
    tokio::signal::ctrl_c()
        .await
        .context("waiting for Ctrl-C")?;
    sim.shutdown().await;
    Ok(ExitCode::SUCCESS)
}

fn usage(err: SimError) -> anyhow::Error {
    anyhow::Error::new(UsageError(err.to_string()))
}
