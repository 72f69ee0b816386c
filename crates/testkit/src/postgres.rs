//! A schema of its own on the shared test PostgreSQL server: every table a test's processes
//! create lands in it (the URL sets `search_path`), so tests — and engineers — sharing one
//! server never see each other's threads or jobs. Dropped with everything in it at the end.

use tokio_postgres::NoTls;

/// A fresh schema and the URL whose connections use it.
#[derive(Debug)]
pub struct TestSchema {
    /// The server's URL with `options=-csearch_path=<schema>`.
    pub url: String,
    name: String,
    admin: String,
}

/// A database failed (the message says why).
#[derive(Debug, thiserror::Error)]
#[error("test schema: {0}")]
pub struct SchemaError(String);

async fn connect(url: &str) -> Result<tokio_postgres::Client, SchemaError> {
    let (client, connection) = tokio_postgres::connect(url, NoTls).await.map_err(|e| SchemaError(e.to_string()))?;
    tokio::spawn(async move {
        let _ = connection.await;
    });
    Ok(client)
}

impl TestSchema {
    /// A fresh schema on the test server named by `RECURSIVE_TEST_POSTGRES_URL` (see
    /// [`crate::require_env`]: missing, it fails under CI and skips elsewhere).
    pub async fn from_env(prefix: &str) -> Option<TestSchema> {
        let url = crate::require_env("RECURSIVE_TEST_POSTGRES_URL")?;
        match TestSchema::create(&url, prefix).await {
            Ok(schema) => Some(schema),
            Err(e) => panic!("cannot create a test schema on {url}: {e}"),
        }
    }

    /// Creates a schema named `<prefix>_<unique suffix>` on the server at `url`.
    pub async fn create(url: &str, prefix: &str) -> Result<TestSchema, SchemaError> {
        let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
        let name = format!("{prefix}_{}_{nanos:x}", std::process::id());
        connect(url)
            .await?
            .batch_execute(&format!("CREATE SCHEMA \"{name}\""))
            .await
            .map_err(|e| SchemaError(e.to_string()))?;
        let sep = if url.contains('?') { '&' } else { '?' };
        Ok(TestSchema { url: format!("{url}{sep}options=-csearch_path%3D{name}"), name, admin: url.to_string() })
    }

    /// The schema's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Drops the schema and everything in it.
    pub async fn drop_all(self) -> Result<(), SchemaError> {
        connect(&self.admin)
            .await?
            .batch_execute(&format!("DROP SCHEMA \"{}\" CASCADE", self.name))
            .await
            .map_err(|e| SchemaError(e.to_string()))
    }
}
