//! A broker endpoint as it may be written out (errors, logs, failure messages): without the
//! credentials a URL can carry. An endpoint from the environment (`NATS_URL`, `DATABASE_URL`,
//! `AMQP_URL`) may hold a user and password or a token, and a storage connection string
//! (`AZURE_STORAGE_CONNECTION_STRING`) an account key or a SAS; they are never written out.

/// The parts of a storage connection string that are credentials.
const CONNECTION_STRING_SECRETS: [&str; 2] = ["accountkey", "sharedaccesssignature"];

/// `endpoint` without the user and password or token before its host
/// (`nats://user:secret@host:4222` is written `nats://host:4222`), or, for a connection string
/// (`Name=value;…`), without its `AccountKey` and `SharedAccessSignature` parts.
pub fn without_credentials(endpoint: &str) -> String {
    if let Some(shown) = connection_string_without_secrets(endpoint) {
        return shown;
    }
    let (scheme, rest) = endpoint.split_once("://").map_or(("", endpoint), |(scheme, rest)| (scheme, rest));
    let (authority, path) = rest.split_once('/').map_or((rest, None), |(authority, path)| (authority, Some(path)));
    let host = authority.rsplit_once('@').map_or(authority, |(_, host)| host);
    let scheme = if scheme.is_empty() { String::new() } else { format!("{scheme}://") };
    let path = path.map(|path| format!("/{path}")).unwrap_or_default();
    format!("{scheme}{host}{path}")
}

/// A connection string's parts but its secrets; `None` where `endpoint` is no connection string.
fn connection_string_without_secrets(endpoint: &str) -> Option<String> {
    if endpoint.contains("://") && !endpoint.contains(';') {
        return None;
    }
    let parts: Vec<(&str, &str)> = endpoint
        .split(';')
        .filter(|part| !part.trim().is_empty())
        .map(|part| part.split_once('='))
        .collect::<Option<_>>()?;
    let secret = |name: &str| CONNECTION_STRING_SECRETS.contains(&name.trim().to_ascii_lowercase().as_str());
    if !parts.iter().any(|(name, _)| secret(name)) {
        return None;
    }
    let shown: Vec<String> =
        parts.iter().filter(|(name, _)| !secret(name)).map(|(name, value)| format!("{name}={value}")).collect();
    Some(shown.join(";"))
}

#[cfg(test)]
mod tests {
    use super::without_credentials;

    #[test]
    fn a_connection_string_is_written_out_without_its_key_or_sas() {
        let text =
            "DefaultEndpointsProtocol=https;AccountName=acme;AccountKey=c2VjcmV0==;EndpointSuffix=core.windows.net";
        assert_eq!(
            without_credentials(text),
            "DefaultEndpointsProtocol=https;AccountName=acme;EndpointSuffix=core.windows.net"
        );
        let sas = "QueueEndpoint=https://acme.queue.core.windows.net/;SharedAccessSignature=sv=2025&sig=abc";
        assert_eq!(without_credentials(sas), "QueueEndpoint=https://acme.queue.core.windows.net/");
        assert_eq!(without_credentials("UseDevelopmentStorage=true"), "UseDevelopmentStorage=true");
    }

    #[test]
    fn an_endpoint_is_written_out_without_its_credentials() {
        assert_eq!(without_credentials("nats://user:secret@nats.example:4222"), "nats://nats.example:4222");
        assert_eq!(without_credentials("nats://token@127.0.0.1:4222"), "nats://127.0.0.1:4222");
        assert_eq!(without_credentials("postgres://app:pw@db:5432/queues"), "postgres://db:5432/queues");
        assert_eq!(without_credentials("user:secret@host:4222"), "host:4222");
    }

    #[test]
    fn an_endpoint_without_credentials_is_written_as_it_is() {
        assert_eq!(without_credentials("nats://127.0.0.1:4222"), "nats://127.0.0.1:4222");
        assert_eq!(without_credentials("127.0.0.1:9092"), "127.0.0.1:9092");
        assert_eq!(without_credentials("http://host:8085/path@x"), "http://host:8085/path@x");
    }
}
