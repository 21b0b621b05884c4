//! Snapshots of the three renderers, and structural checks of CSV and HTML.

use crate::common;

use quick_xml::events::Event;
use speedmatrix_report::{CSV_COLUMNS, to_csv, to_html, to_markdown};
use speedmatrix_units::Tokens;

#[test]
fn markdown_snapshot() {
    insta::assert_snapshot!("small_markdown", to_markdown(&common::small()));
}

#[test]
fn csv_snapshot() {
    insta::assert_snapshot!("small_csv", to_csv(&common::small()));
}

#[test]
fn html_snapshot() {
    insta::assert_snapshot!("small_html", to_html(&common::small()));
}

#[test]
fn markdown_escapes_hostile_strings() {
    let md = to_markdown(&common::small());
    let outside_code: String = md.split("```").step_by(2).collect();
    assert!(
        !outside_code.contains("<script>"),
        "raw <script> in Markdown text"
    );
    assert!(md.contains("evil/Qwen\\<script\\>alert(1)\\</script\\>"));
    assert!(md.contains("a\\|b"), "pipe in served model not escaped");
    // The launch command is code: shown verbatim inside a fence.
    assert!(md.contains("```sh\nvllm serve evil/Qwen<script>alert(1)</script> \\\n"));
    // Every table row has as many cells as its header.
    for header in [
        "| Phase | Context |",
        "| Context | 1 |",
        "| Context | Prompt tok/s |",
    ] {
        let rows = common::table(&md, header);
        assert!(rows.iter().all(|r| r.len() == rows[0].len()), "{header}");
    }
}

#[test]
fn markdown_matrix_shows_every_status() {
    let md = to_markdown(&common::small());
    let rows = common::table(&md, "| Context | 1 |");
    assert_eq!(rows.len(), 4);
    assert_eq!(
        rows[1][3], "1,610.5<br>88 ms TTFT †",
        "queueing cell is marked"
    );
    assert_eq!(rows[2][3], "Over capacity");
    assert_eq!(rows[3][2], "Error: timeout");
    assert_eq!(rows[3][3], "Skipped");
    assert!(md.contains("† The server queued requests (some were waiting, not running) during the window of: 0 × 16."));
    assert!(md.contains("Prediction vs measurement:** +3.0%"));
}

#[test]
fn csv_parses_with_one_row_per_cell_and_phase() {
    let report = common::small();
    let text = to_csv(&report);
    let mut reader = csv::Reader::from_reader(text.as_bytes());
    let header: Vec<String> = reader
        .headers()
        .unwrap()
        .iter()
        .map(str::to_owned)
        .collect();
    assert_eq!(header, CSV_COLUMNS);
    let rows: Vec<csv::StringRecord> = reader.records().map(Result::unwrap).collect();
    assert_eq!(rows.len(), report.prefill.len() + report.decode.len());
    let col = |name: &str| CSV_COLUMNS.iter().position(|c| *c == name).unwrap();
    let prefill_error = &rows[1];
    assert_eq!(&prefill_error[col("status")], "error");
    assert_eq!(
        &prefill_error[col("status_detail")],
        "http_500: Internal Server Error: CUDA out of memory (3 failed, 0 good requests)"
    );
    let queued = &rows[2 + 2];
    assert_eq!(&queued[col("total_tokens_per_s")], "1610.5");
    assert_eq!(&queued[col("ttft_p99_ms")], "140.8");
    assert_eq!(&queued[col("queueing_detected")], "true");
    let over = &rows[2 + 5];
    assert_eq!(&over[col("status")], "over_capacity");
    assert_eq!(&over[col("total_tokens_per_s")], "");
}

/// One element of the page: its name and attributes.
struct Element {
    name: String,
    attrs: Vec<(String, String)>,
}

impl Element {
    fn attr(&self, key: &str) -> Option<&str> {
        self.attrs
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }
}

