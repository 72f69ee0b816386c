//! AWS credentials from the standard chain, in its order: the environment
//! (`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN`), then the shared profile
//! files (`AWS_PROFILE`, else `default`, in `~/.aws/credentials` and `~/.aws/config` or the
//! files `AWS_SHARED_CREDENTIALS_FILE` and `AWS_CONFIG_FILE` name: static keys, or a role with
//! `web_identity_token_file`), then web identity (`AWS_WEB_IDENTITY_TOKEN_FILE` and
//! `AWS_ROLE_ARN`, `AWS_ROLE_SESSION_NAME`: STS `AssumeRoleWithWebIdentity`, at
//! `AWS_ENDPOINT_URL_STS` or `AWS_ENDPOINT_URL` when set).
//!
//! Every variable is read through the lookup the caller passes (the process's held environment
//! in the binary, a map in tests). The source is chosen when the provider is built, so missing
//! credentials are a configuration error naming what was tried; temporary credentials from
//! STS are fetched when first needed and fetched again [`REFRESH_MARGIN`] before they expire.
//! Profiles that need other programs or services (`credential_process`, SSO, `source_profile`
//! role chains) are refused with a message saying so.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use recursive_core::ProviderError;
use tokio::sync::Mutex;

use crate::error::LlmError;

/// Temporary credentials are fetched anew this long before they expire.
pub const REFRESH_MARGIN: Duration = Duration::from_secs(300);

/// Largest web identity token file read.
const MAX_TOKEN_BYTES: u64 = 64 * 1024;

/// Largest STS response read.
const MAX_STS_BYTES: usize = 256 * 1024;

/// Limit on one STS call.
const STS_TIMEOUT: Duration = Duration::from_secs(30);

/// What the chain tried, for the error when it found nothing.
pub const CHAIN: &str = "the environment (AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY), the shared profile \
    (AWS_PROFILE, else `default`, in ~/.aws/credentials and ~/.aws/config, or AWS_SHARED_CREDENTIALS_FILE and \
    AWS_CONFIG_FILE), web identity (AWS_WEB_IDENTITY_TOKEN_FILE and AWS_ROLE_ARN), and a Bedrock API key \
    (AWS_BEARER_TOKEN_BEDROCK)";

/// An access key, its secret and, for temporary credentials, the session token and expiry.
#[derive(Clone, PartialEq, Eq)]
pub struct Credentials {
    /// The access key id.
    pub access_key_id: String,
    /// The secret access key.
    pub secret_access_key: String,
    /// The session token of temporary credentials.
    pub session_token: Option<String>,
    /// When temporary credentials expire.
    pub expires: Option<SystemTime>,
}

impl fmt::Debug for Credentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Credentials")
            .field("access_key_id", &self.access_key_id)
            .field("secret_access_key", &"<redacted>")
            .field("session_token", &self.session_token.as_ref().map(|_| "<redacted>"))
            .field("expires", &self.expires)
            .finish()
    }
}

impl Credentials {
    /// Whether they can still be used at `now` (with [`REFRESH_MARGIN`] to spare).
    pub fn fresh_at(&self, now: SystemTime) -> bool {
        self.expires.is_none_or(|at| at.duration_since(now).is_ok_and(|left| left > REFRESH_MARGIN))
    }
}

/// A role assumed with a web identity token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WebIdentity {
    /// The file holding the token (read anew at each refresh: tokens rotate).
    pub token_file: PathBuf,
    /// The role's ARN.
    pub role_arn: String,
    /// The session name.
    pub session_name: String,
    /// The STS endpoint the role is assumed at.
    pub sts_endpoint: String,
}

/// Where the credentials come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// Keys as they are, and where they were found.
    Static {
        /// The keys.
        credentials: Credentials,
        /// `the environment`, `profile NAME`.
        from: String,
    },
    /// Temporary credentials from STS for a role, and where it was configured.
    WebIdentity {
        /// The role and token.
        role: WebIdentity,
        /// `the environment`, `profile NAME`.
        from: String,
    },
}

