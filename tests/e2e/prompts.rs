//! Exact prompt lengths as the server counts them: the workload crate's
//! prompts sent through the client to the simulator, whose `usage` must say
//! exactly the target, for completions and chat, from 1 token to 128K.

use speedmatrix_client::{
    ChatRequest, Client, ClientConfig, ClientError, CompletionRequest, Message, ResponseStream,
    TokenizeRequest, Usage,
};
use speedmatrix_sim::{Profile, SimServer};
use speedmatrix_units::Tokens;
use speedmatrix_workload::{CacheKey, ChatOverhead, PromptBuilder, Tokenizer};

#[test]
fn server_reported_prompt_tokens_equal_the_target() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let mut profile = Profile::builtin("rtx3090-qwen3.5-4b-fp8").unwrap();
        // Prefill of 128K tokens takes 23 s at the seed's speed; the count does not care.
        profile.time_scale = 1_000.0;
        let sim = SimServer::start(profile, "127.0.0.1:0".parse().unwrap())
            .await
            .unwrap();
        let client = Client::new(ClientConfig::new(sim.url())).unwrap();
        let model = sim.profile().served_model_name.clone();
        let builder = PromptBuilder::new(Tokenizer::bundled().unwrap());

        let probe = TokenizeRequest::chat(model.clone(), vec![Message::user(ChatOverhead::PROBE)]);
        let counted = client
            .tokenize(&probe)
            .await
            .unwrap()
            .expect("the simulator has /tokenize");
        let overhead = ChatOverhead::from_probe(builder.tokenizer(), counted.count.get()).unwrap();

        for (i, n) in [1, 8_192, 16_384, 131_072].into_iter().enumerate() {
            let key = CacheKey::unique(77, i as u64, 0);
            let p = builder.prompt(Tokens::new(n), 3, &key).unwrap();
            let req = CompletionRequest::new(model.clone(), p.text).max_tokens(Tokens::new(1));
            let usage = usage_of(client.stream_completion(&req).await).await;
            assert_eq!(
                usage.map(|u| u.prompt_tokens),
                Some(Tokens::new(n)),
                "completions at {n}"
            );

            // Chat needs at least the template's own tokens plus one.
            let n_chat = n.max(overhead.0.get() + 1);
            let c = builder
                .chat_prompt(Tokens::new(n_chat), 3, &key, overhead)
                .unwrap();
            let req = ChatRequest::new(model.clone(), vec![Message::user(c.text)])
                .max_tokens(Tokens::new(1));
            let usage = usage_of(client.stream_chat(&req).await).await;
            assert_eq!(
                usage.map(|u| u.prompt_tokens),
                Some(Tokens::new(n_chat)),
                "chat at {n_chat}"
            );
        }
        sim.shutdown().await;
    });
}

/// The final usage of a stream that must open and finish cleanly.
async fn usage_of(stream: Result<ResponseStream, ClientError>) -> Option<Usage> {
    stream.unwrap().collect().await.unwrap().usage
}