/// Parses the page as strict XML (closed elements, matching end tags, known entities)
/// and returns every element and the concatenated text.
fn parse_strict(html: &str) -> (Vec<Element>, String) {
    let mut reader = quick_xml::Reader::from_str(html);
    reader.config_mut().check_end_names = true;
    let (mut elements, mut text, mut depth) = (Vec::new(), String::new(), 0i32);
    loop {
        let event = reader.read_event().unwrap_or_else(|e| {
            panic!(
                "HTML is not well-formed at byte {}: {e}",
                reader.buffer_position()
            )
        });
        let start = match event {
            Event::Eof => break,
            Event::Start(e) => {
                depth += 1;
                e
            }
            Event::Empty(e) => e,
            Event::End(_) => {
                depth -= 1;
                continue;
            }
            Event::Text(t) => {
                text.push_str(&t.xml_content(quick_xml::XmlVersion::Implicit1_0));
                continue;
            }
            Event::GeneralRef(r) => {
                let name = AsRef::<str>::as_ref(&r).to_owned();
                let resolved = match name.as_str() {
                    "amp" => '&',
                    "lt" => '<',
                    "gt" => '>',
                    "quot" => '"',
                    "apos" | "#39" => '\'',
                    other => panic!("entity &{other}; is not one the page should use"),
                };
                text.push(resolved);
                continue;
            }
            _ => continue,
        };
        let attrs = start
            .attributes()
            .map(|a| {
                let a = a.unwrap();
                let key = AsRef::<str>::as_ref(&a.key).to_owned();
                let value = a
                    .normalized_value(quick_xml::XmlVersion::Implicit1_0)
                    .unwrap()
                    .into_owned();
                (key, value)
            })
            .collect();
        let name = AsRef::<str>::as_ref(&start.name()).to_owned();
        elements.push(Element { name, attrs });
    }
    assert_eq!(depth, 0, "unclosed elements at the end of the page");
    (elements, text)
}

#[test]
fn html_is_well_formed_self_contained_and_escaped() {
    let report = common::small();
    let html = to_html(&report);
    assert!(html.starts_with("<!DOCTYPE html>\n<html lang=\"en\">"));
    let (elements, text) = parse_strict(&html);
    assert!(
        !elements.iter().any(|e| e.name == "script"),
        "a <script> element"
    );
    for e in &elements {
        for (key, value) in &e.attrs {
            assert!(
                !key.starts_with("on"),
                "event handler {key} on <{}>",
                e.name
            );
            let external = ["src", "href"].contains(&key.as_str()) && !value.starts_with('#');
            assert!(!external, "external asset {key}={value:?} on <{}>", e.name);
        }
    }
    assert!(!html.contains("<script"), "raw <script> in HTML");
    assert!(
        text.contains("evil/Qwen<script>alert(1)</script>"),
        "model name lost"
    );
    assert!(html.contains("evil/Qwen&lt;script&gt;alert(1)&lt;/script&gt;"));
    assert!(text.contains("<b>bold</b> & \"quotes\""));
}

#[test]
fn html_charts_have_one_mark_per_measurement() {
    for report in [common::small(), common::seed()] {
        let html = to_html(&report);
        let (elements, _) = parse_strict(&html);
        let class_of = |prefix: &str| {
            elements
                .iter()
                .filter(|e| {
                    e.attr("class")
                        .is_some_and(|c| c.split(' ').next() == Some(prefix))
                })
                .count()
        };
        let svgs = elements.iter().filter(|e| e.name == "svg").count();
        assert_eq!(svgs, 4, "heatmap, prefill tok/s, prefill TTFT, per request");
        let cells = report.run.contexts.len() * report.run.concurrencies.len();
        assert_eq!(class_of("cell"), cells, "heatmap cells");
        let valid_prefill = report
            .prefill
            .iter()
            .filter(|r| r.status.is_valid())
            .count();
        assert_eq!(class_of("bar"), valid_prefill, "prefill bars");
        let valid_decode = report.decode.iter().filter(|c| c.status.is_valid()).count();
        // Prefill TTFT points plus one per-request point per valid decode cell.
        assert_eq!(
            class_of("point"),
            valid_prefill + valid_decode,
            "chart points"
        );
        let over = elements
            .iter()
            .filter(|e| e.attr("class") == Some("cell over-capacity"))
            .count();
        let expected_over = report
            .decode
            .iter()
            .filter(|c| c.status.label() == "Over capacity")
            .count();
        assert_eq!(over, expected_over);
        let rows = elements.iter().filter(|e| e.name == "tr").count();
        let expected_rows = (1 + report.prefill.len())
            + (1 + report.run.contexts.len())
            + (1 + report.prefill.len() + report.decode.len());
        assert_eq!(rows, expected_rows, "table rows");
    }
}

