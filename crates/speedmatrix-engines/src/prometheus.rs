//! A small, lenient parser for the Prometheus text exposition format (what
//! `GET /metrics` returns). What each engine's metrics mean lives in its own
//! module.

use std::collections::BTreeMap;

/// The declared type of a metric family (`# TYPE` line).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum MetricType {
    /// Monotonic counter.
    Counter,
    /// Value that goes up and down.
    Gauge,
    /// Histogram (`_bucket`, `_sum`, `_count` samples).
    Histogram,
    /// Summary (quantile, `_sum`, `_count` samples).
    Summary,
    /// Declared `untyped`, or an unknown type word.
    Untyped,
}

impl MetricType {
    fn parse(word: &str) -> MetricType {
        match word {
            "counter" => MetricType::Counter,
            "gauge" => MetricType::Gauge,
            "histogram" => MetricType::Histogram,
            "summary" => MetricType::Summary,
            _ => MetricType::Untyped,
        }
    }
}

/// One sample line: `name{label="value",...} value [timestamp]`.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    /// Sample name, including any `_bucket`/`_sum`/`_count` suffix.
    pub name: String,
    /// Labels in the order given, escapes resolved.
    pub labels: Vec<(String, String)>,
    /// The value (`+Inf`, `-Inf` and `NaN` included).
    pub value: f64,
    /// Optional timestamp in milliseconds since the Unix epoch.
    pub timestamp_ms: Option<i64>,
}

