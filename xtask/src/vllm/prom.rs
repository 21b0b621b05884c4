//! Reading vLLM's Prometheus text and startup log.

use std::collections::BTreeMap;

/// One sample line: `name{labels} value`.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Sample {
    /// Metric name, e.g. `vllm:cache_config_info`.
    pub(crate) name: String,
    /// Labels in name order.
    pub(crate) labels: BTreeMap<String, String>,
    /// The value.
    pub(crate) value: f64,
}

/// All samples of a Prometheus text exposition; lines that do not parse are skipped.
pub(crate) fn samples(text: &str) -> Vec<Sample> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .filter_map(parse_sample)
        .collect()
}

/// The metric names declared by `# TYPE` lines, with their types.
pub(crate) fn declared(text: &str) -> Vec<(String, String)> {
    text.lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|rest| {
            let (name, kind) = rest.split_once(' ')?;
            Some((name.to_owned(), kind.trim().to_owned()))
        })
        .collect()
}

/// The first sample named `name`.
pub(crate) fn first<'a>(all: &'a [Sample], name: &str) -> Option<&'a Sample> {
    all.iter().find(|s| s.name == name)
}

/// The sum of every sample named `name` (over all label sets).
pub(crate) fn total(all: &[Sample], name: &str) -> f64 {
    all.iter().filter(|s| s.name == name).map(|s| s.value).sum()
}

fn parse_sample(line: &str) -> Option<Sample> {
    let (name, labels, rest) = match line.find('{') {
        Some(open) => {
            let (labels, after) = parse_labels(&line[open + 1..])?;
            (&line[..open], labels, after)
        }
        None => {
            let (name, rest) = line.split_once(' ')?;
            (name, BTreeMap::new(), rest)
        }
    };
    let value = rest.split_whitespace().next()?;
    let value = match value {
        "+Inf" => f64::INFINITY,
        "-Inf" => f64::NEG_INFINITY,
        v => v.parse().ok()?,
    };
    Some(Sample {
        name: name.trim().to_owned(),
        labels,
        value,
    })
}

/// Parses `k="v",k2="v2"}` (escapes `\"`, `\\`, `\n`); returns the labels and what follows `}`.
fn parse_labels(s: &str) -> Option<(BTreeMap<String, String>, &str)> {
    let mut labels = BTreeMap::new();
    let mut rest = s;
    loop {
        rest = rest.trim_start_matches([',', ' ']);
        if let Some(after) = rest.strip_prefix('}') {
            return Some((labels, after));
        }
        let (key, after_eq) = rest.split_once("=\"")?;
        let mut value = String::new();
        let mut chars = after_eq.char_indices();
        let end = loop {
            let (i, c) = chars.next()?;
            match c {
                '"' => break i,
                '\\' => match chars.next()?.1 {
                    'n' => value.push('\n'),
                    other => value.push(other),
                },
                c => value.push(c),
            }
        };
        labels.insert(key.trim().to_owned(), value);
        rest = &after_eq[end + 1..];
    }
}

/// The number in a log line `… <prefix> 524,288 tokens` (thousands separators allowed).
pub(crate) fn logged_number(log: &str, prefix: &str) -> Option<u64> {
    log.lines().rev().find_map(|line| {
        let after = &line[line.find(prefix)? + prefix.len()..];
        let digits: String = after
            .trim_start()
            .chars()
            .take_while(|c| c.is_ascii_digit() || *c == ',')
            .filter(char::is_ascii_digit)
            .collect();
        digits.parse().ok()
    })
}

/// Log lines that say how vLLM sized the KV cache, versions and limits, for the fixtures.
pub(crate) fn notable_log_lines(log: &str) -> Vec<&str> {
    const MARKERS: &[&str] = &[
        "  version ",
        "non-default args",
        "Initializing a V1 LLM engine",
        "Resolved architecture",
        "Using max model len",
        "core ids=",
        "reserved_cpus",
        "Reducing Torch threads",
        "KV cache",
        "Maximum concurrency",
        "Application startup complete",
    ];
    log.lines()
        .filter(|l| MARKERS.iter().any(|m| l.contains(m)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const METRICS: &str = r#"# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig
# TYPE vllm:cache_config_info gauge
vllm:cache_config_info{block_size="128",engine="0",kv_cache_size_tokens="524288",num_gpu_blocks="4096",odd="a\"b,c}"} 1.0
# TYPE vllm:generation_tokens_total counter
vllm:generation_tokens_total{engine="0",model_name="tiny"} 200.0
vllm:generation_tokens_total{engine="1",model_name="tiny"} 5.0
process_open_fds 12
vllm:time_to_first_token_seconds_bucket{le="+Inf",model_name="tiny"} 3.0
"#;

    #[test]
    fn labels_with_escapes_and_braces_parse() {
        let all = samples(METRICS);
        let info = first(&all, "vllm:cache_config_info").unwrap();
        assert_eq!(info.labels["kv_cache_size_tokens"], "524288");
        assert_eq!(info.labels["odd"], "a\"b,c}");
        assert_eq!(info.value, 1.0);
    }

    #[test]
    fn totals_add_every_label_set() {
        let all = samples(METRICS);
        assert_eq!(total(&all, "vllm:generation_tokens_total"), 205.0);
        assert_eq!(total(&all, "process_open_fds"), 12.0);
        let inf = first(&all, "vllm:time_to_first_token_seconds_bucket").unwrap();
        assert_eq!(inf.labels["le"], "+Inf");
    }

    #[test]
    fn type_lines_are_listed() {
        let d = declared(METRICS);
        assert_eq!(d[0], ("vllm:cache_config_info".into(), "gauge".into()));
        assert_eq!(d.len(), 2);
    }

    #[test]
    fn logged_numbers_drop_separators() {
        let log = "INFO 11-30 07:50:01 [kv_cache_utils.py:1] CPU KV cache size: 524,288 tokens\n";
        assert_eq!(logged_number(log, "KV cache size:"), Some(524_288));
        assert_eq!(logged_number(log, "no such thing"), None);
    }
}
