//! The REPL behind an RLM run, as one trait with two backends: Monty in a worker process
//! ([`Sandbox`], the default: a Python subset, no packages, fine-grained limits) and a confined
//! CPython worker ([`CPythonSandbox`]: full Python with whatever packages the interpreter has).
//! Both take the same inputs, host functions and limits and report the same [`SnippetOutcome`].

use std::sync::Arc;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;

use crate::cpython::{CPythonConfig, CPythonSandbox};
use crate::sandbox::{Global, Sandbox, SandboxError, SandboxHost, SandboxLimits, SnippetOutcome};

/// Which interpreter runs the snippets.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum Backend {
    /// Monty, in this program's sandbox worker.
    #[default]
    Monty,
    /// CPython, in a confined worker.
    CPython(CPythonConfig),
}

/// A persistent Python session that runs snippets.
#[async_trait]
pub trait Repl: Send + Sync {
    /// Runs one snippet that `interrupt` stops without ending the session (Ctrl-C in a REPL);
    /// `cancel` ends it at once.
    async fn run_cell(
        &self,
        code: &str,
        host: Arc<dyn SandboxHost>,
        cancel: &CancellationToken,
        interrupt: &CancellationToken,
    ) -> SnippetOutcome;

    /// Runs one snippet; `cancel` ends it at once.
    async fn execute(&self, code: &str, host: Arc<dyn SandboxHost>, cancel: &CancellationToken) -> SnippetOutcome {
        self.run_cell(code, host, cancel, &CancellationToken::new()).await
    }

    /// The limits every snippet runs under.
    fn limits(&self) -> &SandboxLimits;
}

#[async_trait]
impl Repl for Sandbox {
    async fn run_cell(
        &self,
        code: &str,
        host: Arc<dyn SandboxHost>,
        cancel: &CancellationToken,
        interrupt: &CancellationToken,
    ) -> SnippetOutcome {
        Sandbox::run_cell(self, code, host, cancel, interrupt).await
    }

    fn limits(&self) -> &SandboxLimits {
        Sandbox::limits(self)
    }
}

#[async_trait]
impl Repl for CPythonSandbox {
    async fn run_cell(
        &self,
        code: &str,
        host: Arc<dyn SandboxHost>,
        cancel: &CancellationToken,
        interrupt: &CancellationToken,
    ) -> SnippetOutcome {
        CPythonSandbox::run_cell(self, code, host, cancel, interrupt).await
    }

    fn limits(&self) -> &SandboxLimits {
        CPythonSandbox::limits(self)
    }
}

/// Starts a session of `backend`: binds `globals`, makes `host_functions` callable (CPython
/// defines them up front; Monty asks the host as names are used) and runs `setup`.
pub async fn start(
    backend: &Backend,
    limits: SandboxLimits,
    globals: Vec<(String, Global)>,
    host_functions: Vec<String>,
    setup: &str,
) -> Result<Box<dyn Repl>, SandboxError> {
    Ok(match backend {
        Backend::Monty => Box::new(Sandbox::start(limits, globals, setup).await?),
        Backend::CPython(config) => {
            Box::new(CPythonSandbox::start(config.clone(), limits, globals, host_functions, setup).await?)
        }
    })
}
