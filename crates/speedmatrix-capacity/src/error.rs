//! The one error type of this crate.

/// Why a capacity could not be predicted or a capacity input was rejected.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum CapacityError {
    /// The config.json text is not JSON, or not a JSON object.
    #[error("config.json is not a JSON object ({0}); pass the model's Hugging Face config.json")]
    NotJson(String),
    /// A field the predictor needs is missing from config.json.
    #[error(
        "config.json has no `{field}` (looked in the top level and `text_config`); \
         add it to the file or pass a config that describes the language model"
    )]
    MissingField {
        /// The field (or the alternatives) looked for.
        field: &'static str,
    },
    /// A field has a value the predictor cannot use.
    #[error("config.json field `{field}` has an unusable value `{value}`: {why}")]
    BadField {
        /// The field.
        field: &'static str,
        /// The value as found.
        value: String,
        /// What is wrong with it.
        why: &'static str,
    },
    /// A flag value is out of range.
    #[error("{flag} = {value} is out of range: {why}")]
    BadFlag {
        /// The flag, as the engine spells it.
        flag: &'static str,
        /// The value given.
        value: String,
        /// The accepted range.
        why: &'static str,
    },
    /// The GPU name is not in the catalog.
    #[error(
        "unknown GPU `{0}`; use a catalog key (rtx3090, h100-sxm; `speedmatrix capacity --list-gpus` \
         lists them), the name nvidia-smi, rocm-smi or xpu-smi prints (`NVIDIA GeForce RTX 3090`), \
         the memory the runtime sees on it (`23.5GiB`), or add it with --gpu-catalog FILE"
    )]
    UnknownGpu(String),
    /// Several catalog entries print the same name (e.g. the 10 GB and 12 GB
    /// RTX 3080).
    #[error(
        "`{name}` is the name of several GPUs in the catalog ({}); pass one of those keys \
         with --gpu, or the memory the runtime reports, like `11.5GiB`",
        keys.join(", ")
    )]
    AmbiguousGpu {
        /// The name given.
        name: String,
        /// The catalog keys that print it.
        keys: Vec<String>,
    },
    /// A GPU catalog file is not usable.
    #[error("GPU catalog: {0}; see data/gpus.json in speedmatrix-capacity for the shape")]
    BadCatalog(String),
    /// A dtype string that is not known.
    #[error("unknown dtype `{0}`; expected e.g. bfloat16, float16, float32, fp8, fp8_e5m2")]
    UnknownDtype(String),
    /// The model's layers cannot share one vLLM block pool the way vLLM plans it.
    #[error("vLLM cannot plan a shared KV pool for this model: {0}")]
    Unplannable(String),
    /// The memory left for the KV cache is zero or negative.
    #[error(
        "no memory is left for the KV cache: {requested_gib:.2} GiB requested, \
         {non_kv_gib:.2} GiB needed for weights and overhead; raise the memory utilization, \
         use a larger GPU or more tensor-parallel ranks"
    )]
    NoKvMemory {
        /// Memory the engine reserves, GiB.
        requested_gib: f64,
        /// Weights plus estimated overhead, GiB.
        non_kv_gib: f64,
    },
    /// A measured capacity from a server is unusable (zero blocks, zero block size…).
    #[error("the server reported an unusable KV capacity: {0}")]
    BadMeasurement(String),
}