#[test]
fn partial_runs_render_only_what_they_have() {
    let mut prefill_only = common::small();
    prefill_only.run.contexts.clear();
    prefill_only.run.concurrencies.clear();
    prefill_only.decode.clear();
    prefill_only.validate().unwrap();
    let (elements, _) = parse_strict(&to_html(&prefill_only));
    assert_eq!(elements.iter().filter(|e| e.name == "svg").count(), 2);
    let md = to_markdown(&prefill_only);
    assert!(!md.contains("## Sustained decode"));
    assert_eq!(common::table(&md, "| Phase | Context |").len(), 1 + 2);

    let mut decode_only = common::small();
    decode_only.run.prefill_contexts.clear();
    decode_only.prefill.clear();
    decode_only.validate().unwrap();
    let (elements, _) = parse_strict(&to_html(&decode_only));
    assert_eq!(elements.iter().filter(|e| e.name == "svg").count(), 2);
    assert!(!to_markdown(&decode_only).contains("## Prefill"));
    assert_eq!(to_csv(&decode_only).lines().count(), 1 + 9);
}

/// The small run with a partial cell, an estimate within 1 % and one over it.
fn with_partial_and_estimates() -> speedmatrix_report::Report {
    use std::collections::BTreeMap;

    use speedmatrix_report::{CellStatus, TokenCount, TokenCountSource};
    let mut r = common::small();
    let estimate = |u: Option<f64>| TokenCount {
        requests_by_source: BTreeMap::from([("tokenizer".to_owned(), 4)]),
        estimated: true,
        estimated_share_pct: 100.0,
        estimate_method: Some(TokenCountSource::Tokenizer),
        calibration_factor: u.map(|_| 1.012),
        calibration_requests: if u.is_some() { 3 } else { 0 },
        uncertainty_pct: u,
    };
    let set = |r: &mut speedmatrix_report::Report, i: usize, t: TokenCount| {
        let m = r.decode[i].measurements.as_mut().unwrap();
        m.token_count_source = TokenCountSource::Tokenizer;
        m.token_count = Some(t);
    };
    set(&mut r, 0, estimate(Some(0.4)));
    set(&mut r, 1, estimate(Some(3.0)));
    set(&mut r, 3, estimate(None));
    r.decode[2].status = CellStatus::Partial {
        failed_requests: 2,
        good_requests: 30,
        error_kinds: BTreeMap::from([("disconnected".to_owned(), 2)]),
        message: "the connection failed in the middle of the stream".into(),
    };
    r.validate().unwrap();
    r
}

#[test]
fn estimates_and_partial_cells_are_marked_in_every_renderer() {
    let r = with_partial_and_estimates();
    let md = to_markdown(&r);
    let rows = common::table(&md, "| Phase |");
    let status: Vec<&str> = rows
        .iter()
        .filter(|row| row[0] == "Sustained decode")
        .map(|row| row[3].as_str())
        .collect();
    assert_eq!(status[0], "Valid (est. ±0.4 %)");
    assert_eq!(status[1], "Estimated (±3.0 %)");
    assert_eq!(status[2], "Partial");
    assert_eq!(status[3], "Estimated (uncalibrated)");
    let matrix = common::table(&md, "| Context | 1 |");
    assert!(matrix[1][1].starts_with('≈'), "{:?}", matrix[1]);
    assert!(matrix[1][3].contains('‡'), "{:?}", matrix[1]);
    assert!(md.contains("≈ Estimated output tokens"), "{md}");
    assert!(md.contains("‡ Partial"), "{md}");
    let csv = to_csv(&r);
    let lines: Vec<&str> = csv.lines().collect();
    let decode: Vec<&str> = lines
        .iter()
        .filter(|l| l.starts_with("decode"))
        .copied()
        .collect();
    assert!(decode[0].contains(",tokenizer,true,0.4,"), "{}", decode[0]);
    assert!(
        decode[2].starts_with("decode,0,16,partial,"),
        "{}",
        decode[2]
    );
    assert!(decode[3].contains(",tokenizer,true,,"), "{}", decode[3]);
    let html = to_html(&r);
    assert!(
        html.contains("≈"),
        "the HTML heatmap does not mark estimates"
    );
    assert!(html.contains("Estimated (±3.0 %)"));
}

