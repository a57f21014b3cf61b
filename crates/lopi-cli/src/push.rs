//! Sending OTLP requests to a collector over OTLP/HTTP (protobuf): `POST
//! URL/v1development/profiles`, over TLS for an `https://` URL, with the headers a backend asks
//! for (its credentials); tried again a few times while the collector is away or says it is
//! busy, with what the collector said when it refuses.
use anyhow::{bail, Context, Result};
use lopi_trace::otlp::proto;
use prost::Message;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// How lopi reaches a collector or a backend's OTLP endpoint besides its URL.
#[derive(clap::Args, Clone, Debug, Default)]
pub(crate) struct ConnectArgs {
    /// A header of every request, `NAME: VALUE` (repeatable): a backend's credentials, such as
    /// `Authorization: Basic ...`.
    #[arg(long = "header", value_name = "NAME: VALUE", value_parser = header)]
    headers: Vec<(String, String)>,
    /// The certificates (PEM) an https:// endpoint's must chain to, instead of the usual
    /// public roots (Mozilla's, built in): for a collector with a certificate of its own.
    #[arg(long, value_name = "FILE")]
    cacert: Option<PathBuf>,
}

fn header(text: &str) -> Result<(String, String), String> {
    match text.split_once(':') {
        Some((name, value)) if !name.trim().is_empty() && !name.trim().contains(char::is_whitespace) => Ok((name.trim().to_string(), value.trim().to_string())),
        _ => Err(format!("{text:?} is not NAME: VALUE")),
    }
}

/// The OTLP/HTTP path of the profiles signal.
const PROFILES_PATH: &str = "/v1development/profiles";

/// Waits before each retry: four tries within about four seconds.
const RETRY_AFTER: [Duration; 3] = [Duration::from_millis(500), Duration::from_secs(1), Duration::from_secs(2)];

/// A collector's OTLP/HTTP profiles endpoint, with the connection kept between requests.
pub(crate) struct Pusher {
    agent: ureq::Agent,
    endpoint: String,
    headers: Vec<(String, String)>,
}

/// What the collector kept of a request.
pub(crate) struct Pushed {
    pub(crate) tries: usize,
    /// The collector's word on a partial success: profiles rejected, and why.
    pub(crate) warning: Option<String>,
}

impl Pusher {
    /// `url` is the collector's OTLP/HTTP address (`http://127.0.0.1:4318`, or `https://`;
    /// the profiles path goes after any path of its own), or the full endpoint, ending with
    /// the path.
    pub(crate) fn new(url: &str, connect: &ConnectArgs) -> Result<Pusher> {
        let Some(rest) = url.strip_prefix("http://").or_else(|| url.strip_prefix("https://")) else {
            bail!("{url}: the collector's address is a URL such as http://127.0.0.1:4318");
        };
        if rest.is_empty() || rest.starts_with('/') {
            bail!("{url}: no host");
        }
        let endpoint = match url.ends_with(PROFILES_PATH) {
            true => url.to_string(),
            false => format!("{}{PROFILES_PATH}", url.trim_end_matches('/')),
        };
        let mut tls = ureq::tls::TlsConfig::builder();
        if let Some(path) = &connect.cacert {
            tls = tls.root_certs(ureq::tls::RootCerts::new_with_certs(&certificates(path)?));
        }
        let agent = ureq::Agent::config_builder()
            .tls_config(tls.build())
            .timeout_connect(Some(Duration::from_secs(5)))
            .timeout_global(Some(Duration::from_secs(60)))
            // Refusals are read here, with the collector's reason.
            .http_status_as_error(false)
            .user_agent(concat!("lopi/", env!("CARGO_PKG_VERSION")))
            .build()
            .into();
        Ok(Pusher { agent, endpoint, headers: connect.headers.clone() })
    }

    pub(crate) fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// Posts one encoded `ExportProfilesServiceRequest`; retries while the collector cannot
    /// be reached or answers 429, 502, 503 or 504 (OTLP's retryable answers).
    pub(crate) fn send(&self, request: &[u8]) -> Result<Pushed> {
        let started = Instant::now();
        let mut tries = 0;
        loop {
            tries += 1;
            let why = match self.try_once(request) {
                Attempt::Done(warning) => return Ok(Pushed { tries, warning }),
                Attempt::Refused(why) => bail!("the collector at {} refused the profiles: {why}", self.endpoint),
                Attempt::Again(why) => why,
            };
            let Some(wait) = RETRY_AFTER.get(tries - 1) else {
                let spent = started.elapsed().as_secs_f64();
                bail!("no OTLP collector took the profiles at {} ({tries} tries in {spent:.1} s): {why}", self.endpoint);
            };
            std::thread::sleep(*wait);
        }
    }

