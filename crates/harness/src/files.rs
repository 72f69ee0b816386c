//! Runnable files: the TOML file that `--agent NAME=FILE` names declares what it is — `kind =
//! "agent"` (the default, so earlier sub-agent files keep working), `"rlm"`, `"goal"` or
//! `"graph"` — and that kind's settings. Each file becomes one [`recursive_core::Runnable`] of the harness,
//! offered to the command's own engine (as a tool, a sandbox function, a delegate, a node).
//! A file may use the runnables of the files named before it (by name, in `tools`).

use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde::de::DeserializeOwned;

use crate::ConfigError;
use crate::rlm::RlmOptions;

/// An agent: the tool loop with its own model, prompt and tools.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentSpec {
    /// What it is for, shown to the model that may call it.
    pub description: String,
    /// Its model (default: its provider's).
    pub model: Option<String>,
    /// Its provider, a `[providers.NAME]` of the configuration (default: the main one).
    pub provider: Option<String>,
    /// Its system prompt.
    pub system_prompt: Option<String>,
    /// Built-in tools (and runnables of earlier files) it may use, by name (default: none).
    #[serde(default)]
    pub tools: Vec<String>,
    /// Its step limit.
    pub max_steps: Option<u32>,
}

/// An RLM: its description and its settings (those of `[rlm]` and `recursive rlm`).
#[derive(Debug, Clone)]
pub struct RlmSpec {
    /// What it is for.
    pub description: Option<String>,
    /// Its settings.
    pub options: Box<RlmOptions>,
    /// The provider of its root (`provider = "NAME"`, a `[providers.NAME]`; default: the main one).
    pub provider: Option<String>,
    /// The provider of its sub-calls (`sub_provider = "NAME"`; default: `[rlm] sub_provider`, else
    /// its root's).
    pub sub_provider: Option<String>,
}

/// A goal pursuer.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GoalSpec {
    /// What it is for.
    pub description: Option<String>,
    /// Its model (default: its provider's).
    pub model: Option<String>,
    /// Its provider, a `[providers.NAME]` of the configuration (default: the main one).
    pub provider: Option<String>,
    /// Deepest goal level.
    pub max_depth: Option<u32>,
    /// Most goals of one pursuit.
    pub max_goals: Option<usize>,
    /// USD budget of one pursuit.
    pub max_cost: Option<f64>,
    /// Wall clock of one pursuit, in seconds.
    pub max_time_secs: Option<f64>,
    /// Runnables of earlier files it may delegate to (default: all of them).
    pub delegates: Option<Vec<String>>,
}

/// A graph from a blueprint.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GraphSpec {
    /// What it is for.
    pub description: Option<String>,
    /// The blueprint, relative to the file.
    pub blueprint: PathBuf,
}

/// What a runnable file declares.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum RunnableSpec {
    /// `kind = "agent"` (the default).
    Agent(AgentSpec),
    /// `kind = "rlm"`.
    Rlm(RlmSpec),
    /// `kind = "goal"`.
    Goal(GoalSpec),
    /// `kind = "graph"`.
    Graph(GraphSpec),
}

/// One runnable file, read.
#[derive(Debug, Clone)]
pub struct RunnableFile {
    /// The name it is offered under (its `name`, else NAME of `NAME=FILE`).
    pub name: String,
    /// Where it was read from.
    pub path: PathBuf,
    /// What it declares.
    pub spec: RunnableSpec,
}

impl RunnableFile {
    /// Parses `NAME=FILE` and reads the file.
    pub fn load(spec: &str) -> Result<Self, ConfigError> {
        let (name, file) =
            spec.split_once('=').ok_or_else(|| ConfigError(format!("--agent {spec}: expected NAME=FILE")))?;
        let path = PathBuf::from(file);
        let text = crate::read_text_file(&path).map_err(|e| ConfigError(format!("runnable file {file}: {e}")))?;
        Self::parse(name, &path, &text)
    }