/// The small run with telemetry on its first cell and its setup.
fn with_telemetry() -> speedmatrix_report::Report {
    use speedmatrix_report::{
        CellSeries, CellTelemetry, CellVerdict, GpuDetail, GpuUse, HostUse, ServerStats,
        TelemetrySetup, ThrottledSeconds, VerdictThresholds,
    };
    use speedmatrix_units::ByteSize;
    let mut report = common::small();
    report.telemetry = Some(TelemetrySetup {
        gpu_source: Some("NVML".into()),
        gpu_unavailable: None,
        interval_ms: 250,
        metrics_interval_ms: 1000,
        gpus: vec![GpuDetail {
            index: 0,
            name: "NVIDIA H100 80GB HBM3".into(),
            memory_bytes: Some(ByteSize::new(85_520_809_984)),
            driver_version: Some("550.90.07".into()),
            runtime_version: Some("12.4".into()),
            power_limit_w: Some(700.0),
            pcie_generation: Some(5),
            pcie_width: Some(16),
        }],
        samples_file: Some("telemetry.jsonl".into()),
        verdict_rules: VerdictThresholds {
            throttled_pct: 10.0,
            client_busy_pct: 80.0,
            running_pct: 90.0,
            waiting_mean: 0.5,
            cache_gap_points: 20.0,
        },
    });
    let m = report.decode[0].measurements.as_mut().unwrap();
    m.telemetry = Some(CellTelemetry {
        gpus: vec![GpuUse {
            index: 0,
            samples: 120,
            utilization_mean_pct: Some(97.5),
            utilization_max_pct: Some(100.0),
            power_mean_w: Some(640.0),
            power_max_w: Some(699.0),
            energy_j: Some(19_200.0),
            energy_source: Some("counter".into()),
            memory_peak_bytes: Some(ByteSize::new(75_000_000_000)),
            sm_clock_min_mhz: Some(1_410),
            throttled: Some(ThrottledSeconds {
                power_cap_s: 6.0,
                thermal_s: 0.0,
                hw_slowdown_s: 0.0,
                any_s: 6.0,
            }),
        }],
        energy_j: Some(19_200.0),
        joules_per_output_token: Some(0.4),
        host: Some(HostUse {
            cpu_mean_pct: 31.0,
            cpu_busiest_core_pct: 88.0,
            memory_used_peak_bytes: ByteSize::new(8 << 30),
        }),
        server: Some(ServerStats {
            scrapes: 30,
            kv_usage_max_pct: Some(41.0),
            preemptions: Some(0.0),
            prefix_cache_queries: Some(1000.0),
            prefix_cache_hits: Some(980.0),
            prefix_cache_hit_rate: Some(0.98),
            spec_acceptance_rate: Some(0.6),
            spec_mean_accepted_length: Some(2.8),
            ..ServerStats::default()
        }),
        verdicts: vec![CellVerdict {
            kind: "throttled".into(),
            why: "GPU 0 throttled 6.0 s of 30.0 s".into(),
        }],
        missing: Vec::new(),
        series: Some(CellSeries {
            part_s: 0.5,
            output_tokens_per_s: vec![1600.0, 1610.0, 1590.0, 1600.0],
            running: vec![Some(16.0); 4],
            waiting: vec![Some(0.0); 4],
            kv_usage_pct: vec![Some(40.0), Some(41.0), Some(41.0), Some(41.0)],
            gpu_utilization_pct: vec![Some(97.0); 4],
            gpu_power_w: vec![Some(640.0), Some(650.0), Some(660.0), Some(650.0)],
        }),
    });
    report
}

