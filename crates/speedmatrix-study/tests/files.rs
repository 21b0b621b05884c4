//! The checked-in schema is the types', and the repo's example studies are valid.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;

use speedmatrix_study::Study;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Set `UPDATE_SCHEMA=1` to rewrite the checked-in schema from the types.
#[test]
fn checked_in_schema_is_current() {
    let path = root().join("schema/study.schema.json");
    let fresh = serde_json::to_string_pretty(&Study::json_schema()).unwrap() + "\n";
    if std::env::var_os("UPDATE_SCHEMA").is_some() {
        std::fs::write(&path, &fresh).unwrap();
    }
    let checked_in = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        checked_in == fresh,
        "crates/speedmatrix-study/schema/study.schema.json is stale: regenerate it with \
         `UPDATE_SCHEMA=1 cargo test -p speedmatrix-study --test files`"
    );
}

#[test]
fn the_example_studies_are_valid_and_their_templates_fill() {
    let dir = root().join("../../examples/studies");
    let mut seen = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "toml") {
            continue;
        }
        let study = Study::from_toml(&std::fs::read_to_string(&path).unwrap())
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        for p in study.points().unwrap() {
            p.fill(&study.server.command, 8000).unwrap();
            for a in &study.run.args {
                p.fill(a, 8000).unwrap();
            }
        }
        seen += 1;
    }
    assert!(
        seen >= 2,
        "examples/studies holds the simulator and vLLM studies"
    );
}
