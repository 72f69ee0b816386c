//! Pricing: costs computed from a price table, tables extended from TOML, dated model ids
//! finding their base model, and `PricedProvider` filling `cost_usd`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use recursive_core::{ChatProvider, ChatRequest, Message, Usage};
use recursive_llm::mock::{MockProvider, MockReply};
use recursive_llm::{ModelPrice, PriceTable, PricedProvider};

fn usage() -> Usage {
    Usage { input_tokens: 1_000, output_tokens: 500, cache_read_tokens: 2_000, cache_write_tokens: 400 }
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-12
}

#[test]
fn cost_is_computed_per_million_tokens_for_each_counter() {
    let mut table = PriceTable::empty();
    table.insert("m", ModelPrice::new(2.0, 10.0, 0.5, 4.0));
    // 1000×2 + 500×10 + 2000×0.5 + 400×4 = 9600 per million.
    assert!(close(table.cost("m", &usage()).unwrap(), 0.0096));
    assert_eq!(table.cost("unknown", &usage()), None);
}

#[test]
fn toml_adds_models_and_overrides_builtin_prices() {
    let mut table = PriceTable::builtin();
    table
        .extend_from_toml(
            r#"
            [provider]
            kind = "openai"

            [pricing."my-local-model"]
            input = 0.0
            output = 0.0

            [pricing."gpt-4o"]
            input = 2.5
            output = 10.0
            cache_read = 1.25
            cache_write = 0
            "#,
        )
        .unwrap();
    assert_eq!(table.lookup("my-local-model"), Some(&ModelPrice::new(0.0, 0.0, 0.0, 0.0)));
    assert_eq!(table.lookup("gpt-4o"), Some(&ModelPrice::new(2.5, 10.0, 1.25, 0.0)));
}

#[test]
fn toml_cache_prices_default_to_the_input_price() {
    let mut table = PriceTable::empty();
    table.extend_from_toml("[pricing.m]\ninput = 3\noutput = 6\n").unwrap();
    assert_eq!(table.lookup("m"), Some(&ModelPrice::new(3.0, 6.0, 3.0, 3.0)));
}

#[test]
fn bad_toml_is_a_clear_error() {
    let err = PriceTable::empty().extend_from_toml("[pricing.m]\ninput = 1\n").unwrap_err();
    assert!(err.to_string().contains("output"), "{err}");
}

#[test]
fn dated_model_ids_find_their_base_model() {
    let mut table = PriceTable::empty();
    table.insert("gpt-4o", ModelPrice::new(2.5, 10.0, 1.25, 0.0));
    table.insert("gpt-4o-mini", ModelPrice::new(0.15, 0.6, 0.075, 0.0));
    assert_eq!(table.lookup("gpt-4o-2024-08-06").unwrap().input, 2.5);
    assert_eq!(table.lookup("gpt-4o-mini-2024-07-18").unwrap().input, 0.15);
    assert!(table.lookup("gpt-4").is_none());
}

#[test]
fn the_builtin_table_prices_well_known_models() {
    let table = PriceTable::builtin();
    for model in ["gpt-4o-2024-08-06", "gpt-4o-mini", "claude-sonnet-4-5-20250929", "claude-3-7-sonnet-20250219"] {
        let price = table.lookup(model).unwrap_or_else(|| panic!("{model} has no price"));
        assert!(price.output > price.input, "{model}");
    }
}

#[tokio::test]
async fn priced_provider_fills_the_cost_where_the_price_is_known() {
    let mut table = PriceTable::empty();
    table.insert("gpt-4o", ModelPrice::new(2.0, 10.0, 0.5, 4.0));
    let known = MockProvider::new([MockReply::text("hi")]).with_usage(usage()).with_model("gpt-4o-2024-08-06");
    let priced = PricedProvider::new(Arc::new(known), table.clone());
    let request = ChatRequest { messages: vec![Message::user("q")], ..Default::default() };
    let response = priced.complete(request.clone()).await.unwrap();
    assert!(close(response.cost_usd.unwrap(), 0.0096));

    let unknown = MockProvider::new([MockReply::text("hi")]).with_model("llama3.2");
    let response = PricedProvider::new(Arc::new(unknown), table).complete(request).await.unwrap();
    assert_eq!(response.cost_usd, None);
}