#[test]
fn telemetry_renders_in_markdown_csv_and_html() {
    let report = with_telemetry();
    let md = to_markdown(&report);
    assert!(md.contains("## GPU, host and server per cell"), "{md}");
    assert!(md.contains("NVML, sampled every 250 ms"));
    assert!(md.contains("driver 550.90.07, CUDA 12.4, power limit 700 W, PCIe gen 5 ×16"));
    let rows = common::table(&md, "| Context | Concurrency | GPU util mean / max");
    assert_eq!(rows.len(), 2, "one cell has telemetry");
    assert_eq!(rows[1][2], "98 % / 100 %");
    assert_eq!(rows[1][4], "19,200 J");
    assert_eq!(rows[1][5], "0.400 J");
    assert_eq!(rows[1][8], "6.0 s");
    assert_eq!(rows[1][12], "0");
    assert_eq!(rows[1][13], "98 %");
    assert_eq!(rows[1][14], "60 %, 2.80 tok/step");
    assert_eq!(rows[1][15], "throttled");
    assert!(
        md.contains("a GPU throttled ≥ 10 % of the window"),
        "the run's own rules"
    );
    let mut stricter = report.clone();
    stricter
        .telemetry
        .as_mut()
        .unwrap()
        .verdict_rules
        .throttled_pct = 5.0;
    assert!(to_markdown(&stricter).contains("a GPU throttled ≥ 5 % of the window"));
    let mut at_finish = report.clone();
    let m = at_finish.decode[0].measurements.as_mut().unwrap();
    let server = m.telemetry.as_mut().unwrap().server.as_mut().unwrap();
    server.counted_at_finish = true;
    server.spec_acceptance_rate = None;
    let rows = common::table(
        &to_markdown(&at_finish),
        "| Context | Concurrency | GPU util mean / max",
    );
    assert_eq!(
        (rows[1][13].as_str(), rows[1][14].as_str()),
        ("98 % ‡", "2.80 tok/step ‡"),
        "counters of finished requests are marked; a length alone still shows"
    );
    let text = to_csv(&report);
    let mut reader = csv::Reader::from_reader(text.as_bytes());
    let rows: Vec<csv::StringRecord> = reader.records().map(Result::unwrap).collect();
    let col = |name: &str| CSV_COLUMNS.iter().position(|c| *c == name).unwrap();
    let first = &rows[report.prefill.len()];
    assert_eq!(&first[col("gpu_energy_j")], "19200");
    assert_eq!(&first[col("joules_per_output_token")], "0.4");
    assert_eq!(&first[col("prefix_cache_hit_rate")], "0.98");
    assert_eq!(&first[col("verdicts")], "throttled");
    assert_eq!(&rows[report.prefill.len() + 1][col("gpu_energy_j")], "");
    let json = report.to_json().unwrap();
    let back = speedmatrix_report::Report::from_json(&json).unwrap();
    assert_eq!(back, report, "telemetry round-trips through run.json");
}

#[test]
fn telemetry_section_is_in_the_html_page() {
    let html = to_html(&with_telemetry());
    assert!(html.contains("<h2>GPU, host and server per cell</h2>"));
    assert!(html.contains("<td>0.400 J</td>"));
    assert!(html.contains("power limit 700 W"));
    assert!(!to_html(&common::small()).contains("GPU, host and server per cell"));
    // The energy heatmap: the measured cell with energy shows its J/token.
    assert!(
        html.contains("aria-label=\"Energy heatmap"),
        "energy heatmap"
    );
    assert!(html.contains(">0.400 J</text>"));
    // One folded strip chart per cell with a series.
    assert_eq!(html.matches("<details class=\"cell-series\">").count(), 1);
    assert!(html.contains("over its window\""));
    assert!(
        html.contains("· throttled</summary>"),
        "the cell's verdicts in its summary"
    );
}

