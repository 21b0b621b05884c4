//! OpenAI-compatible streaming client for benchmarking: exact timestamps, typed errors, server probing.