impl Source {
    /// Where the credentials were found, for messages.
    pub fn from(&self) -> &str {
        match self {
            Source::Static { from, .. } | Source::WebIdentity { from, .. } => from,
        }
    }
}

/// A variable lookup (the process's environment, or a test's map).
pub type Env<'a> = &'a dyn Fn(&str) -> Option<String>;

fn var(env: Env<'_>, name: &str) -> Option<String> {
    env(name).map(|v| v.trim().to_string()).filter(|v| !v.is_empty())
}

/// The name of the profile in use: `profile` from the settings, else `AWS_PROFILE`, else
/// `default`; and whether it was named (a named profile that does not exist is an error).
fn profile_name(env: Env<'_>, profile: Option<&str>) -> (String, bool) {
    match profile.map(str::to_string).or_else(|| var(env, "AWS_PROFILE")) {
        Some(name) => (name, true),
        None => ("default".to_string(), false),
    }
}

/// Chooses the first source of the chain that has credentials; `None` when none has.
pub fn resolve(env: Env<'_>, profile: Option<&str>, region: Option<&str>) -> Result<Option<Source>, LlmError> {
    if let Some(source) = from_env(env)? {
        return Ok(Some(source));
    }
    let (name, named) = profile_name(env, profile);
    let files = ProfileFiles::load(env)?;
    match files.profile(&name) {
        Some(section) => {
            if let Some(source) = from_profile(env, &name, &section, region)? {
                return Ok(Some(source));
            }
        }
        None if named => {
            return Err(LlmError::InvalidSetting(format!(
                "AWS profile `{name}` is not in {} or {}",
                files.credentials_path.display(),
                files.config_path.display()
            )));
        }
        None => {}
    }
    Ok(web_identity_from_env(env, region)?.map(|role| Source::WebIdentity { role, from: "the environment".into() }))
}

/// The region of the profile in use (`region` in its config-file section).
pub fn profile_region(env: Env<'_>, profile: Option<&str>) -> Option<String> {
    let (name, _) = profile_name(env, profile);
    let files = ProfileFiles::load(env).ok()?;
    files.config.get(&config_section(&name))?.get("region").filter(|r| !r.is_empty()).cloned()
}

fn from_env(env: Env<'_>) -> Result<Option<Source>, LlmError> {
    match (var(env, "AWS_ACCESS_KEY_ID"), var(env, "AWS_SECRET_ACCESS_KEY")) {
        (Some(access_key_id), Some(secret_access_key)) => Ok(Some(Source::Static {
            credentials: Credentials {
                access_key_id,
                secret_access_key,
                session_token: var(env, "AWS_SESSION_TOKEN"),
                expires: None,
            },
            from: "the environment".into(),
        })),
        (Some(_), None) => {
            Err(LlmError::InvalidSetting("AWS_ACCESS_KEY_ID is set but AWS_SECRET_ACCESS_KEY is not".into()))
        }
        (None, Some(_)) => {
            Err(LlmError::InvalidSetting("AWS_SECRET_ACCESS_KEY is set but AWS_ACCESS_KEY_ID is not".into()))
        }
        (None, None) => Ok(None),
    }
}

