//! Tokenizer sources, the bundled asset's recipe, and chat counting.

use crate::common;

use std::path::{Path, PathBuf};

use speedmatrix_units::Tokens;
use speedmatrix_workload::{
    BpeRecipe, CacheKey, ChatOverhead, HfCache, PromptBuilder, Tokenizer, WorkloadError,
    render_chatml,
};

const ASSET: &str = include_str!("../../assets/bundled-tokenizer.json");

#[test]
fn bundled_asset_is_what_its_recipe_trains() {
    // The full recipe (16K vocab, 8 MiB of text): about 10 s in a debug build.
    let trained = BpeRecipe::BUNDLED.train_json().unwrap();
    assert!(
        trained == ASSET,
        "run `cargo xtask gen-tokenizer` and commit the asset"
    );
    assert!(ASSET.len() < 1_500_000);
}

#[test]
fn bundled_tokenizer_is_a_16k_byte_level_bpe_with_bos() {
    let tok = Tokenizer::bundled().unwrap();
    assert_eq!(tok.name(), "bundled");
    assert_eq!(tok.vocab_size(), 16_384);
    assert_eq!(tok.id_to_token(0).as_deref(), Some("<|bos|>"));
    for t in ["<|eos|>", "<|im_start|>", "<|im_end|>"] {
        assert!(tok.token_to_id(t).is_some(), "{t}");
    }
    // Any byte sequence encodes (byte-level), and text round-trips.
    let text = "Zürich, 12:45 p.m. — \"naïve\" café ☕ costs $3.50!\n\tOK?";
    let ids = tok.encode(text).unwrap();
    assert_eq!(ids[0], 0);
    assert_eq!(tok.decode(&ids).unwrap(), text);
    assert_eq!(tok.encode_count(text).unwrap(), ids.len());
    let no_bos = tok.clone().with_add_special_tokens(false);
    assert_eq!(no_bos.encode_count(text).unwrap(), ids.len() - 1);
    assert!(
        tok.config()
            .unwrap()
            .chat_template
            .as_deref()
            .unwrap()
            .contains("<|im_start|>")
    );
}

/// A temporary folder removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("sm-workload-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

const CONFIG: &str = r#"{"bos_token": "<|bos|>", "eos_token": {"content": "<|im_end|>"},
    "add_bos_token": true, "chat_template": "{{ messages }}"}"#;

fn write_model(dir: &Path, tokenizer_json: &str) {
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(dir.join("tokenizer.json"), tokenizer_json).unwrap();
    std::fs::write(dir.join("tokenizer_config.json"), CONFIG).unwrap();
}

#[test]
fn loads_a_file_a_model_folder_and_the_hub_cache() {
    let tmp = TempDir::new("sources");
    let model = tmp.0.join("model");
    write_model(&model, ASSET);
    let bundled = Tokenizer::bundled().unwrap();
    let text = "The silver lantern measured 4.5 meters.";

    let from_file = Tokenizer::load(model.join("tokenizer.json").to_str().unwrap()).unwrap();
    assert!(from_file.config().is_none());
    let from_dir = Tokenizer::load(model.to_str().unwrap()).unwrap();
    assert_eq!(
        from_dir.config().unwrap().chat_template.as_deref(),
        Some("{{ messages }}")
    );

    let snapshot = tmp.0.join("hub/models--acme--tiny/snapshots/abc123");
    write_model(&snapshot, ASSET);
    std::fs::create_dir_all(tmp.0.join("hub/models--acme--tiny/refs")).unwrap();
    std::fs::write(tmp.0.join("hub/models--acme--tiny/refs/main"), "abc123\n").unwrap();
    let cache = HfCache::new(tmp.0.join("hub"));
    let from_hub = Tokenizer::from_hf_cache("acme/tiny", &cache).unwrap();
    assert_eq!(from_hub.name(), "acme/tiny");
    let by_commit = Tokenizer::from_hf_cache("acme/tiny@abc123", &cache).unwrap();

    for tok in [&from_file, &from_dir, &from_hub, &by_commit] {
        assert_eq!(
            tok.encode(text).unwrap(),
            bundled.encode(text).unwrap(),
            "{}",
            tok.name()
        );
    }

    let err = Tokenizer::from_hf_cache("acme/tiny@v2", &cache).unwrap_err();
    assert!(
        matches!(&err, WorkloadError::NotCached { missing, .. } if missing == "refs/v2"),
        "{err}"
    );
    let err = Tokenizer::from_hf_cache("acme/other", &cache).unwrap_err();
    assert!(err.to_string().contains("models--acme--other"), "{err}");
}

