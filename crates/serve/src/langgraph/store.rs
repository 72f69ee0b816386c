//! LangGraph's store API: JSON items under a namespace (a path of labels) and a key — put,
//! get, delete, search (by namespace prefix, an exact-match `filter` on the value's fields, and a
//! `query` found in the key or the value), and the namespaces in use. Kept in the server's
//! memory: items last as long as the process.

use std::collections::BTreeMap;
use std::sync::Mutex;

use axum::Json;
use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::{Map, Value, json};

use super::{Optional, Refused, Shared, bad_request, field, matches, not_found, now, page};

/// One item.
#[derive(Debug, Clone)]
struct Item {
    value: Map<String, Value>,
    created_at: String,
    updated_at: String,
}

/// The items, by namespace then key.
#[derive(Debug, Default)]
pub(crate) struct Items(Mutex<BTreeMap<(Vec<String>, String), Item>>);

impl Items {
    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<(Vec<String>, String), Item>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}

fn item_json(namespace: &[String], key: &str, item: &Item) -> Value {
    json!({"namespace": namespace, "key": key, "value": item.value,
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
    let at = now();
    let mut items = api.store.lock();
    let created_at = items.get(&(namespace.clone(), key.clone())).map_or_else(|| at.clone(), |i| i.created_at.clone());
    items.insert((namespace, key), Item { value, created_at, updated_at: at });
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
    let items = api.store.lock();
    match items.get(&(namespace.clone(), query.key.clone())) {
        Some(item) => Json(item_json(&namespace, &query.key, item)).into_response(),
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
    api.store.lock().remove(&(namespace, key));
    StatusCode::NO_CONTENT.into_response()
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
    let items = api.store.lock();
    let mut found: Vec<(&(Vec<String>, String), &Item)> = items
        .iter()
        .filter(|((ns, _), _)| ns.starts_with(&prefix))
        .filter(|(_, item)| filter.as_ref().is_none_or(|f| matches(&Value::Object(item.value.clone()), f)))
        .filter(|((_, key), item)| {
            query.as_ref().is_none_or(|q| {
                key.to_lowercase().contains(q)
                    || Value::Object(item.value.clone()).to_string().to_lowercase().contains(q)
            })
        })
        .collect();
    found.sort_by(|a, b| b.1.updated_at.cmp(&a.1.updated_at));
    let page: Vec<Value> = found
        .into_iter()
        .skip(offset)
        .take(limit)
        .map(|((ns, key), item)| {
            let mut item = item_json(ns, key, item);
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
    let items = api.store.lock();
    let mut namespaces: Vec<Vec<String>> = items
        .keys()
        .map(|(ns, _)| ns)
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
