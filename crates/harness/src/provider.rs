//! Chooses the model provider: command-line flags first, then the `[provider]` table of the
//! configuration file, then auto-detection from the environment. Providers configured by name
//! (`[providers.NAME]`) are chosen with `--provider NAME`, and by the runnable files, blueprint
//! nodes and RLM sub-models that say `provider = "NAME"`; each is built when first named.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use recursive_core::{CallPrice, ChatProvider, ChatRequest, ChatResponse, ChatStream, ProviderError};
use recursive_llm::config::{
    NamedProviderSettings, ProviderKind, ProviderSettings, build_provider, build_provider_with_env, detect_from_env,
};
use recursive_llm::pricing::PriceTable;

use crate::ConfigError;
use crate::config::LoadedConfig;

/// How the model provider is chosen, beyond the configuration file (the command's flags).
#[derive(Debug, Clone, Default)]
pub struct ProviderOptions {
    /// The model API (`openai`, `anthropic`, `ollama`, `mock`, `replay`) or the name of a
    /// `[providers.NAME]` table.
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
    /// The providers configured by name, built when first named.
    named: NamedProviders,
}

/// The `[providers.NAME]` tables, and the providers built from them so far.
#[derive(Clone, Default)]
struct NamedProviders {
    /// Each table, by name.
    tables: BTreeMap<String, NamedProviderSettings>,
    /// The name the main provider was chosen by (`--provider NAME`): naming it gives the main one.
    main: Option<String>,
    /// `--replay`: every provider answers from the one cassette.
    replay: bool,
    /// `--record`: every provider records to this cassette too.
    record: Option<PathBuf>,
    /// The providers built so far.
    built: Arc<Mutex<BTreeMap<String, Arc<dyn ChatProvider>>>>,
    /// Unpriced models of providers that blueprint nodes named while binding (after the harness
    /// was built; shared by every clone, so the command's cost check sees them).
    bound_unpriced: Arc<Mutex<Vec<String>>>,
}

/// A provider of the run tree and the model its calls ask for (empty: the provider's default).
#[derive(Clone)]
pub struct ChosenProvider {
    /// The provider (retries, pricing and recording as configured).
    pub provider: Arc<dyn ChatProvider>,
    /// The model.
    pub model: String,
}

/// A provider shown under its configured name in events and traces (the `provider` of each
/// call's usage), so that a run tree mixing two of the same kind tells them apart.
struct Labeled {
    name: String,
    inner: Arc<dyn ChatProvider>,
}

#[async_trait::async_trait]
impl ChatProvider for Labeled {
    fn name(&self) -> &str {
        &self.name
    }

    fn default_model(&self) -> &str {
        self.inner.default_model()
    }

    async fn stream(&self, request: ChatRequest) -> Result<ChatStream, ProviderError> {
        self.inner.stream(request).await
    }

    fn price(&self, request: &ChatRequest) -> CallPrice {
        self.inner.price(request)
    }

    async fn complete(&self, request: ChatRequest) -> Result<ChatResponse, ProviderError> {
        self.inner.complete(request).await
    }
}

/// What to do when no provider is configured anywhere.
pub const HOW_TO_CONFIGURE: &str = "no model provider configured. Do one of:
  * export ANTHROPIC_API_KEY=...            (Anthropic, auto-detected)
  * export OPENAI_API_KEY=...               (OpenAI; OPENAI_BASE_URL for a compatible server)
  * start Ollama (ollama serve) on 127.0.0.1:11434 or set OLLAMA_HOST
  * pass --provider openai|anthropic|ollama [--model NAME] [--base-url URL]
  * pass --provider NAME for a [providers.NAME] table of recursive.toml
  * add a [provider] table to ./recursive.toml, e.g.
        [provider]
        kind = \"openai\"
        model = \"gpt-4o-mini\"
        base_url = \"http://127.0.0.1:8000/v1\"
  * or replay a recorded cassette offline: --replay examples/<name>.cassette.jsonl";

