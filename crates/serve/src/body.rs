//! Request bodies read as JSON, refused the way OpenAI refuses them: a body that is not JSON or
//! does not fit the request's shape gets 400 with `{"error": {"message", "type":
//! "invalid_request_error", "param", "code"}}` (`param` the field at fault), one past the size
//! limit 413, one that is not `application/json` 415 — never axum's 422 in plain text.

use axum::body::Bytes;
use axum::extract::{FromRequest, Request};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::de::DeserializeOwned;

use crate::server::{ErrorBody, ErrorDetail, error, error_type};

/// A JSON body of type `T`; its rejection is an error in OpenAI's shape.
pub(crate) struct Body<T>(pub T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequest<S> for Body<T> {
    type Rejection = Response;

    async fn from_request(request: Request, state: &S) -> Result<Self, Response> {
        if !is_json(&request) {
            let message = "the body must be JSON, sent with `Content-Type: application/json`";
            return Err(error(StatusCode::UNSUPPORTED_MEDIA_TYPE, "invalid_request_error", message));
        }
        let bytes = Bytes::from_request(request, state).await.map_err(|e| {
            let status = e.status();
            error(status, error_type(status), &e.body_text())
        })?;
        parse(&bytes).map(Body).map_err(|response| *response)
    }
}

/// Whether the request says its body is JSON (`application/json` or `application/*+json`).
fn is_json(request: &Request) -> bool {
    let Some(value) = request.headers().get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()) else {
        return false;
    };
    let essence = value.split(';').next().unwrap_or_default().trim().to_ascii_lowercase();
    essence == "application/json" || (essence.starts_with("application/") && essence.ends_with("+json"))
}

/// `bytes` as a `T`, or the 400 naming the field at fault.
fn parse<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, Box<Response>> {
    let mut deserializer = serde_json::Deserializer::from_slice(bytes);
    serde_path_to_error::deserialize(&mut deserializer).map_err(|e| Box::new(invalid_body(&e)))
}

/// 400 for a body that did not deserialize: the message says where and why.
fn invalid_body(e: &serde_path_to_error::Error<serde_json::Error>) -> Response {
    let inner = e.inner();
    let path = e.path().to_string();
    let data = inner.classify() == serde_json::error::Category::Data;
    let param = (data && !path.is_empty() && path != ".").then_some(path);
    let (message, code) = match data {
        true => {
            let at = param.as_deref().map(|p| format!("`{p}`: ")).unwrap_or_default();
            let code = if inner.to_string().starts_with("missing field") {
                "missing_required_parameter"
            } else {
                "invalid_type"
            };
            (format!("the request body does not fit: {at}{inner}"), code)
        }
        false => (format!("the request body is not valid JSON: {inner}"), "invalid_json"),
    };
    let error = ErrorDetail { message, kind: "invalid_request_error".into(), param, code: Some(code.into()) };
    (StatusCode::BAD_REQUEST, axum::Json(ErrorBody { error })).into_response()
}

#[cfg(test)]
mod tests {
    use serde::Deserialize;

    use super::*;

    #[derive(Debug, Deserialize)]
    struct Chat {
        #[allow(dead_code)]
        messages: Vec<String>,
    }

    async fn body_of(response: Response) -> serde_json::Value {
        let bytes = axum::body::to_bytes(response.into_body(), 1 << 16).await.unwrap();
        serde_json::from_slice(&bytes).unwrap()
    }

    #[tokio::test]
    async fn a_wrong_type_is_a_400_naming_the_field() {
        let response = *parse::<Chat>(br#"{"messages": "hi"}"#).unwrap_err();
        assert_eq!(response.status(), StatusCode::BAD_REQUEST);
        let body = body_of(response).await;
        assert_eq!(body["error"]["param"], "messages", "{body}");
        assert_eq!(body["error"]["type"], "invalid_request_error");
        assert_eq!(body["error"]["code"], "invalid_type");
    }

    #[tokio::test]
    async fn a_body_that_is_not_json_is_a_400() {
        let response = *parse::<Chat>(b"{not json").unwrap_err();
        assert_eq!(response.status(), StatusCode::BAD_REQUEST);
        let body = body_of(response).await;
        assert_eq!(body["error"]["code"], "invalid_json", "{body}");
        assert!(body["error"]["param"].is_null());
    }
}