impl Sample {
    /// The value of label `name`, if present.
    pub fn label(&self, name: &str) -> Option<&str> {
        self.labels
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

/// A parsed `/metrics` page.
///
/// Parsing never fails: lines that do not parse are skipped and counted in
/// [`skipped_lines`](Self::skipped_lines).
///
/// ```
/// use speedmatrix_engines::ServerMetrics;
///
/// let text = "# TYPE vllm:num_requests_running gauge\n\
///             vllm:num_requests_running{model_name=\"m\"} 3.0\n\
///             vllm:cache_config_info{block_size=\"16\",num_gpu_blocks=\"2048\"} 1.0\n";
/// let metrics = ServerMetrics::parse(text);
/// assert_eq!(metrics.sum("vllm:num_requests_running"), Some(3.0));
/// let cache = speedmatrix_engines::vllm::cache_config(&metrics).unwrap();
/// assert_eq!(cache.kv_cache_tokens().unwrap().get(), 32_768);
/// ```
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ServerMetrics {
    samples: Vec<Sample>,
    types: BTreeMap<String, MetricType>,
    skipped_lines: usize,
}

impl ServerMetrics {
    /// Parses Prometheus text exposition (format 0.0.4; `# EOF` tolerated).
    pub fn parse(text: &str) -> ServerMetrics {
        let mut metrics = ServerMetrics::default();
        for line in text.lines() {
            let line = line.trim();
            if line.is_empty() {
                continue;
            }
            if let Some(comment) = line.strip_prefix('#') {
                metrics.read_comment(comment);
                continue;
            }
            match parse_sample(line) {
                Some(sample) => metrics.samples.push(sample),
                None => metrics.skipped_lines += 1,
            }
        }
        metrics
    }

    fn read_comment(&mut self, comment: &str) {
        let mut words = comment.split_whitespace();
        if words.next() == Some("TYPE")
            && let (Some(name), Some(kind)) = (words.next(), words.next())
        {
            self.types.insert(name.to_owned(), MetricType::parse(kind));
        }
    }

    /// Every sample, in page order.
    pub fn samples(&self) -> &[Sample] {
        &self.samples
    }

    /// Samples named exactly `name` (e.g. `"vllm:e2e_request_latency_seconds_count"`).
    pub fn find<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a Sample> + 'a {
        self.samples.iter().filter(move |s| s.name == name)
    }

    /// Value of the first sample named `name`.
    pub fn value(&self, name: &str) -> Option<f64> {
        self.find(name).next().map(|s| s.value)
    }

    /// Sum over all label sets of samples named `name`; `None` when there are none.
    pub fn sum(&self, name: &str) -> Option<f64> {
        let mut found = false;
        let total = self
            .find(name)
            .inspect(|_| found = true)
            .map(|s| s.value)
            .sum();
        found.then_some(total)
    }

    /// Sum over the samples named `name` whose label `label` is one of
    /// `values`; `None` when there are none.
    pub fn sum_where(&self, name: &str, label: &str, values: &[&str]) -> Option<f64> {
        let mut found = false;
        let total = self
            .find(name)
            .filter(|s| s.label(label).is_some_and(|v| values.contains(&v)))
            .inspect(|_| found = true)
            .map(|s| s.value)
            .sum();
        found.then_some(total)
    }

    /// Declared type of the family `name` belongs to (suffixes such as
    /// `_bucket`, `_sum`, `_count`, `_total`, `_created` resolved).
    pub fn metric_type(&self, name: &str) -> Option<MetricType> {
        if let Some(kind) = self.types.get(name) {
            return Some(*kind);
        }
        ["_bucket", "_sum", "_count", "_total", "_created"]
            .iter()
            .filter_map(|suffix| name.strip_suffix(suffix))
            .find_map(|family| self.types.get(family).copied())
    }

    /// Lines that were neither comments nor parseable samples.
    pub fn skipped_lines(&self) -> usize {
        self.skipped_lines
    }

    /// Whether any sample's name starts with `prefix` (e.g. `"vllm:"`).
    pub fn has_prefix(&self, prefix: &str) -> bool {
        self.samples.iter().any(|s| s.name.starts_with(prefix))
    }
}

fn parse_sample(line: &str) -> Option<Sample> {
    let name_end = line
        .find(|c: char| c == '{' || c.is_whitespace())
        .unwrap_or(line.len());
    let name = &line[..name_end];
    if !is_metric_name(name) {
        return None;
    }
    let mut rest = &line[name_end..];
    let mut labels = Vec::new();
    if let Some(after_brace) = rest.strip_prefix('{') {
        let (parsed, after) = parse_labels(after_brace)?;
        labels = parsed;
        rest = after;
    }
    let mut fields = rest.split_whitespace();
    let value = parse_value(fields.next()?)?;
    let timestamp_ms = match fields.next() {
        Some(ts) => Some(ts.parse::<i64>().ok()?),
        None => None,
    };
    if fields.next().is_some() {
        return None;
    }
    Some(Sample {
        name: name.to_owned(),
        labels,
        value,
        timestamp_ms,
    })
}

fn is_metric_name(name: &str) -> bool {
    let mut chars = name.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_' || c == ':')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
}

/// Parses `a="x",b="y"}` and returns the labels and what follows the `}`.
fn parse_labels(mut rest: &str) -> Option<(Vec<(String, String)>, &str)> {
    let mut labels = Vec::new();
    loop {
        rest = rest.trim_start();
        if let Some(after) = rest.strip_prefix('}') {
            return Some((labels, after));
        }
        let eq = rest.find('=')?;
        let key = rest[..eq].trim();
        if key.is_empty() || !key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            return None;
        }
        let after_eq = rest[eq + 1..].trim_start().strip_prefix('"')?;
        let (value, after_value) = parse_quoted(after_eq)?;
        labels.push((key.to_owned(), value));
        rest = after_value.trim_start();
        if let Some(after_comma) = rest.strip_prefix(',') {
            rest = after_comma;
        } else if !rest.starts_with('}') {
            return None;
        }
    }
}

/// Reads a label value up to its closing quote, resolving `\\`, `\"` and `\n`.
fn parse_quoted(text: &str) -> Option<(String, &str)> {
    let mut value = String::new();
    let mut chars = text.char_indices();
    while let Some((i, c)) = chars.next() {
        match c {
            '"' => return Some((value, &text[i + 1..])),
            '\\' => match chars.next()?.1 {
                'n' => value.push('\n'),
                other => value.push(other),
            },
            other => value.push(other),
        }
    }
    None
}

