//! Studies: one matrix per server configuration, many configurations in one
//! comparison. The crate is the study file (a server command template, a
//! parameter grid or list, readiness and shutdown rules, the matrix to run),
//! its points with their templates filled in, and the journal a study
//! resumes from. It does no I/O: `speedmatrix study` starts the servers and
//! runs the matrices.
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
//!     args = ["--contexts", "0,16k", "--concurrency", "1,8,32"]
//! "#)?;
//! let points = study.points()?;
//! assert_eq!(points.len(), 2);
//! assert_eq!(
//!     points[1].fill(&study.server.command, 8001)?,
//!     "vllm serve my-model --kv-cache-dtype fp8 --port 8001"
//! );
//! # Ok::<(), speedmatrix_study::StudyError>(())
//! ```

mod error;
mod file;
mod journal;
mod k8s;
mod points;

pub use crate::error::StudyError;
pub use crate::file::{ParamValue, RunSpec, ServerSpec, StopSignal, Study};
pub use crate::journal::{PointOutcome, PointRecord};
pub use crate::k8s::{K8sOptions, k8s_manifests};
pub use crate::points::Point;