/// The small run turned into a rate run: two cells at 1K, one measured
/// against an objective, one over capacity.
fn with_load() -> speedmatrix_report::Report {
    use speedmatrix_report::{
        ArrivalSetup, CellStatus, LoadCell, LoadMeasurements, LoadRun, Percentiles, SloResult,
        SloTermResult,
    };
    let mut report = common::small();
    report.decode.clear();
    report.run.concurrencies.clear();
    report.run.contexts = vec![Tokens::kibi(1)];
    let p = |p50: f64, p99: f64| Percentiles {
        p50,
        p90: (p50 + p99) / 2.0,
        p99,
    };
    report.load = Some(LoadRun {
        mode: speedmatrix_report::LoadKind::Rate,
        arrival: Some(ArrivalSetup {
            process: "poisson".into(),
            burstiness: None,
            seed: 7,
            duration_s: Some(30.0),
            requests: None,
        }),
        max_in_flight: None,
        workload: None,
        slo: Some("ttft_p99=500ms,itl_p99=50ms".into()),
        cells: vec![
            LoadCell {
                context: Tokens::kibi(1),
                requests: None,
                rate_per_s: Some(2.0),
                status: CellStatus::Valid,
                measurements: Some(LoadMeasurements {
                    sent: 60,
                    completed: 59,
                    failed: 0,
                    unfinished: 1,
                    duration_s: 32.0,
                    intended_rate_per_s: Some(2.0),
                    achieved_rate_per_s: Some(1.98),
                    max_in_flight: 9,
                    output_tokens: Tokens::new(15_360),
                    output_tokens_per_s: 480.0,
                    ttft_ms: Some(p(120.0, 420.0)),
                    e2e_ms: Some(p(2_600.0, 3_100.0)),
                    itl_ms: Some(p(9.5, 61.0)),
                    tpot_ms: Some(p(10.1, 12.0)),
                    send_lag_ms: Some(p(0.4, 3.2)),
                    token_count_source: Some(speedmatrix_report::TokenCountSource::UsagePerChunk),
                    shared_prefix_tokens: None,
                    prefix_cache_intended_pct: None,
                    prefix_cache_measured_pct: None,
                    turns: Vec::new(),
                    repeats: None,
                    ttfc_ms: None,
                    output_tokens_per_request: None,
                    input_tokens_per_request: None,
                    reasoning_tokens_per_request: None,
                    reasoning_tokens_per_s: None,
                    answer_tokens_per_s: None,
                    slo: Some(SloResult {
                        met: false,
                        attainment_pct: 95.0,
                        goodput_per_s: 1.78,
                        terms: vec![
                            SloTermResult {
                                term: "ttft_p99".into(),
                                limit_ms: 500.0,
                                value_ms: Some(420.0),
                                met: true,
                            },
                            SloTermResult {
                                term: "itl_p99".into(),
                                limit_ms: 50.0,
                                value_ms: Some(61.0),
                                met: false,
                            },
                        ],
                    }),
                }),
            },
            LoadCell {
                context: Tokens::kibi(1),
                requests: None,
                rate_per_s: Some(64.0),
                status: CellStatus::Skipped {
                    reason: "run interrupted (Ctrl-C)".into(),
                },
                measurements: None,
            },
        ],
        searches: Vec::new(),
    });
    report
}

#[test]
fn a_rate_run_renders_its_cells_in_markdown_csv_and_html() {
    let report = with_load();
    report.validate().expect("a consistent rate run");
    let md = to_markdown(&report);
    assert!(md.contains("## Open-loop request rates"), "{md}");
    assert!(
        !md.contains("## Sustained decode"),
        "no decode matrix in a load run"
    );
    assert!(md.contains("Poisson (exponential gaps), drawn before each cell from seed 7"));
    let rows = common::table(&md, "| Context | Rate | Status");
    assert_eq!(rows.len(), 3);
    assert_eq!(rows[1][1], "2/s");
    assert_eq!(rows[1][3], "59 / 60 (1 unfinished)");
    assert_eq!(rows[1][6], "120 ms / 420 ms");
    assert_eq!(rows[1][11], "1.98 / 2.00");
    assert_eq!(rows[1][13], "missed: itl\\_p99 (95 % of requests)");
    assert_eq!(rows[1][14], "1.78 req/s");
    assert_eq!(rows[2][2], "Skipped");
    assert_eq!(rows[2][14], "—");

    let text = to_csv(&report);
    let mut reader = csv::Reader::from_reader(text.as_bytes());
    let records: Vec<csv::StringRecord> = reader.records().map(Result::unwrap).collect();
    let col = |name: &str| CSV_COLUMNS.iter().position(|c| *c == name).unwrap();
    let first = &records[report.prefill.len()];
    assert_eq!(&first[col("phase")], "rate");
    assert_eq!(&first[col("request_rate_per_s")], "2");
    assert_eq!(&first[col("e2e_p99_ms")], "3100");
    assert_eq!(&first[col("slo_met")], "false");
    assert_eq!(&first[col("goodput_per_s")], "1.78");
    assert_eq!(records.len(), report.prefill.len() + 2);

    let html = to_html(&report);
    assert!(html.contains("<h2>Open-loop request rates measurements</h2>"));
    assert!(html.contains("aria-label=\"TTFT (ms) by Intended requests per second\""));
    assert!(
        html.contains("p99 3,100</title>"),
        "the p90–p99 band: {html}"
    );
    let json = report.to_json().unwrap();
    assert_eq!(
        speedmatrix_report::Report::from_json(&json).unwrap(),
        report
    );
}

