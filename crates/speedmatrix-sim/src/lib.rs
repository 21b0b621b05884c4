//! A simulated continuous-batching inference server (vLLM-like), the embedded default target and test ground truth.
