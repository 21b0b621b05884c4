//! The files a study names — its points' run options (`--model-config`, a GPU catalog, a
//! tokenizer file, …) and the files its server command names — found, checked and read, so
//! that `study k8s` packs them into the ConfigMap beside the study file: each is mounted at
//! its own relative path under the pods' working folder, so the study reads the same paths
//! in a pod as here, unchanged.

use std::collections::BTreeMap;
use std::path::{Component, Path, PathBuf};

use crate::{ServerCommand, Study, StudyError};

/// Where the model cache volume is mounted in a pod: a file named under it is read there,
/// not packed.
pub const MODEL_CACHE_MOUNT: &str = "/models";

/// The most a ConfigMap may hold (Kubernetes refuses larger objects: 1 MiB, etcd's limit).
pub const CONFIGMAP_LIMIT: usize = 1_048_576;

/// A file a study names, packed into the ConfigMap.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PackedFile {
    /// Its path relative to the study's working folder, `/`-separated, as the study names it.
    pub path: String,
    /// Its bytes.
    pub bytes: Vec<u8>,
    /// Who names it, for messages: `point kv=fp8: --model-config`.
    pub named_by: String,
}

/// Every file the study's points name, read from `base` (the folder `study run` would run
/// in): relative paths are packed; a path under [`MODEL_CACHE_MOUNT`] is left to the model
/// cache volume (when `model_cache`); anything else — an absolute path, a path out of `base`,
/// a folder, a file that cannot be read — is refused, naming the point, the flag and what to
/// do. The files and the study file together must fit a ConfigMap.
pub fn study_files(
    study: &Study,
    study_text: &str,
    base: &Path,
    model_cache: bool,
) -> Result<Vec<PackedFile>, StudyError> {
    let mut files: BTreeMap<String, PackedFile> = BTreeMap::new();
    for point in study.points()? {
        let options = study.run_options(&point, 0)?;
        let mut named: Vec<(String, PathBuf, bool)> = options
            .named_paths()
            .into_iter()
            .map(|(flag, path)| (flag.to_owned(), path, true))
            .collect();
        named.extend(
            command_files(&point.server_command(&study.server, Some(0))?, base)
                .into_iter()
                .map(|p| ("[server] command".to_owned(), p, false)),
        );
        for (flag, path, required) in named {
            let who = format!("point {}: {flag} {}", point.name, path.display());
            if let Some(file) = pack(&path, base, model_cache, &who, required)?
                && !files.contains_key(&file.path)
            {
                files.insert(file.path.clone(), file);
            }
        }
    }
    let files: Vec<PackedFile> = files.into_values().collect();
    let total = study_text.len() + files.iter().map(|f| f.bytes.len()).sum::<usize>();
    if total > CONFIGMAP_LIMIT {
        let biggest = files
            .iter()
            .max_by_key(|f| f.bytes.len())
            .map(|f| format!(" (the largest: {}, {} bytes)", f.path, f.bytes.len()))
            .unwrap_or_default();
        return Err(StudyError::Invalid(format!(
            "the study file and the {} files it names take {total} bytes, more than the \
             {CONFIGMAP_LIMIT} a ConfigMap holds{biggest}: put the large ones on the model cache \
             volume (--model-cache-pvc or --model-cache-host-path, mounted at {MODEL_CACHE_MOUNT}) \
             and name them by their path there",
            files.len()
        )));
    }
    Ok(files)
}

/// The words of a server command that name files here (relative paths of existing regular
/// files): a `--profile profiles/a.json`, a `--chat-template tpl.jinja`.
fn command_files(command: &ServerCommand, base: &Path) -> Vec<PathBuf> {
    let words = match command {
        ServerCommand::Argv(words) => words.clone(),
        ServerCommand::Shell(script) => shlex::split(script).unwrap_or_default(),
    };
    words
        .iter()
        .skip(1)
        // `--flag=path` names a path too.
        .map(|w| w.split_once('=').map_or(w.as_str(), |(_, v)| v))
        .map(PathBuf::from)
        .filter(|p| p.is_relative() && base.join(p).is_file())
        .collect()
}