#[test]
fn inconsistent_load_cells_are_refused() {
    let mut report = with_load();
    let load = report.load.as_mut().unwrap();
    load.cells[0].requests = Some(4);
    let m = load.cells[0].measurements.as_mut().unwrap();
    m.completed = 60;
    m.output_tokens_per_s = 100.0;
    let e = report.validate().unwrap_err().to_string();
    assert!(e.contains("not both"), "{e}");
    assert!(
        e.contains("completed + failed + unfinished must equal sent"),
        "{e}"
    );
    assert!(e.contains("is not the 15360 output tokens"), "{e}");
}

#[test]
fn an_interference_probe_renders_as_prefill_under_load() {
    let mut report = common::small();
    let m = report.decode[0].measurements.as_mut().unwrap();
    m.interference = Some(speedmatrix_report::Interference {
        prompt_tokens: Tokens::kibi(32),
        ttft_alone_ms: Some(2_100.0),
        ttft_under_load_ms: Some(2_480.0),
        tokens_per_s_before: 150.0,
        tokens_per_s_during: 40.0,
        tokens_per_s_after: 149.0,
        itl_during_ms: None,
        tokens_lost: 280.0,
        stall_ms: 1_866.7,
        timeline: [
            (-1_000.0, 150.0),
            (0.0, 40.0),
            (1_000.0, 40.0),
            (2_000.0, 149.0),
        ]
        .map(|(t_ms, tokens_per_s)| speedmatrix_report::TimelinePoint { t_ms, tokens_per_s })
        .to_vec(),
        failure: None,
    });
    let md = to_markdown(&report);
    let rows = common::table(&md, "| Context | Concurrency | Injected prompt");
    assert_eq!(rows.len(), 2, "one probed cell");
    assert_eq!(rows[1][2], "32K");
    assert_eq!(rows[1][4], "2,480 ms");
    assert_eq!(rows[1][5], "150.0 / 40.0 / 149.0");
    assert_eq!(
        (rows[1][7].as_str(), rows[1][8].as_str()),
        ("1,867 ms", "280")
    );
    let text = to_csv(&report);
    let mut reader = csv::Reader::from_reader(text.as_bytes());
    let records: Vec<csv::StringRecord> = reader.records().map(Result::unwrap).collect();
    let col = |name: &str| CSV_COLUMNS.iter().position(|c| *c == name).unwrap();
    let first = &records[report.prefill.len()];
    assert_eq!(&first[col("injected_prompt_tokens")], "32768");
    assert_eq!(&first[col("injection_stall_ms")], "1866.7");
    let html = to_html(&report);
    assert!(html.contains("<h2>Prefill under load</h2>"));
    // The timeline: one step line and the first token's mark.
    assert!(
        html.contains("around the injected prompt, 0 context"),
        "{html}"
    );
    assert!(html.contains("first token after 2,480.0 ms"));
    report.validate().unwrap();
}

#[test]
fn a_comparison_sits_on_run_bs_page_well_formed() {
    let a = common::seed();
    let mut b = common::seed();
    let cell = b
        .decode
        .iter_mut()
        .find(|c| c.measurements.is_some())
        .unwrap();
    let m = cell.measurements.as_mut().unwrap();
    m.total_tokens_per_s *= 0.8;
    m.output_tokens =
        speedmatrix_units::Tokens::new((m.total_tokens_per_s * m.measured_s).round() as u64);
    let comparison = speedmatrix_report::compare(&a, &b, speedmatrix_report::Threshold::DEFAULT);
    let html = comparison.to_html(&b);
    let (elements, text) = parse_strict(&html);
    assert!(text.contains("Against run A"), "the comparison's section");
    assert!(
        text.contains("1 regressed"),
        "its summary counts the slower cell"
    );
    assert!(
        elements
            .iter()
            .any(|e| e.name == "td" && e.attr("class") == Some("outside")),
        "the regressed cell is marked"
    );
    // The rest of B's page is still there, after the comparison.
    let at = |needle: &str| html.find(needle).unwrap();
    assert!(at("Against run A") < at("Sustained decode matrix"));
}
