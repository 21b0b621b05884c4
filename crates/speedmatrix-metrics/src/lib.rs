//! Metrics math over request timelines: TTFT, time between tokens, windowed throughput, percentiles.