/// The `[providers.NAME]` tables of the configuration, each checked: a name must not be one of
/// the built-in kinds (`--provider openai` would mean two things).
pub fn named_tables(config: &LoadedConfig) -> Result<BTreeMap<String, NamedProviderSettings>, ConfigError> {
    let tables: BTreeMap<String, NamedProviderSettings> = config.section(&config.file.providers, "providers")?;
    for name in tables.keys() {
        if name.parse::<ProviderKind>().is_ok() {
            return Err(ConfigError(format!(
                "[providers.{name}]: `{name}` is the name of a built-in provider kind; give the table another name \
                 (its `kind` says which API it speaks)"
            )));
        }
        if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-') {
            return Err(ConfigError(format!("[providers.\"{name}\"]: use letters, digits, `_` and `-` in a name")));
        }
    }
    Ok(tables)
}

/// What a name that is neither a kind nor configured is told: the names that would do.
fn unknown_provider(name: &str, configured: &BTreeMap<String, NamedProviderSettings>, kinds: bool) -> String {
    let configured = if configured.is_empty() {
        "none; add a [providers.NAME] table to recursive.toml".to_string()
    } else {
        configured.keys().cloned().collect::<Vec<_>>().join(", ")
    };
    if kinds {
        format!(
            "unknown provider `{name}` (kinds: {}; configured: {configured})",
            ProviderKind::ALL.map(|k| k.as_str()).join(", ")
        )
    } else {
        format!("unknown provider `{name}` (configured providers: {configured})")
    }
}

