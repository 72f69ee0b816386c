//! LangGraph's store API: JSON items under a namespace (a path of labels) and a key — put,
//! get, delete, search (by namespace prefix, an exact-match `filter` on the value's fields, and a
//! `query` found in the key or the value), and the namespaces in use. Kept where the server's
//! [`ItemStore`] keeps them: the host's (the `recursive serve` command gives the workspace memory
//! of `remember` and `recall`), else the server's memory for as long as the process lives.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use axum::Json;
use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use recursive_core::items::{Item, ItemStore};
use serde::Deserialize;
use serde_json::{Map, Value, json};

use super::{Optional, Refused, Shared, bad_request, field, matches, not_found, now, page};

/// The items: the server's store of them.
#[derive(Clone)]
pub(crate) struct Items(pub(crate) Arc<dyn ItemStore>);

impl Default for Items {
    fn default() -> Self {
        Items(Arc::new(MemoryItems::default()))
    }
}

impl Items {
    /// Every item.
    fn all(&self) -> Result<Vec<Item>, String> {
        self.0.items()
    }
}

fn failed(e: String) -> Response {
    (StatusCode::INTERNAL_SERVER_ERROR, Json(json!({"detail": format!("the store failed: {e}")}))).into_response()
}

/// Items in the server's memory.
#[derive(Debug, Default)]
pub(crate) struct MemoryItems(Mutex<BTreeMap<(Vec<String>, String), Item>>);

impl ItemStore for MemoryItems {
    fn items(&self) -> Result<Vec<Item>, String> {
        Ok(self.0.lock().unwrap_or_else(|e| e.into_inner()).values().cloned().collect())
    }

    fn put(&self, namespace: &[String], key: &str, value: &Map<String, Value>) -> Result<(), String> {
        let mut items = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let at = now();
        let id = (namespace.to_vec(), key.to_string());
        let created_at = items.get(&id).map_or_else(|| at.clone(), |i| i.created_at.clone());
        let item = Item {
            namespace: namespace.to_vec(),
            key: key.to_string(),
            value: value.clone(),
            created_at,
            updated_at: at,
        };
        items.insert(id, item);
        Ok(())
    }

    fn delete(&self, namespace: &[String], key: &str) -> Result<(), String> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).remove(&(namespace.to_vec(), key.to_string()));
        Ok(())
    }
}

fn item_json(item: &Item) -> Value {
    json!({"namespace": item.namespace, "key": item.key, "value": item.value,
        "created_at": item.created_at, "updated_at": item.updated_at})
}

/// A namespace from a body: a list of labels, none empty and none with a period.
fn namespace(body: &Map<String, Value>, name: &str) -> Result<Vec<String>, Refused> {
    let labels: Vec<String> = field(body, name)?.unwrap_or_default();
    if labels.iter().any(|l| l.is_empty() || l.contains('.')) {
        return Err(bad_request(&format!("`{name}`: labels must be non-empty and have no period")));
    }
    Ok(labels)
}

pub(crate) async fn put_item(State(api): Shared, Optional(body): Optional) -> Response {
    let namespace = match namespace(&body, "namespace") {
        Ok(ns) if !ns.is_empty() => ns,
        Ok(_) => return bad_request("`namespace` must name at least one label").into_response(),
        Err(refused) => return refused.into_response(),
    };
    let key: String = match field(&body, "key") {
        Ok(Some(key)) => key,
        Ok(None) => return bad_request("`key` is required").into_response(),
        Err(refused) => return refused.into_response(),
    };
    let value: Map<String, Value> = match field(&body, "value") {
        Ok(Some(value)) => value,
        Ok(None) => return bad_request("`value` must be an object").into_response(),
        Err(refused) => return refused.into_response(),
    };
    if let Err(e) = api.store.0.put(&namespace, &key, &value) {
        return failed(e);
    }
    StatusCode::NO_CONTENT.into_response()
}

#[derive(Debug, Deserialize)]
pub(crate) struct ItemQuery {
    namespace: Option<String>,
    key: String,
}

