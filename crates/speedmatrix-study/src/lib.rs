//! Studies: one matrix per server configuration, many configurations in one comparison.
//! The crate is the study file (a server command template, a parameter grid or list,
//! readiness and shutdown rules, and the run's options as `speedmatrix run`'s flags), its
//! points with their templates filled in and their typed run options, the journal a study
//! resumes from, the study as Kubernetes manifests, and the study loop itself
//! ([`run_study`]): each point's server started in its own process group, the matrix measured
//! in this process by `speedmatrix-runner`, the server stopped; one point after another, or
//! several at once on GPUs of their own ([`StudySettings::parallel`], [`GpuPool`]), with the
//! study's time left ([`StudyEta`]) and each point's figures told to a [`StudyObserver`].
//!
//! ```
//! use speedmatrix_study::Study;
//!
//! let study = Study::from_toml(r#"
//!     name = "KV cache dtype"
//!     [server]
//!     command = "vllm serve my-model --kv-cache-dtype {kv} --port {port}"
//!     ready_timeout = "10m"
//!     [parameters]
//!     kv = ["auto", "fp8"]
//!     [run]
//!     tokenizer = "my-model"
//!     contexts = "0,16k"
//!     concurrency = [1, 8, 32]
//!     kv-cache-dtype = "{kv}"
//! "#)?;
//! let points = study.points()?;
//! assert_eq!(points.len(), 2);
//! // Each filled-in value is one argument; no shell reads the command.
//! let command = points[1].server_command(&study.server, Some(8001))?;
//! assert_eq!(command.to_string(), "vllm serve my-model --kv-cache-dtype fp8 --port 8001");
//! let options = study.run_options(&points[1], 8001)?;
//! assert_eq!(options.url.as_deref(), Some("http://127.0.0.1:8001"));
//! assert_eq!(options.engine_options.kv_cache_dtype, "fp8");
//! # Ok::<(), speedmatrix_study::StudyError>(())
//! ```

mod attempt;
mod command;
mod error;
mod eta;
mod file;
mod gpus;
mod journal;
mod k8s;
mod options;
mod points;
mod progress;
mod run;
mod schedule;
mod server;

pub use crate::command::ServerCommand;
pub use crate::error::StudyError;
pub use crate::eta::StudyEta;
pub use crate::file::{ParamValue, RunSpec, ServerSpec, StopSignal, Study};
pub use crate::gpus::{GPU_VARIABLES, GpuPool};
pub use crate::journal::{JournalRead, PointOutcome, PointRecord};
pub use crate::k8s::{
    BAD_INPUT_EXIT, CONFIGMAP_LIMIT, K8sOptions, MODEL_CACHE_MOUNT, ModelCache, NodeLabel,
    POINT_FAILED_EXIT, PackedFile, Quantity, STUDY_MOUNT, SecretEnv, Toleration, k8s_manifests,
    study_files,
};
pub use crate::options::shown_flags;
pub use crate::points::{MAX_POINTS, Point};
pub use crate::progress::{
    CellFigure, PointFigures, PointFinish, PointReady, PointStart, error_lines,
};
pub use crate::run::{
    POINT_OUTCOME, STUDY_FILE, STUDY_JOURNAL, StudyObserver, StudySettings, run_one, run_study,
};
