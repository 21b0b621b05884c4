//! `GET /metrics`: vLLM 0.32's Prometheus names, types and label sets for the metrics a
//! benchmark reads.

use std::fmt::Write;

use speedmatrix_engines::vllm;

use crate::engine::Snapshot;
use crate::profile::Profile;

fn py_bool(b: bool) -> &'static str {
    if b { "True" } else { "False" }
}

/// The Prometheus text exposition of the engine's state.
pub(crate) fn render(profile: &Profile, s: &Snapshot) -> String {
    let labels = format!(
        "engine=\"0\",model_name=\"{}\"",
        escape(&profile.served_model_name)
    );
    let mut out = String::with_capacity(4_096);
    let c = s.counters;
    let gauges: [(&str, &str, f64); 3] = [
        (
            vllm::RUNNING,
            "Number of requests in model execution batches.",
            s.running as f64,
        ),
        (
            vllm::WAITING,
            "Number of requests waiting to be processed.",
            s.waiting as f64,
        ),
        (
            vllm::KV_CACHE_USAGE,
            "KV-cache usage. 1 means 100 percent usage.",
            s.kv_cache_usage(),
        ),
    ];
    for (name, help, value) in gauges {
        metric(&mut out, name, help, "gauge", &labels, value);
    }
    let counters: [(&str, &str, u64); 5] = [
        (
            vllm::PREEMPTIONS,
            "Cumulative number of preemption from the engine.",
            c.preemptions,
        ),
        (
            vllm::PROMPT_TOKENS,
            "Number of prefill tokens processed.",
            c.prompt_tokens,
        ),
        (
            vllm::GENERATION_TOKENS,
            "Number of generation tokens processed.",
            c.generation_tokens,
        ),
        (
            vllm::PREFIX_CACHE_QUERIES,
            "Prefix cache queries, in terms of number of queried tokens.",
            c.prefix_queries,
        ),
        (
            vllm::PREFIX_CACHE_HITS,
            "Prefix cache hits, in terms of number of cached tokens.",
            c.prefix_hits,
        ),
    ];
    for (name, help, value) in counters {
        metric(&mut out, name, help, "counter", &labels, value as f64);
    }
    // vLLM's queue-time histogram, its sum and count (one +Inf bucket): the
    // queue's own record, for checking latencies measured from intended times.
    let _ = writeln!(
        out,
        "# HELP vllm:request_queue_time_seconds Histogram of time spent in WAITING phase for request."
    );
    let _ = writeln!(out, "# TYPE vllm:request_queue_time_seconds histogram");
    let _ = writeln!(
        out,
        "vllm:request_queue_time_seconds_bucket{{{labels},le=\"+Inf\"}} {:?}",
        c.queued_requests as f64
    );
    let _ = writeln!(
        out,
        "vllm:request_queue_time_seconds_count{{{labels}}} {:?}",
        c.queued_requests as f64
    );
    let _ = writeln!(
        out,
        "vllm:request_queue_time_seconds_sum{{{labels}}} {:?}",
        c.queue_time_ns as f64 / 1e9
    );
    if profile.num_speculative_tokens.is_some() {
        let spec: [(&str, &str, u64); 3] = [
            (
                vllm::SPEC_DRAFTS,
                "Number of spec decoding drafts.",
                c.spec_drafts,
            ),
            (
                vllm::SPEC_DRAFT_TOKENS,
                "Number of draft tokens.",
                c.spec_draft_tokens,
            ),
            (
                vllm::SPEC_ACCEPTED_TOKENS,
                "Number of accepted tokens.",
                c.spec_accepted_tokens,
            ),
        ];
        for (name, help, value) in spec {
            metric(&mut out, name, help, "counter", &labels, value as f64);
        }
    }
    let _ = writeln!(
        out,
        "# HELP vllm:request_success_total Count of successfully processed requests."
    );
    let _ = writeln!(out, "# TYPE vllm:request_success_total counter");
    for (reason, value) in [("stop", c.finished_stop), ("length", c.finished_length)] {
        let _ = writeln!(
            out,
            "vllm:request_success_total{{{labels},finished_reason=\"{reason}\"}} {:?}",
            value as f64
        );
    }
    if profile.capacity_api != crate::CapacityApi::Vllm {
        return out;
    }
    let _ = writeln!(
        out,
        "# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig"
    );
    let _ = writeln!(out, "# TYPE vllm:cache_config_info gauge");
    let _ = writeln!(
        out,
        "vllm:cache_config_info{{block_size=\"{}\",cache_dtype=\"auto\",calculate_kv_scales=\"False\",\
         cpu_offload_gb=\"0\",enable_prefix_caching=\"{}\",engine=\"0\",gpu_memory_utilization=\"0.9\",\
         is_attention_free=\"False\",kv_cache_size_tokens=\"{}\",num_cpu_blocks=\"None\",num_gpu_blocks=\"{}\",\
         num_gpu_blocks_override=\"None\",prefix_caching_hash_algo=\"sha256\",sliding_window=\"None\",\
         swap_space=\"4\"}} 1.0",
        profile.block_size,
        py_bool(profile.enable_prefix_caching),
        profile.kv_cache_size_tokens(),
        profile.num_gpu_blocks,
    );
    out
}

fn metric(out: &mut String, name: &str, help: &str, kind: &str, labels: &str, value: f64) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
    let _ = writeln!(out, "{name}{{{labels}}} {value:?}");
}

fn escape(s: &str) -> String {
    s.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exposes_the_vllm_names_and_cache_config() {
        let p = Profile::builtin(crate::profile::RTX3090_QWEN35_4B_FP8).unwrap();
        let s = Snapshot {
            running: 3,
            waiting: 1,
            free_blocks: 7_031,
            total_blocks: 28_124,
            ..Snapshot::default()
        };
        let text = render(&p, &s);
        assert!(
            text.contains("vllm:num_requests_running{engine=\"0\",model_name=\"bench\"} 3.0\n"),
            "{text}"
        );
        assert!(
            text.contains("vllm:num_requests_waiting{engine=\"0\",model_name=\"bench\"} 1.0\n")
        );
        assert!(text.contains("# TYPE vllm:prefix_cache_hits_total counter\n"));
        assert!(text.contains("num_gpu_blocks=\"1003\""));
        assert!(text.contains("block_size=\"528\""));
        // 1,003 blocks hold 1,003 / 503 requests of max_model_len (497 attention blocks and 6
        // of state each): vLLM's int(max concurrency × max_model_len).
        assert!(text.contains("kv_cache_size_tokens=\"522724\""), "{text}");
        assert!(text.contains("enable_prefix_caching=\"True\""));
        assert!(text.contains("vllm:request_success_total{engine=\"0\",model_name=\"bench\",finished_reason=\"length\"} 0.0\n"));
        let usage_line = text
            .lines()
            .find(|l| l.starts_with("vllm:kv_cache_usage_perc{"))
            .unwrap();
        let usage: f64 = usage_line.rsplit(' ').next().unwrap().parse().unwrap();
        assert!((usage - 0.75).abs() < 0.001, "{usage}");
    }
}
