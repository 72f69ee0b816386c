//! The workspace's one HTTP client set-up. Every crate that speaks HTTP (model providers,
//! `web_fetch`, the MCP client, the embeddings client) builds its `reqwest` client here, so
//! there is one TLS policy in one place:
//!
//! - **one crypto provider**: rustls on `ring`, installed as the process default before any
//!   client is built (reqwest is compiled without a provider of its own, so a client built
//!   without a provider would panic);
//! - **bundled roots**: Mozilla's root certificates (`webpki-root-certs`) are the trust
//!   anchors, so HTTPS works the same on every machine, including containers without a system
//!   certificate store (where reqwest's platform verifier fails to build a client at all).
//!
//! Add roots for a private CA with [`reqwest::ClientBuilder::tls_certs_merge`].

use std::sync::OnceLock;

pub use reqwest;

/// Installs rustls' `ring` provider as the process default, unless a provider is installed
/// already (then that one stays). Clients built by other libraries in the process pick it up.
pub fn install_crypto_provider() {
    // An error means a provider is installed already, which is all we need.
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// Mozilla's root certificates, parsed once.
pub fn bundled_roots() -> &'static [reqwest::Certificate] {
    static ROOTS: OnceLock<Vec<reqwest::Certificate>> = OnceLock::new();
    ROOTS.get_or_init(|| {
        webpki_root_certs::TLS_SERVER_ROOT_CERTS
            .iter()
            .filter_map(|der| match reqwest::Certificate::from_der(der.as_ref()) {
                Ok(cert) => Some(cert),
                Err(e) => {
                    tracing::warn!("skipping a bundled root certificate: {e}");
                    None
                }
            })
            .collect()
    })
}

/// A client builder with the workspace's TLS set-up (ring, bundled roots); add timeouts,
/// headers or proxies as needed, then `build()`.
pub fn client_builder() -> reqwest::ClientBuilder {
    install_crypto_provider();
    reqwest::Client::builder().tls_certs_only(bundled_roots().iter().cloned())
}

/// A client with the workspace's TLS set-up and reqwest's defaults otherwise, for callers
/// that cannot report an error. Building it cannot fail with this set-up (no system store is
/// read); should it fail anyway, reqwest's default client is used and the failure logged.
pub fn client() -> reqwest::Client {
    client_builder().build().unwrap_or_else(|e| {
        tracing::warn!("cannot build the HTTP client ({e}); using reqwest's default client");
        reqwest::Client::new()
    })
}

/// An error with its chain of causes joined by `: ` (each cause once), which is where reqwest
/// keeps the useful part.
pub fn error_chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let text = s.to_string();
        if !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        source = s.source();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_bundled_root_certificate_is_kept() {
        assert!(webpki_root_certs::TLS_SERVER_ROOT_CERTS.len() > 100);
        assert_eq!(bundled_roots().len(), webpki_root_certs::TLS_SERVER_ROOT_CERTS.len());
    }

    #[test]
    fn building_a_client_installs_a_crypto_provider() {
        client_builder().build().unwrap();
        assert!(rustls::crypto::CryptoProvider::get_default().is_some());
    }
}
