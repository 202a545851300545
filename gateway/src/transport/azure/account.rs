//! A storage account: its queue endpoint and shared key, read from a connection string, and the
//! policy that signs each request with an account SAS made from the key.
//!
//! Why a SAS: `azure_storage_queue` authenticates with an Entra ID token over HTTPS or with a SAS
//! in the URL, not with the account key. A SAS is what the key signs (the service's documented
//! account-SAS string), so the key stays in the process and Azurite, which takes no Entra token
//! over plain HTTP, accepts it as the service does.

use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use azure_core::credentials::Secret;
use azure_core::http::policies::{Policy, PolicyResult};
use azure_core::http::{Context, Request, Url};

use crate::error::{ChannelError, ErrorKind};
use crate::transport::kit;

/// Azurite's (and the Azure Storage Emulator's) well-known development account: its name and key
/// are published by Microsoft and grant nothing outside an emulator.
pub const DEVELOPMENT_ACCOUNT: (&str, &str) =
    ("devstoreaccount1", "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==");

/// The SAS service version: the newest the service and Azurite 3.37.0 both sign with.
const SAS_VERSION: &str = "2025-11-05";
/// How long a SAS holds, and how long before its end a new one is made.
const SAS_LIFETIME: Duration = Duration::from_secs(60 * 60);
const SAS_RENEWAL: Duration = Duration::from_secs(10 * 60);

