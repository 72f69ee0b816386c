//! Chooses the model provider: command-line flags first, then the `[provider]` table of the
//! configuration file, then auto-detection from the environment.

use std::path::PathBuf;
use std::sync::Arc;

use recursive_core::ChatProvider;
use recursive_llm::config::{ProviderKind, ProviderSettings, build_provider, detect_from_env};
use recursive_llm::pricing::PriceTable;

use crate::ConfigError;
use crate::config::LoadedConfig;

/// How the model provider is chosen, beyond the configuration file (the command's flags).
#[derive(Debug, Clone, Default)]
pub struct ProviderOptions {
    /// The model API (`openai`, `anthropic`, `ollama`, `mock`, `replay`).
    pub provider: Option<String>,
    /// The model.
    pub model: Option<String>,
    /// The API's base URL.
    pub base_url: Option<String>,
    /// Per-request timeout in seconds.
    pub request_timeout: Option<f64>,
    /// Record every model call to this cassette.
    pub record: Option<PathBuf>,
    /// Replay model calls from this cassette.
    pub replay: Option<PathBuf>,
    /// Scripted replies of the mock provider.
    pub mock_script: Option<PathBuf>,
    /// Add to an existing cassette instead of refusing it.
    pub append: bool,
}

/// The provider a configuration gives, with its settings.
#[derive(Clone)]
pub struct BuiltProvider {
    /// The provider (retries, pricing and recording as configured).
    pub provider: Arc<dyn ChatProvider>,
    /// Its settings.
    pub settings: ProviderSettings,
    /// The model whose price is unknown, when its calls cost money (its costs count as $0).
    pub unpriced: Option<String>,
    /// Other models chosen (by runnable files, RLM flags) whose price is unknown, each with
    /// where it was chosen.
    pub unpriced_elsewhere: Vec<String>,
    /// The prices that apply.
    prices: PriceTable,
}

/// What to do when no provider is configured anywhere.
pub const HOW_TO_CONFIGURE: &str = "no model provider configured. Do one of:
  * export ANTHROPIC_API_KEY=...            (Anthropic, auto-detected)
  * export OPENAI_API_KEY=...               (OpenAI; OPENAI_BASE_URL for a compatible server)
  * start Ollama (ollama serve) on 127.0.0.1:11434 or set OLLAMA_HOST
  * pass --provider openai|anthropic|ollama [--model NAME] [--base-url URL]
  * add a [provider] table to ./recursive.toml, e.g.
        [provider]
        kind = \"openai\"
        model = \"gpt-4o-mini\"
        base_url = \"http://127.0.0.1:8000/v1\"
  * or replay a recorded cassette offline: --replay examples/<name>.cassette.jsonl";

fn parse_kind(s: &str) -> Result<ProviderKind, ConfigError> {
    s.parse::<ProviderKind>().map_err(|e| ConfigError(format!("--provider {s}: {e}")))
}

/// The provider settings that apply, or a [`ConfigError`] explaining how to configure one.
pub async fn settings(args: &ProviderOptions, config: &LoadedConfig) -> Result<ProviderSettings, ConfigError> {
    let from_file: Option<ProviderSettings> = match &config.file.provider {
        Some(_) => Some(config.section(&config.file.provider, "provider")?),
        None => None,
    };
    let mut settings = if let Some(kind) = &args.provider {
        let kind = parse_kind(kind)?;
        match from_file {
            Some(mut f) if f.kind == kind => {
                f.kind = kind;
                f
            }
            _ => ProviderSettings::new(kind),
        }
    } else if args.replay.is_some() {
        ProviderSettings::new(ProviderKind::Replay)
    } else if args.mock_script.is_some() {
        ProviderSettings::new(ProviderKind::Mock)
    } else if let Some(f) = from_file {
        f
    } else if let Some(d) = detect_from_env().await {
        d
    } else {
        return Err(ConfigError(HOW_TO_CONFIGURE.into()));
    };
    if let Some(m) = &args.model {
        settings.model = Some(m.clone());
    }
    if let Some(u) = &args.base_url {
        settings.base_url = Some(u.clone());
    }
    if let Some(t) = args.request_timeout {
        let timeout = std::time::Duration::try_from_secs_f64(t)
            .ok()
            .filter(|d| !d.is_zero())
            .ok_or_else(|| ConfigError(format!("--request-timeout {t}: expected a positive number of seconds")))?;
        settings.timeout = Some(timeout);
    }
    if let Some(r) = &args.record {
        crate::fresh_output("--record", r, args.append)?;
        settings.record = Some(r.clone());
    }
    if let Some(s) = &args.mock_script {
        if settings.kind != ProviderKind::Mock {
            return Err(ConfigError("--mock-script needs --provider mock".into()));
        }
        settings.script = Some(s.clone());
    }
    if let Some(r) = &args.replay {
        settings.kind = ProviderKind::Replay;
        settings.replay = Some(r.clone());
    }
    Ok(settings)
}