/// `path` packed, `None` when the model cache holds it, or why it cannot go to a pod.
/// A path the options name must be readable; one the command names was found already.
fn pack(
    path: &Path,
    base: &Path,
    model_cache: bool,
    who: &str,
    required: bool,
) -> Result<Option<PackedFile>, StudyError> {
    let refuse = |why: String| Err(StudyError::Invalid(format!("{who}: {why}")));
    if path.is_absolute() {
        if model_cache && path.starts_with(MODEL_CACHE_MOUNT) {
            return Ok(None);
        }
        return refuse(format!(
            "a pod cannot read this machine's absolute paths: name the file relative to the \
             folder `study k8s` runs in (it is packed into the ConfigMap), or put it on the model \
             cache volume (--model-cache-pvc or --model-cache-host-path) and name it under \
             {MODEL_CACHE_MOUNT}"
        ));
    }
    let Some(relative) = normal_relative(path) else {
        return refuse(
            "a path out of the study's folder (`..`) cannot be packed: move the file into it"
                .into(),
        );
    };
    let here = base.join(&relative);
    if here.is_dir() {
        return refuse(format!(
            "a folder cannot be packed into a ConfigMap: put it on the model cache volume and \
             name it under {MODEL_CACHE_MOUNT}"
        ));
    }
    match std::fs::read(&here) {
        Ok(bytes) => Ok(Some(PackedFile {
            path: relative,
            bytes,
            named_by: who.to_owned(),
        })),
        Err(e) if required => refuse(format!("cannot read it ({e})")),
        Err(_) => Ok(None),
    }
}

/// `path` as `a/b/c` when it stays inside its base (no `..`, no root), `./` dropped.
fn normal_relative(path: &Path) -> Option<String> {
    let mut parts = Vec::new();
    for c in path.components() {
        match c {
            Component::Normal(p) => parts.push(p.to_str()?.to_owned()),
            Component::CurDir => {}
            _ => return None,
        }
    }
    (!parts.is_empty()).then(|| parts.join("/"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn study(catalog: &str) -> Study {
        Study::from_toml(&format!(
            r#"name = "f"
[server]
command = "serve --template tpl/chat.jinja --port {{port}}"
[[points]]
name = "a"
[run]
tokenizer = "bundled"
gpu-catalog = "{catalog}"
"#
        ))
        .unwrap()
    }

    #[test]
    fn named_files_are_packed_and_what_a_pod_cannot_read_is_refused() {
        let base =
            std::env::temp_dir().join(format!("speedmatrix-k8s-files-{}", std::process::id()));
        std::fs::create_dir_all(base.join("tpl")).unwrap();
        std::fs::write(base.join("tpl/chat.jinja"), "{{ messages }}").unwrap();
        std::fs::write(base.join("gpus.json"), "{}").unwrap();
        let files = study_files(&study("./gpus.json"), "", &base, false).unwrap();
        let paths: Vec<&str> = files.iter().map(|f| f.path.as_str()).collect();
        assert_eq!(paths, ["gpus.json", "tpl/chat.jinja"]);
        let refused = |catalog: &str, cache: bool| {
            study_files(&study(catalog), "", &base, cache)
                .unwrap_err()
                .to_string()
        };
        assert!(refused("missing.json", false).contains("cannot read"));
        assert!(refused("tpl", false).contains("folder"));
        assert!(refused("../gpus.json", false).contains(".."));
        assert!(refused("/etc/gpus.json", false).contains("absolute"));
        assert!(study_files(&study("/models/gpus.json"), "", &base, true).is_ok());
        std::fs::write(base.join("big.json"), vec![b' '; CONFIGMAP_LIMIT]).unwrap();
        assert!(refused("big.json", false).contains("more than"));
        let _ = std::fs::remove_dir_all(&base);
    }

    #[test]
    fn paths_stay_inside_the_study_folder() {
        assert_eq!(
            normal_relative(Path::new("./a/b.json")).as_deref(),
            Some("a/b.json")
        );
        assert_eq!(normal_relative(Path::new("../x.json")), None);
        assert_eq!(normal_relative(Path::new("a/../../x")), None);
        assert_eq!(normal_relative(Path::new("/etc/passwd")), None);
    }
}