/// Credentials of a profile's section: keys, or a role with a web identity token file.
fn from_profile(
    env: Env<'_>,
    name: &str,
    section: &BTreeMap<String, String>,
    region: Option<&str>,
) -> Result<Option<Source>, LlmError> {
    let get = |key: &str| section.get(key).filter(|v| !v.is_empty()).cloned();
    let from = format!("profile `{name}`");
    if let (Some(access_key_id), Some(secret_access_key)) = (get("aws_access_key_id"), get("aws_secret_access_key")) {
        let credentials =
            Credentials { access_key_id, secret_access_key, session_token: get("aws_session_token"), expires: None };
        return Ok(Some(Source::Static { credentials, from }));
    }
    if let (Some(role_arn), Some(token_file)) = (get("role_arn"), get("web_identity_token_file")) {
        let session_name = get("role_session_name").unwrap_or_else(default_session_name);
        let role = WebIdentity {
            token_file: expand_home(env, &token_file),
            role_arn,
            session_name,
            sts_endpoint: sts_endpoint(env, region),
        };
        return Ok(Some(Source::WebIdentity { role, from }));
    }
    let unsupported = ["credential_process", "sso_session", "sso_start_url", "source_profile", "credential_source"];
    if let Some(key) = unsupported.iter().find(|k| section.contains_key(**k)) {
        return Err(LlmError::InvalidSetting(format!(
            "AWS profile `{name}` gets its credentials by `{key}`, which Recursive does not support; export \
             credentials (e.g. `eval \"$(aws configure export-credentials --profile {name} --format env)\"`) or use \
             a profile with keys or `web_identity_token_file`"
        )));
    }
    Ok(None)
}

fn web_identity_from_env(env: Env<'_>, region: Option<&str>) -> Result<Option<WebIdentity>, LlmError> {
    match (var(env, "AWS_WEB_IDENTITY_TOKEN_FILE"), var(env, "AWS_ROLE_ARN")) {
        (Some(token_file), Some(role_arn)) => Ok(Some(WebIdentity {
            token_file: expand_home(env, &token_file),
            role_arn,
            session_name: var(env, "AWS_ROLE_SESSION_NAME").unwrap_or_else(default_session_name),
            sts_endpoint: sts_endpoint(env, region),
        })),
        (Some(_), None) => {
            Err(LlmError::InvalidSetting("AWS_WEB_IDENTITY_TOKEN_FILE is set but AWS_ROLE_ARN is not".into()))
        }
        _ => Ok(None),
    }
}

fn default_session_name() -> String {
    let secs = SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or_default();
    format!("recursive-{secs}")
}

/// `AWS_ENDPOINT_URL_STS`, else `AWS_ENDPOINT_URL`, else the region's STS endpoint (the global
/// one without a region).
fn sts_endpoint(env: Env<'_>, region: Option<&str>) -> String {
    var(env, "AWS_ENDPOINT_URL_STS").or_else(|| var(env, "AWS_ENDPOINT_URL")).unwrap_or_else(|| match region {
        Some(region) => format!("https://sts.{region}.amazonaws.com"),
        None => "https://sts.amazonaws.com".to_string(),
    })
}

fn expand_home(env: Env<'_>, path: &str) -> PathBuf {
    match (path.strip_prefix("~/"), var(env, "HOME")) {
        (Some(rest), Some(home)) => Path::new(&home).join(rest),
        _ => PathBuf::from(path),
    }
}

/// An INI file's sections: name → key → value.
type Sections = BTreeMap<String, BTreeMap<String, String>>;

/// The shared credentials and config files, parsed.
struct ProfileFiles {
    credentials_path: PathBuf,
    config_path: PathBuf,
    credentials: Sections,
    config: Sections,
}

/// A profile's section name in the config file (`default`, or `profile NAME`).
fn config_section(name: &str) -> String {
    if name == "default" { name.to_string() } else { format!("profile {name}") }
}

impl ProfileFiles {
    fn load(env: Env<'_>) -> Result<Self, LlmError> {
        let default =
            |file: &str| var(env, "HOME").map(|home| Path::new(&home).join(".aws").join(file)).unwrap_or_default();
        let path =
            |name: &str, file: &str| var(env, name).map(|p| expand_home(env, &p)).unwrap_or_else(|| default(file));
        let credentials_path = path("AWS_SHARED_CREDENTIALS_FILE", "credentials");
        let config_path = path("AWS_CONFIG_FILE", "config");
        Ok(ProfileFiles {
            credentials: read_ini(&credentials_path)?,
            config: read_ini(&config_path)?,
            credentials_path,
            config_path,
        })
    }

