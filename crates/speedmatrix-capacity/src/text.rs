//! The capacity prediction as plain text for a terminal: the model and GPU, vLLM's memory
//! budget term by term with each term's basis, the rules applied for the release, the KV
//! layout, the grid of cells with the rule that decided each, the GPU catalog, and a startup
//! log's figures beside the prediction. Pure: the caller prints.

use std::fmt::Write as _;

use speedmatrix_units::{Engine, group_thousands};

use crate::{
    CapacityGrid, CellVerdict, Gpu, GridSpec, LoggedFigure, ModelConfig, Prediction, TermKind,
    VllmPrediction,
};

/// A startup log's figures beside the prediction: all of them, and (vLLM) the layout figures
/// beside the arithmetic from the log's own available KV memory.
#[derive(Debug, Clone, serde::Serialize)]
pub struct BesideLog {
    /// Every figure the log has, beside the full prediction.
    pub full: Vec<LoggedFigure>,
    /// The layout figures beside the arithmetic from the log's available KV memory.
    pub given_memory: Option<Vec<LoggedFigure>>,
    /// Whose log it is.
    pub engine: Engine,
}

/// The log's figures as text.
pub fn beside_log(b: &BesideLog) -> String {
    let mut out = String::new();
    let table = |out: &mut String, title: &str, figures: &[LoggedFigure]| {
        let _ = writeln!(out, "\n{title}");
        if figures.is_empty() {
            let _ = writeln!(out, "  (the log has none of these figures)");
        }
        for f in figures {
            let error = f
                .error_pct()
                .map_or_else(|| "—".to_owned(), |e| format!("{e:+.2} %"));
            let _ = writeln!(
                out,
                "  {:<34} predicted {:>12.2}  logged {:>12.2}  error {error}",
                f.figure, f.predicted, f.logged
            );
        }
    };
    table(&mut out, "Startup log beside the full prediction:", &b.full);
    match &b.given_memory {
        Some(g) => table(
            &mut out,
            "Startup log beside the layout arithmetic from its own available KV memory:",
            g,
        ),
        None if b.engine == Engine::Vllm => {
            let _ = writeln!(
                out,
                "\n(the log has no \"Available KV cache memory\" line: no given-memory check)"
            );
        }
        None => {}
    }
    out
}

/// One line per GPU: what `--gpu` accepts and what the predictors use.
pub fn catalog(gpus: &[Gpu]) -> String {
    let mut out = String::from(
        "key                    memory (runtime)      GB/s  bf16/fp8/fp4 dense TFLOPS  SMs  generation  board W  name\n",
    );
    let tf = |v: Option<f64>| v.map_or_else(|| "-".to_owned(), |v| format!("{v:.0}"));
    for g in gpus {
        let generation = g
            .architecture
            .map_or_else(|| "-".to_owned(), |a| format!("{a:?}").to_ascii_lowercase());
        let _ = writeln!(
            out,
            "{:<22} {:>9.2} GiB {:<9} {:>5} {:>26}  {:>3}  {:<10}  {:>7}  {}",
            g.key,
            g.memory.as_gib_f64(),
            if g.memory_estimated {
                "(est.)"
            } else {
                "(seen)"
            },
            g.bandwidth_gb_s
                .map_or_else(|| "-".to_owned(), |b| format!("{b:.0}")),
            format!(
                "{}/{}/{}",
                tf(g.dense_tflops.bf16),
                tf(g.dense_tflops.fp8),
                tf(g.dense_tflops.fp4)
            ),
            g.multiprocessors
                .map_or_else(|| "-".to_owned(), |n| n.to_string()),
            generation,
            g.board_power_w
                .map_or_else(|| "-".to_owned(), |w| format!("{w:.0}")),
            g.name
        );
    }
    out.push_str(
        "\n(seen): the total a runtime printed on that GPU; (est.): derived, e.g. nvidia-smi's \
         total less 0.5 GiB. SMs: NVIDIA streaming multiprocessors; generation: which tensor-core \
         instructions kernels can use; board W: the vendor's maximum board power, which bounds the \
         tensor throughput long matrix products sustain. Every figure's source: `--json` or speedmatrix-capacity's data/gpus.json.\n",
    );
    out
}

