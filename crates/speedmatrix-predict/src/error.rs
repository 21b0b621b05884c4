//! What can go wrong when predicting.

/// Why a prediction could not be made.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PredictError {
    /// The GPU's catalog entry lacks a figure the model needs.
    #[error(
        "the GPU {gpu} has no {what} in the catalog: add it with --gpu-catalog \
         ({{\"gpus\": [{{\"key\": \"{gpu}\", \"bandwidth_gb_s\": …, \"dense_tflops\": {{\"bf16\": …}}}}]}})"
    )]
    MissingGpuFigure {
        /// The GPU's catalog key.
        gpu: String,
        /// The figure: bandwidth or a peak throughput.
        what: &'static str,
    },
    /// The model's shapes could not be laid out.
    #[error("the model's layout: {0}")]
    Layout(#[from] speedmatrix_capacity::CapacityError),
    /// A factors file did not parse or holds an impossible value.
    #[error("efficiency factors: {0}")]
    Factors(String),
    /// Speculative decoding could not be priced.
    #[error("speculative decoding: {0}")]
    Speculation(String),
    /// A calibration could not be fitted.
    #[error("calibration: {0}")]
    Calibration(String),
}