    /// Posts the request once: what the collector did with it.
    pub(crate) fn try_once(&self, request: &[u8]) -> Attempt {
        let mut post = self.agent.post(&self.endpoint).header("Content-Type", "application/x-protobuf");
        for (name, value) in &self.headers {
            post = post.header(name, value);
        }
        let response = post.send(request);
        let mut response = match response {
            Ok(r) => r,
            Err(e @ (ureq::Error::BadUri(_) | ureq::Error::Http(_))) => return Attempt::Refused(e.to_string()),
            // A handshake that failed (a certificate not trusted) fails again however often
            // it is tried.
            Err(e) if is_tls_failure(&e) => return Attempt::Refused(format!("{e} (--cacert FILE trusts a collector's own certificate)")),
            Err(e) => return Attempt::Again(away(&e)),
        };
        let status = response.status().as_u16();
        let body = response.body_mut().with_config().limit(1 << 20).read_to_vec().unwrap_or_default();
        match status {
            200..=299 => Attempt::Done(partial_success(&body)),
            429 | 502 | 503 | 504 => Attempt::Again(format!("HTTP {status}{}", reason(&body))),
            404 => Attempt::Refused(format!(
                "HTTP 404{}: no profiles receiver at this path (the collector needs an OTLP receiver with the http protocol, a profiles pipeline, and --feature-gates=service.profilesSupport)",
                reason(&body)
            )),
            _ => Attempt::Refused(format!("HTTP {status}{}", reason(&body))),
        }
    }
}

pub(crate) enum Attempt {
    /// Taken, with the collector's warning if it kept only part.
    Done(Option<String>),
    /// Not taken, worth trying again later: why.
    Again(String),
    /// Refused for good: why.
    Refused(String),
}

/// The certificates of a PEM file.
fn certificates(path: &std::path::Path) -> Result<Vec<ureq::tls::Certificate<'static>>> {
    let pem = std::fs::read(path).with_context(|| format!("reading --cacert {}", path.display()))?;
    let mut certs = Vec::new();
    for item in ureq::tls::parse_pem(&pem) {
        if let ureq::tls::PemItem::Certificate(c) = item.with_context(|| format!("--cacert {}: not PEM", path.display()))? {
            certs.push(c);
        }
    }
    if certs.is_empty() {
        bail!("--cacert {}: no certificate in it", path.display());
    }
    Ok(certs)
}

/// TLS errors: ureq's own, and rustls's, which reach ureq as I/O errors of invalid data.
fn is_tls_failure(e: &ureq::Error) -> bool {
    match e {
        ureq::Error::Rustls(_) | ureq::Error::Tls(_) => true,
        ureq::Error::Io(io) => io.kind() == std::io::ErrorKind::InvalidData,
        _ => false,
    }
}

/// A transport error as people read it.
fn away(e: &ureq::Error) -> String {
    match e {
        ureq::Error::Io(io) if io.kind() == std::io::ErrorKind::ConnectionRefused => "connection refused: is the collector running there?".into(),
        ureq::Error::HostNotFound => "host not found".into(),
        ureq::Error::Timeout(_) => "no answer in time".into(),
        other => other.to_string(),
    }
}

/// `: why` from a refusal's body: a `google.rpc.Status` (OTLP/HTTP's protobuf error) or text.
fn reason(body: &[u8]) -> String {
    let message = match proto::Status::decode(body) {
        Ok(status) if !status.message.is_empty() => status.message,
        _ => String::from_utf8_lossy(body).trim().to_string(),
    };
    if message.is_empty() || message.contains('\0') {
        return String::new();
    }
    format!(": {}", message.lines().next().unwrap_or_default())
}

/// The collector's warning in an `ExportProfilesServiceResponse` that kept only part.
fn partial_success(body: &[u8]) -> Option<String> {
    let partial = proto::ExportProfilesServiceResponse::decode(body).ok()?.partial_success?;
    match (partial.rejected_profiles, partial.error_message.as_str()) {
        (0, "") => None,
        (0, message) => Some(message.to_string()),
        (n, message) => Some(format!("it rejected {n} profiles: {message}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_profiles_path_goes_after_the_address() {
        let endpoint = |url| Pusher::new(url, &ConnectArgs::default()).map(|p| p.endpoint().to_string()).map_err(|e| e.to_string());
        assert_eq!(endpoint("http://127.0.0.1:4318"), Ok("http://127.0.0.1:4318/v1development/profiles".into()));
        assert_eq!(endpoint("http://gw:80/otlp/"), Ok("http://gw:80/otlp/v1development/profiles".into()));
        assert_eq!(endpoint("http://c:4318/v1development/profiles"), Ok("http://c:4318/v1development/profiles".into()));
        assert_eq!(endpoint("https://c:4318"), Ok("https://c:4318/v1development/profiles".into()));
        assert!(endpoint("127.0.0.1:4318").is_err_and(|e| e.contains("http://127.0.0.1:4318")));
    }

    #[test]
    fn headers_are_name_colon_value() {
        assert_eq!(header("Authorization: Basic abc="), Ok(("Authorization".into(), "Basic abc=".into())));
        assert_eq!(header("X-Scope-OrgID:tenant-1"), Ok(("X-Scope-OrgID".into(), "tenant-1".into())));
        assert!(header("no colon").is_err());
        assert!(header(": value").is_err());
        assert!(header("two words: v").is_err());
    }

    #[test]
    fn a_refusal_says_why() {
        let status = proto::Status { code: 3, message: "unknown field\nmore".into() }.encode_to_vec();
        assert_eq!(reason(&status), ": unknown field");
        assert_eq!(reason(b"not found\n"), ": not found");
        assert_eq!(reason(b""), "");
        let partial = |rejected_profiles, error_message: &str| {
            let p = proto::ExportProfilesPartialSuccess { rejected_profiles, error_message: error_message.into() };
            proto::ExportProfilesServiceResponse { partial_success: Some(p) }.encode_to_vec()
        };
        assert_eq!(partial_success(&partial(2, "too old")), Some("it rejected 2 profiles: too old".into()));
        assert_eq!(partial_success(&partial(0, "")), None);
        assert_eq!(partial_success(&[]), None);
    }
}