fn parse_value(text: &str) -> Option<f64> {
    match text {
        "+Inf" | "Inf" => Some(f64::INFINITY),
        "-Inf" => Some(f64::NEG_INFINITY),
        "NaN" => Some(f64::NAN),
        _ => text.parse::<f64>().ok(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PAGE: &str = r#"# HELP vllm:e2e_request_latency_seconds Histogram of e2e request latency in seconds.
# TYPE vllm:e2e_request_latency_seconds histogram
vllm:e2e_request_latency_seconds_bucket{le="0.3",model_name="m"} 2.0
vllm:e2e_request_latency_seconds_bucket{le="+Inf",model_name="m"} 5.0
vllm:e2e_request_latency_seconds_sum{model_name="m"} 7.25
vllm:e2e_request_latency_seconds_count{model_name="m"} 5.0
# TYPE vllm:prompt_tokens counter
vllm:prompt_tokens_total{model_name="m"} 1234 1700000000000
weird{path="C:\\dir",quote="say \"hi\"",nl="a\nb",} NaN
not a sample
vllm:cache_config_info{block_size="16",cache_dtype="auto",gpu_memory_utilization="0.9",num_cpu_blocks="None",num_gpu_blocks="27000"} 1.0
"#;

    #[test]
    fn reads_histograms_counters_and_escapes() {
        let m = ServerMetrics::parse(PAGE);
        assert_eq!(m.skipped_lines(), 1);
        assert_eq!(
            m.metric_type("vllm:e2e_request_latency_seconds_bucket"),
            Some(MetricType::Histogram)
        );
        assert_eq!(
            m.metric_type("vllm:prompt_tokens_total"),
            Some(MetricType::Counter)
        );
        let inf = m
            .find("vllm:e2e_request_latency_seconds_bucket")
            .find(|s| s.label("le") == Some("+Inf"))
            .unwrap();
        assert_eq!(inf.value, 5.0);
        assert_eq!(m.value("vllm:e2e_request_latency_seconds_sum"), Some(7.25));
        let counter = m.find("vllm:prompt_tokens_total").next().unwrap();
        assert_eq!(counter.timestamp_ms, Some(1_700_000_000_000));
        let weird = m.find("weird").next().unwrap();
        assert_eq!(weird.label("path"), Some("C:\\dir"));
        assert_eq!(weird.label("quote"), Some("say \"hi\""));
        assert_eq!(weird.label("nl"), Some("a\nb"));
        assert!(weird.value.is_nan());
    }

    #[test]
    fn malformed_label_sets_are_skipped() {
        for line in [
            "a{b=\"c\" 1",
            "a{b=c} 1",
            "a{=\"c\"} 1",
            "a 1 2 3",
            "a{b=\"c\"}",
            "1a 2",
        ] {
            assert!(parse_sample(line).is_none(), "{line}");
        }
    }

    proptest::proptest! {
    #[test]
        fn prometheus_parser_never_panics(text in "(?s).{0,400}") {
            let metrics = ServerMetrics::parse(&text);
            let _ = crate::vllm::cache_config(&metrics);
            let _ = crate::SchedulerState::from_metrics(&metrics);
            proptest::prop_assert!(metrics.samples().len() + metrics.skipped_lines() <= text.lines().count());
        }

        #[test]
        fn prometheus_round_trips_label_escapes(value in "[ -~\n]{0,30}", number in -1e9f64..1e9) {
            let escaped = value.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n");
            let text = format!("m_total{{a=\"{escaped}\",b=\"x\"}} {number}\n");
            let metrics = ServerMetrics::parse(&text);
            let sample = metrics.find("m_total").next().expect("sample parsed");
            proptest::prop_assert_eq!(sample.label("a"), Some(value.as_str()));
            proptest::prop_assert_eq!(sample.label("b"), Some("x"));
            proptest::prop_assert_eq!(sample.value, number);
        }
    }

    /// Coverage-guided under `cargo xtask fuzz`, random inputs under `cargo test`:
    /// no text makes the parser or the engines' readers panic, and every line
    /// is a sample or a skipped line at most once.
    #[test]
    fn fuzz_prometheus() {
        bolero::check!().for_each(|bytes: &[u8]| {
            let text = String::from_utf8_lossy(bytes);
            let m = ServerMetrics::parse(&text);
            assert!(m.samples().len() + m.skipped_lines() <= text.lines().count());
            let _ = crate::vllm::cache_config(&m).and_then(|c| c.kv_cache_tokens());
            let _ = crate::SchedulerState::from_metrics(&m);
            let _ = crate::generation_tokens(&m);
        });
    }
}