    /// Parses a file's text; `default_name` is used when it names none.
    pub fn parse(default_name: &str, path: &Path, text: &str) -> Result<Self, ConfigError> {
        let shown = path.display();
        let mut table: toml::Table = toml::from_str(text).map_err(|e| ConfigError(format!("{shown}: {e}")))?;
        let kind = match table.remove("kind") {
            None => "agent".to_string(),
            Some(toml::Value::String(k)) => k,
            Some(other) => return Err(ConfigError(format!("{shown}: `kind` must be a string, not {other}"))),
        };
        let name = match table.remove("name") {
            None => default_name.to_string(),
            Some(toml::Value::String(n)) => n,
            Some(other) => return Err(ConfigError(format!("{shown}: `name` must be a string, not {other}"))),
        };
        if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-') {
            return Err(ConfigError(format!("{shown}: name `{name}`: use letters, digits, `_` and `-`")));
        }
        let spec = match kind.as_str() {
            "agent" => RunnableSpec::Agent(settings(table, path)?),
            "rlm" => {
                let mut text = |key: &str| match table.remove(key) {
                    None => Ok(None),
                    Some(toml::Value::String(d)) => Ok(Some(d)),
                    Some(other) => Err(ConfigError(format!("{shown}: `{key}` must be a string, not {other}"))),
                };
                let (description, provider, sub_provider) =
                    (text("description")?, text("provider")?, text("sub_provider")?);
                RunnableSpec::Rlm(RlmSpec {
                    description,
                    options: Box::new(settings(table, path)?),
                    provider,
                    sub_provider,
                })
            }
            "goal" => RunnableSpec::Goal(settings(table, path)?),
            "graph" => RunnableSpec::Graph(settings(table, path)?),
            other => {
                return Err(ConfigError(format!("{shown}: kind `{other}`: expected agent, rlm, goal or graph")));
            }
        };
        Ok(Self { name, path: path.to_path_buf(), spec })
    }

    /// The providers and models the file chooses (beyond the configuration's), as (provider,
    /// model) pairs: `None` is the main provider, an empty model the provider's own. An RLM's
    /// sub-calls go to `sub_provider`, else `default_sub_provider` (`[rlm] sub_provider`), else
    /// its root's provider.
    pub fn choices<'a>(&'a self, default_sub_provider: Option<&'a str>) -> Vec<(Option<&'a str>, &'a str)> {
        let model = |m: &'a Option<String>| m.as_deref().unwrap_or_default();
        let choices = match &self.spec {
            RunnableSpec::Agent(spec) => vec![(spec.provider.as_deref(), model(&spec.model))],
            RunnableSpec::Rlm(spec) => {
                let root = spec.provider.as_deref();
                let sub = spec.sub_provider.as_deref().or(default_sub_provider).or(root);
                vec![(root, model(&spec.options.model)), (sub, model(&spec.options.sub_model))]
            }
            RunnableSpec::Goal(spec) => vec![(spec.provider.as_deref(), model(&spec.model))],
            RunnableSpec::Graph(_) => Vec::new(),
        };
        choices.into_iter().filter(|(provider, model)| provider.is_some() || !model.is_empty()).collect()
    }

    /// A path the file names, relative to the file's directory.
    pub fn relative(&self, path: &Path) -> PathBuf {
        match self.path.parent() {
            Some(dir) if path.is_relative() => dir.join(path),
            _ => path.to_path_buf(),
        }
    }
}

fn settings<T: DeserializeOwned>(table: toml::Table, path: &Path) -> Result<T, ConfigError> {
    table.try_into().map_err(|e: toml::de::Error| ConfigError(format!("{}: {}", path.display(), e.message())))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<RunnableFile, ConfigError> {
        RunnableFile::parse("r", Path::new("dir/r.toml"), text)
    }

    #[test]
    fn a_file_without_a_kind_is_an_agent() {
        let f = parse("description = \"Reviews.\"\ntools = [\"read_file\"]\n").unwrap();
        assert_eq!(f.name, "r");
        assert!(matches!(f.spec, RunnableSpec::Agent(AgentSpec { ref tools, .. }) if tools == &["read_file"]));
    }

    #[test]
    fn each_kind_takes_its_own_settings() {
        let f = parse("kind = \"rlm\"\nname = \"reader\"\nsub_model = \"small\"\ndialect = \"rlm\"\n").unwrap();
        assert_eq!(f.name, "reader");
        assert!(
            matches!(f.spec, RunnableSpec::Rlm(RlmSpec { ref options, .. }) if options.sub_model.as_deref() == Some("small"))
        );
        let f = parse("kind = \"graph\"\nblueprint = \"flow.toml\"\n").unwrap();
        let RunnableSpec::Graph(g) = &f.spec else { panic!("{f:?}") };
        assert_eq!(f.relative(&g.blueprint), Path::new("dir/flow.toml"));
        assert!(matches!(parse("kind = \"goal\"\nmax_goals = 5\n").unwrap().spec, RunnableSpec::Goal(_)));
    }

    #[test]
    fn each_kind_may_name_providers_and_the_choices_say_which_model_goes_where() {
        let agent = parse("description = \"d\"\nprovider = \"local\"\n").unwrap();
        assert_eq!(agent.choices(None), [(Some("local"), "")]);
        let goal = parse("kind = \"goal\"\nprovider = \"cloud\"\nmodel = \"big\"\n").unwrap();
        assert_eq!(goal.choices(None), [(Some("cloud"), "big")]);
        let rlm = parse("kind = \"rlm\"\nprovider = \"cloud\"\nsub_provider = \"local\"\nsub_model = \"small\"\n");
        let rlm = rlm.unwrap();
        assert_eq!(rlm.choices(Some("other")), [(Some("cloud"), ""), (Some("local"), "small")]);
        let plain = parse("kind = \"rlm\"\nmodel = \"m\"\n").unwrap();
        assert_eq!(plain.choices(Some("local")), [(None, "m"), (Some("local"), "")], "[rlm] sub_provider applies");
        assert_eq!(plain.choices(None), [(None, "m")], "the sub-calls go where the root's do");
        let err = parse("kind = \"rlm\"\nsub_provider = 3\n").unwrap_err().0;
        assert!(err.contains("`sub_provider` must be a string"), "{err}");
        assert!(
            parse("kind = \"graph\"\nblueprint = \"b.toml\"\nprovider = \"x\"\n").is_err(),
            "a graph's nodes name theirs"
        );
    }

    #[test]
    fn unknown_kinds_and_settings_are_config_errors() {
        assert!(parse("kind = \"robot\"\n").unwrap_err().0.contains("expected agent, rlm, goal or graph"));
        assert!(parse("kind = \"goal\"\nsub_model = \"x\"\n").unwrap_err().0.contains("sub_model"));
        assert!(parse("description = \"d\"\nname = \"bad name\"\n").unwrap_err().0.contains("bad name"));
    }
}