    /// A profile's keys: the config file's section, overridden by the credentials file's.
    fn profile(&self, name: &str) -> Option<BTreeMap<String, String>> {
        let config = self.config.get(&config_section(name));
        let credentials = self.credentials.get(name);
        if config.is_none() && credentials.is_none() {
            return None;
        }
        let mut merged = config.cloned().unwrap_or_default();
        merged.extend(credentials.cloned().unwrap_or_default());
        Some(merged)
    }
}

/// Largest profile file read.
const MAX_PROFILE_BYTES: u64 = 1024 * 1024;

/// Reads an INI file (none is empty; an unreadable one is an error).
fn read_ini(path: &Path) -> Result<Sections, LlmError> {
    if path.as_os_str().is_empty() || !path.exists() {
        return Ok(Sections::new());
    }
    let meta = std::fs::metadata(path).map_err(|e| LlmError::io(path, e))?;
    if !meta.is_file() || meta.len() > MAX_PROFILE_BYTES {
        return Err(LlmError::InvalidSetting(format!(
            "{}: not a regular file of at most {MAX_PROFILE_BYTES} bytes",
            path.display()
        )));
    }
    let text = std::fs::read_to_string(path).map_err(|e| LlmError::io(path, e))?;
    Ok(parse_ini(&text))
}

/// Parses the AWS profile file format: `[section]` headers, `key = value` lines, `#` and `;`
/// comments; indented lines (a nested block such as `s3 =\n  max_concurrent_requests = 10`)
/// are skipped. Section names and keys are trimmed; keys are lower case.
pub fn parse_ini(text: &str) -> Sections {
    let mut sections = Sections::new();
    let mut current: Option<String> = None;
    for line in text.lines() {
        if line.starts_with([' ', '\t']) {
            continue;
        }
        let line = line.trim();
        if line.is_empty() || line.starts_with(['#', ';']) {
            continue;
        }
        if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            let name = name.split_whitespace().collect::<Vec<_>>().join(" ");
            sections.entry(name.clone()).or_default();
            current = Some(name);
            continue;
        }
        if let (Some(section), Some((key, value))) = (&current, line.split_once('=')) {
            let value = value.split(" #").next().unwrap_or_default().split(" ;").next().unwrap_or_default();
            let entry = sections.entry(section.clone()).or_default();
            entry.insert(key.trim().to_ascii_lowercase(), value.trim().to_string());
        }
    }
    sections
}

/// Credentials of one [`Source`], with temporary ones kept until shortly before they expire.
pub struct CredentialProvider {
    source: Source,
    http: reqwest::Client,
    cached: Mutex<Option<Credentials>>,
}

impl fmt::Debug for CredentialProvider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = match &self.source {
            Source::Static { .. } => "static",
            Source::WebIdentity { .. } => "web identity",
        };
        f.debug_struct("CredentialProvider").field("kind", &kind).field("from", &self.source.from()).finish()
    }
}

impl CredentialProvider {
    /// A provider of the credentials `source` gives.
    pub fn new(source: Source) -> Result<Self, LlmError> {
        let http = recursive_http::client_builder()
            .timeout(STS_TIMEOUT)
            .connect_timeout(Duration::from_secs(10))
            .build()
            .map_err(|e| LlmError::HttpClient { provider: "sts".into(), message: e.to_string() })?;
        Ok(Self { source, http, cached: Mutex::new(None) })
    }

    /// Where the credentials come from.
    pub fn source(&self) -> &Source {
        &self.source
    }

