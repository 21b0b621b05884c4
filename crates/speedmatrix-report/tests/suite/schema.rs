//! The checked-in JSON Schema is current, and real documents validate against it.

use crate::common;

use std::path::PathBuf;

use serde_json::Value;
use speedmatrix_report::Report;

fn schema_path() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("schema/run.schema.json")
}

fn generated() -> String {
    serde_json::to_string_pretty(&Report::json_schema()).unwrap() + "\n"
}

/// Set `UPDATE_SCHEMA=1` to rewrite the checked-in schema from the types.
#[test]
fn checked_in_schema_is_current() {
    let fresh = generated();
    if std::env::var_os("UPDATE_SCHEMA").is_some() {
        std::fs::write(schema_path(), &fresh).unwrap();
    }
    let checked_in = std::fs::read_to_string(schema_path()).unwrap_or_default();
    assert!(
        checked_in == fresh,
        "crates/speedmatrix-report/schema/run.schema.json is stale: the report types changed. \
         Regenerate it with `UPDATE_SCHEMA=1 cargo test -p speedmatrix-report --test suite schema`, \
         and bump SCHEMA_VERSION if old documents no longer read"
    );
}

fn validator() -> jsonschema::Validator {
    let schema: Value =
        serde_json::from_str(&std::fs::read_to_string(schema_path()).unwrap()).unwrap();
    jsonschema::validator_for(&schema).unwrap()
}

fn errors(instance: &Value) -> Vec<String> {
    validator()
        .iter_errors(instance)
        .map(|e| format!("{}: {e}", e.instance_path()))
        .collect()
}

#[test]
fn written_documents_validate() {
    for report in [common::seed(), common::small()] {
        let json: Value = serde_json::from_str(&report.to_json().unwrap()).unwrap();
        assert_eq!(errors(&json), Vec::<String>::new());
    }
}

#[test]
fn schema_rejects_what_the_reader_rejects() {
    let good: Value = serde_json::from_str(&common::small().to_json().unwrap()).unwrap();
    let broken = |edit: &dyn Fn(&mut Value)| {
        let mut doc = good.clone();
        edit(&mut doc);
        let text = doc.to_string();
        assert!(Report::from_json(&text).is_err(), "reader accepted {text}");
        !errors(&doc).is_empty()
    };
    assert!(broken(
        &|d| d["decode"][0]["measurements"]["ttft_ms"] = Value::from("54 ms")
    ));
    assert!(broken(&|d| d["decode"][0]["concurrency"] = Value::from(0)));
    assert!(broken(&|d| d["run"]["api"] = Value::from("grpc")));
    assert!(broken(
        &|d| d["decode"][5]["status"]["kind"] = Value::from("fine")
    ));
    assert!(broken(&|d| d["engine"]["colour"] = Value::from("blue")));
    assert!(broken(&|d| {
        d["hardware"].as_object_mut().unwrap().remove("gpus");
        d.as_object_mut().unwrap().remove("run");
    }));
}
