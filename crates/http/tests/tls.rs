//! HTTPS end to end with the workspace's client set-up against a TLS server on 127.0.0.1
//! (certificates in `tests/fixtures`: a test CA and a server certificate for 127.0.0.1 it
//! signed): the handshake runs on the ring provider, the bundled roots do not trust the test
//! CA, and a merged root does.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

fn fixture(name: &str) -> Vec<u8> {
    std::fs::read(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures").join(name)).unwrap()
}

/// Serves `hello over tls` on every connection; returns `https://127.0.0.1:<port>/`.
async fn tls_server() -> String {
    let certs = vec![CertificateDer::from_pem_slice(&fixture("server.pem")).unwrap()];
    let key = PrivateKeyDer::from_pem_slice(&fixture("server.key")).unwrap();
    let config = rustls::ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("https://{}/", listener.local_addr().unwrap());
    tokio::spawn(async move {
        loop {
            let Ok((socket, _)) = listener.accept().await else { return };
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                let Ok(mut tls) = acceptor.accept(socket).await else { return };
                let mut buf = vec![0u8; 4096];
                let _ = tls.read(&mut buf).await;
                let body = "hello over tls";
                let response = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = tls.write_all(response.as_bytes()).await;
                let _ = tls.shutdown().await;
            });
        }
    });
    url
}

fn error_chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        out.push_str(": ");
        out.push_str(&s.to_string());
        source = s.source();
    }
    out
}

#[tokio::test]
async fn an_https_server_signed_by_a_merged_root_is_reached() {
    let url = tls_server().await;
    let ca = reqwest::Certificate::from_pem(&fixture("ca.pem")).unwrap();
    let client = recursive_http::client_builder().no_proxy().tls_certs_merge([ca]).build().unwrap();
    let response = client.get(&url).send().await.unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(response.text().await.unwrap(), "hello over tls");
}

#[tokio::test]
async fn an_https_server_of_an_unknown_ca_is_refused_by_the_bundled_roots() {
    let url = tls_server().await;
    let client = recursive_http::client_builder().no_proxy().build().unwrap();
    let err = client.get(&url).send().await.unwrap_err();
    let chain = error_chain(&err);
    assert!(chain.contains("UnknownIssuer") || chain.contains("unknown issuer"), "{chain}");
}