    /// Credentials to sign a request with now: the static ones, or temporary ones — fetched
    /// when none are kept or those kept expire within [`REFRESH_MARGIN`] (one fetch at a time).
    pub async fn credentials(&self) -> Result<Credentials, ProviderError> {
        let role = match &self.source {
            Source::Static { credentials, .. } => return Ok(credentials.clone()),
            Source::WebIdentity { role, .. } => role,
        };
        let mut cached = self.cached.lock().await;
        if let Some(credentials) = cached.as_ref().filter(|c| c.fresh_at(SystemTime::now())) {
            return Ok(credentials.clone());
        }
        let fresh = assume_role_with_web_identity(&self.http, role).await?;
        *cached = Some(fresh.clone());
        Ok(fresh)
    }
}

fn sts_error(message: String) -> ProviderError {
    ProviderError::Invalid(format!("AWS STS: {message}"))
}

/// Calls STS `AssumeRoleWithWebIdentity` (unsigned: the token is the proof) for `role`.
pub async fn assume_role_with_web_identity(
    http: &reqwest::Client,
    role: &WebIdentity,
) -> Result<Credentials, ProviderError> {
    let token = read_token(&role.token_file).await?;
    let form = form_urlencoded::Serializer::new(String::new())
        .append_pair("Action", "AssumeRoleWithWebIdentity")
        .append_pair("Version", "2011-06-15")
        .append_pair("RoleArn", &role.role_arn)
        .append_pair("RoleSessionName", &role.session_name)
        .append_pair("WebIdentityToken", &token)
        .finish();
    let url = format!("{}/", role.sts_endpoint.trim_end_matches('/'));
    let response =
        http.post(&url).header("content-type", "application/x-www-form-urlencoded").body(form).send().await.map_err(
            |e| ProviderError::Connection { provider: "sts".into(), message: recursive_http::error_chain(&e) },
        )?;
    let status = response.status();
    let body = read_bounded(response).await?;
    let text = String::from_utf8_lossy(&body);
    if !status.is_success() {
        let message = xml_text(&text, "Message").unwrap_or_else(|| crate::http::clip(text.trim(), 300));
        let code = xml_text(&text, "Code").map(|c| format!("{c}: ")).unwrap_or_default();
        return Err(ProviderError::Http {
            provider: "sts".into(),
            status: status.as_u16(),
            message: format!("AssumeRoleWithWebIdentity for {}: {code}{message}", role.role_arn),
            retry_after_secs: None,
        });
    }
    parse_assume_role_response(&text).map_err(sts_error)
}

async fn read_token(path: &Path) -> Result<String, ProviderError> {
    let unreadable = |why: String| sts_error(format!("cannot read the web identity token {}: {why}", path.display()));
    let meta = tokio::fs::metadata(path).await.map_err(|e| unreadable(e.to_string()))?;
    if !meta.is_file() || meta.len() > MAX_TOKEN_BYTES {
        return Err(unreadable(format!("not a regular file of at most {MAX_TOKEN_BYTES} bytes")));
    }
    let token = tokio::fs::read_to_string(path).await.map_err(|e| unreadable(e.to_string()))?;
    Ok(token.trim().to_string())
}

async fn read_bounded(response: reqwest::Response) -> Result<Vec<u8>, ProviderError> {
    use futures::StreamExt;
    let mut body = Vec::new();
    let mut chunks = response.bytes_stream();
    while let Some(chunk) = chunks.next().await {
        let chunk = chunk.map_err(|e| ProviderError::Truncated {
            provider: "sts".into(),
            message: recursive_http::error_chain(&e),
        })?;
        body.extend_from_slice(&chunk);
        if body.len() > MAX_STS_BYTES {
            return Err(sts_error(format!("the response is larger than {MAX_STS_BYTES} bytes")));
        }
    }
    Ok(body)
}

