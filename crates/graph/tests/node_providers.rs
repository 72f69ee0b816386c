#![allow(clippy::unwrap_used, clippy::expect_used)]
//! A `model` node's `provider = "NAME"`: its call goes to the provider the binding program
//! configured under that name (with that provider's model), the other nodes keep the model's
//! own provider; a name the lookup does not know, or a blueprint bound without named providers,
//! is refused before anything runs, and `provider` on another kind of node is a compile error.

use std::sync::Arc;

use recursive_core::{ChatOptions, ChatProvider, MockProvider, MockReply, RunScope};
use recursive_graph::blueprint::{self, Allowlist, ProviderLookup, Source};
use recursive_graph::{Finish, Start, Thread};
use recursive_store::MemoryCheckpointer;
use serde_json::json;

const TWO_PROVIDERS: &str = r#"
name = "two"

[state]
topic = "string"
draft = "string"
summary = "string"

[[nodes]]
name = "draft"
model = "default"
prompt = "Write about {topic}."
output = "draft"

[[nodes]]
name = "summarise"
model = "default"
provider = "local"
prompt = "Summarise: {draft}"
output = "summary"

[[edges]]
from = "START"
to = "draft"

[[edges]]
from = "draft"
to = "summarise"

[[edges]]
from = "summarise"
to = "END"
"#;

fn source(text: &str) -> Source {
    Source { origin: "two.toml".into(), text: text.into() }
}

/// A lookup that knows one provider, `local`, whose model is `small`.
fn lookup(local: Arc<MockProvider>) -> ProviderLookup {
    Arc::new(move |name: &str| match name {
        "local" => Ok((local.clone() as Arc<dyn ChatProvider>, "small".to_string())),
        other => Err(format!("unknown provider `{other}` (configured providers: local)")),
    })
}

#[tokio::test]
async fn a_model_node_naming_a_provider_calls_that_provider_with_its_model() {
    let main = Arc::new(MockProvider::new([MockReply::text("Tides rise.")]));
    let local = Arc::new(MockProvider::new([MockReply::text("Tides.")]));
    let options = ChatOptions { model: "big".into(), temperature: Some(0.5), ..Default::default() };
    let allow = Allowlist::new().model("default", main.clone(), options).providers(lookup(local.clone()));
    let graph = blueprint::load(&source(TWO_PROVIDERS), &allow).unwrap();
    let thread = Thread::new(Arc::new(MemoryCheckpointer::new()), "t");
    let out = graph.run(Start::Input(json!({"topic": "tides"})), &thread, &RunScope::detached("graph")).await.unwrap();
    assert_eq!(out.finish, Finish::Done);
    assert_eq!(out.state["summary"], "Tides.");
    let (main_requests, local_requests) = (main.requests(), local.requests());
    assert_eq!(main_requests.len(), 1, "only the draft goes to the main provider");
    assert_eq!(main_requests[0].options.model, "big");
    assert_eq!(local_requests.len(), 1, "the summary goes to the named provider");
    assert_eq!(local_requests[0].messages[0].content, "Summarise: Tides rise.");
    assert_eq!(local_requests[0].options.model, "small", "the named provider's model, not the main one's");
    assert_eq!(local_requests[0].options.temperature, Some(0.5), "the model's other options stay");
}

#[test]
fn an_unknown_provider_name_is_refused_at_binding_with_the_known_ones() {
    let main = Arc::new(MockProvider::new([]));
    let local = Arc::new(MockProvider::new([]));
    let text = TWO_PROVIDERS.replace("provider = \"local\"", "provider = \"cloud\"");
    let allow = Allowlist::new().model("default", main.clone(), ChatOptions::default()).providers(lookup(local));
    let err = blueprint::load(&source(&text), &allow).unwrap_err().to_string();
    assert!(err.contains("provider `cloud` cannot be used"), "{err}");
    assert!(err.contains("configured providers: local"), "{err}");
    assert!(err.contains("two.toml:"), "located: {err}");
    let bare = Allowlist::new().model("default", main.clone(), ChatOptions::default());
    let err = blueprint::load(&source(TWO_PROVIDERS), &bare).unwrap_err().to_string();
    assert!(err.contains("no provider is configured by name here"), "{err}");
    assert_eq!(main.request_count(), 0);
}

#[test]
fn provider_applies_to_model_nodes_only() {
    let text = TWO_PROVIDERS.replace(
        "[[edges]]\nfrom = \"START\"",
        "[[nodes]]\nname = \"ask\"\nask = \"ok?\"\nprovider = \"local\"\noutput = \"draft\"\n\n[[edges]]\nfrom = \"summarise\"\nto = \"ask\"\n\n[[edges]]\nfrom = \"START\"",
    );
    let err = blueprint::compile(&text, "two.toml").unwrap_err().to_string();
    assert!(err.contains("`provider` does not apply to a ask node"), "{err}");
}