pub(crate) async fn get_item(State(api): Shared, Query(query): Query<ItemQuery>) -> Response {
    let namespace: Vec<String> = query
        .namespace
        .as_deref()
        .unwrap_or_default()
        .split('.')
        .filter(|l| !l.is_empty())
        .map(str::to_string)
        .collect();
    let items = match api.store.all() {
        Ok(items) => items,
        Err(e) => return failed(e),
    };
    match items.iter().find(|i| i.namespace == namespace && i.key == query.key) {
        Some(item) => Json(item_json(item)).into_response(),
        None => not_found(&format!("no item `{}` in namespace `{}`", query.key, namespace.join("."))).into_response(),
    }
}

pub(crate) async fn delete_item(State(api): Shared, Optional(body): Optional) -> Response {
    let namespace = match namespace(&body, "namespace") {
        Ok(ns) => ns,
        Err(refused) => return refused.into_response(),
    };
    let key: String = match field(&body, "key") {
        Ok(Some(key)) => key,
        Ok(None) => return bad_request("`key` is required").into_response(),
        Err(refused) => return refused.into_response(),
    };
    match api.store.0.delete(&namespace, &key) {
        Ok(()) => StatusCode::NO_CONTENT.into_response(),
        Err(e) => failed(e),
    }
}

pub(crate) async fn search_items(State(api): Shared, Optional(body): Optional) -> Response {
    let prefix = match namespace(&body, "namespace_prefix") {
        Ok(ns) => ns,
        Err(refused) => return refused.into_response(),
    };
    let (limit, offset) = match page(&body, 10) {
        Ok(page) => page,
        Err(refused) => return refused.into_response(),
    };
    let filter: Option<Map<String, Value>> = match field(&body, "filter") {
        Ok(filter) => filter,
        Err(refused) => return refused.into_response(),
    };
    let query: Option<String> = match field(&body, "query") {
        Ok(query) => query.map(|q: String| q.to_lowercase()),
        Err(refused) => return refused.into_response(),
    };
    let items = match api.store.all() {
        Ok(items) => items,
        Err(e) => return failed(e),
    };
    let mut found: Vec<&Item> = items
        .iter()
        .filter(|item| item.namespace.starts_with(&prefix))
        .filter(|item| filter.as_ref().is_none_or(|f| matches(&Value::Object(item.value.clone()), f)))
        .filter(|item| {
            query.as_ref().is_none_or(|q| {
                item.key.to_lowercase().contains(q)
                    || Value::Object(item.value.clone()).to_string().to_lowercase().contains(q)
            })
        })
        .collect();
    found.sort_by(|a, b| b.updated_at.cmp(&a.updated_at));
    let page: Vec<Value> = found
        .into_iter()
        .skip(offset)
        .take(limit)
        .map(|item| {
            let mut item = item_json(item);
            item["score"] = Value::Null;
            item
        })
        .collect();
    Json(json!({"items": page})).into_response()
}

pub(crate) async fn list_namespaces(State(api): Shared, Optional(body): Optional) -> Response {
    let prefix = match namespace(&body, "prefix") {
        Ok(ns) => ns,
        Err(refused) => return refused.into_response(),
    };
    let suffix = match namespace(&body, "suffix") {
        Ok(ns) => ns,
        Err(refused) => return refused.into_response(),
    };
    let max_depth: Option<usize> = match field(&body, "max_depth") {
        Ok(depth) => depth,
        Err(refused) => return refused.into_response(),
    };
    let (limit, offset) = match page(&body, 100) {
        Ok(page) => page,
        Err(refused) => return refused.into_response(),
    };
    let items = match api.store.all() {
        Ok(items) => items,
        Err(e) => return failed(e),
    };
    let mut namespaces: Vec<Vec<String>> = items
        .iter()
        .map(|item| &item.namespace)
        .filter(|ns| ns.starts_with(&prefix) && ns.ends_with(&suffix))
        .map(|ns| match max_depth {
            Some(depth) => ns.iter().take(depth).cloned().collect(),
            None => ns.clone(),
        })
        .collect();
    namespaces.dedup();
    namespaces.sort();
    namespaces.dedup();
    let page: Vec<Vec<String>> = namespaces.into_iter().skip(offset).take(limit).collect();
    Json(json!({"namespaces": page})).into_response()
}
