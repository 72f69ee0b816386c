//! Chooses the model provider: command-line flags first, then the `[provider]` table of the
//! configuration file, then auto-detection from the environment.

use std::sync::Arc;

use recursive_core::ChatProvider;
use recursive_llm::config::{ProviderKind, ProviderSettings, build_provider, detect_from_env};
use recursive_llm::pricing::PriceTable;

use crate::ProviderArgs;
use crate::config::LoadedConfig;

/// A configuration problem: exit status 2 and a message saying how to fix it.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct ConfigError(pub String);

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
pub async fn settings(args: &ProviderArgs, config: &LoadedConfig) -> anyhow::Result<ProviderSettings> {
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
        return Err(ConfigError(HOW_TO_CONFIGURE.into()).into());
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
        crate::commands::fresh_output("--record", r, args.append)?;
        settings.record = Some(r.clone());
    }
    if let Some(s) = &args.mock_script {
        if settings.kind != ProviderKind::Mock {
            return Err(ConfigError("--mock-script needs --provider mock".into()).into());
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
pub async fn build(
    args: &ProviderArgs,
    config: &LoadedConfig,
) -> anyhow::Result<(Arc<dyn ChatProvider>, ProviderSettings)> {
    let settings = settings(args, config).await?;
    let mut prices = PriceTable::builtin();
    if let (Some(path), Some(_)) = (&config.path, &config.file.pricing) {
        prices.extend_from_toml_file(path).map_err(|e| ConfigError(format!("invalid [pricing] table: {e}")))?;
    }
    let provider = build_provider(&settings, &prices).map_err(|e| ConfigError(e.to_string()))?;
    PRICED.get_or_init(|| priced(&settings, &prices));
    Ok((provider, settings))
}

/// Whether the calls of the built provider have a known price (`None` before [`build`]).
static PRICED: std::sync::OnceLock<Result<(), String>> = std::sync::OnceLock::new();

/// `Err(model)` when the model's calls cost money and its price is unknown. Mock and replay
/// calls spend nothing; a local Ollama's are free.
fn priced(settings: &ProviderSettings, prices: &PriceTable) -> Result<(), String> {
    if matches!(settings.kind, ProviderKind::Mock | ProviderKind::Replay | ProviderKind::Ollama) {
        return Ok(());
    }
    let model = settings.model.clone().unwrap_or_else(|| settings.kind.default_model().to_string());
    if prices.lookup(&model).is_some() { Ok(()) } else { Err(model) }
}

/// Refuses a cost budget (`flag`) that could not hold: the model's price is unknown, so its
/// spending cannot be counted. The fix is a `[pricing."MODEL"]` entry.
pub fn require_price(flag: &str) -> Result<(), ConfigError> {
    match PRICED.get() {
        Some(Err(model)) => Err(ConfigError(format!(
            "{flag} cannot be enforced: the price of model `{model}` is unknown, so its cost cannot be counted; \
             add it to recursive.toml as [pricing.\"{model}\"] with input and output USD per million tokens"
        ))),
        _ => Ok(()),
    }
}

/// Whether the model's price is unknown (its costs count as $0).
pub fn unpriced_model() -> Option<String> {
    PRICED.get().and_then(|p| p.clone().err())
}
