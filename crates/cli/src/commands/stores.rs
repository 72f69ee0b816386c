//! Where the commands keep durable state: the workspace's default store (graph threads, durable
//! RLM runs, served runs) and a store's address as shown to people.

use std::path::Path;

/// The default store: `.recursive/graphs.db` in the workspace (the current directory when none
/// is given).
pub(crate) fn default_store(workspace: Option<&Path>) -> anyhow::Result<String> {
    let dir = match workspace {
        Some(d) => d.to_path_buf(),
        None => std::env::current_dir()?,
    };
    let path = recursive_tools::Workspace::new(&dir).and_then(|ws| ws.state_path("graphs.db"));
    Ok(path.map_err(|e| anyhow::anyhow!("the graph store: {e}"))?.display().to_string())
}

/// The store's address as shown to people: a database URL without its credentials.
pub(crate) fn shown_address(address: &str) -> String {
    match address.split_once("://") {
        Some((scheme, rest)) => format!("{scheme}://{}", rest.rsplit_once('@').map_or(rest, |(_, host)| host)),
        None => address.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shown_database_url_leaves_out_its_credentials() {
        assert_eq!(shown_address("postgres://me:secret@db.example:5432/app"), "postgres://db.example:5432/app");
        assert_eq!(shown_address("postgres://db.example/app"), "postgres://db.example/app");
        assert_eq!(shown_address("/tmp/graphs.db"), "/tmp/graphs.db");
    }
}
