//! KV-cache capacity predictor: which (context, concurrency) cells fit, from config.json, GPU and engine flags.