/// A SAS as the query pairs a request carries.
type SasPairs = Vec<(&'static str, String)>;

/// A storage account: its name, its key (never written out: `Secret`'s `Debug` hides it) and the
/// URL its queues live under.
#[derive(Clone, Debug)]
pub struct AzureAccount {
    pub name: String,
    key: Secret,
    /// `https://<account>.queue.core.windows.net/`, or Azurite's `http://host:port/<account>/`:
    /// always ending in `/`, so a queue name joins onto it.
    pub queue_endpoint: Url,
}

impl AzureAccount {
    /// The development account on an Azurite queue service at `address` (`host:port`).
    pub fn development(address: &str) -> Result<AzureAccount, ChannelError> {
        let (name, key) = DEVELOPMENT_ACCOUNT;
        AzureAccount::new(name, key, &format!("http://{address}/{name}"))
    }

    fn new(name: &str, key: &str, queue_endpoint: &str) -> Result<AzureAccount, ChannelError> {
        let invalid = |why: String| kit::broker_error(queue_endpoint, "read the account", ErrorKind::Malformed, why);
        let mut endpoint = Url::parse(queue_endpoint).map_err(|e| invalid(format!("the queue endpoint: {e}")))?;
        if !endpoint.path().ends_with('/') {
            endpoint.set_path(&format!("{}/", endpoint.path()));
        }
        azure_core::base64::decode(key).map_err(|_| invalid("AccountKey is not base64".to_owned()))?;
        Ok(AzureAccount { name: name.to_owned(), key: Secret::new(key.to_owned()), queue_endpoint: endpoint })
    }

    /// Reads a storage connection string: `UseDevelopmentStorage=true` (Azurite on its default
    /// port), or `AccountName` and `AccountKey` with `QueueEndpoint`, or with
    /// `DefaultEndpointsProtocol` (default https) and `EndpointSuffix` (default
    /// core.windows.net). An error names the missing or unknown part, never the key.
    pub fn from_connection_string(text: &str) -> Result<AzureAccount, ChannelError> {
        let invalid = |why: String| {
            kit::broker_error("the storage connection string", "read the account", ErrorKind::Malformed, why)
        };
        let mut parts = std::collections::BTreeMap::new();
        for part in text.split(';').map(str::trim).filter(|part| !part.is_empty()) {
            let (name, value) = part
                .split_once('=')
                .ok_or_else(|| invalid("a part without '=' (parts are Name=value, separated by ';')".to_owned()))?;
            parts.insert(name.trim().to_ascii_lowercase(), value.trim().to_owned());
        }
        if parts.get("usedevelopmentstorage").is_some_and(|value| value.eq_ignore_ascii_case("true")) {
            return AzureAccount::development("127.0.0.1:10001");
        }
        let required = |name: &str| {
            parts.get(&name.to_ascii_lowercase()).map(String::as_str).ok_or_else(|| {
                invalid(format!("{name} is missing (a connection string needs AccountName and AccountKey)"))
            })
        };
        let (name, key) = (required("AccountName")?, required("AccountKey")?);
        let endpoint = match parts.get("queueendpoint") {
            Some(endpoint) => endpoint.clone(),
            None => {
                let protocol = parts.get("defaultendpointsprotocol").map_or("https", String::as_str);
                let suffix = parts.get("endpointsuffix").map_or("core.windows.net", String::as_str);
                format!("{protocol}://{name}.queue.{suffix}/")
            }
        };
        AzureAccount::new(name, key, &endpoint)
    }

    /// The URL of `queue`.
    pub(super) fn queue_url(&self, queue: &str) -> Url {
        self.queue_endpoint.join(queue).expect("a checked queue name joins onto the endpoint")
    }

    /// An account SAS for the queue service, every permission, over HTTP or HTTPS (Azurite serves
    /// plain HTTP), until `expiry`: the query pairs a request carries.
    fn sas(&self, expiry: SystemTime) -> Result<SasPairs, azure_core::Error> {
        let expiry = time::OffsetDateTime::from(expiry).replace_nanosecond(0).expect("0 is a nanosecond");
        let format = time::macros::format_description!("[year]-[month]-[day]T[hour]:[minute]:[second]Z");
        let expiry = expiry.format(&format).expect("a UTC instant formats");
        let (permissions, services, resource_types, protocol) = ("rwdlacup", "q", "sco", "https,http");
        // The account-SAS string of versions 2020-12-06 and later: no start, no IP range, no
        // encryption scope, and a closing newline.
        let signed =
            [&self.name, permissions, services, resource_types, "", &expiry, "", protocol, SAS_VERSION, "", ""]
                .join("\n");
        let signature = azure_core::hmac::hmac_sha256(&signed, &self.key)?;
        Ok(vec![
            ("sv", SAS_VERSION.to_owned()),
            ("ss", services.to_owned()),
            ("srt", resource_types.to_owned()),
            ("sp", permissions.to_owned()),
            ("se", expiry),
            ("spr", protocol.to_owned()),
            ("sig", signature),
        ])
    }
}

/// `text` with the value of every `sig=` query parameter replaced: a request's URL, as an HTTP
/// client's error prints it, carries the SAS signature, a credential.
pub(super) fn without_signature(text: &str) -> String {
    let mut shown = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find("sig=") {
        let value = at + "sig=".len();
        shown.push_str(&rest[..value]);
        shown.push_str("REDACTED");
        let end = rest[value..].find(|c: char| c == '&' || c == ')' || c == '"' || c.is_whitespace());
        rest = end.map_or("", |end| &rest[value + end..]);
    }
    shown.push_str(rest);
    shown
}

/// Signs each request with an account SAS, made again once the last one is within
/// `SAS_RENEWAL` of its end: a consumer that runs for days never holds an expired one.
#[derive(Debug)]
pub(super) struct SasPolicy {
    account: AzureAccount,
    current: Mutex<Option<(SystemTime, SasPairs)>>,
}

impl SasPolicy {
    pub(super) fn new(account: AzureAccount) -> Arc<SasPolicy> {
        Arc::new(SasPolicy { account, current: Mutex::new(None) })
    }

    fn pairs(&self) -> Result<SasPairs, azure_core::Error> {
        let mut current = self.current.lock().expect("the SAS lock is never poisoned");
        let now = SystemTime::now();
        match &*current {
            Some((expiry, pairs)) if now + SAS_RENEWAL < *expiry => Ok(pairs.clone()),
            _ => {
                let expiry = now + SAS_LIFETIME;
                let pairs = self.account.sas(expiry)?;
                *current = Some((expiry, pairs.clone()));
                Ok(pairs)
            }
        }
    }
}

#[async_trait]
impl Policy for SasPolicy {
    async fn send(&self, ctx: &Context, request: &mut Request, next: &[Arc<dyn Policy>]) -> PolicyResult {
        let pairs = self.pairs()?;
        {
            let mut query = request.url_mut().query_pairs_mut();
            for (name, value) in &pairs {
                query.append_pair(name, value);
            }
        }
        next[0].send(ctx, request, &next[1..]).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: &str = DEVELOPMENT_ACCOUNT.1;

    #[test]
    fn a_connection_string_gives_the_account_and_its_queue_endpoint() {
        let text = format!("DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;AccountKey={KEY};QueueEndpoint=http://127.0.0.1:10001/devstoreaccount1;");
        let account = AzureAccount::from_connection_string(&text).unwrap();
        assert_eq!(account.name, "devstoreaccount1");
        assert_eq!(account.queue_url("orders").as_str(), "http://127.0.0.1:10001/devstoreaccount1/orders");
        let cloud = AzureAccount::from_connection_string(&format!("AccountName=acme;AccountKey={KEY}")).unwrap();
        assert_eq!(cloud.queue_url("orders").as_str(), "https://acme.queue.core.windows.net/orders");
        let emulator = AzureAccount::from_connection_string("UseDevelopmentStorage=true").unwrap();
        assert_eq!(emulator.queue_endpoint.as_str(), "http://127.0.0.1:10001/devstoreaccount1/");
    }

    #[test]
    fn a_bad_connection_string_says_what_is_missing_and_never_shows_the_key() {
        let missing = AzureAccount::from_connection_string("AccountName=acme").unwrap_err();
        assert_eq!(missing.kind(), Some(ErrorKind::Malformed));
        assert!(missing.to_string().contains("AccountKey is missing"), "{missing}");
        let bad_key = AzureAccount::from_connection_string("AccountName=acme;AccountKey=not base64!").unwrap_err();
        assert!(bad_key.to_string().contains("AccountKey is not base64"), "{bad_key}");
        assert!(!bad_key.to_string().contains("not base64!"), "{bad_key}");
        let account = AzureAccount::from_connection_string(&format!("AccountName=acme;AccountKey={KEY}")).unwrap();
        assert!(!format!("{account:?}").contains(KEY), "{account:?}");
    }

    /// The signature of the service's documented account-SAS string for these fields, as Python's
    /// hmac computes it (the same layout Azurite 3.37.0 accepted in a hand-made request).
    #[test]
    fn the_sas_signs_the_account_sas_string() {
        let account = AzureAccount::development("127.0.0.1:10001").unwrap();
        let expiry = SystemTime::UNIX_EPOCH + Duration::from_secs(1_798_761_600); // 2027-01-01T00:00:00Z
        let pairs = account.sas(expiry).unwrap();
        let get = |name: &str| pairs.iter().find(|(n, _)| *n == name).map(|(_, v)| v.as_str());
        assert_eq!(get("se"), Some("2027-01-01T00:00:00Z"));
        assert_eq!(get("sv"), Some(SAS_VERSION));
        assert_eq!(get("sig"), Some("+ODy9Wlo4fezqXaeesrbT6Q51LZ0DlA+8AY+Eu1/9dg="));
    }

    #[test]
    fn the_signature_is_taken_out_of_error_texts() {
        let text = "error sending request for url (http://h/q/messages?sv=1&sig=abc%2Bdef&se=2) and sig=xyz";
        assert_eq!(
            without_signature(text),
            "error sending request for url (http://h/q/messages?sv=1&sig=REDACTED&se=2) and sig=REDACTED"
        );
        assert_eq!(without_signature("nothing here"), "nothing here");
    }
}