/// The prediction and its grid.
pub fn prediction(
    model: &ModelConfig,
    gpu: &Gpu,
    prediction: &Prediction,
    grid: &CapacityGrid,
    spec: &GridSpec,
) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "Model: {} ({} layers: {})",
        display_arch(model),
        model.layers.len(),
        layer_summary(model)
    );
    let _ = writeln!(
        out,
        "GPU: {} — {} visible to the runtime ({}{})",
        gpu.name,
        gpu.memory,
        if gpu.memory_estimated {
            "estimated: "
        } else {
            ""
        },
        gpu.memory_source
    );
    if gpu.unified_memory {
        let _ = writeln!(
            out,
            "  unified memory: CPU and GPU share it, so vLLM checks the requested share against \
             the memory the OS has available at startup, not the GPU's free memory; other \
             processes and the page cache count against it (DGX Spark recipes use \
             --gpu-memory-utilization 0.80-0.85)"
        );
    }
    match prediction {
        Prediction::Vllm(v) => vllm_breakdown(&mut out, v),
        Prediction::Sglang(s) => {
            let _ = writeln!(
                out,
                "\nSGLang: mem_fraction_static {:.3} ({})",
                s.mem_fraction_static, s.mem_fraction_basis
            );
            let _ = writeln!(
                out,
                "  free before weights {} (estimate), weights {}, rest {}",
                s.free_before_weights, s.weights, s.rest
            );
            let _ = writeln!(
                out,
                "  cell size {} B/token; max_total_num_tokens {}",
                group_thousands(s.cell_bytes),
                group_thousands(s.max_total_num_tokens)
            );
            if let Some(slots) = s.mamba_slots {
                let _ = writeln!(
                    out,
                    "  recurrent-state slots (max_mamba_cache_size): {slots}"
                );
            }
        }
        Prediction::LlamaCpp(l) => {
            let _ = writeln!(
                out,
                "\nllama.cpp: n_ctx {} ({} per slot × {} slots{}), KV {}",
                group_thousands(l.n_ctx),
                group_thousands(l.n_ctx_seq),
                l.n_parallel,
                if l.unified { ", unified" } else { "" },
                l.kv_bytes
            );
            if let Some(swa) = l.swa_cells {
                let _ = writeln!(
                    out,
                    "  sliding-window layers keep {} cells per stream (window + one ubatch)",
                    group_thousands(swa)
                );
            }
            if l.recurrent_bytes.get() > 0 {
                let _ = writeln!(
                    out,
                    "  recurrent states {} (f32, one per slot)",
                    l.recurrent_bytes
                );
            }
        }
    }
    if let Some(c) = &grid.comparison {
        let _ = writeln!(
            out,
            "\nMeasured vs predicted pool: {} vs {} tokens ({:+} tokens, {:+.1}%)",
            group_thousands(c.measured_tokens),
            group_thousands(c.predicted_tokens),
            c.difference_tokens,
            c.difference_pct
        );
        if let (Some(mb), Some(pb)) = (c.measured_blocks, c.predicted_blocks) {
            let _ = writeln!(
                out,
                "  blocks {mb} measured vs {pb} predicted; block size {:?} vs {:?}",
                c.measured_block_size, c.predicted_block_size
            );
        }
    }
    let _ = writeln!(
        out,
        "\nCells ({:?} capacity, max output {} tokens; ℓ = context + max output):",
        grid.source,
        group_thousands(spec.max_output.get())
    );
    table(&mut out, grid, spec);
    out
}

fn display_arch(model: &ModelConfig) -> String {
    if model.architecture.is_empty() {
        model.model_type.clone()
    } else {
        model.architecture.clone()
    }
}

fn layer_summary(model: &ModelConfig) -> String {
    model
        .layer_counts()
        .iter()
        .map(|(k, n)| format!("{n} {k:?}"))
        .collect::<Vec<_>>()
        .join(", ")
}