#[test]
fn config_add_bos_token_adds_bos_when_the_tokenizer_json_does_not() {
    // The same tokenizer without its post-processor, as some models ship it;
    // transformers then adds BOS because tokenizer_config.json says so.
    let mut json: serde_json::Value = serde_json::from_str(ASSET).unwrap();
    json["post_processor"] = serde_json::Value::Null;
    let tmp = TempDir::new("bos");
    write_model(&tmp.0, &json.to_string());
    let tok = Tokenizer::from_model_dir(&tmp.0).unwrap();
    let ids = tok.encode("Hello there.").unwrap();
    assert_eq!(
        ids,
        Tokenizer::bundled()
            .unwrap()
            .encode("Hello there.")
            .unwrap()
    );
    assert_eq!(tok.special_tokens_count(), 1);
    let builder = PromptBuilder::new(tok.clone());
    let p = builder
        .prompt(Tokens::new(777), 1, &CacheKey::unique(0, 0, 0))
        .unwrap();
    assert_eq!(tok.encode_count(&p.text).unwrap(), 777);
}

#[test]
fn a_broken_tokenizer_file_is_a_typed_error() {
    let tmp = TempDir::new("broken");
    let path = tmp.0.join("tokenizer.json");
    std::fs::write(&path, "{ not json").unwrap();
    let err = Tokenizer::from_file(&path).unwrap_err();
    assert!(matches!(err, WorkloadError::Parse { .. }), "{err}");
    assert!(err.to_string().contains("tokenizer.json"), "{err}");
}

/// A server applying ChatML to one user message, counting without BOS.
fn chatml_server_count(tok: &Tokenizer, content: &str) -> u64 {
    let rendered = render_chatml([("user", content)]);
    tok.clone()
        .with_add_special_tokens(false)
        .encode_count(&rendered)
        .unwrap() as u64
}

#[test]
fn chat_prompts_match_the_servers_count_with_its_template() {
    let builder = common::bundled_builder();
    let tok = builder.tokenizer();
    let probe = chatml_server_count(tok, ChatOverhead::PROBE);
    let overhead = ChatOverhead::from_probe(tok, probe).unwrap();
    assert!(overhead.0.get() > 5, "{overhead:?}");
    for n in [overhead.0.get() + 1, 100, 8_191, 16_384] {
        let key = CacheKey::unique(0, n, 0);
        let p = builder
            .chat_prompt(Tokens::new(n), 2, &key, overhead)
            .unwrap();
        assert_eq!(chatml_server_count(tok, &p.text), n, "n={n}");
        assert_eq!(p.expected_tokens, Tokens::new(n));
        // With a wrong overhead (either way), re-counting corrects it.
        let wrong = ChatOverhead(Tokens::new(overhead.0.get() + n % 2 * 5 - 2));
        let checked = builder
            .chat_prompt_checked(Tokens::new(n), 2, &key, wrong, |c| {
                Ok::<_, std::convert::Infallible>(chatml_server_count(tok, c))
            })
            .unwrap();
        assert_eq!(chatml_server_count(tok, &checked.text), n, "n={n}");
    }
    let err = builder
        .chat_prompt(Tokens::new(3), 2, &CacheKey::unique(0, 0, 0), overhead)
        .unwrap_err();
    assert!(
        matches!(
            err,
            WorkloadError::TooShort {
                what: "the chat template",
                ..
            }
        ),
        "{err}"
    );
    assert!(ChatOverhead::from_probe(tok, 2).is_err());
}