/// Builds the provider (with retries, pricing and recording as configured).
pub async fn build(args: &ProviderOptions, config: &LoadedConfig) -> Result<BuiltProvider, ConfigError> {
    let settings = settings(args, config).await?;
    let mut prices = PriceTable::builtin();
    if let Some(pricing) = &config.file.pricing {
        let mut doc = toml::Table::new();
        doc.insert("pricing".into(), toml::Value::Table(pricing.clone()));
        let text = toml::to_string(&doc).map_err(|e| ConfigError(format!("invalid [pricing] table: {e}")))?;
        prices.extend_from_toml(&text).map_err(|e| ConfigError(format!("invalid [pricing] table: {e}")))?;
    }
    let provider = build_provider(&settings, &prices).map_err(|e| ConfigError(e.to_string()))?;
    let mut built = BuiltProvider { provider, settings, unpriced: None, unpriced_elsewhere: Vec::new(), prices };
    let model = built.settings.model.clone().unwrap_or_else(|| built.settings.kind.default_model().to_string());
    built.unpriced = built.is_unpriced(&model).then_some(model);
    Ok(built)
}

impl BuiltProvider {
    /// The model of every call (the settings' model; empty for the provider's default).
    pub fn model(&self) -> String {
        self.settings.model.clone().unwrap_or_default()
    }

    /// Whether calls to `model` (empty: the configured one) cost money at a price not known.
    pub fn is_unpriced(&self, model: &str) -> bool {
        let model = if model.is_empty() { self.settings.resolved_model() } else { model.to_string() };
        self.settings.charges() && self.prices.lookup(&model).is_none()
    }

    /// Notes a model chosen by `origin` (a runnable file, a flag), so that a cost budget that
    /// could not count its calls is refused before the run starts ([`Self::require_price`]).
    pub fn note_model(&mut self, model: &str, origin: &str) {
        if !model.is_empty() && self.is_unpriced(model) {
            self.unpriced_elsewhere.push(format!("`{model}` ({origin})"));
        }
    }

    /// Refuses a cost budget (`flag`) that could not hold: the price of a model the run may call
    /// is unknown, so its spending cannot be counted. The fix is a `[pricing."MODEL"]` entry.
    pub fn require_price(&self, flag: &str) -> Result<(), ConfigError> {
        if let Some(model) = &self.unpriced {
            return Err(ConfigError(format!(
                "{flag} cannot be enforced: the price of model `{model}` is unknown, so its cost cannot be counted; \
                 add it to recursive.toml as [pricing.\"{model}\"] with input and output USD per million tokens"
            )));
        }
        if !self.unpriced_elsewhere.is_empty() {
            return Err(ConfigError(format!(
                "{flag} cannot be enforced: the price of model {} is unknown, so its cost cannot be counted; \
                 add it to recursive.toml as [pricing.\"MODEL\"] with input and output USD per million tokens",
                self.unpriced_elsewhere.join(", ")
            )));
        }
        Ok(())
    }
}