fn vllm_breakdown(out: &mut String, v: &VllmPrediction) {
    let b = &v.budget;
    let _ = writeln!(out, "\nvLLM memory budget (per GPU):");
    let _ = writeln!(
        out,
        "  requested = ceil({} × {}) = {}",
        b.device_total, b.utilization, b.requested
    );
    for (name, e) in [
        ("weights", &b.weights),
        ("activation peak", &b.activation_peak),
        ("non-torch", &b.non_torch),
        ("CUDA graphs", &b.cudagraph),
    ] {
        let tag = match e.kind {
            TermKind::Measured => "measured",
            TermKind::Derived => "derived",
            TermKind::Estimated => "ESTIMATE",
            TermKind::Given => "given",
        };
        let _ = writeln!(
            out,
            "  − {name:<16} {:>10}  [{tag}] {}",
            e.bytes.to_string(),
            e.basis
        );
    }
    let _ = writeln!(
        out,
        "  = available KV  {:>10}  ({:?})",
        b.available_kv.to_string(),
        b.source
    );
    let _ = writeln!(out, "\nvLLM rules for v{}:", v.version);
    if let Some(assumed) = &v.version_assumption {
        let _ = writeln!(out, "  note: {assumed}");
    }
    for r in &v.rules {
        let replaced = r.rule.until.filter(|u| v.version.has(*u));
        let (mark, until) = match (r.applied, replaced) {
            (true, _) => ("applied", String::new()),
            (false, Some(u)) => ("replaced", format!(" until v{u}")),
            (false, None) => ("not yet", String::new()),
        };
        let _ = writeln!(
            out,
            "  [{mark}] since v{}{until}: {} ({})",
            r.rule.since, r.rule.what, r.rule.source
        );
    }
    let l = &v.layout;
    let _ = writeln!(out, "\nKV layout:");
    for c in &l.layer_costs {
        match (c.bytes_per_token, c.state_bytes) {
            (Some(t), _) => {
                let _ = writeln!(
                    out,
                    "  {:>3} × {:?}: {} B per token per layer",
                    c.layers,
                    c.kind,
                    group_thousands(t)
                );
            }
            (_, Some(s)) => {
                let _ = writeln!(
                    out,
                    "  {:>3} × {:?}: {} B state per sequence per layer",
                    c.layers,
                    c.kind,
                    group_thousands(s)
                );
            }
            _ => {}
        }
    }
    let _ = writeln!(
        out,
        "  block size {} tokens: {}",
        l.block_size, l.block_size_reason
    );
    let _ = writeln!(
        out,
        "  {} groups ({}), {} padding layers; page {} B, {} B per block",
        l.groups.len(),
        l.groups
            .iter()
            .map(|g| format!("{:?}×{}", g.kind, g.layers))
            .collect::<Vec<_>>()
            .join(", "),
        l.padding_layers,
        group_thousands(l.page_bytes),
        group_thousands(l.bytes_per_block)
    );
    let _ = writeln!(
        out,
        "  num_gpu_blocks {} (block 0 is the null block)",
        group_thousands(v.num_blocks)
    );
    let _ = writeln!(
        out,
        "  blocks per request of max_model_len {}: {}",
        group_thousands(v.max_model_len),
        v.blocks_per_request_at_max_len
    );
    let _ = writeln!(
        out,
        "  log: \"GPU KV cache size: {} tokens\" ({:?})",
        group_thousands(v.kv_cache_size_tokens),
        v.log_formula
    );
    let _ = writeln!(
        out,
        "  log: \"Maximum concurrency for {} tokens per request: {:.2}x\"",
        group_thousands(v.max_model_len),
        v.max_concurrency
    );
    if !v.startup.fits {
        let _ = writeln!(
            out,
            "  vLLM would NOT start: one max-length request needs {} but {} is usable; estimated maximum model length {}",
            v.startup.needed,
            v.startup.usable,
            group_thousands(v.startup.estimated_max_model_len)
        );
    }
}

fn table(out: &mut String, grid: &CapacityGrid, spec: &GridSpec) {
    let _ = write!(out, "| Context |");
    for n in &spec.concurrencies {
        let _ = write!(out, " {n} |");
    }
    let _ = writeln!(out);
    let _ = writeln!(out, "|---|{}", "---|".repeat(spec.concurrencies.len()));
    let width = spec.concurrencies.len().max(1);
    for row in grid.cells.chunks(width) {
        let Some(first) = row.first() else { continue };
        let _ = write!(out, "| {} |", first.context);
        for cell in row {
            let _ = write!(out, " {} |", cell_text(cell));
        }
        let _ = writeln!(out);
    }
    let _ = writeln!(out, "\nDeciding rules:");
    let mut seen = Vec::new();
    for c in &grid.cells {
        if !seen.contains(&c.rule) {
            seen.push(c.rule);
            let _ = writeln!(
                out,
                "  {:?}: {} ({})",
                c.rule,
                c.rule.describe(),
                c.rule.unit()
            );
        }
    }
}

fn cell_text(cell: &CellVerdict) -> String {
    let state = if cell.fits { "Valid" } else { "Over capacity" };
    format!(
        "{state} ({}/{})",
        group_thousands(cell.needed),
        group_thousands(cell.limit)
    )
}
