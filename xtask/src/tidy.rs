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
                .map(|d| {
                    let name = d["name"].as_str().unwrap_or_default();
                    // An optional dependency is named `name?`: it comes with a feature only.
                    if d["optional"].as_bool() == Some(true) {
                        format!("{name}?")
                    } else {
                        name.to_owned()
                    }
                })
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

    /// An embedder of the runner can leave the simulator out (`default-features = false`).
    #[test]
    fn the_runner_embeds_the_simulator_only_by_feature() {
        let deps = dependencies();
        let runner = &deps["speedmatrix-runner"];
        assert!(
            runner.iter().any(|d| d == "speedmatrix-sim?"),
            "speedmatrix-runner depends on speedmatrix-sim through its `embedded` feature: {runner:?}"
        );
        assert_no_deps(&deps, "speedmatrix-runner", &["speedmatrix-sim"]);
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

    /// Every `.rs` file under `dir`, recursively.
    fn rust_files(dir: &std::path::Path, out: &mut Vec<std::path::PathBuf>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                rust_files(&path, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path);
            }
        }
    }

    /// A source file's code without its tests (they follow the first `#[cfg(test)]`).
    fn code_of(path: &std::path::Path) -> String {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        match text.find("#[cfg(test)]") {
            Some(i) => text[..i].to_owned(),
            None => text,
        }
    }

    /// `speedmatrix-capacity` → `CapacityError`.
    fn error_name(krate: &str) -> String {
        let suffix = krate.trim_start_matches("speedmatrix-");
        let mut chars = suffix.chars();
        let first = chars.next().map(|c| c.to_ascii_uppercase());
        first.into_iter().chain(chars).collect::<String>() + "Error"
    }

    /// One public error type per library crate, named after the crate (`speedmatrix-runner`
    /// → `RunnerError`), so a caller knows where a failure came from and what to match.
    #[test]
    fn each_library_crate_has_one_error_named_after_it() {
        let root = project_root();
        for entry in std::fs::read_dir(root.join("crates")).expect("crates/") {
            let dir = entry.expect("entry").path();
            let krate = dir
                .file_name()
                .unwrap_or_default()
                .to_string_lossy()
                .into_owned();
            if krate == "speedmatrix" {
                continue; // the binary: anyhow and its usage error
            }
            let mut files = Vec::new();
            rust_files(&dir.join("src"), &mut files);
            let mut errors = Vec::new();
            for file in &files {
                let code = code_of(file);
                let lines: Vec<&str> = code.lines().collect();
                for (i, line) in lines.iter().enumerate() {
                    if !(line.contains("#[derive(") && line.contains("thiserror::Error")) {
                        continue;
                    }
                    let item = lines[i + 1..].iter().find(|l| {
                        l.contains(" enum ")
                            || l.contains(" struct ")
                            || l.starts_with("pub ")
                            || l.starts_with("enum ")
                            || l.starts_with("struct ")
                    });
                    let Some(item) = item else { continue };
                    let public = item.trim_start().starts_with("pub enum")
                        || item.trim_start().starts_with("pub struct");
                    if public {
                        let name = item
                            .split_whitespace()
                            .nth(2)
                            .unwrap_or_default()
                            .trim_end_matches(['{', '(', ';'])
                            .to_owned();
                        errors.push((name, file.display().to_string()));
                    }
                }
            }
            assert!(
                errors.len() <= 1,
                "{krate} has {} public error types ({errors:?}); fold them into one {}",
                errors.len(),
                error_name(&krate)
            );
            if let Some((name, file)) = errors.first() {
                assert_eq!(
                    name,
                    &error_name(&krate),
                    "{file}: {krate}'s error type is named after the crate"
                );
            }
        }
    }

    /// A name a user types (an engine, a mode, a GPU, a dtype) is checked: an unknown one is an
    /// error listing the known ones, never a silent default such as
    /// `Engine::from_name(s).unwrap_or(Engine::Vllm)` or `s.parse().unwrap_or(...)`.
    #[test]
    fn user_typed_names_never_fall_back_silently() {
        let root = project_root();
        let mut files = Vec::new();
        rust_files(&root.join("crates"), &mut files);
        rust_files(&root.join("xtask/src"), &mut files);
        let mut found = Vec::new();
        for file in files {
            if file
                .components()
                .any(|c| c.as_os_str() == "tests" || c.as_os_str() == "benches")
            {
                continue;
            }
            // Code only (no comments), whitespace squeezed, so a call split over lines is whole.
            let code: String = code_of(&file)
                .lines()
                .filter(|l| !l.trim_start().starts_with("//"))
                .flat_map(|l| l.split_whitespace().map(|w| format!("{w} ")))
                .collect::<String>()
                .replace(" .", ".")
                .replace("( ", "(")
                .replace(" )", ")");
            for call in ["from_name(", ".parse(", ".parse::<"] {
                let mut rest = code.as_str();
                while let Some(at) = rest.find(call) {
                    let after = &rest[at..];
                    let open = after.find('(').unwrap_or(0);
                    let mut depth = 0usize;
                    let mut end = after.len();
                    for (i, c) in after[open..].char_indices() {
                        match c {
                            '(' => depth += 1,
                            ')' => {
                                depth -= 1;
                                if depth == 0 {
                                    end = open + i + 1;
                                    break;
                                }
                            }
                            _ => {}
                        }
                    }
                    let tail = after[end..].trim_start();
                    if tail.starts_with(".unwrap_or") {
                        found.push(format!(
                            "{}: {}",
                            file.display(),
                            &after[..end.min(after.len())]
                        ));
                    }
                    rest = &after[call.len()..];
                }
            }
        }
        assert!(
            found.is_empty(),
            "a user-typed name falls back silently; make an unknown value an error:\n{}",
            found.join("\n")
        );
    }
}
