//! Overhead of the agent loop per step, with an instant scripted provider and a trivial tool
//! (no I/O): what the harness itself costs on top of the model and the tools.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use async_trait::async_trait;
use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use recursive_core::{
    Agent, AgentConfig, ChatResponse, Message, MockProvider, RunLimits, StopReason, ToolCall, ToolContext, ToolError,
    ToolRegistry, TypedTool, Usage,
};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;

#[derive(Deserialize, JsonSchema)]
struct Args {
    n: u32,
}

struct Noop;

#[async_trait]
impl TypedTool for Noop {
    type Args = Args;
    fn name(&self) -> &str {
        "noop"
    }
    fn description(&self) -> String {
        "Returns its argument.".into()
    }
    async fn run(&self, args: Args, _ctx: &ToolContext) -> Result<String, ToolError> {
        Ok(args.n.to_string())
    }
}

/// A provider that asks for `noop` until `steps - 1` calls were made, then answers.
fn provider(steps: u32) -> MockProvider {
    let count = Arc::new(AtomicU32::new(0));
    MockProvider::with_handler(move |_req| {
        let n = count.fetch_add(1, Ordering::Relaxed) + 1;
        let usage = Usage { input_tokens: 10, output_tokens: 5, ..Default::default() };
        let (message, stop_reason) = if n < steps {
            let call = ToolCall { id: format!("c{n}"), name: "noop".into(), arguments: json!({"n": n}) };
            (Message::assistant_with_tools("", vec![call]), StopReason::ToolUse)
        } else {
            (Message::assistant("done"), StopReason::EndTurn)
        };
        Ok(ChatResponse { message, stop_reason, usage, cost_usd: None, model: "mock".into() })
    })
}

fn bench(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap_or_else(|e| panic!("{e}"));
    let mut group = c.benchmark_group("agent_loop");
    for steps in [10u32, 50] {
        group.throughput(Throughput::Elements(u64::from(steps)));
        group.bench_with_input(BenchmarkId::new("steps", steps), &steps, |b, &steps| {
            b.to_async(&rt).iter(|| async move {
                let mut tools = ToolRegistry::new();
                tools.register_typed(Noop);
                let limits = RunLimits { max_steps: steps + 1, stuck_threshold: 0, ..Default::default() };
                let agent = Agent::new(Arc::new(provider(steps))).with_tools(tools).with_config(AgentConfig {
                    name: "bench".into(),
                    limits,
                    ..Default::default()
                });
                let r = agent.run("go").await.unwrap_or_else(|e| panic!("{e}"));
                assert_eq!(r.steps, steps);
            })
        });
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