/// The credentials of an `AssumeRoleWithWebIdentityResponse` document.
pub fn parse_assume_role_response(xml: &str) -> Result<Credentials, String> {
    let credentials = element(xml, "Credentials").ok_or("the response has no <Credentials>")?;
    let field = |tag: &str| xml_text(credentials, tag).ok_or(format!("the credentials have no <{tag}>"));
    let expiration = field("Expiration")?;
    let expires = chrono::DateTime::parse_from_rfc3339(&expiration)
        .map_err(|e| format!("the expiration `{expiration}` is no time: {e}"))?;
    Ok(Credentials {
        access_key_id: field("AccessKeyId")?,
        secret_access_key: field("SecretAccessKey")?,
        session_token: Some(field("SessionToken")?),
        expires: Some(SystemTime::from(expires)),
    })
}

/// The inner text of the first `<tag>…</tag>` element (attributes allowed on the start tag).
fn element<'a>(xml: &'a str, tag: &str) -> Option<&'a str> {
    let open = format!("<{tag}");
    let mut from = 0;
    while let Some(at) = xml[from..].find(&open) {
        let start = from + at + open.len();
        let rest = &xml[start..];
        if rest.starts_with('>') || rest.starts_with(char::is_whitespace) {
            let body = start + rest.find('>')? + 1;
            let end = xml[body..].find(&format!("</{tag}>"))?;
            return Some(&xml[body..body + end]);
        }
        from = start;
    }
    None
}

/// An element's text with XML's entities decoded, trimmed.
fn xml_text(xml: &str, tag: &str) -> Option<String> {
    let raw = element(xml, tag)?;
    let text = raw
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", "\"")
        .replace("&apos;", "'")
        .replace("&#xA;", "\n")
        .replace("&amp;", "&");
    Some(text.trim().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn profile_files_parse_sections_comments_and_nested_blocks() {
        let text = "# top\n[default]\naws_access_key_id = AKIA1 \nregion=eu-west-1 ; inline\n\
                    [profile dev]\ns3 =\n  max_concurrent_requests = 10\nAWS_Secret_Access_Key = s=cret\n";
        let s = parse_ini(text);
        assert_eq!(s["default"]["aws_access_key_id"], "AKIA1");
        assert_eq!(s["default"]["region"], "eu-west-1");
        assert_eq!(s["profile dev"]["aws_secret_access_key"], "s=cret");
        assert!(!s["profile dev"].contains_key("max_concurrent_requests"));
    }

    #[test]
    fn an_sts_response_gives_temporary_credentials_with_their_expiry() {
        let xml = r#"<AssumeRoleWithWebIdentityResponse xmlns="https://sts.amazonaws.com/doc/2011-06-15/">
  <AssumeRoleWithWebIdentityResult>
    <Credentials>
      <SessionToken>tok&amp;en</SessionToken>
      <SecretAccessKey>secret</SecretAccessKey>
      <Expiration>2030-10-24T23:00:23Z</Expiration>
      <AccessKeyId>ASIA1</AccessKeyId>
    </Credentials>
  </AssumeRoleWithWebIdentityResult>
</AssumeRoleWithWebIdentityResponse>"#;
        let c = parse_assume_role_response(xml).unwrap();
        assert_eq!((c.access_key_id.as_str(), c.session_token.as_deref()), ("ASIA1", Some("tok&en")));
        let at = chrono::DateTime::parse_from_rfc3339("2030-10-24T23:00:23Z").unwrap();
        assert_eq!(c.expires, Some(SystemTime::from(at)));
        assert!(parse_assume_role_response("<ErrorResponse/>").unwrap_err().contains("Credentials"));
    }

    #[test]
    fn credentials_are_stale_within_the_refresh_margin() {
        let now = SystemTime::now();
        let at = |secs: u64| Credentials {
            access_key_id: "a".into(),
            secret_access_key: "s".into(),
            session_token: None,
            expires: Some(now + Duration::from_secs(secs)),
        };
        assert!(at(3600).fresh_at(now));
        assert!(!at(60).fresh_at(now));
        assert!(Credentials { expires: None, ..at(0) }.fresh_at(now));
        assert!(!format!("{:?}", at(1)).contains("\"s\""), "the secret is redacted");
    }
}