/// The provider settings that apply, or a [`ConfigError`] explaining how to configure one.
pub async fn settings(args: &ProviderOptions, config: &LoadedConfig) -> Result<ProviderSettings, ConfigError> {
    let from_file: Option<ProviderSettings> = match &config.file.provider {
        Some(_) => Some(config.section(&config.file.provider, "provider")?),
        None => None,
    };
    let named = named_tables(config)?;
    let mut settings = if let Some(name) = &args.provider {
        if let Some(table) = named.get(name) {
            table
                .settings(name, &|var| recursive_core::env::var(var))
                .map_err(|e| ConfigError(format!("--provider {name}: {e}")))?
        } else {
            let kind = name
                .parse::<ProviderKind>()
                .map_err(|_| ConfigError(format!("--provider {name}: {}", unknown_provider(name, &named, true))))?;
            match from_file {
                Some(f) if f.kind == kind => f,
                _ => ProviderSettings::new(kind),
            }
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
    let mut provider = build_provider(&settings, &prices).map_err(|e| ConfigError(e.to_string()))?;
    let tables = named_tables(config)?;
    let main = args.provider.clone().filter(|name| tables.contains_key(name));
    if let Some(name) = &main {
        provider = Arc::new(Labeled { name: name.clone(), inner: provider });
    }
    let named = NamedProviders {
        tables,
        main,
        replay: settings.replay.is_some(),
        record: settings.record.clone(),
        built: Arc::default(),
        bound_unpriced: Arc::default(),
    };
    let mut built = BuiltProvider { provider, settings, unpriced: None, unpriced_elsewhere: Vec::new(), prices, named };
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

    /// Notes a model chosen by `origin` on the provider called `provider` (`None`: the main
    /// one; an empty `model`: the provider's own), like [`Self::note_model`]. An unknown name is
    /// an error naming the configured ones.
    pub fn note_model_of(&mut self, provider: Option<&str>, model: &str, origin: &str) -> Result<(), ConfigError> {
        let Some(name) = provider.filter(|n| self.named.main.as_deref() != Some(*n)) else {
            self.note_model(model, origin);
            return Ok(());
        };
        let table = self.table(name).map_err(|e| ConfigError(format!("{origin}: {}", e.0)))?;
        if let Some(model) = self.unpriced_on(table, model) {
            self.unpriced_elsewhere.push(format!("`{model}` (provider `{name}`, {origin})"));
        }
        Ok(())
    }

    /// The model (empty: the table's own) when calls to it through `table` cost money at a price
    /// not known.
    fn unpriced_on(&self, table: &NamedProviderSettings, model: &str) -> Option<String> {
        let mut settings = ProviderSettings::new(table.kind);
        settings.model = table.model.clone();
        if self.named.replay {
            settings.replay = self.settings.replay.clone();
        }
        let model = if model.is_empty() { settings.resolved_model() } else { model.to_string() };
        (settings.charges() && self.prices.lookup(&model).is_none()).then_some(model)
    }

    /// The provider a blueprint node names, as [`Self::choose`] gives it; an unknown price is
    /// noted so that a cost budget checked afterwards ([`Self::require_price`]) is refused.
    pub fn choose_for_node(&self, name: &str) -> Result<ChosenProvider, ConfigError> {
        let chosen = self.choose(Some(name), None)?;
        let unpriced = match self.named.tables.get(name).filter(|_| self.named.main.as_deref() != Some(name)) {
            Some(table) => self.unpriced_on(table, &chosen.model),
            None => self.is_unpriced(&chosen.model).then(|| chosen.model.clone()),
        };
        if let Some(model) = unpriced
            && let Ok(mut bound) = self.named.bound_unpriced.lock()
        {
            bound.push(format!("`{model}` (provider `{name}`, named by a blueprint node)"));
        }
        Ok(chosen)
    }

    /// The names of the providers configured by `[providers.NAME]`.
    pub fn names(&self) -> Vec<String> {
        self.named.tables.keys().cloned().collect()
    }

    fn table(&self, name: &str) -> Result<&NamedProviderSettings, ConfigError> {
        self.named.tables.get(name).ok_or_else(|| ConfigError(unknown_provider(name, &self.named.tables, false)))
    }

    /// The provider called `name` (`None`: the main one) and the model its calls ask for: `model`
    /// when given, else the provider's own. A configured provider is built the first time it is
    /// named (its key read then); an unknown name, or one that cannot be built, is a
    /// [`ConfigError`] before any call.
    pub fn choose(&self, name: Option<&str>, model: Option<&str>) -> Result<ChosenProvider, ConfigError> {
        let model = model.map(str::to_string);
        let Some(name) = name.filter(|n| self.named.main.as_deref() != Some(*n)) else {
            return Ok(ChosenProvider {
                provider: self.provider.clone(),
                model: model.unwrap_or_else(|| self.model()),
            });
        };
        let table = self.table(name)?;
        let model = model.unwrap_or_else(|| table.model.clone().unwrap_or_default());
        if self.named.replay {
            return Ok(ChosenProvider { provider: self.provider.clone(), model });
        }
        let mut built = self.named.built.lock().map_err(|_| ConfigError("the provider table is poisoned".into()))?;
        if let Some(provider) = built.get(name) {
            return Ok(ChosenProvider { provider: provider.clone(), model });
        }
        let env = |var: &str| recursive_core::env::var(var);
        let mut settings = table.settings(name, &env).map_err(|e| ConfigError(e.to_string()))?;
        settings.record = self.named.record.clone();
        let inner = build_provider_with_env(&settings, &self.prices, &env)
            .map_err(|e| ConfigError(format!("provider `{name}`: {e}")))?;
        let provider: Arc<dyn ChatProvider> = Arc::new(Labeled { name: name.to_string(), inner });
        built.insert(name.to_string(), provider.clone());
        Ok(ChosenProvider { provider, model })
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
        let mut elsewhere = self.unpriced_elsewhere.clone();
        if let Ok(bound) = self.named.bound_unpriced.lock() {
            elsewhere.extend(bound.iter().filter(|b| !elsewhere.contains(b)).cloned().collect::<Vec<_>>());
        }
        if !elsewhere.is_empty() {
            return Err(ConfigError(format!(
                "{flag} cannot be enforced: the price of model {} is unknown, so its cost cannot be counted; \
                 add it to recursive.toml as [pricing.\"MODEL\"] with input and output USD per million tokens",
                elsewhere.join(", ")
            )));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::FileConfig;

    fn config(text: &str) -> LoadedConfig {
        LoadedConfig { file: toml::from_str::<FileConfig>(text).unwrap(), path: None }
    }

    fn flag(provider: &str) -> ProviderOptions {
        ProviderOptions { provider: Some(provider.into()), ..Default::default() }
    }

    const TWO: &str = r#"
        [provider]
        kind = "mock"
        model = "main-model"
        [providers.local]
        kind = "ollama"
        model = "qwen3"
        base_url = "http://127.0.0.1:9/v1"
        timeout = "2m"
        [providers.scripted]
        kind = "mock"
        model = "small"
    "#;

    #[tokio::test]
    async fn a_configured_name_is_accepted_by_the_provider_flag_and_flags_still_apply() {
        let settings = settings(&flag("local"), &config(TWO)).await.unwrap();
        assert_eq!(settings.kind, ProviderKind::Ollama);
        assert_eq!(settings.model.as_deref(), Some("qwen3"));
        assert_eq!(settings.base_url.as_deref(), Some("http://127.0.0.1:9/v1"));
        assert_eq!(settings.timeout, Some(std::time::Duration::from_secs(120)));
        let options = ProviderOptions { model: Some("llama3.2".into()), ..flag("local") };
        assert_eq!(settings_model(&options).await, "llama3.2", "--model wins over the table's");
        let built = build(&flag("local"), &config(TWO)).await.unwrap();
        assert_eq!(built.provider.name(), "local", "shown under its name");
    }

    async fn settings_model(options: &ProviderOptions) -> String {
        settings(options, &config(TWO)).await.unwrap().model.unwrap_or_default()
    }

    #[tokio::test]
    async fn an_unknown_provider_flag_names_the_kinds_and_the_configured_names() {
        let err = settings(&flag("nope"), &config(TWO)).await.unwrap_err().0;
        assert!(err.contains("unknown provider `nope`"), "{err}");
        assert!(err.contains("openai, openai-responses, anthropic"), "the kinds: {err}");
        assert!(err.contains("configured: local, scripted"), "the names: {err}");
        let err = settings(&flag("nope"), &config("")).await.unwrap_err().0;
        assert!(err.contains("configured: none; add a [providers.NAME] table"), "{err}");
    }

    async fn refused(text: &str) -> String {
        match build(&flag("mock"), &config(text)).await {
            Ok(_) => panic!("built from {text}"),
            Err(e) => e.0,
        }
    }

    #[tokio::test]
    async fn a_table_named_like_a_kind_or_with_a_bad_name_is_refused() {
        let err = refused("[providers.anthropic]\nkind = \"openai\"\n").await;
        assert!(err.contains("[providers.anthropic]") && err.contains("built-in provider kind"), "{err}");
        let err = refused("[providers.\"a b\"]\nkind = \"mock\"\n").await;
        assert!(err.contains("letters, digits"), "{err}");
        let err = refused("[providers.x]\nkind = \"mock\"\napi_key = \"sk-x\"\n").await;
        assert!(err.contains("[providers]") && err.contains("api_key"), "the key itself is not a setting: {err}");
    }

    #[tokio::test]
    async fn choosing_a_named_provider_gives_it_under_its_name_with_its_model() {
        let built = build(&ProviderOptions::default(), &config(TWO)).await.unwrap();
        let main = built.choose(None, None).unwrap();
        assert_eq!((main.provider.name(), main.model.as_str()), ("mock", "main-model"));
        let scripted = built.choose(Some("scripted"), None).unwrap();
        assert_eq!((scripted.provider.name(), scripted.model.as_str()), ("scripted", "small"));
        let again = built.choose(Some("scripted"), Some("other")).unwrap();
        assert!(Arc::ptr_eq(&scripted.provider, &again.provider), "built once");
        assert_eq!(again.model, "other", "a model named with it wins");
        let answer = scripted.provider.complete(ChatRequest::default()).await.unwrap();
        assert_eq!(answer.model, "small");
        let Err(err) = built.choose(Some("cloud"), None) else { panic!("an unknown name was chosen") };
        assert!(err.0.contains("unknown provider `cloud` (configured providers: local, scripted)"), "{}", err.0);
    }

    #[tokio::test]
    async fn naming_the_main_provider_by_its_name_gives_the_main_one() {
        let options = ProviderOptions { model: Some("flagged".into()), ..flag("scripted") };
        let built = build(&options, &config(TWO)).await.unwrap();
        let chosen = built.choose(Some("scripted"), None).unwrap();
        assert!(Arc::ptr_eq(&chosen.provider, &built.provider));
        assert_eq!(chosen.model, "flagged");
    }

    #[tokio::test]
    async fn an_unset_key_variable_is_an_error_not_another_key() {
        let text = "[providers.groq]\nkind = \"openai\"\nbase_url = \"http://127.0.0.1:9/v1\"\n\
                    api_key_env = \"RECURSIVE_TEST_NEVER_SET_KEY\"\n";
        let built = build(&flag("mock"), &config(text)).await.unwrap();
        let Err(err) = built.choose(Some("groq"), None) else { panic!("built without its key") };
        assert!(err.0.contains("RECURSIVE_TEST_NEVER_SET_KEY") && err.0.contains("is not set"), "{}", err.0);
    }

    #[tokio::test]
    async fn a_named_provider_without_a_price_is_refused_under_a_cost_cap() {
        let text = "[providers.pricey]\nkind = \"openai\"\nbase_url = \"http://127.0.0.1:9/v1\"\n\
                    model = \"their-new-model\"\n[providers.priced]\nkind = \"openai\"\nmodel = \"gpt-4o\"\n\
                    [providers.local]\nkind = \"ollama\"\nmodel = \"their-new-model\"\n";
        let mut built = build(&flag("mock"), &config(text)).await.unwrap();
        built.note_model_of(Some("local"), "", "a.toml").unwrap();
        built.note_model_of(Some("priced"), "", "a.toml").unwrap();
        assert!(built.require_price("--max-cost").is_ok(), "a local model and a priced one are fine");
        built.note_model_of(Some("pricey"), "", "named by a.toml").unwrap();
        let err = built.require_price("--max-cost").unwrap_err().0;
        assert!(err.contains("`their-new-model` (provider `pricey`, named by a.toml)"), "{err}");
        let err = built.note_model_of(Some("nope"), "", "named by b.toml").unwrap_err().0;
        assert!(err.starts_with("named by b.toml: unknown provider `nope`"), "{err}");
        let main = build(&flag("pricey"), &config(text)).await.unwrap();
        assert!(main.require_price("--max-cost").unwrap_err().0.contains("their-new-model"), "as the main one");
    }

    async fn harness(text: &str) -> Result<crate::Harness, ConfigError> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("recursive.toml");
        std::fs::write(&path, text).unwrap();
        let options = crate::HarnessOptions {
            config: Some(path),
            provider: flag("mock"),
            workspace: Some(dir.path().to_path_buf()),
            ..Default::default()
        };
        crate::Harness::build(options).await
    }

    #[tokio::test]
    async fn an_rlm_sub_provider_of_the_configuration_must_be_configured() {
        let err = harness("[rlm]\nsub_provider = \"nope\"\n").await.unwrap_err().0;
        assert!(err.starts_with("[rlm] sub_provider: unknown provider `nope` (configured providers: none"), "{err}");
        let built = harness(&format!("{TWO}\n[rlm]\nsub_provider = \"scripted\"\n")).await.unwrap();
        assert!(built.rlm(None).is_ok());
    }

    #[tokio::test]
    async fn under_record_every_name_records_to_the_one_cassette() {
        let dir = tempfile::tempdir().unwrap();
        let cassette = dir.path().join("c.jsonl");
        let options = ProviderOptions { record: Some(cassette.clone()), ..flag("mock") };
        let built = build(&options, &config(TWO)).await.unwrap();
        let request =
            |text: &str| ChatRequest { messages: vec![recursive_core::Message::user(text)], ..Default::default() };
        built.provider.complete(request("to the main one")).await.unwrap();
        let scripted = built.choose(Some("scripted"), None).unwrap();
        scripted.provider.complete(request("to the named one")).await.unwrap();
        let text = std::fs::read_to_string(&cassette).unwrap();
        assert_eq!(text.lines().count(), 2, "{text}");
        assert!(text.contains("to the main one") && text.contains("to the named one"), "{text}");
    }

    #[tokio::test]
    async fn under_replay_every_name_answers_from_the_cassette() {
        let dir = tempfile::tempdir().unwrap();
        let cassette = dir.path().join("c.jsonl");
        std::fs::write(&cassette, "").unwrap();
        let options = ProviderOptions { replay: Some(cassette), ..Default::default() };
        let built = build(&options, &config(TWO)).await.unwrap();
        let chosen = built.choose(Some("local"), None).unwrap();
        assert!(Arc::ptr_eq(&chosen.provider, &built.provider));
        assert_eq!(chosen.model, "qwen3", "the request names the model it was recorded with");
    }
}
