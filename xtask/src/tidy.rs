//! Tidy checks run by `cargo test -p xtask`: the architecture's invariants
//! (docs/ARCHITECTURE.md) enforced on the real manifests and sources.

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::process::Command;

    use crate::util::project_root;

    /// Each workspace package and its normal (non-dev, non-build) dependencies.
    fn dependencies() -> BTreeMap<String, Vec<String>> {
        let out = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
            .args([
                "metadata",
                "--format-version",
                "1",
                "--no-deps",
                "--offline",
            ])
            .current_dir(project_root())
            .output()
            .expect("cargo metadata runs");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let meta: serde_json::Value =
            serde_json::from_slice(&out.stdout).expect("metadata is JSON");
        let mut map = BTreeMap::new();
        for pkg in meta["packages"].as_array().expect("packages") {
            let deps = pkg["dependencies"]
                .as_array()
                .expect("dependencies")
                .iter()
                .filter(|d| d["kind"].is_null())
                .map(|d| d["name"].as_str().unwrap_or_default().to_owned())
                .collect();
            map.insert(pkg["name"].as_str().unwrap_or_default().to_owned(), deps);
        }
        map
    }

    fn assert_no_deps(deps: &BTreeMap<String, Vec<String>>, krate: &str, forbidden: &[&str]) {
        let have = deps
            .get(krate)
            .unwrap_or_else(|| panic!("{krate} is not in the workspace"));
        for f in forbidden {
            assert!(
                !have.iter().any(|d| d == f),
                "{krate} must not depend on {f} (docs/ARCHITECTURE.md)"
            );
        }
    }

    #[test]
    fn pure_crates_do_no_io_and_know_no_http() {
        let deps = dependencies();
        let io = [
            "tokio",
            "hyper",
            "hyper-util",
            "tokenizers",
            "speedmatrix-client",
            "speedmatrix-runner",
        ];
        for krate in [
            "speedmatrix-units",
            "speedmatrix-engines",
            "speedmatrix-capacity",
            "speedmatrix-metrics",
            "speedmatrix-report",
        ] {
            assert_no_deps(&deps, krate, &io);
        }
    }

    #[test]
    fn engine_knowledge_is_a_leaf_and_the_simulator_stands_alone() {
        let deps = dependencies();
        let internal: Vec<&str> = deps
            .keys()
            .map(String::as_str)
            .filter(|k| k.starts_with("speedmatrix") && *k != "speedmatrix-units")
            .collect();
        assert_no_deps(&deps, "speedmatrix-engines", &internal);
        // The simulator is the tests' ground truth: it must not share the
        // client's or the runner's code, or a bug in them would hide in both.
        assert_no_deps(
            &deps,
            "speedmatrix-sim",
            &[
                "speedmatrix-client",
                "speedmatrix-runner",
                "speedmatrix-metrics",
            ],
        );
    }

    #[test]
    fn the_client_knows_http_not_matrices() {
        let deps = dependencies();
        let above = [
            "speedmatrix-workload",
            "speedmatrix-capacity",
            "speedmatrix-metrics",
            "speedmatrix-report",
            "speedmatrix-runner",
            "speedmatrix-sim",
            "tokenizers",
        ];
        assert_no_deps(&deps, "speedmatrix-client", &above);
        assert_no_deps(
            &deps,
            "speedmatrix-workload",
            &["hyper", "tokio", "speedmatrix-client"],
        );
    }

    #[test]
    fn the_architecture_page_names_every_crate() {
        let root = project_root();
        let page = std::fs::read_to_string(root.join("docs/ARCHITECTURE.md"))
            .expect("docs/ARCHITECTURE.md");
        for entry in std::fs::read_dir(root.join("crates")).expect("crates/") {
            let name = entry
                .expect("entry")
                .file_name()
                .to_string_lossy()
                .into_owned();
            assert!(
                page.contains(&format!("crates/{name}")),
                "docs/ARCHITECTURE.md does not describe crates/{name}"
            );
        }
    }

    #[test]
    fn every_crate_root_opens_with_docs() {
        let root = project_root();
        for entry in std::fs::read_dir(root.join("crates")).expect("crates/") {
            let dir = entry.expect("entry").path();
            for file in ["src/lib.rs", "src/main.rs"] {
                let path = dir.join(file);
                if let Ok(text) = std::fs::read_to_string(&path) {
                    assert!(
                        text.starts_with("//!"),
                        "{} must open with //! crate docs",
                        path.display()
                    );
                }
            }
        }
    }
}
